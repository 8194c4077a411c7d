"""The float functions scalar.h computes or calls (e^x, e^x - 1, tanh, and the activations built on
them) against float64 over the whole float range: magnitudes from 1e-30 to past the overflow
point, both signs, denormal results, NaN and infinities."""
from __future__ import annotations

import numpy as np
import pytest

import autofusion
from autofusion.backend.native import unavailable
from autofusion.ir import FUSED_DOMAIN, DType, Graph, GraphBuilder
from autofusion.ir.activations import activation_attrs

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"no native code: {unavailable()}")

ULP = 2.0 ** -23          # float32's spacing at 1, relative
TINY = 2.0 ** -149        # the smallest denormal: the spacing below 2^-126


def sweep() -> np.ndarray:
    mags = np.geomspace(1e-30, 120, 40_000)
    x = np.concatenate([mags, -mags, [0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, -87.33,
                                      -103.9, -104.0]])
    return x.astype(np.float32)


def run_region(ops: list[str]) -> tuple[np.ndarray, dict]:
    x = sweep()
    body = Graph("math", {"": 21})
    xv = body.add_input("x", x.shape, DType.FLOAT)
    op = GraphBuilder(body)
    body.outputs = [getattr(op, name)(xv, **attrs) for name, attrs in ops]
    for v in body.outputs:
        v.shape, v.dtype = x.shape, DType.FLOAT
    outer = Graph("m", {"": 21})
    outs = GraphBuilder(outer).Region(outer.add_input("x", x.shape, DType.FLOAT), _domain=FUSED_DOMAIN,
                                      _outputs=len(ops), body=body, kernel="fused_math")
    outer.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for v in outer.outputs:
        v.shape, v.dtype = x.shape, DType.FLOAT
    model = autofusion.compile(outer, level=0, backend="native")
    assert "generated" in str(model.plan)
    got = model.run({"x": x})
    return x, [got[v.name] for v in outer.outputs]


def within(got: np.ndarray, want: np.ndarray, ulps: float, tiny: float = TINY) -> None:
    want32 = want.astype(np.float32)   # where float32 overflows or flushes, so must we
    same_special = (np.isnan(got) & np.isnan(want32)) | (got == want32)
    err = np.abs(got.astype(np.float64) - want)
    ok = same_special | (err <= ulps * ULP * np.abs(want) + tiny)
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, f"{bad.size} values off, first at x index {bad[:3]}: got {got[bad[:3]]}, want {want[bad[:3]]}"


def test_exp_tanh_and_expm1_forms_are_within_a_few_ulp_everywhere(lanes):
    x, (exp, tanh, sigmoid, elu, silu) = run_region([("Exp", {}), ("Tanh", {}), ("Sigmoid", {}),
                                                     ("Elu", {"alpha": 1.0}),
                                                     ("Activation", activation_attrs("SiLU"))])
    d = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        within(exp, np.exp(d), 2)
        within(tanh, np.tanh(d), 4)
        # 1 / (1 + e^-x) is 0 once e^-x overflows: below x = -88.7 the answer is a denormal
        within(sigmoid, 1 / (1 + np.exp(-d)), 4, tiny=2.0 ** -126)
        within(elu, np.where(d < 0, np.expm1(d), d), 4)   # e^x - 1 without cancellation near 0
        # x / (1 + e^-x) is -0 once e^-x overflows (below -88.7, |x·e^x| < 3e-37)
        within(silu, d / (1 + np.exp(-d)), 4, tiny=2.0 ** -120)
