"""Fused operators (domain "autofusion"): the ops fusion rules produce.

Each is an op-table entry like any other, plus its meaning in standard ONNX ops: `decompose`
writes the fused node as the subgraph it stands for. Export uses it as the body of the ONNX
function backing the fused node (so ONNX Runtime and Netron can open the fused file), and the
tests use it as the reference the fused kernel must match.

An activation is carried as an attribute pair: see activations.py.
"""
from __future__ import annotations

import weakref
from typing import Callable

import numpy as np

from .activations import activation as activation_of_node, apply_activation, gelu as gelu_in_onnx
from .activations import ACTIVATIONS, scalar_constant
from .builder import FUSED_DOMAIN, GraphBuilder, fused
from .dtypes import DType
from .dims import matmul_shape
from .graph import Graph, Node, Value
from .ops import OpClass, OpDef, register
from .scalar import register_expression
from .shapes.elementwise import same_as_input

Decompose = Callable[..., "list[Value]"]
DECOMPOSITIONS: dict[str, Decompose] = {}


def fused_op(name: str, op_class: OpClass, infer=None):
    """Register a fused op in the op table with its decomposition into standard ONNX ops."""
    def deco(fn: Decompose) -> Decompose:
        register(OpDef(name, op_class, infer, domain=FUSED_DOMAIN, doc=(fn.__doc__ or "").strip()))
        DECOMPOSITIONS[name] = fn
        return fn
    return deco


def _product(node: Node):
    """op(A)·op(B), the operands' last two axes swapped where trans_a/trans_b say."""
    def operand(v: Value, transposed: int):
        if v.shape is None or not transposed or len(v.shape) < 2:
            return v.shape
        return (*v.shape[:-2], v.shape[-1], v.shape[-2])
    a, b = node.inputs[0], node.inputs[1]
    return [(matmul_shape(operand(a, node.attr("trans_a", 0)), operand(b, node.attr("trans_b", 0))),
             a.dtype)]


# ---- the fused ops ------------------------------------------------------------------------

@fused_op("FusedConv", OpClass.COMPLEX)
def fused_conv(op: GraphBuilder, node: Node, x, w, b=None, z=None):
    """act(Conv(x, w, b) + z): a convolution with its bias, residual and activation epilogue."""
    y = op.Conv(x, w, b, **{k: node.attrs[k] for k in ("strides", "pads", "dilations", "group")
                            if k in node.attrs})
    if z is not None:
        y = op.Add(y, z)
    return [apply_activation(op, node, y)]


@fused_op("FusedMatMul", OpClass.COMPLEX, _product)
def fused_matmul(op: GraphBuilder, node: Node, a, b, c=None, residual=None):
    """act(alpha·(Aᵀ?·Bᵀ?) + beta·C + residual): MatMul/Gemm with transposes, scale, bias, a
    residual of the product's shape and an activation."""
    rank = lambda v: len(v.shape) if v.shape is not None else 2  # noqa: E731
    for attr, v in (("trans_a", "a"), ("trans_b", "b")):
        if node.attr(attr, 0):
            t = a if v == "a" else b
            perm = list(range(rank(t)))
            perm[-2:] = perm[-1], perm[-2]
            t = op.Transpose(t, perm=perm)
            a, b = (t, b) if v == "a" else (a, t)
    y = op.MatMul(a, b)
    if node.attr("alpha", 1.0) != 1.0:
        y = op.Mul(y, scalar_constant(op, node.attr("alpha"), y if y.dtype else a))
    if c is not None:
        if node.attr("beta", 1.0) != 1.0:
            c = op.Mul(c, scalar_constant(op, node.attr("beta"), c))
        y = op.Add(y, c)
    if residual is not None:
        y = op.Add(y, residual)
    return [apply_activation(op, node, y)]


# ---- quantized: int8 in, int8 out ---------------------------------------------------------
# Inputs (x, w, bias, x_scale, x_zero_point, w_scale, w_zero_point, y_scale, y_zero_point): the
# integer operands first, as the float ops have them, the bias in float (its dequantized values),
# then the scales and zero points of x, of w (per tensor, or per output channel along w's `axis`)
# and of the output. Their meaning is the Q/DQ graph they came from, rounding and all. A product
# without y_scale writes float (the graph quantizes nothing after it).

