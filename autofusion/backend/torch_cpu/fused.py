"""Kernels of the fused ops (domain autofusion), each one library call or one composed kernel.

Constant weights are prepared once, here, at compile time: BatchNorm has already been folded into
them by the rule; convolution weights are reordered into oneDNN's blocked layout and run on
channels-last activations with the bias, residual add and activation as oneDNN post-ops; linear
weights are pre-transposed (or packed) for `_linear_pointwise`. A builder that bakes a constant
input into its kernel lists it in `baked(...)`, and the executor then neither passes nor keeps it.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import KernelBuildError
from ...ir import DType, Node
from ...ir.activations import ELTWISE, activation
from ...ir.builder import fused
from ...ir.fused_ops import mask_dead_rows, mask_fits
from .common import Kernel, const_input, kernel, torch_dtype


def baked(fn: Kernel, *indices: int) -> Kernel:
    """Mark inputs the kernel captured at build time; the executor will not pass them."""
    fn.baked_inputs = frozenset(indices)
    return fn


# ---- activations ----------------------------------------------------------------------------
# ir/activations.py declares each one, with PyTorch's oneDNN binding's form of its post-op

def torch_activation(node: Node) -> Callable[[torch.Tensor], torch.Tensor] | None:
    act, params = activation(node)
    return None if not node.attr("activation", "") else (lambda x: act.torch(F, x, *params))


def onednn_post_op(node: Node) -> tuple[str, list, str] | None:
    """(attr, scalars, algorithm) for PyTorch's oneDNN pointwise post-op, or None if it has none."""
    act, params = activation(node)
    steps = act.onednn(*params)
    if not steps:
        return "none", [], ""
    (alg, a, b), = steps
    post = ELTWISE[alg].torch_post_op
    return None if post is None else post(a, b)


# ---- FusedConv ----------------------------------------------------------------------------
# act(conv(x, W) + B + z) as one oneDNN call: the weight prepacked into oneDNN's blocked layout at
# build time, the activations channels-last (the output too, so a chain of FusedConvs never
# changes layout), bias, residual and activation as post-ops. A oneDNN call costs ~25 µs however
# small the conv, while PyTorch runs a small dense conv as one plain GEMM in 5-10 µs: those run on
# PyTorch's conv (see conv_onednn_pays; measured on this project's 2-core hosts, batch 1).

CONV_ONEDNN_MIN_MACS = 1 << 21   # multiply-adds per image from which oneDNN's call overhead is repaid
_TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def conv_onednn_pays(w_shape: tuple[int, ...], group: int, out_spatial: list[int]) -> bool:
    """Whether oneDNN beats PyTorch's conv: grouped and depthwise convs (PyTorch calls oneDNN there
    too, without prepacking), window convs with long reductions (PyTorch's im2col is slow there),
    and every conv of at least CONV_ONEDNN_MIN_MACS."""
    window, reduction = math.prod(w_shape[2:]), math.prod(w_shape[1:])
    if group > 1 or (window > 1 and reduction >= 256):
        return True
    return w_shape[0] * reduction * math.prod(out_spatial) >= CONV_ONEDNN_MIN_MACS


class ConvGeometry:
    """A FusedConv's window as PyTorch takes it: symmetric padding, plus the asymmetric rest as
    an explicit F.pad before the conv."""

    def __init__(self, node: Node):
        if node.inputs[1].rank is None:
            raise KernelBuildError("FusedConv needs the rank of its weight")
        nd = self.nd = node.inputs[1].rank - 2
        self.strides = list(node.attr("strides", [1] * nd))
        self.dilations = list(node.attr("dilations", [1] * nd))
        self.group = node.attr("group", 1)
        pads = list(node.attr("pads", [0] * 2 * nd))
        self.padding = [min(pads[i], pads[nd + i]) for i in range(nd)]   # the symmetric part
        self.beyond = [(pads[i] - self.padding[i], pads[nd + i] - self.padding[i]) for i in range(nd)]
        self.extra = [p for axis in reversed(self.beyond) for p in axis]   # F.pad: last axis first

    def padded(self, run: Kernel) -> Kernel:
        return _padded(run, self.extra) if any(self.extra) else run

    def sizes(self, x_shape) -> list[int]:
        """The input's spatial sizes after F.pad."""
        return [n + sum(more) for n, more in zip(x_shape[2:], self.beyond)]


