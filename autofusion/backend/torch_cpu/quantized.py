"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer
ops QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger.

Correct first: products and convolutions of integers run in float64, where every partial sum of
8- and 16-bit products is an exact integer (far below 2^53), so they equal int32 accumulation.
Rounding is half to even (torch.round) and results saturate to the output type's range. The
requantization multiplier x_scale·w_scale / y_scale is computed in float32 and applied to the
exact sum in float64, as ONNX's reference does; ONNX Runtime's int8 kernels apply it in float32
and can land 1 step away.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import KernelBuildError
from ...ir import DType, Node
from ...ir.geometry import explicit_pads
from ...ir.builder import fused
from ..quantize import RANGES, dequantize, quantize, saturated
from .common import Kernel, const_input, kernel, torch_dtype
from .fused import baked, torch_activation
from .nn import conv_transpose
from .tensor import torch_pads

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def per_element(p: torch.Tensor, shape, axis: int, block: int = 0) -> torch.Tensor:
    """A scale or zero point made to broadcast against x: one value for all (per-tensor), one per
    index of `axis` (per-axis), or one per `block` consecutive indices of it (blocked)."""
    if p.numel() == 1:
        return p.reshape(())
    if not block:
        return p.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return p.repeat_interleave(block, axis).narrow(axis, 0, shape[axis])


def _integer_type(dt: DType, where: str) -> torch.dtype:
    t = torch_dtype(dt, where)
    if t not in RANGES:
        raise KernelBuildError(f"{where}quantization to {dt.name} is not supported on PyTorch CPU")
    return t


# ---- quantize, dequantize -----------------------------------------------------------------

@kernel("QuantizeLinear")
def _quantize_linear(node: Node) -> Kernel:
    """saturate(round(x / scale) + zero_point), per tensor, axis or block; the output type is the
    zero point's, else output_dtype, else uint8."""
    axis, block, precision = node.attr("axis", 1), node.attr("block_size", 0), node.attr("precision")
    zp = node.input(2)
    out = _integer_type(zp.dtype if zp is not None and zp.dtype is not None else
                        DType(node.attr("output_dtype") or DType.UINT8), f"{node.name}: ")
    work = torch_dtype(precision) if precision else None

    def run(x, scale, zero_point=None):
        a = axis % x.dim() if x.dim() else 0
        if work is not None:
            x, scale = x.to(work), scale.to(work)
        return quantize(x, per_element(scale, x.shape, a, block),
                        None if zero_point is None else per_element(zero_point, x.shape, a, block), out)
    return run


@kernel("DequantizeLinear")
def _dequantize_linear(node: Node) -> Kernel:
    """(x - zero_point) · scale in float32, per tensor, axis or block; in scale's type, or
    output_dtype."""
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)
    out = torch_dtype(node.attr("output_dtype")) if node.attr("output_dtype") else None

    def run(x, scale, zero_point=None):
        a = axis % x.dim() if x.dim() else 0
        y = dequantize(x, per_element(scale, x.shape, a, block),
                       None if zero_point is None else per_element(zero_point, x.shape, a, block))
        return y.to(out or scale.dtype)
    return run


@kernel("DynamicQuantizeLinear")
def _dynamic_quantize_linear(node: Node) -> Kernel:
    """uint8 over the range of x and 0: scale (max − min) / 255 (1 where x is all 0, as ONNX
    Runtime), zero point round(−min / scale)."""
    def run(x):
        xf = x.to(torch.float32)
        lo, hi = xf.min().clamp(max=0), xf.max().clamp(min=0)
        scale = torch.where(hi == lo, 1.0, (hi - lo) / 255)
        zp = saturated(-lo / scale, torch.uint8)
        return saturated(torch.round(xf / scale) + zp, torch.uint8), scale, zp
    return run


# ---- integer products -----------------------------------------------------------------------

def centred(x: torch.Tensor, zero_point: torch.Tensor | None, axis: int = 1) -> torch.Tensor:
    """x − zero_point as float64 integers; a zero point of more than one value is laid along
    `axis` (a matrix's rows −2 or columns −1, a weight's output channels 0)."""
    x = x.to(torch.float64)
    if zero_point is None:
        return x
    zp = zero_point.to(torch.float64)
    if zp.numel() == 1:
        return x - zp.reshape(())
    shape = [1] * x.dim()
    shape[axis] = -1
    return x - zp.reshape(shape)


