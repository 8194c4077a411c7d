"""Kernels of the fused ops (domain autofusion), each one library call or one composed kernel.

Constant weights are prepared once, here, at compile time: BatchNorm has already been folded into
them by the rule; convolution weights are reordered into oneDNN's blocked layout and run on
channels-last activations with the bias, residual add and activation as oneDNN post-ops; linear
weights are pre-transposed (or packed) for `_linear_pointwise`. A builder that bakes a constant
input into its kernel lists it in `baked(...)`, and the executor then neither passes nor keeps it.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from ...errors import KernelBuildError
from ...ir import Node
from ...ir.fused_ops import ACTIVATIONS
from .common import Kernel, const_input, kernel

FUSED = "autofusion::"


def baked(fn: Kernel, *indices: int) -> Kernel:
    """Mark inputs the kernel captured at build time; the executor will not pass them."""
    fn.baked_inputs = frozenset(indices)
    return fn


# ---- activations ----------------------------------------------------------------------------
# torch form of each activation in ir/fused_ops.ACTIVATIONS, and its oneDNN post-op name

def torch_activation(node: Node) -> Callable[[torch.Tensor], torch.Tensor] | None:
    name = node.attr("activation", "")
    defaults, _ = ACTIVATIONS[name]
    p = dict(zip(defaults, node.attr("activation_params", list(defaults.values()))))
    return {
        "": None,
        "Relu": torch.relu,
        "LeakyRelu": lambda x: F.leaky_relu(x, p["alpha"]),
        "Clip": lambda x: torch.clamp(x, None if math.isinf(p["min"]) else p["min"],
                                      None if math.isinf(p["max"]) else p["max"]),
        "Sigmoid": torch.sigmoid,
        "Tanh": torch.tanh,
        "HardSigmoid": (F.hardsigmoid if (p.get("alpha"), p.get("beta")) == (1 / 6, 0.5) else
                        lambda x: torch.clamp(x * p["alpha"] + p["beta"], 0, 1)),
        "HardSwish": F.hardswish,
        "Elu": lambda x: F.elu(x, p["alpha"]),
        "SiLU": F.silu,
        "Gelu": F.gelu,
        "GeluTanh": lambda x: F.gelu(x, approximate="tanh"),
    }[name]


def onednn_post_op(node: Node) -> tuple[str, list, str] | None:
    """(attr, scalars, algorithm) for oneDNN's pointwise post-op, or None if it has none."""
    name = node.attr("activation", "")
    defaults, _ = ACTIVATIONS[name]
    p = dict(zip(defaults, node.attr("activation_params", list(defaults.values()))))
    if name == "Clip":
        if math.isinf(p["min"]) or math.isinf(p["max"]):
            return None
        return "hardtanh", [p["min"], p["max"]], ""
    return {"": ("none", [], ""), "Relu": ("relu", [], ""), "Sigmoid": ("sigmoid", [], ""),
            "Tanh": ("tanh", [], ""), "HardSwish": ("hardswish", [], ""),
            "SiLU": ("swish", [], ""), "Gelu": ("gelu", [], "none"),
            "GeluTanh": ("gelu", [], "tanh"),
            "LeakyRelu": ("leaky_relu", [p.get("alpha", 0.01)], "")}.get(name)


# ---- FusedConv ----------------------------------------------------------------------------

@kernel(FUSED + "FusedConv")
def fused_conv(node: Node) -> Kernel:
    nd = len(node.inputs[1].shape) - 2 if node.inputs[1].shape else 2
    strides = list(node.attr("strides", [1] * nd))
    dilations = list(node.attr("dilations", [1] * nd))
    pads = list(node.attr("pads", [0] * 2 * nd))
    group = node.attr("group", 1)
    if pads[:nd] != pads[nd:]:
        raise KernelBuildError("FusedConv needs symmetric pads (the rule pads asymmetric ones)")
    pads = pads[:nd]
    act = torch_activation(node)
    onednn = _onednn_conv(node, strides, pads, dilations, group, act) if nd == 2 else None
    if onednn is not None:
        return onednn
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]

    def run(x, w, b=None, z=None):
        y = conv(x, w, b, strides, pads, dilations, group)
        if z is not None:
            y = y + z
        return act(y) if act else y
    return run


