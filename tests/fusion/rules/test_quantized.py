"""Quantized rules: Q/DQ around Conv, Gemm/MatMul and MaxPool become int8 ops (QuantizedConv,
QuantizedMatMul, MaxPool over the integers), and what they refuse.

Tolerance: the fused graph's output equals the Q/DQ graph's within one quantization step of the
output, with the steps that differ counted (a sum in another order can cross a rounding tie)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import autofusion
from autofusion.backend.native.build import has_vnni
from tests.helpers import QdqGraph, qdq_conv_block, qdq_conv_transpose_block, qdq_linear, qdq_silu_block

from .harness import fuse, matched, near_miss, ops


def assert_within_one_step(model: onnx.ModelProto, step: float, backend: str = "auto", seeds=(0, 1)) -> None:
    """The fused model's output against the unfused graph's: at most one step apart, and few."""
    reference = autofusion.compile(model, level=0, backend="torch")
    fused = autofusion.compile(model, level=2, backend=backend)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        feeds = {v.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in v.shape]).astype(np.float32)
                 for v in reference.graph.inputs}
        [want], [got] = reference.run(feeds).values(), fused.run(feeds).values()
        steps = np.abs(got.astype(np.float64) - want) / step
        assert steps.max() <= 1 + 1e-4, f"{steps.max():.3f} steps apart"
        assert (steps > 0.5).mean() < 0.01, f"{(steps > 0.5).mean():.2%} of the values a step apart"


# ---- golden: what the rules make ------------------------------------------------------------

@pytest.mark.parametrize("act", [None, "Relu", "Clip"])
def test_conv_between_dequantize_and_quantize_is_one_int8_convolution(act):
    graph, report = fuse(qdq_conv_block(act=act))
    assert ops(graph) == ["QuantizeLinear", "autofusion::QuantizedConv", "DequantizeLinear"]
    conv = graph.nodes[1]
    assert conv.name.startswith("conv") and conv.outputs[0].dtype.name == "UINT8"   # named after the Conv
    assert conv.inputs[1].const.dtype == np.int8, "the weight stays int8"
    assert conv.inputs[2].const.dtype == np.float32, "the int32 bias is folded to float"
    assert conv.attr("activation", "") == ("" if act is None else act)
    assert matched(report, "QuantizedConvFusionOp") == 1


def test_a_residual_block_is_an_int8_convolution_and_an_int8_sum():
    """x's integers feed the convolution and the Add: each reads its own copy of their
    DequantizeLinear, and both fuse; the sum reads the integers of both sides."""
    graph, report = fuse(qdq_conv_block(residual=True))
    assert ops(graph) == ["QuantizeLinear", "autofusion::QuantizedConv", "autofusion::QuantizedAdd",
                          "DequantizeLinear"]
    add = graph.nodes[2]
    assert [v.name for v in add.inputs[:2]] == ["act_q", "x_q"] and add.outputs[0].dtype.name == "UINT8"
    assert report.passes["DequantizeLinear copied for each reader"] == 1
    assert matched(report, "QuantizedAddFusionOp") == 1


def test_copies_no_rule_took_merge_back():
    """An Add with no QuantizeLinear after it stays float: the copies of x's DequantizeLinear made
    for each reader merge back into one."""
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 100)
    s = q.node("Add", [q.dequantize(xq, "a"), q.dequantize(xq, "b")], "s")
    graph, _ = fuse(q.model({"x": (1, 4)}, s))
    assert ops(graph) == ["QuantizeLinear", "DequantizeLinear", "Add"]


@pytest.mark.parametrize("trans_b", [True, False], ids=["Gemm", "MatMul"])
def test_product_between_dequantize_and_quantize_is_one_int8_product(trans_b):
    graph, report = fuse(qdq_linear(trans_b=trans_b, rows=(2, 3) if not trans_b else (4,)))
    assert ops(graph) == ["QuantizeLinear", "autofusion::QuantizedMatMul", "DequantizeLinear"]
    product = graph.nodes[1]
    assert product.attr("trans_b") == int(trans_b) and product.attr("axis") == (0 if trans_b else 1)
    assert matched(report, "QuantizedMatMulFusionOp") == 1


def test_max_pool_with_one_scale_runs_on_the_integers():
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 10)
    pooled = q.node("MaxPool", [q.dequantize(xq, "pool")], "pool", kernel_shape=[2, 2], strides=[2, 2])
    s, z = q.scales[xq]
    q.nodes.append(helper.make_node("QuantizeLinear", [pooled, s, z], ["pool_q"], name="pool_q"))
    q.scales["pool_q"] = (s, z)
    graph, _ = fuse(q.model({"x": (1, 4, 8, 8)}, q.dequantize("pool_q", "out")))
    assert ops(graph) == ["QuantizeLinear", "MaxPool", "DequantizeLinear"]
    assert graph.nodes[1].inputs[0].dtype.name == "UINT8"


# ---- numeric: the Q/DQ graph's result -------------------------------------------------------

@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("case", ["per_tensor", "per_channel", "residual", "depthwise", "int8", "clip"])
def test_int8_convolution_equals_the_qdq_graph(case, backend):
    model = qdq_conv_block(per_channel=case != "per_tensor", residual=case == "residual",
                           groups=8 if case == "depthwise" else 1,
                           activation=np.int8 if case == "int8" else np.uint8,
                           act="Clip" if case == "clip" else "Relu")
    assert_within_one_step(model, 0.12 if case == "residual" else 0.1, backend)


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("trans_b,per_channel,act", [(True, True, False), (False, True, True), (True, False, True)])
def test_int8_product_equals_the_qdq_graph(trans_b, per_channel, act, backend):
    assert_within_one_step(qdq_linear(trans_b, per_channel, rows=(4,) if trans_b else (2, 5), act=act), 0.2, backend)


# ---- negative: what stays as it is, and why -------------------------------------------------

def _with_input_scale(model: onnx.ModelProto) -> onnx.ModelProto:
    """x's scale a graph input, not a constant."""
    init = [i for i in model.graph.initializer if i.name != "x_scale"]
    del model.graph.initializer[:]
    model.graph.initializer.extend(init)
    model.graph.input.append(helper.make_tensor_value_info("x_scale", onnx.TensorProto.FLOAT, []))
    return model


