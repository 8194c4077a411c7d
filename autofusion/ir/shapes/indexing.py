"""Ops that read or place values by index: Slice, the Gathers and Scatters, TopK, NonZero."""
from __future__ import annotations

from ..attributes import const_ints, normalize_axis, opset_of
from ..dims import shape_value, slice_bounds, symbolic_slice_bounds
from ..dtypes import DType
from ..graph import Dim, Node
from ..ops import OpClass, OpDef, register
from ..symbolic import add, ceildiv, maximum, minimum, mul, sub
from .elementwise import same_as_input

I, O = OpClass.INJECTIVE, OpClass.OPAQUE


_BIG = 2**31 - 1   # starts/ends at least this large stand for "to the end" (INT_MAX, INT64_MAX)


def _slice_len(d: Dim, start: int, end: int, step: int) -> Dim:
    """Elements a Slice keeps of a dim of size d, clamped as ONNX says: starts to [0, d] going
    forward and [0, d-1] going back, ends to [0, d] and [-1, d-1]. A symbolic d: the whole of it
    (0 to INT_MAX by 1, or -1 to INT_MIN by -1), or forward by a step its clamped bounds say
    (symbolic_slice_bounds)."""
    if step == 0:
        raise ValueError("Slice step 0")
    if not isinstance(d, int):
        forward = step == 1 and (start == 0 or start <= -_BIG) and end >= _BIG
        backward = step == -1 and (start == -1 or start >= _BIG) and end <= -_BIG
        if forward or backward:
            return d
        if step < 0:
            return None
        lo, hi = symbolic_slice_bounds(d, start, end)
        return ceildiv(maximum(sub(hi, lo), 0), step)
    if step < 0 and (end in (2**31 - 1, 2**63 - 1) or start < -d):
        # runtimes have differed here: ONNX Runtime reads an INT_MAX end going back as "to the
        # front" (the spec clamps it to d-1: nothing), and Python's clamping takes nothing from
        # a start before -d where the spec starts at 0
        return None
    return len(range(*slice_bounds(d, start, end, step)))


