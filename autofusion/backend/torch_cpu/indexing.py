"""Ops that place values by index: Scatter (deprecated: ScatterElements without a reduction),
TensorScatter (a KV-cache write), CenterCropPad, MaxUnpool."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...ir import Node
from .common import KERNELS, Kernel, ints_of, kernel


@kernel("Scatter")
def _scatter(node: Node) -> Kernel:
    """Scatter (opsets 9-10) is ScatterElements without a reduction: its kernel runs it."""
    return KERNELS["ScatterElements"](node)


@kernel("TensorScatter")
def _tensor_scatter(node: Node) -> Kernel:
    """The cache with `update` written along `axis`, starting per batch at write_indices (0 by
    default); circular mode wraps past the cache's end."""
    axis, circular = node.attr("axis", -2), node.attr("mode", "linear") == "circular"

    def run(cache, update, write_indices=None):
        a = axis % cache.dim()
        batch, length, steps = cache.shape[0], cache.shape[a], update.shape[a]
        start = torch.zeros(batch, dtype=torch.int64) if write_indices is None else \
            write_indices.to(torch.int64)
        index = start.view(-1, 1) + torch.arange(steps)              # [batch, steps]
        if circular:
            index = index % length
        shape = [batch] + [1] * (cache.dim() - 1)
        shape[a] = steps
        return cache.scatter(a, index.view(shape).expand(update.shape), update)
    return run


@kernel("CenterCropPad")
def _center_crop_pad(node: Node) -> Kernel:
    """Each of `axes` (all by default) cropped or zero-padded to its size in `shape`, centred;
    an odd difference puts the extra element at the end."""
    axes = node.attr("axes")

    def run(x, shape):
        sizes = ints_of(shape)
        pads = [0] * (2 * x.dim())
        for a, n in zip([a % x.dim() for a in axes] if axes else range(x.dim()), sizes):
            d = n - x.shape[a]
            if d < 0:   # crop: begin at floor(-d / 2)
                x = x.narrow(a, -d // 2, n)
            else:
                pads[a], pads[x.dim() + a] = d // 2, d - d // 2
        if not any(pads):
            return x
        nd = x.dim()
        return F.pad(x, [p for i in reversed(range(nd)) for p in (pads[i], pads[nd + i])])
    return run


@kernel("MaxUnpool")
def _max_unpool(node: Node) -> Kernel:
    """X's values placed at MaxPool's flat indices I in a zero tensor of the pooled-from shape
    ((n - 1)·stride - pads + kernel per axis), placed at the front of output_shape if given."""
    kernel_ = node.attr("kernel_shape")
    nd = len(kernel_)
    strides, pads = node.attr("strides") or [1] * nd, node.attr("pads") or [0] * (2 * nd)

    def run(x, indices, output_shape=None):
        inferred = [*x.shape[:2], *((n - 1) * s - pads[i] - pads[nd + i] + k
                                    for i, (n, s, k) in enumerate(zip(x.shape[2:], strides, kernel_)))]
        y = x.new_zeros(torch.Size(inferred).numel()).scatter(0, indices.reshape(-1), x.reshape(-1))
        y = y.view(inferred)
        if output_shape is None:
            return y
        grow = [t - n for t, n in zip(ints_of(output_shape), inferred)]
        return F.pad(y, [p for g in reversed(grow) for p in (0, g)])
    return run
