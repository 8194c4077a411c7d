"""Quantized (Q/DQ) graphs: the float op between a DequantizeLinear on each operand and a
QuantizeLinear after it, as the int8 op it stands for.

    QuantizedConv(x, w, b, ...)   = Q(act(Conv(DQ(x), DQ(w), b)))        and QuantizedConvTranspose
    QuantizedMatMul(a, b, c, ...) = Q(act(DQ(a)·DQ(b)ᵀ? + c))
    QuantizedAdd(a, b, ...)       = Q(act(DQ(a) + DQ(b)))         and QuantizedMul, with ·
    QuantizedActivation(x, ...)   = Q(act(DQ(x)))                 a table of 256 values
    QuantizedGatedActivation(x)   = QuantizedMul(x, QuantizedActivation(x))   one table too
    MaxPool(x)                    = Q(MaxPool(DQ(x)))   with one scale and zero point, and so for
                                                        Reshape, Transpose, Slice, … (MOVES)
    DQ(Gather(x, i))              = Gather(DQ(x), i)    an embedding table's rows
    Concat(Q(DQ(x1)), …)          = Q(Concat(DQ(x1), …)) each input requantized to the output's scale

and the QOperator format's QLinearConv and QLinearMatMul, which are the first two as one node; and
ONNX Runtime's dynamic quantization of a linear layer:

    DynamicQuantizedMatMul(x, w, ...) = float(MatMulInteger(DynamicQuantizeLinear(x), w))·(scale·w_scale)

A quantizer (ONNX Runtime's `quantize_static`, a framework's QAT export) writes every quantized op
this way: integer tensors flow between them, each op reading them through a DequantizeLinear and
writing through a QuantizeLinear. The int8 op keeps the Q/DQ graph's meaning (ONNX's round half to
even, saturation), so its result is the graph's, exactly where the integer arithmetic allows and
otherwise within one step; the weight stays int8 (its DequantizeLinear is not folded before the
rules run, fusion/pipeline.py) and the bias, an int32 constant dequantized, is folded to float.

An activation's DequantizeLinear read by several ops is copied for each first
(passes/quantization.py), so each op's match owns its copy; the copies left over merge again.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, Node, Value, geometry
from ...ir.activations import ACTIVATION_OPS, activation_of
from ...ir.builder import FUSED_DOMAIN
from ...ir.fused_ops import CONV_TRANSPOSE_ATTRS, QUANTIZATION_MOVES as MOVES, per_channel_of
from ..pattern import Match
from ..rule import Rule, describe, dims
from .conv import activation_problem, conv_geometry, explicit_pads

INTEGER_TYPES = (DType.UINT8, DType.INT8)


# ---- patterns -------------------------------------------------------------------------------

def _dequantized(op, x, scale, zero_point, name):
    return op.DequantizeLinear(x, scale, zero_point, _name=name)


def _conv(op, x, x_scale, w, w_scale, b, x_zero_point, w_zero_point):
    return op.Conv(_dequantized(op, x, x_scale, x_zero_point, "dq_x"),
                   _dequantized(op, w, w_scale, w_zero_point, "dq_w"), b, _name="conv")


def quantized_conv(op, x, x_scale, w, w_scale, y_scale, b=None, x_zero_point=None, w_zero_point=None,
                   y_zero_point=None):
    y = op.Optional.Relu(_conv(op, x, x_scale, w, w_scale, b, x_zero_point, w_zero_point), _name="act")
    return op.QuantizeLinear(y, y_scale, y_zero_point, _name="q")


def quantized_conv_clip(op, x, x_scale, w, w_scale, y_scale, b=None, x_zero_point=None, w_zero_point=None,
                        y_zero_point=None, low=None, high=None):
    y = op.Clip(_conv(op, x, x_scale, w, w_scale, b, x_zero_point, w_zero_point), low, high, _name="act")
    return op.QuantizeLinear(y, y_scale, y_zero_point, _name="q")


# the same products where nothing quantizes their result: int8 in, float out
def float_conv(act: str | None, op_type: str = "Conv"):
    def pattern(op, x, x_scale, w, w_scale, b=None, x_zero_point=None, w_zero_point=None, low=None, high=None):
        y = getattr(op, op_type)(_dequantized(op, x, x_scale, x_zero_point, "dq_x"),
                                 _dequantized(op, w, w_scale, w_zero_point, "dq_w"), b, _name="conv")
        return y if act is None else op.Clip(y, low, high, _name="act") if act == "Clip" else op.Relu(y, _name="act")
    return pattern


def float_product(op_type: str, relu: bool):
    def pattern(op, x, x_scale, w, w_scale, b=None, x_zero_point=None, w_zero_point=None):
        operands = (_dequantized(op, x, x_scale, x_zero_point, "dq_x"), _dequantized(op, w, w_scale, w_zero_point, "dq_w"))
        y = (op.Gemm(*operands, b, _name="product") if op_type == "Gemm" else
             op.MatMul(*operands, _name="product"))
        return op.Relu(y, _name="act") if relu else y
    return pattern


def quantized_conv_transpose(op, x, x_scale, w, w_scale, y_scale, b=None, x_zero_point=None, w_zero_point=None,
                             y_zero_point=None):
    y = op.ConvTranspose(_dequantized(op, x, x_scale, x_zero_point, "dq_x"),
                         _dequantized(op, w, w_scale, w_zero_point, "dq_w"), b, _name="conv")
    return op.QuantizeLinear(op.Optional.Relu(y, _name="act"), y_scale, y_zero_point, _name="q")


def quantized_gemm(op, x, x_scale, w, w_scale, y_scale, b=None, x_zero_point=None, w_zero_point=None,
                   y_zero_point=None):
    y = op.Gemm(_dequantized(op, x, x_scale, x_zero_point, "dq_x"),
                _dequantized(op, w, w_scale, w_zero_point, "dq_w"), b, _name="product")
    return op.QuantizeLinear(op.Optional.Relu(y, _name="act"), y_scale, y_zero_point, _name="q")


def quantized_matmul(op, x, x_scale, w, w_scale, y_scale, x_zero_point=None, w_zero_point=None,
                     y_zero_point=None):
    y = op.MatMul(_dequantized(op, x, x_scale, x_zero_point, "dq_x"),
                  _dequantized(op, w, w_scale, w_zero_point, "dq_w"), _name="product")
    return op.QuantizeLinear(op.Optional.Relu(y, _name="act"), y_scale, y_zero_point, _name="q")


def quantized_binary(op_type: str, clip: bool = False):
    """Q(act(DQ(a) ∘ DQ(b))) for Add or Mul, act a ReLU (or nothing) or a Clip."""
    def pattern(op, a, a_scale, b, b_scale, y_scale, a_zero_point=None, b_zero_point=None, y_zero_point=None,
                low=None, high=None):
        y = getattr(op, op_type)(_dequantized(op, a, a_scale, a_zero_point, "dq_a"),
                                 _dequantized(op, b, b_scale, b_zero_point, "dq_b"), _name="binary")
        y = op.Clip(y, low, high, _name="act") if clip else op.Optional.Relu(y, _name="act")
        return op.QuantizeLinear(y, y_scale, y_zero_point, _name="q")
    return pattern


def quantized_activation(op_type: str, domain: str = ""):
    """Q(act(DQ(x))) for one activation op."""
    def pattern(op, x, x_scale, y_scale, x_zero_point=None, y_zero_point=None):
        y = getattr(op, op_type)(_dequantized(op, x, x_scale, x_zero_point, "dq_x"), _domain=domain, _name="act")
        return op.QuantizeLinear(y, y_scale, y_zero_point, _name="q")
    return pattern


def quantized_clip(op, x, x_scale, y_scale, x_zero_point=None, y_zero_point=None, low=None, high=None):
    y = op.Clip(_dequantized(op, x, x_scale, x_zero_point, "dq_x"), low, high, _name="act")
    return op.QuantizeLinear(y, y_scale, y_zero_point, _name="q")


ACTIVATION_PATTERNS = [*(quantized_activation(a) for a in ACTIVATION_OPS if a != "Clip"), quantized_clip,
                       quantized_activation("Activation", FUSED_DOMAIN), quantized_activation("Gelu", FUSED_DOMAIN)]


def gated_activation(gate_first: bool):
    """QuantizedMul(x, QuantizedActivation(x)) (either order), the product with no clamp of its own."""
    def pattern(op, x, x_scale, g_scale, a_scale, b_scale, y_scale, x_zero_point=None, g_zero_point=None,
                a_zero_point=None, b_zero_point=None, y_zero_point=None):
        gate = op.QuantizedActivation(x, x_scale, x_zero_point, g_scale, g_zero_point, _domain=FUSED_DOMAIN,
                                      _name="gate")
        a, b = (gate, x) if gate_first else (x, gate)
        return op.QuantizedMul(a, b, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point,
                               _domain=FUSED_DOMAIN, _name="product", activation=lambda act: not act)
    return pattern


def dynamic_product(op, q, w, zero_point, scales, w_zero_point=None):
    """ONNX Runtime's dynamic quantization of a linear layer: (q, zero_point) and the scale in
    `scales` = Mul(scale, w_scale) one DynamicQuantizeLinear's outputs (the rule's `applies`
    checks; the scales' Mul is not matched, as products that share it would each need it)."""
    acc = op.MatMulInteger(q, w, zero_point, w_zero_point, _name="product")
    return op.Mul(op.Cast(acc, _name="cast"), scales, _name="scaled")


