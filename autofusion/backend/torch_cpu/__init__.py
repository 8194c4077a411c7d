"""Kernels on PyTorch CPU: the backend's table, op name → kernel builder.

A kernel builder receives the node once, at compile time, reads its attributes and any constant
inputs, and returns a plain callable over torch tensors (None for an omitted optional input)
that returns one tensor, or a tuple for a multi-output op. Everything that can be decided from
the node is decided in the builder, never per call. One module per op family registers into
the one table, KERNELS.
"""
from . import fused, loss, math, nn, region, tensor  # noqa: F401 - each registers its kernels
from . import attention, indexing, numeric, quantized, recurrent  # noqa: F401 - newer opsets' ops
from . import signal, state_space, text, vision  # noqa: F401 - newer opsets' ops
from . import sequence  # noqa: F401 - tensor sequences (lists of tensors)
from . import torch_call  # noqa: F401,E402 - the kernel of TorchCall (unmapped PyTorch ops)
from . import generated  # noqa: F401,E402 - regions as generated C++ kernels, after op by op (region.py)
from . import cpp_kernels  # noqa: F401,E402 - hand-written C++ kernels, after their PyTorch forms
from .common import KERNELS, TORCH_DTYPES, Kernel, KernelBuilder, kernel, to_torch, torch_dtype

__all__ = ["KERNELS", "TORCH_DTYPES", "Kernel", "KernelBuilder", "kernel", "to_torch", "torch_dtype"]