def _prepacked_conv_refusal(node: Node) -> str | None:
    """Why oneDNN through PyTorch (weights prepacked, channels-last) does not run this conv."""
    w, x_shape = const_input(node, 1), node.inputs[0].shape
    if w is None or (node.input(2) is not None and const_input(node, 2) is None):
        return "the weight or bias is computed at run time"
    if x_shape is None or not all(isinstance(d, int) for d in x_shape[1:]):
        return "the input's channel and spatial sizes are not static"
    g = ConvGeometry(node)
    out = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, p, k, s, d in
           zip(g.sizes(x_shape), g.padding, w.shape[2:], g.strides, g.dilations)]
    if not conv_onednn_pays(w.shape, g.group, out):
        return "too small: oneDNN's call overhead through PyTorch exceeds the conv's work"
    return None


@kernel(fused("FusedConv"), impl="torch-onednn", check=_prepacked_conv_refusal)
def fused_conv_onednn(node: Node) -> Kernel:
    """oneDNN's convolution through PyTorch, the weight prepacked once, post-ops fused."""
    g, w, b = ConvGeometry(node), const_input(node, 1), const_input(node, 2)
    bias = None if b is None else torch.from_numpy(b.copy())
    run = _onednn_conv(torch.from_numpy(w.copy()), bias, [1, node.inputs[0].shape[1],
                       *g.sizes(node.inputs[0].shape)], g.strides, g.padding, g.dilations, g.group,
                       torch_activation(node), onednn_post_op(node), node.input(3) is not None)
    return baked(g.padded(run), 1, 2)


@kernel(fused("FusedConv"))
def fused_conv(node: Node) -> Kernel:
    """PyTorch's conv (one GEMM for a small dense conv), then the residual and activation."""
    g, w, b = ConvGeometry(node), const_input(node, 1), const_input(node, 2)
    act = torch_activation(node)
    if w is None or (node.input(2) is not None and b is None):
        return g.padded(_conv_runtime_weights(_TORCH_CONV[g.nd], g.strides, g.padding,
                                              g.dilations, g.group, act))
    bias = None if b is None else torch.from_numpy(b.copy())
    run = _torch_conv(torch.from_numpy(w.copy()), bias, g.strides, g.padding, g.dilations, g.group,
                      act, node.input(3) is not None)
    return baked(g.padded(run), 1, 2)


def _onednn_conv(weight, bias, in_size, strides, padding, dilations, group, act, post,
                 residual) -> Kernel:
    nd = weight.dim() - 2
    if nd == 1:   # oneDNN's PyTorch binding prepacks 2-D and 3-D: a 1-D conv runs with height 1
        weight, in_size = weight.unsqueeze(2), [*in_size[:2], 1, in_size[2]]
        strides, padding, dilations = [1, *strides], [0, *padding], [1, *dilations]
    packed = torch.ops.mkldnn._reorder_convolution_weight(weight, padding, strides, dilations,
                                                          group, in_size)
    cl = torch.channels_last_3d if nd == 3 else torch.channels_last
    conv = torch.ops.mkldnn._convolution_pointwise
    if not residual:
        attr, scalars, algorithm = post or ("none", [], "")
        tail = act if post is None else None

        def run(x):
            return conv(x.contiguous(memory_format=cl), packed, bias, padding, strides, dilations,
                        group, attr, scalars, algorithm)
    else:   # the residual is a binary post-op, which oneDNN can follow with ReLU only
        unary = "relu" if post is not None and post[0] == "relu" else None
        tail = act if unary is None else None

        def run(x, z):
            return conv.binary(x.contiguous(memory_format=cl), z.contiguous(memory_format=cl), packed,
                               bias, padding, strides, dilations, group, "add", 1.0, unary, [], None)
    run = _then(run, tail) if tail is not None else run
    return _as_2d(run) if nd == 1 else run


