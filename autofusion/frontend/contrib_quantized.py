"""ONNX Runtime's contrib int8 ops (domain com.microsoft), which its quantizer writes in the QOperator
format beside QLinearConv and QLinearMatMul, read as the Q/DQ graphs their specifications state:

    QLinearAdd, QLinearMul          Q(DQ(a) + DQ(b)), Q(DQ(a) · DQ(b))
    QLinearSigmoid, QLinearLeakyRelu Q(act(DQ(x)))
    QLinearGlobalAveragePool        Q(GlobalAveragePool(DQ(x))) (channels_last: a ReduceMean over
    QLinearAveragePool              the middle axes), Q(AveragePool(DQ(x)))
    QLinearConcat                   Q(Concat(DQ(x1), DQ(x2), …))
    QGemm                           Q?(Gemm(DQ(A), DQ(B), DQ(C at a_scale·b_scale))) (no y_scale: float)

so the int8 rules (fusion/rules/quantized.py) fuse them as they fuse a QDQ model's, and what no rule
takes runs as standard ops. Done on the ModelProto before shape inference, which then types the
new nodes; a node whose reading would need what the model's opset lacks (per-axis scales before
opset 13) is left as it is (ONNX Runtime runs it).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

MS_DOMAIN = "com.microsoft"


class _Writer:
    """New nodes and initializers for one contrib node, named after its first output."""

    def __init__(self, node: onnx.NodeProto, inits: dict[str, onnx.TensorProto], opset: int, ranks: dict[str, int]):
        self.node, self.inits, self.opset, self.ranks = node, inits, opset, ranks
        self.nodes: list[onnx.NodeProto] = []
        self.new_inits: list[onnx.TensorProto] = []
        self.base, self.count = node.output[0], 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{self.base}__{hint}{self.count}"

    def add(self, op: str, inputs: list[str], output: str | None = None, **attrs) -> str:
        out = output or self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(op), **attrs))
        return out

    def dq(self, x: str, scale: str, zero_point: str, axis: int | None = None) -> str:
        return self.add("DequantizeLinear", [x, scale, zero_point], **({} if axis is None else {"axis": axis}))

    def q(self, y: str, scale: str, zero_point: str, output: str) -> str:
        return self.add("QuantizeLinear", [y, scale, zero_point], output)

    def constant(self, name: str) -> np.ndarray | None:
        t = self.inits.get(name)
        return None if t is None else numpy_helper.to_array(t)

    def initializer(self, values: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.new_inits.append(numpy_helper.from_array(values, name))
        return name


def _attrs(n: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def _binary(w: _Writer, op: str) -> bool:
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (list(w.node.input) + [""] * 8)[:8]
    y = w.add(op, [w.dq(a, a_s, a_zp), w.dq(b, b_s, b_zp)])
    w.q(y, y_s, y_zp, w.node.output[0])
    return True


def _unary(op: str, **extra):
    def write(w: _Writer) -> bool:
        x, x_s, x_zp, y_s, y_zp = (list(w.node.input) + [""] * 5)[:5]
        attrs = {k: v for k, v in _attrs(w.node).items() if k in extra}
        w.q(w.add(op, [w.dq(x, x_s, x_zp)], **attrs), y_s, y_zp, w.node.output[0])
        return True
    return write


def _global_average_pool(w: _Writer) -> bool:
    x, x_s, x_zp, y_s, y_zp = (list(w.node.input) + [""] * 5)[:5]
    attrs = _attrs(w.node)
    dx = w.dq(x, x_s, x_zp)
    if attrs.get("channels_last", 0):
        rank = w.ranks.get(x)
        if rank is None:
            return False
        axes = list(range(1, rank - 1))
        pooled = (w.add("ReduceMean", [dx, w.initializer(np.array(axes, np.int64), "axes")], keepdims=1)
                  if w.opset >= 18 else w.add("ReduceMean", [dx], axes=axes, keepdims=1))
    else:
        pooled = w.add("GlobalAveragePool", [dx])
    w.q(pooled, y_s, y_zp, w.node.output[0])
    return True


def _average_pool(w: _Writer) -> bool:
    x, x_s, x_zp, y_s, y_zp = (list(w.node.input) + [""] * 5)[:5]
    attrs = _attrs(w.node)
    if attrs.pop("channels_last", 0):
        return False
    w.q(w.add("AveragePool", [w.dq(x, x_s, x_zp)], **attrs), y_s, y_zp, w.node.output[0])
    return True


def _concat(w: _Writer) -> bool:
    y_s, y_zp, *rest = w.node.input
    parts = [w.dq(*rest[i:i + 3]) for i in range(0, len(rest), 3)]
    w.q(w.add("Concat", parts, axis=_attrs(w.node)["axis"]), y_s, y_zp, w.node.output[0])
    return True


def _gemm(w: _Writer) -> bool:
    a, a_s, a_zp, b, b_s, b_zp, c, y_s, y_zp = (list(w.node.input) + [""] * 9)[:9]
    attrs = _attrs(w.node)
    trans_b = attrs.get("transB", 0)
    b_scale, a_scale = w.constant(b_s), w.constant(a_s)
    per_column = b_scale is not None and b_scale.size > 1
    if per_column and w.opset < 13:
        return False
    inputs = [w.dq(a, a_s, a_zp), w.dq(b, b_s, b_zp, axis=(0 if trans_b else 1) if per_column else None)]
    if c:   # int32 at a_scale·b_scale
        if a_scale is None or b_scale is None:
            return False
        scale = (np.float32(a_scale.reshape(-1)[0]) * b_scale.astype(np.float32)).astype(np.float32)
        inputs.append(w.dq(c, w.initializer(scale, "c_scale"), "", axis=0 if per_column else None))
    gemm_attrs = {k: v for k, v in attrs.items() if k in ("alpha", "transA", "transB")}
    if y_s:
        w.q(w.add("Gemm", inputs, **gemm_attrs), y_s, y_zp, w.node.output[0])
    else:
        w.add("Gemm", inputs, w.node.output[0], **gemm_attrs)
    return True


# the fewest inputs each reading needs; a node with fewer (or a QLinearConcat without its axis or
# whole triples) is left as it is, for ONNX Runtime to refuse with its own message
LEAST_INPUTS = {"QLinearAdd": 7, "QLinearMul": 7, "QLinearSigmoid": 4, "QLinearLeakyRelu": 4,
                "QLinearGlobalAveragePool": 4, "QLinearAveragePool": 4, "QLinearConcat": 5, "QGemm": 6}


def _well_formed(n: onnx.NodeProto) -> bool:
    if len(n.input) < LEAST_INPUTS[n.op_type]:
        return False
    return n.op_type != "QLinearConcat" or ((len(n.input) - 2) % 3 == 0 and "axis" in _attrs(n))


READINGS = {"QLinearAdd": lambda w: _binary(w, "Add"), "QLinearMul": lambda w: _binary(w, "Mul"),
            "QLinearSigmoid": _unary("Sigmoid"), "QLinearLeakyRelu": _unary("LeakyRelu", alpha=0),
            "QLinearGlobalAveragePool": _global_average_pool, "QLinearAveragePool": _average_pool,
            "QLinearConcat": _concat, "QGemm": _gemm}


def read_contrib_quantized(model: onnx.ModelProto) -> int:
    """Rewrite the main graph's contrib int8 nodes (READINGS) as standard Q/DQ nodes, in place;
    how many were rewritten."""
    g = model.graph
    if not any(n.domain == MS_DOMAIN and n.op_type in READINGS for n in g.node):
        return 0
    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 1)
    inits = {t.name: t for t in g.initializer}
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in [*g.input, *g.value_info]
             if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
    nodes, added, done = [], [], 0
    for n in g.node:
        if n.domain == MS_DOMAIN and n.op_type in READINGS and opset >= 10 and _well_formed(n):
            w = _Writer(n, inits, opset, ranks)
            if READINGS[n.op_type](w):
                nodes += w.nodes
                added += w.new_inits
                done += 1
                continue
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(added)
    if not any(n.domain == MS_DOMAIN for n in g.node):   # the import no longer names the domain
        kept = [i for i in model.opset_import if i.domain != MS_DOMAIN]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return done