# the QOperator format: the int8 op as one ONNX node, its bias int32 at x_scale·w_scale

def qlinear_conv(op, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b=None):
    return op.QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b,
                          _name="conv")


def qlinear_matmul(op, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point):
    return op.QLinearMatMul(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                            _name="product")


def gather_of_dequantized(op, x, scale, indices, zero_point=None):
    return op.Gather(_dequantized(op, x, scale, zero_point, "dq_x"), indices, _name="gather")


def moved(op_type: str):
    """Q(op(DQ(x), extra...)); the check asks for one scale and zero point on both sides."""
    def pattern(op, x, x_scale, y_scale, x_zero_point=None, y_zero_point=None, e1=None, e2=None, e3=None, e4=None):
        y = getattr(op, op_type)(_dequantized(op, x, x_scale, x_zero_point, "dq_x"),
                                 *(e1, e2, e3, e4)[:MOVES[op_type]], _name="moved")
        return op.QuantizeLinear(y, y_scale, y_zero_point, _name="q")
    return pattern


def quantized_output(op, y, y_scale, y_zero_point=None):
    """Q(y): a Concat of dequantized inputs is found by the rule's `applies` (the pattern language
    has no variadic op)."""
    return op.QuantizeLinear(y, y_scale, y_zero_point, _name="q")


