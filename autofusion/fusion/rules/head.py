"""The classifier head of a conv network: global average pool, flatten, fully connected.

    PoolGemm(x, W, B) = Gemm(Flatten(GlobalAveragePool(x)), W, B)

Exporters write the pool as GlobalAveragePool (adaptive_avg_pool2d(x, 1)) or as a ReduceMean over
the spatial axes (x.mean((2, 3)), which needs no Flatten when it drops the axes). The kernel
averages and runs one GEMM with the weight pre-transposed and alpha/beta folded in at build time.
Level 1: an adjacent chain (the original's "Conv+Pool+FC head"), and it must claim the Gemm before
the matmul rules do.
"""
from __future__ import annotations

from ...ir import Node
from ..pattern import Match, attr_value
from ..rule import Rule


def pool_flatten_gemm(op, x, w, c=None):
    return op.Gemm(op.Flatten(op.GlobalAveragePool(x), _name="flatten"), w, c, _name="gemm")


def mean_flatten_gemm(op, x, w, axes=None, c=None):   # axes: an input from opset 18, else an attribute
    mean = op.ReduceMean(x, axes, keepdims=1, _name="mean")
    return op.Gemm(op.Flatten(mean, _name="flatten"), w, c, _name="gemm")


def mean_gemm(op, x, w, axes=None, c=None):
    return op.Gemm(op.ReduceMean(x, axes, keepdims=0, _name="mean"), w, c, _name="gemm")


def pool_gemm_replace(op, m: Match):
    gemm = m.node("gemm")
    return op.PoolGemm(m.x, m.w, m.c, **{k: gemm.attrs[k] for k in ("alpha", "beta", "transB")
                                          if k in gemm.attrs})


def check_head(m: Match) -> str | None:
    gemm = m.node("gemm")
    if attr_value(gemm, "transA"):
        return f"Gemm {gemm.name!r}: transA=1, the pooled features must be its rows"
    if m.has("flatten") and attr_value(m.node("flatten"), "axis") != 1:
        flatten = m.node("flatten")
        return f"Flatten {flatten.name!r}: axis={attr_value(flatten, 'axis')}, rule needs 1"
    return m.has("mean") and mean_problem(m.node("mean"), m.x) or None


def mean_problem(mean: Node, x) -> str | None:
    """The ReduceMean must average exactly the spatial axes (2, 3, …) of x."""
    where = f"ReduceMean {mean.name!r}"
    if x.rank is None or x.rank < 3:
        return f"{where}: input rank {x.rank}, rule needs [N, C, spatial…]"
    axes_input = mean.input(1)
    if axes_input is not None and axes_input.const is None:
        return f"{where}: axes are computed at run time"
    axes = (axes_input.const.tolist() if axes_input is not None else attr_value(mean, "axes")) or []
    axes = sorted(a % x.rank for a in axes)
    if axes != list(range(2, x.rank)):
        return f"{where}: axes={axes or 'all'}, rule needs the spatial axes {list(range(2, x.rank))}"
    return None


RULES = [
    Rule("PoolGemmFusionOp", 1,
         "GlobalAveragePool/ReduceMean + Flatten + Gemm → PoolGemm: the classifier head, one kernel",
         [pool_flatten_gemm, mean_flatten_gemm, mean_gemm], pool_gemm_replace, check_head),
]
