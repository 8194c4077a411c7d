"""The shape/dtype rules of the op table (ops.py): one function per operator form, computing
with the symbolic-dimension arithmetic of dims.py.

A shape rule takes the node and returns one (shape, dtype) per output, or None where it cannot
tell (the importer's ONNX shape inference has already annotated imported graphs; rules exist so
passes can type the nodes they create, and so refine_shapes can carry a shape that folding
recovered through everything downstream). A rule states only what it is sure of: a dim it
cannot tell is None, never a guess.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .dims import broadcast_shapes, inferred_dim, shape_value, slice_bounds, symbolic_slice_bounds
from .dtypes import DType
from .graph import Dim, Node, Shape, Value
from .symbolic import add, ceildiv, exact_quotient, floordiv, maximum, minimum, mul, product, sub


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
    if isinstance(sa[-1], int) and isinstance(sb[-2], int) and sa[-1] != sb[-2]:
        raise ValueError(f"a product of shapes {tuple(a)} and {tuple(b)}: {sa[-1]} against {sb[-2]}")
    batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    out = list(batch or ()) + ([] if squeeze_a else [sa[-2]]) + ([] if squeeze_b else [sb[-1]])
    return tuple(out) if batch is not None else None


def _matmul(node: Node):
    a, b = node.inputs[0], node.inputs[1]
    return [(matmul_shape(a.shape, b.shape), a.dtype)]


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


def _shape_op(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [((None,), DType.INT64)]
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    return [((len(x.shape[start:end]),), DType.INT64)]


# ---- rules for the ops after a Reshape: reductions, norms, slicing, windows ------------------
# refine_shapes re-runs these after folding, in order, so one shape a fold recovers (a Reshape
# whose target was read off x.shape) carries on through everything downstream. Each rule gives
# None for a dim, or for the whole shape, wherever it cannot be sure: a wrong static dim would
# let a fusion rule fire where it must not.

_BIG = 2**31 - 1   # starts/ends at least this large stand for "to the end" (INT_MAX, INT64_MAX)


def opset_of(node: Node) -> int:
    """The opset the node's domain is imported at (what decides attribute-vs-input forms)."""
    return node.graph.opset.get(node.domain, 21) if node.graph is not None else 21


def _axis(a: int, rank: int) -> int:
    if not -rank <= a < rank:
        raise ValueError(f"axis {a} is out of range for rank {rank}")
    return a % rank


def _const_ints(v: Value | None) -> list[int] | None:
    """A constant integer input's values; None when it is not a constant."""
    if v is None or v.const is None or v.const.dtype.kind not in "iu":
        return None
    return [int(a) for a in v.const.reshape(-1)]


def _int_arg(node: Node, name: str, index: int, since: int) -> list[int] | None:
    """An int list that is attribute `name` before opset `since` and input `index` from then on
    (axes, split): [] when absent, None when it is an input whose value is not known."""
    if opset_of(node) < since:
        return [int(a) for a in node.attrs.get(name) or ()]
    v = node.input(index)
    return [] if v is None else _const_ints(v)


def _dim_prod(dims) -> Dim:
    """The product of dims (symbolic ones multiplied out); 0 if any is 0, else None if any is."""
    if any(d == 0 for d in dims):
        return 0
    return product(dims)


def _dim_mul(d: Dim, k: int) -> Dim:
    return mul(d, k)


def _dim_add(d: Dim, k: int) -> Dim:
    return add(d, k)


def _dim_div(d: Dim, k: int) -> Dim:
    """d / k where k divides d: an error for a size it does not divide; a symbolic d only where
    k divides it for every value (2·s / 2), else None."""
    if isinstance(d, int):
        if d % k:
            raise ValueError(f"{d} does not divide by {k}")
        return d // k
    return exact_quotient(d, k)


def _same_dim(dims) -> Dim:
    """The one dim several values must share (Concat's other axes): a size if any has one, else
    a symbolic one."""
    sizes = {d for d in dims if isinstance(d, int)}
    if len(sizes) > 1:
        raise ValueError(f"dims {dims} should be equal")
    if sizes:
        return sizes.pop()
    return next((d for d in dims if d is not None), None)


def _dropout(node: Node):
    """The output and its mask: bool from opset 10, of x's type before."""
    x = node.inputs[0]
    return [(x.shape, x.dtype), (x.shape, DType.BOOL if opset_of(node) >= 10 else x.dtype)]