# ---- checks ---------------------------------------------------------------------------------

def _per_tensor(v: Value | None) -> bool:
    return v is None or (v.const is not None and v.const.size == 1)


def quantization_problem(m: Match) -> str | None:
    """Why the Q/DQ nodes around the op do not describe an int8 op the fused ops take: the
    activations 8-bit, each with one constant scale and zero point; the weight a constant of
    8-bit integers with a scale per tensor or per output channel."""
    why = _eight_bit_per_tensor(m.node("dq_x")) or (m.has("q") and _output_problem(m)) or None
    if why or not m.has("dq_w"):
        return why
    return weight_problem(m.node("dq_w"), m.node("conv") if m.has("conv") else m.node("product"))


def weight_problem(dq_w: Node, op: Node) -> str | None:
    w, scale, zero_point = dq_w.inputs[0], dq_w.inputs[1], dq_w.input(2)
    where = describe(dq_w)
    if dq_w.attr("block_size", 0):
        return f"{where}: blocked quantization (block_size {dq_w.attr('block_size')})"
    if w.const is None or scale.const is None or (zero_point is not None and zero_point.const is None):
        return f"{where}: the weight, its scale and zero point are not all constants"
    if w.dtype not in INTEGER_TYPES:
        return f"{where}: the weight is {w.dtype.name.lower()}; the int8 ops take 8-bit weights"
    channels = _output_channels(op, w)
    if scale.const.size not in (1, channels):
        return f"{where}: {scale.const.size} scales for {channels} output channels"
    if scale.const.size > 1 and _weight_axis(dq_w, w) != _output_axis(op, w):
        return f"{where}: scales along axis {dq_w.attr('axis', 1)}, not the weight's output channels"
    return None


def _output_axis(op: Node, w: Value) -> int:
    """The weight's axis of output channels: a conv's 0, a transposed conv's 1, a MatMul's last,
    a Gemm's by transB."""
    if op.op_type == "Conv":
        return 0
    if op.op_type == "ConvTranspose":
        return 1
    if op.op_type == "Gemm":
        return 0 if op.attr("transB", 0) else 1
    return w.const.ndim - 1


def _output_channels(op: Node, w: Value) -> int:
    return w.const.shape[_output_axis(op, w)]


def _weight_axis(dq_w: Node, w: Value) -> int:
    return dq_w.attr("axis", 1) % w.const.ndim