def _torch_conv(weight, bias, strides, padding, dilations, group, act, residual) -> Kernel:
    nd = weight.dim() - 2
    conv = _TORCH_CONV[nd]
    if nd > 1:   # channels-last like the activations, or PyTorch converts the weight every call
        weight = weight.contiguous(memory_format=torch.channels_last_3d if nd == 3 else torch.channels_last)
    if residual:
        def run(x, z):
            return conv(x, weight, bias, strides, padding, dilations, group).add_(z)
    else:
        def run(x):
            return conv(x, weight, bias, strides, padding, dilations, group)
    return _then(run, act) if act is not None else run


def _conv_runtime_weights(conv, strides, padding, dilations, group, act) -> Kernel:
    """A FusedConv whose weight or bias is computed (never made by the rules, but valid ONNX)."""
    def run(x, w, b=None, z=None):
        y = conv(x, w, b, strides, padding, dilations, group)
        y = y if z is None else y + z
        return y if act is None else act(y)
    return run


def _then(run: Kernel, act: Callable) -> Kernel:
    return lambda *args: act(run(*args))


def _padded(run: Kernel, extra: list[int]) -> Kernel:
    """Asymmetric pads: the part beyond the symmetric one is padded explicitly, then the conv."""
    return lambda x, *rest: run(F.pad(x, extra), *rest)


def _as_2d(run: Kernel) -> Kernel:
    return lambda x, *z: run(x.unsqueeze(2), *(t.unsqueeze(2) for t in z)).squeeze(2)


# ---- FusedMatMul ----------------------------------------------------------------------------
# A linear layer (a constant matrix B, no trans_a) gets its weight as [out, in] once, with alpha
# folded into it and beta into the bias. Big ones run as one oneDNN GEMM on the weight packed
# once, bias and activation as post-ops: on BERT-Base shapes ([1,128,768]x[768,768] and
# [768,3072] + GELU) that beat F.linear + GELU by 1.1-1.6x. Under ~8M multiply-adds oneDNN's
# ~20 µs call overhead loses, and F.linear (+ the activation) runs instead. Batched matmuls, as in
# attention, are one torch.matmul with the transposes as views.

ONEDNN_MIN_MACS = 1 << 23   # rows × in × out
ASSUMED_ROWS = 128          # rows of a dynamic-shape input, for that choice: a typical sequence


@kernel(fused("FusedMatMul"))
def fused_matmul(node: Node) -> Kernel:
    linear = _linear(node, residual=node.input(3) is not None)
    if linear is not None:
        return linear
    trans_a, trans_b = node.attr("trans_a", 0), node.attr("trans_b", 0)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    act = torch_activation(node)

    def run(a, b, c=None, residual=None):
        y = torch.matmul(a.mT if trans_a else a, b.mT if trans_b else b)
        if alpha != 1.0:
            y = y.mul_(alpha)
        if c is not None:
            y = y + c if beta == 1.0 else torch.add(y, c, alpha=beta)
        if residual is not None:
            y = y + residual
        return act(y) if act else y
    return run


def _linear(node: Node, residual: bool = False) -> Kernel | None:
    """act(x·W·alpha + beta·c (+ residual, the kernel's second input)) with W a constant matrix
    and c absent or a constant [.., N] bias."""
    w, c, out = const_input(node, 1), const_input(node, 2), node.outputs[0].shape
    if w is None or w.ndim != 2 or node.attr("trans_a", 0) or w.dtype != np.float32:
        return None
    n = w.shape[0] if node.attr("trans_b", 0) else w.shape[1]
    if node.input(2) is not None and (c is None or c.size != n or c.shape[-1:] != (n,) or
                                      out is None or c.ndim > len(out)):
        return None
    weight = torch.from_numpy(np.ascontiguousarray(
        (w if node.attr("trans_b", 0) else w.T) * np.float32(node.attr("alpha", 1.0))))
    bias = None if c is None else torch.from_numpy(
        (c.reshape(n) * np.float32(node.attr("beta", 1.0))).astype(np.float32))
    x_shape = node.inputs[0].shape
    static = x_shape is not None and all(isinstance(d, int) for d in x_shape)
    rows = math.prod(x_shape[:-1]) if static else ASSUMED_ROWS
    post, act = onednn_post_op(node), torch_activation(node)
    if residual:   # added before the activation
        return baked(lambda x, r: act(F.linear(x, weight, bias).add_(r)) if act else
                     F.linear(x, weight, bias).add_(r), 1, 2)
    if post is not None and torch.backends.mkldnn.is_available() and rows * w.size >= ONEDNN_MIN_MACS:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows if static else None)
        attr, scalars, algorithm = post
        linear = torch.ops.mkldnn._linear_pointwise
        return baked(lambda x: linear(x, packed, bias, attr, scalars, algorithm), 1, 2)
    if act is None:
        return baked(lambda x: F.linear(x, weight, bias), 1, 2)
    return baked(lambda x: act(F.linear(x, weight, bias)), 1, 2)