def _layer_norm(node: Node):
    """Y like X; Mean and InvStdDev keep the leading axes and are 1 over the normalized ones,
    in stash_type (float by default)."""
    x = node.inputs[0]
    stash = DType(node.attr("stash_type", 1))
    if x.shape is None:
        return [(None, x.dtype), (None, stash), (None, stash)]
    a = _axis(node.attr("axis", -1), len(x.shape))
    normalized = x.shape[a:]
    for v in node.inputs[1:]:   # scale and bias broadcast to the normalized axes, no further
        if v is not None and v.is_static and all(isinstance(d, int) for d in normalized) \
                and broadcast_shapes(normalized, v.shape) != normalized:
            raise ValueError(f"LayerNormalization scale or bias {v.type_str()} for axes {normalized}")
    stats = tuple(x.shape[:a]) + (1,) * (len(x.shape) - a)
    return [(x.shape, x.dtype), (stats, stash), (stats, stash)]


def _reduce(since: int):
    """ReduceXxx: axes an attribute before opset `since`, an optional input from then on; no axes
    reduces all of them, or none with noop_with_empty_axes; keepdims (default 1) keeps them as 1."""
    def rule(node: Node):
        x = node.inputs[0]
        keep = node.attr("keepdims", 1)
        axes = _int_arg(node, "axes", 1, since)
        if x.shape is None:
            return [(None, x.dtype)]
        rank = len(x.shape)
        if axes is None:   # axes computed at run time: only keepdims tells the rank
            return [((None,) * rank if keep else None, x.dtype)]
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                return [(x.shape, x.dtype)]
            axes = range(rank)
        axes = {_axis(a, rank) for a in axes}
        if keep:
            return [(tuple(1 if i in axes else d for i, d in enumerate(x.shape)), x.dtype)]
        return [(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)]
    return rule


def _arg_reduce(node: Node):
    """ArgMax/ArgMin: one axis (default 0), keepdims default 1, int64 indices."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, DType.INT64)]
    a = _axis(node.attr("axis", 0), len(x.shape))
    if node.attr("keepdims", 1):
        return [(x.shape[:a] + (1,) + x.shape[a + 1:], DType.INT64)]
    return [(x.shape[:a] + x.shape[a + 1:], DType.INT64)]


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
    axis = _axis(node.attrs["axis"], rank)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[i] for s in known]
        if i != axis:
            out.append(_same_dim(dims))
            continue
        parts = [d for d in dims if d != 0] if len(known) == len(ins) else [None]
        out.append(add(*parts))
    return [(tuple(out), ins[0].dtype)]


def _split(node: Node):
    """Sizes from the split attribute/input (input from opset 13); without it, equal parts, and
    from opset 18 (num_outputs) parts of ceil(d / n) with a smaller last one."""
    x, n = node.inputs[0], len(node.outputs)
    if x.shape is None:
        return [(None, x.dtype)] * n
    a = _axis(node.attr("axis", 0), len(x.shape))
    d = x.shape[a]
    sizes = _int_arg(node, "split", 1, 13)
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
        axes = _const_ints(node.input(3)) if node.input(3) is not None else \
            (list(range(count)) if isinstance(count, int) else None)
        steps = _const_ints(node.input(4)) if node.input(4) is not None else \
            ([1] * count if isinstance(count, int) else None)
    if axes is None:
        return [((None,) * rank, x.dtype)]
    axes = [_axis(a, rank) for a in axes]
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


def _squeeze(node: Node):
    """axes an attribute before opset 13, an input from then on; without axes every dim of size
    1 goes, which only known sizes can tell."""
    x = node.inputs[0]
    axes = _int_arg(node, "axes", 1, 13)
    if x.shape is None or axes is None:
        return [(None, x.dtype)]
    if not axes:
        if not all(isinstance(d, int) for d in x.shape):
            return [(None, x.dtype)]
        return [(tuple(d for d in x.shape if d != 1), x.dtype)]
    drop = {_axis(a, len(x.shape)) for a in axes}
    return [(tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype)]


def _unsqueeze(node: Node):
    """axes (attribute before opset 13, input from then on) count in the output's rank."""
    x = node.inputs[0]
    axes = _int_arg(node, "axes", 1, 13)
    if x.shape is None or not axes:
        return [(None, x.dtype)]
    rank = len(x.shape) + len(axes)
    new = {_axis(a, rank) for a in axes}
    if len(new) != len(axes):
        raise ValueError(f"Unsqueeze axes {axes} repeat")
    rest = iter(x.shape)
    return [(tuple(1 if i in new else next(rest) for i in range(rank)), x.dtype)]


