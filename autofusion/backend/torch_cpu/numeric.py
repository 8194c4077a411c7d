"""Numeric ops of the newer opsets: CumProd, Det, BitCast, Swish, SwiGLU."""
from __future__ import annotations

import torch

from ...ir import Node
from .common import Kernel, kernel, torch_dtype


@kernel("CumProd")
def _cum_prod(node: Node) -> Kernel:
    """Running products along `axis` (a scalar input), exclusive (each leaves itself out)
    and/or in reverse."""
    exclusive, reverse = node.attr("exclusive", 0), node.attr("reverse", 0)

    def run(x, axis):
        a = int(axis) % x.dim()
        if reverse:
            x = x.flip(a)
        if exclusive and x.shape[a]:
            x = torch.cat([torch.ones_like(x.narrow(a, 0, 1)), x.narrow(a, 0, x.shape[a] - 1)], a)
        y = torch.cumprod(x, a, dtype=x.dtype)   # integers would widen to int64
        return y.flip(a) if reverse else y
    return run


@kernel("Det")
def _det(node: Node) -> Kernel:
    return torch.linalg.det


@kernel("BitCast")
def _bitcast(node: Node) -> Kernel:
    """The same bits read as type `to` (of the same width)."""
    to = torch_dtype(node.attr("to"), f"BitCast {node.name!r}: ")
    return lambda x: x.contiguous().view(to)


@kernel("Swish")
def _swish(node: Node) -> Kernel:
    alpha = node.attr("alpha", 1.0)
    return lambda x: x * torch.sigmoid(alpha * x)


@kernel("SwiGLU")
def _swiglu(node: Node) -> Kernel:
    """Swish(A) · B: the gated linear unit of LLaMA-style MLPs."""
    alpha = node.attr("alpha", 1.0)
    return lambda a, b: a * torch.sigmoid(alpha * a) * b
