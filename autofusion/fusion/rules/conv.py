"""Convolution and its epilogue: BatchNormalization, residual Add and activation, as one FusedConv.

    FusedConv(x, W, B, z) = act(Conv(x, W) + B + z)

BatchNormalization after a conv is folded into its weight and bias at compile time
(W' = W·s, B' = (B − mean)·s + shift with s = scale/√(var + ε), in float64); the residual z and
the activation become oneDNN post-ops of the one convolution call.

The rules compose: ConvBNFusionOp and ConvFusionOp turn a Conv into a FusedConv, and the epilogue
rules append a residual (ConvAddFusionOp) and then an activation (ConvActivationFusionOp) to a
FusedConv that has none yet, so every chain Conv [+BN] [+Add] [+act] ends as one node. The two
classic chains come first under their own names, so a report says "Conv+BatchNormalization+Relu
matched 33 times" for ResNet-50: larger patterns before the smaller ones they contain. The
residual rules are level 2: they join two branches, the conv's and the shortcut's.

A gate on the input channels, FusedConv(x·g) with g constant along every axis but the channel
one (squeeze-excitation's sigmoid gate before its projection, a per-channel scale), moves into the
weight: Conv(x·g, W) = Conv(x, W·g), since g scales input channel c of every window and the zero
padding alike. A constant g is folded at compile time; a computed one costs a product over W and
its reorder on each call instead of a product over x, which pays where x has GATED_WEIGHT_COST
times W's values (the early, large-image blocks).

Plain Conv → FusedConv always, when the conv qualifies: it never loses (where oneDNN's per-call
overhead would dominate, the kernel runs PyTorch's own conv, as Conv would), it wins on large convs
(the weight prepacked once, the activations kept channels-last from conv to conv), and it gives
the epilogue rules a FusedConv to append to.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, Node, Value, geometry
from ...ir.builder import FUSED_DOMAIN
from ...ir.activations import activation_of, clip_bounds
from ..pattern import Match, attr_value
from ..rule import Rule, dims


# ---- patterns: the convolution and what may follow it ---------------------------------------

def conv_bn(op, x, w, scale, shift, mean, var, b=None):
    return op.BatchNormalization(op.Conv(x, w, b, _name="conv"), scale, shift, mean, var, _name="bn")


def conv_bn_relu(op, x, w, scale, shift, mean, var, b=None):
    return op.Relu(conv_bn(op, x, w, scale, shift, mean, var, b), _name="act")


def conv_add_relu(op, x, w, z, scale, shift, mean, var, b=None):
    """relu(BN?(conv(x)) + z): the tail of a ResNet block, with or without a BatchNorm to fold."""
    y = op.Optional.BatchNormalization(op.Conv(x, w, b, _name="conv"), scale, shift, mean, var, _name="bn")
    return op.Relu(op.Add(y, z, _name="add"), _name="act")


def plain_conv(op, x, w, b=None):
    return op.Conv(x, w, b, _name="conv")


def open_fused_conv(op, *inputs):
    """A FusedConv with no activation yet, so an epilogue can still be appended to it."""
    return op.FusedConv(*inputs, _domain=FUSED_DOMAIN, _name="conv", activation=lambda a: not a)


def fused_conv_add(op, x, w, z, b=None):   # a FusedConv that has no residual yet
    return op.Add(open_fused_conv(op, x, w, b), z, _name="add")


def activation_after_conv(act_op: str, domain: str = ""):
    """act(FusedConv(x, w, b, z)) for one activation op."""
    def pattern(op, x, w, b=None, z=None):
        return getattr(op, act_op)(open_fused_conv(op, x, w, b, z), _domain=domain, _name="act")
    return pattern


def fused_conv_clip(op, x, w, b=None, z=None, low=None, high=None):   # ReLU6 is Clip(0, 6)
    return op.Clip(open_fused_conv(op, x, w, b, z), low, high, _name="act")


def padded_fused_conv(op, x, pads, w, value=None, b=None, z=None):   # a framework's explicit zero Pad
    return op.FusedConv(op.Pad(x, pads, value, _name="pad"), w, b, z, _domain=FUSED_DOMAIN, _name="conv")


def gated_fused_conv(op, x, g, w, b=None, z=None):
    return op.FusedConv(op.Mul(x, g, _name="gate"), w, b, z, _domain=FUSED_DOMAIN, _name="conv")


ACTIVATION_PATTERNS = [
    *(activation_after_conv(a) for a in ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid",
                                         "HardSwish", "Elu")),
    fused_conv_clip,
    activation_after_conv("Activation", FUSED_DOMAIN),   # SiLU, hard-swish, … recognised by activation.py
    activation_after_conv("Gelu", FUSED_DOMAIN),
]


# ---- replacement ----------------------------------------------------------------------------

def fused_conv_replace(op, m: Match) -> Value:
    """One FusedConv for the matched chain; a FusedConv matched as its start keeps what it has."""
    conv = m.node("conv")
    if conv.op_type == "FusedConv":
        attrs, (w, b) = dict(conv.attrs), (m.w, m.b)
    else:
        attrs = conv_geometry(conv)
        w, b = fold_batch_norm(op, m) if m.has("bn") else (m.w, m.b)
    if m.has("act"):
        attrs.update(activation_of(m.node("act")))
    return op.FusedConv(m.x, w, b, m.values.get("z"), **attrs)


def pad_problem(m: Match) -> str | None:
    """A zero Pad of the spatial axes alone, by constant counts of at least 0, into a FusedConv
    with explicit pads: the convolution's own zero padding, made larger."""
    pad, conv = m.node("pad"), m.node("conv")
    where = f"Pad {pad.name!r}"
    if attr_value(pad, "mode") != "constant":
        return f"{where}: mode {attr_value(pad, 'mode')!r}, not zeros"
    if m.values.get("value") is not None and (m.value.const is None or np.any(m.value.const != 0)):
        return f"{where}: pads with a value that is not a constant 0"
    if m.pads.const is None:
        return f"{where}: its pads are computed at run time"
    counts = m.pads.const.reshape(-1).tolist()
    rank = len(counts) // 2
    if any(counts[i] for i in (0, 1, rank, rank + 1)):
        return f"{where}: pads the batch or channel axis"
    if min(counts) < 0:
        return f"{where}: crops (a negative count)"
    if conv.attr("pads") is None:
        return f"FusedConv {conv.name!r}: its pads depend on sizes that are not static"
    return None


