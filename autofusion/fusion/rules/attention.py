"""Scaled dot-product attention written out in ops → one F.scaled_dot_product_attention call.

    softmax(q·kᵀ·scale + mask)·v        q, k, v: [batch, heads, seq, head_dim]

Exporters write kᵀ as a Transpose — [0,1,3,2] of k, or [0,2,3,1] straight from the [B,S,H,D]
projection — and the scale as a Div by √d or a Mul by 1/√d. The fused op takes k itself: the
swap is composed with kᵀ's own Transpose, so at most one Transpose (a view) remains.

Keys and values with one head for all the query heads (multi-query attention, Falcon) broadcast
in MatMul; SDPA takes them as grouped-query attention with one group.

GPT-2 masks causally with Where(keep, scores, lowest) before the softmax. Adding
Where(keep, 0, lowest) instead gives the same float32 scores: any score below 10³¹ in magnitude
plus the lowest float rounds back to the lowest float. So the keep mask joins the additive mask,
and with a constant keep (static shapes) it folds into a constant. With a symbolic sequence
length the keep mask is sliced to it at run time and its shape is unknown here: the rule refuses
only a mask that provably grows the scores, and the kernel checks the rest per call.

ONNX's own Attention op (opset 23) becomes ours too, where it computes what ours does: no
key/value cache, softcap, sliding window or scores output (those stay the standard op).
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import DType, Value
from ..pattern import attr_value
from ..rule import Rule, dims, not_float32

LOWEST = float(np.finfo(np.float32).min)


# ---- softmax(q·kᵀ·scale + bias + mask)·v ----------------------------------------------------
# The scale is a Div (BERT), a Mul, or absent (T5; torch's SDPA export scales q and kᵀ by √scale
# each instead). Up to two additive terms: T5 adds its position bias, then the padding mask.

def scores(op, q, kt, scale, by: str | None):
    qk = op.MatMul(q, kt, _name="qk")
    return qk if by is None else getattr(op, by)(qk, scale, _name="scale")


def weighted(op, s, bias, mask, v, guarded: bool):
    """softmax(s + bias + mask)·v; torch's SDPA export guards the softmax, so a row masked out
    everywhere gives 0 rather than NaN: Where(IsNaN(p), 0, p)."""
    if bias is not None:
        s = op.Optional.Add(s, bias, _name="bias_add")
    p = op.Softmax(op.Optional.Add(s, mask, _name="add"), _name="softmax")
    if guarded:
        p = op.Where(op.IsNaN(p), 0, p, _name="guard")
    return op.MatMul(p, v)


def attention(by: str | None, guarded: bool):
    if by is None:
        def pattern(op, q, kt, v, mask=None, bias=None):
            return weighted(op, scores(op, q, kt, None, None), bias, mask, v, guarded)
    else:
        def pattern(op, q, kt, v, scale, mask=None, bias=None):
            return weighted(op, scores(op, q, kt, scale, by), bias, mask, v, guarded)
    pattern.__name__ = f"attention_{(by or 'unscaled').lower()}{'_guarded' if guarded else ''}"
    return pattern


# ---- GPT-2, GPT-Neo: softmax(where(keep, q·kᵀ·scale, lowest) + mask)·v ------------------------

def causal_attention(by: str | None):
    if by is None:
        def pattern(op, q, kt, v, keep, fill, mask=None):
            return weighted(op, op.Where(keep, scores(op, q, kt, None, None), fill, _name="where"),
                            None, mask, v, False)
    else:
        def pattern(op, q, kt, v, scale, keep, fill, mask=None):
            return weighted(op, op.Where(keep, scores(op, q, kt, scale, by), fill, _name="where"),
                            None, mask, v, False)
    pattern.__name__ = f"causal_attention_{(by or 'unscaled').lower()}"
    return pattern


# ---- check ---------------------------------------------------------------------------------

def scale_of(m) -> float | None:
    """The factor on q·kᵀ: 1 without a scale node, else the constant scalar (inverted for Div)."""
    if not m.has("scale"):
        return 1.0
    s = m.scale
    if s.const is None or s.const.size != 1:
        return None
    value = float(s.const.reshape(-1)[0])
    if m.node("scale").op_type == "Mul":
        return value
    return 1.0 / value if value != 0.0 else None


def grows(small: Value, big: tuple) -> bool:
    """Whether broadcasting `small` against `big` provably grows it: more axes, or a static dim
    other than 1 where `big` has another static one. Dims not known until run time do not count:
    the kernel checks those per call."""
    if small.shape is None:
        return False
    return len(small.shape) > len(big) or any(
        isinstance(d, int) and d != 1 and isinstance(b, int) and d != b
        for d, b in zip(reversed(small.shape), reversed(big)))


def check(m) -> str | None:
    qk, softmax = m.node("qk"), m.node("softmax")
    q, kt, v = m.q, m.kt, m.v
    reason = not_float32(qk, q, kt, v, m.values.get("mask"), m.values.get("bias"))
    if reason:
        return reason
    if q.shape is None or kt.shape is None or v.shape is None:
        return f"MatMul {qk.name!r}: the shapes of q, kᵀ and v must be known"
    rank = len(q.shape)
    if rank < 3 or len(kt.shape) != rank or len(v.shape) != rank:
        return (f"MatMul {qk.name!r}: q {dims(q)}, kᵀ {dims(kt)}, v {dims(v)} are not "
                "[batch…, seq, head_dim] of one rank ≥ 3")
    batch, kv = q.shape[:-2], kt.shape[:-2]
    one_kv_head = rank == 4 and kv[0] == batch[0] and kv[1] == 1   # multi-query (Falcon): SDPA's GQA
    if None in batch or v.shape[:-2] != kv or (kv != batch and not one_kv_head):
        return (f"MatMul {qk.name!r}: q {dims(q)}, kᵀ {dims(kt)}, v {dims(v)} do not share their "
                "batch and head dims (SDPA broadcasts only a single key/value head)")
    if None in (q.shape[-1], kt.shape[-1]) or q.shape[-1] != kt.shape[-2] or kt.shape[-1] != v.shape[-2]:
        return f"MatMul {qk.name!r}: q {dims(q)}, kᵀ {dims(kt)}, v {dims(v)}: head or key dims differ"
    axis = attr_value(softmax, "axis")
    if axis is None or axis % rank != rank - 1:
        return f"Softmax {softmax.name!r}: axis={axis}, rule needs the last axis"
    if scale_of(m) is None:
        node = m.node("scale")
        return (f"{node.op_type} {node.name!r}: the scale {m.scale.name!r} is not a nonzero "
                "constant scalar (computed at run time?)")
    scores = qk.outputs[0].shape
    if scores is None:
        return f"MatMul {qk.name!r}: the shape of the scores is unknown"
    for name, by in (("scale", "scale"), ("bias", "bias_add"), ("mask", "add"), ("keep", "where"),
                     ("fill", "where")):
        x = m.values.get(name)
        if x is not None and grows(x, scores):
            node = m.node(by)
            term = "mask" if name == "bias" else name   # either additive term is a mask to SDPA
            return (f"{node.op_type} {node.name!r}: the {term} {x.name!r} {dims(x)} does not "
                    f"broadcast to the scores {dims(qk.outputs[0])} without growing them")
    if m.has("where"):
        where, fill = m.node("where"), m.fill
        if m.keep.dtype != DType.BOOL:
            return f"Where {where.name!r}: its condition {m.keep.name!r} is not bool"
        if fill.const is None or fill.const.size != 1 or float(fill.const.reshape(-1)[0]) != LOWEST:
            value = "a computed value" if fill.const is None else f"{float(fill.const.reshape(-1)[0]):g}"
            return (f"Where {where.name!r}: masked scores are set to {value}; the rule needs the "
                    f"lowest float32 ({LOWEST:.8g}), for which adding equals replacing")
    return None


# ---- replacement ---------------------------------------------------------------------------

def untransposed(op, kt: Value) -> Value:
    """k from kᵀ: kᵀ with its last two axes swapped, composed into kᵀ's own Transpose if any."""
    rank = len(kt.shape)
    swap = [*range(rank - 2), rank - 1, rank - 2]
    t = kt.producer
    if t is None or t.op_type != "Transpose" or t.domain != "":
        return op.Transpose(kt, perm=swap)
    perm = attr_value(t, "perm")
    perm = list(perm) if perm is not None else list(reversed(range(rank)))
    composed = [perm[i] for i in swap]
    return t.inputs[0] if composed == list(range(rank)) else op.Transpose(t.inputs[0], perm=composed)


