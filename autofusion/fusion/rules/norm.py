"""Normalizations written out in primitive ops, each recognised and run as one kernel.

Exporters before opset 17 spell LayerNorm as ReduceMean → Sub → Pow/Mul → ReduceMean → Add(ε) →
Sqrt → Div, and RMSNorm (T5, Llama) as Pow → ReduceMean → Add(ε) → Sqrt → Reciprocal → Mul;
each chain becomes one autofusion LayerNorm / RMSNorm node, run as one kernel. The ·scale
and +bias that follow are folded into that node by their own rule: the driver meets the chain's
Div before the Mul and Add after it, so the affine part joins the fused node afterwards. A
residual Add in front of a LayerNorm (spelled out or LayerNormalization) joins it too. ONNX's
own RMSNormalization (opset 23) becomes our RMSNorm where it computes the same (its stash_type).

A LayerNorm or RMSNorm over the last axis whose only consumer is a linear layer (pre-LN
transformers: GPT-2's ln_1 → c_attn, ViT's ln_2 → fc1) joins it as one NormMatMul: its scale γ
and bias β fold into the layer's weight and bias, (n·γ + β)·W + c = n·(diag(γ)·W) + (β·W + c),
and the kernel normalizes, then runs the prepacked GEMM. On CPU this measures at parity (GPT-2,
ViT-B/16, ConvNeXt-T): the norm costs under 1% of the GEMM after it, and the normalized rows
stay in cache either way. It is exact, and one call fewer.
"""
from __future__ import annotations

from itertools import product

import numpy as np

from ...ir import FUSED_DOMAIN, DType, Node, Value
from ..pattern import attr_value
from ..rule import Rule, describe, dims, not_float32, scalar

# ---- how exporters spell t² and a / b ------------------------------------------------------

def square_by_pow(op, t):
    return op.Pow(t, 2)


def square_by_mul(op, t):
    return t * t


def quotient(op, a, b):
    return a / b


def times_reciprocal(op, a, b):
    return a * op.Reciprocal(b)


def times_one_over(op, a, b):   # torch.rsqrt
    return a * (1 / b)


SPELLINGS = list(product([square_by_pow, square_by_mul], [quotient, times_reciprocal, times_one_over]))


# ---- LayerNorm: (x − E[x]) / √(E[(x − E[x])²] + ε) ------------------------------------------

def layer_norm(square, divide):
    def pattern(op, x, eps, mean_axes=None, var_axes=None):
        centered = x - op.ReduceMean(x, mean_axes, keepdims=1, _name="mean")
        variance = op.ReduceMean(square(op, centered), var_axes, keepdims=1, _name="var")
        return divide(op, centered, op.Sqrt(variance + eps))
    return pattern


def layer_norm_replace(op, m):
    return op.LayerNorm(m.x, axis=axis_of(m.node("mean"), m.x), epsilon=scalar(m.eps))


def layer_norm_check(m):
    return reduction_reason(m, "mean", "var") or epsilon_reason(m)


# ---- RMSNorm: x / √(E[x²] + ε) --------------------------------------------------------------

def rms_norm(square, divide):
    def pattern(op, x, eps, axes=None):
        return divide(op, x, op.Sqrt(op.ReduceMean(square(op, x), axes, keepdims=1, _name="mean") + eps))
    return pattern


def rms_norm_replace(op, m):
    return op.RMSNorm(m.x, axis=axis_of(m.node("mean"), m.x), epsilon=scalar(m.eps))


def rms_norm_check(m):
    return reduction_reason(m, "mean") or epsilon_reason(m)


# ---- ·c and +c after a LayerNorm / RMSNorm, folded into its scale and bias ------------------

def layer_norm_times(op, x, c, scale=None, bias=None, residual=None):
    return op.LayerNorm(x, scale, bias, residual, _domain=FUSED_DOMAIN, _name="norm") * c


def layer_norm_plus(op, x, c, scale=None, bias=None, residual=None):
    return op.LayerNorm(x, scale, bias, residual, _domain=FUSED_DOMAIN, _name="norm") + c


def rms_norm_times(op, x, c, scale=None):
    return op.RMSNorm(x, scale, _domain=FUSED_DOMAIN, _name="norm") * c


