"""The transformer ops of opsets 23-25: Attention, RMSNormalization, RotaryEmbedding.

Attention follows the spec's pattern: Q·√scale and K·√scale multiplied, softcap, plus one
additive bias (the attention mask, the causal frontier offset by the cached keys, the sliding
window, the padding of nonpad_kv_seqlen), softmax, times V; key/value heads repeat for
grouped-query attention; a query row no key may attend gives 0. Without the debug output
qk_matmul_output, softcap or a softmax precision, it is one F.scaled_dot_product_attention
(which gives 0 for such rows too).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...ir import DType, Node
from .common import Kernel, kernel, torch_dtype

# ---- attention ------------------------------------------------------------------------------


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[batch, seq, heads·size] → [batch, heads, seq, size]."""
    return x.unflatten(-1, (heads, -1)).transpose(1, 2)


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True: attend) as a bias of 0 and -inf; a float mask as it is."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros((), dtype=dtype).masked_fill(~mask, -math.inf)


def attention_bias(mask, q_len: int, kv_len: int, past_len: int, nonpad, causal: bool,
                   left: int, right: int, dtype) -> torch.Tensor | None:
    """The one additive bias of the scores [.., q_len, kv_len] (None where nothing is masked):
    the mask, the causal/window frontier, the padding past nonpad_kv_seqlen, summed."""
    parts = []
    if mask is not None:
        parts.append(additive(padded_mask(mask, kv_len), dtype))
    if causal or left >= 0 or right >= 0:
        # a query's position counts from the keys before it: the cache, or per batch
        # nonpad_kv_seqlen - q_len for an external one
        external = nonpad is not None and not past_len
        offset = (nonpad.to(torch.int64) - q_len).view(-1, 1, 1, 1) if external else \
            torch.tensor(past_len)
        parts.append(additive(frontier(q_len, kv_len, offset, causal, left, right), dtype))
    if nonpad is not None:
        parts.append(additive(torch.arange(kv_len) < nonpad.to(torch.int64).view(-1, 1, 1, 1), dtype))
    return sum(parts[1:], parts[0]) if parts else None


def padded_mask(mask: torch.Tensor, kv_len: int) -> torch.Tensor:
    """The mask with a query axis (SDPA wants one) and its key axis padded to kv_len with -inf
    (False)."""
    mask = mask.view(1, -1) if mask.dim() == 1 else mask
    if mask.shape[-1] < kv_len:
        fill = False if mask.dtype == torch.bool else -math.inf
        mask = F.pad(mask, (0, kv_len - mask.shape[-1]), value=fill)
    return mask


