"""The generated kernel of an automatic fusion region, called from a torch partition.

The C++ loop nest a native partition runs for the region (native/kernels.py) is built alone into
a small shared library, a kernel table of one (runtime/kernel.h: a function over the pointers of
its dense float32 operands), through the native backend's toolchain and disk cache
(native/build.py `kernel_library`), and loaded with ctypes. One call then replaces the body's PyTorch calls (region.py,
op by op) and the intermediates they write to memory. Lowering picks it by cost where its check
accepts: static shapes and a C++ compiler, as for native code; elsewhere the region runs op by
op and the plan says why.

Threads: the library links libgomp by its soname, which PyTorch has loaded already, so its
OpenMP loops run in PyTorch's pool and follow the model's `threads` (torch.set_num_threads), as
native partitions do.
"""
from __future__ import annotations

import ctypes
import torch

from ...errors import KernelBuildError
from ...ir import Node
from ...ir.builder import fused
from .. import native
from ..impl import Impl, register
from ..native.build import NativeBuildError, toolchain
from ..native.emit import kernels_source
from ..native.kernels import kernel_source
from ..native.kernels import refusal as kernel_refusal
from ..native.library import KernelTable


def refusal(node: Node) -> str | None:
    """Why this machine or this region cannot have the generated kernel, or None."""
    why = native.unavailable()
    if why is not None:
        return f"no native code on this machine: {why}"
    return kernel_refusal(node)


KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def library_source(node: Node) -> str:
    """The region's kernel as a table of one. Nothing in it names the node, so the same region
    in every block of a model is one library, built once."""
    return kernels_source([("region_kernel", kernel_source(node, "region_kernel"))],
                          f"{node.attrs['kernel']}, called from PyTorch")


def generated_kernel(node: Node):
    """The region's generated C++ kernel, one call over its operands."""
    tc = toolchain()
    try:
        table = KernelTable(tc, library_source(node), 1)
    except NativeBuildError as e:
        raise KernelBuildError(f"its generated kernel does not build: {e}") from None
    except (OSError, ValueError) as e:
        raise KernelBuildError(f"its generated kernel does not load: {e}") from None
    entry = KERNEL(table.pointers[0])
    ins = [(v.name, torch.Size(v.shape)) for v in node.inputs]
    out_shapes = [tuple(v.shape) for v in node.outputs]
    n_in, n_out = ctypes.c_void_p * len(ins), ctypes.c_void_p * len(out_shapes)

    def run(*xs: torch.Tensor):
        # the C++ trusts the plan's types: a tensor it does not expect is refused, not read
        for x, (name, shape) in zip(xs, ins):
            if x.dtype != torch.float32 or x.shape != shape:
                raise RuntimeError(f"region input {name!r} is {x.dtype}{list(x.shape)}, the plan "
                                   f"says float32{list(shape)}")
        xs = [x.contiguous() for x in xs]
        outs = [torch.empty(s) for s in out_shapes]
        entry(n_in(*[x.data_ptr() for x in xs]), n_out(*[o.data_ptr() for o in outs]), None)
        return tuple(outs) if len(outs) > 1 else outs[0]
    run.library = table.path
    run.table = table   # the library stays loaded while the kernel lives
    return run


register(fused("Region"), Impl("generated kernel", "torch", refusal, build=generated_kernel,
                               doc="The region's generated C++ kernel, one call over its operands."))
