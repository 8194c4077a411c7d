"""Reduced precision: bf16 and fp16 compiles, the precision guard, fp16 ONNX files.

Bounds: a bf16 compile of the CI architectures is within 3e-2 of the fp32 compile (max |Δ| over
the output's largest magnitude; bf16 keeps 8 bits of mantissa, each rounding up to 0.4%, over a
few layers); the guard's per-node tolerance is 2e-2 by default. fp16 files: 2e-2 of ONNX
Runtime's fp16 result (fp16 keeps 11 bits; ONNX Runtime rounds to fp16 between ops, we do not).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import lower, native
from autofusion.backend import precision as P
from autofusion.errors import AutofusionError
from autofusion.frontend import import_onnx
from autofusion.fusion import optimize
from autofusion.ir import verify

from ..models.architectures import ARCHITECTURES

BF16_BOUND = 3e-2
FP16_BOUND = 2e-2
NATIVE_BF16 = native.unavailable() is None and P.has_bf16()
runs_native = pytest.mark.skipif(
    not NATIVE_BF16 or __import__("os").environ.get("AUTOFUSION_BACKEND") == "torch",
    reason="needs the native backend on a CPU with bf16 dot products (avx512_bf16 or AMX)")


def rel(a, b) -> float:
    return P.relative_error(a, b)


# ---- what a precision computes in here -------------------------------------------------------

@pytest.mark.parametrize("flags, asked, compute, note", [
    ({"avx512_bf16"}, "bf16", "bf16", ""),
    ({"amx_bf16"}, "bf16", "bf16", ""),
    (set(), "bf16", "fp32", "no native bf16"),
    ({"avx512_bf16"}, "fp16", "bf16", "no fp16 arithmetic"),
    (set(), "fp16", "fp32", "no native bf16"),
    (set(), "fp32", "fp32", ""),
])
def test_resolve_says_what_this_cpu_computes(monkeypatch, flags, asked, compute, note):
    monkeypatch.setattr(P, "cpu_flags", lambda: frozenset(flags))
    got = P.resolve(asked)
    assert (got.requested, got.compute) == (asked, compute)
    assert note in got.note and (not note) == (not got.note)


def test_resolve_without_native_code_runs_fp32_and_says_so():
    got = P.resolve("bf16", native=False)
    assert got.compute == "fp32" and "native backend" in got.note


def test_unknown_precision_is_an_error(monkeypatch):
    with pytest.raises(AutofusionError, match="choose one of fp32, bf16, fp16, int8"):
        P.resolve("int4")
    monkeypatch.setenv("AUTOFUSION_PRECISION", "fp8")
    with pytest.raises(AutofusionError, match="AUTOFUSION_PRECISION='fp8'"):
        autofusion.compile(ARCHITECTURES["mobilenet_block"]()[0])


@pytest.mark.skipif(native.unavailable() is not None, reason="needs the native backend")
def test_a_cpu_without_bf16_compiles_fp32_and_the_report_says_so(monkeypatch):
    monkeypatch.setattr(P, "cpu_flags", lambda: frozenset())
    model, feeds = ARCHITECTURES["mobilenet_block"]()
    m = autofusion.compile(model, precision="bf16", backend="auto")
    assert all(d.precision == "fp32" for d in m.plan.decisions.values())
    assert "no native bf16" in m.report.text()
    np.testing.assert_allclose(m(**feeds), autofusion.compile(model)(**feeds), rtol=1e-5, atol=1e-6)


def test_bf16_on_the_torch_backend_runs_fp32_and_says_so():
    model = ARCHITECTURES["mobilenet_block"]()[0]
    m = autofusion.compile(model, precision="bf16", backend="torch")
    assert m.report.precision["compute"] == "fp32"
    assert "needs the native backend" in m.report.text()


# ---- bf16 and fp16 compiles of the CI architectures ---------------------------------------------

@runs_native
@pytest.mark.parametrize("name", ["resnet_stack", "mobilenet_block", "bert_layer"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_ci_architectures_in_reduced_precision_stay_near_fp32(name, precision):
    model, feeds = ARCHITECTURES[name]()
    fp32 = autofusion.compile(model)
    low = autofusion.compile(model, precision=precision)
    assert rel(low(**feeds), fp32(**feeds)) < BF16_BOUND
    p = low.report.precision
    assert p["compute"] == "bf16"
    assert p["checked"] and not any(c["kept_fp32"] for c in p["checked"])
    assert all(e < BF16_BOUND for e in p["end_to_end"].values())
    assert "bf16" in p["nodes"].values()
    assert set(p["nodes"]) == {n.name for n in low.graph.nodes}   # every node's precision
    assert "Precision guard" in low.report.text()
    if precision == "fp16":
        assert "no fp16 arithmetic" in p["note"] or "no fp16 kernels" in p["note"]


@runs_native
def test_convolutions_are_emitted_in_bf16_and_the_plan_says_so():
    model = ARCHITECTURES["mobilenet_block"]()[0]
    m = autofusion.compile(model, precision="bf16")
    convs = [n for n in m.graph.nodes if "Conv" in n.op_type]
    assert convs and all(m.plan.decisions[n].precision == "bf16" for n in convs)
    for n in convs:
        assert f'p.node("{n.name}", Precision::BF16);' in m.native_source
    assert " in bf16" in str(m.plan)
    # memory-bound steps keep fp32 arithmetic: no Precision on them
    assert not any(m.plan.decisions[n].precision == "bf16" for n in m.graph.nodes
                   if not m.plan.decisions[n].impl.reduced)


def test_the_guard_changes_nothing_at_fp32():
    model = ARCHITECTURES["mobilenet_block"]()[0]
    m = autofusion.compile(model)
    assert m.guard is None and "checked" not in m.report.precision
    assert set(m.report.precision["nodes"].values()) == {"fp32"}
    assert "Precision:" not in m.report.text()
    g = import_onnx(model)
    optimize(g, 2)
    plan = lower(g, "auto", native.unavailable())
    values = P.propagate(g, P.random_feeds(g))
    assert P.guard(g, plan, values, P.TOLERANCE, "random").checked == []


# ---- planted fusions the guard must catch ------------------------------------------------------

def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "planted", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def long_cancelling_reduction() -> onnx.ModelProto:
    """y = (100 + x/2)·W over 4096 terms, each column of W half +1 and half -1: the large
    offset cancels, and what is left is smaller than bf16's rounding of the offset adds up to
    (fp32 is still good to 1e-4 here)."""
    k = 4096
    rng = np.random.default_rng(0)
    w = np.stack([rng.permutation(np.repeat(np.float32([1, -1]), k // 2)) for _ in range(8)], 1)
    return _model(
        [helper.make_node("Mul", ["x", "half"], ["small"]),
         helper.make_node("Add", ["small", "hundred"], ["shifted"]),
         helper.make_node("MatMul", ["shifted", "W"], ["y"], name="long_reduction")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.float32(0.5), "half"),
         numpy_helper.from_array(np.float32(100.0), "hundred")])


def sharp_attention() -> onnx.ModelProto:
    """softmax(100q·kᵀ/√d)·v: scores in the hundreds, where bf16's rounding of q would move them by
    more than one, and the softmax would turn that into a different answer."""
    shape = [1, 2, 16, 32]
    return _model(
        [helper.make_node("Mul", ["q", "hundred"], ["q100"]),
         helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["q100", "kt"], ["qk"]),
         helper.make_node("Div", ["qk", "sqrt_d"], ["scaled"]),
         helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "v"], ["y"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.float32(100.0), "hundred"),
         numpy_helper.from_array(np.float32(np.sqrt(32)), "sqrt_d")])


def cancelling_attention() -> onnx.ModelProto:
    """softmax(q·kᵀ/100)·(v + ±300): nearly even weights over values of ±300 that cancel, so the
    output is v's mean, of order 0.3, and bf16's rounding of each ±300 (up to 1) survives it."""
    shape = [1, 2, 16, 32]
    signs = np.where(np.arange(16) % 2 == 0, 300.0, -300.0).astype(np.float32).reshape(16, 1)
    return _model(
        [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["q", "kt"], ["qk"]),
         helper.make_node("Div", ["qk", "hundred"], ["scaled"]),
         helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
         helper.make_node("Add", ["v", "signs"], ["far"]),
         helper.make_node("MatMul", ["p", "far"], ["y"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.float32(100.0), "hundred"),
         numpy_helper.from_array(signs, "signs")])


@runs_native
def test_the_guard_checks_a_fusion_with_an_input_left_out():
    """A residual convolution without a bias (inputs x, w, none, residual): its decomposition
    reads in0, in1 and in3, and the guard feeds each its own array."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype(np.float32), "w")
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "r"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8]),
                    helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 16, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], [w])
    m = autofusion.compile(model, precision="bf16")
    (conv,) = m.graph.nodes
    assert [v is None for v in conv.inputs] == [False, False, True, False]
    (checked,) = m.report.precision["checked"]
    assert checked["error_fp32"] < 1e-6 and checked["error_reduced"] < P.TOLERANCE