def pad_into_conv(op, m: Match) -> Value:
    """The FusedConv with the Pad's spatial counts added to its own pads."""
    conv = m.node("conv")
    counts = m.pads.const.reshape(-1).tolist()
    rank = len(counts) // 2
    extra = counts[2:rank] + counts[rank + 2:]
    attrs = dict(conv.attrs)
    attrs["pads"] = [int(a + b) for a, b in zip(conv.attr("pads"), extra)]
    return op.FusedConv(m.x, m.w, m.b, m.values.get("z"), **attrs)


def gate_into_weight(op, m: Match) -> Value:
    """FusedConv(x, W·g): the product folded at compile time where g is a constant."""
    conv = m.node("conv")
    if m.g.const is not None and m.w.const is not None:
        w = op.constant((m.w.const * m.g.const).astype(m.w.const.dtype), f"{m.w.name}_gated")
    else:
        w = op.Mul(m.w, m.g)
    return op.FusedConv(m.x, w, m.b, m.values.get("z"), **conv.attrs)


def conv_geometry(conv: Node) -> dict:
    """strides, dilations, group and explicit pads (auto_pad resolved; check made sure it can be)."""
    attrs = {k: conv.attrs[k] for k in ("dilations", "group", "strides") if k in conv.attrs}
    attrs["pads"] = explicit_pads(conv)
    return attrs


def fold_batch_norm(op, m: Match) -> tuple[Value, Value]:
    """W' = W·s and B' = (B − mean)·s + shift, s = scale/√(var + ε): computed in float64."""
    f64 = lambda v: np.asarray(v.const, np.float64).reshape(-1)   # noqa: E731
    w = m.w.const
    s = f64(m.scale) / np.sqrt(f64(m.var) + attr_value(m.node("bn"), "epsilon"))
    b = f64(m.b) if m.b is not None else 0.0
    # each product in float64, rounded once into the weight's type, with no float64 copy of the
    # weight (ResNet-101's 104 folds: 9x faster)
    weight = np.empty(w.shape, w.dtype)
    np.multiply(w, s.reshape(-1, *[1] * (w.ndim - 1)), out=weight, dtype=np.float64, casting="unsafe")
    bias = ((b - f64(m.mean)) * s + f64(m.shift)).astype(m.w.const.dtype)
    return op.constant(weight, f"{m.w.name}_bn_folded"), op.constant(bias, f"{m.shift.name}_bn_folded")


