"""Convolutions, pools, products and attention: the heavy ops a fused group forms around, with
the quantized products and the recurrent and state-space layers."""
from __future__ import annotations

from ..dims import dim_quotient, matmul_shape
from ..dtypes import DType
from ..graph import Dim, Node
from ..ops import OpClass, OpDef, register
from ..symbolic import add, ceildiv, floordiv, minimum, mul
from .elementwise import same_as_input

I, C, O = OpClass.INJECTIVE, OpClass.COMPLEX, OpClass.OPAQUE


def _window_out(n: Dim, k: int, s: int, d: int, pb: int, pe: int, auto_pad: str, ceil_mode: int) -> Dim:
    """One spatial output size of a conv/pool window: SAME gives ceil(n / s), else
    floor((n + pads - window) / s) + 1, or ceil with ceil_mode. A symbolic n is kept when the
    window slides by 1 and the pads make up for its size."""
    window = (k - 1) * d + 1
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return ceildiv(n, s)
    if auto_pad == "VALID":
        pb = pe = 0
    if n is None:
        return None
    if not isinstance(n, int):
        if not ceil_mode:
            return add(floordiv(add(n, pb + pe - window), s), 1)
        # the last window starts inside the input or its begin padding, as the spec says:
        # (out - 1)·s < n + pb
        return minimum(add(ceildiv(add(n, pb + pe - window), s), 1), add(floordiv(add(n, pb - 1), s), 1))
    span = n + pb + pe - window
    if span < 0:
        raise ValueError(f"window {window} larger than the padded input {n + pb + pe}")
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    # a last window that would start in the end padding: the spec and ONNX Runtime drop it,
    # ONNX's shape inference counts it
    return None if (out - 1) * s >= n + pb else out


def _spatial(node: Node, sizes, kernel) -> list[Dim] | None:
    nd = len(kernel)
    if sizes is None or len(sizes) != nd:
        return None
    auto_pad = node.attr("auto_pad", "NOTSET")
    ceil_mode = node.attr("ceil_mode", 0)
    if ceil_mode and auto_pad != "NOTSET":   # runtimes disagree on this combination
        return [None] * nd
    strides, dilations = node.attr("strides") or [1] * nd, node.attr("dilations") or [1] * nd
    if auto_pad.startswith("SAME") and node.op_type != "Conv" and any(d != 1 for d in dilations):
        return [None] * nd   # ONNX Runtime's pools pad for the undilated kernel: not ceil(n / s)
    pads = node.attr("pads") or [0] * (2 * nd)
    return [_window_out(n, k, s, d, pads[i], pads[i + nd], auto_pad, ceil_mode)
            for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations))]


def _conv(node: Node):
    """[N, M, spatial...], M = W.shape[0], the kernel from kernel_shape or W."""
    x, w = node.inputs[0], node.inputs[1]
    kernel = node.attr("kernel_shape") or (list(w.shape[2:]) if w.shape is not None else None)
    if x.shape is None or kernel is None or not all(isinstance(k, int) for k in kernel):
        return [(None, x.dtype)]
    spatial = _spatial(node, x.shape[2:], kernel)
    if spatial is None:
        return [(None, x.dtype)]
    m = w.shape[0] if w.shape is not None else None
    return [((x.shape[0], m, *spatial), x.dtype)]


register(OpDef("Conv", C, _conv))


def _conv_transpose(node: Node):
    """[N, W.shape[1]·group, spatial...]: output_shape when given, else
    s·(n-1) + output_padding + window - pads (n·s for SAME)."""
    x, w = node.inputs[0], node.inputs[1]
    kernel = node.attr("kernel_shape") or (list(w.shape[2:]) if w.shape is not None else None)
    if x.shape is None or kernel is None or not all(isinstance(k, int) for k in kernel):
        return [(None, x.dtype)]
    nd, sizes = len(kernel), x.shape[2:]
    if len(sizes) != nd:
        return [(None, x.dtype)]
    m = mul(w.shape[1], node.attr("group", 1)) if w.shape is not None else None
    if node.attr("output_shape"):
        spatial = list(node.attr("output_shape"))
        if len(spatial) != nd:
            return [(None, x.dtype)]
        return [((x.shape[0], m, *spatial), x.dtype)]
    strides, dilations = node.attr("strides") or [1] * nd, node.attr("dilations") or [1] * nd
    pads, extra = node.attr("pads") or [0] * (2 * nd), node.attr("output_padding") or [0] * nd
    auto_pad = node.attr("auto_pad", "NOTSET")
    spatial = []
    for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            spatial.append(mul(n, s))
            continue
        pb, pe = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + nd])
        grow = extra[i] + (k - 1) * d + 1 - pb - pe
        spatial.append(add(mul(s, add(n, -1)), grow))
    return [((x.shape[0], m, *spatial), x.dtype)]


register(OpDef("ConvTranspose", C, _conv_transpose))


def _pool(node: Node):
    """[N, C, spatial...] over kernel_shape; MaxPool's Indices alike, int64."""
    x = node.inputs[0]
    kernel = node.attrs["kernel_shape"]
    spatial = _spatial(node, x.shape[2:], kernel) if x.shape is not None else None
    shape = None if spatial is None else (*x.shape[:2], *spatial)
    return [(shape, x.dtype), (shape, DType.INT64)]


for _name in ["MaxPool", "AveragePool", "LpPool"]:
    register(OpDef(_name, C, _pool))
del _name


def _matmul(node: Node):
    a, b = node.inputs[0], node.inputs[1]
    return [(matmul_shape(a.shape, b.shape), a.dtype)]


register(OpDef("MatMul", C, _matmul))