def test_a_scale_computed_at_run_time_is_a_near_miss():
    graph, report = fuse(_with_input_scale(qdq_conv_block()))
    assert "autofusion::QuantizedConv" not in ops(graph)
    assert "quantized by one constant scale" in near_miss(report, "QuantizedConvFusionOp")


def test_weight_scales_along_another_axis_are_a_near_miss():
    model = qdq_conv_block(per_channel=True, channels=8)
    scale = next(i for i in model.graph.initializer if i.name == "w_scale")
    values = numpy_helper.to_array(scale)
    scale.CopyFrom(numpy_helper.from_array(values, "w_scale"))
    next(n for n in model.graph.node if n.name == "w_dq").attribute[0].i = 1   # axis 1: input channels
    graph, report = fuse(model)
    assert "autofusion::QuantizedConv" not in ops(graph)
    assert "not the weight's output channels" in near_miss(report, "QuantizedConvFusionOp")


def test_sixteen_bit_quantization_is_a_near_miss():
    q = QdqGraph(activation=np.uint16)
    xq = q.quantize("x", 0.05, 100)
    w, scales = q.weight("w", (4, 4, 1, 1), per_channel=False)
    y = q.node("Conv", [q.dequantize(xq, "conv"), w], "conv")
    graph, report = fuse(q.model({"x": (1, 4, 4, 4)}, q.dequantize(q.quantize(y, 0.1, 7), "out"), opset=21))
    assert "autofusion::QuantizedConv" not in ops(graph)
    assert "is not 8-bit integers" in near_miss(report, "QuantizedConvFusionOp")


def test_a_weight_zero_point_runs_on_pytorch_and_the_plan_says_why():
    model = qdq_conv_block(per_channel=False)
    zp = next(i for i in model.graph.initializer if i.name == "w_zp")
    zp.CopyFrom(numpy_helper.from_array(np.array(3, np.int8), "w_zp"))
    compiled = autofusion.compile(model, backend="native")
    assert "weight's zero point 'w_zp' is not 0" in str(compiled.plan)
    assert_within_one_step(model, 0.1)