def scale_bias_check(m):
    norm, c, root, x = m.node("norm"), m.c, m.root, m.x
    if x.shape is None:
        return f"{describe(norm)}: the shape of {x.name!r} is unknown"
    axis, adds = norm.attr("axis", -1) % x.rank, root.op_type == "Add"
    # +c changes the bias; ·c changes the scale and the bias
    changed = [v for v in (m.values.get("bias"), None if adds else m.values.get("scale"))
               if v is not None]
    if per_feature(c, x, axis) is not None:
        if x.dtype not in NUMPY_FLOATS:
            return f"{describe(root)}: {x.dtype.name} constants cannot be folded at compile time"
        computed = [v.name for v in changed if v.const is None]
        return f"{describe(norm)}: {computed[0]!r} is computed, so {c.name!r} cannot be folded into it" \
            if computed else None
    if c.shape == x.shape[axis:]:   # a computed per-feature tensor becomes the missing bias/scale
        return f"{describe(root)}: {c.name!r} is computed and {describe(norm)} already has " \
               f"a {'bias' if adds else 'scale or bias'}" if changed else None
    return (f"{describe(root)}: {c.name!r} (shape {fmt_shape(c.shape)}) is neither a constant nor "
            f"of the normalized shape {fmt_shape(x.shape[axis:])}")


def scale_bias_replace(op, m):
    norm, x, c = m.node("norm"), m.x, m.c
    scale, bias = m.values.get("scale"), m.values.get("bias")
    feature = per_feature(c, x, norm.attr("axis", -1) % x.rank)
    if m.root.op_type == "Add":
        bias = c if feature is None else \
            op.constant(cast_like(feature + (0 if bias is None else bias.const), x), "bias")
    elif feature is None:
        scale = c
    else:
        scale = op.constant(cast_like(feature * (1 if scale is None else scale.const), x), "scale")
        bias = None if bias is None else op.constant(cast_like(feature * bias.const, x), "bias")
    if norm.op_type == "RMSNorm":
        return op.RMSNorm(x, scale, **norm.attrs)
    return op.LayerNorm(x, scale, bias, m.values.get("residual"), **norm.attrs)


# ---- residual + LayerNorm: LayerNorm(x + r) -------------------------------------------------

def add_layer_norm(op, x, residual, scale=None, bias=None):
    return op.LayerNorm(x + residual, scale, bias, _domain=FUSED_DOMAIN, _name="norm")


def add_layer_normalization(op, x, residual, scale, bias=None):
    return op.LayerNormalization(x + residual, scale, bias, _name="norm")


def add_layer_norm_check(m):
    norm, total = m.node("norm"), m.node("norm").inputs[0]
    if m.x.shape is None or m.x.shape != total.shape:
        return (f"{describe(total.producer)}: {m.x.name!r} (shape {fmt_shape(m.x.shape)}) is "
                f"broadcast to {fmt_shape(total.shape)}; the fused kernel needs a full-shape input")
    return standard_layer_norm_reason(norm, m.x)


def add_layer_norm_replace(op, m):
    norm, x = m.node("norm"), m.x   # both ops default to axis=-1, epsilon=1e-5
    axis = norm.attr("axis", -1)
    return op.LayerNorm(x, of_normalized_shape(op, m.scale, x, axis, "scale"),
                        of_normalized_shape(op, m.bias, x, axis, "bias"),
                        m.residual, axis=axis, epsilon=norm.attr("epsilon", 1e-5))


def of_normalized_shape(op, v: Value | None, x: Value, axis: int, hint: str) -> Value | None:
    """A standard norm's scale/bias as ours takes it: of the normalized shape (the standard
    ops may broadcast a constant one; the check made sure it is one)."""
    if v is None or v.shape == x.shape[axis:]:
        return v
    return op.constant(cast_like(per_feature(v, x, axis % x.rank), x), hint)


# ---- ONNX's RMSNormalization (opset 23) onto ours ------------------------------------------

def rms_normalization(op, x, scale):
    return op.RMSNormalization(x, scale, _name="norm")


def rms_normalization_check(m):
    norm = m.node("norm")
    if m.x.dtype is None or not m.x.dtype.is_float:
        return f"{describe(norm)}: the type of {m.x.name!r} is not a known float type"
    return standard_layer_norm_reason(norm, m.x)


def rms_normalization_replace(op, m):
    norm, x = m.node("norm"), m.x
    axis = attr_value(norm, "axis")
    return op.RMSNorm(x, of_normalized_shape(op, m.scale, x, axis, "scale"), axis=axis,
                      epsilon=attr_value(norm, "epsilon"))   # the defaults differ: 1e-5 here


