"""ONNX's QuantizeLinear and DequantizeLinear over torch tensors: what the PyTorch kernels compute
(torch_cpu/quantized.py) and what the native backend's tables of an int8 function hold
(native/impls.py), one definition for both."""
from __future__ import annotations

import torch

RANGES = {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.uint16: (0, 65535),
          torch.int16: (-32768, 32767), torch.int32: (-2**31, 2**31 - 1)}


def saturated(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round half to even and clamp to dtype's range."""
    lo, hi = RANGES[dtype]
    return torch.round(v).clamp_(lo, hi).to(dtype)


def quantize(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, out: torch.dtype) -> torch.Tensor:
    """saturate(round(x / scale) + zero_point), the scale and zero point broadcasting against x."""
    q = torch.round(x / scale).double()
    return saturated(q if zero_point is None else q + zero_point.double(), out)


def dequantize(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None) -> torch.Tensor:
    """(x − zero_point) · scale in float32, the scale and zero point broadcasting against x."""
    dx = x.to(torch.int64)
    if zero_point is not None:
        dx = dx - zero_point.to(torch.int64)
    return dx.to(torch.float32) * scale.to(torch.float32)
