"""ONNX Runtime's contrib int8 ops (com.microsoft QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QGemm) read as
their Q/DQ graphs (frontend/contrib_quantized.py): equal to ONNX Runtime's kernels within one
quantization step (its kernels round through their own fixed-point or float steps; the Q/DQ
reading is the specification's formula), fused by the int8 rules, and on native int8 kernels."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.frontend import import_onnx
from autofusion.frontend.contrib_quantized import read_contrib_quantized

RNG = np.random.default_rng(0)
MS = "com.microsoft"
SHAPE = [1, 8, 6, 6]


def _scalars(**values) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(v, np.float32 if isinstance(v, float) else np.uint8), k)
            for k, v in values.items()]


def contrib_model(node: onnx.NodeProto, inputs: dict[str, list], out_type=TensorProto.UINT8, inits=()):
    graph = helper.make_graph(
        [node], "contrib", [helper.make_tensor_value_info(k, TensorProto.UINT8, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [*_scalars(xs=0.05, xz=120, bs=0.03, bz=7, ys=0.08, yz=100), *inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _u8(shape):
    return RNG.integers(0, 256, shape).astype(np.uint8)


CASES = {
    "QLinearAdd": lambda: (contrib_model(helper.make_node("QLinearAdd", ["a", "xs", "xz", "b", "bs", "bz", "ys", "yz"],
                                                          ["y"], domain=MS), {"a": SHAPE, "b": SHAPE}),
                           {"a": _u8(SHAPE), "b": _u8(SHAPE)}),
    "QLinearMul": lambda: (contrib_model(helper.make_node("QLinearMul", ["a", "xs", "xz", "b", "bs", "bz", "ys", "yz"],
                                                          ["y"], domain=MS), {"a": SHAPE, "b": SHAPE}),
                           {"a": _u8(SHAPE), "b": _u8(SHAPE)}),
    "QLinearSigmoid": lambda: (contrib_model(helper.make_node("QLinearSigmoid", ["a", "xs", "xz", "ys", "yz"], ["y"],
                                                              domain=MS), {"a": SHAPE}), {"a": _u8(SHAPE)}),
    "QLinearLeakyRelu": lambda: (contrib_model(helper.make_node("QLinearLeakyRelu", ["a", "xs", "xz", "ys", "yz"],
                                                                ["y"], domain=MS, alpha=0.2), {"a": SHAPE}),
                                 {"a": _u8(SHAPE)}),
    "QLinearGlobalAveragePool": lambda: (contrib_model(helper.make_node(
        "QLinearGlobalAveragePool", ["a", "xs", "xz", "ys", "yz"], ["y"], domain=MS, channels_last=0),
        {"a": SHAPE}), {"a": _u8(SHAPE)}),
    "QLinearGlobalAveragePool-nhwc": lambda: (contrib_model(helper.make_node(
        "QLinearGlobalAveragePool", ["a", "xs", "xz", "ys", "yz"], ["y"], domain=MS, channels_last=1),
        {"a": [1, 6, 6, 8]}), {"a": _u8([1, 6, 6, 8])}),
    "QLinearAveragePool": lambda: (contrib_model(helper.make_node(
        "QLinearAveragePool", ["a", "xs", "xz", "ys", "yz"], ["y"], domain=MS, kernel_shape=[2, 2], strides=[2, 2]),
        {"a": SHAPE}), {"a": _u8(SHAPE)}),
    "QLinearConcat": lambda: (contrib_model(helper.make_node(
        "QLinearConcat", ["ys", "yz", "a", "xs", "xz", "b", "bs", "bz"], ["y"], domain=MS, axis=1),
        {"a": SHAPE, "b": SHAPE}), {"a": _u8(SHAPE), "b": _u8(SHAPE)}),
}


def qgemm(per_column: bool, quantized_output: bool):
    k, n = 16, 12
    b = RNG.integers(-127, 128, (n, k)).astype(np.int8)
    b_scale = RNG.uniform(0.01, 0.03, n if per_column else ()).astype(np.float32)
    c = RNG.integers(-500, 500, n).astype(np.int32)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(b_scale, "b_s"),
             numpy_helper.from_array(np.zeros(n if per_column else (), np.int8), "b_z"),
             numpy_helper.from_array(c, "C")]
    ins = ["a", "xs", "xz", "B", "b_s", "b_z", "C"] + (["ys", "yz"] if quantized_output else [])
    node = helper.make_node("QGemm", ins, ["y"], domain=MS, transB=1)
    model = contrib_model(node, {"a": [3, k]}, TensorProto.UINT8 if quantized_output else TensorProto.FLOAT, inits)
    return model, {"a": _u8([3, k])}


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _within_one_step(got, want, step: float | None):
    if step is None:   # a float output: the exact integer sum in float, scaled
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1 and (diff > 0).mean() <= 0.2, f"{diff.max()} steps, {(diff > 0).mean():.0%} apart"


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("level", [0, 2])
def test_a_contrib_int8_op_reads_as_its_qdq_graph(case, level):
    model, feeds = CASES[case]()
    graph = import_onnx(model, strict=True)   # no node left for ONNX Runtime
    assert not any(n.domain for n in graph.nodes)
    got = autofusion.compile(model, level=level)(**feeds)
    _within_one_step(got, _ort(model, feeds), 1.0)


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("quantized_output", [True, False])
def test_qgemm_reads_as_a_gemm_between_dequantize_and_quantize(per_column, quantized_output):
    model, feeds = qgemm(per_column, quantized_output)
    m = autofusion.compile(model)
    _within_one_step(m(**feeds), _ort(model, feeds), 1.0 if quantized_output else None)
    if quantized_output:
        assert "autofusion::QuantizedMatMul" in {n.op for n in m.graph.nodes}


def test_the_int8_rules_fuse_what_the_contrib_ops_read_as():
    model, _ = CASES["QLinearAdd"]()
    ops = {n.op for n in autofusion.compile(model).graph.nodes}
    assert ops == {"autofusion::QuantizedAdd"}


def test_a_per_column_qgemm_before_opset_13_is_left_to_onnx_runtime():
    model, _ = qgemm(per_column=True, quantized_output=True)
    model.opset_import[0].version = 11
    assert read_contrib_quantized(model) == 0 and model.graph.node[0].op_type == "QGemm"


def test_a_malformed_contrib_node_is_left_for_onnx_runtime_to_refuse():
    model, _ = CASES["QLinearConcat"]()
    del model.graph.node[0].attribute[:]   # no axis
    assert read_contrib_quantized(model) == 0 and model.graph.node[0].op_type == "QLinearConcat"
    model, _ = CASES["QLinearAdd"]()
    del model.graph.node[0].input[5:]   # b's zero point and the output's scale and zero point gone
    assert read_contrib_quantized(model) == 0