# ---- norm → linear layer: the norm's scale and bias folded into the layer's weight -------------

def into_linear(op, n, b, c, shape, regroup):
    """The linear layer a norm's output n feeds, seen through a Reshape or a Transpose that
    regroups its rows (GPT-2's Conv1D flattens [1, seq, d] to [seq, d]; torch's
    MultiheadAttention makes [batch, seq, d] sequence-first)."""
    if regroup == "Transpose":
        n = op.Transpose(n, _name="regroup")
    elif regroup == "Reshape":
        n = op.Reshape(n, shape, _name="regroup")
    return op.FusedMatMul(n, b, c, _domain=FUSED_DOMAIN, _name="matmul")


def norm_into_linear(norm: str, regroup: str | None):
    if norm == "LayerNorm":
        def pattern(op, x, b, scale=None, bias=None, residual=None, c=None, shape=None):
            n = op.LayerNorm(x, scale, bias, residual, _domain=FUSED_DOMAIN, _name="norm")
            return into_linear(op, n, b, c, shape, regroup)
    elif norm == "LayerNormalization":
        def pattern(op, x, b, scale, bias=None, c=None, shape=None):
            return into_linear(op, op.LayerNormalization(x, scale, bias, _name="norm"), b, c, shape, regroup)
    else:
        def pattern(op, x, b, scale=None, c=None, shape=None):
            return into_linear(op, op.RMSNorm(x, scale, _domain=FUSED_DOMAIN, _name="norm"), b, c, shape,
                               regroup)
    pattern.__name__ = f"{norm.lower()}_{regroup.lower() + '_' if regroup else ''}matmul"
    return pattern


def affine_and_bias(m):
    """The norm's scale and bias and the layer's bias, each None where absent."""
    return m.values.get("scale"), m.values.get("bias"), m.values.get("c")


def norm_matmul_check(m):
    norm, mm, x, w = m.node("norm"), m.node("matmul"), m.x, m.b
    scale, bias, c = affine_and_bias(m)
    reason = standard_layer_norm_reason(norm, x) or not_float32(mm, x, w, c)
    if reason or x.rank is None:
        return reason or f"{describe(norm)}: the rank of {x.name!r} is unknown"
    if norm.attr("axis", -1) % x.rank != x.rank - 1:
        return (f"{describe(norm)}: normalizes from axis {norm.attr('axis')} on; only a norm over the "
                f"last axis folds into {describe(mm)}")
    if m.has("regroup"):
        regroup, rows = m.node("regroup"), m.node("regroup").outputs[0]
        perm = attr_value(regroup, "perm")
        keeps = (perm is not None and perm[-1] == x.rank - 1) if regroup.op_type == "Transpose" else \
            None not in (rows.shape, x.shape) and rows.shape[-1:] == x.shape[-1:] and \
            isinstance(x.shape[-1], int)
        if not keeps:
            return f"{describe(regroup)}: {dims(x)} → {dims(rows)} moves the normalized last axis"
        residual = m.values.get("residual")
        if residual is not None and residual.shape != x.shape:
            return (f"{describe(norm)}: its residual {residual.name!r} {dims(residual)} is broadcast "
                    f"to {dims(x)}, so {describe(regroup)} cannot regroup it alike")
    if mm.attr("trans_a", 0):
        return f"{describe(mm)}: its normalized operand is transposed (trans_a=1)"
    if w.const is None or w.const.ndim != 2:
        return (f"{describe(mm)}: {w.name!r} is not a constant matrix, so {describe(norm)}'s "
                "scale and bias cannot be folded into it")
    computed = [v.name for v in (scale, bias, c) if v is not None and v.const is None]
    if computed:
        return f"{describe(norm)}: {computed[0]!r} is computed, so it cannot be folded into the weights"
    for v in (scale, bias):
        if v is not None and per_feature(v, x, x.rank - 1) is None:
            return f"{describe(norm)}: {v.name!r} {dims(v)} does not vary along the last axis only"
    n = w.const.shape[0 if mm.attr("trans_b", 0) else 1]
    if c is not None and (c.const.size != n or c.shape[-1:] != (n,)):
        return f"{describe(mm)}: {c.name!r} {dims(c)} is not a bias along the output's last axis"
    return None


