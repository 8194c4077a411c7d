"""precision="int8": a float graph rewritten as the Q/DQ graph a static post-training quantizer
writes, for the int8 rules (fusion/rules/quantized.py) to fuse into int8 ops.

    products     the candidates: convolutions and products (Conv, ConvTranspose, MatMul, Gemm) with a constant
                 float weight
    tensors      which activations are quantized once some products are chosen: each product's
                 input and output (after a ReLU or Clip that alone reads it), and on from there
                 through what the int8 rules run over integers — sums and products of one shape
                 (or of a value per channel),
                 activations (a table of 256), moves (in their input's scale), Concat
    quantize     QuantizeLinear → DequantizeLinear on each of those tensors (uint8, one scale and
                 zero point from its calibrated range); each chosen product's weight int8 per
                 output channel (symmetric: zero point 0, ±127); the bias stays float (the int8
                 ops add it in float; an int32 bias would only round it)

The ranges come from calibration and which products are int8 from the guard (backend/int8.py).
Model outputs stay float: a product that writes one reads int8 and writes float.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import DType, Graph, Node, Value
from ..ir.activations import ACTIVATION_OPS
from ..ir.fused_ops import QUANTIZATION_MOVES, per_channel_of


@dataclass(frozen=True)
class Quantization:
    """One tensor's uint8 quantization: x ≈ (q − zero_point) · scale."""
    scale: float
    zero_point: int

    @classmethod
    def of_range(cls, low: float, high: float) -> "Quantization":
        """The range widened to hold 0 (padding and ReLU's zeros exact), over 256 steps."""
        low, high = min(float(low), 0.0), max(float(high), 0.0)
        scale = float(np.float32((high - low) / 255))
        if not np.isfinite(scale) or scale <= 0:   # a tensor of zeros (or a range of infinities)
            scale = 1.0
        return cls(scale, int(np.clip(np.rint(-low / scale), 0, 255)))

    def round_trip(self, x: np.ndarray) -> np.ndarray:
        """x quantized and dequantized as ONNX does: x / scale in float32, half to even, saturated."""
        scale = np.float32(self.scale)
        q = np.clip(np.rint(np.asarray(x, np.float32) / scale) + self.zero_point, 0, 255)
        return ((q - self.zero_point) * scale).astype(np.float32)


# ---- what can be int8 -----------------------------------------------------------------------------

def weight_axis(node: Node) -> int | None:
    """The axis of output channels of the node's constant weight, where precision="int8" can
    quantize the node: a Conv, a ConvTranspose, a MatMul by a 2-D constant, a Gemm the int8
    product takes."""
    w, bias = node.input(1), node.input(2)
    if w is None or w.const is None or w.dtype != DType.FLOAT or (bias is not None and bias.const is None):
        return None
    if node.op == "Conv" and 3 <= w.const.ndim <= 5:
        return 0
    if (node.op == "ConvTranspose" and 3 <= w.const.ndim <= 5 and node.attr("group", 1) == 1
            and not node.attr("output_shape") and node.attr("auto_pad", "NOTSET") in ("NOTSET", "VALID")):
        return 1   # [C_in, C_out, k…]: what the int8 rule takes (explicit pads, ungrouped per channel)
    if node.op == "MatMul" and w.const.ndim == 2:
        return 1
    if (node.op == "Gemm" and w.const.ndim == 2
            and all(node.attr(k, want) == want for k, want in (("transA", 0), ("alpha", 1.0), ("beta", 1.0)))):
        return 0 if node.attr("transB", 0) else 1
    return None


def products(graph: Graph) -> list[Node]:
    """The nodes precision="int8" may quantize, in graph order (one that writes a model output
    quantizes its input and weight only: the int8 op then writes float)."""
    return [n for n in graph.nodes if weight_axis(n) is not None and _float(n.inputs[0])]