# ---- normalization, activations -----------------------------------------------------------

def _normalized(node: Node) -> tuple[int, tuple[int, ...] | None]:
    """The first normalized axis of x, counted from the end (-1 for the last) unless x's rank is
    unknown, and the normalized dims (from it on) when they are static."""
    shape, axis = node.inputs[0].shape, node.attr("axis", -1)
    if shape is None:
        return axis, None
    axis = axis % len(shape) - len(shape)
    dims = shape[axis:]
    return axis, tuple(dims) if all(isinstance(d, int) for d in dims) else None


@kernel(fused("LayerNorm"))
def layer_norm(node: Node) -> Kernel:
    (axis, shape), eps = _normalized(node), node.attr("epsilon", 1e-5)
    x_type = node.inputs[0].dtype
    # torch's CPU layer_norm is 2x slower without a weight, so a missing scale is ones
    ones = torch.ones(shape, dtype=torch_dtype(x_type)) if shape and x_type is not None else None
    ln = F.layer_norm

    def run(x, scale=None, bias=None, residual=None):
        if residual is not None:
            x = x + residual
        dims = shape or x.shape[axis:]
        if scale is None:
            scale = ones if ones is not None else x.new_ones(dims)
        return ln(x, dims, scale, bias, eps)
    return run


@kernel(fused("RMSNorm"))
def rms_norm(node: Node) -> Kernel:
    (axis, shape), eps = _normalized(node), node.attr("epsilon", 1e-6)
    if node.inputs[0].dtype not in (DType.FLOAT, DType.DOUBLE):   # it accumulates halves in float
        rms = F.rms_norm
        return lambda x, scale=None: rms(x, shape or x.shape[axis:], scale, eps)
    # torch's CPU rms_norm is composite and writes x² out; one vector_norm pass reads x once and
    # the two products share one buffer (~25% faster at [8,128,768])
    axes = tuple(range(axis, 0)) if axis < 0 else None
    norm, prod, count = torch.linalg.vector_norm, math.prod, math.prod(shape) if shape else None

    def run(x, scale=None):
        over = axes or tuple(range(axis, x.dim()))
        inv = norm(x, 2, over, keepdim=True).square_().div_(count or prod(x.shape[axis:])).add_(eps)
        y = x * inv.rsqrt_()
        return y if scale is None else y.mul_(scale)
    return run


@kernel(fused("NormMatMul"))
def norm_matmul(node: Node) -> Kernel:
    """The norm without scale or bias (the rule folded them into the weight and bias), then the
    linear layer's prepacked kernel. The normalized rows are this kernel's temporary: at
    transformer sizes ([128, 768] is 384 KB) they stay in cache between the two steps."""
    linear = _linear(node)
    if linear is None:
        raise KernelBuildError(f"NormMatMul {node.name!r} needs a constant float32 matrix and a "
                               "constant bias along its last axis")
    norm = (layer_norm if node.attr("norm") == "LayerNorm" else rms_norm)(node)   # axis is -1

    def run(x, residual=None):
        return linear(norm(x if residual is None else x + residual))
    return baked(run, 1, 2)


