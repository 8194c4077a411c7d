"""Reductions, normalizations, softmax and the losses: ops that reduce along axes."""
from __future__ import annotations

from ..attributes import int_arg, normalize_axis
from ..dims import broadcast_shapes
from ..dtypes import DType
from ..graph import Node
from ..ops import OpClass, OpDef, register
from .elementwise import same_as_input

R = OpClass.REDUCTION


def _reduce(since: int):
    """ReduceXxx: axes an attribute before opset `since`, an optional input from then on; no axes
    reduces all of them, or none with noop_with_empty_axes; keepdims (default 1) keeps them as 1."""
    def rule(node: Node):
        x = node.inputs[0]
        keep = node.attr("keepdims", 1)
        axes = int_arg(node, "axes", 1, since)
        if x.shape is None:
            return [(None, x.dtype)]
        rank = len(x.shape)
        if axes is None:   # axes computed at run time: only keepdims tells the rank
            return [((None,) * rank if keep else None, x.dtype)]
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                return [(x.shape, x.dtype)]
            axes = range(rank)
        axes = {normalize_axis(a, rank) for a in axes}
        if keep:
            return [(tuple(1 if i in axes else d for i, d in enumerate(x.shape)), x.dtype)]
        return [(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)]
    return rule


# axes move from attribute to input at opset 13 for ReduceSum, 18 for the others
for _name in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]:
    register(OpDef(_name, R, _reduce(13 if _name == "ReduceSum" else 18)))
for _name in ["Softmax", "LogSoftmax", "Hardmax", "GroupNormalization", "InstanceNormalization",
              "LpNormalization", "MeanVarianceNormalization", "RMSNormalization", "CumSum", "CumProd"]:
    register(OpDef(_name, R, same_as_input))
del _name


def _arg_reduce(node: Node):
    """ArgMax/ArgMin: one axis (default 0), keepdims default 1, int64 indices."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, DType.INT64)]
    a = normalize_axis(node.attr("axis", 0), len(x.shape))
    if node.attr("keepdims", 1):
        return [(x.shape[:a] + (1,) + x.shape[a + 1:], DType.INT64)]
    return [(x.shape[:a] + x.shape[a + 1:], DType.INT64)]


register(OpDef("ArgMax", R, _arg_reduce))
register(OpDef("ArgMin", R, _arg_reduce))


def _layer_norm(node: Node):
    """Y like X; Mean and InvStdDev keep the leading axes and are 1 over the normalized ones,
    in stash_type (float by default)."""
    x = node.inputs[0]
    stash = DType(node.attr("stash_type", 1))
    if x.shape is None:
        return [(None, x.dtype), (None, stash), (None, stash)]
    a = normalize_axis(node.attr("axis", -1), len(x.shape))
    normalized = x.shape[a:]
    for v in node.inputs[1:]:   # scale and bias broadcast to the normalized axes, no further
        if v is not None and v.is_static and all(isinstance(d, int) for d in normalized) \
                and broadcast_shapes(normalized, v.shape) != normalized:
            raise ValueError(f"LayerNormalization scale or bias {v.type_str()} for axes {normalized}")
    stats = tuple(x.shape[:a]) + (1,) * (len(x.shape) - a)
    return [(x.shape, x.dtype), (stats, stash), (stats, stash)]


register(OpDef("LayerNormalization", R, _layer_norm))


def _global_pool(node: Node):
    x = node.inputs[0]
    if x.shape is None or len(x.shape) < 2:
        return [(None, x.dtype)]
    return [(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]


for _name in ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]:
    register(OpDef(_name, R, _global_pool))
del _name


def _det(node: Node):
    x = node.inputs[0]
    return [(None if x.shape is None else x.shape[:-2], x.dtype)]


register(OpDef("Det", R, _det))
register(OpDef("NegativeLogLikelihoodLoss", R))
register(OpDef("SoftmaxCrossEntropyLoss", R))