def scaled_by(v: Value) -> tuple[Value, float]:
    """v = x·c with c a constant float32 scalar and v used only here: (x, c); else (v, 1)."""
    mul = v.producer
    if mul is None or mul.op_type != "Mul" or mul.domain or len(v.uses) != 1:
        return v, 1.0
    for x, c in (mul.inputs, reversed(mul.inputs)):
        if c.const is not None and c.const.size == 1 and c.dtype == DType.FLOAT and \
                x.shape is not None and x.shape == v.shape:
            return x, float(c.const.reshape(-1)[0])
    return v, 1.0


def replace(op, m):
    mask, bias = m.values.get("mask"), m.values.get("bias")
    if bias is not None:   # one additive mask (T5's position bias + padding, merged by CSE across layers)
        mask = bias if mask is None else op.Add(bias, mask)
    if m.has("where"):   # keep → 0 / lowest, joined with the additive mask
        additive = op.Where(m.keep, op.constant(np.float32(0), "zero"), m.fill)
        mask = additive if mask is None else op.Add(additive, mask)
    (q, fq), (kt, fk) = scaled_by(m.q), scaled_by(m.kt)   # q·√s and kᵀ·√s join the scale
    return op.Attention(q, untransposed(op, kt), m.v, mask, scale=scale_of(m) * fq * fk,
                        **({"nan_to_zero": 1} if m.has("guard") else {}))


