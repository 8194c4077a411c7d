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


class QdqGraph:
    """A Q/DQ graph as a quantizer writes one: activations quantized per tensor (uint8 unless
    told), weights int8 per tensor or per output channel, biases int32 at x_scale·w_scale; each
    op reads its integers through a DequantizeLinear and writes through a QuantizeLinear."""

    def __init__(self, seed: int = 0, activation=np.uint8):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.activation = [], {}, activation
        self.scales: dict[str, float] = {}

    def _const(self, name: str, value) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def quantize(self, x: str, scale: float, zero_point: int = 0) -> str:
        """x quantized; the name of its integers (the scale remembered for dequantize)."""
        s = self._const(f"{x}_scale", np.float32(scale))
        z = self._const(f"{x}_zp", np.array(zero_point, self.activation))
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{x}_q"], name=f"{x}_q"))
        self.scales[f"{x}_q"] = (s, z)
        return f"{x}_q"

    def dequantize(self, q: str, reader: str) -> str:
        s, z = self.scales[q]
        self.nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [f"{q}_dq_{reader}"], name=f"{q}_dq_{reader}"))
        return f"{q}_dq_{reader}"

    def weight(self, name: str, shape: tuple, per_channel: bool, axis: int = 0) -> tuple[str, np.ndarray]:
        """An int8 weight dequantized: its float value's name, and its scales."""
        w = self.rng.integers(-127, 128, shape).astype(np.int8)
        scales = (self.rng.uniform(0.002, 0.02, shape[axis]) if per_channel else np.array(0.01)).astype(np.float32)
        self._const(f"{name}_q", w)
        self._const(f"{name}_scale", scales)
        self._const(f"{name}_zp", np.zeros(scales.shape, np.int8))
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zp"], [name],
                                           name=f"{name}_dq", axis=axis))
        return name, scales

    def bias(self, name: str, x_scale: float, w_scales: np.ndarray, n: int) -> str:
        b = self.rng.integers(-2000, 2000, n).astype(np.int32)
        scale = (np.float32(x_scale) * np.broadcast_to(w_scales, (n,))).astype(np.float32)
        self._const(f"{name}_q", b)
        self._const(f"{name}_scale", scale if w_scales.size > 1 else scale[:1].reshape(()))
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_scale"], [name],
                                           name=f"{name}_dq", axis=0))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def model(self, inputs: dict[str, tuple], output: str, opset: int = 19) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "qdq", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
            [numpy_helper.from_array(v, n) for n, v in self.inits.items()])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def qdq_conv_block(per_channel: bool = True, act: str | None = "Relu", residual: bool = False, groups: int = 1,
                   activation=np.uint8, channels: int = 8, size: int = 8) -> onnx.ModelProto:
    """x → Q → DQ → Conv(DQ w, DQ b) (→ act) → Q → DQ (→ Add of the DQ'd input → Q → DQ) → y,
    x [1, channels, size, size]."""
    q = QdqGraph(activation=activation)
    zero = 0 if activation == np.int8 else 100
    xq = q.quantize("x", 0.05, zero)
    w, w_scales = q.weight("w", (channels, channels // groups, 3, 3), per_channel)
    b = q.bias("b", 0.05, w_scales, channels)
    y = q.node("Conv", [q.dequantize(xq, "conv"), w, b], "conv", pads=[1, 1, 1, 1], group=groups)
    if act == "Relu":
        y = q.node("Relu", [y], "act")
    elif act == "Clip":
        y = q.node("Clip", [y, q._const("low", np.float32(0)), q._const("high", np.float32(6))], "act")
    yq = q.quantize(y, 0.1, 0 if act or activation == np.int8 else 128)
    out = q.dequantize(yq, "out")
    if residual:
        out = q.dequantize(q.quantize(q.node("Add", [out, q.dequantize(xq, "add")], "add"), 0.12, 10), "out")
    return q.model({"x": (1, channels, size, size)}, out)


def qdq_conv_transpose_block(per_channel: bool = True, act: bool = True, groups: int = 1, strides=(2, 2),
                             pads=(1, 1, 1, 1), output_padding=(1, 1), channels: int = 8) -> onnx.ModelProto:
    """x → Q → DQ → ConvTranspose(DQ w [C_in, C_out/g, 3, 3] scaled along axis 1, DQ b) (→ Relu)
    → Q → DQ → y: an upsampling layer as a quantizer writes it, x [1, channels, 6, 6]."""
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 100)
    w, w_scales = q.weight("w", (channels, channels // groups, 3, 3), per_channel, axis=1)
    b = q.bias("b", 0.05, w_scales, channels // groups if per_channel else channels)
    y = q.node("ConvTranspose", [q.dequantize(xq, "conv"), w, b], "conv", strides=list(strides), pads=list(pads),
               output_padding=list(output_padding), group=groups)
    if act:
        y = q.node("Relu", [y], "act")
    return q.model({"x": (1, channels, 6, 6)}, q.dequantize(q.quantize(y, 0.1, 0 if act else 128), "out"))


def qdq_linear(trans_b: bool = True, per_channel: bool = True, rows: tuple = (4,), k: int = 32, n: int = 16,
               act: bool = False) -> onnx.ModelProto:
    """x [*rows, k] → Q → DQ → Gemm(transB) or MatMul with an int8 weight (→ Relu) → Q → DQ → y."""
    q = QdqGraph(seed=1)
    xq = q.quantize("x", 0.04, 120)
    shape, axis = ((n, k), 0) if trans_b else ((k, n), 1)
    w, w_scales = q.weight("w", shape, per_channel, axis)
    if trans_b:
        y = q.node("Gemm", [q.dequantize(xq, "product"), w, q.bias("b", 0.04, w_scales, n)], "product", transB=1)
    else:
        y = q.node("MatMul", [q.dequantize(xq, "product"), w], "product")
    if act:
        y = q.node("Relu", [y], "act")
    return q.model({"x": (*rows, k)}, q.dequantize(q.quantize(y, 0.2, 0 if act else 128), "out"))


def qdq_silu_block(act: str = "Sigmoid", gated: bool = True) -> onnx.ModelProto:
    """x → Q → DQ → act → Q → DQ → Mul with DQ(x) → Q → DQ: x·act(x) as a quantizer writes it
    (gated=False: a ReLU after the product, which keeps the two apart)."""
    q = QdqGraph()
    xq = q.quantize("x", 0.05, 128)
    attrs = {"alpha": 0.3} if act == "LeakyRelu" else {}
    unit = act in ("Sigmoid", "HardSigmoid")
    s = q.quantize(q.node(act, [q.dequantize(xq, "act")], "act", **attrs), 1 / 255 if unit else 0.05,
                   0 if unit else 128)
    y = q.node("Mul", [q.dequantize(xq, "mul"), q.dequantize(s, "mul")], "mul")
    if not gated:
        y = q.node("Relu", [y], "relu")
    return q.model({"x": (1, 8, 6, 6)}, q.dequantize(q.quantize(y, 0.04, 60), "out"))
