"""Elementwise and broadcasting ops, comparisons, casts and linear quantization."""
from __future__ import annotations

from ..attributes import opset_of
from ..dims import broadcast_shapes
from ..dtypes import DType
from ..graph import Node
from ..ops import OpClass, OpDef, register

E, B, O = OpClass.ELEMWISE, OpClass.BROADCAST, OpClass.OPAQUE


def same_as_input(node: Node):
    x = node.inputs[0]
    return [(x.shape, x.dtype)]


for _name in ["Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
              "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil",
              "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
              "Acosh", "Atanh", "Sign", "Softplus", "Softsign", "Mish", "Gelu", "ThresholdedRelu",
              "Shrink", "Identity", "Clip", "BitwiseNot", "Swish", "SwiGLU"]:
    register(OpDef(_name, E, same_as_input))
register(OpDef("BatchNormalization", B, same_as_input))     # per-channel affine at inference


def _dropout(node: Node):
    """The output and its mask: bool from opset 10, of x's type before."""
    x = node.inputs[0]
    return [(x.shape, x.dtype), (x.shape, DType.BOOL if opset_of(node) >= 10 else x.dtype)]


register(OpDef("Dropout", E, _dropout))


def _bool_unary(node: Node):
    return [(node.inputs[0].shape, DType.BOOL)]


for _name in ["Not", "IsNaN", "IsInf"]:
    register(OpDef(_name, E, _bool_unary))


def broadcast(node: Node):
    ins = [v for v in node.inputs if v is not None]
    return [(broadcast_shapes(*(v.shape for v in ins)), ins[0].dtype)]


for _name, _comm in [("Add", True), ("Sub", False), ("Mul", True), ("Div", False), ("Pow", False),
                     ("Max", True), ("Min", True), ("Sum", True), ("Mean", True), ("Mod", False),
                     ("PRelu", False), ("BitShift", False), ("BitwiseAnd", True),
                     ("BitwiseOr", True), ("BitwiseXor", True)]:
    register(OpDef(_name, B, broadcast, commutative=_comm))


def _compare(node: Node):
    return [(broadcast_shapes(*(v.shape for v in node.inputs if v is not None)), DType.BOOL)]


for _name, _comm in [("Equal", True), ("Less", False), ("Greater", False),
                     ("LessOrEqual", False), ("GreaterOrEqual", False),
                     ("And", True), ("Or", True), ("Xor", True)]:
    register(OpDef(_name, B, _compare, commutative=_comm))
del _name, _comm


def _where(node: Node):
    return [(broadcast_shapes(*(v.shape for v in node.inputs)), node.inputs[1].dtype)]


register(OpDef("Where", B, _where))


def _cast(node: Node):
    return [(node.inputs[0].shape, DType(node.attrs["to"]))]


register(OpDef("Cast", E, _cast))
register(OpDef("CastLike", E, lambda n: [(n.inputs[0].shape, n.inputs[1].dtype)]))


def _bitcast(node: Node):
    return [(node.inputs[0].shape, DType(node.attrs["to"]))]


register(OpDef("BitCast", E, _bitcast))


# ---- linear quantization ---------------------------------------------------------------------
def _quantize_linear(node: Node):
    """x's shape, in the zero point's type, else output_dtype, else uint8."""
    zp = node.input(2)
    dtype = zp.dtype if zp is not None else DType(node.attr("output_dtype") or DType.UINT8)
    return [(node.inputs[0].shape, dtype)]


def _dequantize_linear(node: Node):
    """x's shape, in output_dtype, else the scale's type."""
    out = node.attr("output_dtype")
    return [(node.inputs[0].shape, DType(out) if out else node.inputs[1].dtype)]


def _dynamic_quantize_linear(node: Node):
    return [(node.inputs[0].shape, DType.UINT8), ((), DType.FLOAT), ((), DType.UINT8)]


register(OpDef("QuantizeLinear", B, _quantize_linear))
register(OpDef("DequantizeLinear", B, _dequantize_linear))
register(OpDef("DynamicQuantizeLinear", O, _dynamic_quantize_linear))