def explicit_pads(conv: Node) -> list[int] | None:
    """The conv's pads [begins…, ends…], auto_pad resolved; None where that needs sizes that are
    not static (a FusedConv's pads are an attribute: ints)."""
    nd = conv.inputs[1].rank - 2
    pads = geometry.explicit_pads(attr_value(conv, "auto_pad") or "NOTSET", conv.attr("pads"),
                                  (conv.inputs[0].shape or [None] * (nd + 2))[2:],
                                  conv.inputs[1].shape[2:], conv.attr("strides") or [1] * nd,
                                  conv.attr("dilations") or [1] * nd)
    return pads if pads is not None and all(isinstance(p, int) for p in pads) else None


# ---- checks ---------------------------------------------------------------------------------

def check_fusion(m: Match) -> str | None:
    """Why the matched chain cannot become one FusedConv exactly, or None."""
    conv = m.node("conv")
    return ((conv.op_type == "Conv" and conv_problem(conv))
            or (m.has("bn") and bn_problem(m.node("bn"), conv))
            or (m.has("add") and residual_problem(m.node("add"), m))
            or (m.has("act") and activation_problem(m.node("act")))
            or None)


def conv_problem(conv: Node) -> str | None:
    where = f"Conv {conv.name!r}"
    x, w, b = conv.inputs[0], conv.inputs[1], conv.input(2)
    if x.dtype != DType.FLOAT:
        return f"{where}: input is {x.dtype.name.lower() if x.dtype else 'of unknown type'}, " \
               "FusedConv runs float32 only"
    if w.const is None:
        return f"{where}: weight {w.name!r} is not a constant; FusedConv prepacks it at build time"
    if b is not None and b.const is None:
        return f"{where}: bias {b.name!r} is not a constant; FusedConv bakes it in at build time"
    if not 1 <= w.const.ndim - 2 <= 3:
        return f"{where}: {w.const.ndim - 2}-D convolution; FusedConv runs 1-D to 3-D"
    if explicit_pads(conv) is None:
        return f"{where}: auto_pad={attr_value(conv, 'auto_pad')} needs static input sizes to fix its pads"
    return None


def bn_problem(bn: Node, conv: Node) -> str | None:
    where = f"BatchNormalization {bn.name!r}"
    if attr_value(bn, "training_mode") == 1 or len(bn.outputs) > 1:
        return f"{where}: training_mode=1; folding needs the inference statistics"
    if attr_value(bn, "spatial") == 0:
        return f"{where}: spatial=0 (per-position statistics); folding needs per-channel ones"
    channels = conv.inputs[1].shape[0]
    for label, v in zip(("scale", "bias", "mean", "var"), bn.inputs[1:]):
        if v.const is None:
            return f"{where}: {label} {v.name!r} is not a constant; folding needs it at compile time"
        if v.const.size != channels:
            return f"{where}: {label} has {v.const.size} values for {channels} channels"
    # a folded weight would be NaN or infinite there; unfolded, the node says so by its formula
    var = np.asarray(bn.inputs[4].const, np.float64).reshape(-1)
    bad = np.flatnonzero(~(var + attr_value(bn, "epsilon") > 0))
    if bad.size:
        return (f"{where}: var + epsilon is not positive at channel {int(bad[0])}; "
                "its output is not finite there")
    return None


def residual_problem(add: Node, m: Match) -> str | None:
    z, where = m.z, f"Add {add.name!r}"
    if z.producer is not None and z.producer in m.matched_nodes:
        return f"{where}: the residual is the convolution's own output"
    y = next(v for v in add.inputs if v is not z)   # the convolution's side
    if z.dtype != DType.FLOAT:
        return f"{where}: residual {z.name!r} is not float32"
    if y.shape is None or z.shape is None or list(y.shape) != list(z.shape):
        return (f"{where}: residual {z.name!r} has shape {dims(z)}, the convolution "
                f"{dims(y)}; FusedConv adds it without broadcasting")
    return None