def _flatten(node: Node):
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    a = node.attr("axis", 1)
    a = a + len(x.shape) if a < 0 else a
    if not 0 <= a <= len(x.shape):
        raise ValueError(f"Flatten axis {a} of rank {len(x.shape)}")
    return [((_dim_prod(x.shape[:a]), _dim_prod(x.shape[a:])), x.dtype)]


def _gather(node: Node):
    """data.shape[:axis] + indices.shape + data.shape[axis+1:]."""
    data, idx = node.inputs[0], node.inputs[1]
    if data.shape is None or idx.shape is None:
        return [(None, data.dtype)]
    a = _axis(node.attr("axis", 0), len(data.shape))
    return [(data.shape[:a] + idx.shape + data.shape[a + 1:], data.dtype)]


def _gather_elements(node: Node):
    return [(node.inputs[1].shape, node.inputs[0].dtype)]


def _gather_nd(node: Node):
    """indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:]."""
    data, idx = node.inputs[0], node.inputs[1]
    if data.shape is None or idx.shape is None or not idx.shape or not isinstance(idx.shape[-1], int):
        return [(None, data.dtype)]
    return [(idx.shape[:-1] + data.shape[node.attr("batch_dims", 0) + idx.shape[-1]:], data.dtype)]


def _tile(node: Node):
    """Each dim times its repeat count (read through shape_value: batch-sized repeats)."""
    x, reps = node.inputs[0], shape_value(node.inputs[1])
    if x.shape is None:
        return [(None, x.dtype)]
    if reps is None:
        return [((None,) * len(x.shape), x.dtype)]
    if len(reps) != len(x.shape):
        raise ValueError(f"Tile repeats {reps} for rank {len(x.shape)}")
    return [(tuple(_dim_prod([d, r]) for d, r in zip(x.shape, reps)), x.dtype)]


