"""Conv, ConvTranspose, pooling, MatMul, Gemm and Einsum kernels."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...ir import Node
from ...ir.geometry import explicit_pads, split_total
from .common import Kernel, kernel
from .tensor import planned, torch_pads

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}

# ---- window geometry (shared by conv, conv-transpose and pools) -----------------------------


def _geometry(node: Node, nd: int) -> tuple[list[int], list[int]]:
    """(strides, dilations) of a conv/pool node with nd spatial axes."""
    return list(node.attr("strides") or [1] * nd), list(node.attr("dilations") or [1] * nd)


def _spatial_rank(node: Node) -> int:
    ks = node.attr("kernel_shape")
    ranks = [len(ks)] if ks else [v.rank - 2 for v in node.inputs[:2] if v is not None and v.rank]
    if not ranks:
        raise NotImplementedError("the number of spatial axes must be known at compile time")
    return ranks[0]


def _is_same(node: Node) -> bool:
    return node.attr("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER")


def _pads(node: Node, sizes, kernel, strides, dilations) -> list[int]:
    """The node's pads [begins..., ends...] for input spatial `sizes` (only SAME_* needs them)."""
    return explicit_pads(node.attr("auto_pad", "NOTSET"), node.attr("pads"), sizes, kernel,
                         strides, dilations)


# ---- conv -----------------------------------------------------------------------------------


@kernel("Conv")
def _conv(node: Node) -> Kernel:
    nd, ks = _spatial_rank(node), node.attr("kernel_shape")
    (strides, dilations), group, conv = _geometry(node, nd), node.attr("group", 1), _CONV[nd]

    def make(xs=None, ws=None):  # the shapes matter only to SAME_* padding
        pads = _pads(node, xs and xs[2:], ks or (ws and ws[2:]), strides, dilations)
        if pads[:nd] == pads[nd:]:
            padding = pads[:nd]
            return lambda x, w, b=None: conv(x, w, b, strides, padding, dilations, group)
        tp = torch_pads(pads)  # asymmetric: pad first
        return lambda x, w, b=None: conv(F.pad(x, tp), w, b, strides, 0, dilations, group)
    return planned(node, make, shapes=(0, 1) if _is_same(node) else ())


@kernel("ConvTranspose")
def conv_transpose(node: Node) -> Kernel:
    """ConvTranspose(x, w, b) by the node's attributes (QuantizedConvTranspose's float path too)."""
    nd, ks = _spatial_rank(node), node.attr("kernel_shape")
    (strides, dilations), group, conv_t = _geometry(node, nd), node.attr("group", 1), _CONV_T[nd]
    out_pad = list(node.attr("output_padding") or [0] * nd)
    out_shape, pads = node.attr("output_shape"), node.attr("pads")
    if node.attr("auto_pad", "NOTSET") == "VALID" or (pads is None and not out_shape and not _is_same(node)):
        pads = [0] * (2 * nd)  # else None: computed from output_shape or SAME_*

    def make(xs=None, ws=None):
        p = pads
        if p is None:  # the pads that give output_shape (SAME: input * stride)
            kernel_ = ks or ws[2:]
            target = out_shape[-nd:] if out_shape else [n * s for n, s in zip(xs[2:], strides)]
            totals = [s * (n - 1) + o + (k - 1) * d + 1 - t for n, s, o, k, d, t in
                      zip(xs[2:], strides, out_pad, kernel_, dilations, target)]
            p = split_total(totals, node.attr("auto_pad") == "SAME_UPPER")
        begins, ends = p[:nd], p[nd:]
        torch_ok = all(o < max(s, d) for o, s, d in zip(out_pad, strides, dilations))
        if begins == ends and min(begins) >= 0 and torch_ok:
            return lambda x, w, b=None: conv_t(x, w, b, strides, begins, out_pad, group, dilations)
        # else the full transposed conv, cropped by `pads` (a negative F.pad), extended by output_padding
        tp = torch_pads([-b for b in begins] + [o - e for o, e in zip(out_pad, ends)])

        def run(x, w, b=None):
            y = F.pad(conv_t(x, w, None, strides, 0, 0, group, dilations), tp)
            return y if b is None else y + b.view(-1, *[1] * nd)
        return run
    return planned(node, make, shapes=(0, 1) if pads is None else ())


# ---- pools ----------------------------------------------------------------------------------