def norm_matmul_replace(op, m):
    norm, mm, x = m.node("norm"), m.node("matmul"), m.x
    scale, bias, c = affine_and_bias(m)
    gamma, beta = (None if v is None else per_feature(v, x, x.rank - 1) for v in (scale, bias))
    trans_b, alpha = mm.attr("trans_b", 0), mm.attr("alpha", 1.0)
    w = m.b.const.T if trans_b else m.b.const       # [K, N], as stored
    # products and sums in float64, the weight rounded once into x's type; no float64 copy of
    # the weight (GPT-2's 24 folds: 0.29 -> 0.1 s)
    folded = np.empty(w.shape, x.dtype.numpy, order="F" if w.flags.f_contiguous else "C")
    np.multiply(w, alpha * (np.ones(w.shape[0]) if gamma is None else gamma)[:, None], out=folded,
                dtype=np.float64, casting="unsafe")
    shift = None if beta is None else alpha * np.einsum("k,kn->n", beta, w, dtype=np.float64)
    if c is not None:
        shift = (0 if shift is None else shift) + mm.attr("beta", 1.0) * c.const.reshape(-1)
    weight = op.constant(folded.T if trans_b else folded, "weight")
    shift = None if shift is None else op.constant(cast_like(shift, x), "bias")
    kind = "RMSNorm" if norm.op_type == "RMSNorm" else "LayerNorm"
    epsilon = attr_value(norm, "epsilon") if norm.domain != FUSED_DOMAIN else \
        norm.attr("epsilon", 1e-6 if kind == "RMSNorm" else 1e-5)
    rows, residual = x, m.values.get("residual")
    if m.has("regroup"):   # the norm is row-wise, so it commutes with regrouping the rows
        regroup = m.node("regroup")
        rows, residual = (None if v is None else
                          op.Reshape(v, m.shape) if regroup.op_type == "Reshape" else
                          op.Transpose(v, perm=attr_value(regroup, "perm")) for v in (x, residual))
    return op.NormMatMul(rows, weight, shift, residual, norm=kind, epsilon=epsilon,
                         **{k: v for k, v in mm.attrs.items()
                            if k in ("trans_b", "activation", "activation_params")})


# ---- shared helpers ----------------------------------------------------------------------

def fmt_shape(shape) -> str:
    return "unknown" if shape is None else f"[{','.join('?' if d is None else str(d) for d in shape)}]"


def reduced_axes(node: Node, rank: int) -> list[int] | None:
    """The sorted axes a ReduceMean reduces (attribute before opset 18, input from 18); None if
    they are computed at run time."""
    if node.input(1) is not None:
        if node.inputs[1].const is None:
            return None
        axes = node.inputs[1].const.reshape(-1).tolist()
    else:
        axes = attr_value(node, "axes") or []
    if not axes:
        return [] if attr_value(node, "noop_with_empty_axes") else list(range(rank))
    return sorted(a % rank for a in axes)


def axis_of(reduce: Node, x: Value) -> int:
    """The first normalized axis, counted from the end (as LayerNormalization's axis=-1)."""
    return reduced_axes(reduce, x.rank)[0] - x.rank


def reduction_reason(m, *names: str) -> str | None:
    """Why the named ReduceMeans are not all over the same trailing axes of a float x."""
    x = m.x
    if x.rank is None or x.dtype is None or not x.dtype.is_float:
        return f"{describe(m.node(names[0]))}: input {x.name!r} is not a float tensor of known rank"
    axes = [reduced_axes(m.node(n), x.rank) for n in names]
    for n, a in zip(names, axes):
        if a is None:
            return f"{describe(m.node(n))}: its axes are computed at run time"
        if not a or a != list(range(a[0], x.rank)):
            return f"{describe(m.node(n))}: reduces axes {a}, not the trailing axes a norm normalizes"
    if any(a != axes[0] for a in axes):
        return (f"{describe(m.node(names[0]))} reduces axes {axes[0]} but "
                f"{describe(m.node(names[1]))} reduces {axes[1]}")
    return None


def epsilon_reason(m) -> str | None:
    out = m.root.outputs[0]
    if scalar(m.eps) is None:
        return f"{describe(m.root)}: epsilon {m.eps.name!r} is not a constant scalar"
    if out.shape is None or out.shape != m.x.shape:
        return (f"{describe(m.root)}: output shape {fmt_shape(out.shape)} is not the input's "
                f"{fmt_shape(m.x.shape)}")
    return None