# ---- the QOperator format -------------------------------------------------------------------

def qlinear_model(op: str, per_channel: bool) -> onnx.ModelProto:
    """x (uint8) → QLinearConv (3x3, pads 1, bias) or QLinearMatMul → y (uint8)."""
    rng = np.random.default_rng(3)
    conv = op == "QLinearConv"
    w = rng.integers(-127, 128, (8, 4, 3, 3) if conv else (12, 8)).astype(np.int8)
    channels = 8
    scales = rng.uniform(0.005, 0.02, channels if per_channel else 1).astype(np.float32)
    consts = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": w,
              "ws": scales if per_channel else scales.reshape(()),
              "wz": np.zeros(channels if per_channel else (), np.int8), "ys": np.float32(0.15), "yz": np.uint8(60)}
    if conv:
        consts["B"] = rng.integers(-3000, 3000, channels).astype(np.int32)
    shape = (1, 4, 6, 6) if conv else (3, 12)
    graph = helper.make_graph(
        [helper.make_node(op, ["x", *consts], ["y"], name="q", **({"pads": [1, 1, 1, 1]} if conv else {}))], "q",
        [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, list(shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
@pytest.mark.parametrize("op,fused", [("QLinearConv", "QuantizedConv"), ("QLinearMatMul", "QuantizedMatMul")])
def test_qoperator_nodes_are_the_same_int8_ops(op, fused, per_channel, backend):
    import onnxruntime as ort
    model = qlinear_model(op, per_channel)
    graph, report = fuse(model)
    assert ops(graph) == [f"autofusion::{fused}"]
    x = np.random.default_rng(4).integers(0, 256, [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
                                          ).astype(np.uint8)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options).run(None, {"x": x})[0]
    got = autofusion.compile(model, backend=backend).run({"x": x})["y"]
    assert got.dtype == np.uint8
    assert np.abs(got.astype(int) - want).max() <= 1 and (got != want).mean() < 0.02


# ---- elementwise: a product, a function as a table -----------------------------------------

@pytest.mark.parametrize("act", ["Sigmoid", "HardSwish", "LeakyRelu", "Tanh"])
def test_an_activation_between_dequantize_and_quantize_is_a_table(act):
    graph, report = fuse(qdq_silu_block(act, gated=False))   # a ReLU after the product: two steps
    assert ops(graph) == ["QuantizeLinear", "autofusion::QuantizedActivation", "autofusion::QuantizedMul",
                          "DequantizeLinear"]
    assert graph.nodes[1].attr("activation") == act and graph.nodes[2].attr("activation") == "Relu"
    assert matched(report, "QuantizedActivationFusionOp") == 1 and matched(report, "QuantizedMulFusionOp") == 1


@pytest.mark.parametrize("act", ["Sigmoid", "HardSigmoid", "Tanh"])
def test_x_times_a_function_of_x_is_one_table(act):
    """SiLU as a quantizer writes it: the activation's table and the product become one table."""
    graph, report = fuse(qdq_silu_block(act))
    assert ops(graph) == ["QuantizeLinear", "autofusion::QuantizedGatedActivation", "DequantizeLinear"]
    assert graph.nodes[1].attr("activation") == act
    assert matched(report, "QuantizedGatedActivationFusionOp") == 1


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("act", ["Sigmoid", "HardSwish", "LeakyRelu"])
def test_tables_and_products_equal_the_qdq_graph(act, backend):
    assert_within_one_step(qdq_silu_block(act), 0.04, backend, seeds=(0, 1, 2))
    assert_within_one_step(qdq_silu_block(act, gated=False), 0.04, backend, seeds=(0, 1, 2))


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_a_gated_table_equals_the_qdq_graph_exactly(backend):
    """Every one of the 256 inputs (x's values walk the whole range): the table is the two kernels'
    arithmetic, so not one value differs."""
    model = qdq_silu_block("Sigmoid")
    reference = autofusion.compile(model, level=0, backend="torch")
    fused = autofusion.compile(model, level=2, backend=backend)
    x = np.linspace(-7, 7, 8 * 36, dtype=np.float32).reshape(1, 8, 6, 6)
    np.testing.assert_array_equal(fused(x), reference(x))


def gated_channels(gate_shape: tuple, gate_first: bool = False, x_shape: tuple = (1, 8, 6, 6)) -> onnx.ModelProto:
    """x · g with g broadcast (a squeeze-excitation's per-channel gate), as a quantizer writes it."""
    q = QdqGraph()
    xq, gq = q.quantize("x", 0.05, 128), q.quantize("g", 0.01, 0)
    operands = [q.dequantize(xq, "mul"), q.dequantize(gq, "mul")]
    y = q.node("Mul", operands[::-1] if gate_first else operands, "mul")
    return q.model({"x": x_shape, "g": gate_shape}, q.dequantize(q.quantize(y, 0.04, 60), "out"))


@pytest.mark.parametrize("gate_first", [False, True])
def test_a_per_channel_gate_is_an_int8_product_with_the_full_operand_first(gate_first):
    graph, report = fuse(gated_channels((1, 8, 1, 1), gate_first))
    [mul] = [n for n in graph.nodes if n.op == "autofusion::QuantizedMul"]
    assert mul.inputs[0].name == "x_q" and mul.inputs[1].name == "g_q"
    assert list(mul.outputs[0].shape) == [1, 8, 6, 6]


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("gate_shape, x_shape", [((1, 8, 1, 1), (1, 8, 6, 6)), ((2, 8, 1, 1), (2, 8, 6, 6)),
                                                 ((1, 8, 1, 1), (3, 8, 5, 7))])
def test_a_per_channel_int8_product_equals_the_qdq_graph(gate_shape, x_shape, backend):
    model = gated_channels(gate_shape, x_shape=x_shape)
    reference = autofusion.compile(model, level=0, backend="torch")
    fused = autofusion.compile(model, level=2, backend=backend)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32), "g": rng.uniform(0, 1, gate_shape).astype(np.float32)}
    np.testing.assert_array_equal(fused.run(feeds)["mul_q_dq_out"], reference.run(feeds)["mul_q_dq_out"])
    if native(fused):
        assert "runtime int8 mul per channel" in native_plan_text(fused, feeds)


def native(model) -> bool:
    """Whether the model runs native partitions (the backend asked for may be "auto")."""
    return any(p.target == "native" for p in model.plan.partitions)


def native_plan_text(model, feeds) -> str:
    model.run(feeds)   # the plan names each step's kernels once it has run
    return str(model.plan)


def test_a_broadcast_product_other_than_per_channel_stays_float():
    graph, report = fuse(gated_channels((1, 1, 6, 6)))
    assert "autofusion::QuantizedMul" not in ops(graph)
    assert "one value per channel on one side" in near_miss(report, "QuantizedMulFusionOp")


def test_a_quantized_embedding_table_is_gathered_before_it_is_dequantized():
    q = QdqGraph()
    table, _ = q.weight("table", (50, 8), per_channel=False)
    q.node("Gather", [table, "ids"], "rows")
    model = q.model({}, "rows")
    model.graph.input.append(helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [3]))
    graph, report = fuse(model)
    assert ops(graph) == ["Gather", "DequantizeLinear"] and graph.nodes[0].outputs[0].dtype.name == "INT8"
    ids = np.array([0, 7, 49])
    got = autofusion.compile(model).run({"ids": ids})["rows"]
    want = autofusion.compile(model, level=0).run({"ids": ids})["rows"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_reshape_and_transpose_between_one_scale_run_on_the_integers(backend):
    """An attention's head split as a quantizer writes it: Q/DQ around each Reshape and Transpose,
    one scale throughout: the integers are reshaped and transposed as they are."""
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    s, z = q.scales[xq]
    r = q.node("Reshape", [q.dequantize(xq, "r"), q._const("shape", np.array([1, 4, 3, 4]))], "r")
    q.nodes.append(helper.make_node("QuantizeLinear", [r, s, z], ["r_q"], name="r_q"))
    q.scales["r_q"] = (s, z)
    t = q.node("Transpose", [q.dequantize("r_q", "t")], "t", perm=[0, 2, 1, 3])
    model = q.model({"x": (1, 4, 12)}, q.dequantize(q.quantize(t, 0.05, 128), "out"))
    graph, report = fuse(model)
    assert ops(graph) == ["QuantizeLinear", "Reshape", "Transpose", "DequantizeLinear"]
    assert matched(report, "QuantizedMoveFusionOp") == 2
    assert_within_one_step(model, 0.05, backend)
    if backend == "auto":
        assert "1 native partition(s), 0 node(s) on PyTorch" in str(autofusion.compile(model, backend="native").plan)


def test_linear_resize_is_a_near_miss():
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    s, z = q.scales[xq]
    r = q.node("Resize", [q.dequantize(xq, "r"), "", q._const("scales", np.array([1, 1, 2, 2], np.float32))], "r",
               mode="linear")
    q.nodes.append(helper.make_node("QuantizeLinear", [r, s, z], ["r_q"], name="r_q"))
    q.scales["r_q"] = (s, z)
    graph, report = fuse(q.model({"x": (1, 2, 4, 4)}, q.dequantize("r_q", "out")))
    assert "linear interpolation computes new values" in near_miss(report, "QuantizedMoveFusionOp")


def test_a_move_requantized_to_another_scale_is_a_near_miss():
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    pooled = q.node("MaxPool", [q.dequantize(xq, "pool")], "pool", kernel_shape=[2, 2])
    graph, report = fuse(q.model({"x": (1, 2, 4, 4)}, q.dequantize(q.quantize(pooled, 0.07, 128), "out")))
    assert "quantized by another scale" in near_miss(report, "QuantizedMoveFusionOp")


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_nearest_resize_between_one_scale_runs_on_the_integers(backend):
    """A detector's upsampling: the integers are resized as they are, natively too."""
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    s, z = q.scales[xq]
    r = q.node("Resize", [q.dequantize(xq, "r"), "", q._const("scales", np.array([1, 1, 2, 2], np.float32))], "r",
               mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    q.nodes.append(helper.make_node("QuantizeLinear", [r, s, z], ["r_q"], name="r_q"))
    q.scales["r_q"] = (s, z)
    model = q.model({"x": (1, 2, 4, 4)}, q.dequantize("r_q", "out"))
    graph, _ = fuse(model)
    assert ops(graph) == ["QuantizeLinear", "Resize", "DequantizeLinear"]
    assert_within_one_step(model, 0.05, backend)
    if backend == "auto":
        assert "0 node(s) on PyTorch" in str(autofusion.compile(model, backend="native").plan)


def qdq_concat(same_scale: bool) -> onnx.ModelProto:
    """DQ(a), DQ(b) → Concat → Q → DQ, a and b quantized with scales of their own (or the output's)."""
    q = QdqGraph()
    aq, bq = q.quantize("a", 0.05, 128), q.quantize("b", 0.05 if same_scale else 0.02, 128 if same_scale else 90)
    y = q.node("Concat", [q.dequantize(aq, "cat"), q.dequantize(bq, "cat")], "cat", axis=1)
    return q.model({"a": (1, 3, 4, 4), "b": (1, 5, 4, 4)}, q.dequantize(q.quantize(y, 0.05, 128), "out"))


@pytest.mark.parametrize("same_scale", [True, False])
def test_a_concat_of_dequantized_inputs_concatenates_integers(same_scale):
    graph, report = fuse(qdq_concat(same_scale))
    requantized = [] if same_scale else ["autofusion::QuantizedActivation"]
    assert sorted(ops(graph)) == sorted(["QuantizeLinear", "QuantizeLinear", *requantized, "Concat", "DequantizeLinear"])
    assert next(n for n in graph.nodes if n.op == "Concat").outputs[0].dtype.name == "UINT8"
    assert matched(report, "QuantizedConcatFusionOp") == 1


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_an_int8_concat_equals_the_qdq_graph(backend):
    assert_within_one_step(qdq_concat(False), 0.05, backend)
    if backend == "auto":
        assert "0 node(s) on PyTorch" in str(autofusion.compile(qdq_concat(False), backend="native").plan)


def test_a_concat_with_a_float_input_stays_float():
    q = QdqGraph()
    aq = q.quantize("a", 0.05, 128)
    y = q.node("Concat", [q.dequantize(aq, "cat"), "b"], "cat", axis=1)
    model = q.model({"a": (1, 3, 4, 4), "b": (1, 5, 4, 4)}, q.dequantize(q.quantize(y, 0.05, 128), "out"))
    graph, report = fuse(model)
    assert "Concat" in ops(graph) and matched(report, "QuantizedConcatFusionOp") == 0


# ---- what the remaining rules refuse ---------------------------------------------------------

def test_a_qlinear_conv_with_a_scale_computed_at_run_time_is_a_near_miss():
    model = qlinear_model("QLinearConv", per_channel=True)
    init = [i for i in model.graph.initializer if i.name != "xs"]
    del model.graph.initializer[:]
    model.graph.initializer.extend(init)
    model.graph.input.append(helper.make_tensor_value_info("xs", onnx.TensorProto.FLOAT, []))
    graph, report = fuse(model)
    assert ops(graph) == ["QLinearConv"]
    assert "'xs' is not one constant" in near_miss(report, "QLinearConvFusionOp")


def test_a_table_dequantized_per_axis_is_gathered_as_floats():
    q = QdqGraph()
    table, _ = q.weight("table", (50, 8), per_channel=True, axis=1)
    q.node("Gather", [table, "ids"], "rows")
    model = q.model({}, "rows")
    model.graph.input.append(helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [3]))
    graph, report = fuse(model)
    assert matched(report, "QuantizedGatherFusionOp") == 0
    assert "scales per axis or block" in near_miss(report, "QuantizedGatherFusionOp")


def test_a_clip_with_computed_bounds_is_no_table():
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    y = q.node("Clip", [q.dequantize(xq, "clip"), "low"], "clip")
    model = q.model({"x": (1, 8)}, q.dequantize(q.quantize(y, 0.05, 128), "out"))
    model.graph.input.append(helper.make_tensor_value_info("low", onnx.TensorProto.FLOAT, []))
    graph, report = fuse(model)
    assert "autofusion::QuantizedActivation" not in ops(graph)
    assert "bounds are not constants" in near_miss(report, "QuantizedActivationFusionOp")


# ---- ONNX Runtime's dynamic quantization ---------------------------------------------------------

def dynamic_linear(per_column: bool = False, w_zero_point: int = 0, zero_point: str = "zp",
                   rows: tuple = (2, 5), k: int = 48, n: int = 24) -> onnx.ModelProto:
    """A linear layer as `quantize_dynamic` writes it: DynamicQuantizeLinear, MatMulInteger with
    the int8 weight, Cast, the scales' product, the bias Add; the quantized input read by two
    products (a Q/K/V projection's)."""
    rng = np.random.default_rng(3)
    inits = {"w0": rng.integers(-127, 128, (k, n)).astype(np.int8), "w1": rng.integers(-127, 128, (k, n)).astype(np.int8),
             "w_scale": rng.uniform(0.001, 0.01, n if per_column else ()).astype(np.float32),
             "w_zp": np.full(n if per_column else (), w_zero_point, np.int8),
             "bias": rng.standard_normal(n).astype(np.float32), "fixed_zp": np.array(128, np.uint8)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zp"])]
    for i in range(2):
        nodes += [helper.make_node("MatMulInteger", ["q", f"w{i}", zero_point, "w_zp"], [f"acc{i}"]),
                  helper.make_node("Cast", [f"acc{i}"], [f"f{i}"], to=onnx.TensorProto.FLOAT),
                  helper.make_node("Mul", ["scale", "w_scale"], [f"s{i}"]),
                  helper.make_node("Mul", [f"f{i}", f"s{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", "bias"], [f"y{i}"])]
    nodes.append(helper.make_node("Add", ["y0", "y1"], ["y"]))
    g = helper.make_graph(nodes, "dynamic", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [*rows, k])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, name) for name, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_dynamically_quantized_linear_layer_is_one_product():
    graph, report = fuse(dynamic_linear())
    products = [n for n in graph.nodes if n.op == "autofusion::DynamicQuantizedMatMul"]
    assert len(products) == 2 and matched(report, "DynamicQuantizedMatMulFusionOp") == 2
    assert all(p.inputs[0].name == "x" and p.inputs[1].const.dtype == np.int8 for p in products)
    assert not any(n.op in ("DynamicQuantizeLinear", "MatMulInteger", "Cast") for n in graph.nodes)


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("per_column", [False, True])
def test_a_dynamically_quantized_product_equals_the_graph(per_column, backend):
    """The integer sums are exact and each float step rounds as the graph's: equal to the ulp
    (x's zero point and the ties of its quantization walked by the random inputs)."""
    model = dynamic_linear(per_column)
    reference = autofusion.compile(model, level=0, backend="torch")
    fused = autofusion.compile(model, level=2, backend=backend)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((2, 5, 48)).astype(np.float32) * (seed + 1)
        x[0, 0, :4] = 0.0   # values on the zero point
        np.testing.assert_allclose(fused(x), reference(x), rtol=1e-6, atol=1e-6)
    zeros = np.zeros((2, 5, 48), np.float32)   # a range of 0: scale 1, as ONNX Runtime
    np.testing.assert_array_equal(fused(zeros), reference(zeros))
    if native(fused):   # on oneDNN's int8 matmul where the CPU has VNNI
        products = [n for n in fused.graph.nodes if n.op == "autofusion::DynamicQuantizedMatMul"]
        assert all((fused.plan.decisions[n].impl.name == "onednn") == has_vnni() for n in products)


def test_a_zero_point_not_the_quantizers_is_not_the_dynamic_product():
    graph, report = fuse(dynamic_linear(zero_point="fixed_zp"))
    assert matched(report, "DynamicQuantizedMatMulFusionOp") == 0
    assert "MatMulInteger" in ops(graph)


def test_a_weight_zero_point_leaves_the_dynamic_product_on_pytorch_and_says_why():
    model = autofusion.compile(dynamic_linear(w_zero_point=3))
    [product, *_] = [n for n in model.graph.nodes if n.op == "autofusion::DynamicQuantizedMatMul"]
    if native(model):
        decision = model.plan.decisions[product]
        assert decision.impl.name == "torch" and "zero point" in dict(decision.refused)["onednn"]


# ---- transposed convolution ----------------------------------------------------------------------

@pytest.mark.parametrize("act", [True, False])
def test_a_transposed_conv_between_dequantize_and_quantize_is_one_int8_op(act):
    graph, report = fuse(qdq_conv_transpose_block(act=act))
    assert ops(graph) == ["QuantizeLinear", "autofusion::QuantizedConvTranspose", "DequantizeLinear"]
    conv = graph.nodes[1]
    assert conv.inputs[1].const.dtype == np.int8 and conv.attr("axis") == 1
    assert conv.attr("activation", "") == ("Relu" if act else "")
    assert matched(report, "QuantizedConvTransposeFusionOp") == 1


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("case", ["per_channel", "per_tensor", "no_act", "stride1", "grouped"])
def test_an_int8_transposed_conv_equals_the_qdq_graph(case, backend):
    model = qdq_conv_transpose_block(per_channel=case != "per_tensor" and case != "grouped", act=case != "no_act",
                                     groups=2 if case == "grouped" else 1,
                                     **({"strides": (1, 1), "output_padding": (0, 0)} if case == "stride1" else {}))
    assert_within_one_step(model, 0.1, backend)
    if backend == "auto":
        compiled = autofusion.compile(model)
        [conv] = [n for n in compiled.graph.nodes if n.op == "autofusion::QuantizedConvTranspose"]
        if native(compiled):
            assert (compiled.plan.decisions[conv].impl.name == "onednn") == has_vnni()


def test_a_grouped_transposed_conv_with_scales_per_channel_is_a_near_miss():
    graph, report = fuse(qdq_conv_transpose_block(per_channel=True, groups=2))
    assert "a grouped weight with scales per channel" in near_miss(report, "QuantizedConvTransposeFusionOp")


# ---- int8 products whose result the graph leaves float ----------------------------------------------

def float_result(op: str, act: str | None = "Relu") -> onnx.ModelProto:
    """x → Q → DQ → Conv/MatMul with an int8 weight (→ act) → y, nothing quantized after: the
    result float (a TensorRT-style export quantizes inputs only; a network's last product)."""
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 100)
    if op == "Conv":
        w, scales = q.weight("w", (8, 8, 3, 3), True)
        y = q.node("Conv", [q.dequantize(xq, "op"), w, q.bias("b", 0.05, scales, 8)], "op", pads=[1, 1, 1, 1])
        shape = (1, 8, 8, 8)
    elif op == "ConvTranspose":
        w, scales = q.weight("w", (8, 4, 3, 3), True, axis=1)
        y = q.node("ConvTranspose", [q.dequantize(xq, "op"), w, q.bias("b", 0.05, scales, 4)], "op", strides=[2, 2],
                   pads=[1, 1, 1, 1], output_padding=[1, 1])
        shape = (1, 8, 6, 6)
    else:
        w, _ = q.weight("w", (32, 16), True, axis=1)
        y = q.node("MatMul", [q.dequantize(xq, "op"), w], "op")
        shape = (4, 32)
    if act:
        y = q.node(act, [y, *([q._const("low", np.float32(0)), q._const("high", np.float32(6))] if act == "Clip" else [])],
                   "act")
    return q.model({"x": shape}, y)