def _quantized_type(node: Node, zero_point: int = 8):
    """The output's type: its zero point's (input `zero_point`), else uint8 (QuantizeLinear's);
    float where there is no output scale (the input before the zero point)."""
    if node.input(zero_point - 1) is None:
        return DType.FLOAT
    zp = node.input(zero_point)
    return zp.dtype if zp is not None else DType.UINT8


def _quantized_product(node: Node):
    (shape, _), = _product(node)
    return [(shape, _quantized_type(node))]


def _quantized_elementwise(zero_point: int):
    """x's shape (the operands have one shape), in the output zero point's type."""
    return lambda node: [(node.inputs[0].shape, _quantized_type(node, zero_point))]


def _dequantized_operands(op: GraphBuilder, node: Node, x, w, x_scale, x_zero_point, w_scale, w_zero_point):
    return (op.DequantizeLinear(x, x_scale, x_zero_point),
            op.DequantizeLinear(w, w_scale, w_zero_point, axis=node.attr("axis", 0)))


def _requantized(op: GraphBuilder, node: Node, y, y_scale, y_zero_point):
    """The activation, then the output quantized (as float where there is no y_scale)."""
    y = apply_activation(op, node, y)
    return [y if y_scale is None else op.QuantizeLinear(y, y_scale, y_zero_point)]


# ops that move or pick values without computing new ones: with one scale and zero point on both
# sides, Q(op(DQ(x))) is op(x) exactly (nearest Resize only); each with how many inputs it reads
# besides the data. The int8 rules run them over integers; precision="int8" quantizes through them.
QUANTIZATION_MOVES = {"MaxPool": 0, "GlobalMaxPool": 0, "Reshape": 1, "Transpose": 0, "Flatten": 0, "Squeeze": 1,
                      "Unsqueeze": 1, "Slice": 4, "Identity": 0, "Expand": 1, "Tile": 1, "DepthToSpace": 0,
                      "SpaceToDepth": 0, "Resize": 3}


@fused_op("QuantizedConv", OpClass.COMPLEX)
def quantized_conv(op: GraphBuilder, node: Node, x, w, b, x_scale, x_zero_point, w_scale, w_zero_point,
                   y_scale=None, y_zero_point=None):
    """Q(act(Conv(DQ(x), DQ(w), b))): an int8 convolution, its output requantized (or float)."""
    xf, wf = _dequantized_operands(op, node, x, w, x_scale, x_zero_point, w_scale, w_zero_point)
    y = op.Conv(xf, wf, b, **{k: node.attrs[k] for k in ("strides", "pads", "dilations", "group")
                              if k in node.attrs})
    return _requantized(op, node, y, y_scale, y_zero_point)


@fused_op("QuantizedConvTranspose", OpClass.COMPLEX)
def quantized_conv_transpose(op: GraphBuilder, node: Node, x, w, b, x_scale, x_zero_point, w_scale, w_zero_point,
                             y_scale=None, y_zero_point=None):
    """Q(act(ConvTranspose(DQ(x), DQ(w), b))): an int8 transposed convolution, its output
    requantized (the weight [C_in, C_out/group, k…], its scales along `axis` 1)."""
    xf, wf = _dequantized_operands(op, node, x, w, x_scale, x_zero_point, w_scale, w_zero_point)
    y = op.ConvTranspose(xf, wf, b, **{k: v for k, v in node.attrs.items() if k in CONV_TRANSPOSE_ATTRS})
    return _requantized(op, node, y, y_scale, y_zero_point)


CONV_TRANSPOSE_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "pads", "strides")


@fused_op("QuantizedMatMul", OpClass.COMPLEX, _quantized_product)
def quantized_matmul(op: GraphBuilder, node: Node, a, b, c, a_scale, a_zero_point, b_scale, b_zero_point,
                     y_scale=None, y_zero_point=None):
    """Q(act(DQ(A)·DQ(B)ᵀ? + c)): an int8 MatMul or Gemm, its output requantized (or float)."""
    af, bf = _dequantized_operands(op, node, a, b, a_scale, a_zero_point, b_scale, b_zero_point)
    if node.attr("trans_b", 0):
        bf = op.Transpose(bf, perm=[1, 0])
    y = op.MatMul(af, bf)
    if c is not None:
        y = op.Add(y, c)
    return _requantized(op, node, y, y_scale, y_zero_point)


