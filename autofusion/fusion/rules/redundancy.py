"""Redundancy elimination: operators that compute nothing, or that a neighbour undoes.

Transpose∘Transpose is one Transpose (none when the permutations cancel), Reshape∘Reshape the
last Reshape, Squeeze∘Unsqueeze over the same axes nothing; Identity, inference Dropout, a Cast
to the type it already has and a Reshape to the shape it already has are nothing. They run
first, so the other families see clean chains. A removal that leaves a graph output to an
existing value gets an Identity from the driver (outputs keep their names), and that Identity
stays. Constant folding, dead code and common subexpressions are passes (passes/cleanup.py).
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, Node
from ...ir.dims import shape_value
from ...ir.symbolic import is_size
from ..pattern import attr_value
from ..rule import Rule, describe


# ---- Transpose(Transpose(x, p), q) = Transpose(x, p∘q) ----------------------------------

def transpose_transpose(op, x):
    return op.Transpose(op.Transpose(x, _name="first"), _name="second")


def permutation(node: Node, rank: int | None) -> list[int] | None:
    perm = attr_value(node, "perm")
    if perm:
        return list(perm)
    return None if rank is None else list(reversed(range(rank)))   # the default reverses


def transpose_transpose_check(m):
    if m.x.rank is None:
        return f"{describe(m.node('first'))}: the rank of {m.x.name!r}, so its default perm, is unknown"
    return None


def transpose_transpose_replace(op, m):
    first, second = permutation(m.node("first"), m.x.rank), permutation(m.node("second"), m.x.rank)
    perm = [first[i] for i in second]
    return m.x if perm == sorted(perm) else op.Transpose(m.x, perm=perm)


# ---- Reshape(Reshape(x, s), t) = Reshape(x, t) --------------------------------------------
# Only the element count reaches the second Reshape, and that is x's. A 0 in t copies a dim of
# the intermediate (unless allowzero): it is spelled out from that shape, or the pair is kept.

def reshape_reshape(op, x, inner_shape, shape):
    return op.Reshape(op.Reshape(x, inner_shape, _name="first"), shape, _name="second")


def reshape_target(m) -> list[int] | None:
    """The second Reshape's constant target with each copying 0 spelled out; None if the target
    is computed at run time or copies a dim that is not static."""
    if m.shape.const is None:
        return None
    target = m.shape.const.reshape(-1).tolist()
    if attr_value(m.node("second"), "allowzero") or 0 not in target:
        return target
    mid = m.node("first").outputs[0].shape
    if mid is None or any(d == 0 and (i >= len(mid) or not isinstance(mid[i], int))
                          for i, d in enumerate(target)):
        return None
    return [mid[i] if d == 0 else d for i, d in enumerate(target)]


def reshape_reshape_check(m):
    second = m.node("second")
    if m.shape.const is None and not attr_value(second, "allowzero"):
        computed = shape_value(m.shape)   # read off Shapes: its 0s are known
        if computed is None or 0 in computed:
            return (f"{describe(second)}: its shape {m.shape.name!r} is computed at run time and may "
                    "copy dims (0) of the intermediate")
    if m.shape.const is not None and reshape_target(m) is None:
        return f"{describe(second)}: copies dims (0) of an intermediate shape that is not static"
    return None


def reshape_reshape_replace(op, m):
    target, shape = reshape_target(m), m.shape
    if target is not None and target != shape.const.reshape(-1).tolist():
        shape = op.constant(np.array(target, np.int64), "shape")
    return op.Reshape(m.x, shape, **m.node("second").attrs)


# ---- operators that compute nothing --------------------------------------------------------

def identity(op, x):
    return op.Identity(x, _name="noop")


def dropout(op, x, ratio=None, training_mode=None):
    return op.Dropout(x, ratio, training_mode, _name="noop")


def cast(op, x):
    return op.Cast(x, _name="noop")


def cast_like(op, x, like):
    return op.CastLike(x, like, _name="noop")


def reshape(op, x, shape):
    return op.Reshape(x, shape, _name="noop")


def is_no_op(m) -> bool:
    """A Cast to the type the value has, a Reshape to the shape it has (static, or symbolic and
    equal); not an Identity
    that only names a graph output after an input, a constant or another output (removing it
    would need that Identity again)."""
    node, x, y = m.node("noop"), m.x, m.root.outputs[0]
    if node.op_type in ("Cast", "CastLike"):
        to = DType(node.attrs["to"]) if node.op_type == "Cast" else m.like.dtype
        if x.dtype is None or x.dtype != to:
            return False
    if node.op_type == "Reshape" and (x.shape is None or x.shape != y.shape or
                                      not all(is_size(d) for d in x.shape)):
        return False   # a symbolic shape equal to the target's: the same sizes whatever they are
    outputs = node.graph.outputs
    return not (any(o is y for o in outputs) and (x.producer is None or any(o is x for o in outputs)))


def no_op_check(m):
    return dropout_reason(m) if m.node("noop").op_type == "Dropout" else None


def dropout_reason(m) -> str | None:
    node = m.node("noop")
    if any(v.uses or any(o is v for o in node.graph.outputs) for v in node.outputs[1:]):
        return f"{describe(node)}: its mask output is used"
    mode, ratio = m.values.get("training_mode"), m.values.get("ratio")
    if mode is None or (mode.const is not None and not mode.const.any()):
        return None
    if ratio is not None and ratio.const is not None and not ratio.const.any():
        return None   # training with ratio 0 drops nothing
    return f"{describe(node)}: training_mode {mode.name!r} is not a constant false"


def no_op_replace(op, m):
    # Dropout's mask output, when there is one, is unused (checked): it goes with the node
    return [m.x] * len(m.root.outputs)


# ---- Squeeze(Unsqueeze(x, a), a) = x and Unsqueeze(Squeeze(x, a), a) = x ---------------------

def squeeze_unsqueeze(op, x, axes=None, squeeze_axes=None):
    return op.Squeeze(op.Unsqueeze(x, axes, _name="unsqueeze"), squeeze_axes, _name="squeeze")


def unsqueeze_squeeze(op, x, axes=None, squeeze_axes=None):
    return op.Unsqueeze(op.Squeeze(x, squeeze_axes, _name="squeeze"), axes, _name="unsqueeze")


def axes_of(node: Node, rank: int | None) -> set[int] | None:
    """The axes a Squeeze/Unsqueeze works on (attribute before opset 13, input from 13), taken
    modulo `rank` (the rank of the larger side); None if they cannot be known now."""
    if node.input(1) is not None:
        if node.inputs[1].const is None:
            return None
        axes = node.inputs[1].const.reshape(-1).tolist()
    else:
        axes = attr_value(node, "axes")
    x = node.inputs[0]
    if not axes and node.op_type == "Squeeze":   # every dim of size 1
        if x.shape is None or not all(isinstance(d, int) for d in x.shape):
            return None
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return None if rank is None or axes is None else {a % rank for a in axes}


def squeeze_unsqueeze_check(m):
    squeeze, unsqueeze = m.node("squeeze"), m.node("unsqueeze")
    wide = m.x if m.root is unsqueeze else unsqueeze.outputs[0]   # the side with the extra axes
    a, b = axes_of(unsqueeze, wide.rank), axes_of(squeeze, wide.rank)
    if a is None or b is None:
        return f"{describe(squeeze)}, {describe(unsqueeze)}: the axes or ranks are not known"
    if a != b:
        return (f"{describe(unsqueeze)} works on axes {sorted(a)} but {describe(squeeze)} on "
                f"{sorted(b)}")
    return None


def squeeze_unsqueeze_replace(op, m):
    return m.x


RULES = [
    Rule("NoOpRemovalFusionOp", 1,
         "Identity, inference Dropout, Cast to the type it has, Reshape to the shape it has → removed",
         [identity, dropout, cast, cast_like, reshape], no_op_replace, no_op_check, is_no_op),
    Rule("TransposeTransposeFusionOp", 1, "Transpose∘Transpose → one Transpose (none if they cancel)",
         [transpose_transpose], transpose_transpose_replace, transpose_transpose_check),
    Rule("ReshapeReshapeFusionOp", 1, "Reshape∘Reshape → the last Reshape",
         [reshape_reshape], reshape_reshape_replace, reshape_reshape_check),
    Rule("SqueezeUnsqueezeFusionOp", 1,
         "Squeeze∘Unsqueeze or Unsqueeze∘Squeeze on the same axes → removed",
         [squeeze_unsqueeze, unsqueeze_squeeze], squeeze_unsqueeze_replace, squeeze_unsqueeze_check),
]