def check_conv(m: Match) -> str | None:
    return (conv_problem_of_dequantized(m.node("conv")) or quantization_problem(m)
            or (m.has("act") and activation_problem(m.node("act"))) or _bias_problem(m) or None)


def conv_problem_of_dequantized(conv: Node) -> str | None:
    """What conv_problem asks of the geometry (the operands are DequantizeLinear outputs)."""
    if conv.inputs[1].rank is None or not 1 <= conv.inputs[1].rank - 2 <= 3:
        return f"{describe(conv)}: the weight's rank is not that of a 1-D to 3-D convolution"
    if explicit_pads(conv) is None:
        return f"{describe(conv)}: auto_pad needs static input sizes to fix its pads"
    return None


def check_conv_transpose(m: Match) -> str | None:
    """Explicit pads (or VALID), no output_shape; scales per output channel only ungrouped (a
    grouped weight's axis 1 counts the channels of one group)."""
    conv = m.node("conv")
    where = describe(conv)
    if conv.inputs[1].rank is None or not 1 <= conv.inputs[1].rank - 2 <= 3:
        return f"{where}: the weight's rank is not that of a 1-D to 3-D convolution"
    if conv.attr("output_shape") or conv.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"{where}: output_shape or auto_pad SAME_*: explicit pads only"
    if conv.attr("group", 1) != 1 and m.w_scale.const is not None and m.w_scale.const.size > 1:
        return f"{where}: a grouped weight with scales per channel"
    return quantization_problem(m) or _bias_problem(m)


def check_product(m: Match) -> str | None:
    product = m.node("product")
    if product.op_type == "Gemm":
        for attr, want in (("transA", 0), ("alpha", 1.0), ("beta", 1.0)):
            if product.attr(attr, want) != want:
                return f"{describe(product)}: {attr}={product.attr(attr)}; the int8 product takes {want}"
    elif m.w.const is None or m.w.const.ndim != 2:
        return f"{describe(product)}: the weight is not a 2-D constant"
    return quantization_problem(m) or _bias_problem(m)


def _bias_problem(m: Match) -> str | None:
    b = m.values.get("b")
    if b is None or b.const is not None:
        return None
    dq = b.producer
    if dq is None or dq.op_type != "DequantizeLinear" or any(v is not None and v.const is None for v in dq.inputs):
        return f"bias {b.name!r} is not a constant nor a constant dequantized"
    return None


def _eight_bit_per_tensor(dq: Node) -> str | None:
    x = dq.inputs[0]
    if x.dtype not in INTEGER_TYPES or dq.attr("block_size", 0) or not all(_per_tensor(v) for v in dq.inputs[1:]):
        return f"{describe(dq)}: {x.name!r} is not 8-bit integers quantized by one constant scale"
    return None


def check_binary(m: Match) -> str | None:
    """8-bit integers of one shape each side, or one side a value per channel of the other (a
    squeeze-excitation's gate), every scale and zero point one constant."""
    binary = m.node("binary")
    why = _eight_bit_per_tensor(m.node("dq_a")) or _eight_bit_per_tensor(m.node("dq_b")) or _output_problem(m)
    if why:
        return why
    if m.a.shape is None or (m.a.shape != m.b.shape and not per_channel_of(m.a, m.b)
                             and not per_channel_of(m.b, m.a)):
        return (f"{describe(binary)}: operands of shapes {dims(m.a)} and {dims(m.b)}; the int8 ops take one "
                "shape, or one value per channel on one side")
    return m.has("act") and activation_problem(m.node("act")) or None


def check_activation(m: Match) -> str | None:
    """8-bit integers in and out, quantized per tensor: the function is a table of 256."""
    return (_eight_bit_per_tensor(m.node("dq_x")) or _output_problem(m) or activation_problem(m.node("act"))
            or None)


def _output_problem(m: Match) -> str | None:
    q = m.node("q")
    if q.outputs[0].dtype not in INTEGER_TYPES or q.attr("block_size", 0) or not all(_per_tensor(v) for v in q.inputs[1:]):
        return f"{describe(q)}: not an 8-bit quantization by one constant scale"
    return None