def _quantized_binary(name: str):
    def decomposition(op: GraphBuilder, node: Node, a, b, a_scale, a_zero_point, b_scale, b_zero_point,
                      y_scale, y_zero_point=None):
        y = getattr(op, name)(op.DequantizeLinear(a, a_scale, a_zero_point),
                              op.DequantizeLinear(b, b_scale, b_zero_point))
        return [op.QuantizeLinear(apply_activation(op, node, y), y_scale, y_zero_point)]
    decomposition.__doc__ = f"Q(act(DQ(a) {'+' if name == 'Add' else '·'} DQ(b))): integers {name.lower()}ed, requantized."
    return decomposition


def per_channel_of(x: Value, g: Value) -> bool:
    """Whether g holds one value per channel of x (per image, or for all): [1 or N, C, 1, …], the
    second operand QuantizedAdd and QuantizedMul may broadcast (a squeeze-excitation's gate)."""
    xs, gs = x.shape, g.shape
    return (xs is not None and gs is not None and len(xs) == len(gs) >= 3 and gs[1] == xs[1]
            and gs[0] in (1, xs[0]) and all(d == 1 for d in gs[2:]) and any(d != 1 for d in xs[2:]))


fused_op("QuantizedAdd", OpClass.ELEMWISE, _quantized_elementwise(7))(_quantized_binary("Add"))
fused_op("QuantizedMul", OpClass.ELEMWISE, _quantized_elementwise(7))(_quantized_binary("Mul"))


