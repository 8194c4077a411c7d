"""Tensor (injective and shape) kernels: reshape, slice, gather, pad, resize, …, and opaque shape ops."""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from ...ir import DType, Node
from ...ir.dims import slice_bounds
from .common import Kernel, const_input, ints_of, kernel, opset, to_torch, torch_dtype

# ---- helpers ------------------------------------------------------------------------------


def const_vals(node: Node, i: int) -> tuple | None:
    """Constant input i as a flat tuple of Python numbers; None when absent or computed at run time."""
    c = const_input(node, i)
    return None if c is None else tuple(c.reshape(-1).tolist())


def static_shape(node: Node, i: int = 0) -> tuple[int, ...] | None:
    v = node.input(i)
    return tuple(v.shape) if v is not None and v.is_static else None


def planned(node: Node, make: Callable[..., Kernel], vals: tuple[int, ...] = (),
            shapes: tuple[int, ...] = (0,)) -> Kernel:
    """A kernel that depends on the shapes of inputs `shapes` and on the values of inputs `vals`.

    make(*shapes, *values) returns the kernel for them (a value is a tuple of numbers, None for an
    omitted input). It runs once at build time when all of them are known then, else once per
    distinct runtime combination (cached).
    """
    fixed = {i: const_vals(node, i) for i in vals}
    runtime = [i for i in vals if fixed[i] is None and node.input(i) is not None]
    known = [static_shape(node, i) for i in shapes]
    if None not in known and not runtime:
        return make(*known, *(fixed[i] for i in vals))
    cache: dict[tuple, Kernel] = {}

    def run(*args):
        key = (*(tuple(args[i].shape) for i in shapes),
               *(tuple(args[i].reshape(-1).tolist()) if i in runtime else fixed[i] for i in vals))
        f = cache.get(key)
        if f is None:
            f = cache[key] = make(*key)
        return f(*args)
    return run


def torch_pads(pads: list[int]) -> list[int]:
    """ONNX pads [begins..., ends...] → F.pad's order (last_begin, last_end, previous_begin, ...)."""
    nd = len(pads) // 2
    return [p for i in reversed(range(nd)) for p in (pads[i], pads[nd + i])]


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _outputs(node: Node) -> Callable[[tuple], "torch.Tensor | tuple"]:
    """Adapt a tuple of results to the node's outputs: one tensor for one output."""
    n = len(node.outputs)
    return (lambda r: r[0]) if n == 1 else (lambda r: tuple(r[:n]))


def _pos_index(idx: torch.Tensor, dim: int) -> torch.Tensor:
    """ONNX indices may be negative (counted from the end); torch's gather/scatter take int64 >= 0."""
    idx = idx.long()
    return torch.where(idx < 0, idx + dim, idx)


# ---- reshape family -------------------------------------------------------------------------


@kernel("Transpose")
def _transpose(node: Node) -> Kernel:
    perm = node.attr("perm")
    if perm is None:
        return lambda x: x.permute(*reversed(range(x.dim())))
    return lambda x: x.permute(perm)


@kernel("Reshape")
def _reshape(node: Node) -> Kernel:
    allowzero = node.attr("allowzero", 0)
    shape = const_vals(node, 1) if opset(node) >= 5 else tuple(node.attr("shape"))
    if shape is not None and (allowzero or 0 not in shape):
        return lambda x, s=None: x.reshape(shape)

    def make(xs, target):  # 0 copies the input's dim unless allowzero
        t = [xs[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
        return lambda x, s=None: x.reshape(t)
    return planned(node, make, (1,))


@kernel("Flatten")
def _flatten(node: Node) -> Kernel:
    axis = node.attr("axis", 1)

    def run(x):
        a = _axis(axis, x.dim())
        return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))
    return run


@kernel("Squeeze")
def _squeeze(node: Node) -> Kernel:
    if opset(node) < 13:
        axes = node.attr("axes")
        return (lambda x: x.squeeze()) if axes is None else (lambda x: x.squeeze(tuple(axes)))
    axes = const_vals(node, 1)
    if axes is not None:
        return lambda x, a=None: x.squeeze(axes)
    return lambda x, a=None: x.squeeze() if a is None else x.squeeze(tuple(ints_of(a)))


