"""Conv, ConvTranspose, pooling, MatMul, Gemm and Einsum kernels."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...ir import Node
from .common import Kernel, KernelBuilder, const_input, ints_of, kernel, opset, torch_dtype

@kernel("MatMul")
def _matmul(node: Node) -> Kernel:
    return torch.matmul


@kernel("Conv")
def _conv(node: Node) -> Kernel:
    w = node.inputs[1]
    nd = (len(w.shape) - 2) if w.shape is not None else len(node.attr("kernel_shape", [1, 1]))
    strides = node.attr("strides", [1] * nd)
    dilations = node.attr("dilations", [1] * nd)
    group = node.attr("group", 1)
    pads = node.attr("pads", [0] * (2 * nd))
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad != "NOTSET" or pads[:nd] != pads[nd:]:
        raise NotImplementedError(f"auto_pad={auto_pad} / asymmetric pads")
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    padding = pads[:nd]
    return lambda x, w, b=None: conv(x, w, b, strides, padding, dilations, group)