def check_qlinear(m: Match) -> str | None:
    """A QLinearConv or QLinearMatMul the int8 ops take: 8-bit types, x and y quantized by one
    constant each, an int8 constant weight with its scales per tensor or per output channel, a
    constant bias; a convolution's pads fixed."""
    node = m.node("conv") if m.has("conv") else m.node("product")
    where = describe(node)
    for v in (m.x, node.outputs[0]):
        if v.dtype not in INTEGER_TYPES:
            return f"{where}: {v.name!r} is not 8-bit integers"
    for v in (m.x_scale, m.x_zero_point, m.y_scale, m.y_zero_point):
        if not _per_tensor(v):
            return f"{where}: {v.name!r} is not one constant; the int8 ops take one per tensor for activations"
    w, scale, zero_point = m.w, m.w_scale, m.w_zero_point
    if w.const is None or w.dtype != DType.INT8 or scale.const is None or zero_point.const is None:
        return f"{where}: the weight, its scale and zero point are not constants of int8"
    channels = w.const.shape[0 if node.op_type == "QLinearConv" else -1]
    if w.const.ndim < 2 or scale.const.size not in (1, channels):
        return f"{where}: {scale.const.size} weight scales for {channels} output channels"
    b = m.values.get("b")
    if b is not None and b.const is None:
        return f"{where}: the bias {b.name!r} is not a constant"
    if node.op_type == "QLinearConv" and _qlinear_pads(node) is None:
        return f"{where}: auto_pad needs static input sizes to fix its pads"
    return None


def _qlinear_pads(conv: Node) -> list[int] | None:
    x, w = conv.inputs[0], conv.inputs[3]
    nd = w.const.ndim - 2
    pads = geometry.explicit_pads(conv.attr("auto_pad", "NOTSET"), conv.attr("pads"),
                                  (x.shape or [None] * (nd + 2))[2:], w.const.shape[2:],
                                  conv.attr("strides") or [1] * nd, conv.attr("dilations") or [1] * nd)
    return pads if pads is not None and all(isinstance(p, int) for p in pads) else None


def check_gather(m: Match) -> str | None:
    dq = m.node("dq_x")
    if not all(_per_tensor(v) for v in dq.inputs[1:]) or dq.attr("block_size", 0):
        return f"{describe(dq)}: scales per axis or block; gathered rows would need their own"
    return None


def applies_concat(m: Match) -> bool:
    """Q(Concat(DQ(x1), DQ(x2), …)), every input dequantized and the Concat read by the Q alone."""
    concat = m.y.producer
    return (concat is not None and concat.op == "Concat" and len(m.y.uses) == 1 and
            all(v.producer is not None and v.producer.op == "DequantizeLinear" for v in concat.inputs))


def check_concat(m: Match) -> str | None:
    return (next((why for v in m.y.producer.inputs if (why := _eight_bit_per_tensor(v.producer))), None)
            or _output_problem(m))


def check_moved(m: Match) -> str | None:
    moved = m.node("moved")
    if moved.op_type == "Resize" and moved.attr("mode", "nearest") != "nearest":
        return f"{describe(moved)}: {moved.attr('mode')} interpolation computes new values"
    why = _eight_bit_per_tensor(m.node("dq_x")) or _output_problem(m)
    if why:
        return why
    if not (_same_constant(m.x_scale, m.y_scale) and _same_constant(m.x_zero_point, m.y_zero_point)
            and m.x.dtype == m.node("q").outputs[0].dtype):
        return f"{describe(moved)}: quantized by another scale or zero point after it than before"
    return None


def _same_constant(a: Value | None, b: Value | None) -> bool:
    """Two per-tensor constants of one value (an omitted zero point is 0)."""
    value = lambda v: 0.0 if v is None else float(v.const.reshape(-1)[0])   # noqa: E731
    return value(a) == value(b)


def applies_moved(m: Match) -> bool:
    """An op whose second output (MaxPool's indices) nobody reads."""
    outputs = m.node("moved").outputs
    return len(outputs) == 1 or not outputs[1].uses


def _weight_scale(m: Match) -> Value | None:
    """w_scale of scales = Mul(scale, w_scale), scale the DynamicQuantizeLinear's."""
    mul, scale = m.scales.producer, m.q.producer.outputs[1]
    if mul is None or mul.op != "Mul" or scale not in mul.inputs:
        return None
    return next((v for v in mul.inputs if v is not scale), scale)


def check_gated(m: Match) -> str | None:
    """The product reads x and the gate by the scales and zero points they were written with."""
    gate_first = m.node("product").inputs[0] is m.node("gate").outputs[0]
    (xs, xz), (gs, gz) = ((m.b_scale, m.b_zero_point), (m.a_scale, m.a_zero_point))[::1 if gate_first else -1]
    if not (_same_constant(xs, m.x_scale) and _same_constant(xz, m.x_zero_point)
            and _same_constant(gs, m.g_scale) and _same_constant(gz, m.g_zero_point)):
        return f"{describe(m.node('product'))}: reads x or its gate by another scale than they were written with"
    return None