def _pool_extent(node: Node, sizes, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """ONNX pads, and pads extended so the last window (ceil_mode) fits: windows then tile exactly."""
    pads = _pads(node, sizes, kernel, strides, dilations)
    nd, ceil = len(kernel), node.attr("ceil_mode", 0)
    ends = []
    for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
        span = n + pads[i] + pads[nd + i] - (k - 1) * d - 1
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= n + pads[i]:  # the last window must start inside input or left pad
            out -= 1
        ends.append((out - 1) * s + (k - 1) * d + 1 - n - pads[i])
    return pads, pads[:nd] + ends


def _pool_node(node: Node):
    kernel_ = list(node.attr("kernel_shape"))
    nd = len(kernel_)
    strides, dilations = _geometry(node, nd)
    p = node.attr("pads") or [0] * (2 * nd)
    # torch pools pad symmetrically by at most half the kernel; anything else is padded explicitly
    native = not _is_same(node) and p[:nd] == p[nd:] and all(b <= k // 2 for b, k in zip(p, kernel_))
    return kernel_, strides, dilations, nd, native


def _window_sum(x: torch.Tensor, kernel, strides, dilations) -> torch.Tensor:
    """Sum over each (dilated) window of an explicitly padded input: a depthwise conv with ones."""
    c = x.shape[1]
    return _CONV[len(kernel)](x, x.new_ones(c, 1, *kernel), None, strides, 0, dilations, c)


@kernel("MaxPool")
def _max_pool(node: Node) -> Kernel:
    kernel_, strides, dilations, nd, native = _pool_node(node)
    pool, ceil = _MAX_POOL[nd], bool(node.attr("ceil_mode", 0))
    with_indices, col_major = len(node.outputs) > 1, node.attr("storage_order", 0) == 1

    def onnx_indices(i, sizes, padded, begins):
        """torch's per-plane index (over the padded input) → ONNX's index over the whole input."""
        if col_major or padded != sizes:
            coords = torch.unravel_index(i, padded)
            order = range(nd) if col_major else reversed(range(nd))
            i, step = 0, 1
            for a in order:
                i, step = i + (coords[a] - begins[a]) * step, step * sizes[a]
        planes = torch.arange(i.shape[0] * i.shape[1]).view(i.shape[0], i.shape[1], *[1] * nd)
        return i + planes * math.prod(sizes)

    def make(shape=None):
        if native:
            padding = (node.attr("pads") or [0] * (2 * nd))[:nd]

            def run(x):
                r = pool(x, kernel_, strides, padding, dilations, ceil, with_indices)
                if not with_indices:
                    return r
                sizes = tuple(x.shape[2:])
                return r[0], onnx_indices(r[1], sizes, sizes, [0] * nd)
            return run
        pads, extent = _pool_extent(node, shape[2:], kernel_, strides, dilations)
        tp, sizes = torch_pads(extent), tuple(shape[2:])
        padded = tuple(n + b + e for n, b, e in zip(sizes, extent[:nd], extent[nd:]))

        def run(x):
            low = -math.inf if x.is_floating_point() else torch.iinfo(x.dtype).min
            r = pool(F.pad(x, tp, value=low), kernel_, strides, 0, dilations, False, with_indices)
            return (r[0], onnx_indices(r[1], sizes, padded, extent[:nd])) if with_indices else r
        return run
    return planned(node, make, shapes=() if native else (0,))


@kernel("AveragePool")
def _average_pool(node: Node) -> Kernel:
    kernel_, strides, dilations, nd, native = _pool_node(node)
    include_pad, ceil = node.attr("count_include_pad", 0), bool(node.attr("ceil_mode", 0))
    if native and dilations == [1] * nd:
        pool, padding = _AVG_POOL[nd], (node.attr("pads") or [0] * (2 * nd))[:nd]
        return lambda x: pool(x, kernel_, strides, padding, ceil, bool(include_pad))

    def make(shape):  # window sums divided by how many input (and, if counted, pad) cells each covers
        pads, extent = _pool_extent(node, shape[2:], kernel_, strides, dilations)
        mask = F.pad(torch.ones(1, 1, *shape[2:]), torch_pads(pads), value=float(include_pad))
        mask = F.pad(mask, torch_pads([0] * nd + [e - p for e, p in zip(extent[nd:], pads[nd:])]))
        count, tp = _window_sum(mask, kernel_, strides, dilations), torch_pads(extent)
        return lambda x: _window_sum(F.pad(x, tp), kernel_, strides, dilations) / count.to(x.dtype)
    return planned(node, make)


@kernel("LpPool")
def _lp_pool(node: Node) -> Kernel:
    kernel_, strides, dilations, nd, _ = _pool_node(node)
    p = node.attr("p", 2)

    def make(shape):
        tp = torch_pads(_pool_extent(node, shape[2:], kernel_, strides, dilations)[1])
        return lambda x: _window_sum(F.pad(x.abs().pow(p), tp), kernel_, strides, dilations).pow(1.0 / p)
    return planned(node, make)


# ---- matmul, gemm, einsum -------------------------------------------------------------------


@kernel("MatMul")
def _matmul(node: Node) -> Kernel:
    return torch.matmul


@kernel("Gemm")
def _gemm(node: Node) -> Kernel:
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    ta, tb = node.attr("transA", 0), node.attr("transB", 0)
    if alpha == 1 and beta == 1 and not ta and tb:
        return lambda a, b, c=None: F.linear(a, b, c)  # a @ b.T + c: the usual fully-connected layer

    def run(a, b, c=None):
        a, b = a.t() if ta else a, b.t() if tb else b
        if c is None or beta == 0:
            y = a @ b
            return y if alpha == 1 else y * alpha
        return torch.addmm(c, a, b, beta=beta, alpha=alpha)
    return run


@kernel("Einsum")
def _einsum(node: Node) -> Kernel:
    eq = node.attr("equation").replace(" ", "")
    return lambda *xs: torch.einsum(eq, *xs)