def _pad(node: Node):
    """pads [begins..., ends...] an attribute before opset 11, an input from then on, over the
    axes input (opset 18) or all axes; negative pads crop."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    rank = len(x.shape)
    if opset_of(node) < 11:
        pads, axes = node.attr("pads", node.attr("paddings")), list(range(rank))
    else:
        pads = _const_ints(node.inputs[1])
        axes = list(range(rank)) if node.input(3) is None else _const_ints(node.input(3))
    if pads is None or axes is None:
        return [((None,) * rank, x.dtype)]
    axes = [_axis(a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    out = list(x.shape)
    for j, a in enumerate(axes):
        out[a] = _dim_add(out[a], pads[j] + pads[j + len(axes)])
        if isinstance(out[a], int) and out[a] < 0:
            raise ValueError("Pad crops more than the dim")
    return [(tuple(out), x.dtype)]


def _window_out(n: Dim, k: int, s: int, d: int, pb: int, pe: int, auto_pad: str, ceil_mode: int) -> Dim:
    """One spatial output size of a conv/pool window: SAME gives ceil(n / s), else
    floor((n + pads - window) / s) + 1, or ceil with ceil_mode. A symbolic n is kept when the
    window slides by 1 and the pads make up for its size."""
    window = (k - 1) * d + 1
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return ceildiv(n, s)
    if auto_pad == "VALID":
        pb = pe = 0
    if n is None:
        return None
    if not isinstance(n, int):
        if not ceil_mode:
            return add(floordiv(add(n, pb + pe - window), s), 1)
        # the last window starts inside the input or its begin padding, as the spec says:
        # (out - 1)·s < n + pb
        return minimum(add(ceildiv(add(n, pb + pe - window), s), 1), add(floordiv(add(n, pb - 1), s), 1))
    span = n + pb + pe - window
    if span < 0:
        raise ValueError(f"window {window} larger than the padded input {n + pb + pe}")
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    # a last window that would start in the end padding: the spec and ONNX Runtime drop it,
    # ONNX's shape inference counts it
    return None if (out - 1) * s >= n + pb else out


def _spatial(node: Node, sizes, kernel) -> list[Dim] | None:
    nd = len(kernel)
    if sizes is None or len(sizes) != nd:
        return None
    auto_pad = node.attr("auto_pad", "NOTSET")
    ceil_mode = node.attr("ceil_mode", 0)
    if ceil_mode and auto_pad != "NOTSET":   # runtimes disagree on this combination
        return [None] * nd
    strides, dilations = node.attr("strides") or [1] * nd, node.attr("dilations") or [1] * nd
    if auto_pad.startswith("SAME") and node.op_type != "Conv" and any(d != 1 for d in dilations):
        return [None] * nd   # ONNX Runtime's pools pad for the undilated kernel: not ceil(n / s)
    pads = node.attr("pads") or [0] * (2 * nd)
    return [_window_out(n, k, s, d, pads[i], pads[i + nd], auto_pad, ceil_mode)
            for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations))]


def _conv(node: Node):
    """[N, M, spatial...], M = W.shape[0], the kernel from kernel_shape or W."""
    x, w = node.inputs[0], node.inputs[1]
    kernel = node.attr("kernel_shape") or (list(w.shape[2:]) if w.shape is not None else None)
    if x.shape is None or kernel is None or not all(isinstance(k, int) for k in kernel):
        return [(None, x.dtype)]
    spatial = _spatial(node, x.shape[2:], kernel)
    if spatial is None:
        return [(None, x.dtype)]
    m = w.shape[0] if w.shape is not None else None
    return [((x.shape[0], m, *spatial), x.dtype)]


def _conv_transpose(node: Node):
    """[N, W.shape[1]·group, spatial...]: output_shape when given, else
    s·(n-1) + output_padding + window - pads (n·s for SAME)."""
    x, w = node.inputs[0], node.inputs[1]
    kernel = node.attr("kernel_shape") or (list(w.shape[2:]) if w.shape is not None else None)
    if x.shape is None or kernel is None or not all(isinstance(k, int) for k in kernel):
        return [(None, x.dtype)]
    nd, sizes = len(kernel), x.shape[2:]
    if len(sizes) != nd:
        return [(None, x.dtype)]
    m = _dim_mul(w.shape[1], node.attr("group", 1)) if w.shape is not None else None
    if node.attr("output_shape"):
        spatial = list(node.attr("output_shape"))
        if len(spatial) != nd:
            return [(None, x.dtype)]
        return [((x.shape[0], m, *spatial), x.dtype)]
    strides, dilations = node.attr("strides") or [1] * nd, node.attr("dilations") or [1] * nd
    pads, extra = node.attr("pads") or [0] * (2 * nd), node.attr("output_padding") or [0] * nd
    auto_pad = node.attr("auto_pad", "NOTSET")
    spatial = []
    for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            spatial.append(_dim_mul(n, s))
            continue
        pb, pe = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + nd])
        grow = extra[i] + (k - 1) * d + 1 - pb - pe
        spatial.append(add(mul(s, add(n, -1)), grow))
    return [((x.shape[0], m, *spatial), x.dtype)]


def _pool(node: Node):
    """[N, C, spatial...] over kernel_shape; MaxPool's Indices alike, int64."""
    x = node.inputs[0]
    kernel = node.attrs["kernel_shape"]
    spatial = _spatial(node, x.shape[2:], kernel) if x.shape is not None else None
    shape = None if spatial is None else (*x.shape[:2], *spatial)
    return [(shape, x.dtype), (shape, DType.INT64)]


