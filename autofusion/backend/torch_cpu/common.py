"""Kernels on PyTorch CPU: the table (op name → kernel builder) and helpers for builders."""
from __future__ import annotations

import warnings

from typing import Callable

import numpy as np
import torch

from ...errors import KernelBuildError
from ...ir import DType, Node
from ...ir.dtypes import torch_dtypes
from ...ir.attributes import opset_of as opset   # noqa: F401 - the kernels' name for it
from ..impl import Check, Impl, accepts, register

Kernel = Callable[..., "torch.Tensor | tuple[torch.Tensor, ...]"]
KernelBuilder = Callable[[Node], Kernel]
KERNELS: dict[str, KernelBuilder] = {}   # op → the builder of its generic torch implementation

TORCH_DTYPES: dict[DType, torch.dtype] = torch_dtypes()


def torch_dtype(dt: DType | int, where: str = "") -> torch.dtype:
    dt = DType(dt)
    if dt not in TORCH_DTYPES:
        raise KernelBuildError(f"{where}element type {dt.name} is not supported on PyTorch CPU")
    return TORCH_DTYPES[dt]


def to_torch(a: np.ndarray, dtype: DType | None = None, name: str = "") -> torch.Tensor:
    """A constant as a torch tensor, sharing the graph's memory where it can (kernels never
    write to their inputs: a read-only array is shared too, BERT's 94 MB embedding table not
    copied on every compile); a copy only for non-contiguous data."""
    if a.dtype == np.object_:
        raise KernelBuildError(f"constant {name!r}: string tensors are not supported")
    if dtype == DType.BFLOAT16 and a.dtype != np.float32:
        return torch.from_numpy(np.ascontiguousarray(a).astype(np.float32)).to(torch.bfloat16)
    if not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    if a.flags.writeable:
        return torch.from_numpy(a)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        return torch.from_numpy(a)


def kernel(*names: str, impl: str = "torch", check: Check = accepts, generic: bool = False,
           estimate=None):
    """Register a kernel builder as the torch implementation `impl` of one or more ops. The one
    named "torch" (or marked `generic`) runs whatever the node (KERNELS lists those); others
    check first. `estimate`: node → seconds, where one call over the node's bytes is not its cost."""
    def deco(builder: KernelBuilder) -> KernelBuilder:
        for n in names:
            if impl == "torch" or generic:
                KERNELS[n] = builder
            register(n, Impl(impl, "torch", check, build=builder, estimate=estimate,
                             doc=(builder.__doc__ or "").strip().split("\n")[0]))
        return builder
    return deco


def const_input(node: Node, i: int) -> np.ndarray | None:
    """The data of input i when it is a compile-time constant, else None."""
    v = node.input(i)
    return None if v is None or v.const is None else v.const


def ints_of(t: torch.Tensor | None) -> list[int] | None:
    return None if t is None else [int(x) for x in t.reshape(-1).tolist()]