def _slice(node: Node):
    """starts/ends/axes as attributes before opset 10, inputs (axes, steps optional) from then on.
    Bounds may be sizes read off a Shape (x[:, :seq]); an axis whose bounds are neither gets
    None; unknown axes leave only the rank."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    rank = len(x.shape)
    if opset_of(node) < 10:
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes, steps = node.attr("axes") or list(range(len(starts))), [1] * len(starts)
    else:
        if any(v is not None and v.shape is not None and len(v.shape) != 1 for v in node.inputs[1:]):
            raise ValueError("Slice starts, ends, axes and steps must be 1-D")
        starts, ends = shape_value(node.inputs[1]), shape_value(node.inputs[2])
        s = node.inputs[1].shape
        count = len(starts) if starts is not None else (s[0] if s is not None and len(s) == 1 else None)
        axes = const_ints(node.input(3)) if node.input(3) is not None else \
            (list(range(count)) if isinstance(count, int) else None)
        steps = const_ints(node.input(4)) if node.input(4) is not None else \
            ([1] * count if isinstance(count, int) else None)
    if axes is None:
        return [((None,) * rank, x.dtype)]
    axes = [normalize_axis(a, rank) for a in axes]
    out = list(x.shape)
    if starts is None or ends is None or steps is None:
        for a in axes:
            out[a] = None
        return [(tuple(out), x.dtype)]
    if not len(axes) == len(starts) == len(ends) == len(steps):
        raise ValueError("Slice starts/ends/axes/steps of different lengths")
    for a, start, end, step in zip(axes, starts, ends, steps):
        if isinstance(start, int) and isinstance(end, int):
            out[a] = _slice_len(x.shape[a], start, end, int(step))
        elif int(step) == 1 and x.shape[a] is not None and None not in (start, end):
            # a bound that is a size (never negative) clamps to [0, d] as its minimum with d
            lo, hi = (b if isinstance(b, int) and b < 0 else b for b in (start, end))
            lo_d, hi_d = (symbolic_slice_bounds(x.shape[a], b, b)[0] if isinstance(b, int)
                          else minimum(b, x.shape[a]) for b in (lo, hi))
            out[a] = maximum(sub(hi_d, lo_d), 0)
        else:
            out[a] = None
    return [(tuple(out), x.dtype)]


register(OpDef("Slice", I, _slice))


def _gather(node: Node):
    """data.shape[:axis] + indices.shape + data.shape[axis+1:]."""
    data, idx = node.inputs[0], node.inputs[1]
    if data.shape is None or idx.shape is None:
        return [(None, data.dtype)]
    a = normalize_axis(node.attr("axis", 0), len(data.shape))
    return [(data.shape[:a] + idx.shape + data.shape[a + 1:], data.dtype)]


def _gather_elements(node: Node):
    return [(node.inputs[1].shape, node.inputs[0].dtype)]


def _gather_nd(node: Node):
    """indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:]."""
    data, idx = node.inputs[0], node.inputs[1]
    if data.shape is None or idx.shape is None or not idx.shape or not isinstance(idx.shape[-1], int):
        return [(None, data.dtype)]
    return [(idx.shape[:-1] + data.shape[node.attr("batch_dims", 0) + idx.shape[-1]:], data.dtype)]


register(OpDef("Gather", I, _gather))
register(OpDef("GatherElements", I, _gather_elements))
register(OpDef("GatherND", I, _gather_nd))
for _name in ["ScatterElements", "ScatterND", "Scatter", "TensorScatter"]:
    register(OpDef(_name, I, same_as_input))
del _name


def _center_crop_pad(node: Node):
    """The input with each of `axes` (all by default) at its size in the shape input."""
    x, sizes = node.inputs[0], const_ints(node.inputs[1])
    if x.shape is None:
        return [(None, x.dtype)]
    axes = [normalize_axis(a, len(x.shape)) for a in node.attr("axes") or range(len(x.shape))]
    out = list(x.shape)
    for a, n in zip(axes, sizes or [None] * len(axes)):
        out[a] = n
    return [(tuple(out), x.dtype)]


register(OpDef("CenterCropPad", I, _center_crop_pad))


def _max_unpool(node: Node):
    """output_shape when it is a constant, else (n - 1)·stride - pads + kernel per spatial axis."""
    x, out = node.inputs[0], node.input(2)
    if out is not None:
        dims = const_ints(out)
        return [(tuple(dims) if dims is not None else None, x.dtype)]
    if x.shape is None:
        return [(None, x.dtype)]
    k = node.attrs["kernel_shape"]
    nd = len(k)
    s, p = node.attr("strides") or [1] * nd, node.attr("pads") or [0] * (2 * nd)
    spatial = [add(mul(add(n, -1), s[i]), k[i] - p[i] - p[nd + i]) for i, n in enumerate(x.shape[2:])]
    return [((*x.shape[:2], *spatial), x.dtype)]


register(OpDef("MaxUnpool", I, _max_unpool))


def _topk(node: Node):
    """Values and int64 indices: x with k along the axis (k an attribute before opset 10)."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype), (None, DType.INT64)]
    a = normalize_axis(node.attr("axis", -1), len(x.shape))
    if opset_of(node) < 10:
        k: Dim = node.attrs["k"]
    else:
        ks = shape_value(node.inputs[1])
        k = ks[0] if ks is not None and len(ks) == 1 else None
    shape = x.shape[:a] + (k,) + x.shape[a + 1:]
    return [(shape, x.dtype), (shape, DType.INT64)]


register(OpDef("TopK", O, _topk))


def _non_zero(node: Node):
    x = node.inputs[0]
    return [((len(x.shape), None) if x.shape is not None else (None, None), DType.INT64)]


register(OpDef("NonZero", O, _non_zero))


def _one_hot(node: Node):
    """indices' shape with depth inserted at axis (default -1, counted in the output's rank)."""
    idx, depth, values = node.inputs
    if idx.shape is None:
        return [(None, values.dtype)]
    rank = len(idx.shape) + 1
    a = normalize_axis(node.attr("axis", -1), rank)
    k = shape_value(depth)
    return [(idx.shape[:a] + (k[0] if k is not None and len(k) == 1 else None,) + idx.shape[a:],
             values.dtype)]


register(OpDef("OneHot", O, _one_hot))
register(OpDef("Compress", O, None))
register(OpDef("Unique", O, None))