@kernel(fused("Gelu"))
def gelu(node: Node) -> Kernel:
    approximate = node.attr("approximate", "none")
    return lambda x: F.gelu(x, approximate=approximate)


@kernel(fused("Activation"))
def named_activation(node: Node) -> Kernel:
    act = torch_activation(node)
    return act if act is not None else (lambda x: x)


# ---- attention, head ----------------------------------------------------------------------

@kernel(fused("Attention"))
def attention(node: Node) -> Kernel:
    """One F.scaled_dot_product_attention, where it computes what the op means:
    - SDPA takes a mask that broadcasts to the scores without growing them. Where the graph
      cannot tell (a causal mask sliced to the run-time sequence length), the kernel checks per
      call and computes a growing mask's broadcast the way the op's decomposition does.
    - SDPA gives 0 for a query row the mask rules out everywhere (all -inf), where softmax gives
      NaN. Unless the op asks for 0 (nan_to_zero), a mask with such a row runs the decomposition.
    Either check costs a few µs, against a millisecond of attention."""
    scale, zero_rows = node.attr("scale", 1.0), node.attr("nan_to_zero", 0)
    q, k, mask = node.inputs[0], node.inputs[1], node.input(3)
    # one key/value head for every query head (multi-query) broadcasts in the decomposition's
    # MatMul; SDPA takes it as grouped-query attention
    one_kv_head = k.shape is not None and len(k.shape) == 4 and k.shape[1] == 1
    gqa = functools.partial(F.scaled_dot_product_attention, enable_gqa=True) if one_kv_head else \
        F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, scale=None):   # SDPA wants a mask of rank ≥ 2
        if attn_mask is not None and attn_mask.dim() < 2:
            attn_mask = attn_mask.reshape((1,) * (2 - attn_mask.dim()) + tuple(attn_mask.shape))
        return gqa(q, k, v, attn_mask=attn_mask, scale=scale)
    scores = None if q.shape is None or k.shape is None else (*q.shape[:-1], k.shape[-2])
    shape_known = mask is None or (scores is not None and mask_fits(mask.shape, scores))
    rows_known = mask is None or zero_rows or (mask.const is not None and not mask_dead_rows(mask.const))
    if shape_known and rows_known:
        return lambda q, k, v, mask=None: sdpa(q, k, v, attn_mask=mask, scale=scale)

    def run(q, k, v, mask):
        if (shape_known or mask_fits(mask.shape, (*q.shape[:-1], k.shape[-2]))) and \
                (rows_known or not bool(torch.isneginf(mask).all(-1).any())):
            return sdpa(q, k, v, attn_mask=mask, scale=scale)
        p = torch.softmax(torch.matmul(q, k.mT) * scale + mask, -1)
        return (p.nan_to_num(0.0) if zero_rows else p) @ v
    return run


@kernel(fused("PoolGemm"))
def pool_gemm(node: Node) -> Kernel:
    """mean over the spatial axes, then one F.linear: the weight as [out, in] with alpha folded in,
    the bias with beta folded in, both prepared here; a computed weight or bias runs generically."""
    alpha, beta, trans_b = node.attr("alpha", 1.0), node.attr("beta", 1.0), node.attr("transB", 0)
    spatial = tuple(range(2, node.inputs[0].rank or 4))
    w, c = const_input(node, 1), const_input(node, 2)
    outs = None if w is None else w.shape[0 if trans_b else 1]
    if w is not None and (node.input(2) is None or (c is not None and c.size in (1, outs))):
        weight = torch.from_numpy(np.ascontiguousarray((w if trans_b else w.T) * w.dtype.type(alpha)))
        bias = None if c is None else torch.from_numpy(
            np.broadcast_to(c.reshape(-1) * c.dtype.type(beta), (outs,)).copy())
        linear = F.linear
        return baked(lambda x: linear(x.mean(spatial), weight, bias), 1, 2)

    def run(x, w, b=None):
        y = torch.matmul(x.mean(spatial), w.t() if trans_b else w)
        if alpha != 1.0:
            y = y * alpha
        return y if b is None else y + (b * beta if beta != 1.0 else b)
    return run