def applies_dynamic(m: Match) -> bool:
    """q and its zero point are outputs 0 and 2 of one DynamicQuantizeLinear, its scale (output 1)
    times the weight's is what the float sums are multiplied by, and the Cast is to float32."""
    dq = m.q.producer
    return (dq is not None and dq.op == "DynamicQuantizeLinear" and m.zero_point is dq.outputs[2]
            and m.node("cast").attr("to") == int(DType.FLOAT) and _weight_scale(m) is not None)


def check_dynamic(m: Match) -> str | None:
    """A constant 2-D int8 weight with its scale per tensor or per column and zero point 0."""
    product, w, w_scale, w_zero_point = m.node("product"), m.w, _weight_scale(m), m.w_zero_point
    where = describe(product)
    if w.const is None or w.dtype != DType.INT8 or w.const.ndim != 2:
        return f"{where}: the weight is not a 2-D constant of int8"
    if w_scale.const is None or w_scale.const.size not in (1, w.const.shape[1]):
        return f"{where}: the weight's scale is not a constant per tensor or per column"
    if w_zero_point is not None and (w_zero_point.const is None or w_zero_point.const.size not in (1, w.const.shape[1])):
        return f"{where}: the weight's zero point is not a constant per tensor or per column"
    x = m.q.producer.inputs[0]
    if x.dtype != DType.FLOAT:
        return f"{where}: {x.name!r} is not float32"
    return None


# ---- replacements ---------------------------------------------------------------------------

def folded_bias(op, m: Match) -> Value | None:
    """The bias as float32 constants: a DequantizeLinear of an int32 constant, evaluated here."""
    b = m.values.get("b")
    if b is None or b.const is not None:
        return b
    dq = b.producer
    q, scale = dq.inputs[0].const.astype(np.float64), dq.inputs[1].const.astype(np.float32)
    zero = 0 if dq.input(2) is None else dq.input(2).const.astype(np.float64)
    # ONNX's DequantizeLinear: (q − zero) in int32, times the scale in float32
    values = (q - zero).astype(np.float32) * (scale if scale.size == 1 else scale.reshape(-1))
    return op.constant(values.astype(np.float32), f"{b.name}_folded")


def _quantization_inputs(m: Match) -> tuple:
    """x's, w's and the output's scale and zero point (the output's None: a float result)."""
    dq_x, dq_w = m.node("dq_x"), m.node("dq_w")
    q = m.node("q") if m.has("q") else None
    return (dq_x.inputs[1], dq_x.input(2), dq_w.inputs[1], dq_w.input(2), q and q.inputs[1], q and q.input(2))


def applies_float(m: Match) -> bool:
    """A result no ReLU or Clip alone reads (the pattern with the activation takes that one)."""
    y = (m.node("act") if m.has("act") else m.node("conv") if m.has("conv") else m.node("product")).outputs[0]
    return m.has("act") or not (len(y.uses) == 1 and y.uses[0][0].op in ("Relu", "Clip"))


def _activation(m: Match) -> dict:
    return activation_of(m.node("act")) if m.has("act") else {}


def replace_conv(op, m: Match) -> Value:
    return op.QuantizedConv(m.x, m.w, folded_bias(op, m), *_quantization_inputs(m), axis=0,
                            **conv_geometry(m.node("conv")), **_activation(m))


def replace_conv_transpose(op, m: Match) -> Value:
    conv = m.node("conv")
    return op.QuantizedConvTranspose(m.x, m.w, folded_bias(op, m), *_quantization_inputs(m), axis=1,
                                     **{k: v for k, v in conv.attrs.items() if k in CONV_TRANSPOSE_ATTRS},
                                     **_activation(m))


def check_float_conv(m: Match) -> str | None:
    return (check_conv_transpose if m.node("conv").op_type == "ConvTranspose" else check_conv)(m)


def replace_float_conv(op, m: Match) -> Value:
    return (replace_conv_transpose if m.node("conv").op_type == "ConvTranspose" else replace_conv)(op, m)


def replace_product(op, m: Match) -> Value:
    product = m.node("product")
    trans_b = int(product.op_type == "Gemm" and product.attr("transB", 0))
    return op.QuantizedMatMul(m.x, m.w, folded_bias(op, m), *_quantization_inputs(m),
                              axis=_output_axis(product, m.w), trans_b=trans_b, **_activation(m))


