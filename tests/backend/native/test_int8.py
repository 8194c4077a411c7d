"""The native int8 steps: quantize and dequantize (the runtime's own loops) with ONNX's rounding,
half to even, and saturation; integers in and out of a partition; the int8 convolution and
product running natively, their ties rounded as the Q/DQ graph rounds them."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend.native import unavailable
from tests.helpers import qdq_conv_block, qdq_linear, qdq_silu_block

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT}


def model(nodes, inputs: dict, output: tuple, consts: dict):
    graph = helper.make_graph(
        nodes, "int8", [helper.make_tensor_value_info(n, TYPES[t], list(s)) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(output[0], TYPES[output[1]], None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def native_steps(compiled) -> str:
    plan = str(compiled.plan)
    assert "on PyTorch" not in plan or " 0 node(s) on PyTorch" in plan, plan
    return plan


@pytest.mark.parametrize("qtype,zero_point", [(np.uint8, 3), (np.int8, -5)])
def test_quantize_rounds_ties_to_even_and_saturates(qtype, zero_point):
    scale = np.float32(0.5)
    x = ((np.arange(-300, 300) + 0.5) * scale).astype(np.float32)   # x / scale: every half integer
    m = model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q")],
              {"x": (np.float32, x.shape)}, ("y", qtype), {"s": scale, "z": np.array(zero_point, qtype)})
    compiled = autofusion.compile(m, backend="native")
    assert "runtime quantize" in native_steps(compiled)
    info = np.iinfo(qtype)
    want = np.clip(np.rint(x / scale) + zero_point, info.min, info.max).astype(qtype)
    got = compiled.run({"x": x})["y"]
    assert got.dtype == qtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("qtype,zero_point", [(np.uint8, 131), (np.int8, 7)])
def test_dequantize_reads_the_callers_integers(qtype, zero_point):
    info = np.iinfo(qtype)
    x = np.arange(info.min, info.max + 1).astype(qtype).reshape(1, -1)
    m = model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq")],
              {"x": (qtype, x.shape)}, ("y", np.float32), {"s": np.float32(0.037), "z": np.array(zero_point, qtype)})
    compiled = autofusion.compile(m, backend="native")
    assert "runtime dequantize" in native_steps(compiled)
    np.testing.assert_array_equal(compiled.run({"x": x})["y"],
                                  (x.astype(np.int32) - zero_point).astype(np.float32) * np.float32(0.037))


def test_int8_convolution_rounds_ties_to_even():
    """A 1x1 convolution by the identity, x's scale 1 and y's 2: every odd input lands on a tie,
    which the s32 sum meets exactly; the result is the graph's, bit for bit."""
    c = 16
    x = np.arange(c * 4 * 4, dtype=np.float32).reshape(1, c, 4, 4) % 256
    m = model([helper.make_node("QuantizeLinear", ["x", "one", "zu"], ["xq"], name="qx"),
               helper.make_node("DequantizeLinear", ["xq", "one", "zu"], ["xd"], name="dqx"),
               helper.make_node("DequantizeLinear", ["wq", "one", "zs"], ["w"], name="dqw"),
               helper.make_node("Conv", ["xd", "w"], ["y"], name="conv"),
               helper.make_node("QuantizeLinear", ["y", "two", "zu"], ["yq"], name="qy"),
               helper.make_node("DequantizeLinear", ["yq", "two", "zu"], ["out"], name="dqy")],
              {"x": (np.float32, x.shape)}, ("out", np.float32),
              {"one": np.float32(1), "two": np.float32(2), "zu": np.uint8(0), "zs": np.int8(0),
               "wq": np.eye(c, dtype=np.int8).reshape(c, c, 1, 1)})
    compiled = autofusion.compile(m, backend="native")
    assert "autofusion::QuantizedConv) via onednn" in native_steps(compiled)
    np.testing.assert_array_equal(compiled.run({"x": x})["out"], np.rint(x / 2) * 2)


@pytest.mark.parametrize("build", [lambda: qdq_conv_block(residual=True), lambda: qdq_conv_block(groups=8),
                                   lambda: qdq_linear(trans_b=False, rows=(2, 5))],
                         ids=["residual", "depthwise", "matmul"])
def test_a_qdq_graph_runs_in_one_native_partition_on_int8_kernels(build):
    compiled = autofusion.compile(build(), backend="native")
    plan = native_steps(compiled)
    assert "1 native partition(s)" in plan
    assert any(f"autofusion::{op}) via onednn" in plan for op in ("QuantizedConv", "QuantizedMatMul"))


def test_a_function_of_integers_runs_as_a_table_and_a_product_in_one_pass():
    plan = native_steps(autofusion.compile(qdq_silu_block("Sigmoid", gated=False), backend="native"))
    assert "runtime int8 table" in plan and "runtime int8 mul" in plan and "1 native partition(s)" in plan


def test_x_times_a_function_of_x_runs_as_one_table():
    plan = native_steps(autofusion.compile(qdq_silu_block("Sigmoid"), backend="native"))
    assert "QuantizedGatedActivation) via onednn [runtime int8 table]" in plan and "runtime int8 mul" not in plan


def test_without_vnni_the_int8_products_run_on_pytorch_and_the_plan_says_why(monkeypatch):
    from autofusion.backend.native import impls
    monkeypatch.setattr(impls, "has_vnni", lambda: False)
    compiled = autofusion.compile(qdq_conv_block(), backend="native")
    assert "this CPU has no VNNI" in str(compiled.plan)
    reference = autofusion.compile(qdq_conv_block(), level=0, backend="torch")
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(compiled(x), reference(x))


def test_a_qdq_model_with_dynamic_sizes_runs_natively_at_each_size():
    model = qdq_conv_block(residual=True)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[2].dim_param, dims[3].dim_param = "N", "H", "W"
    compiled = autofusion.compile(model, backend="native")
    reference = autofusion.compile(model, level=0, backend="torch")
    for shape in [(1, 8, 8, 8), (2, 8, 12, 10)]:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        steps = np.abs(compiled(x) - reference(x)) / 0.12
        assert steps.max() <= 1 + 1e-4 and (steps > 0.5).mean() < 0.01
    assert "1 native partition(s), 0 node(s) on PyTorch" in str(compiled.plan)


def test_a_sum_with_constant_integers_runs_on_pytorch_and_the_plan_says_why():
    """The program's constants are f32: an int8 step reads computed integers only (BERT's position
    embeddings, gathered by constant indices, are such a constant)."""
    from tests.helpers import QdqGraph
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    table, _ = q.weight("c", (1, 8), per_channel=False)   # int8 constants, dequantized
    y = q.node("Add", [q.dequantize(xq, "add"), table], "add")
    model = q.model({"x": (1, 8)}, q.dequantize(q.quantize(y, 0.1, 128), "out"))
    compiled = autofusion.compile(model, backend="native")
    assert "is a constant: a native int8 step reads computed integers" in str(compiled.plan)
    x = np.random.default_rng(2).standard_normal((1, 8)).astype(np.float32)
    steps = np.abs(compiled(x) - autofusion.compile(model, level=0, backend="torch")(x)) / 0.1
    assert steps.max() <= 1 + 1e-4