def _onednn_conv(node, strides, pads, dilations, group, act) -> Kernel | None:
    """oneDNN convolution on channels-last input with prepacked weights and post-ops, if it fits."""
    w, b, post = const_input(node, 1), const_input(node, 2), onednn_post_op(node)
    x_shape = node.inputs[0].shape
    if w is None or post is None or (node.input(2) is not None and b is None) or \
            x_shape is None or not all(isinstance(d, int) for d in x_shape[1:]):
        return None
    bias = torch.from_numpy(b.copy()) if b is not None else None
    packed = torch.ops.mkldnn._reorder_convolution_weight(
        torch.from_numpy(w.copy()), pads, strides, dilations, group, [1, *x_shape[1:]])
    attr, scalars, algorithm = post
    conv, cl = torch.ops.mkldnn._convolution_pointwise, torch.channels_last
    if node.input(3) is None:
        def run(x):
            return conv(x.contiguous(memory_format=cl), packed, bias, pads, strides, dilations,
                        group, attr, scalars, algorithm)
    elif attr in ("none", "relu"):   # residual as oneDNN's sum post-op, then ReLU
        unary = None if attr == "none" else attr

        def run(x, z):
            return conv.binary(x.contiguous(memory_format=cl), z.contiguous(memory_format=cl),
                               packed, bias, pads, strides, dilations, group, "sum", 1.0, unary,
                               [], None)
    else:
        def run(x, z):
            return act(conv.binary(x.contiguous(memory_format=cl), z.contiguous(memory_format=cl),
                                   packed, bias, pads, strides, dilations, group, "sum", 1.0,
                                   None, [], None))
    return baked(run, 1, 2)


# ---- FusedMatMul ----------------------------------------------------------------------------

@kernel(FUSED + "FusedMatMul")
def fused_matmul(node: Node) -> Kernel:
    trans_a, trans_b = node.attr("trans_a", 0), node.attr("trans_b", 0)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    act = torch_activation(node)
    w = const_input(node, 1)
    if w is not None and w.ndim == 2 and not trans_a and alpha == 1.0 and beta == 1.0:
        # a linear layer: weight as [out, in] once, bias baked, activation after oneDNN's GEMM
        weight = torch.from_numpy((w if trans_b else w.T).copy()).contiguous()
        c = const_input(node, 2)
        bias = torch.from_numpy(c.copy()) if c is not None and c.ndim == 1 else None
        if bias is not None or node.input(2) is None:
            lin = F.linear
            if act is None:
                return baked(lambda x: lin(x, weight, bias), 1, 2)
            return baked(lambda x: act(lin(x, weight, bias)), 1, 2)

    def run(a, b, c=None):
        if trans_a:
            a = a.transpose(-1, -2)
        if trans_b:
            b = b.transpose(-1, -2)
        y = torch.matmul(a, b)
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return act(y) if act else y
    return run


# ---- normalization, activations -----------------------------------------------------------

def _normalized_shape(node: Node) -> Callable[[torch.Tensor], "tuple | torch.Size"]:
    """The normalized dims of x (from `axis` on): fixed now when static, else read per call."""
    shape = node.inputs[0].shape
    axis = node.attr("axis", -1) % len(shape)
    dims = shape[axis:]
    if all(isinstance(d, int) for d in dims):
        return lambda x, dims=tuple(dims): dims
    return lambda x: x.shape[axis:]


@kernel(FUSED + "LayerNorm")
def layer_norm(node: Node) -> Kernel:
    dims, eps, ln = _normalized_shape(node), node.attr("epsilon", 1e-5), F.layer_norm
    if node.input(3) is None:
        return lambda x, scale=None, bias=None: ln(x, dims(x), scale, bias, eps)

    def run(x, scale, bias, residual):
        x = x + residual
        return ln(x, dims(x), scale, bias, eps)
    return run


@kernel(FUSED + "RMSNorm")
def rms_norm(node: Node) -> Kernel:
    dims, eps, rms = _normalized_shape(node), node.attr("epsilon", 1e-6), F.rms_norm
    return lambda x, scale=None: rms(x, dims(x), scale, eps)


@kernel(FUSED + "Gelu")
def gelu(node: Node) -> Kernel:
    approximate = node.attr("approximate", "none")
    return lambda x: F.gelu(x, approximate=approximate)


@kernel(FUSED + "Activation")
def activation(node: Node) -> Kernel:
    act = torch_activation(node)
    return act if act is not None else (lambda x: x)


# ---- attention, head ----------------------------------------------------------------------

@kernel(FUSED + "Attention")
def attention(node: Node) -> Kernel:
    scale = node.attr("scale", 1.0)
    sdpa = F.scaled_dot_product_attention

    def run(q, k, v, mask=None):
        return sdpa(q, k, v, attn_mask=mask, scale=scale)
    return run


@kernel(FUSED + "PoolGemm")
def pool_gemm(node: Node) -> Kernel:
    alpha, beta, trans_b = node.attr("alpha", 1.0), node.attr("beta", 1.0), node.attr("transB", 0)

    def run(x, w, b=None):
        pooled = x.mean(dim=tuple(range(2, x.dim())))
        y = torch.matmul(pooled, w.t() if trans_b else w)
        if alpha != 1.0:
            y = y * alpha
        return y if b is None else y + (b * beta if beta != 1.0 else b)
    return run