@runs_native
@pytest.mark.parametrize("build, op", [(long_cancelling_reduction, "FusedMatMul"),
                                       (cancelling_attention, "Attention"),
                                       (sharp_attention, "Attention")])
def test_the_guard_keeps_a_fusion_that_loses_accuracy_in_fp32(build, op):
    model = build()
    m = autofusion.compile(model, precision="bf16")
    kept = [c for c in m.report.precision["checked"] if c["kept_fp32"]]
    assert [c["op"] for c in kept] == [op]
    assert kept[0]["error_reduced"] > P.TOLERANCE > P.TOLERANCE / 10 > kept[0]["error_fp32"]
    node = next(n for n in m.graph.nodes if n.name == kept[0]["node"])
    assert m.plan.decisions[node].precision == "fp32"
    assert m.report.precision["nodes"][node.name] == "fp32"
    text = m.report.text()
    assert "1 kept in fp32" in text and f"{node.name!r}: bf16 error" in text
    feeds = P.random_feeds(m.graph, seed=1)
    assert rel(m.run(feeds)["y"], autofusion.compile(model).run(feeds)["y"]) < 1e-3


@runs_native
def test_a_looser_tolerance_lets_the_node_run_in_bf16():
    m = autofusion.compile(long_cancelling_reduction(), precision="bf16", tolerance=1e3)
    assert not any(c["kept_fp32"] for c in m.report.precision["checked"])
    assert "bf16" in m.report.precision["nodes"].values()