def frontier(q_len: int, kv_len: int, offset: torch.Tensor, causal: bool, left: int,
             right: int) -> torch.Tensor:
    """Which keys each query may attend: none after it (causal), at most `left` before and
    `right` after it (-1: no bound); query i sits at position i + offset."""
    diff = torch.arange(q_len).unsqueeze(1) + offset - torch.arange(kv_len)   # query − key position
    allowed = torch.ones_like(diff, dtype=torch.bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed


def stepwise_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax rounding each step to x's precision, as the spec's pattern does (torch.softmax
    rounds once: 1 ulp apart in float16)."""
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def softcapped(x: torch.Tensor, cap: float) -> torch.Tensor:
    return torch.tanh(x / cap) * cap if cap > 0 else x


@kernel("Attention")
def _attention(node: Node) -> Kernel:
    """Attention (opsets 23-25): 3-D or 4-D Q/K/V, grouped-query heads, bool or float mask,
    causal, sliding window, softcap, past key/value, nonpad_kv_seqlen, qk_matmul_output."""
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    scale, causal = node.attr("scale"), bool(node.attr("is_causal", 0))
    cap, mode, precision = node.attr("softcap", 0.0), node.attr("qk_matmul_output_mode", 0), \
        node.attr("softmax_precision")
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    n_out = len(node.outputs)
    # float16 follows the spec's rounding step by step: SDPA's fp32 internals land 1 ulp away
    explicit = n_out > 3 or cap > 0 or precision is not None or node.inputs[0].dtype == DType.FLOAT16

    def run(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
        three_d = q.dim() == 3
        if three_d:
            q, k, v = split_heads(q, q_heads), split_heads(k, kv_heads), split_heads(v, kv_heads)
        past_len = 0 if past_k is None else past_k.shape[2]
        if past_k is not None:
            k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        present = (k, v)
        root = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
        bias = attention_bias(mask, q.shape[2], k.shape[2], past_len, nonpad, causal, left, right,
                              q.dtype)
        if not explicit:   # SDPA repeats key/value head h for query heads h·g … h·g + g - 1
            y, qk = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=root * root,
                                                   enable_gqa=q.shape[1] != k.shape[1]), None
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
            root = torch.tensor(root, dtype=q.dtype)   # √scale in the inputs' type, as the spec has it
            y, qk = _explicit(q * root, k * root, v, bias, cap, mode, precision)
        if three_d:
            y = y.transpose(1, 2).flatten(2)
        return (y, *present, qk)[:n_out] if n_out > 1 else y
    return run


def _explicit(q, k, v, bias, cap: float, mode: int, precision):
    """The spec's pattern step by step, for what SDPA does not give: the scores (qk_matmul_output
    in `mode`), softcap, softmax in another precision."""
    raw = q @ k.transpose(-1, -2)
    capped = softcapped(raw, cap)
    scores = capped if bias is None else capped + bias
    soft_dtype = torch_dtype(precision) if precision is not None else scores.dtype
    p = stepwise_softmax(scores.to(soft_dtype))
    if bias is not None:   # a row no key may attend is 0, not NaN (decided on the bias)
        p = p.masked_fill(torch.isneginf(bias).all(-1, keepdim=True), 0.0)
    p = p.to(q.dtype)
    qk = [raw, capped, scores, p][mode]
    return p @ v, qk.to(q.dtype)


# ---- RMSNormalization, RotaryEmbedding ------------------------------------------------------

@kernel("RMSNormalization")
def _rms_normalization(node: Node) -> Kernel:
    """x / √(mean(x², axes from `axis`) + ε), computed in stash_type, cast, times scale."""
    axis, eps = node.attr("axis", -1), node.attr("epsilon", 1e-5)
    stash = torch_dtype(node.attr("stash_type", 1))

    def run(x, scale):
        axes = tuple(range(axis % x.dim(), x.dim()))
        xs = x.to(stash)
        y = xs * torch.rsqrt(xs.square().mean(axes, keepdim=True) + eps)
        return y.to(x.dtype) * scale
    return run


@kernel("RotaryEmbedding")
def _rotary_embedding(node: Node) -> Kernel:
    """Rotate the first rotary_embedding_dim features of each head by the angles of its
    position: as pairs (x[2i], x[2i+1]) when interleaved, else halves (x[i], x[i + d/2])."""
    interleaved, rot = node.attr("interleaved", 0), node.attr("rotary_embedding_dim", 0)
    heads = node.attr("num_heads", 0)

    def run(x, cos, sin, position_ids=None):
        shape = x.shape
        x = x.transpose(1, 2) if x.dim() == 4 else x.unflatten(-1, (heads, -1))   # [b, s, h, d]
        d = rot or x.shape[-1]
        if position_ids is not None:
            cos, sin = cos[position_ids], sin[position_ids]        # [b, s, d/2]
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        turned, kept = x[..., :d], x[..., d:]
        x1, x2 = (turned[..., 0::2], turned[..., 1::2]) if interleaved else turned.chunk(2, -1)
        real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
        turned = torch.stack([real, imag], -1).flatten(-2) if interleaved else \
            torch.cat([real, imag], -1)
        y = torch.cat([turned, kept], -1)
        return y.transpose(1, 2) if len(shape) == 4 else y.reshape(shape)
    return run