@kernel("Unsqueeze")
def _unsqueeze(node: Node) -> Kernel:
    def unsqueeze(x, axes):  # axes count in the output's rank; insert in increasing order
        r = x.dim() + len(axes)
        for a in sorted(_axis(a, r) for a in axes):
            x = x.unsqueeze(a)
        return x
    axes = node.attr("axes") if opset(node) < 13 else const_vals(node, 1)
    if axes is not None:
        return lambda x, a=None: unsqueeze(x, axes)
    return lambda x, a: unsqueeze(x, ints_of(a))


@kernel("Concat")
def _concat(node: Node) -> Kernel:
    axis = node.attr("axis")
    return lambda *xs: torch.cat(xs, axis)


@kernel("Split")
def _split(node: Node) -> Kernel:
    axis, n, out = node.attr("axis", 0), len(node.outputs), _outputs(node)

    def make(shape, split):
        if split is None:  # n parts of ceil(d / n); the last ones smaller
            d = shape[axis]
            c = -(-d // n)
            split = [max(min(c, d - c * i), 0) for i in range(n)]
        return lambda x, s=None: out(torch.split(x, list(split), axis))
    split = node.attr("split") if opset(node) < 13 else None
    if split is not None:
        return make(None, split)
    if opset(node) >= 13 and node.input(1) is not None:
        return planned(node, lambda s: make(None, s), (1,), shapes=())
    return planned(node, lambda shape: make(shape, None))


@kernel("Slice")
def _slice(node: Node) -> Kernel:
    def make(shape, starts, ends, axes=None, steps=None):
        rank = len(shape)
        axes = range(len(starts)) if axes is None else [_axis(a, rank) for a in axes]
        steps = steps or [1] * len(starts)
        index, flips = [slice(None)] * rank, []
        for a, s, e, st in zip(axes, starts, ends, steps):
            s, e, st = slice_bounds(shape[a], int(s), int(e), int(st))
            if st > 0:
                index[a] = slice(s, e, st)
            else:  # torch has no negative steps: take the same elements ascending, then flip
                n = len(range(s, e, st))
                index[a] = slice(s + (n - 1) * st, s + 1, -st) if n else slice(0, 0)
                flips.append(a)
        index = tuple(index)
        return (lambda x, *_: x[index].flip(flips)) if flips else (lambda x, *_: x[index])
    if opset(node) < 10:
        starts, ends, axes = node.attr("starts"), node.attr("ends"), node.attr("axes")
        return planned(node, lambda shape: make(shape, starts, ends, axes))
    return planned(node, make, (1, 2, 3, 4))


@kernel("Expand")
def _expand(node: Node) -> Kernel:
    # bidirectional broadcast: the shape may also be smaller than the input's
    return planned(node, lambda xs, s: (lambda x, _=None: x.expand(torch.broadcast_shapes(xs, s))), (1,))


@kernel("Tile")
def _tile(node: Node) -> Kernel:
    reps = const_vals(node, 1)
    if reps is not None:
        return lambda x, r=None: x.repeat(reps)
    return lambda x, r: x.repeat(ints_of(r))


@kernel("DepthToSpace")
def _depth_to_space(node: Node) -> Kernel:
    b, crd = node.attr("blocksize"), node.attr("mode", "DCR") == "CRD"

    def run(x):
        n, c, h, w = x.shape
        if crd:
            y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
        else:
            y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
        return y.reshape(n, c // (b * b), h * b, w * b)
    return run


@kernel("SpaceToDepth")
def _space_to_depth(node: Node) -> Kernel:
    b = node.attr("blocksize")
    perm = (0, 1, 3, 5, 2, 4) if node.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)

    def run(x):
        n, c, h, w = x.shape
        return x.reshape(n, c, h // b, b, w // b, b).permute(perm).reshape(n, c * b * b, h // b, w // b)
    return run


# ---- pad ------------------------------------------------------------------------------------


def _pad_index(n: int, begin: int, end: int, mode: str) -> torch.Tensor:
    """Source index of every output position along one axis padded in reflect/edge/wrap mode
    (negative pads crop first; the padding then repeats the cropped data)."""
    lo = max(-begin, 0)
    n -= lo + max(-end, 0)
    i = torch.arange(-max(begin, 0), n + max(end, 0))
    if mode == "edge":
        i = i.clamp(0, n - 1)
    elif mode == "wrap":
        i = i % n
    else:  # reflect: mirror without repeating the edge element
        period = max(2 * (n - 1), 1)
        i = i.abs() % period
        i = torch.where(i >= n, period - i, i)
    return i + lo


@kernel("Pad")
def _pad(node: Node) -> Kernel:
    mode = node.attr("mode", "constant")
    if opset(node) < 11:
        pads, value, runtime_value = tuple(node.attr("pads")), node.attr("value", 0.0), False
    else:
        cv = const_input(node, 2)
        pads, value = None, 0 if cv is None else cv.item()
        runtime_value = cv is None and node.input(2) is not None

    def make(shape, pads, axes=None):
        rank = len(shape)
        axes = list(range(rank)) if axes is None else [_axis(a, rank) for a in axes]
        k = len(axes)
        full = [0] * (2 * rank)  # all begins, then all ends
        for j, a in enumerate(axes):
            full[a], full[rank + a] = pads[j], pads[k + j]
        if mode == "constant":
            tp = torch_pads(full)
            if runtime_value:
                return lambda x, p, v, ax=None: F.pad(x, tp, value=v.item())
            return lambda x, *_: F.pad(x, tp, value=value)
        index = [(a, _pad_index(shape[a], full[a], full[rank + a], mode))
                 for a in range(rank) if full[a] or full[rank + a]]

        def run(x, *_):
            for a, i in index:
                x = x.index_select(a, i)
            return x
        return run
    if pads is not None:
        return planned(node, lambda shape: make(shape, pads))
    return planned(node, make, (1, 3))


# ---- gather / scatter -----------------------------------------------------------------------


@kernel("Gather")
def _gather(node: Node) -> Kernel:
    axis = node.attr("axis", 0)
    if axis == 0:
        return lambda x, i: x[i]  # advanced indexing takes negative indices

    def run(x, i):
        return x[(slice(None),) * _axis(axis, x.dim()) + (i,)]
    return run


@kernel("GatherElements")
def _gather_elements(node: Node) -> Kernel:
    axis = node.attr("axis", 0)
    return lambda x, i: torch.gather(x, axis, _pos_index(i, x.shape[axis]))


@kernel("GatherND")
def _gather_nd(node: Node) -> Kernel:
    b = node.attr("batch_dims", 0)

    def run(x, idx):
        batch = x.shape[:b]
        nb = math.prod(batch)
        xr, ir = x.reshape(nb, *x.shape[b:]), idx.reshape(nb, *idx.shape[b:]).long()
        bi = torch.arange(nb).view(nb, *[1] * (ir.dim() - 2))
        y = xr[(bi, *ir.unbind(-1))]
        return y.reshape(*batch, *y.shape[1:])
    return run


def _one_index_per_slice(x: torch.Tensor, i: torch.Tensor, u: torch.Tensor, axis: int) -> bool:
    """Whether scattering u at i along axis writes whole slices of x: i one index per slice,
    broadcast over the other axes (stride 0, as an Expand's view is), covering them, as u does.
    torchvision's multi-scale RoIAlign merges its levels so."""
    return x.dim() > 0 and i.shape == u.shape and all(
        i.stride(d) == 0 and i.shape[d] == x.shape[d] for d in range(x.dim()) if d != axis)


_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@kernel("ScatterElements")
def _scatter_elements(node: Node) -> Kernel:
    axis, red = node.attr("axis", 0), node.attr("reduction", "none")
    if red == "none":
        def scattered(x, i, u, into: bool):
            a = axis % max(x.dim(), 1)
            if _one_index_per_slice(x, i, u, a):   # whole slices: copied, not element by element
                per_slice = _pos_index(i[tuple(slice(None) if d == a else 0 for d in range(i.dim()))], x.shape[a])
                return x.index_copy_(a, per_slice, u) if into else x.index_copy(a, per_slice, u)
            at = _pos_index(i, x.shape[axis])
            return x.scatter_(axis, at, u) if into else x.scatter(axis, at, u)

        def run(x, i, u):
            return scattered(x, i, u, False)
        # where the executor owns x (a fresh tensor no one else reads: torchvision's multi-scale
        # RoIAlign scatters its four levels into one zero tensor of 1,000 regions, 50 MB, which the
        # copy of each scatter wrote four times over; 10 ms each)
        run.into_input = lambda x, i, u: scattered(x, i, u, True)
        run.fresh = True
        return run
    return lambda x, i, u: x.scatter_reduce(axis, _pos_index(i, x.shape[axis]), u, _REDUCE[red])


@kernel("ScatterND")
def _scatter_nd(node: Node) -> Kernel:
    red = node.attr("reduction", "none")

    def run(x, idx, u):
        k = idx.shape[-1]
        dims = torch.tensor(x.shape[:k])
        strides = torch.tensor([math.prod(x.shape[j + 1:k]) for j in range(k)])
        flat = ((idx.long() % dims) * strides).sum(-1).reshape(-1)  # row-major over the first k dims
        y = x.reshape(-1, *x.shape[k:]).clone()
        u = u.reshape(-1, *x.shape[k:])
        if red == "none":
            y.index_copy_(0, flat, u)
        elif red == "add":
            y.index_add_(0, flat, u)
        else:
            y.index_reduce_(0, flat, u, _REDUCE[red])
        return y.reshape(x.shape)
    return run


@kernel("ReverseSequence")
def _reverse_sequence(node: Node) -> Kernel:
    bax, tax = node.attr("batch_axis", 1), node.attr("time_axis", 0)

    def run(x, lens):
        t = torch.arange(x.shape[tax])
        lens = lens.long().view(-1, 1)
        src = torch.where(t < lens, lens - 1 - t, t)  # [batch, time]: reverse the first lens[b] steps
        if bax > tax:
            src = src.t()
        shape = [1] * x.dim()
        shape[bax], shape[tax] = x.shape[bax], x.shape[tax]
        return torch.gather(x, tax, src.reshape(shape).expand(x.shape))
    return run


@kernel("Trilu")
def _trilu(node: Node) -> Kernel:
    f = torch.triu if node.attr("upper", 1) else torch.tril
    k = const_vals(node, 1)
    if k is not None or node.input(1) is None:
        k = k[0] if k else 0
        return lambda x, _=None: f(x, k)
    return lambda x, k: f(x, int(k))


# ---- resize ---------------------------------------------------------------------------------


def _cubic(d: torch.Tensor, a: float) -> torch.Tensor:
    d = d.abs()
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return torch.where(d <= 1, near, torch.where(d < 2, far, torch.zeros_like(d)))


def _resize_axis(n_in: int, n_out: int, scale: float, roi: tuple[float, float], opts: dict):
    """Along one axis: source indices [n_out, taps], their weights (None for nearest), and the
    output positions to set to extrapolation_value (tf_crop_and_resize), as in ONNX's reference."""
    y = torch.arange(n_out, dtype=torch.float64)
    length, ctm = scale * n_in, opts["ctm"]
    if ctm == "align_corners":
        x = y * 0 if length == 1 else y * (n_in - 1) / (length - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":  # roi arithmetic in float32, as in ONNX's reference
        lo, hi = torch.tensor(roi, dtype=torch.float32)
        if length == 1:
            x = y * 0 + float((hi - lo) * (n_in - 1) / 2)
        else:
            x = y * float(hi - lo) * (n_in - 1) / (length - 1)
        x = x + float(lo * (n_in - 1))
    elif ctm == "pytorch_half_pixel":
        x = y * 0 - 0.5 if length == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        x = n_in / 2 * (1 - n_out / length) + (y + 0.5) / scale - 0.5
    else:  # half_pixel
        x = (y + 0.5) / scale - 0.5
    outside = ((x < 0) | (x > n_in - 1)) if ctm == "tf_crop_and_resize" else None
    mode = opts["mode"]
    if mode == "nearest":
        nm = opts["nearest_mode"]
        i = {"floor": x.floor(), "ceil": x.ceil(), "round_prefer_ceil": (x + 0.5).floor()}.get(
            nm, (x - 0.5).ceil())  # round_prefer_floor
        return i.clamp(0, n_in - 1).long().view(-1, 1), None, outside
    s = min(scale, 1.0) if opts["antialias"] else 1.0  # antialias widens the filter when shrinking
    start = math.floor((-1 if mode == "linear" else -2) / s) + 1
    taps = (x.ceil() - 1).view(-1, 1) + start + torch.arange(2 - 2 * start)  # left of x first
    d = (taps - x.view(-1, 1)) * s
    w = (1 - d.abs()).clamp(min=0) if mode == "linear" else _cubic(d, opts["cubic_a"])
    if opts["exclude_outside"]:
        w = torch.where((taps < 0) | (taps >= n_in), 0.0, w)
    if opts["exclude_outside"] or opts["antialias"]:
        total = w.sum(-1, keepdim=True)
        w = w / torch.where(total == 0, 1.0, total)
    return taps.clamp(0, n_in - 1).long(), w, outside


def _resize_plan(shape, opts, roi=None, scales=None, sizes=None, axes=None) -> Kernel:
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [_axis(a, rank) for a in axes]
    k, by_size = len(axes), bool(sizes)  # an empty scales or sizes tensor means absent
    if by_size:
        ratios = [sizes[j] / shape[a] for j, a in enumerate(axes)]
        if opts["policy"] != "stretch":  # one scale for all axes; sizes rounded half up
            s = (min if opts["policy"] == "not_larger" else max)(ratios)
            ratios, sizes = [s] * k, [int(s * shape[a] + 0.5) for a in axes]
    else:
        ratios, sizes = list(scales), [int(s * shape[a]) for s, a in zip(scales, axes)]
    sc, out = [1.0] * rank, list(shape)
    for j, a in enumerate(axes):
        sc[a], out[a] = ratios[j], sizes[j]
    steps = []
    for j, a in enumerate(axes):
        r = (roi[j], roi[k + j]) if roi else (0.0, 1.0)
        if out[a] == shape[a] and math.isclose(sc[a], 1) and math.isclose(r[0], 0) and math.isclose(r[1], 1):
            continue  # identity along this axis
        idx, w, outside = _resize_axis(shape[a], out[a], sc[a], r, opts)
        view = [-1] + [1] * (rank - a - 1)
        steps.append((a, idx, None if w is None else w.view(*idx.shape, *view[1:]),
                      None if outside is None or not outside.any() else outside.view(view)))
    extrapolation = opts["extrapolation"]

    def run(x, *_):
        for a, idx, w, outside in steps:
            if w is None:
                x = x.index_select(a, idx[:, 0])
            else:  # weighted taps, in float32 at least
                g = x.index_select(a, idx.reshape(-1)).unflatten(a, idx.shape)
                dt = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
                y = (g.to(dt) * w.to(dt)).sum(a + 1)
                x = y.to(x.dtype) if x.is_floating_point() else y.round().to(x.dtype)
            if outside is not None:
                x = x.masked_fill(outside, extrapolation)
        return x
    fast = _interpolate(shape, [a for a, *_ in steps], sc, out, opts, by_size)
    if fast is None:
        return run
    return lambda x, *_: fast(x) if x.dtype in (torch.float32, torch.float64) else run(x)


_INTERPOLATE = {("linear", 3): "linear", ("linear", 4): "bilinear", ("linear", 5): "trilinear",
                ("cubic", 4): "bicubic"}


def _interpolate(shape, resized, sc, out, opts, by_size) -> Kernel | None:
    """F.interpolate where it computes ONNX's Resize (up to rounding): linear or cubic over spatial
    axes, half_pixel (torch's align_corners=False) or align_corners; None elsewhere."""
    mode, ctm, spatial = _INTERPOLATE.get((opts["mode"], len(shape))), opts["ctm"], range(2, len(shape))
    size, factors = [out[a] for a in spatial], [sc[a] for a in spatial]
    if mode is None or opts["antialias"] or opts["policy"] != "stretch":
        return None
    if not resized or min(resized) < 2 or min(size) == 0:  # batch or channels resized, or empty
        return None
    if mode == "bicubic" and (opts["cubic_a"] != -0.75 or opts["exclude_outside"]):
        return None  # torch's bicubic: a = -0.75, borders clamped
    if ctm == "align_corners" and all(sc[a] * shape[a] == out[a] for a in spatial):
        return lambda x: F.interpolate(x, size=size, mode=mode, align_corners=True)
    if ctm == "half_pixel" or (ctm == "pytorch_half_pixel" and min(size) > 1):
        if by_size:
            return lambda x: F.interpolate(x, size=size, mode=mode, align_corners=False)
        return lambda x: F.interpolate(x, scale_factor=factors, mode=mode, align_corners=False,
                                       recompute_scale_factor=False)
    return None


def _resize_opts(node: Node, ctm: str, nearest_mode: str) -> dict:
    mode = node.attr("mode", "nearest")
    return {"mode": {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(mode, mode),
            "ctm": node.attr("coordinate_transformation_mode", ctm),
            "nearest_mode": node.attr("nearest_mode", nearest_mode),
            "cubic_a": node.attr("cubic_coeff_a", -0.75),
            "exclude_outside": node.attr("exclude_outside", 0),
            "antialias": node.attr("antialias", 0),
            "policy": node.attr("keep_aspect_ratio_policy", "stretch"),
            "extrapolation": node.attr("extrapolation_value", 0.0)}


@kernel("Resize")
def _resize(node: Node) -> Kernel:
    if opset(node) < 11:  # Resize-10 is Upsample-9 under a new name
        opts = _resize_opts(node, "asymmetric", "floor")
        return planned(node, lambda shape, scales: _resize_plan(shape, opts, scales=scales), (1,))
    opts, axes = _resize_opts(node, "half_pixel", "round_prefer_floor"), node.attr("axes")
    return planned(node, lambda shape, *roi_scales_sizes: _resize_plan(shape, opts, *roi_scales_sizes, axes),
                   (1, 2, 3))


@kernel("Upsample")
def _upsample(node: Node) -> Kernel:
    opts = _resize_opts(node, "asymmetric", "floor")
    opts["ctm"], opts["nearest_mode"] = "asymmetric", "floor"
    if opset(node) < 9:
        scales = tuple(node.attr("scales"))
        return planned(node, lambda shape: _resize_plan(shape, opts, scales=scales))
    return planned(node, lambda shape, scales: _resize_plan(shape, opts, scales=scales), (1,))


# ---- shape and data-dependent ops (opaque) --------------------------------------------------


@kernel("Shape")
def _shape(node: Node) -> Kernel:
    start, end = node.attr("start", 0), node.attr("end")
    return lambda x: torch.tensor(x.shape[start:end], dtype=torch.int64)


@kernel("Size")
def _size(node: Node) -> Kernel:
    return lambda x: torch.tensor(x.numel(), dtype=torch.int64)


@kernel("ConstantOfShape")
def _constant_of_shape(node: Node) -> Kernel:
    value = node.attr("value")
    v = torch.zeros((), dtype=torch.float32) if value is None else to_torch(value).reshape(())
    fill, dtype = v.item(), v.dtype
    shape = const_vals(node, 0)
    if shape is not None:
        run = lambda s: torch.full(shape, fill, dtype=dtype)   # noqa: E731
    else:
        run = lambda s: torch.full(ints_of(s), fill, dtype=dtype)   # noqa: E731
    run.fresh = True   # a tensor of its own: a reader that owns it may write into it
    return run


@kernel("Range")
def _range(node: Node) -> Kernel:
    return lambda start, limit, delta: torch.arange(start.item(), limit.item(), delta.item(),
                                                    dtype=start.dtype)


@kernel("TopK")
def _topk(node: Node) -> Kernel:
    axis, largest = node.attr("axis", -1), bool(node.attr("largest", 1))
    kc = (node.attr("k"),) if opset(node) < 10 else const_vals(node, 1)

    def run(x, k=None):
        k = kc[0] if kc is not None else int(k)
        if 0 < 2 * k <= x.shape[axis]:   # a few of many: torch.topk (a 1.3M-score row: 5 ms, not 115)
            v, i = torch.topk(x, k, dim=axis, largest=largest)
            kth = v.narrow(axis, k - 1, 1)
            if not kth.isnan().any() and torch.equal((x == kth).sum(axis), (v == kth).sum(axis)):
                return _lower_index_first(v, i, axis, largest)
        # ONNX wants the lower index first among equal values: a stable sort orders them so
        v, i = torch.sort(x, dim=axis, descending=largest, stable=True)
        return v.narrow(axis, 0, k), i.narrow(axis, 0, k)
    return run


def _lower_index_first(v: torch.Tensor, i: torch.Tensor, axis: int, largest: bool):
    """torch.topk's values and indices, equal values reordered by index as ONNX's TopK has them.
    The caller checks that every value equal to the k-th one is in: torch.topk takes any of them."""
    i, by_index = torch.sort(i, dim=axis)
    v, order = torch.sort(v.gather(axis, by_index), dim=axis, descending=largest, stable=True)
    return v, i.gather(axis, order)


@kernel("NonZero")
def _nonzero(node: Node) -> Kernel:
    return lambda x: torch.nonzero(x).t()


@kernel("EyeLike")
def _eyelike(node: Node) -> Kernel:
    k, dt = node.attr("k", 0), node.attr("dtype")
    dtype = None if dt is None else torch_dtype(DType(dt), "EyeLike: ")

    def run(x):
        y = torch.zeros(x.shape, dtype=dtype or x.dtype)
        y.diagonal(k).fill_(1)
        return y
    return run


@kernel("OneHot")
def _onehot(node: Node) -> Kernel:
    axis = node.attr("axis", -1)

    def run(indices, depth, values):
        d = int(depth.reshape(-1)[0])
        idx = indices.long()
        idx = torch.where(idx < 0, idx + d, idx)  # negative indices count from the end
        a = _axis(axis, idx.dim() + 1)
        classes = torch.arange(d).view([d] + [1] * (idx.dim() - a))
        return torch.where(idx.unsqueeze(a) == classes, values[1], values[0])
    return run


@kernel("Compress")
def _compress(node: Node) -> Kernel:
    axis = node.attr("axis")
    if axis is None:
        return lambda x, c: x.reshape(-1).index_select(0, c.nonzero().reshape(-1))
    return lambda x, c: x.index_select(axis, c.nonzero().reshape(-1))


@kernel("Unique")
def _unique(node: Node) -> Kernel:
    axis, is_sorted, out = node.attr("axis"), node.attr("sorted", 1), _outputs(node)

    def run(x):
        if axis is None:
            x = x.reshape(-1)
        a = 0 if axis is None else _axis(axis, x.dim())
        y, inverse, counts = torch.unique(x, sorted=True, return_inverse=True, return_counts=True, dim=a)
        n = x.shape[a]
        first = torch.full((y.shape[a],), n).scatter_reduce(0, inverse, torch.arange(n), "amin")
        if not is_sorted:  # order of first occurrence
            perm = first.argsort()
            rank = torch.empty_like(perm)
            rank[perm] = torch.arange(len(perm))
            y, first, inverse, counts = y.index_select(a, perm), first[perm], rank[inverse], counts[perm]
        return out((y, first, inverse, counts))
    return run