@runs_native
def test_calibration_inputs_decide(tmp_path):
    """With x = 0 the reduction's operand is exactly 100, a bf16 number: nothing to keep."""
    zeros = {"x": np.zeros((1, 4096), np.float32)}
    np.savez(tmp_path / "calib.npz", **zeros)
    for calibration in (zeros, tmp_path / "calib.npz"):
        m = autofusion.compile(long_cancelling_reduction(), precision="bf16", calibration=calibration)
        p = m.report.precision
        assert p["calibration"] == "given" and not any(c["kept_fp32"] for c in p["checked"])


@runs_native
def test_an_output_whose_shape_the_values_decide_is_reported_not_comparable():
    """y = x·I, then the indices where y > 1.0005: on x = 1.001 fp32 finds all four, bf16 (x
    rounded to 1) none; the outputs' shapes differ, and the report says so instead of failing."""
    model = _model(
        [helper.make_node("MatMul", ["x", "I"], ["y"], name="product"),
         helper.make_node("Greater", ["y", "bar"], ["above"]),
         helper.make_node("NonZero", ["above"], ["where"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("where", TensorProto.INT64, [2, None])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "I"),
         numpy_helper.from_array(np.float32(1.0005), "bar")])
    feeds = {"x": np.full((1, 4), 1.001, np.float32)}
    m = autofusion.compile(model, precision="bf16", calibration=feeds)
    assert m.plan.decisions[next(n for n in m.graph.nodes if "MatMul" in n.op_type)].precision == "bf16"
    assert m.report.precision["end_to_end"] == {"where": "shape [2, 0], fp32's [2, 4]"}
    assert "where not comparable (shape [2, 0], fp32's [2, 4])" in m.report.text()


def test_bad_calibration_inputs_are_clear_errors(tmp_path):
    graph = import_onnx(long_cancelling_reduction())
    with pytest.raises(AutofusionError, match=r"calibration inputs lack \['x'\]"):
        P.calibration_feeds(graph, {"y": 1})
    (tmp_path / "bad.npz").write_text("not an npz")
    with pytest.raises(AutofusionError, match="cannot read calibration inputs"):
        P.calibration_feeds(graph, tmp_path / "bad.npz")


def test_bf16_emulation_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 256.0 + 1.0], np.float32)
    np.testing.assert_array_equal(P.to_bf16(x), [1.0, 1.0, 1.0 + 2 ** -6, 256.0])


# ---- fp16 ONNX files ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["resnet_stack", "mobilenet_block"])   # the converter breaks
@pytest.mark.parametrize("keep_io_types", [False, True])                # bert_layer's Casts
@pytest.mark.parametrize("level", [0, 2])
def test_fp16_onnx_files_run_equal_to_onnxruntime(name, keep_io_types, level):
    from onnxconverter_common import float16
    model, feeds = ARCHITECTURES[name]()
    half = float16.convert_float_to_float16(model, keep_io_types=keep_io_types)
    if not keep_io_types:
        feeds = {k: v.astype(np.float16) for k, v in feeds.items()}
    want = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    m = autofusion.compile(half, level=level)
    got = m.run(feeds)["output"]
    assert got.dtype == want.dtype
    assert rel(got.astype(np.float32), want.astype(np.float32)) < FP16_BOUND
    if level == 2:   # widened to fp32 inside: fused like the fp32 model
        assert m.report.passes["fp16 values computed in fp32"] > 0
        assert any(n.op_type == "FusedConv" for n in m.graph.nodes)
        verify(m.graph)