def integer_conv(node: Node):
    """The node's convolution (strides, pads or auto_pad, dilations, group) over float64."""
    auto_pad, group = node.attr("auto_pad", "NOTSET"), node.attr("group", 1)

    def conv(x, w, b=None):
        nd = w.dim() - 2
        strides, dilations = node.attr("strides") or [1] * nd, node.attr("dilations") or [1] * nd
        pads = explicit_pads(auto_pad, node.attr("pads"), list(x.shape[2:]), list(w.shape[2:]),
                             strides, dilations)
        if pads[:nd] != pads[nd:]:
            x, pads = F.pad(x, torch_pads(pads)), [0] * (2 * nd)
        return _CONV[nd](x, w, b, strides, pads[:nd], dilations, group)
    return conv


def _requantized(acc, multiplier, y_zero_point, dtype):
    """acc · multiplier + y_zero_point, saturated to dtype (the zero point's, else the input's)."""
    y = acc * multiplier.to(torch.float64)
    if y_zero_point is not None:
        y = y + y_zero_point.to(torch.float64)
    return saturated(y, y_zero_point.dtype if y_zero_point is not None else dtype)


@kernel("MatMulInteger")
def _matmul_integer(node: Node) -> Kernel:
    """(A − a_zero_point)·(B − b_zero_point) in int32; zero points per tensor, per row of A or
    per column of B."""
    def run(a, b, a_zero_point=None, b_zero_point=None):
        return torch.round(centred(a, a_zero_point, -2) @ centred(b, b_zero_point, -1)).to(torch.int32)
    return run


@kernel("ConvInteger")
def _conv_integer(node: Node) -> Kernel:
    """Conv(x − x_zero_point, w − w_zero_point) in int32; w's zero point per tensor or per
    output channel."""
    conv = integer_conv(node)

    def run(x, w, x_zero_point=None, w_zero_point=None):
        return torch.round(conv(centred(x, x_zero_point), centred(w, w_zero_point, 0))).to(torch.int32)
    return run


@kernel("QLinearMatMul")
def _qlinear_matmul(node: Node) -> Kernel:
    """Quantized MatMul: the integer product requantized to y's scale and zero point; scales and
    zero points per tensor, per row of a or per column of b."""
    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
        acc = centred(a, a_zero_point, -2) @ centred(b, b_zero_point, -1)
        a_scale = a_scale.reshape(-1, 1) if a_scale.numel() > 1 else a_scale.reshape(())
        multiplier = a_scale.float() * b_scale.float() / y_scale.float()
        return _requantized(acc, multiplier, y_zero_point, a.dtype)
    return run


@kernel("QLinearConv")
def _qlinear_conv(node: Node) -> Kernel:
    """Quantized Conv: the integer convolution plus the int32 bias, requantized to y's scale and
    zero point; w's scale and zero point per tensor or per output channel."""
    conv = integer_conv(node)

    def run(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, b=None):
        bias = None if b is None else b.double()
        acc = conv(centred(x, x_zero_point), centred(w, w_zero_point, 0), bias)
        w_scale = w_scale.reshape(-1, *[1] * (x.dim() - 2)) if w_scale.numel() > 1 else \
            w_scale.reshape(())
        multiplier = x_scale.float() * w_scale.float() / y_scale.float()
        return _requantized(acc, multiplier, y_zero_point, x.dtype)
    return run


# ---- the fused int8 ops (fusion/rules/quantized.py) -----------------------------------------
# Their Q/DQ graph's float path: x dequantized, the op in float32 over the weight dequantized once
# at build time, the activation, the output quantized. The native backend runs them in int8.

def _dequantized_weight(node: Node) -> torch.Tensor | None:
    w, scale, zero_point = (const_input(node, i) for i in (1, 5, 6))
    if w is None or scale is None or (node.input(6) is not None and zero_point is None):
        return None
    w = torch.from_numpy(w.copy())
    axis = node.attr("axis", 0)
    return dequantize(w, per_element(torch.from_numpy(scale.copy()), w.shape, axis),
                      None if zero_point is None else per_element(torch.from_numpy(zero_point.copy()), w.shape, axis))


