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
"""
from __future__ import annotations

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
]