def replace_binary(op, m: Match) -> Value:
    """The full-shape operand first (a per-channel one second: Add and Mul commute, exactly)."""
    dq_a, dq_b, q = m.node("dq_a"), m.node("dq_b"), m.node("q")
    if per_channel_of(m.b, m.a):
        dq_a, dq_b = dq_b, dq_a
    fused = getattr(op, f"Quantized{m.node('binary').op_type}")
    return fused(dq_a.inputs[0], dq_b.inputs[0], dq_a.inputs[1], dq_a.input(2), dq_b.inputs[1], dq_b.input(2),
                 q.inputs[1], q.input(2), **_activation(m))


def replace_activation(op, m: Match) -> Value:
    dq_x, q = m.node("dq_x"), m.node("q")
    return op.QuantizedActivation(m.x, dq_x.inputs[1], dq_x.input(2), q.inputs[1], q.input(2), **_activation(m))


def replace_qlinear_conv(op, m: Match) -> Value:
    conv = m.node("conv")
    b = m.values.get("b")
    if b is not None:   # the int32 bias in float: B·x_scale·w_scale, as the Q/DQ form holds it
        scale = np.float32(m.x_scale.const.reshape(-1)[0]) * m.w_scale.const.astype(np.float32).reshape(-1)
        b = op.constant((b.const.astype(np.float64) * scale).astype(np.float32), f"{b.name}_dequantized")
    attrs = {k: conv.attrs[k] for k in ("dilations", "group", "strides") if k in conv.attrs}
    return op.QuantizedConv(m.x, m.w, b, m.x_scale, m.x_zero_point, m.w_scale, m.w_zero_point, m.y_scale,
                            m.y_zero_point, axis=0, pads=_qlinear_pads(conv), **attrs)


def replace_qlinear_matmul(op, m: Match) -> Value:
    return op.QuantizedMatMul(m.x, m.w, None, m.x_scale, m.x_zero_point, m.w_scale, m.w_zero_point, m.y_scale,
                              m.y_zero_point, axis=m.w.const.ndim - 1, trans_b=0)


def replace_gated(op, m: Match) -> Value:
    gate = m.node("gate")
    return op.QuantizedGatedActivation(m.x, m.x_scale, m.x_zero_point, m.g_scale, m.g_zero_point, m.y_scale,
                                       m.y_zero_point, **{k: gate.attrs[k] for k in gate.attrs})


def replace_dynamic(op, m: Match) -> Value:
    return op.DynamicQuantizedMatMul(m.q.producer.inputs[0], m.w, _weight_scale(m), m.w_zero_point)


def replace_gather(op, m: Match) -> Value:
    dq, gather = m.node("dq_x"), m.node("gather")
    rows = op.Gather(m.x, m.indices, _domain="", **gather.attrs)
    return op.DequantizeLinear(rows, dq.inputs[1], dq.input(2), _domain="", **dq.attrs)


def replace_concat(op, m: Match) -> Value:
    """Concat(Q(DQ(x1)), Q(DQ(x2)), …) with the output's scale: each input requantized (a table of
    256, or as it is where its scale is the output's), then concatenated as integers."""
    concat, q = m.y.producer, m.node("q")
    parts = []
    for v in concat.inputs:
        dq = v.producer
        x = dq.inputs[0]
        same = (_same_constant(dq.inputs[1], q.inputs[1]) and _same_constant(dq.input(2), q.input(2))
                and x.dtype == q.outputs[0].dtype)
        parts.append(x if same else op.QuantizedActivation(x, dq.inputs[1], dq.input(2), q.inputs[1], q.input(2)))
    return op.Concat(*parts, _domain="", **concat.attrs)


def replace_moved(op, m: Match) -> Value:
    moved = m.node("moved")
    return getattr(op, moved.op_type)(m.x, *moved.inputs[1:], _domain="", **moved.attrs)