def _global_pool(node: Node):
    x = node.inputs[0]
    if x.shape is None or len(x.shape) < 2:
        return [(None, x.dtype)]
    return [(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]


def _gemm(node: Node):
    a, b = node.inputs[0], node.inputs[1]
    if a.shape is None or b.shape is None or len(a.shape) != 2 or len(b.shape) != 2:
        return [(None, a.dtype)]
    m = a.shape[1] if node.attr("transA", 0) else a.shape[0]
    n = b.shape[0] if node.attr("transB", 0) else b.shape[1]
    return [((m, n), a.dtype)]


def _depth_to_space(node: Node):
    x, b = node.inputs[0], node.attrs["blocksize"]
    if x.shape is None or len(x.shape) != 4:
        return [(None, x.dtype)]
    n, c, h, w = x.shape
    return [((n, _dim_div(c, b * b), _dim_mul(h, b), _dim_mul(w, b)), x.dtype)]


def _space_to_depth(node: Node):
    x, b = node.inputs[0], node.attrs["blocksize"]
    if x.shape is None or len(x.shape) != 4:
        return [(None, x.dtype)]
    n, c, h, w = x.shape
    return [((n, _dim_mul(c, b * b), _dim_div(h, b), _dim_div(w, b)), x.dtype)]


def _topk(node: Node):
    """Values and int64 indices: x with k along the axis (k an attribute before opset 10)."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype), (None, DType.INT64)]
    a = _axis(node.attr("axis", -1), len(x.shape))
    if opset_of(node) < 10:
        k: Dim = node.attrs["k"]
    else:
        ks = shape_value(node.inputs[1])
        k = ks[0] if ks is not None and len(ks) == 1 else None
    shape = x.shape[:a] + (k,) + x.shape[a + 1:]
    return [(shape, x.dtype), (shape, DType.INT64)]


def _range(node: Node):
    """One dim, max(ceil((limit - start) / delta), 0), where the bounds are integers we can read
    (through shape_value: arange(seq_len) has seq_len's symbol)."""
    start, limit, delta = (shape_value(v) for v in node.inputs[:3])
    dtype = node.inputs[0].dtype
    if any(b is None or len(b) != 1 for b in (start, limit, delta)):
        return [((None,), dtype)]
    (s,), (e,), (d,) = start, limit, delta
    if isinstance(s, int) and isinstance(e, int) and isinstance(d, int) and d != 0:
        return [((max(-(-(e - s) // d), 0),), dtype)]
    return [((e if s == 0 and d == 1 else None,), dtype)]   # a dim is never negative


def _constant_of_shape(node: Node):
    """The shape its input holds (read through shape_value); the dtype of `value` (float32)."""
    value = node.attr("value")
    dtype = DType.from_numpy(value.dtype) if value is not None else DType.FLOAT
    dims = shape_value(node.inputs[0])
    if dims is None:
        s = node.inputs[0].shape
        return [((None,) * s[0] if s is not None and len(s) == 1 and isinstance(s[0], int) else None, dtype)]
    return [(tuple(dims), dtype)]


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
    """Resize/Upsample with constant sizes (taken as they are, policy "stretch") or constant
    scales (floor(d · scale)); anything else leaves the rank only."""
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
        if (sv is not None and sv.const is None) or (zv is not None and zv.const is None):
            return unknown
        scales = sv.const.reshape(-1).tolist() if sv is not None and sv.const.size else None
        sizes = _const_ints(zv) if zv is not None and zv.const.size else None
        axes = [_axis(a, rank) for a in node.attr("axes") or range(rank)]
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


def _one_hot(node: Node):
    """indices' shape with depth inserted at axis (default -1, counted in the output's rank)."""
    idx, depth, values = node.inputs
    if idx.shape is None:
        return [(None, values.dtype)]
    rank = len(idx.shape) + 1
    a = _axis(node.attr("axis", -1), rank)
    k = shape_value(depth)
    return [(idx.shape[:a] + (k[0] if k is not None and len(k) == 1 else None,) + idx.shape[a:],
             values.dtype)]


def _eye_like(node: Node):
    x = node.inputs[0]
    return [(x.shape, DType(node.attrs["dtype"]) if "dtype" in node.attrs else x.dtype)]


def _non_zero(node: Node):
    x = node.inputs[0]
    return [((len(x.shape), None) if x.shape is not None else (None, None), DType.INT64)]


def _recurrent(node: Node):
    """LSTM/GRU/RNN: Y [seq, dirs, batch, hidden] ([batch, seq, dirs, hidden] with layout 1);
    Y_h and LSTM's Y_c [dirs, batch, hidden] ([batch, dirs, hidden])."""
    x, r = node.inputs[0], node.inputs[2]
    dirs = 2 if node.attr("direction", "forward") == "bidirectional" else 1
    hidden = node.attr("hidden_size") or (r.shape[-1] if r.shape is not None else None)
    if x.shape is None or len(x.shape) != 3:
        return [(None, x.dtype)] * len(node.outputs)
    batch_first = node.attr("layout", 0) == 1
    seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    y = (batch, seq, dirs, hidden) if batch_first else (seq, dirs, batch, hidden)
    state = (batch, dirs, hidden) if batch_first else (dirs, batch, hidden)
    return [(y, x.dtype)] + [(state, x.dtype)] * (len(node.outputs) - 1)


def _attention(node: Node):
    """Attention: Y [batch, q_heads, q_seq, v_head] ([batch, q_seq, q_heads·v_head] for 3-D
    inputs), present key/value [batch, kv_heads, past + kv_seq, head], the scores
    [batch, q_heads, q_seq, past + kv_seq]."""
    q, k, v = node.inputs[:3]
    past = node.input(4)
    n, dtype = len(node.outputs), q.dtype
    if q.shape is None or k.shape is None or v.shape is None:
        return [(None, dtype)] * n
    if len(q.shape) == 3:
        hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
        b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        dk, dv = _dim_div(k.shape[2], hkv), _dim_div(v.shape[2], hkv)
        y = (b, sq, _dim_mul(dv, hq))
    else:
        (b, hq, sq, _), (_, hkv, sk, dk), dv = q.shape, k.shape, v.shape[3]
        y = (b, hq, sq, dv)
    total = sk if past is None else (add(past.shape[2], sk) if past.shape is not None else None)
    outs = [y, (b, hkv, total, dk), (b, hkv, total, dv), (b, hq, sq, total)]
    return [(s, dtype) for s in outs[:n]]


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


def _integer_product(a: int, b: int, zp: int | None, conv: bool = False):
    """MatMulInteger/ConvInteger (int32) and QLinearMatMul/QLinearConv (in y's zero point's
    type, else a's): the shape of the product of inputs a and b."""
    def rule(node: Node):
        x, w = node.inputs[a], node.inputs[b]
        y_zp = node.input(zp) if zp is not None else None
        dtype = DType.INT32 if zp is None else (y_zp.dtype if y_zp is not None else x.dtype)
        if not conv:
            return [(matmul_shape(x.shape, w.shape), dtype)]
        kernel = node.attr("kernel_shape") or (list(w.shape[2:]) if w.shape is not None else None)
        if x.shape is None or kernel is None or not all(isinstance(k, int) for k in kernel):
            return [(None, dtype)]
        spatial = _spatial(node, x.shape[2:], kernel)
        m = w.shape[0] if w.shape is not None else None
        return [(None if spatial is None else (x.shape[0], m, *spatial), dtype)]
    return rule


def _det(node: Node):
    x = node.inputs[0]
    return [(None if x.shape is None else x.shape[:-2], x.dtype)]


def _bitcast(node: Node):
    return [(node.inputs[0].shape, DType(node.attrs["to"]))]


def _center_crop_pad(node: Node):
    """The input with each of `axes` (all by default) at its size in the shape input."""
    x, sizes = node.inputs[0], _const_ints(node.inputs[1])
    if x.shape is None:
        return [(None, x.dtype)]
    axes = [_axis(a, len(x.shape)) for a in node.attr("axes") or range(len(x.shape))]
    out = list(x.shape)
    for a, n in zip(axes, sizes or [None] * len(axes)):
        out[a] = n
    return [(tuple(out), x.dtype)]


def _max_unpool(node: Node):
    """output_shape when it is a constant, else (n - 1)·stride - pads + kernel per spatial axis."""
    x, out = node.inputs[0], node.input(2)
    if out is not None:
        dims = _const_ints(out)
        return [(tuple(dims) if dims is not None else None, x.dtype)]
    if x.shape is None:
        return [(None, x.dtype)]
    k = node.attrs["kernel_shape"]
    nd = len(k)
    s, p = node.attr("strides") or [1] * nd, node.attr("pads") or [0] * (2 * nd)
    spatial = [add(mul(add(n, -1), s[i]), k[i] - p[i] - p[nd + i]) for i, n in enumerate(x.shape[2:])]
    return [((*x.shape[:2], *spatial), x.dtype)]


def _window(node: Node):
    """[size] in output_datatype (float by default)."""
    n = _const_ints(node.inputs[0])
    return [((n[0] if n else None,), DType(node.attr("output_datatype", 1)))]


def _mel_weight_matrix(node: Node):
    bins, n_fft = _const_ints(node.inputs[0]), _const_ints(node.inputs[1])
    return [((n_fft[0] // 2 + 1 if n_fft else None, bins[0] if bins else None),
             DType(node.attr("output_datatype", 1)))]


def _dft(node: Node):
    """The input with the transformed axis dft_length long (n/2 + 1 onesided) and a last axis
    of 2, or 1 for the inverse of a onesided transform."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    rank = len(x.shape)
    if opset_of(node) < 20:
        axis: int | None = node.attr("axis", 1)
    else:
        given = _const_ints(node.input(2)) if node.input(2) is not None else [-2]
        axis = given[0] if given else None
    if axis is None:
        return [((None,) * rank, x.dtype)]
    a = _axis(axis, rank)
    inverse, onesided = node.attr("inverse", 0), node.attr("onesided", 0)
    length = _const_ints(node.input(1)) if node.input(1) is not None else None
    d = x.shape[a]
    n = length[0] if length else (None if node.input(1) is not None else
                                  (_dim_mul(_dim_add(d, -1), 2) if inverse and onesided else d))
    if onesided and not inverse:
        n = add(floordiv(n, 2), 1)
    out = list(x.shape)
    out[a], out[-1] = n, 1 if inverse and onesided else 2
    return [(tuple(out), x.dtype)]


def _stft(node: Node):
    """[batch, frames, bins, 2]."""
    x = node.inputs[0]
    batch = x.shape[0] if x.shape is not None else None
    return [((batch, None, None, 2), x.dtype)]


def _grid_sample(node: Node):
    """[N, C, grid's spatial dims]."""
    x, grid = node.inputs[0], node.inputs[1]
    if x.shape is None or grid.shape is None:
        return [(None, x.dtype)]
    return [((grid.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)]


def _affine_grid(node: Node):
    """[N, spatial dims of `size`..., spatial rank]."""
    theta, size = node.inputs[0], _const_ints(node.inputs[1])
    if size is None:
        return [(None, theta.dtype)]
    return [((size[0], *size[2:], len(size) - 2), theta.dtype)]


def _roi_align(node: Node):
    x, rois = node.inputs[0], node.inputs[1]
    n = rois.shape[0] if rois.shape is not None else None
    c = x.shape[1] if x.shape is not None else None
    return [((n, c, node.attr("output_height", 1), node.attr("output_width", 1)), x.dtype)]


def _col2im(node: Node):
    """[N, C / prod(block), image...]."""
    x, image, block = node.inputs[0], _const_ints(node.inputs[1]), _const_ints(node.inputs[2])
    if x.shape is None or image is None or block is None:
        return [(None, x.dtype)]
    return [((x.shape[0], _dim_div(x.shape[1], math.prod(block)), *image), x.dtype)]


def _deform_conv(node: Node):
    """[N, W.shape[0], offset's spatial dims]."""
    x, w, offset = node.inputs[:3]
    if x.shape is None or w.shape is None or offset.shape is None:
        return [(None, x.dtype)]
    return [((x.shape[0], w.shape[0], *offset.shape[2:]), x.dtype)]


def _linear_attention(node: Node):
    """output [batch, seq, q_heads·d_v]; present_state [batch, kv_heads, d_k, d_v] in past_state's
    type (query's without it)."""
    q, k, v = node.inputs[:3]
    past, hq, hkv = node.input(3), node.attr("q_num_heads"), node.attr("kv_num_heads")
    if q.shape is None or k.shape is None or v.shape is None:
        return [(None, q.dtype), (None, past.dtype if past is not None else q.dtype)]
    dk, dv = _dim_div(k.shape[2], hkv), _dim_div(v.shape[2], hkv)
    return [((q.shape[0], q.shape[1], _dim_mul(dv, hq)), q.dtype),
            ((q.shape[0], hkv, dk, dv), past.dtype if past is not None else q.dtype)]


def _causal_conv_with_state(node: Node):
    """output like the input; present_state [batch, channels, k - 1]."""
    x, w = node.inputs[0], node.inputs[1]
    k = w.shape[2] if w.shape is not None and isinstance(w.shape[2], int) else None
    state = None if x.shape is None else (*x.shape[:2], k - 1 if k is not None else None)
    return [(x.shape, x.dtype), (state, x.dtype)]


def _tfidf_vectorizer(node: Node):
    """[B, max(ngram_indexes) + 1] float for input [B, C]; [max + 1] for input [C]."""
    x, width = node.inputs[0], max(node.attrs["ngram_indexes"]) + 1
    if x.shape is None:
        return [(None, DType.FLOAT)]
    return [((x.shape[0], width) if len(x.shape) == 2 else (width,), DType.FLOAT)]


def _non_max_suppression(node: Node):
    """[selected, 3] int64: how many boxes are selected is known only at run time."""
    return [((None, 3), DType.INT64)]
