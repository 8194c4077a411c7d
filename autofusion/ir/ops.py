"""The op table: one entry per operator — its fusion class and its shape/dtype rule.

Kernels live in per-backend tables (backend/torch_cpu/) keyed by the same names, so a new
backend adds a table and touches no op definition. Derived sets (e.g. all elementwise ops) are
computed from this table, never kept by hand.

A shape rule takes the node and returns one (shape, dtype) per output, or None where it cannot
tell (the importer's ONNX shape inference has already annotated imported graphs; rules exist so
passes can type the nodes they create).
"""
from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from .dtypes import DType
from .graph import Dim, Node, Shape, Value, op_key


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


# ---- shape/dtype rules ------------------------------------------------------------------

def broadcast_shapes(*shapes: Shape) -> Shape:
    """Numpy broadcasting over possibly symbolic shapes; None where it cannot be known."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if not dims:
            out.append(1)
        elif len(dims) == 1:
            out.append(dims.pop())
        else:
            static = {d for d in dims if isinstance(d, int)}
            if len(static) > 1:
                raise ValueError(f"shapes {shapes} do not broadcast")
            out.append(static.pop() if static else None)
    return tuple(out)


def _same_as_input(node: Node):
    x = node.inputs[0]
    return [(x.shape, x.dtype)]


def _broadcast(node: Node):
    ins = [v for v in node.inputs if v is not None]
    return [(broadcast_shapes(*(v.shape for v in ins)), ins[0].dtype)]


def _compare(node: Node):
    return [(broadcast_shapes(*(v.shape for v in node.inputs if v is not None)), DType.BOOL)]


def _where(node: Node):
    return [(broadcast_shapes(*(v.shape for v in node.inputs)), node.inputs[1].dtype)]


def _cast(node: Node):
    return [(node.inputs[0].shape, DType(node.attrs["to"]))]


def _bool_unary(node: Node):
    return [(node.inputs[0].shape, DType.BOOL)]


def _transpose(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    perm = node.attrs.get("perm") or list(range(len(x.shape)))[::-1]
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


def matmul_shape(a: Shape, b: Shape) -> Shape:
    """The shape of numpy's matmul(a, b); None where it cannot be known."""
    if a is None or b is None or not a or not b:
        return None
    sa, sb = list(a), list(b)
    squeeze_a, squeeze_b = len(sa) == 1, len(sb) == 1
    if squeeze_a:
        sa = [1] + sa
    if squeeze_b:
        sb = sb + [1]
    batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    out = list(batch or ()) + ([] if squeeze_a else [sa[-2]]) + ([] if squeeze_b else [sb[-1]])
    return tuple(out) if batch is not None else None


def _matmul(node: Node):
    a, b = node.inputs[0], node.inputs[1]
    return [(matmul_shape(a.shape, b.shape), a.dtype)]


def _expand(node: Node):
    x, shape = node.inputs[0], node.inputs[1]
    if shape.const is None:
        return [(None, x.dtype)]
    return [(broadcast_shapes(x.shape, tuple(int(d) for d in shape.const.reshape(-1))), x.dtype)]


def shape_value(v: Value | None, depth: int = 0) -> list[Dim] | None:
    """The value of a 1-D integer tensor that holds dims, as dims (ints, symbolic names, None
    where unknown), when it is computed the way exporters build reshape targets: a Concat of
    constants and of dims picked (Gather, Slice) out of a Shape. None if it is computed any
    other way."""
    if v is None or depth > 16:
        return None
    if v.const is not None:
        c = v.const
        return [int(d) for d in c.reshape(-1)] if c.dtype.kind in "iu" and c.ndim <= 1 else None
    node = v.producer
    if node is None or node.domain or (v.rank is not None and v.rank > 1):
        return None
    op, src = node.op_type, node.inputs[0]
    if op == "Shape":
        return None if src.shape is None else list(src.shape[node.attr("start", 0):node.attr("end")])
    if op in ("Cast", "Identity", "Squeeze", "Unsqueeze"):   # a scalar dim ↔ a 1-element list
        return shape_value(src, depth + 1)
    if op == "Concat":
        parts = [shape_value(i, depth + 1) for i in node.inputs]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    picked = shape_value(src, depth + 1) if op in ("Gather", "Slice") else None
    if picked is None or any(i is not None and i.const is None for i in node.inputs[1:]):
        return None
    if op == "Gather" and node.attr("axis", 0) == 0:
        idx = node.inputs[1].const.reshape(-1).tolist()
        return [picked[i] for i in idx] if all(-len(picked) <= i < len(picked) for i in idx) else None
    if op == "Slice" and len(node.inputs) >= 3:
        start, end, *rest = (None if i is None else int(i.const.reshape(-1)[0]) for i in node.inputs[1:])
        if rest and rest[0] not in (None, 0, -1):
            return None
        return picked[start:end:rest[1] if len(rest) > 1 and rest[1] is not None else 1]
    return None