# ---- ONNX's own Attention (opsets 23-25) onto ours ---------------------------------------------
# The standard op is softmax(q·kᵀ·scale + bias)·v too, where the bias is the mask (a boolean one
# as 0 / -inf), the causal frontier and the padding; a query row the bias rules out everywhere
# gives 0 (nan_to_zero). 3-D q/k/v [batch, seq, heads·size] are split into heads around ours
# (Reshape and Transpose, views); grouped-query attention folds the g query heads of each
# key/value head into its rows, [b, h_kv, g·s_q, d], so one key/value head serves them.

def standard_attention(op, q, k, v, mask=None, past_key=None, past_value=None, nonpad=None):
    return op.Attention(q, k, v, mask, past_key, past_value, nonpad, _name="attention")


def heads(node, q, k) -> tuple:
    """(query heads, key/value heads, q_len, kv_len, head size) where the shapes say them."""
    if q.rank == 3:
        hq, hkv = attr_value(node, "q_num_heads"), attr_value(node, "kv_num_heads")
        size = q.shape[2] // hq if hq and isinstance(q.shape[2], int) and q.shape[2] % hq == 0 else None
        return hq, hkv, q.shape[1], k.shape[1], size
    return q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]


def standard_attention_check(m) -> str | None:
    node, q, k, v, mask = m.node("attention"), m.q, m.k, m.v, m.mask
    name = f"Attention {node.name!r}"
    for input_, what in (("past_key", "past_key/past_value (a key/value cache)"),
                         ("nonpad", "nonpad_kv_seqlen (an external cache)")):
        if m.values.get(input_) is not None:
            return f"{name}: takes {what}; our fused op attends over k and v as given"
    if len(node.outputs) > 3:
        return f"{name}: its qk_matmul_output is asked for; our fused op gives only the result"
    if attr_value(node, "softcap"):
        return f"{name}: softcap={attr_value(node, 'softcap'):g}; our fused op has no softcap"
    window = [attr_value(node, a) for a in ("left_window_size", "right_window_size")]
    if any(w is not None and w >= 0 for w in window):
        return f"{name}: a sliding window {window}; our fused op has none"
    reason = not_float32(node, q, k, v, None if mask is None or mask.dtype == DType.BOOL else mask)
    if reason:
        return reason
    precision = attr_value(node, "softmax_precision")
    if precision is not None and precision != DType.FLOAT:
        return f"{name}: softmax_precision={DType(precision).name}; our fused op's softmax is float32"
    if None in (q.shape, k.shape, v.shape) or not q.rank == k.rank == v.rank in (3, 4):
        return f"{name}: q {dims(q)}, k {dims(k)}, v {dims(v)} are not all 3-D or all 4-D"
    hq, hkv, q_len, kv_len, size = heads(node, q, k)
    if not all(isinstance(d, int) and d > 0 for d in (hq, hkv, size)) or hq % hkv:
        return f"{name}: q {dims(q)}, k {dims(k)}: the heads or the head size are not known"
    if hkv not in (1, hq) and not isinstance(v.shape[-1], int):
        return f"{name}: grouped-query attention needs v's head size {dims(v)} known"
    if attr_value(node, "is_causal") and not (isinstance(q_len, int) and isinstance(kv_len, int)):
        return f"{name}: is_causal with sequence lengths known only at run time (q {dims(q)}, k {dims(k)})"
    if mask is not None:
        return mask_reason(name, mask, (q.shape[0], hq, q_len, kv_len), hkv)
    return None


def mask_reason(name: str, mask: Value, scores: tuple, kv_heads: int) -> str | None:
    """Why the mask cannot be our op's additive mask: it would grow the scores, it is computed
    and shorter than the keys (the spec pads it), or it varies per head under grouped heads."""
    if mask.shape is None or mask.rank > 4:
        return f"{name}: the mask {mask.name!r} {dims(mask)} is not of rank ≤ 4"
    short = isinstance(mask.shape[-1], int) and isinstance(scores[-1], int) and mask.shape[-1] < scores[-1]
    if short and mask.const is None:
        return (f"{name}: the computed mask {mask.name!r} {dims(mask)} is shorter than the "
                f"{scores[-1]} keys (the spec pads it at run time)")
    if grows(mask, (*scores[:-1], mask.shape[-1] if short else scores[-1])):
        return f"{name}: the mask {mask.name!r} {dims(mask)} grows the scores [{','.join(map(str, scores))}]"
    if kv_heads not in (1, scores[1]) and mask.rank >= 3 and mask.shape[-3] != 1:
        return (f"{name}: the mask {mask.name!r} {dims(mask)} varies per head, which grouped-query "
                f"attention ({scores[1]} query heads on {kv_heads}) cannot fold into rows")
    return None


