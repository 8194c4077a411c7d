"""precision="int8" (backend/int8.py, pipeline.py): what it computes in here, the calibration
ranges, the int8 guard, and int8 compiles of the CI architectures against fp32.

Bounds: an int8 compile of the CI architectures, calibrated on the inputs it then runs, is within
3e-2 of the fp32 compile (the largest |Δ| over the output's largest magnitude: each quantized
tensor rounds to 1/255 of its range, over a few layers); the guard's per-product tolerance is 5e-2
relative RMS by default.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import int8 as I
from autofusion.backend import native
from autofusion.backend import precision as P
from autofusion.cli import main
from autofusion.errors import AutofusionError

from ..models.architectures import ARCHITECTURES

INT8_BOUND = 3e-2
runs_int8 = pytest.mark.skipif(
    native.unavailable() is not None or not P.has_vnni() or os.environ.get("AUTOFUSION_BACKEND") == "torch",
    reason="needs the native backend on a CPU with VNNI (avx512_vnni, avx_vnni or amx_int8)")


# ---- what int8 computes in here ------------------------------------------------------------------

@pytest.mark.parametrize("vnni, bf16, compute, int8, note", [
    (True, True, "bf16", True, ""),
    (True, False, "fp32", True, "no native bf16"),
    (False, True, "bf16", False, "no VNNI"),
])
def test_resolve_says_what_int8_computes_here(monkeypatch, vnni, bf16, compute, int8, note):
    monkeypatch.setattr(P, "has_vnni", lambda: vnni)
    monkeypatch.setattr(P, "cpu_flags", lambda: frozenset({"avx512_bf16"} if bf16 else ()))
    got = P.resolve("int8")
    assert (got.requested, got.compute, got.int8) == ("int8", compute, int8)
    assert note in got.note and (not note) == (not got.note)


@runs_int8
def test_random_calibration_says_to_give_real_inputs():
    model, feeds = ARCHITECTURES["mobilenet_block"]()
    assert "give real ones" in autofusion.compile(model, precision="int8").report.text()
    assert "give real ones" not in autofusion.compile(model, precision="int8", calibration=feeds).report.text()


def test_int8_on_the_torch_backend_runs_fp32_and_says_so():
    model, feeds = ARCHITECTURES["mobilenet_block"]()
    m = autofusion.compile(model, precision="int8", backend="torch")
    assert m.report.precision["compute"] == "fp32" and "int8" not in m.report.precision
    assert "needs the native backend" in m.report.text()
    np.testing.assert_allclose(m(**feeds), autofusion.compile(model, backend="torch")(**feeds), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(native.unavailable() is not None, reason="needs the native backend")
def test_a_cpu_without_vnni_quantizes_nothing_and_says_so(monkeypatch):
    monkeypatch.setattr(P, "has_vnni", lambda: False)
    model, feeds = ARCHITECTURES["mobilenet_block"]()
    m = autofusion.compile(model, precision="int8", backend="auto")
    assert "int8" not in m.report.precision and "no VNNI" in m.report.text()
    assert not any(n.op_type.startswith("Quantized") for n in m.graph.nodes)


def test_bad_calibration_controls_are_clear_errors():
    model = ARCHITECTURES["mobilenet_block"]()[0]
    with pytest.raises(AutofusionError, match="calibration_method 'entropy': choose one of minmax, percentile"):
        I.resolve_method("entropy")
    if P.resolve("int8").int8 and native.unavailable() is None:
        with pytest.raises(AutofusionError, match="an empty list of input sets"):
            autofusion.compile(model, precision="int8", calibration=[], backend="auto")


# ---- ranges -----------------------------------------------------------------------------------------

def test_ranges_widen_over_every_set_and_percentile_ignores_a_few_outliers():
    a = np.linspace(-1, 1, 100_001).astype(np.float32)
    b = a * 2
    b[7] = 1000.0
    found: dict = {}
    for values in ({"t": a}, {"t": b}):
        I.widen(found, values, {"t"}, "minmax")
    assert found == {"t": (-2.0, 1000.0)}
    found = {}
    for values in ({"t": a}, {"t": b}):
        I.widen(found, values, {"t"}, "percentile")
    low, high = found["t"]
    assert -2.0 < low < -1.99 and 1.99 < high < 2.0
    found = {}
    I.widen(found, {"t": np.array([np.nan, np.inf], np.float32)}, {"t"}, "minmax")
    assert found == {}   # nothing finite: no range (quantized as zeros, and the guard judges it)


def test_relative_rms():
    ref = np.array([3.0, -4.0])
    assert I.relative_rms(ref, ref) == 0.0
    assert I.relative_rms(ref + [0.5, 0.5], ref) == pytest.approx(0.5 / np.sqrt(12.5))
    assert I.relative_rms(np.ones(2), np.zeros(2)) == 1.0


# ---- the CI architectures in int8 -----------------------------------------------------------------

@runs_int8
@pytest.mark.parametrize("name", ["resnet_stack", "mobilenet_block", "bert_layer"])
def test_ci_architectures_in_int8_stay_near_fp32(name):
    model, feeds = ARCHITECTURES[name]()
    fp32 = autofusion.compile(model)
    m = autofusion.compile(model, precision="int8", calibration=feeds)
    assert P.relative_error(m(**feeds), fp32(**feeds)) < INT8_BOUND
    p = m.report.precision
    q = p["int8"]
    assert q["checked"] and not any(c["kept_float"] for c in q["checked"])
    assert q["calibration"] == "given" and q["sets"] == 1 and q["tensors"] > 0
    assert sum(v == "int8" for v in p["nodes"].values()) >= len(q["checked"])
    assert all(e < INT8_BOUND for e in p["end_to_end"].values())
    products = [n for n in m.graph.nodes if n.op_type in ("QuantizedConv", "QuantizedMatMul")]
    assert len(products) == len(q["checked"])
    assert all(m.plan.decisions[n].impl.name != "torch" for n in products)   # int8 kernels, natively
    assert "int8 guard" in m.report.text()


@runs_int8
def test_several_calibration_sets_and_the_percentile_method():
    model, feeds = ARCHITECTURES["resnet_stack"]()
    other = {k: v * 1.5 for k, v in feeds.items()}
    m = autofusion.compile(model, precision="int8", calibration=[feeds, other], calibration_method="percentile")
    q = m.report.precision["int8"]
    assert (q["sets"], q["method"]) == (2, "percentile")
    assert P.relative_error(m(**feeds), autofusion.compile(model)(**feeds)) < INT8_BOUND


# ---- a planted product the guard must keep in float ---------------------------------------------------

def offset_difference_model() -> tuple:
    """A convolution whose weights sum to zero per output channel (a difference filter) over an
    input 100 ± 0.01: its output is the 0.01 variation, which the input's 256 steps of 0.39 erase;
    a second, ordinary convolution after it is fine in int8."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    w1 -= w1.mean(axis=(1, 2, 3), keepdims=True)
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    graph = helper.make_graph([
        helper.make_node("Conv", ["x", "w1"], ["d"], name="difference"),
        helper.make_node("Relu", ["d"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["c"], pads=[1, 1, 1, 1], name="ordinary"),
        helper.make_node("GlobalAveragePool", ["c"], ["y"]),
    ], "planted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = (100 + 0.01 * rng.standard_normal((1, 8, 16, 16))).astype(np.float32)
    return model, {"x": x}


@runs_int8
def test_the_guard_keeps_a_sensitive_product_in_float():
    model, feeds = offset_difference_model()
    fp32 = autofusion.compile(model)(**feeds)
    m = autofusion.compile(model, precision="int8", calibration=feeds)
    checks = {c["node"]: c for c in m.report.precision["int8"]["checked"]}
    assert checks["difference"]["kept_float"] and checks["difference"]["error"] > 0.5
    assert not checks["ordinary"]["kept_float"]
    assert [n for n, v in m.report.precision["nodes"].items() if v == "int8"] == ["ordinary_1"]
    assert "Conv 'difference': int8 error" in m.report.text()
    assert P.relative_error(m(**feeds), fp32) < INT8_BOUND
    # without the guard (any error accepted) the difference filter's output is lost
    unguarded = autofusion.compile(model, precision="int8", calibration=feeds, tolerance=1e6)
    assert not any(c["kept_float"] for c in unguarded.report.precision["int8"]["checked"])
    assert P.relative_error(unguarded(**feeds), fp32) > 0.3


@runs_int8
def test_the_command_line_compiles_in_int8(capsys, tmp_path):
    model, feeds = ARCHITECTURES["mobilenet_block"]()
    path, a, b = tmp_path / "m.onnx", tmp_path / "a.npz", tmp_path / "b.npz"
    path.write_bytes(model.SerializeToString())
    np.savez(a, **feeds)
    np.savez(b, **{k: -v for k, v in feeds.items()})
    assert main(["compile", str(path), "--precision", "int8", "--calibrate", str(a), str(b),
                 "--calibration-method", "percentile"]) == 0
    text = capsys.readouterr().out
    assert "int8 asked" in text and "percentile ranges over 2 given calibration input set(s)" in text


@runs_int8
@pytest.mark.skipif(not P.has_bf16(), reason="needs bf16 dot products for the float product")
def test_a_bf16_product_the_int8_guard_kept_in_float_is_quantized_after():
    """A tolerance between the two guards' errors: the difference filter is refused int8 but
    allowed bf16; its bf16 result feeds the next int8 convolution's QuantizeLinear."""
    model, feeds = offset_difference_model()
    m = autofusion.compile(model, precision="int8", calibration=feeds, tolerance=10.0)
    nodes = m.report.precision["nodes"]
    assert sorted(nodes.values()).count("bf16") == 1 and "int8" in nodes.values()
    assert np.isfinite(m(**feeds)).all()


@runs_int8
def test_a_torch_module_compiles_in_int8():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                 torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()
    x = torch.randn(1, 3, 32, 32)
    m = autofusion.compile(module, example_inputs=(x,), precision="int8", calibration={"input_0": x.numpy()})
    q = m.report.precision["int8"]
    assert len(q["checked"]) == 3   # the two convolutions and the Linear (int8 in, the float output out)
    assert q["folded"] == 1 and "1 BatchNormalization(s) folded" in m.report.text()
    with torch.no_grad():
        want = module(x)
    assert P.relative_error(m(x).numpy(), want.numpy()) < INT8_BOUND
