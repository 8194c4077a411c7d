"""Tensor (injective and shape) kernels: reshape, slice, gather, pad, resize, …, and opaque shape ops."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...ir import Node
from .common import Kernel, KernelBuilder, const_input, ints_of, kernel, opset, torch_dtype

