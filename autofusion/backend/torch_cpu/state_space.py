"""The recurrent-state ops of linear-attention and state-space LLMs (opset 27): LinearAttention
and CausalConvWithState. Both carry a state between calls (decoding one token at a time) and
compute in float32 whatever the activations' type, as ONNX's reference does.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...ir import Node
from .attention import split_heads
from .common import Kernel, kernel


@kernel("LinearAttention")
def _linear_attention(node: Node) -> Kernel:
    """Per step t, a [d_k, d_v] state per key/value head: decayed by exp(decay_t) (gated rules),
    the value corrected by beta_t · (v_t − Sᵀk_t) (delta rules), then S += k_t ⊗ v_t; the output
    is scale · q_tᵀS, the state shared by the query heads of its group."""
    rule = node.attr("update_rule", "gated_delta")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    q_heads, kv_heads, scale = node.attr("q_num_heads"), node.attr("kv_num_heads"), node.attr("scale")

    def run(query, key, value, past_state=None, decay=None, beta=None):
        b, t, _ = query.shape
        q, k, v = (split_heads(x.float(), h)
                   for x, h in ((query, q_heads), (key, kv_heads), (value, kv_heads)))
        d_k, d_v = k.shape[-1], v.shape[-1]
        if gated:   # one decay per head, or per key feature
            g = decay.float().view(b, t, kv_heads, -1).transpose(1, 2).exp()   # [b, h, t, 1 | d_k]
        if delta:
            beta = beta.float().view(b, t, -1, 1).transpose(1, 2)              # [b, h | 1, t, 1]
        state = q.new_zeros(b, kv_heads, d_k, d_v) if past_state is None else past_state.float()
        factor = scale if scale else 1 / math.sqrt(d_k)
        outputs = []
        for i in range(t):
            k_t, v_t = k[:, :, i], v[:, :, i]
            if gated:
                state = state * g[:, :, i].unsqueeze(-1)
            if delta:
                v_t = beta[:, :, i] * (v_t - torch.einsum("bhdm,bhd->bhm", state, k_t))
            state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
            read = state.repeat_interleave(q_heads // kv_heads, 1)
            outputs.append(factor * torch.einsum("bhd,bhdm->bhm", q[:, :, i], read))
        y = torch.stack(outputs, 2).transpose(1, 2).reshape(b, t, -1).to(query.dtype)
        return y, state.to(query.dtype if past_state is None else past_state.dtype)
    return run


@kernel("CausalConvWithState")
def _causal_conv_with_state(node: Node) -> Kernel:
    """A depthwise causal Conv1d over [batch, channels, length], the k − 1 steps before the
    input taken from past_state (0 without it), optionally SiLU; the present state is the last
    k − 1 steps it saw."""
    silu = node.attr("activation", "none") in ("silu", "swish")

    def run(x, weight, bias=None, past_state=None):
        k = weight.shape[2]
        past = x.new_zeros(*x.shape[:2], k - 1) if past_state is None else past_state
        padded = torch.cat([past, x], 2)
        y = F.conv1d(padded, weight, bias, groups=x.shape[1])
        if silu:
            y = F.silu(y.float()).to(x.dtype)
        return y, padded[:, :, padded.shape[2] - (k - 1):]
    return run