def _gemm(node: Node):
    a, b = node.inputs[0], node.inputs[1]
    if a.shape is None or b.shape is None or len(a.shape) != 2 or len(b.shape) != 2:
        return [(None, a.dtype)]
    m = a.shape[1] if node.attr("transA", 0) else a.shape[0]
    n = b.shape[0] if node.attr("transB", 0) else b.shape[1]
    return [((m, n), a.dtype)]


register(OpDef("Gemm", C, _gemm))
register(OpDef("Einsum", C, None))


def _integer_product(a: int, b: int, zp: int | None, conv: bool = False):
    """MatMulInteger/ConvInteger (int32) and QLinearMatMul/QLinearConv (in y's zero point's
    type, else a's): the shape of the product of inputs a and b."""
    def rule(node: Node):
        x, w = node.inputs[a], node.inputs[b]
        y_zp = node.input(zp) if zp is not None else None
        dtype = DType.INT32 if zp is None else (y_zp.dtype if y_zp is not None else x.dtype)
        if not conv:
            return [(matmul_shape(x.shape, w.shape), dtype)]
        kernel = node.attr("kernel_shape") or (list(w.shape[2:]) if w.shape is not None else None)
        if x.shape is None or kernel is None or not all(isinstance(k, int) for k in kernel):
            return [(None, dtype)]
        spatial = _spatial(node, x.shape[2:], kernel)
        m = w.shape[0] if w.shape is not None else None
        return [(None if spatial is None else (x.shape[0], m, *spatial), dtype)]
    return rule


register(OpDef("MatMulInteger", C, _integer_product(0, 1, None)))
register(OpDef("ConvInteger", C, _integer_product(0, 1, None, conv=True)))
register(OpDef("QLinearMatMul", C, _integer_product(0, 3, 7)))
register(OpDef("QLinearConv", C, _integer_product(0, 3, 7, conv=True)))


# ---- the transformer ops of opsets 23-27 -----------------------------------------------------
def _attention(node: Node):
    """Attention: Y [batch, q_heads, q_seq, v_head] ([batch, q_seq, q_heads·v_head] for 3-D
    inputs), present key/value [batch, kv_heads, past + kv_seq, head], the scores
    [batch, q_heads, q_seq, past + kv_seq]."""
    q, k, v = node.inputs[:3]
    past = node.input(4)
    n, dtype = len(node.outputs), q.dtype
    if q.shape is None or k.shape is None or v.shape is None:
        return [(None, dtype)] * n
    if len(q.shape) == 3:
        hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
        b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        dk, dv = dim_quotient(k.shape[2], hkv), dim_quotient(v.shape[2], hkv)
        y = (b, sq, mul(dv, hq))
    else:
        (b, hq, sq, _), (_, hkv, sk, dk), dv = q.shape, k.shape, v.shape[3]
        y = (b, hq, sq, dv)
    total = sk if past is None else (add(past.shape[2], sk) if past.shape is not None else None)
    outs = [y, (b, hkv, total, dk), (b, hkv, total, dv), (b, hq, sq, total)]
    return [(s, dtype) for s in outs[:n]]


register(OpDef("Attention", C, _attention))
register(OpDef("RotaryEmbedding", I, same_as_input))


def _linear_attention(node: Node):
    """output [batch, seq, q_heads·d_v]; present_state [batch, kv_heads, d_k, d_v] in past_state's
    type (query's without it)."""
    q, k, v = node.inputs[:3]
    past, hq, hkv = node.input(3), node.attr("q_num_heads"), node.attr("kv_num_heads")
    if q.shape is None or k.shape is None or v.shape is None:
        return [(None, q.dtype), (None, past.dtype if past is not None else q.dtype)]
    dk, dv = dim_quotient(k.shape[2], hkv), dim_quotient(v.shape[2], hkv)
    return [((q.shape[0], q.shape[1], mul(dv, hq)), q.dtype),
            ((q.shape[0], hkv, dk, dv), past.dtype if past is not None else q.dtype)]


register(OpDef("LinearAttention", O, _linear_attention))


def _causal_conv_with_state(node: Node):
    """output like the input; present_state [batch, channels, k - 1]."""
    x, w = node.inputs[0], node.inputs[1]
    k = w.shape[2] if w.shape is not None and isinstance(w.shape[2], int) else None
    state = None if x.shape is None else (*x.shape[:2], k - 1 if k is not None else None)
    return [(x.shape, x.dtype), (state, x.dtype)]


register(OpDef("CausalConvWithState", O, _causal_conv_with_state))


# ---- recurrent layers: the whole time loop is one opaque op ---------------------------------
def _recurrent(node: Node):
    """LSTM/GRU/RNN: Y [seq, dirs, batch, hidden] ([batch, seq, dirs, hidden] with layout 1);
    Y_h and LSTM's Y_c [dirs, batch, hidden] ([batch, dirs, hidden])."""
    x, r = node.inputs[0], node.inputs[2]
    dirs = 2 if node.attr("direction", "forward") == "bidirectional" else 1
    hidden = node.attr("hidden_size") or (r.shape[-1] if r.shape is not None else None)
    if x.shape is None or len(x.shape) != 3:
        return [(None, x.dtype)] * len(node.outputs)
    batch_first = node.attr("layout", 0) == 1
    seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    y = (batch, seq, dirs, hidden) if batch_first else (seq, dirs, batch, hidden)
    state = (batch, dirs, hidden) if batch_first else (dirs, batch, hidden)
    return [(y, x.dtype)] + [(state, x.dtype)] * (len(node.outputs) - 1)


for _name in ["LSTM", "GRU", "RNN"]:
    register(OpDef(_name, O, _recurrent))
del _name
