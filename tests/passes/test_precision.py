"""widen_float16: an fp16 model computes in fp32 between its fp16 inputs and outputs."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.frontend import import_onnx
from autofusion.ir import DType, verify
from autofusion.passes import widen_float16


def half_model(cast_out: bool = False):
    w = numpy_helper.from_array(np.linspace(-1, 1, 12).astype(np.float16).reshape(3, 4), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    if cast_out:   # an fp16 tensor cast to fp32 on the way out (keep_io_types' form)
        nodes.append(helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT, name="out"))
    out = helper.make_tensor_value_info("z" if cast_out else "y",
                                        TensorProto.FLOAT if cast_out else TensorProto.FLOAT16, [2, 4])
    graph = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])],
                              [out], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fp16_values_inside_become_fp32_and_the_boundary_keeps_fp16():
    g = import_onnx(half_model())
    assert widen_float16(g) == 4   # W, the input, m and y
    verify(g)
    assert str(g) == ("graph half(x: float16[2,3]) -> (y: float16[2,4])\n"
                      "  const W: float[3,4]\n"
                      "  x_fp32: float[2,3] = Cast[to=1](x)\n"
                      "  m: float[2,4] = MatMul(x_fp32, W)\n"
                      "  y_fp16: float[2,4] = Relu(m)\n"
                      "  y: float16[2,4] = Cast[to=10](y_fp16)")
    assert g.constants["W"].const.dtype == np.float32


def test_an_fp32_output_cast_from_fp16_reads_fp32():
    g = import_onnx(half_model(cast_out=True))
    widen_float16(g)
    verify(g)
    assert [v.dtype for v in g.outputs] == [DType.FLOAT]
    assert [o.dtype for n in g.nodes for o in n.outputs] == [DType.FLOAT] * 4


def test_an_fp32_model_is_left_alone():
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "round", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert widen_float16(g) == 0 and [n.attr("to") for n in g.nodes] == [10, 1]


def test_the_widened_model_gives_the_fp16_answer_within_fp16_rounding():
    model = half_model()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float16)
    exact = np.maximum(x.astype(np.float32) @ numpy_helper.to_array(model.graph.initializer[0]).astype(np.float32), 0)
    for level in (0, 2):
        y = autofusion.compile(model, level=level)(x)
        assert y.dtype == np.float16
        np.testing.assert_allclose(y.astype(np.float32), exact, rtol=2e-3, atol=2e-3)