@pytest.mark.parametrize("op, act", [("Conv", "Relu"), ("Conv", "Clip"), ("Conv", None), ("MatMul", None),
                                     ("MatMul", "Relu"), ("ConvTranspose", "Relu"), ("ConvTranspose", None)])
def test_a_product_nothing_quantizes_after_is_int8_with_a_float_result(op, act):
    graph, report = fuse(float_result(op, act))
    fused = f"autofusion::Quantized{'MatMul' if op == 'MatMul' else op}"
    assert ops(graph) == ["QuantizeLinear", fused]
    node = graph.nodes[1]
    assert node.outputs[0].dtype.name == "FLOAT" and node.attr("activation", "") == (act or "")
    assert matched(report, "QuantizedMatMulFloatFusionOp" if op == "MatMul" else "QuantizedConvFloatFusionOp") == 1


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("op", ["Conv", "MatMul", "ConvTranspose"])
def test_an_int8_product_with_a_float_result_equals_the_graph(op, backend):
    """Exact integer sums, scaled: the graph's float sums of dequantized values, to float rounding."""
    model = float_result(op)
    reference = autofusion.compile(model, level=0, backend="torch")
    fused = autofusion.compile(model, level=2, backend=backend)
    for seed in range(2):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal([d for d in (fused.graph.inputs[0].shape)]).astype(np.float32)
        np.testing.assert_allclose(fused(x), reference(x), rtol=1e-5, atol=1e-5)
    if native(fused):
        [product] = [n for n in fused.graph.nodes if n.op.startswith("autofusion::Quantized")]
        assert (fused.plan.decisions[product].impl.name == "onednn") == has_vnni()


def test_a_product_reading_x_by_another_scale_keeps_the_gate_apart():
    """x's integers read by the gate at one scale and by the product at another: not x times a
    function of x, so no one table (a near-miss with the reason)."""
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    gate = q.quantize(q.node("Sigmoid", [q.dequantize(xq, "act")], "act"), 1 / 255, 0)
    other = q.node("DequantizeLinear", [xq, q._const("x_scale_2", np.float32(0.06)), "x_zp"], "x_other")
    y = q.node("Mul", [other, q.dequantize(gate, "mul")], "mul")
    graph, report = fuse(q.model({"x": (1, 8, 6, 6)}, q.dequantize(q.quantize(y, 0.04, 60), "out")))
    assert "autofusion::QuantizedGatedActivation" not in ops(graph)
    assert "by another scale" in near_miss(report, "QuantizedGatedActivationFusionOp")
