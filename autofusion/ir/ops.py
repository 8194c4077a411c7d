"""The op table: one entry per operator — its fusion class and its shape/dtype rule (the rules
are in shapes.py).

Kernels live in per-backend tables (backend/torch_cpu/) keyed by the same names, so a new
backend adds a table and touches no op definition. Derived sets (e.g. all elementwise ops) are
computed from this table, never kept by hand.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from .dtypes import DType
from .graph import Node, Shape, op_key
from .shapes import (_arg_reduce, _bool_unary, _broadcast, _cast, _compare, _concat,
                     _constant_of_shape, _conv, _conv_transpose, _depth_to_space, _dropout,
                     _expand, _eye_like, _flatten, _gather, _gather_elements, _gather_nd,
                     _global_pool, _gemm, _layer_norm, _matmul, _non_zero, _one_hot, _pad, _pool,
                     _range, _reduce, _reshape, _resize, _same_as_input, _shape_op,
                     _space_to_depth, _split, _slice, _squeeze, _tile, _topk, _transpose,
                     _unsqueeze, _where)
from .shapes import (_affine_grid, _attention, _bitcast, _causal_conv_with_state, _center_crop_pad,
                     _col2im, _deform_conv, _dequantize_linear, _det, _dft,
                     _dynamic_quantize_linear, _grid_sample, _integer_product, _linear_attention,
                     _max_unpool, _mel_weight_matrix, _non_max_suppression, _quantize_linear,
                     _recurrent, _roi_align, _stft, _tfidf_vectorizer, _window)


class OpClass(enum.IntEnum):
    """Fusion class, ordered as in TVM: the class of a fused group is the max of its members."""
    ELEMWISE = 0     # same-shape, one output element from the same input element
    BROADCAST = 1    # elementwise with numpy broadcasting
    INJECTIVE = 2    # each output element reads one input element (reshape, transpose, gather…)
    REDUCTION = 3    # reduces along axes (softmax, reduce*, norms)
    COMPLEX = 4      # heavy op with a fusable elementwise epilogue (conv, matmul, gemm)
    OPAQUE = 5       # cannot join a fused region (shape ops, control, data-dependent shapes)


TypeRule = Callable[[Node], "list[tuple[Shape, DType | None]] | None"]


@dataclass(frozen=True)
class OpDef:
    name: str
    op_class: OpClass
    infer: TypeRule | None = None
    domain: str = ""
    commutative: bool = False
    doc: str = field(default="", compare=False)


OPS: dict[str, OpDef] = {}


def register(opdef: OpDef, *, replace: bool = False) -> OpDef:
    key = op_key(opdef.domain, opdef.name)
    if key in OPS and not replace:
        raise ValueError(f"operator {key} is already in the op table")
    OPS[key] = opdef
    return opdef


def lookup(domain: str, op_type: str) -> OpDef | None:
    return OPS.get(op_key(domain, op_type))


def ops_of_class(cls: OpClass) -> frozenset[str]:
    return frozenset(k for k, d in OPS.items() if d.op_class == cls)



# ---- the table ----------------------------------------------------------------------------
E, B, I, R, C, O = (OpClass.ELEMWISE, OpClass.BROADCAST, OpClass.INJECTIVE, OpClass.REDUCTION,
                    OpClass.COMPLEX, OpClass.OPAQUE)

for _name in ["Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
              "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil",
              "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
              "Acosh", "Atanh", "Sign", "Softplus", "Softsign", "Mish", "Gelu", "ThresholdedRelu",
              "Shrink", "Identity", "Clip"]:
    register(OpDef(_name, E, _same_as_input))
register(OpDef("Dropout", E, _dropout))
for _name in ["Not"]:
    register(OpDef(_name, E, _bool_unary))
for _name in ["IsNaN", "IsInf"]:
    register(OpDef(_name, E, _bool_unary))
for _name, _comm in [("Add", True), ("Sub", False), ("Mul", True), ("Div", False), ("Pow", False),
                     ("Max", True), ("Min", True), ("Sum", True), ("Mean", True), ("Mod", False),
                     ("PRelu", False), ("BitShift", False), ("BitwiseAnd", True),
                     ("BitwiseOr", True), ("BitwiseXor", True)]:
    register(OpDef(_name, B, _broadcast, commutative=_comm))
register(OpDef("BitwiseNot", E, _same_as_input))
for _name, _comm in [("Equal", True), ("Less", False), ("Greater", False),
                     ("LessOrEqual", False), ("GreaterOrEqual", False),
                     ("And", True), ("Or", True), ("Xor", True)]:
    register(OpDef(_name, B, _compare, commutative=_comm))
register(OpDef("Where", B, _where))
register(OpDef("Cast", E, _cast))
register(OpDef("CastLike", E, lambda n: [(n.inputs[0].shape, n.inputs[1].dtype)]))
register(OpDef("BatchNormalization", B, _same_as_input))     # per-channel affine at inference

for _name in ["Transpose"]:
    register(OpDef(_name, I, _transpose))
register(OpDef("Expand", I, _expand))
register(OpDef("Reshape", I, _reshape))
for _name, _rule in [("Flatten", _flatten), ("Squeeze", _squeeze), ("Unsqueeze", _unsqueeze),
                     ("Concat", _concat), ("Split", _split), ("Slice", _slice), ("Gather", _gather),
                     ("GatherElements", _gather_elements), ("GatherND", _gather_nd),
                     ("Tile", _tile), ("Pad", _pad), ("DepthToSpace", _depth_to_space),
                     ("SpaceToDepth", _space_to_depth), ("Trilu", _same_as_input),
                     ("ScatterElements", _same_as_input), ("ScatterND", _same_as_input),
                     ("ReverseSequence", _same_as_input), ("Resize", _resize),
                     ("Upsample", _resize)]:
    register(OpDef(_name, I, _rule))

# axes move from attribute to input at opset 13 for ReduceSum, 18 for the others
for _name in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]:
    register(OpDef(_name, R, _reduce(13 if _name == "ReduceSum" else 18)))
for _name, _rule in [("Softmax", _same_as_input), ("LogSoftmax", _same_as_input),
                     ("Hardmax", _same_as_input), ("LayerNormalization", _layer_norm),
                     ("GroupNormalization", _same_as_input),
                     ("InstanceNormalization", _same_as_input),
                     ("LpNormalization", _same_as_input),
                     ("MeanVarianceNormalization", _same_as_input),
                     ("GlobalAveragePool", _global_pool), ("GlobalMaxPool", _global_pool),
                     ("GlobalLpPool", _global_pool), ("CumSum", _same_as_input),
                     ("ArgMax", _arg_reduce), ("ArgMin", _arg_reduce)]:
    register(OpDef(_name, R, _rule))

for _name, _rule in [("Conv", _conv), ("ConvTranspose", _conv_transpose), ("MatMul", _matmul),
                     ("Gemm", _gemm), ("Einsum", None), ("MaxPool", _pool),
                     ("AveragePool", _pool), ("LpPool", _pool)]:
    register(OpDef(_name, C, _rule))

for _name, _rule in [("Shape", _shape_op), ("Size", lambda n: [((), DType.INT64)]),
                     ("Constant", None), ("ConstantOfShape", _constant_of_shape),
                     ("Range", _range), ("TopK", _topk), ("NonZero", _non_zero),
                     ("EyeLike", _eye_like), ("OneHot", _one_hot), ("Compress", None),
                     ("Unique", None)]:
    register(OpDef(_name, O, _rule))

register(OpDef("NegativeLogLikelihoodLoss", R))
register(OpDef("SoftmaxCrossEntropyLoss", R))

del _name, _comm, _rule

# recurrent layers: the whole time loop is one opaque op
for _op in ["LSTM", "GRU", "RNN"]:
    register(OpDef(_op, O, _recurrent))

# the transformer ops of opsets 23-27
register(OpDef("Attention", C, _attention))
register(OpDef("RMSNormalization", R, _same_as_input))
register(OpDef("RotaryEmbedding", I, _same_as_input))
register(OpDef("LinearAttention", O, _linear_attention))
register(OpDef("CausalConvWithState", O, _causal_conv_with_state))

# linear quantization and the integer ops
register(OpDef("QuantizeLinear", B, _quantize_linear))
register(OpDef("DequantizeLinear", B, _dequantize_linear))
register(OpDef("DynamicQuantizeLinear", O, _dynamic_quantize_linear))
register(OpDef("MatMulInteger", C, _integer_product(0, 1, None)))
register(OpDef("ConvInteger", C, _integer_product(0, 1, None, conv=True)))
register(OpDef("QLinearMatMul", C, _integer_product(0, 3, 7)))
register(OpDef("QLinearConv", C, _integer_product(0, 3, 7, conv=True)))

# numeric ops of the newer opsets
for _op in ["Swish", "SwiGLU"]:
    register(OpDef(_op, E, _same_as_input))
register(OpDef("CumProd", R, _same_as_input))
register(OpDef("Det", R, _det))
register(OpDef("BitCast", E, _bitcast))

# placing values by index
for _op, _rule in [("Scatter", _same_as_input), ("TensorScatter", _same_as_input),
                   ("CenterCropPad", _center_crop_pad), ("MaxUnpool", _max_unpool)]:
    register(OpDef(_op, I, _rule))

# signal processing
for _op in ["HannWindow", "HammingWindow", "BlackmanWindow"]:
    register(OpDef(_op, O, _window))
for _op, _rule in [("MelWeightMatrix", _mel_weight_matrix), ("DFT", _dft), ("STFT", _stft)]:
    register(OpDef(_op, O, _rule))

# text features
register(OpDef("TfIdfVectorizer", O, _tfidf_vectorizer))

# vision
register(OpDef("LRN", R, _same_as_input))
for _op, _rule in [("GridSample", _grid_sample), ("AffineGrid", _affine_grid), ("Col2Im", _col2im)]:
    register(OpDef(_op, I, _rule))
for _op, _rule in [("RoiAlign", _roi_align), ("DeformConv", _deform_conv),
                   ("NonMaxSuppression", _non_max_suppression)]:
    register(OpDef(_op, O, _rule))
del _op, _rule

# tensor sequences (ir/sequences.py: which values are sequences, and what they hold)
from .sequences import concat_from_sequence, no_tensor_outputs, sequence_at, sequence_length  # noqa: E402
for _op, _rule in [("SequenceEmpty", no_tensor_outputs), ("SequenceConstruct", no_tensor_outputs),
                   ("SequenceInsert", no_tensor_outputs), ("SequenceErase", no_tensor_outputs),
                   ("SplitToSequence", no_tensor_outputs), ("SequenceMap", no_tensor_outputs),
                   ("SequenceAt", sequence_at), ("SequenceLength", sequence_length),
                   ("ConcatFromSequence", concat_from_sequence)]:
    register(OpDef(_op, O, _rule))
del _op, _rule