def tensors(graph: Graph, chosen: set[Node]) -> dict[Value, Value]:
    """Each tensor to quantize → the tensor whose range gives its scale (itself, or for a move's
    output its input's), with the chosen products int8. Forward, what can be int8: each product's
    input and output, and the outputs of what runs over integers when its inputs are. Then back,
    what is: a chosen product's input, and the inputs of an int8 op whose output is (so a result
    only float ops read stays float: its product writes float, and nothing rounds it twice)."""
    outputs = {id(v) for v in graph.outputs}
    scaled_by: dict[Value, Value] = {}
    read_from: dict[Value, list[Value]] = {}   # an int8 op's output → the tensors it reads as integers
    for n in graph.nodes:
        x = n.input(0)
        if n in chosen:
            scaled_by.setdefault(x, x)
            y = _after_activation(n, outputs)
            scaled_by[y], read_from[y] = y, []
        elif (n.op in ("Add", "Mul") and len(n.inputs) == 2 and all(v in scaled_by for v in n.inputs)
              and _int8_operands(*n.inputs)):
            y = _after_activation(n, outputs)
            scaled_by[y], read_from[y] = y, list(n.inputs)
        elif n.op in ACTIVATION_OPS and x in scaled_by and all(v.const is not None for v in n.inputs[1:] if v):
            scaled_by[n.outputs[0]], read_from[n.outputs[0]] = n.outputs[0], [x]
        elif n.op in QUANTIZATION_MOVES and x in scaled_by and n.attr("mode", "nearest") == "nearest":
            scaled_by[n.outputs[0]], read_from[n.outputs[0]] = scaled_by[x], [x]
        elif n.op == "Concat" and n.inputs and all(v in scaled_by for v in n.inputs):
            scaled_by[n.outputs[0]], read_from[n.outputs[0]] = n.outputs[0], list(n.inputs)
    needed = {n.input(0) for n in chosen}
    for y in reversed(list(read_from)):   # made in graph order: readers after what they read
        if y in needed:
            needed.update(read_from[y])
    return {v: s for v, s in scaled_by.items() if v in needed and id(v) not in outputs and _float(v)}


def _int8_operands(a: Value, b: Value) -> bool:
    """Operands an int8 sum or product takes: one shape, or one side a value per channel."""
    return a.shape is not None and (a.shape == b.shape or per_channel_of(a, b) or per_channel_of(b, a))


def _after_activation(node: Node, outputs: set[int]) -> Value:
    """The node's output, or the output of the ReLU or Clip (constant bounds) that alone reads it:
    the int8 op applies it before requantizing."""
    y = node.outputs[0]
    if len(y.uses) == 1 and id(y) not in outputs:
        act = y.uses[0][0]
        if act.op == "Relu" or (act.op == "Clip" and all(v.const is not None for v in act.inputs[1:] if v)):
            return act.outputs[0]
    return y


def computes_in_int8(node: Node) -> bool:
    """An int8 op of the fused graph: a Quantized* op, or a move or Concat over 8-bit integers."""
    eight_bit = (DType.UINT8, DType.INT8)
    return node.op_type.startswith("Quantized") or (
        node.op != "QuantizeLinear" and bool(node.inputs) and node.inputs[0] is not None
        and node.inputs[0].dtype in eight_bit and node.outputs[0].dtype in eight_bit)


def _float(v: Value | None) -> bool:
    return v is not None and v.const is None and v.dtype == DType.FLOAT


# ---- the rewrite ----------------------------------------------------------------------------------

def int8_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """w as int8 with one scale per output channel (along axis): symmetric, ±127, half to even."""
    amax = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis)).astype(np.float32)
    scale = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    return np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8), scale


def quantize(graph: Graph, chosen: list[Node], quantizations: dict[Value, Quantization]) -> None:
    """Q → DQ on each tensor (every reader reads the DQ; a model output stays the float tensor)
    and each chosen product's weight as int8 behind a DequantizeLinear."""
    for v, qz in quantizations.items():
        readers = list(v.uses)
        scale = graph.add_constant(graph.fresh_name(f"{v.name}_scale"), np.array(qz.scale, np.float32), DType.FLOAT)
        zero = graph.add_constant(graph.fresh_name(f"{v.name}_zero_point"), np.array(qz.zero_point, np.uint8),
                                  DType.UINT8)
        q = _add(graph, "QuantizeLinear", [v, scale, zero], f"{v.name}_quantize", v.shape, DType.UINT8)
        dq = _add(graph, "DequantizeLinear", [q, scale, zero], f"{v.name}_dequantize", v.shape, DType.FLOAT)
        for reader, i in readers:
            graph.set_input(reader, i, dq)
    for n in chosen:
        w, axis = n.inputs[1], weight_axis(n)
        q, scale = int8_weight(w.const, axis)
        args = [graph.add_constant(graph.fresh_name(f"{w.name}_int8"), q, DType.INT8),
                graph.add_constant(graph.fresh_name(f"{w.name}_scale"), scale, DType.FLOAT),
                graph.add_constant(graph.fresh_name(f"{w.name}_zero_point"), np.zeros(scale.shape, np.int8),
                                   DType.INT8)]
        graph.set_input(n, 1, _add(graph, "DequantizeLinear", args, f"{w.name}_dequantize", w.shape, DType.FLOAT,
                                   {"axis": axis}))


def _add(graph: Graph, op: str, inputs: list[Value], name: str, shape, dtype: DType, attrs=None) -> Value:
    node = graph.add_node(op, inputs, 1, attrs, graph.fresh_name(name))
    node.outputs[0].shape, node.outputs[0].dtype = shape, dtype
    return node.outputs[0]
