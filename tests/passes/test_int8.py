"""precision="int8"'s rewrite (passes/int8.py): which nodes and tensors it quantizes, the Q/DQ
graph it writes, and that the int8 rules fuse that graph into int8 ops."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from autofusion.backend.executor import evaluate_node
from autofusion.backend.quantize import dequantize, quantize as onnx_quantize
from autofusion.frontend import import_onnx
from autofusion.fusion import optimize
from autofusion.ir import verify
from autofusion.passes import int8 as P

rng = np.random.default_rng(0)


def _model(nodes, inits, outputs=("y",), x_shape=(1, 4, 8, 8)):
    graph = helper.make_graph(nodes, "int8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weight(*shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.2


def residual_block():
    """conv → relu → conv, + x, relu, maxpool, then a float tail (GlobalAveragePool) to the output."""
    return _model([
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w3"], ["c3"]),
        helper.make_node("GlobalAveragePool", ["c3"], ["y"]),
    ], {"w1": _weight(4, 4, 3, 3), "b1": _weight(4), "w2": _weight(4, 4, 3, 3), "w3": _weight(8, 4, 1, 1)})


def _by_name(graph, name):
    return next(v for n in graph.nodes for v in n.outputs if v.name == name)


# ---- one tensor's quantization ----------------------------------------------------------------

@pytest.mark.parametrize("low, high", [(-1.0, 3.0), (0.5, 2.0), (-4.0, -1.0), (0.0, 0.0)])
def test_a_range_is_widened_to_hold_zero_exactly(low, high):
    q = P.Quantization.of_range(low, high)
    assert 0 <= q.zero_point <= 255 and q.scale > 0
    assert q.round_trip(np.zeros(1, np.float32))[0] == 0.0
    ends = q.round_trip(np.array([min(low, 0), max(high, 0)], np.float32))
    assert np.allclose(ends, [min(low, 0), max(high, 0)], atol=q.scale / 2 + 1e-7)


def test_round_trip_is_onnx_quantize_then_dequantize_ties_included():
    q = P.Quantization.of_range(-1.0, 1.55)
    steps = np.arange(-300, 300, dtype=np.float32) * np.float32(q.scale) / 2   # every half step: ties
    scale, zero = torch.tensor(q.scale, dtype=torch.float32), torch.tensor(q.zero_point, dtype=torch.uint8)
    onnx = dequantize(onnx_quantize(torch.from_numpy(steps), scale, zero, torch.uint8), scale, zero).numpy()
    np.testing.assert_array_equal(q.round_trip(steps), onnx)


def test_weights_are_int8_per_output_channel_symmetric():
    w = _weight(3, 2, 3, 3)
    w[1] = 0.0
    q, scale = P.int8_weight(w, 0)
    assert q.dtype == np.int8 and scale.shape == (3,) and scale[1] == 1.0
    assert np.abs(q).max(axis=(1, 2, 3)).tolist() == [127, 0, 127]
    np.testing.assert_allclose(q * scale.reshape(3, 1, 1, 1), w, atol=float(scale.max()) / 2 + 1e-7)
    q, scale = P.int8_weight(_weight(5, 6), 1)   # a MatMul's: columns
    assert scale.shape == (6,) and (np.abs(q).max(axis=0) == 127).all()


# ---- what gets quantized ------------------------------------------------------------------------

def test_products_with_constant_weights_are_candidates():
    g = import_onnx(_model([
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["h"]),                # a constant 2-D weight: a candidate
        helper.make_node("Transpose", ["h"], ["h_t"]),
        helper.make_node("MatMul", ["h", "h_t"], ["hh"]),             # a run-time weight: not
        helper.make_node("Gemm", ["hh", "g"], ["y"], transB=1),       # writes the model output: float out
    ], {"w": _weight(2, 4, 8, 8), "m": _weight(2, 3), "g": _weight(5, 1)}))
    assert [n.op for n in P.products(g)] == ["Conv", "MatMul", "Gemm"]


def test_tensors_follow_the_ops_the_int8_rules_run_over_integers():
    g = import_onnx(residual_block())
    scaled_by = {v.name: s.name for v, s in P.tensors(g, set(P.products(g))).items()}
    assert scaled_by == {
        "x": "x",                 # the first conv's input (and the residual's other side)
        "r1": "r1",               # the conv's output after the ReLU it alone feeds
        "c2": "c2",               # the second conv's output (the Add reads it)
        "r2": "r2",               # the residual sum of two quantized tensors, after its ReLU
        "p": "r2",                # MaxPool moves values: its input's scale
    }                             # c3: only a float GlobalAveragePool reads it, the conv writes float


def test_a_product_alone_reads_int8_and_writes_float_for_the_float_ops_after_it():
    g = import_onnx(residual_block())
    first = P.products(g)[0]
    scaled_by = P.tensors(g, {first})
    assert {v.name for v in scaled_by} == {"x"}   # r1: only the second conv, left float, reads it


# ---- the rewrite, and the rules after it ----------------------------------------------------------

def test_the_rewrite_is_the_qdq_graph_the_int8_rules_fuse():
    g = import_onnx(residual_block())
    chosen = P.products(g)
    scaled_by = P.tensors(g, set(chosen))
    P.quantize(g, chosen, {v: P.Quantization.of_range(-2.0, 2.0) for v in scaled_by})
    verify(g)
    ops = g.op_histogram()
    assert ops["QuantizeLinear"] == len(scaled_by) and ops["DequantizeLinear"] == len(scaled_by) + len(chosen)
    for n in chosen:
        dq = n.inputs[1].producer
        assert dq.op == "DequantizeLinear" and dq.inputs[0].const.dtype == np.int8 and dq.attr("axis") == 0
    assert _by_name(g, "y").producer.op == "GlobalAveragePool"   # the output is still float
    optimize(g, 2, evaluate=evaluate_node)
    verify(g)
    fused = g.op_histogram()
    assert fused["autofusion::QuantizedConv"] == 3 and fused["autofusion::QuantizedAdd"] == 1
    assert fused["MaxPool"] == 1 and "Conv" not in fused   # the MaxPool over integers
    assert fused["QuantizeLinear"] == 1   # the input's; its one DequantizeLinear is before the float tail


def test_a_transposed_convolution_is_a_candidate_quantized_along_its_output_channels():
    g = import_onnx(_model([
        helper.make_node("ConvTranspose", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ], {"w": _weight(4, 6, 3, 3), "w2": _weight(2, 6, 1, 1)}))
    up, last = P.products(g)
    assert up.op == "ConvTranspose" and P.weight_axis(up) == 1
    scaled_by = P.tensors(g, {up, last})
    P.quantize(g, [up, last], {v: P.Quantization.of_range(-2.0, 2.0) for v in scaled_by})
    optimize(g, 2, evaluate=evaluate_node)
    ops = g.op_histogram()
    assert ops["autofusion::QuantizedConvTranspose"] == 1 and ops["autofusion::QuantizedConv"] == 1


def test_a_per_channel_gate_is_quantized_through():
    """A squeeze-excitation: the gate (one value per channel) times the feature map, both quantized."""
    g = import_onnx(_model([
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        helper.make_node("Conv", ["p", "w2"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["gate"]),
        helper.make_node("Mul", ["c", "gate"], ["m"]),
        helper.make_node("Conv", ["m", "w3"], ["y"]),
    ], {"w1": _weight(4, 4, 3, 3), "w2": _weight(4, 4, 1, 1), "w3": _weight(2, 4, 1, 1)}))
    scaled_by = {v.name for v in P.tensors(g, set(P.products(g)))}
    assert {"c", "gate", "m"} <= scaled_by