def standard_attention_replace(op, m):
    node, q, k, v = m.node("attention"), m.q, m.k, m.v
    hq, hkv, q_len, kv_len, size = heads(node, q, k)
    if q.rank == 3:   # [b, s, h·d] → [b, h, s, d]
        q, k, v = (op.Transpose(op.Reshape(x, op.constant(np.array([0, 0, h, -1], np.int64), "heads")),
                                perm=[0, 2, 1, 3]) for x, h in ((q, hq), (k, hkv), (v, hkv)))
    present = [k, v][:len(node.outputs) - 1]   # without a cache, the present key/value are k, v
    groups = hq // hkv if hkv != 1 else 1
    mask = additive_mask(op, m, q_len, kv_len, groups)
    scale = attr_value(node, "scale")
    if groups > 1:   # the g query heads of each key/value head as its rows
        q = op.Reshape(q, op.constant(np.array([0, hkv, -1, size], np.int64), "grouped"))
    y = op.Attention(q, k, v, mask, scale=scale if scale is not None else 1 / math.sqrt(size),
                     **({"nan_to_zero": 1} if mask is not None else {}))
    if groups > 1:
        dv = m.v.shape[-1] // (hkv if m.v.rank == 3 else 1)
        y = op.Reshape(y, op.constant(np.array([0, hq, -1, dv], np.int64), "heads"))
    if m.q.rank == 3:   # [b, h, s, d] → [b, s, h·d]
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.constant(np.array([0, 0, -1], np.int64), "merged"))
    return [y, *present]


def additive_mask(op, m, q_len, kv_len, groups: int) -> Value | None:
    """The bias our op adds to the scores: the mask (bool as 0 / -inf, padded to kv_len with
    -inf where shorter) plus the causal frontier, folded into a constant where both are; rows
    repeated for the grouped query heads."""
    node, mask = m.node("attention"), m.mask
    causal = None
    if attr_value(node, "is_causal"):
        causal = np.where(np.tril(np.ones((q_len, kv_len), bool)), np.float32(0), np.float32(-np.inf))
    if mask is not None and mask.const is not None:
        bias = mask.const if mask.dtype != DType.BOOL else np.where(mask.const, np.float32(0), np.float32(-np.inf))
        bias = bias.astype(np.float32)
        if bias.shape[-1] < kv_len:
            bias = np.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, kv_len - bias.shape[-1])],
                          constant_values=-np.inf)
        causal = bias if causal is None else bias + causal
        mask = None
    elif mask is not None and mask.dtype == DType.BOOL:
        mask = op.Where(mask, op.constant(np.float32(0), "zero"), op.constant(np.float32(-np.inf), "lowest"))
    # a mask of one row broadcasts over the grouped rows as it is; one row per query repeats
    if groups > 1 and causal is not None and causal.ndim >= 2 and causal.shape[-2] != 1:
        causal = np.tile(causal, (groups, 1))
    if groups > 1 and mask is not None and mask.rank >= 2 and mask.shape[-2] != 1:
        repeats = [1] * mask.rank
        repeats[-2] = groups
        mask = op.Tile(mask, op.constant(np.array(repeats, np.int64), "groups"))
    causal = None if causal is None else op.constant(np.ascontiguousarray(causal), "mask")
    if mask is None or causal is None:
        return mask if causal is None else causal
    return op.Add(mask, causal)


RULES = [
    Rule("AttentionFusionOp", 2,
         "softmax(q·kᵀ·scale + bias + mask)·v (BERT's, T5's, torch SDPA exports; Div, Mul or no "
         "scale; additive terms or none) → one scaled_dot_product_attention",
         [attention(by, guarded) for by in ("Div", "Mul", None) for guarded in (False, True)],
         replace, check),
    Rule("CausalAttentionFusionOp", 2,
         "softmax(where(keep, q·kᵀ·scale, lowest) + mask)·v (GPT-2's, GPT-Neo's causal form) → one "
         "scaled_dot_product_attention, the keep mask made additive",
         [causal_attention(by) for by in ("Div", "Mul", None)], replace, check),
    Rule("StandardAttentionFusionOp", 1,
         "ONNX's Attention (opset 23+: 3-D or 4-D, grouped heads, causal, bool or additive mask) "
         "→ our fused Attention",
         [standard_attention], standard_attention_replace, standard_attention_check),
]
