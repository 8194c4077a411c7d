"""Elementwise, broadcast, comparison, logic, cast, reduction and normalization kernels."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...ir import Node
from .common import Kernel, KernelBuilder, const_input, ints_of, kernel, opset, torch_dtype

# ---- elementwise ------------------------------------------------------------------------

def _unary(fn: Callable[[torch.Tensor], torch.Tensor]) -> KernelBuilder:
    return lambda node: fn


for _op, _fn in {
    "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Erf": torch.erf,
    "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal,
    "Neg": torch.neg, "Abs": torch.abs, "Floor": torch.floor, "Ceil": torch.ceil,
    "Sin": torch.sin, "Cos": torch.cos, "IsNaN": torch.isnan, "Not": torch.logical_not,
}.items():
    kernel(_op)(_unary(_fn))


@kernel("Identity")
def _identity(node: Node) -> Kernel:
    return lambda x: x


@kernel("Add")
def _add(node: Node) -> Kernel:
    return torch.add


@kernel("Sub")
def _sub(node: Node) -> Kernel:
    return torch.sub


@kernel("Mul")
def _mul(node: Node) -> Kernel:
    return torch.mul
