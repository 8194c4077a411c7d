"""MatMul and Gemm with what surrounds them, grown into one FusedMatMul: act(alpha·op(A)·op(B) + beta·C).

Each rule adds one thing to a matrix product — a transpose of an operand, a scalar factor, a
bias, an activation — so the rules compose: MatMul + Add becomes FusedMatMul(a, b, c), and the
GELU after it then joins as its epilogue. A "matmul" below is a MatMul, a Gemm or a FusedMatMul
without an activation (an activation must stay last).

A residual — a tensor of the product's own shape added after it, as every pre-norm transformer
block adds its input back (GPT-2, LLaMA, ViT) — joins at level 2 as the fourth input, added in the
kernel's epilogue before the activation: act(alpha·op(A)·op(B) + beta·C + R). A Reshape and a
Transpose that moves only unit axes between the product and the Add are seen through.

What the fused op cannot say is refused: a transpose other than a swap of the last two axes, a
bias that broadcasts along more than the last axis (a residual is not a bias), a factor that is
not a constant scalar, and anything but float32 (the kernels are tuned and checked in float32).
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, Node
from ...ir.builder import FUSED_DOMAIN
from ...ir.activations import activation_of
from ..pattern import attr_value
from ..rule import Rule, describe, dims, not_float32

MATMULS = ("MatMul", "Gemm", "FusedMatMul")
DEFAULTS = {"trans_a": 0, "trans_b": 0, "alpha": 1.0, "beta": 1.0}


def matmul(op, kind: str, a, b, c=None):
    """A MatMul, Gemm or FusedMatMul without activation (the last two with an optional C),
    bound as "matmul"."""
    if kind == "MatMul":
        return op.MatMul(a, b, _name="matmul")
    inputs = (a, b) if c is None else (a, b, c)
    if kind == "Gemm":
        return op.Gemm(*inputs, _name="matmul")
    return op.FusedMatMul(*inputs, _domain=FUSED_DOMAIN, _name="matmul", activation=lambda act: not act)


def fused_attrs(node: Node) -> dict:
    """The FusedMatMul attributes of a matched matmul (a Gemm's beta only with its C)."""
    if node.op_type == "Gemm":
        return {"trans_a": attr_value(node, "transA"), "trans_b": attr_value(node, "transB"),
                "alpha": attr_value(node, "alpha"),
                "beta": attr_value(node, "beta") if node.input(2) is not None else 1.0}
    return {**DEFAULTS, **node.attrs}


def fused_matmul(op, a, b, c, attrs: dict, residual=None):
    """A new FusedMatMul; attributes at their defaults are left out."""
    return op.FusedMatMul(a, b, c, residual, **{k: v for k, v in attrs.items() if DEFAULTS.get(k) != v})


def matmul_check(m) -> str | None:
    node = m.node("matmul")
    return not_float32(node, *node.inputs)


# ---- a transposed operand: A·Bᵀ = FusedMatMul(A, B, trans_b=1) ------------------------------

def transposed(op, kind: str, operand: str, x, other, c):
    t = op.Transpose(x, _name="transpose")
    return matmul(op, kind, t, other, c) if operand == "a" else matmul(op, kind, other, t, c)


def transposed_operand(kind: str, operand: str):
    def pattern(op, x, other, c=None):
        return transposed(op, kind, operand, x, other, c)
    pattern.__name__ = f"{kind.lower()}_of_transposed_{operand}"
    return pattern


def product(op, kind: str, p, q, r=None):
    """The first product of a MatMul→Transpose→MatMul chain (a FusedMatMul of any kind)."""
    if kind == "MatMul":
        return op.MatMul(p, q, _name="first")
    return op.FusedMatMul(p, q, r, _domain=FUSED_DOMAIN, _name="first")


def transposed_product(first: str, kind: str, operand: str):
    def pattern(op, p, q, other, r=None, c=None):
        return transposed(op, kind, operand, product(op, first, p, q, r), other, c)
    pattern.__name__ = f"{kind.lower()}_of_transposed_{first.lower()}_as_{operand}"
    return pattern


def swap_of_last_axes(t: Node) -> str | None:
    rank = t.inputs[0].rank
    perm = attr_value(t, "perm")
    if rank is None or rank < 2:
        return f"Transpose {t.name!r}: the rank of {t.inputs[0].name!r} is unknown"
    perm = list(perm) if perm is not None else list(reversed(range(rank)))
    if perm != [*range(rank - 2), rank - 1, rank - 2]:
        return f"Transpose {t.name!r}: perm={perm} is not a swap of the last two axes"
    return None


def transpose_check(m) -> str | None:
    return swap_of_last_axes(m.node("transpose")) or matmul_check(m)


def adjacent_transpose_check(m) -> str | None:
    """As transpose_check, leaving a transposed product used only here to the chain rule."""
    t = m.node("transpose")
    reason, y = transpose_check(m), t.inputs[0]
    p = y.producer
    if reason is None and p is not None and p.op in ("MatMul", FUSED_DOMAIN + "::FusedMatMul") \
            and y.users == [t] and all(o is not y for o in t.graph.outputs):
        return (f"Transpose {t.name!r} transposes the result of {p.op_type} {p.name!r}: absorbing "
                "it is the cross-operator MatMulTransposeMatMulFusionOp (level 2)")
    return reason


def absorb_transpose(op, m):
    node, t = m.node("matmul"), m.node("transpose")
    a, b, c = node.input(0), node.input(1), node.input(2)
    attrs = fused_attrs(node)
    if a is t.outputs[0]:
        a, attrs["trans_a"] = t.inputs[0], 1 - attrs["trans_a"]
    else:
        b, attrs["trans_b"] = t.inputs[0], 1 - attrs["trans_b"]
    return fused_matmul(op, a, b, c, attrs)


# ---- a scalar factor: (A·B)·s and (A·B)/s -> alpha -----------------------------------------

def scaled(kind: str, divide: bool):
    def pattern(op, a, b, s, c=None):
        y = matmul(op, kind, a, b, c)
        return op.Div(y, s, _name="scale") if divide else op.Mul(y, s, _name="scale")
    pattern.__name__ = f"{kind.lower()}_{'divided' if divide else 'multiplied'}_by_scalar"
    return pattern


def factor(m) -> float | None:
    """The constant scalar s, as the factor it multiplies by (1/s for a Div); None if it is not."""
    s = m.s
    if s.const is None or s.const.size != 1 or s.dtype != DType.FLOAT:
        return None
    value = float(s.const.reshape(-1)[0])
    if m.node("scale").op_type == "Mul":
        return value
    return 1.0 / value if value != 0.0 else None


def scale_check(m) -> str | None:
    scale, node = m.node("scale"), m.node("matmul")
    if factor(m) is None:
        return (f"{scale.op_type} {scale.name!r}: {m.s.name!r} is not a nonzero float32 constant "
                "scalar, so it cannot be the product's alpha")
    if m.s.rank > (node.outputs[0].rank or 0):
        return f"{scale.op_type} {scale.name!r}: {m.s.name!r} {dims(m.s)} would broadcast the product"
    return matmul_check(m)


def scale_replace(op, m):
    node, s = m.node("matmul"), factor(m)
    attrs = fused_attrs(node)
    attrs["alpha"] *= s
    if node.input(2) is not None:
        attrs["beta"] *= s
    return fused_matmul(op, node.input(0), node.input(1), node.input(2), attrs)


# ---- a bias: A·B + c, c broadcast along the last axis (a linear layer) ---------------------

def with_bias(kind: str):
    def pattern(op, a, b, c):
        return op.Add(matmul(op, kind, a, b), c, _name="add")
    pattern.__name__ = f"{kind.lower()}_plus_bias"
    return pattern


def bias_check(m) -> str | None:
    add, y = m.node("add"), m.node("matmul").outputs[0]
    c = m.c
    if c.shape is None or y.shape is None:
        return f"Add {add.name!r}: the shape of {c.name!r} or of the product is unknown"
    bias = list(c.shape)
    while bias and bias[0] == 1 and len(bias) > 1:
        bias.pop(0)
    if len(c.shape) > len(y.shape) or len(bias) != 1 or bias[0] is None or bias[0] != y.shape[-1]:
        return (f"Add {add.name!r}: {c.name!r} {dims(c)} is not a bias along the last axis of the "
                f"product {dims(y)}")
    return matmul_check(m) or not_float32(add, c)


def bias_replace(op, m):
    node = m.node("matmul")
    return fused_matmul(op, node.input(0), node.input(1), m.c, fused_attrs(node))


# ---- a residual: A·B + r, r of the product's shape (a pre-norm block's skip connection) -------

def with_residual(kind: str):
    def pattern(op, a, b, r, c=None, shape=None):
        # between the product and the Add, what only regroups its rows: GPT-2's Conv1D restores
        # [1, seq, d]; torchvision's attention then moves its unit batch axis ([S,1,d] → [1,S,d])
        y = op.Optional.Reshape(matmul(op, kind, a, b, c), shape, _name="reshape")
        return op.Add(op.Optional.Transpose(y, _name="transpose"), r, _name="add")
    pattern.__name__ = f"{kind.lower()}_plus_residual"
    return pattern


def moves_unit_axes_only(t: Node) -> bool:
    """A Transpose that keeps the order of the axes longer than 1: a reshape of its input."""
    shape = t.inputs[0].shape
    if not t.inputs[0].is_static:
        return False
    perm = attr_value(t, "perm") or list(reversed(range(len(shape))))
    moved = [axis for axis in perm if shape[axis] != 1]
    return moved == sorted(moved)


def residual_check(m) -> str | None:
    add, product, r = m.node("add"), m.node("matmul").outputs[0], m.r
    if r.producer is not None and r.producer in m.matched_nodes:
        return f"Add {add.name!r}: the residual is the product's own output"
    y = next(v for v in add.inputs if v is not r)   # the product's side
    if r.shape is None or y.shape is None or list(r.shape) != list(y.shape):
        return (f"Add {add.name!r}: {r.name!r} {dims(r)} is not of the product's shape {dims(y)}; "
                "the residual is added without broadcasting")
    if (m.has("reshape") or m.has("transpose")) and not (product.is_static and y.is_static):
        return f"Add {add.name!r}: the product {dims(product)} is regrouped and has dynamic dims"
    if m.has("transpose") and not moves_unit_axes_only(m.node("transpose")):
        return f"Add {add.name!r}: {describe(m.node('transpose'))} moves the product's rows, not only unit axes"
    return matmul_check(m) or not_float32(add, r)


def residual_replace(op, m):
    node, r, out = m.node("matmul"), m.r, m.root.outputs[0]
    regrouped = m.has("reshape") or m.has("transpose")
    if regrouped:   # the residual seen in the product's shape (a view), the sum back in the Add's
        r = op.Reshape(r, op.constant(np.array(node.outputs[0].shape, np.int64), "residual_shape"))
    y = fused_matmul(op, node.input(0), node.input(1), node.input(2), fused_attrs(node), r)
    return op.Reshape(y, op.constant(np.array(out.shape, np.int64), "sum_shape")) if regrouped else y


# ---- an activation epilogue: act(FusedMatMul(...)) ------------------------------------------

def relu(op, y):
    return op.Relu(y, _name="act")


def gelu(op, y):
    return op.Gelu(y, _domain=FUSED_DOMAIN, _name="act")


def gelu_onnx(op, y):   # ONNX's own Gelu (opset 20)
    return op.Gelu(y, _name="act")


def silu(op, y):
    return op.Activation(y, _domain=FUSED_DOMAIN, _name="act", activation="SiLU")


def activated(kind: str, act):
    def pattern(op, a, b, c=None, shape=None):
        # an elementwise activation commutes with a Reshape (GPT-2's Conv1D restores [1, seq, d]
        # between the product and the GELU)
        return act(op, op.Optional.Reshape(matmul(op, kind, a, b, c), shape, _name="reshape"))
    pattern.__name__ = f"{act.__name__}_of_{kind.lower()}"
    return pattern


def epilogue_replace(op, m):
    node = m.node("matmul")
    y = fused_matmul(op, node.input(0), node.input(1), node.input(2),
                     {**fused_attrs(node), **activation_of(m.node("act"))})
    return op.Reshape(y, m.shape, **m.node("reshape").attrs) if m.has("reshape") else y


def epilogue(name: str, spelled: str, *acts) -> Rule:
    return Rule(name, 1, f"{spelled} after a MatMul/Gemm (its bias, scale, transposes already "
                         "in) → the product's epilogue, one kernel",
                [activated(kind, act) for act in acts for kind in MATMULS], epilogue_replace,
                matmul_check)


# ---- a linear layer on its own: a constant 2-D weight gets the prepacked kernel ---------------

def linear(kind: str):
    def pattern(op, a, b, c=None):
        return matmul(op, kind, a, b, c)
    pattern.__name__ = f"{kind.lower()}_by_constant"
    return pattern


def by_constant_matrix(m) -> bool:
    """Only a product by a constant matrix is a linear layer (not q·kᵀ, say)."""
    return m.b.const is not None and m.b.const.ndim == 2


def linear_replace(op, m):
    node = m.node("matmul")
    return fused_matmul(op, node.input(0), node.input(1), node.input(2), fused_attrs(node))


RULES = [
    Rule("MatMulTransposeMatMulFusionOp", 2,
         "MatMul → Transpose(last two axes) → MatMul: the transpose is absorbed into the second "
         "product (trans_a/trans_b), never written",
         [transposed_product(first, kind, operand) for first in ("MatMul", "FusedMatMul")
          for kind in MATMULS for operand in "ab"], absorb_transpose, transpose_check),
    Rule("TransposeMatMulFusionOp", 1,
         "a Transpose of the last two axes feeding a MatMul/Gemm → its trans_a/trans_b",
         [transposed_operand(kind, operand) for kind in MATMULS for operand in "ab"],
         absorb_transpose, adjacent_transpose_check),
    Rule("MatMulScaleFusionOp", 1, "(A·B)·s or (A·B)/s with a constant scalar s → the product's alpha",
         [scaled(kind, divide) for kind in MATMULS for divide in (False, True)], scale_replace,
         scale_check),
    Rule("MatMulBiasFusionOp", 1, "A·B + bias (along the last axis) → one linear kernel",
         [with_bias(kind) for kind in MATMULS], bias_replace, bias_check),
    epilogue("MatMulReluFusionOp", "ReLU", relu),
    epilogue("MatMulGeluFusionOp", "GELU (erf or tanh)", gelu, gelu_onnx),
    epilogue("MatMulSiLUFusionOp", "SiLU", silu),
    # after the norms: LayerNorm(A·B + r), BERT's post-norm block, stays one LayerNorm with its
    # residual (AddLayerNormFusionOp)
    Rule("MatMulResidualFusionOp", 2, "A·B (+ bias) + residual of the product's shape → the "
         "residual added in the product's epilogue, one kernel",
         [with_residual(kind) for kind in MATMULS], residual_replace, residual_check),
    # last: whatever bias or epilogue a product has joins it first
    Rule("LinearFusionOp", 1, "MatMul/Gemm by a constant matrix → one linear kernel with the "
         "weight prepacked at compile time", [linear(kind) for kind in ("MatMul", "Gemm")],
         linear_replace, matmul_check, by_constant_matrix),
]
