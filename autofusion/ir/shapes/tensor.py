"""Ops that move, reshape or resize a tensor (injective: each output element reads one input
element), and the ops that make a tensor from sizes: Shape, Size, Range, ConstantOfShape."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..attributes import const_ints, int_arg, normalize_axis, opset_of
from ..dims import broadcast_shapes, dim_product, dim_quotient, inferred_dim, same_dim, shape_value
from ..dtypes import DType
from ..graph import Dim, Node
from ..ops import OpClass, OpDef, register
from ..symbolic import add, floordiv, mul
from .elementwise import same_as_input

I, O = OpClass.INJECTIVE, OpClass.OPAQUE


def _transpose(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    perm = node.attrs.get("perm") or list(range(len(x.shape)))[::-1]
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


register(OpDef("Transpose", I, _transpose))


def _expand(node: Node):
    """Bidirectional broadcast of x against the target, read through shape_value so a target
    built from Shape dims (LLaMA's repeat_kv: [b, kv, n_rep, s, d]) keeps its symbols."""
    x, shape = node.inputs[0], node.inputs[1]
    dims = shape_value(shape)
    if dims is None:   # the target's length alone still gives the rank
        n = shape.shape[0] if shape.shape is not None and len(shape.shape) == 1 else None
        if x.shape is None or not isinstance(n, int):
            return [(None, x.dtype)]
        dims = [None] * n
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise ValueError(f"Expand to {dims}: a negative dim")
    return [(broadcast_shapes(x.shape, tuple(dims)), x.dtype)]


register(OpDef("Expand", I, _expand))


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


register(OpDef("Reshape", I, _reshape))


def _flatten(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    a = node.attr("axis", 1)
    a = a + len(x.shape) if a < 0 else a
    if not 0 <= a <= len(x.shape):
        raise ValueError(f"Flatten axis {a} of rank {len(x.shape)}")
    return [((dim_product(x.shape[:a]), dim_product(x.shape[a:])), x.dtype)]


register(OpDef("Flatten", I, _flatten))


def _squeeze(node: Node):
    """axes an attribute before opset 13, an input from then on; without axes every dim of size
    1 goes, which only known sizes can tell."""
    x = node.inputs[0]
    axes = int_arg(node, "axes", 1, 13)
    if x.shape is None or axes is None:
        return [(None, x.dtype)]
    if not axes:
        if not all(isinstance(d, int) for d in x.shape):
            return [(None, x.dtype)]
        return [(tuple(d for d in x.shape if d != 1), x.dtype)]
    drop = {normalize_axis(a, len(x.shape)) for a in axes}
    for a in sorted(drop):
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise ValueError(f"Squeeze axis {a} has size {x.shape[a]}, not 1")
    return [(tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype)]


register(OpDef("Squeeze", I, _squeeze))


def _unsqueeze(node: Node):
    """axes (attribute before opset 13, input from then on) count in the output's rank."""
    x = node.inputs[0]
    axes = int_arg(node, "axes", 1, 13)
    if x.shape is None or not axes:
        return [(None, x.dtype)]
    rank = len(x.shape) + len(axes)
    new = {normalize_axis(a, rank) for a in axes}
    if len(new) != len(axes):
        raise ValueError(f"Unsqueeze axes {axes} repeat")
    rest = iter(x.shape)
    return [(tuple(1 if i in new else next(rest) for i in range(rank)), x.dtype)]


register(OpDef("Unsqueeze", I, _unsqueeze))


def _concat(node: Node):
    """Sizes along the axis add up (symbolic ones too: s + 1); the other axes are shared by all
    inputs."""
    ins = [v for v in node.inputs if v is not None]
    known = [v.shape for v in ins if v.shape is not None]
    if not known:
        return [(None, ins[0].dtype)]
    rank = len(known[0])
    if any(len(s) != rank for s in known):
        raise ValueError(f"Concat of ranks {[len(s) for s in known]}")
    axis = normalize_axis(node.attrs["axis"], rank)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[i] for s in known]
        if i != axis:
            out.append(same_dim(dims))
            continue
        parts = [d for d in dims if d != 0] if len(known) == len(ins) else [None]
        out.append(add(*parts))
    return [(tuple(out), ins[0].dtype)]


register(OpDef("Concat", I, _concat))


def _split(node: Node):
    """Sizes from the split attribute/input (input from opset 13); without it, equal parts, and
    from opset 18 (num_outputs) parts of ceil(d / n) with a smaller last one."""
    x, n = node.inputs[0], len(node.outputs)
    if x.shape is None:
        return [(None, x.dtype)] * n
    a = normalize_axis(node.attr("axis", 0), len(x.shape))
    d = x.shape[a]
    sizes = int_arg(node, "split", 1, 13)
    if sizes:
        if len(sizes) != n or (isinstance(d, int) and sum(sizes) != d):
            raise ValueError(f"split {sizes} of {d} into {n} outputs")
        parts: list[Dim] = list(sizes)
    elif sizes is None:
        parts = [d if n == 1 else None] * n
    elif not isinstance(d, int):   # equal parts, as the op requires of an uneven split's absence
        parts = [d if n == 1 else (floordiv(d, n) if opset_of(node) < 18 or node.attr("num_outputs") is None
                                   else None)] * n
    elif d % n == 0:
        parts = [d // n] * n
    elif opset_of(node) >= 18 and node.attr("num_outputs") is not None and (c := -(-d // n)) * (n - 1) < d:
        parts = [c] * (n - 1) + [d - c * (n - 1)]
    else:   # uneven with no rule that says how, or a part that would be empty
        parts = [None] * n
    return [(x.shape[:a] + (p,) + x.shape[a + 1:], x.dtype) for p in parts]


register(OpDef("Split", I, _split))


def _tile(node: Node):
    """Each dim times its repeat count (read through shape_value: batch-sized repeats)."""
    x, reps = node.inputs[0], shape_value(node.inputs[1])
    if x.shape is None:
        return [(None, x.dtype)]
    if reps is None:
        return [((None,) * len(x.shape), x.dtype)]
    if len(reps) != len(x.shape):
        raise ValueError(f"Tile repeats {reps} for rank {len(x.shape)}")
    return [(tuple(dim_product([d, r]) for d, r in zip(x.shape, reps)), x.dtype)]


register(OpDef("Tile", I, _tile))


def pad_counts(node: Node, rank: int) -> tuple[list[int], list[int]] | None:
    """A Pad's counts (before, after) for each of its input's `rank` axes: pads [begins...,
    ends...] an attribute before opset 11, an input from then on, over the axes input (opset 18)
    or all axes; negative counts crop. None where they are computed at run time."""
    if opset_of(node) < 11:
        pads, axes = node.attr("pads", node.attr("paddings")), list(range(rank))
    else:
        pads = const_ints(node.inputs[1])
        axes = list(range(rank)) if node.input(3) is None else const_ints(node.input(3))
    if pads is None or axes is None:
        return None
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    before, after = [0] * rank, [0] * rank
    for j, a in enumerate(normalize_axis(a, rank) for a in axes):
        before[a], after[a] = pads[j], pads[j + len(axes)]
    return before, after


def _pad(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    counts = pad_counts(node, len(x.shape))
    if counts is None:
        return [((None,) * len(x.shape), x.dtype)]
    out = [add(d, b + e) for d, b, e in zip(x.shape, *counts)]
    if any(isinstance(d, int) and d < 0 for d in out):
        raise ValueError("Pad crops more than the dim")
    return [(tuple(out), x.dtype)]


register(OpDef("Pad", I, _pad))


def _depth_to_space(node: Node):
    x, b = node.inputs[0], node.attrs["blocksize"]
    if x.shape is None or len(x.shape) != 4:
        return [(None, x.dtype)]
    n, c, h, w = x.shape
    return [((n, dim_quotient(c, b * b), mul(h, b), mul(w, b)), x.dtype)]


def _space_to_depth(node: Node):
    x, b = node.inputs[0], node.attrs["blocksize"]
    if x.shape is None or len(x.shape) != 4:
        return [(None, x.dtype)]
    n, c, h, w = x.shape
    return [((n, mul(c, b * b), dim_quotient(h, b), dim_quotient(w, b)), x.dtype)]


register(OpDef("DepthToSpace", I, _depth_to_space))
register(OpDef("SpaceToDepth", I, _space_to_depth))
for _name in ["Trilu", "ReverseSequence"]:
    register(OpDef(_name, I, same_as_input))
del _name


def _scaled(d: Dim, scale: float) -> Dim:
    """floor(d · scale), given only where float32 and float64 arithmetic agree on it; for a
    symbolic d where the scale is a fraction p/q of a small power of two q (2, 0.5, 1.5: the
    product is exact in float arithmetic too), floor(d·p / q)."""
    if scale == 1.0:
        return d
    if not isinstance(d, int):
        exact = Fraction(float(np.float32(scale)))
        small = exact.denominator <= 64 and 0 < exact.numerator <= 1 << 16
        return floordiv(mul(d, exact.numerator), exact.denominator) if small and d is not None else None
    a, b = math.floor(float(np.float32(d) * np.float32(scale))), math.floor(d * float(np.float32(scale)))
    return a if a == b else None


def _resize(node: Node):
    """Resize/Upsample with sizes (taken as they are, policy "stretch": constant, or computed
    from shapes the way exporters write an upsampling to another tensor's size, ir.dims
    shape_value) or constant scales (floor(d · scale)); anything else leaves the rank only."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    rank, op = len(x.shape), opset_of(node)
    unknown = [((None,) * rank, x.dtype)]
    sizes, axes = None, list(range(rank))
    if node.op_type == "Upsample" and op < 9:
        scales = node.attr("scales")
    elif node.op_type == "Upsample" or op < 11:
        scales = None if node.inputs[1].const is None else node.inputs[1].const.reshape(-1).tolist()
    else:
        if node.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
            return unknown   # the output size depends on roi
        sv, zv = node.input(2), node.input(3)
        computed = zv is not None and zv.const is None
        if (sv is not None and sv.const is None) or (computed and shape_value(zv) is None):
            return unknown
        scales = sv.const.reshape(-1).tolist() if sv is not None and sv.const.size else None
        sizes = shape_value(zv) if computed else const_ints(zv) if zv is not None and zv.const.size else None
        axes = [normalize_axis(a, rank) for a in node.attr("axes") or range(rank)]
        if sizes is not None and node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            return unknown
    out = list(x.shape)
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ValueError(f"Resize sizes {sizes} for axes {axes}")
        for a, n in zip(axes, sizes):
            out[a] = n
    elif scales is not None:
        if len(scales) != len(axes):
            raise ValueError(f"Resize scales {scales} for axes {axes}")
        for a, sc in zip(axes, scales):
            out[a] = _scaled(out[a], sc)
    else:
        return unknown
    return [(tuple(out), x.dtype)]


register(OpDef("Resize", I, _resize))
register(OpDef("Upsample", I, _resize))


# ---- tensors made from sizes -----------------------------------------------------------------
def _shape_op(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [((None,), DType.INT64)]
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    return [((len(x.shape[start:end]),), DType.INT64)]


register(OpDef("Shape", O, _shape_op))
register(OpDef("Size", O, lambda n: [((), DType.INT64)]))
register(OpDef("Constant", O, None))


def _constant_of_shape(node: Node):
    """The shape its input holds (read through shape_value); the dtype of `value` (float32)."""
    value = node.attr("value")
    dtype = DType.from_numpy(value.dtype) if value is not None else DType.FLOAT
    dims = shape_value(node.inputs[0])
    if dims is None:
        s = node.inputs[0].shape
        return [((None,) * s[0] if s is not None and len(s) == 1 and isinstance(s[0], int) else None, dtype)]
    return [(tuple(dims), dtype)]


register(OpDef("ConstantOfShape", O, _constant_of_shape))


def _range_bound(v) -> list | None:
    """A bound of Range as a dim: through shape_value (arange(seq_len) has seq_len's symbol, a Cast
    to float included), or a float constant that holds a whole number (a float arange's 0. and 1.)."""
    if v is not None and v.const is not None and v.const.dtype.kind == "f" and v.const.size == 1:
        x = float(v.const.reshape(-1)[0])
        return [int(x)] if x.is_integer() else None
    return shape_value(v)


def _range(node: Node):
    """One dim, max(ceil((limit - start) / delta), 0), where the bounds are integers we can read
    (_range_bound)."""
    start, limit, delta = (_range_bound(v) for v in node.inputs[:3])
    dtype = node.inputs[0].dtype
    if any(b is None or len(b) != 1 for b in (start, limit, delta)):
        return [((None,), dtype)]
    (s,), (e,), (d,) = start, limit, delta
    if isinstance(s, int) and isinstance(e, int) and isinstance(d, int) and d != 0:
        return [((max(-(-(e - s) // d), 0),), dtype)]
    return [((e if s == 0 and d == 1 else None,), dtype)]   # a dim is never negative


register(OpDef("Range", O, _range))


def _eye_like(node: Node):
    x = node.inputs[0]
    return [(x.shape, DType(node.attrs["dtype"]) if "dtype" in node.attrs else x.dtype)]


register(OpDef("EyeLike", O, _eye_like))
