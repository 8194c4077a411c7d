"""Symbolic-dimension arithmetic: the dims of a shape are ints, symbols (str), sizes computed
from symbols (symbolic.SizeExpr) or None where unknown, and these functions compute with them
without guessing — numpy broadcasting and matmul, ONNX's slice clamping, the dims a shape
tensor holds, the dim a Reshape's -1 stands for, the shape two possible results share.
"""
from __future__ import annotations

import math

from .graph import Dim, Shape, Value
from .symbolic import add, exact_quotient, floordiv, maximum, minimum, mul, product, sub


def broadcast_shapes(*shapes: Shape) -> Shape:
    """Numpy broadcasting over possibly symbolic shapes; None where it cannot be known. Where
    dims differ symbolically the result is their maximum: each is 1 or that size, so it is the
    size whichever it is (a position embedding sliced to min(s, 512) added to [b, s, 768]: s)."""
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
            out.append(static.pop() if static else None if None in dims else maximum(*dims))
    return tuple(out)



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


def merge_shapes(a: Shape, b: Shape) -> Shape:
    """The shape two values that may each be the result share: a dim where they agree, unknown
    where they differ; unknown rank where the ranks differ."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def dim_product(dims) -> Dim:
    """The product of dims (symbolic ones multiplied out); 0 if any is 0, else None if any is."""
    if any(d == 0 for d in dims):
        return 0
    return product(dims)


def dim_quotient(d: Dim, k: int) -> Dim:
    """d / k where k divides d: an error for a size it does not divide; a symbolic d only where
    k divides it for every value (2·s / 2), else None."""
    if isinstance(d, int):
        if d % k:
            raise ValueError(f"{d} does not divide by {k}")
        return d // k
    return exact_quotient(d, k)


def same_dim(dims) -> Dim:
    """The one dim several values must share (Concat's other axes): a size if any has one, else
    a symbolic one."""
    sizes = {d for d in dims if isinstance(d, int)}
    if len(sizes) > 1:
        raise ValueError(f"dims {dims} should be equal")
    if sizes:
        return sizes.pop()
    return next((d for d in dims if d is not None), None)

def slice_bounds(d: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """Slice bounds clamped as the ONNX spec says: negatives count from the end, then starts go
    to [0, d] stepping forward and [0, d-1] stepping back, ends to [0, d] and [-1, d-1]. (Python's
    slice.indices differs going back from before -d: it takes nothing where ONNX starts at 0.)
    The end comes back as Python's range wants it: -1 means "past index 0", not "the last"."""
    if step == 0:
        raise ValueError("Slice step 0")
    start, end = start + d if start < 0 else start, end + d if end < 0 else end
    if step > 0:
        return min(max(start, 0), d), min(max(end, 0), d), step
    return min(max(start, 0), d - 1), min(max(end, -1), d - 1), step


def symbolic_slice_bounds(d: Dim, start: int, end: int) -> tuple[Dim, Dim]:
    """slice_bounds for a symbolic d, stepping forward: (lo, hi), each clamped to [0, d]."""
    def clamped(i: int) -> Dim:
        if i >= 2**31 - 1:
            return d
        if i <= -(2**31 - 1):
            return 0
        return maximum(add(d, i), 0) if i < 0 else minimum(i, d)
    return clamped(start), clamped(end)


def shape_value(v: Value | None, depth: int = 0) -> list[Dim] | None:
    """The value of a 1-D integer tensor that holds dims, as dims (ints, symbolic ones, None
    where unknown), when it is computed the way exporters build reshape targets: a Concat of
    constants and of dims picked (Gather, Slice) out of a Shape, or computed from such with
    Add, Sub, Mul and Div (h·w, c / heads). None if it is computed any other way."""
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
    if op in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape"):   # a scalar ↔ a 1-element list
        return shape_value(src, depth + 1)
    if op == "ConstantOfShape":
        n, fill = shape_value(src, depth + 1), node.attr("value")
        if n is None or len(n) != 1 or not isinstance(n[0], int) or fill is None or fill.dtype.kind not in "iu":
            return None
        return [int(fill.reshape(-1)[0])] * n[0]
    if op == "Where":   # torch.onnx's expand(-1): Where(Equal(shape, -1), ones, shape)
        return _where(node, depth)
    if op == "Concat":
        parts = [shape_value(i, depth + 1) for i in node.inputs]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if op in ARITHMETIC and len(node.inputs) == 2:
        a, b = (shape_value(i, depth + 1) for i in node.inputs)
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        n = max(len(a), len(b))
        return [ARITHMETIC[op](x, y) for x, y in zip(a * n if len(a) == 1 else a, b * n if len(b) == 1 else b)]
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
        start, end, step = slice_bounds(len(picked), start, end,
                                        rest[1] if len(rest) > 1 and rest[1] is not None else 1)
        return [picked[i] for i in range(start, end, step)]
    return None


def _where(node, depth: int) -> list[Dim] | None:
    """Where(Equal(x, y), a, b) over dims, each comparison decided (a size is never negative)."""
    cond = node.inputs[0].producer
    if cond is None or cond.op_type != "Equal" or cond.domain:
        return None
    x, y, a, b = (shape_value(v, depth + 1) for v in (*cond.inputs, *node.inputs[1:]))
    if any(p is None for p in (x, y, a, b)) or len({len(x), len(y), len(a), len(b)} - {1}) > 1:
        return None
    n = max(len(x), len(y), len(a), len(b))
    out = []
    for i in range(n):
        p, q, s, t = (v[0] if len(v) == 1 else v[i] for v in (x, y, a, b))
        if isinstance(p, int) and isinstance(q, int):
            same = p == q
        elif p == q and p is not None:
            same = True
        elif (isinstance(p, int) and p < 0) or (isinstance(q, int) and q < 0):
            same = False   # a symbolic size against a negative int
        else:
            return None
        out.append(s if same else t)
    return out


def _divided(a: Dim, b: Dim) -> Dim:
    """ONNX's Div of two dims (integer division of sizes: the floor), exactly where b is an int."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b > 0 else None
    return floordiv(a, b) if isinstance(b, int) and b > 0 else exact_quotient(a, b)


def _known(f):
    return lambda a, b: None if a is None or b is None else f(a, b)


# the arithmetic exporters do on dims (a reshape to [b, h·w], [b, s, c / heads])
ARITHMETIC = {"Add": _known(add), "Sub": _known(sub), "Mul": _known(mul), "Div": _known(_divided)}


def inferred_dim(total: Shape, others: list[Dim]) -> Dim:
    """The dim a Reshape's -1 stands for: the element count of `total` over that of `others`,
    cancelling symbolic dims (x [b, s, 768] viewed as [b, -1, 12, 64] gives s)."""
    if total is None or None in total or None in others:
        return None
    if all(isinstance(d, int) for d in (*total, *others)):
        n, m = math.prod(total), math.prod(others)
        return n // m if m and not n % m else None
    return exact_quotient(product(total), product(others))