def per_feature(v: Value, x: Value, axis: int) -> np.ndarray | None:
    """Constant v as an array of x's normalized shape x.shape[axis:], if v varies along those
    axes only and broadcasting it against x leaves x's shape; else None."""
    norm = x.shape[axis:] if x.shape is not None else None
    if v.const is None or norm is None or v.rank > x.rank or \
            not all(isinstance(d, int) for d in norm):
        return None
    c = v.const.reshape((1,) * (x.rank - v.rank) + v.const.shape)
    if any(d != 1 for d in c.shape[:axis]) or \
            any(d not in (1, n) for d, n in zip(c.shape[axis:], norm)):
        return None
    return np.broadcast_to(c.reshape(c.shape[axis:]), norm).astype(np.float64)


NUMPY_FLOATS = (DType.FLOAT, DType.DOUBLE, DType.FLOAT16)   # the types numpy folds in


def cast_like(a: np.ndarray, x: Value) -> np.ndarray:
    """a in x's type, laid out as it is: a weight stored transposed stays so (making it row-major
    here cost a ViT-B's compile 0.5 s; the runtime's reorder transposes it once)."""
    return a.astype(x.dtype.numpy, order="K")


def standard_layer_norm_reason(norm: Node, x: Value) -> str | None:
    """Why a LayerNormalization (or RMSNormalization) cannot become our LayerNorm (RMSNorm);
    None for one that already is."""
    if norm.domain == FUSED_DOMAIN:
        return None
    if any(v.uses for v in norm.outputs[1:]):
        return f"{describe(norm)}: its Mean/InvStdDev outputs are used"
    if x.rank is None or x.dtype is None:
        return f"{describe(norm)}: the rank or type of {x.name!r} is unknown"
    stash = DType(attr_value(norm, "stash_type"))
    if stash != x.dtype and not (stash == DType.FLOAT and x.dtype in (DType.FLOAT16, DType.BFLOAT16)):
        return (f"{describe(norm)}: stash_type={stash.name} for a {x.dtype.name} input; the kernel "
                "computes in the input's type")
    axis = norm.attr("axis", -1) % x.rank
    for v in norm.inputs[1:3]:
        if v is not None and v.shape != x.shape[axis:] and (
                x.dtype not in NUMPY_FLOATS or per_feature(v, x, axis) is None):
            return (f"{describe(norm)}: {v.name!r} is neither of the normalized shape nor a "
                    "broadcast constant")
    return None


RULES = [
    Rule("LayerNormFusionOp", 1,
         "LayerNorm spelled in ReduceMean/Sub/Pow/Sqrt/Div → one layer_norm kernel",
         [layer_norm(s, d) for s, d in SPELLINGS], layer_norm_replace, layer_norm_check),
    Rule("RMSNormFusionOp", 1, "RMSNorm spelled x/√(mean(x²)+ε) → one rms_norm kernel",
         [rms_norm(s, d) for s, d in SPELLINGS], rms_norm_replace, rms_norm_check),
    Rule("NormScaleBiasFusionOp", 1, "·scale and +bias after a LayerNorm/RMSNorm → its scale and bias",
         [layer_norm_times, layer_norm_plus, rms_norm_times], scale_bias_replace, scale_bias_check),
    Rule("RMSNormalizationFusionOp", 1,
         "ONNX's RMSNormalization (opset 23) → one rms_norm kernel (same axis, epsilon, stash_type)",
         rms_normalization, rms_normalization_replace, rms_normalization_check),
    Rule("AddLayerNormFusionOp", 1, "LayerNorm(x + residual) → one LayerNorm with a residual input",
         [add_layer_norm, add_layer_normalization], add_layer_norm_replace, add_layer_norm_check),
]


# after the matmul family, so the layer has its bias and activation epilogue before the norm joins
INTO_MATMUL_RULES = [
    Rule("LayerNormMatMulFusionOp", 2,
         "LayerNorm/RMSNorm (last axis) → linear layer: scale and bias folded into the weights, "
         "one NormMatMul kernel",
         [norm_into_linear(norm, regroup) for norm in ("LayerNorm", "LayerNormalization", "RMSNorm")
          for regroup in (None, "Reshape", "Transpose")],
         norm_matmul_replace, norm_matmul_check),
]