def _quantized_op(node: Node, product) -> Kernel:
    """x dequantized, product(x, w, b), the activation, the output quantized (float without y_scale)."""
    w = _dequantized_weight(node)
    if w is None:
        raise KernelBuildError(f"{node.name}: the weight, its scale and zero point must be constants")
    act = torch_activation(node)
    out = torch_dtype(node.outputs[0].dtype, f"{node.name}: ")

    def run(x, b, x_scale, x_zero_point, y_scale=None, y_zero_point=None):
        y = product(dequantize(x, x_scale.reshape(()), None if x_zero_point is None else x_zero_point.reshape(())), w, b)
        y = y if act is None else act(y)
        if y_scale is None:   # a float result
            return y
        return quantize(y, y_scale.reshape(()), None if y_zero_point is None else y_zero_point.reshape(()), out)
    return baked(run, 1, 5, 6)


@kernel(fused("QuantizedConv"))
def _quantized_conv(node: Node) -> Kernel:
    """Q(act(Conv(DQ(x), DQ(w), b))) in float32, the weight dequantized once."""
    return _quantized_op(node, integer_conv(node))


@kernel(fused("QuantizedConvTranspose"))
def _quantized_conv_transpose(node: Node) -> Kernel:
    """Q(act(ConvTranspose(DQ(x), DQ(w), b))) in float32, the weight dequantized once."""
    return _quantized_op(node, conv_transpose(node))


@kernel(fused("QuantizedMatMul"))
def _quantized_matmul(node: Node) -> Kernel:
    """Q(act(DQ(a)·DQ(b)ᵀ? + c)) in float32, the weight dequantized (and transposed) once."""
    trans_b = node.attr("trans_b", 0)

    def product(a, w, c=None):
        y = a @ (w.T if trans_b else w)
        return y if c is None else y + c
    return _quantized_op(node, product)


def _quantized_binary(node: Node, combine) -> Kernel:
    """Q(act(combine(DQ(a), DQ(b)))) in float32."""
    act = torch_activation(node)
    out = torch_dtype(node.outputs[0].dtype, f"{node.name}: ")

    def run(a, b, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point=None):
        y = combine(dequantize(a, a_scale, a_zero_point), dequantize(b, b_scale, b_zero_point))
        return quantize(y if act is None else act(y), y_scale, y_zero_point, out)
    return run


@kernel(fused("QuantizedGatedActivation"))
def _quantized_gated_activation(node: Node) -> Kernel:
    """Q(DQ(x) · DQ(Q(act(DQ(x))))) in float32: the activation's kernel, then the product's."""
    act = torch_activation(node) or (lambda y: y)
    out = torch_dtype(node.outputs[0].dtype, f"{node.name}: ")
    gate = node.input(4)
    gate_type = torch_dtype(gate.dtype if gate is not None else DType.UINT8, f"{node.name}: ")

    def run(x, x_scale, x_zero_point, g_scale, g_zero_point, y_scale, y_zero_point=None):
        xf = dequantize(x, x_scale, x_zero_point)
        g = dequantize(quantize(act(xf), g_scale, g_zero_point, gate_type), g_scale, g_zero_point)
        return quantize(xf * g, y_scale, y_zero_point, out)
    return run


@kernel(fused("DynamicQuantizedMatMul"))
def _dynamic_quantized_matmul(node: Node) -> Kernel:
    """x quantized as DynamicQuantizeLinear does, the exact integer product, then float32 times
    the float32 product of the two scales (the graph's Cast and Muls)."""
    quantize_x = _dynamic_quantize_linear(node)

    def run(x, w, w_scale, w_zero_point=None):
        q, scale, zero_point = quantize_x(x)
        acc = torch.round(centred(q, zero_point) @ centred(w, w_zero_point, -1)).to(torch.int32)
        return acc.to(torch.float32) * (scale.to(torch.float32) * w_scale.to(torch.float32))
    return run


@kernel(fused("QuantizedAdd"))
def _quantized_add(node: Node) -> Kernel:
    """Q(act(DQ(a) + DQ(b))) in float32."""
    return _quantized_binary(node, torch.add)


@kernel(fused("QuantizedMul"))
def _quantized_mul(node: Node) -> Kernel:
    """Q(act(DQ(a) · DQ(b))) in float32."""
    return _quantized_binary(node, torch.mul)


@kernel(fused("QuantizedActivation"))
def _quantized_activation(node: Node) -> Kernel:
    """Q(act(DQ(x))) in float32."""
    act = torch_activation(node) or (lambda y: y)
    out = torch_dtype(node.outputs[0].dtype, f"{node.name}: ")

    def run(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        return quantize(act(dequantize(x, x_scale, x_zero_point)), y_scale, y_zero_point, out)
    return run