def _reshape(node: Node):
    x = node.inputs[0]
    dims = shape_value(node.inputs[1])
    if dims is None:
        return [(None, x.dtype)]
    if not node.attrs.get("allowzero", 0):
        for i, d in enumerate(dims):
            if d == 0:   # 0 copies the input's dim
                dims[i] = x.shape[i] if x.shape is not None and i < len(x.shape) else None
    if -1 in dims:
        k = dims.index(-1)
        dims[k] = inferred_dim(x.shape, dims[:k] + dims[k + 1:])
    return [(tuple(dims), x.dtype)]


def inferred_dim(total: Shape, others: list[Dim]) -> Dim:
    """The dim a Reshape's -1 stands for: the element count of `total` over that of `others`,
    cancelling symbolic dims (x [b, s, 768] viewed as [b, -1, 12, 64] gives s)."""
    if total is None or None in total or None in others:
        return None
    num, den = Counter(d for d in total if isinstance(d, str)), Counter(d for d in others if isinstance(d, str))
    if den - num:
        return None
    left = num - den
    n = math.prod(d for d in total if isinstance(d, int))
    m = math.prod(d for d in others if isinstance(d, int))
    if m == 0 or n % m:
        return None
    if not left:
        return n // m
    return next(iter(left)) if n == m and sum(left.values()) == 1 else None


def _shape_op(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [((None,), DType.INT64)]
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    return [((len(x.shape[start:end]),), DType.INT64)]


# ---- the table ----------------------------------------------------------------------------
E, B, I, R, C, O = (OpClass.ELEMWISE, OpClass.BROADCAST, OpClass.INJECTIVE, OpClass.REDUCTION,
                    OpClass.COMPLEX, OpClass.OPAQUE)

for _name in ["Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
              "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil",
              "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
              "Acosh", "Atanh", "Sign", "Softplus", "Softsign", "Mish", "Gelu", "ThresholdedRelu",
              "Shrink", "Identity", "Dropout", "Clip"]:
    register(OpDef(_name, E, _same_as_input))
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
register(OpDef("BatchNormalization", B))     # per-channel affine at inference

for _name in ["Transpose"]:
    register(OpDef(_name, I, _transpose))
register(OpDef("Expand", I, _expand))
register(OpDef("Reshape", I, _reshape))
for _name in ["Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather",
              "GatherElements", "GatherND", "Tile", "Pad", "DepthToSpace",
              "SpaceToDepth", "Trilu", "ScatterElements", "ScatterND", "ReverseSequence",
              "Resize", "Upsample"]:
    register(OpDef(_name, I))

for _name in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "Softmax",
              "LogSoftmax", "Hardmax", "LayerNormalization", "GroupNormalization",
              "InstanceNormalization", "LpNormalization", "MeanVarianceNormalization",
              "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "CumSum", "ArgMax", "ArgMin"]:
    register(OpDef(_name, R))

for _name in ["Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "MaxPool", "AveragePool",
              "LpPool"]:
    register(OpDef(_name, C, _matmul if _name == "MatMul" else None))

for _name in ["Shape", "Size", "Constant", "ConstantOfShape", "Range", "TopK", "NonZero",
              "EyeLike", "OneHot", "Compress", "Unique"]:
    register(OpDef(_name, O, _shape_op if _name == "Shape" else None))

register(OpDef("NegativeLogLikelihoodLoss", R))
register(OpDef("SoftmaxCrossEntropyLoss", R))

del _name, _comm