def is_channel_gate(m: Match) -> bool:
    """Whether g (not x) is the Mul's per-channel operand: right-aligned to x, 1 on every axis but
    the channel axis (1), and not widening x."""
    x, g = m.x.shape, m.g.shape
    if x is None or g is None or len(g) > len(x) or len(x) < 3:
        return False
    aligned = [1] * (len(x) - len(g)) + list(g)
    return all(d == 1 for i, d in enumerate(aligned) if i != 1) and aligned[1] in (1, x[1])


# The cost of a value of W·g against one of x·g on each call: W·g with its reorder into oneDNN's
# blocked weight layout takes 0.5-3 ns a value, the in-place x·g 0.05-0.18 ns (oneDNN 3.2, fp32
# and bf16, 2 threads: `python -m autofusion.benchmarks.conv_floor --program gate_cost`).
GATED_WEIGHT_COST = 10


def gate_problem(m: Match) -> str | None:
    """Why the gate cannot, or should not, move into the weight."""
    conv, where = m.node("conv"), f"Mul {m.node('gate').name!r}"
    if conv.attr("group", 1) != 1:
        return f"{where}: the convolution is grouped; its gate would scale each group's weight apart"
    if m.x.dtype != DType.FLOAT or m.g.dtype != DType.FLOAT or m.w.shape is None:
        return f"{where}: float32 operands and a known weight shape needed"
    if m.g.const is None or m.w.const is None:   # a product on each call
        w_size = int(np.prod(m.w.shape))
        x_size = int(np.prod([d if isinstance(d, int) else 1 for d in m.x.shape]))
        if GATED_WEIGHT_COST * w_size > x_size:
            return (f"{where}: does not pay: the weight has {w_size} values, the input {x_size}; "
                    "scaling the weight on each call costs more than scaling the input")
    return None


def activation_problem(act: Node) -> str | None:
    if act.op_type == "Clip" and clip_bounds(act) is None:
        return f"Clip {act.name!r}: its bounds are not constants"
    return None


def folded_conv(op, m: Match) -> Value:
    """Conv(x, W', B'): the BatchNormalization folded, a standard Conv again."""
    w, b = fold_batch_norm(op, m)
    return op.Conv(m.x, w, b, _domain="", **m.node("conv").attrs)


# Not among RULES: precision="int8" folds each BatchNormalization into its Conv before it quantizes
# (pipeline.py), so that the convolution made int8 is the folded one, as a quantizer's
# pre-processing (ONNX Runtime's quant_pre_process) writes it
FOLD_BATCH_NORM = Rule("ConvBNFoldOp", 1, "Conv + BatchNormalization → Conv with the BatchNorm folded into W and B",
                       [conv_bn], folded_conv, check_fusion)

RULES = [
    Rule("ConvAddReluFusionOp", 2,
         "Conv (+BatchNormalization) + Add(residual) + Relu → FusedConv: the ResNet block tail",
         [conv_add_relu], fused_conv_replace, check_fusion),
    Rule("ConvBNReluFusionOp", 1,
         "Conv + BatchNormalization + Relu → FusedConv, BatchNorm folded into W and B",
         [conv_bn_relu], fused_conv_replace, check_fusion),
    Rule("ConvBNFusionOp", 1, "Conv + BatchNormalization → FusedConv, BatchNorm folded into W and B",
         [conv_bn], fused_conv_replace, check_fusion),
    Rule("ConvFusionOp", 1, "Conv → FusedConv: prepacked oneDNN weight, channels-last activations",
         [plain_conv], fused_conv_replace, check_fusion),
    Rule("PadConvFusionOp", 1, "Pad (zeros, spatial axes) + FusedConv → the padding in the convolution's own",
         [padded_fused_conv], pad_into_conv, pad_problem),
    Rule("ConvGateFusionOp", 2,
         "Mul(x, per-channel gate) + FusedConv → the gate in the weight, W·g (squeeze-excitation)",
         [gated_fused_conv], gate_into_weight, gate_problem, applies=is_channel_gate),
    Rule("ConvAddFusionOp", 2, "FusedConv + Add(residual) → the residual as a FusedConv post-op",
         [fused_conv_add], fused_conv_replace, check_fusion),
    Rule("ConvActivationFusionOp", 1,
         "FusedConv + Relu/Clip/LeakyRelu/Sigmoid/HardSwish/SiLU/… → the activation as a post-op",
         ACTIVATION_PATTERNS, fused_conv_replace, check_fusion),
]
