"""Small ONNX model builders shared by the tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_relu_model(opset: int = 17) -> onnx.ModelProto:
    """x[N,3,8,8] -> Conv(3x3, pad 1) -> Relu -> Add(residual of conv) -> y."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "c"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def random_feeds(model: onnx.ModelProto, n: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value or n for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def flat_320_model() -> onnx.ModelProto:
    """x[batch, height] reshaped to [1, 320]: runs only where batch·height = 320, so random
    inputs with the symbolic sizes defaulted to 1 fail in node 'flat'."""
    shape = numpy_helper.from_array(np.array([1, 320], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "height"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def one_native_node_like_onnxruntime(model: onnx.ModelProto, *sizes: tuple, tolerance: float = 0.0):
    """A one-node model (input "x") compiled at level 0 runs natively and equals ONNX Runtime at
    each input size (`tolerance`: relative and absolute; 0, bit for bit)."""
    import autofusion
    import onnxruntime as ort
    compiled = autofusion.compile(model, level=0, backend="native")
    (node,) = compiled.graph.nodes
    assert compiled.plan.decisions[node].impl.target == "native", compiled.plan.decisions[node].refused
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for size in sizes:
        x = rng.standard_normal(size).astype(np.float32)
        (want,) = session.run(None, {"x": x})
        got = compiled(x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    return compiled
