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
from ...ir.symbolic import is_symbolic
from ..impl import Impl, register
from ..native.build import NativeBuildError, toolchain, unavailable
from ..native.emit import kernels_source
from ..native.kernels import GeneratedKernel, space_of
from ..native.kernels import generated_kernel as generated_kernel_of
from ..native.kernels import refusal as kernel_refusal
from ..native.library import KernelTable


def refusal(node: Node) -> str | None:
    """Why this machine or this region cannot have the generated kernel, or None."""
    why = unavailable()
    if why is not None:
        return f"no native code on this machine: {why}"
    why = kernel_refusal(node)
    if why is None:
        missing = [d for d in _symbolic_dims(node) if d not in _dim_sources(node)]
        if missing:
            return f"its size {missing[0]} is no input's dim, where a call could read it"
    return why


def _symbolic_dims(node: Node) -> list:
    """The symbolic dims a call of the region's kernel needs: its outputs' and its space's."""
    out = [d for v in node.outputs for d in v.shape if is_symbolic(d)]
    return list(dict.fromkeys(out + [d for d in space_of(node).sizes if is_symbolic(d)]))


def _dim_sources(node: Node) -> dict:
    """Each symbolic dim of the region's inputs → (input, axis) where a call reads its size."""
    out: dict = {}
    for j, v in enumerate(node.inputs):
        for axis, d in enumerate(v.shape):
            if is_symbolic(d):
                out.setdefault(d, (j, axis))
    return out


KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def library_source(kernel: GeneratedKernel, node: Node) -> str:
    """The region's kernel as a table of one. Nothing in it names the node, so the same region
    in every block of a model is one library, built once."""
    return kernels_source([("region_kernel", kernel.source)], f"{node.attrs['kernel']}, called from PyTorch")


def generated_kernel(node: Node):
    """The region's generated C++ kernel, one call over its operands."""
    tc = toolchain()
    kernel = generated_kernel_of(node, "region_kernel")
    try:
        table = KernelTable(tc, library_source(kernel, node), 1)
    except NativeBuildError as e:
        raise KernelBuildError(f"its generated kernel does not build: {e}") from None
    except (OSError, ValueError) as e:
        raise KernelBuildError(f"its generated kernel does not load: {e}") from None
    entry = KERNEL(table.pointers[0])
    # a symbolic dim is read off the input that has it (each call may bring other sizes)
    sources = _dim_sources(node)
    dims = [sources[d] for d in kernel.sizes]
    ins = [(v.name, v.shape) for v in node.inputs]
    outs_of = [[sources[d] if is_symbolic(d) else d for d in v.shape] for v in node.outputs]
    n_in, n_out = ctypes.c_void_p * len(ins), ctypes.c_void_p * len(outs_of)
    n_dims = ctypes.c_int64 * max(len(dims), 1)

    def run(*xs: torch.Tensor):
        size = lambda d: d if isinstance(d, int) else xs[d[0]].shape[d[1]]   # noqa: E731
        # the C++ trusts the plan's types: a tensor it does not expect is refused, not read
        for x, (name, shape) in zip(xs, ins):
            want = [size(sources[d]) if is_symbolic(d) else d for d in shape]
            if x.dtype != torch.float32 or list(x.shape) != want:
                raise RuntimeError(f"region input {name!r} is {x.dtype}{list(x.shape)}, the plan "
                                   f"says float32{want}")
        xs = [x.contiguous() for x in xs]
        outs = [torch.empty([size(d) for d in shape]) for shape in outs_of]
        entry(n_in(*[x.data_ptr() for x in xs]), n_out(*[o.data_ptr() for o in outs]),
              n_dims(*[size(d) for d in dims]))
        return tuple(outs) if len(outs) > 1 else outs[0]
    run.library = table.path
    run.table = table   # the library stays loaded while the kernel lives
    return run


register(fused("Region"), Impl("generated kernel", "torch", refusal, build=generated_kernel,
                               doc="The region's generated C++ kernel, one call over its operands."))