RULES = [
    Rule("QuantizedConvFusionOp", 1,
         "DequantizeLinear → Conv (+Relu/Clip) → QuantizeLinear → QuantizedConv: an int8 convolution, "
         "its output requantized",
         [quantized_conv, quantized_conv_clip], replace_conv, check_conv, named_after="conv"),
    Rule("QuantizedConvTransposeFusionOp", 1,
         "DequantizeLinear → ConvTranspose (+Relu) → QuantizeLinear → QuantizedConvTranspose: an int8 transposed "
         "convolution, its output requantized",
         [quantized_conv_transpose], replace_conv_transpose, check_conv_transpose, named_after="conv"),
    Rule("QuantizedMatMulFusionOp", 1,
         "DequantizeLinear → Gemm/MatMul (+Relu) → QuantizeLinear → QuantizedMatMul: an int8 product, "
         "its output requantized",
         [quantized_gemm, quantized_matmul], replace_product, check_product, named_after="product"),
    Rule("QLinearConvFusionOp", 1, "QLinearConv (the QOperator format) → QuantizedConv: the same int8 convolution",
         [qlinear_conv], replace_qlinear_conv, check_qlinear, named_after="conv"),
    Rule("QLinearMatMulFusionOp", 1, "QLinearMatMul with a constant weight → QuantizedMatMul",
         [qlinear_matmul], replace_qlinear_matmul, check_qlinear, named_after="product"),
    Rule("DynamicQuantizedMatMulFusionOp", 1,
         "DynamicQuantizeLinear → MatMulInteger → Cast → Mul(scale·w_scale) → DynamicQuantizedMatMul: a "
         "linear layer of ONNX Runtime's dynamic quantization, its input quantized on each call",
         [dynamic_product], replace_dynamic, check_dynamic, applies_dynamic, named_after="product"),
    Rule("QuantizedConvFloatFusionOp", 1,
         "DequantizeLinear → Conv/ConvTranspose (+Relu/Clip) with no QuantizeLinear after → QuantizedConv/"
         "QuantizedConvTranspose writing float: int8 products, the result as the graph has it",
         [float_conv(act) for act in ("Relu", "Clip", None)] + [float_conv(act, "ConvTranspose") for act in ("Relu", None)],
         replace_float_conv, check_float_conv, applies_float, named_after="conv"),
    Rule("QuantizedMatMulFloatFusionOp", 1,
         "DequantizeLinear → Gemm/MatMul (+Relu) with no QuantizeLinear after → QuantizedMatMul writing float",
         [float_product(op_type, relu) for op_type in ("Gemm", "MatMul") for relu in (True, False)], replace_product,
         check_product, applies_float,
         named_after="product"),
    Rule("QuantizedAddFusionOp", 1,
         "DequantizeLinear ×2 → Add (+Relu/Clip) → QuantizeLinear → QuantizedAdd: a residual's sum in one "
         "pass over the integers",
         [quantized_binary("Add"), quantized_binary("Add", clip=True)], replace_binary, check_binary,
         named_after="binary"),
    Rule("QuantizedMulFusionOp", 1,
         "DequantizeLinear ×2 → Mul (+Relu/Clip) → QuantizeLinear → QuantizedMul: a product in one pass over "
         "the integers (x·sigmoid(x))",
         [quantized_binary("Mul"), quantized_binary("Mul", clip=True)], replace_binary, check_binary,
         named_after="binary"),
    Rule("QuantizedActivationFusionOp", 1,
         "DequantizeLinear → activation → QuantizeLinear → QuantizedActivation: a table of its 256 results",
         ACTIVATION_PATTERNS, replace_activation, check_activation, named_after="act"),
    Rule("QuantizedGatedActivationFusionOp", 1,
         "QuantizedMul(x, QuantizedActivation(x)) → QuantizedGatedActivation: x times a function of x (SiLU, "
         "x·hardsigmoid(x)) as one table of 256",
         [gated_activation(True), gated_activation(False)], replace_gated, check_gated, named_after="product"),
    Rule("QuantizedGatherFusionOp", 1,
         "Gather of a DequantizeLinear → the Gather over the integers, dequantized after: a quantized "
         "embedding table is never dequantized whole",
         [gather_of_dequantized], replace_gather, check_gather, named_after="gather"),
    Rule("QuantizedConcatFusionOp", 1,
         "DequantizeLinear ×n → Concat → QuantizeLinear → each input requantized to the output's scale, "
         "concatenated as integers",
         [quantized_output], replace_concat, check_concat, applies_concat, named_after="q"),
    Rule("QuantizedMoveFusionOp", 1,
         "DequantizeLinear → MaxPool/Reshape/Transpose/Slice/… → QuantizeLinear with one scale → the op over "
         "the integers",
         [moved(op_type) for op_type in MOVES], replace_moved, check_moved, applies_moved, named_after="moved"),
]