@fused_op("QuantizedActivation", OpClass.ELEMWISE, _quantized_elementwise(4))
def quantized_activation(op: GraphBuilder, node: Node, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    """Q(act(DQ(x))): a function of 256 integers, which a table of 256 holds."""
    y = apply_activation(op, node, op.DequantizeLinear(x, x_scale, x_zero_point))
    return [op.QuantizeLinear(y, y_scale, y_zero_point)]


@fused_op("QuantizedGatedActivation", OpClass.ELEMWISE, _quantized_elementwise(6))
def quantized_gated_activation(op: GraphBuilder, node: Node, x, x_scale, x_zero_point, g_scale, g_zero_point,
                               y_scale, y_zero_point=None):
    """Q(DQ(x) · DQ(Q(act(DQ(x))))): x times a function of x quantized on its own (SiLU's
    x·sigmoid(x), x·hardsigmoid(x)), itself a function of 256 integers: one table."""
    xf = op.DequantizeLinear(x, x_scale, x_zero_point)
    gate = op.QuantizeLinear(apply_activation(op, node, xf), g_scale, g_zero_point)
    return [op.QuantizeLinear(op.Mul(xf, op.DequantizeLinear(gate, g_scale, g_zero_point)), y_scale, y_zero_point)]


def _dynamic_product(node: Node):
    """x·w in float32 (x's shape but its last axis, w's columns)."""
    (shape, _), = _product(node)
    return [(shape, DType.FLOAT)]


@fused_op("DynamicQuantizedMatMul", OpClass.COMPLEX, _dynamic_product)
def dynamic_quantized_matmul(op: GraphBuilder, node: Node, x, w, w_scale, w_zero_point=None):
    """float(MatMulInteger(q, w, zp, w_zero_point))·(scale·w_scale), (q, scale, zp) =
    DynamicQuantizeLinear(x): x quantized to uint8 over its range on each call, as ONNX Runtime's
    dynamic quantization writes a linear layer (w int8, its scale per tensor or per column)."""
    q, scale, zero_point = op.DynamicQuantizeLinear(x, _outputs=3)
    acc = op.MatMulInteger(q, w, zero_point, w_zero_point)
    return [op.Mul(op.Cast(acc, to=int(DType.FLOAT)), op.Mul(scale, w_scale))]


@fused_op("LayerNorm", OpClass.REDUCTION, same_as_input)
def layer_norm(op: GraphBuilder, node: Node, x, scale=None, bias=None, residual=None):
    """LayerNormalization(x + residual): layer norm over the axes from `axis` on, with the
    residual add in front of it; scale and bias (of the normalized shape) may be omitted."""
    if residual is not None:
        x = op.Add(x, residual)
    return [_affine(op, _standardized(op, x, node.attr("axis", -1), node.attr("epsilon", 1e-5)),
                    scale, bias)]


@fused_op("RMSNorm", OpClass.REDUCTION, same_as_input)
def rms_norm(op: GraphBuilder, node: Node, x, scale=None):
    """x / √(mean(x², axis) + ε) · scale over the axes from `axis` on; scale may be omitted."""
    return [_affine(op, _rms_scaled(op, x, node.attr("axis", -1), node.attr("epsilon", 1e-6)), scale)]


@fused_op("NormMatMul", OpClass.COMPLEX, _product)
def norm_matmul(op: GraphBuilder, node: Node, x, b, c=None, residual=None):
    """FusedMatMul(norm(x + residual), b, c): a LayerNorm or RMSNorm (`norm`) over the last axis,
    without scale or bias (the rule folds those into b and c), feeding a linear layer."""
    if residual is not None:
        x = op.Add(x, residual)
    normalize = _standardized if node.attr("norm") == "LayerNorm" else _rms_scaled
    return fused_matmul(op, node, normalize(op, x, -1, node.attr("epsilon")), b, c)


def _standardized(op: GraphBuilder, x: Value, axis: int, epsilon: float) -> Value:
    """(x − E[x]) / √(Var[x] + ε) over the axes from `axis` on."""
    axes = list(range(axis % len(x.shape), len(x.shape)))
    centered = op.Sub(x, reduce_mean(op, x, axes))
    var = reduce_mean(op, op.Mul(centered, centered), axes)
    return op.Div(centered, op.Sqrt(op.Add(var, scalar_constant(op, epsilon, x))))


def _rms_scaled(op: GraphBuilder, x: Value, axis: int, epsilon: float) -> Value:
    """x / √(E[x²] + ε) over the axes from `axis` on."""
    axes = list(range(axis % len(x.shape), len(x.shape)))
    return op.Div(x, op.Sqrt(op.Add(reduce_mean(op, op.Mul(x, x), axes), scalar_constant(op, epsilon, x))))


def _affine(op: GraphBuilder, y: Value, scale: Value | None, bias: Value | None = None) -> Value:
    y = y if scale is None else op.Mul(y, scale)
    return y if bias is None else op.Add(y, bias)


def reduce_mean(op: GraphBuilder, x: Value, axes: list[int]) -> Value:
    """ReduceMean keeping dims, in the form the graph's opset wants (axes input from 18)."""
    if op.graph.opset.get("", 21) >= 18:
        return op.ReduceMean(x, op.constant(np.array(axes, np.int64), "axes"), keepdims=1)
    return op.ReduceMean(x, axes=axes, keepdims=1)


@fused_op("Gelu", OpClass.ELEMWISE, same_as_input)
def gelu(op: GraphBuilder, node: Node, x):
    """GELU, exact (erf) or with the tanh approximation."""
    return [gelu_in_onnx(op, x, node.attr("approximate", "none"))]


@fused_op("Activation", OpClass.ELEMWISE, same_as_input)
def activation(op: GraphBuilder, node: Node, x):
    """A named activation (SiLU, HardSwish, …) written out in primitive ops in the model."""
    return [apply_activation(op, node, x)]


def _activation_expression(node: Node, x: str) -> str:
    act, params = activation_of_node(node)
    return act.c(x, *params)


register_expression(fused("Activation"), _activation_expression)
register_expression(fused("Gelu"), lambda node, x: ACTIVATIONS[
    "GeluTanh" if node.attr("approximate") == "tanh" else "Gelu"].c(x))


def _attention_type(node: Node):
    """[batch…, q_seq, v_head]: q's rows (its batch and heads are the full ones), v's width."""
    q, v = node.inputs[0], node.inputs[2]
    shape = None if q.shape is None or v.shape is None else (*q.shape[:-1], v.shape[-1])
    return [(shape, q.dtype)]


@fused_op("Attention", OpClass.COMPLEX, _attention_type)
def attention(op: GraphBuilder, node: Node, q, k, v, mask=None):
    """softmax(q·kᵀ·scale + mask)·v over [batch, heads, seq, head_dim]. A query row the mask
    rules out everywhere (all -inf) gives NaN, as softmax does, or 0 with nan_to_zero=1 (as
    torch's scaled_dot_product_attention, and its ONNX export, do)."""
    perm = list(range(len(k.shape))) if k.shape is not None else [0, 1, 2, 3]
    perm[-2:] = perm[-1], perm[-2]
    s = op.Mul(op.MatMul(q, op.Transpose(k, perm=perm)), scalar_constant(op, node.attr("scale", 1.0), q))
    if mask is not None:
        s = op.Add(s, mask)
    p = op.Softmax(s, axis=-1)
    if node.attr("nan_to_zero", 0):
        p = op.Where(op.IsNaN(p), scalar_constant(op, 0.0, p), p)
    return [op.MatMul(p, v)]


# what an Attention's mask may be where a kernel takes it whole (every backend asks the same)
def mask_fits(mask: tuple | None, scores: tuple) -> bool:
    """Whether a mask of this shape broadcasts to the scores without growing them."""
    return mask is not None and len(mask) <= len(scores) and \
        all(d == 1 or (d is not None and d == s) for d, s in zip(reversed(mask), reversed(scores)))


def mask_dead_rows(mask: np.ndarray) -> bool:
    """Whether a constant mask rules some query row out everywhere."""
    return bool(np.isneginf(mask).all(-1).any()) if mask.ndim else bool(np.isneginf(mask))


@fused_op("PoolGemm", OpClass.COMPLEX)
def pool_gemm(op: GraphBuilder, node: Node, x, w, b=None):
    """Gemm(Flatten(GlobalAveragePool(x)), w, b): the Conv-network classifier head."""
    flat = op.Flatten(op.GlobalAveragePool(x), axis=1)
    return [op.Gemm(flat, w, b, transB=node.attr("transB", 0), alpha=node.attr("alpha", 1.0),
                    beta=node.attr("beta", 1.0))]


def _region_types(node: Node):
    return [(v.shape, v.dtype) for v in typed_body(node).outputs]


@fused_op("Region", OpClass.REDUCTION, _region_types)
def region(op: GraphBuilder, node: Node, *xs):
    """An automatic fusion region: its `body` subgraph (elementwise, broadcast and row-reduction
    ops the rules left alone) run as one generated kernel; `kernel` names it after its ops."""
    return inline(op, node.attrs["body"], list(xs), expand=True)


def inline(op: GraphBuilder, body: Graph, inputs: list[Value], expand: bool = False) -> list[Value]:
    """Copy a subgraph's nodes into op's graph, reading `inputs` for its inputs; with `expand`,
    a fused op among them as its decomposition (standard ONNX ops only)."""
    copies: dict[int, Value] = {id(b): v for b, v in zip(body.inputs, inputs)}
    for v in body.constants.values():   # as they are: a scalar stays a scalar (a Gather's index)
        copies[id(v)] = op.graph.add_constant(op.graph.fresh_name(v.name), v.const, v.dtype)
    for n in body.nodes:
        args = [None if v is None else copies[id(v)] for v in n.inputs]
        if expand and n.domain == FUSED_DOMAIN:
            outs = tuple(DECOMPOSITIONS[n.op_type](op, n, *args))
            outs = outs if len(outs) > 1 else outs[0]
        else:
            outs = getattr(op, n.op_type)(*args, _domain=n.domain, _outputs=len(n.outputs), **n.attrs)
        for o, c in zip(n.outputs, outs if isinstance(outs, tuple) else (outs,)):
            copies[id(o)] = c
    return [copies[id(v)] for v in body.outputs]


_TYPED_BODIES: weakref.WeakKeyDictionary[Graph, dict[tuple, Graph]] = weakref.WeakKeyDictionary()


def typed_body(node: Node) -> Graph:
    """A copy of a region's body typed for the region node's inputs (the body may carry
    symbolic sizes the node's inputs now know). The cost model, the checks and the kernel
    generator each read it, so it is made once per body and input types: read it, never change it."""
    body: Graph = node.attrs["body"]
    key = tuple(None if v is None else (v.shape, v.dtype) for v in node.inputs)
    made = _TYPED_BODIES.setdefault(body, {})
    if key not in made:
        made[key] = _typed_copy(body, node)
    return made[key]


def _typed_copy(body: Graph, node: Node) -> Graph:
    g = Graph(body.name, dict(body.opset))
    op = GraphBuilder(g)
    ins = [g.add_input(b.name, v.shape if v is not None else b.shape,
                       v.dtype if v is not None else b.dtype)
           for b, v in zip(body.inputs, node.inputs)]
    g.outputs = inline(op, body, ins)
    return g


def decompose(node: Node) -> Graph:
    """The fused node as a standalone graph of standard ONNX ops (inputs in0, in1, …)."""
    g = Graph(f"{node.op_type}_body", dict(node.graph.opset) if node.graph else None)
    ins = [None if v is None else g.add_input(f"in{i}", v.shape, v.dtype)
           for i, v in enumerate(node.inputs)]
    g.outputs = list(DECOMPOSITIONS[node.op_type](GraphBuilder(g), node, *ins))
    return g
