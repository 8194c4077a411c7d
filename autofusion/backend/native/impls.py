"""Native implementations: each op oneDNN runs inside a C++ partition, its check and its emitter.

A check returns why the implementation cannot run a node (float32, every dim known: an int or
symbolic, evaluated per set of input sizes; each op adds its own conditions), None when it can. An emitter writes the node's call into
the partition's C++ (`p.conv(...)`, see runtime/native.h), reading ids of values, prepared
constants and the plan's in-place decisions from the partition source it is given. `plain`
names the inputs the step reads as dense row-major arrays, so the plan asks their producers for
that layout instead of a reorder per consumer.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from ...ir import DType, Node, Value
from ...ir.activations import ACTIVATION_OPS, ELTWISE, FUNCTIONS, activation, clip_bounds, eltwise_steps
from ...ir.attributes import opset_of
from ...ir.builder import fused
from ...ir.dims import slice_bounds, symbolic_slice_bounds
from ...ir.fused_ops import mask_dead_rows, mask_fits, per_channel_of
from ...ir.geometry import explicit_pads, split_total
from ...ir.region_space import LayoutError, reduced_axes
from ...ir.shapes.tensor import pad_counts
from ...ir.symbolic import add, is_size, is_symbolic, maximum, mul, product, same_where_nonempty, sub
from ..impl import Impl, implementations, register, torch_impl
from .build import has_vnni
from .emit import PartitionSource, dims

Emitter = Callable[[Node, PartitionSource], None]


def native(*ops: str, check: Callable[[Node], str | None], plain: tuple[int, ...] | str = (),
           tensors: tuple[int, ...] | None = None, view: bool = False,
           overwrites: Callable[[Node], Value | None] | None = None, name: str = "onednn",
           reduced: bool = False, estimate: Callable[[Node], float] | None = None,
           reorders_output: bool = False):
    """Register an emitter as the native implementation `name` of ops. `tensors`: the inputs the
    step reads at run time (default all); the others (shapes, axes) are read at compile time.
    `overwrites`: the input a step may write its output over (the plan decides).
    `reduced`: its products run in bf16 where the plan's precision says (runtime/native.h).
    `estimate`: its cost in seconds, where it is not one call over the node's bytes.
    `reorders_output`: it can store its output with the axes in another order, the last kept
    innermost (the plan's ValuePlan.order)."""
    def deco(emit: Emitter) -> Emitter:
        for op in ops:
            register(op, Impl(name, "native", check, emit=emit,
                              plain_inputs=plain if plain == "all" else frozenset(plain),
                              tensor_inputs=tensors, view=view, overwrites=overwrites,
                              reduced=reduced, estimate=estimate, reorders_output=reorders_output,
                              doc=(emit.__doc__ or "").strip()))
        return emit
    return deco


# ---- checks shared by every op ---------------------------------------------------------------

FLOAT = (DType.FLOAT,)
INTEGERS = (DType.UINT8, DType.INT8)   # a quantized model's, which int8 steps read and write


def _refusal(v: Value | None, what: str, types: tuple[DType, ...] = FLOAT) -> str | None:
    if v is None:
        return None
    if v.dtype not in types:
        kinds = " or ".join(t.name.lower() for t in types)
        return f"{what} {v.name!r} is {v.dtype.name.lower() if v.dtype else 'of unknown type'}: " \
               f"this native step takes {kinds}"
    if v.shape is None or not all(is_size(d) for d in v.shape):
        return f"{what} {v.name!r} has shape {v.type_str()}: native partitions need every dim known"
    if not v.shape:
        return f"{what} {v.name!r} is a scalar"
    if 0 in v.shape:
        return f"{what} {v.name!r} is empty"
    if v.is_static and math.prod(v.shape) > MAX_ELEMENTS:
        return f"{what} {v.name!r} has shape {v.type_str()}: more elements than a native step indexes"
    return None


MAX_ELEMENTS = 1 << 40   # oneDNN and the arena count bytes in 64 bits: 2^40 floats is 4 TiB


def _is_read(node: Node, j: int) -> bool:
    """Whether output j exists and something reads it (a graph output counts)."""
    v = node.outputs[j] if j < len(node.outputs) else None
    return v is not None and (bool(v.uses) or any(o is v for o in (node.graph.outputs if node.graph else ())))


def dense(node: Node, inputs: tuple[int, ...] | None = None, outputs: int = 1,
          types: tuple[DType, ...] = FLOAT, output_types: tuple[DType, ...] | None = None) -> str | None:
    """The common conditions: the listed inputs (default all) and every used output of `types`
    (float32; the outputs' own where given), static, at least 1-D and not empty; the step makes
    the first `outputs` outputs."""
    for i in range(len(node.inputs)) if inputs is None else inputs:
        why = _refusal(node.input(i), "input", types)
        if why:
            return why
    for j, v in enumerate(node.outputs):
        if j >= outputs and not _is_read(node, j):
            continue   # an optional output nobody reads (MaxPool's indices)
        why = _refusal(v, "output", output_types or types)
        if why:
            return why
        if j >= outputs:
            return f"its output {j} ({v.name!r}) is used: the native step makes {outputs} only"
    return None


def dense_or_integers(node: Node, inputs: tuple[int, ...] = (0,), outputs: int = 1) -> str | None:
    """dense() for steps that move values without computing new ones (views, copies, a max pool):
    float32, or a quantized model's integers as they are."""
    if node.inputs[0].dtype in INTEGERS:
        return _computed(node, 0) or dense(node, inputs, outputs, types=INTEGERS)
    return dense(node, inputs, outputs)


def constant(node: Node, i: int, what: str) -> str | None:
    v = node.input(i)
    return None if v is None or v.const is not None else f"the {what} is computed at run time"


def first(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


def node_acts(node: Node) -> list[tuple[str, float, float]]:
    """A fused node's activation as oneDNN eltwise steps (ir/activations.py)."""
    act, params = activation(node)
    return act.onednn(*params)


# ---- convolution -----------------------------------------------------------------------------

def _conv_pads(node: Node) -> list[int]:
    x, w = node.inputs[0], node.inputs[1]
    nd = len(w.shape) - 2
    return explicit_pads(node.attr("auto_pad", "NOTSET"), node.attr("pads"), x.shape[2:],
                         node.attr("kernel_shape") or w.shape[2:], node.attr("strides") or [1] * nd,
                         node.attr("dilations") or [1] * nd)


def check_conv(node: Node) -> str | None:
    x, z = node.inputs[0], node.input(3)
    grouped_computed = node.inputs[1].const is None and node.attr("group", 1) > 1
    return first(dense(node), "a computed weight of a grouped convolution" if grouped_computed else None,
                 constant(node, 2, "bias"),
                 None if x.rank in (3, 4, 5) else f"a {x.rank}-D input: oneDNN convolves 1-D to 3-D",
                 None if z is None or z.shape == node.outputs[0].shape else
                 "the residual broadcasts to the output")


def conv_residual(node: Node) -> Value | None:
    """The residual a convolution may write its result over: not its own input, which it reads
    around each pixel it writes."""
    z = node.input(3)
    return z if z is not node.inputs[0] else None


@native("Conv", fused("FusedConv"), check=check_conv, reduced=True, overwrites=conv_residual)
def emit_conv(node: Node, p: PartitionSource) -> None:
    """oneDNN convolution: layouts oneDNN picks, the weight reordered once (a computed one, a
    gate folded into it, on each call), bias, residual and activation as post-ops; the result
    written over the residual where the plan says this step reads it last."""
    nd = node.inputs[1].rank - 2
    pads = _conv_pads(node)
    p.call("conv", p.out(node), p.ref(node.inputs[0]), p.ref(node.inputs[1]),
           p.ref(node.input(2)), p.ref(node.input(3)),
           dims(node.attr("strides") or [1] * nd), dims(node.attr("dilations") or [1] * nd),
           dims(pads[:nd]), dims(pads[nd:]), node.attr("group", 1), p.acts(node_acts(node)),
           p.in_place(node))


def _conv_transpose_pads(node: Node) -> tuple[list[int], list[int]] | str:
    """ConvTranspose's (pads at the begin, at the end less output_padding) as oneDNN's
    deconvolution takes them, or why not."""
    w = node.inputs[1]
    nd = w.rank - 2
    auto = node.attr("auto_pad", "NOTSET")
    if node.attr("output_shape"):
        return "output_shape given: explicit pads only"
    extra = list(node.attr("output_padding") or [0] * nd)
    if auto in ("SAME_UPPER", "SAME_LOWER") and any(extra):
        return f"auto_pad {auto} with output_padding: ONNX's shape inference and ONNX Runtime disagree on the size"
    if auto in ("SAME_UPPER", "SAME_LOWER"):   # the output is the input times the stride
        kernel = node.attr("kernel_shape") or w.shape[2:]
        totals = [o + (k - 1) * d + 1 - s for o, k, d, s in zip(
            extra, kernel, node.attr("dilations") or [1] * nd, node.attr("strides") or [1] * nd)]
        if any(t < 0 for t in totals):
            return f"auto_pad {auto} with a stride above the kernel's extent: negative padding"
        pads = split_total(totals, auto == "SAME_UPPER")
    else:
        pads = list(node.attr("pads") or [0] * (2 * nd)) if auto == "NOTSET" else [0] * (2 * nd)
    end = [e - o for e, o in zip(pads[nd:], extra)]
    if any(e < 0 for e in end):
        return "output_padding beyond the end padding (oneDNN's deconvolution pads no less than 0)"
    return pads[:nd], end


def check_conv_transpose(node: Node) -> str | None:
    x = node.inputs[0]
    pads = _conv_transpose_pads(node)
    return first(dense(node), constant(node, 1, "weight"), constant(node, 2, "bias"),
                 None if x.rank in (3, 4, 5) else f"a {x.rank}-D input: oneDNN deconvolves 1-D to 3-D",
                 pads if isinstance(pads, str) else None)


@native("ConvTranspose", check=check_conv_transpose, reduced=True)
def emit_conv_transpose(node: Node, p: PartitionSource) -> None:
    """oneDNN deconvolution: layouts oneDNN picks, the weight (held as ONNX holds it) reordered
    once, the bias as the primitive's; ONNX's output_padding is the end padding's shortfall."""
    nd = node.inputs[1].rank - 2
    begin, end = _conv_transpose_pads(node)
    p.call("deconv", p.out(node), p.ref(node.inputs[0]), p.ref(node.inputs[1]), p.ref(node.input(2)),
           dims(node.attr("strides") or [1] * nd), dims(node.attr("dilations") or [1] * nd),
           dims(begin), dims(end), node.attr("group", 1), p.acts([]))


# ---- padding ---------------------------------------------------------------------------------

# Pad's modes that read the border from the input → the runtime's (native.h PadMode)
PAD_MODES = {"reflect": "PadMode::Reflect", "edge": "PadMode::Edge", "wrap": "PadMode::Wrap"}


def _pad_counts(node: Node) -> tuple[list[int], list[int], float] | str:
    """Pad's (before, after) counts per axis of its input and its constant value, or why not."""
    mode = node.attr("mode", "constant")
    if mode != "constant" and mode not in PAD_MODES:
        return f"mode {mode!r}: constant, reflect, edge and wrap padding only"
    if opset_of(node) < 11:
        value = node.attr("value", 0.0)
    else:
        v = node.input(2)
        if v is not None and (v.const is None or v.const.size != 1):
            return "the padding value is computed at run time"
        value = 0.0 if v is None else float(v.const.reshape(-1)[0])
    counts = pad_counts(node, node.inputs[0].rank)
    return "the pads are computed at run time" if counts is None else (*counts, value)


def check_pad(node: Node) -> str | None:
    counts = _pad_counts(node)
    return first(dense(node, (0,)), counts if isinstance(counts, str) else None)


@native("Pad", check=check_pad, tensors=(0,))
def emit_pad(node: Node, p: PartitionSource) -> None:
    """Constant: the border filled with the value, the input copied into the interior (a
    negative count crops): the runtime's fill and a reorder. Reflect, edge, wrap: the runtime's
    loop, each output row copied from the input row it reads."""
    before, after, value = _pad_counts(node)
    mode = node.attr("mode", "constant")
    if mode in PAD_MODES:
        p.call("pad_from_input", p.out(node), p.ref(node.inputs[0]), dims(before), dims(after),
               p.name(PAD_MODES[mode]))
        return
    p.call("pad", p.out(node), p.ref(node.inputs[0]), dims(before), dims(after), p.float(value))


# ---- recurrent -------------------------------------------------------------------------------

# oneDNN's gates in ONNX's order: an LSTM's i, o, f, c as i, f, c, o; a GRU's z, r, h are oneDNN's
_GATES = {"LSTM": [0, 2, 3, 1], "GRU": [0, 1, 2]}
_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


def check_recurrent(node: Node) -> str | None:
    d = 2 if node.attr("direction", "forward") == "bidirectional" else 1
    acts, default = node.attr("activations"), _DEFAULT_ACTIVATIONS[node.op_type]
    states = (5, 6) if node.op_type == "LSTM" else (5,)
    return first(
        _refusal(node.inputs[0], "input"),
        *(_refusal(node.outputs[j], "output") for j in range(len(node.outputs)) if _is_read(node, j)),
        *(constant(node, i, what) for i, what in ((1, "weight"), (2, "recurrent weight"), (3, "bias"))),
        None if node.input(4) is None else "sequence_lens given: every sequence as long as the input only",
        None if node.input(7) is None else "peephole weights (P): oneDNN's LSTM takes them, not wired here",
        None if node.attr("layout", 0) == 0 else "layout 1 (batch first)",
        None if not acts or [a.lower() for a in acts] == [a.lower() for a in default * d]
        else f"activations {acts}: {', '.join(default).lower()} only",
        None if node.attr("clip") is None else "a cell clip",
        None if not node.attr("input_forget", 0) else "input_forget (coupled gates)",
        *(_refusal(node.input(i), "input") for i in states))


def _gates(node: Node, a: np.ndarray) -> np.ndarray:
    """ONNX's [D, G·H, K] weights as oneDNN's [1, D, K, G, H] (ldigo), gates in its order."""
    order = _GATES[node.op_type]
    g = a.reshape(a.shape[0], len(order), -1, a.shape[-1])[:, order]
    return np.ascontiguousarray(g.transpose(0, 3, 1, 2)[None], dtype=np.float32)


def _biases(node: Node) -> np.ndarray:
    """ONNX's B [D, 2·G·H] (the input's biases, then the recurrent ones) as oneDNN's [1, D, G, H],
    the two summed; a GRU with linear_before_reset keeps the candidate's two apart, as oneDNN's
    lbr_gru does ([1, D, 4, H]: z, r summed, then Wbh, Rbh)."""
    order = _GATES[node.op_type]
    d, hidden = node.inputs[2].const.shape[0], node.inputs[2].const.shape[-1]
    b = node.input(3)
    both = (np.zeros((d, 2 * len(order) * hidden), np.float32) if b is None else b.const).reshape(
        d, 2, len(order), hidden)[:, :, order]
    if node.op_type == "GRU" and node.attr("linear_before_reset", 0):
        summed = np.concatenate([both[:, 0, :2] + both[:, 1, :2], both[:, :, 2]], axis=1)
    else:
        summed = both.sum(1)
    return np.ascontiguousarray(summed[None], dtype=np.float32)


@native("LSTM", "GRU", check=check_recurrent, tensors=(0, 5, 6))
def emit_recurrent(node: Node, p: PartitionSource) -> None:
    """oneDNN's LSTM or GRU: the weights reordered here into its layout, the biases summed (but
    for the candidate's of a GRU with linear_before_reset); Y a view of oneDNN's [T, N, D·H]
    result."""
    w, r = node.inputs[1].const, node.inputs[2].const                # [D, G·H, I], [D, G·H, H]
    d, hidden = r.shape[0], r.shape[-1]
    steps, batch = node.inputs[0].shape[:2]
    lstm = node.op_type == "LSTM"
    shapes = ([steps, d, batch, hidden], [d, batch, hidden], [d, batch, hidden])[:3 if lstm else 2]
    outs = [p.out(node, j) if _is_read(node, j) else p.temp(shape, plain=True) for j, shape in enumerate(shapes)]
    weights = (p.const(_gates(node, w), f"{node.name}_w"), p.const(_gates(node, r), f"{node.name}_r"),
               p.const(_biases(node), f"{node.name}_b"))
    reverse = int(node.attr("direction", "forward") == "reverse")
    if lstm:
        p.call("lstm", *outs, p.ref(node.inputs[0]), *weights, p.ref(node.input(5)), p.ref(node.input(6)), reverse)
    else:
        p.call("gru", *outs, p.ref(node.inputs[0]), *weights, p.ref(node.input(5)), reverse,
               bool(node.attr("linear_before_reset", 0)))


# ---- pooling ---------------------------------------------------------------------------------

def _pool_window(node: Node) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(kernel, strides, dilations, pads begin, pads end) with ceil_mode's extra end padding."""
    x, y = node.inputs[0].shape, node.outputs[0].shape
    spatial = list(x[2:])
    if node.op_type.startswith("Global"):
        return spatial, [1] * len(spatial), [1] * len(spatial), [0] * len(spatial), [0] * len(spatial)
    k = list(node.attr("kernel_shape"))
    s, d = list(node.attr("strides") or [1] * len(k)), list(node.attr("dilations") or [1] * len(k))
    pads = explicit_pads(node.attr("auto_pad", "NOTSET"), node.attr("pads"), spatial, k, s, d)
    begin, end = pads[:len(k)], pads[len(k):]
    # the windows the output has must fit: ceil_mode's last window may need padding at the end
    end = [maximum(e, sub(add(mul(add(o, -1), st), (kk - 1) * dd + 1), add(n, b)))
           for e, o, st, kk, dd, n, b in zip(end, y[2:], s, k, d, spatial, begin)]
    return k, s, d, begin, end


def check_pool(node: Node) -> str | None:
    """oneDNN pools float32, and the integers of a quantized model where the pool commutes with
    their quantization (a max)."""
    why = first(dense_or_integers(node) if "Max" in node.op_type else dense(node, (0,)),
                None if node.inputs[0].rank in (3, 4, 5) else "1-D to 3-D pools only")
    if why:
        return why
    if node.op_type == "AveragePool" and node.attr("count_include_pad", 0):
        k, s, d, begin, end = _pool_window(node)
        given = explicit_pads(node.attr("auto_pad", "NOTSET"), node.attr("pads"),
                              node.inputs[0].shape[2:], k, s, d)[len(k):]
        if end != given:
            return "ceil_mode's extra padding would be counted in the average"
    return None


@native("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", check=check_pool, tensors=(0,))
def emit_pool(node: Node, p: PartitionSource) -> None:
    """oneDNN pooling, in the layout of its input."""
    k, s, d, begin, end = _pool_window(node)
    kind = p.name("Pool::Max" if "Max" in node.op_type else
                  "Pool::AvgIncludePad" if node.attr("count_include_pad", 0) else "Pool::AvgExcludePad")
    p.call("pool", p.out(node), p.ref(node.inputs[0]), kind, dims(k), dims(s), dims(d),
           dims(begin), dims(end))


def check_spatial_mean(node: Node) -> str | None:
    """ReduceMean over every spatial axis, dims kept (torch's x.mean((2, 3), keepdim=True)): a
    global average pool."""
    why = dense(node, (0,))
    if why:
        return why
    rank = node.inputs[0].rank
    try:
        axes = reduced_axes(node)
    except LayoutError as e:
        return str(e)
    if rank not in (3, 4, 5) or axes != list(range(2, rank)) or not node.attr("keepdims", 1):
        return "only the mean over every spatial axis of a 3-D to 5-D input, dims kept, runs native"
    return None


@native("ReduceMean", check=check_spatial_mean, tensors=(0,))
def emit_spatial_mean(node: Node, p: PartitionSource) -> None:
    """oneDNN average pooling over the whole image, in the layout of its input."""
    spatial = list(node.inputs[0].shape[2:])
    ones, zeros = [1] * len(spatial), [0] * len(spatial)
    p.call("pool", p.out(node), p.ref(node.inputs[0]), p.name("Pool::AvgExcludePad"), dims(spatial),
           dims(ones), dims(ones), dims(zeros), dims(zeros))


REDUCTIONS = {"ReduceMean": "Reduce::Mean", "ReduceSum": "Reduce::Sum", "ReduceMax": "Reduce::Max",
              "ReduceMin": "Reduce::Min", "ReduceProd": "Reduce::Prod"}


def _reduced(node: Node) -> tuple[list[int], list] | None:
    """(the reduced axes, the input's shape with them 1), or None where they are not known."""
    try:
        axes = reduced_axes(node)
    except LayoutError:
        return None
    return axes, [1 if i in axes else d for i, d in enumerate(node.inputs[0].shape)]


def check_reduce(node: Node) -> str | None:
    why = dense(node, (0,))
    if why:
        return why
    reduced = _reduced(node)
    if reduced is None:
        return "its axes are computed at run time, or it reduces none"
    shape = node.inputs[0].shape
    run = [i for i in range(len(shape)) if i in reduced[0] and shape[i] != 1]
    if run and any(shape[i] != 1 for i in range(run[0], run[-1] + 1) if i not in run):
        return "its axes are not one run (the runtime's loop reduces one; oneDNN's would be its reference kernel)"
    return None


@native(*REDUCTIONS, check=check_reduce, tensors=(0,), name="reduction")
def emit_reduce(node: Node, p: PartitionSource) -> None:
    """The runtime's reduction over one run of axes, row-major (runtime/reduce.h): the result
    with the axes kept as 1, a view dropping them where keepdims=0."""
    _, kept = _reduced(node)
    op = p.name(REDUCTIONS[node.op_type])
    if node.attr("keepdims", 1):
        p.call("reduce", p.out(node), p.ref(node.inputs[0]), op)
        return
    reduced = p.temp(kept, plain=True)
    p.call("reduce", reduced, p.ref(node.inputs[0]), op)
    p.call("reshape", p.out(node), reduced)


# A squeeze-excitation's mean of a SiLU's result (EfficientNet's): the runtime computes the SiLU
# itself, after the convolution (a gate: ir/activations.py ELTWISE), and its loop sums each
# channel as it writes; the mean costs no pass over the result of its own.

def gated(v: Value) -> str | None:
    """Why v is not the result of a gate the runtime computes at the end of a native step."""
    n = v.producer
    acts = [] if n is None else (node_acts(n) if n.op == fused("FusedConv") else
                                 eltwise_steps(n) if n.op in UNARY_OPS else [])
    if not acts or not ELTWISE[acts[-1][0]].gate:
        return "its input is not a SiLU or tanh-GELU the runtime computes after a step"
    if all(impl.check(n) is not None for impl in implementations(n.op, "native")):
        return "its input's producer does not run native"
    return None


def check_mean_in_gate(node: Node) -> str | None:
    mean = check_pool(node) if node.op_type == "GlobalAveragePool" else check_spatial_mean(node)
    return first(mean, gated(node.inputs[0]))


@native("GlobalAveragePool", "ReduceMean", check=check_mean_in_gate, tensors=(0,), name="in-gate",
        estimate=lambda node: 0.0)
def emit_mean_in_gate(node: Node, p: PartitionSource) -> None:
    """The mean over the whole image, summed by the gate that writes its input as it writes (no
    pass of its own); oneDNN's pooling where the runtime finds the input's layout is not
    channels-innermost (runtime/native.h)."""
    p.call("mean_in_gate", p.out(node), p.ref(node.inputs[0]))


# ---- resampling --------------------------------------------------------------------------------

def _resize_inputs(node: Node) -> tuple[list[float] | None, list[int] | None]:
    """Resize's constant scales and sizes (each None where absent or not a constant)."""
    def ints_or_floats(i: int, kind):
        v = node.input(i)
        return None if v is None or v.const is None or not v.const.size else [kind(a) for a in v.const.reshape(-1)]
    return ints_or_floats(2, float), ints_or_floats(3, int)


def check_resize(node: Node) -> str | None:
    """oneDNN's resampling computes ONNX's Resize where their coordinates agree: nearest by an
    integer factor (asymmetric with floor, or half_pixel rounding: each output pixel reads
    floor(o / f) either way), linear with half_pixel (pytorch_half_pixel) where the factor is the
    one ONNX uses (sizes given, or an integer scale)."""
    if node.op_type != "Resize" or opset_of(node) < 11:
        return "only Resize from opset 11 runs native"
    mode = node.attr("mode", "nearest")
    why = dense_or_integers(node) if mode == "nearest" else dense(node, (0,))   # nearest picks values
    if why:
        return why
    x, y = node.inputs[0].shape, node.outputs[0].shape
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if len(x) not in (3, 4, 5) or x[:2] != y[:2]:
        return "it scales the batch or channel axis, or is not 1-D to 3-D"
    if node.attr("antialias", 0) or node.attr("axes") is not None or \
            node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "antialias, axes or an aspect-ratio policy"
    scales, sizes = _resize_inputs(node)
    integer = all(any(o == mul(i, k) for k in range(1, 33)) for i, o in zip(x[2:], y[2:]))
    if mode == "nearest":
        rounding = node.attr("nearest_mode", "round_prefer_floor")
        agrees = (ctm == "asymmetric" and rounding == "floor") or \
            (ctm in ("half_pixel", "pytorch_half_pixel") and rounding in ("round_prefer_floor", "round_prefer_ceil"))
        if not agrees:
            return f"nearest with {ctm} and {rounding}: oneDNN rounds half_pixel coordinates"
        return None if integer else "nearest by a factor that is not an integer"
    if mode == "linear":
        if ctm not in ("half_pixel", "pytorch_half_pixel"):
            return f"linear with {ctm}: oneDNN's coordinates are half_pixel"
        computed = node.input(3) is not None and node.input(3).const is None   # sizes from shapes
        if computed and ctm != "half_pixel":
            return "linear to computed sizes with pytorch_half_pixel (an output of 1 reads 0 there)"
        if sizes is None and not computed and \
                not (integer and scales is not None and all(float(int(s)) == s for s in scales)):
            return "linear by scales that are not the ratio of the sizes"
        return None
    return f"mode {mode}: oneDNN resamples nearest and linear"


@native("Resize", check=check_resize, tensors=(0,))
def emit_resize(node: Node, p: PartitionSource) -> None:
    """oneDNN resampling, in the layout of its input."""
    p.call("resample", p.out(node), p.ref(node.inputs[0]), node.attr("mode", "nearest") == "linear")


# ---- elementwise -----------------------------------------------------------------------------

# the unary ops that run as the runtime's elementwise functions (ir/activations.py eltwise_steps)
UNARY_OPS = (*ACTIVATION_OPS, *FUNCTIONS, fused("Gelu"), fused("Activation"))


def check_unary(node: Node) -> str | None:
    if node.op_type == "Clip" and clip_bounds(node) is None:
        return "Clip's bounds are computed at run time"
    return first(dense(node, (0,)), None if eltwise_steps(node) else "no activation")


@native(*UNARY_OPS, check=check_unary, tensors=(0,), overwrites=lambda node: node.inputs[0])
def emit_unary(node: Node, p: PartitionSource) -> None:
    """oneDNN eltwise, in place where the plan allows."""
    p.call("eltwise", p.out(node), p.ref(node.inputs[0]), p.acts(eltwise_steps(node)),
           p.in_place(node))


BINARY = {"Add": "Bin::Add", "Sub": "Bin::Sub", "Mul": "Bin::Mul", "Div": "Bin::Div",
          "Max": "Bin::Max", "Min": "Bin::Min"}
COMMUTATIVE = {"Add", "Mul", "Max", "Min"}


def _binary_operands(node: Node) -> tuple[Value, Value] | None:
    """(full, other): the operand of the output's shape first (oneDNN broadcasts the second); or,
    where the two differ only in symbolic dims that agree at run time (_equal_at_run_time), the
    first."""
    a, b = node.inputs
    out = node.outputs[0].shape
    if a.shape == out:
        return a, b
    if b.shape == out and node.op_type in COMMUTATIVE:
        return b, a
    return (a, b) if _equal_at_run_time(a, b) else None


def _equal_at_run_time(a: Value, b: Value) -> list[tuple]:
    """The pairs of dims in which a and b differ, where every other dim is the same and each of
    those is symbolic on both sides (an FPN's `(h + 15) // 16` and `2 * ((h + 31) // 32)`): equal
    for every input the model takes (ONNX Runtime refuses the others) but where one is 1 (a
    broadcast), which the partition leaves to PyTorch (emit_binary: assume_equal). Empty where
    there is none such."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return []
    pairs = [(x, y) for x, y in zip(a.shape, b.shape) if x != y]
    if not pairs or any(not (is_symbolic(x) and is_symbolic(y)) for x, y in pairs):
        return []
    return pairs


def check_binary(node: Node) -> str | None:
    if len(node.inputs) != 2:
        return f"{len(node.inputs)} operands: oneDNN's binary takes two"
    # a scalar constant (an attention's 1/√d, GELU's 1) is held as [1, …, 1] (emit_binary)
    scalars = [i for i, v in enumerate(node.inputs) if v.const is not None and not v.shape and v.dtype == DType.FLOAT]
    why = dense(node, tuple(i for i in range(2) if i not in scalars))
    if why:
        return why
    ops = _binary_operands(node)
    if ops is None:
        return "the first operand broadcasts: oneDNN broadcasts the second only"
    return None


@native(*BINARY, check=check_binary, overwrites=lambda node: _binary_operands(node)[0])
def emit_binary(node: Node, p: PartitionSource) -> None:
    """oneDNN binary, the second operand broadcast, in place where the plan allows."""
    full, other = _binary_operands(node)
    if full.shape != node.outputs[0].shape:   # sizes that agree at run time
        for x, y in _equal_at_run_time(full, other):
            p.assume_equal(x, y)
    rank = full.rank
    b = p.ref(other) if other.const is None else \
        p.const(other.const.reshape((1,) * (rank - other.const.ndim) + other.const.shape), other.name)
    p.call("binary", p.out(node), p.ref(full), b, p.name(BINARY[node.op_type]), p.acts([]),
           p.in_place(node, full))


def check_batch_norm(node: Node) -> str | None:
    return first(dense(node), *(constant(node, i, "statistics") for i in range(1, 5)),
                 "training mode" if node.attr("training_mode", 0) else None,
                 None if node.inputs[0].rank in (2, 3, 4, 5) else "2-D to 5-D inputs only")


@native("BatchNormalization", check=check_batch_norm)
def emit_batch_norm(node: Node, p: PartitionSource) -> None:
    """oneDNN batch normalization with the model's statistics."""
    p.call("batch_norm", p.out(node), *(p.ref(node.inputs[i]) for i in range(5)),
           p.float(node.attr("epsilon", 1e-5)), p.acts([]))


# ---- reshapes, concat, transpose -------------------------------------------------------------

def check_view(node: Node) -> str | None:
    training = node.input(2) if node.op_type == "Dropout" else None
    if training is not None and (training.const is None or bool(training.const)):
        return "Dropout may be in training mode"
    x, y = node.inputs[0], node.outputs[0]
    why = dense_or_integers(node)
    if why:
        return why
    if product(x.shape) != product(y.shape) and not _squeezes_kept(node):
        # the sizes of a call contradict the model (static), or the view's sizes are not shown
        # equal (symbolic): PyTorch runs it (and names the error)
        return f"its input has {product(x.shape)} elements and its output {product(y.shape)}"
    return None


def _squeezes_kept(node: Node) -> bool:
    """A Squeeze whose output is its input's other dims: its squeezed dims are 1 for every size
    a call can have (symbolic ones: the shape rule refuses other sizes, sizes.py checks)."""
    axes = node.input(1).const if node.input(1) is not None else node.attr("axes")
    if node.op_type != "Squeeze" or axes is None:
        return False
    x, y = node.inputs[0].shape, node.outputs[0].shape
    drop = {int(a) % len(x) for a in np.asarray(axes).reshape(-1)}
    return tuple(d for i, d in enumerate(x) if i not in drop) == tuple(y)


@native("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", check=check_view,
        plain=(0,), tensors=(0,), view=True)
def emit_view(node: Node, p: PartitionSource) -> None:
    """The same bytes seen with another shape: no work (a copy only into a partition output)."""
    p.call("reshape", p.out(node), p.ref(node.inputs[0]))


def check_concat(node: Node) -> str | None:
    if node.outputs[0].dtype in INTEGERS:   # a quantized model's, one scale for all (rules/quantized.py)
        return first(_computed(node, *range(len(node.inputs))), dense(node, types=INTEGERS))
    return dense(node)


@native("Concat", check=check_concat)
def emit_concat(node: Node, p: PartitionSource) -> None:
    """oneDNN concat over the inputs' layouts."""
    axis = node.attr("axis") % node.outputs[0].rank
    p.call("concat", p.out(node), p.ids_of(p.ref(v) for v in node.inputs), axis)


@native("Transpose", check=lambda node: dense_or_integers(node), view=True)
def emit_transpose(node: Node, p: PartitionSource) -> None:
    """The input's bytes through permuted strides: a view, copied (one reorder) by the first
    reader that needs dense values; a reshape or a block of it is a view again."""
    rank = node.inputs[0].rank
    perm = node.attr("perm") or list(range(rank))[::-1]
    p.call("transpose", p.out(node), p.ref(node.inputs[0]), dims(perm))


def _block(node: Node) -> list[tuple[list[int], list[int]]] | None:
    """(offsets, sizes) in the input's rank of each output of a Gather by one constant index,
    a Slice with constant bounds and unit steps, or a Split: None for any other form."""
    x = node.inputs[0]
    shape = list(x.shape)
    if node.op_type == "Gather":
        idx = node.inputs[1].const
        if idx is None or idx.size != 1 or idx.ndim > 1:
            return None
        axis = node.attr("axis", 0) % len(shape)
        i = int(idx.reshape(-1)[0])
        i = i % shape[axis] if isinstance(shape[axis], int) else (add(shape[axis], i) if i < 0 else i)
        return [([i if a == axis else 0 for a in range(len(shape))],
                 [1 if a == axis else d for a, d in enumerate(shape)])]
    if node.op_type == "Slice" and node.input(1) is None:   # Slice-1: attributes, no steps
        starts, ends, axes = node.attr("starts"), node.attr("ends"), node.attr("axes")
    elif node.op_type == "Slice":
        inputs = [node.input(i) for i in range(1, 5)]
        if any(v is not None and v.const is None for v in inputs):
            return None
        starts, ends, axes, steps = (None if v is None else v.const.tolist() for v in inputs)
        if steps is not None and any(int(s) != 1 for s in steps):
            return None
    if node.op_type == "Slice":
        axes_ = list(range(len(starts))) if axes is None else [int(a) % len(shape) for a in axes]
        offsets, sizes = [0] * len(shape), list(shape)
        for a, b, e in zip(axes_, starts, ends):
            clamp = lambda i: int(max(min(i, 2**62), -2**62))   # noqa: E731 - INT64_MAX ends
            if isinstance(shape[a], int):
                lo, hi, _ = slice_bounds(shape[a], clamp(b), clamp(e), 1)
            else:
                lo, hi = symbolic_slice_bounds(shape[a], clamp(b), clamp(e))
            offsets[a], sizes[a] = lo, maximum(sub(hi, lo), 0)
        return [(offsets, sizes)]
    axis = node.attr("axis", 0) % len(shape)   # Split
    parts = [list(v.shape)[axis] for v in node.outputs]
    if any(p is None for p in parts):
        return None
    blocks, at = [], 0
    for n in parts:
        blocks.append(([at if a == axis else 0 for a in range(len(shape))],
                       [n if a == axis else d for a, d in enumerate(shape)]))
        at = add(at, n)
    return blocks


def check_block(node: Node) -> str | None:
    why = dense_or_integers(node, outputs=len(node.outputs) if node.op_type == "Split" else 1)
    if why:
        return why
    blocks = _block(node)
    if blocks is None:
        return f"{node.op_type} by indices or steps computed at run time, or not a single block"
    if any(0 in sizes for _, sizes in blocks):
        return "an empty block"
    return None


@native("Gather", "Slice", "Split", check=check_block, plain=(0,), tensors=(0,), view=True)
def emit_block(node: Node, p: PartitionSource) -> None:
    """One block of the input (Gather by one index, Slice, each Split part): a view of its bytes
    from the block's first value, dense where the block is (a leading-axis slice)."""
    for j, (offsets, sizes) in enumerate(_block(node)):
        p.call("slice", p.out(node, j), p.ref(node.inputs[0]), dims(offsets), dims(sizes))


def check_softmax(node: Node) -> str | None:
    rank = node.inputs[0].rank
    why = dense(node)
    if why:
        return why
    if opset_of(node) < 13 and node.attr("axis", 1) % rank != rank - 1:
        return "before opset 13 Softmax flattens from its axis; native runs the last axis only"
    return None


@native("Softmax", "LogSoftmax", check=check_softmax)
def emit_softmax(node: Node, p: PartitionSource) -> None:
    """oneDNN softmax over one axis."""
    rank = node.inputs[0].rank
    axis = node.attr("axis", -1 if opset_of(node) >= 13 else 1) % rank
    p.call("softmax", p.out(node), p.ref(node.inputs[0]), axis, node.op_type == "LogSoftmax")


# ---- matrix products -------------------------------------------------------------------------

def _gemm_attrs(node: Node) -> tuple[bool, bool, float, float]:
    if node.op_type == "Gemm":
        return bool(node.attr("transA", 0)), bool(node.attr("transB", 0)), \
            node.attr("alpha", 1.0), node.attr("beta", 1.0)
    return bool(node.attr("trans_a", 0)), bool(node.attr("trans_b", 0)), \
        node.attr("alpha", 1.0), node.attr("beta", 1.0)


def _is_linear(node: Node) -> bool:
    """Whether the node is a linear layer: a constant 2-D B, no transposed A, and no bias or a
    constant one along the last axis (what the checks ask, without touching the weight)."""
    trans_a, trans_b, _, _ = _gemm_attrs(node)
    b, c = node.inputs[1], node.input(2)
    if trans_a or b.const is None or b.rank != 2 or node.inputs[0].rank < 2:
        return False
    n = b.const.shape[0 if trans_b else 1]
    return c is None or (c.const is not None and c.const.size in (1, n) and
                         (c.const.size != n or c.const.shape[-1:] == (n,) or not c.const.ndim))


def _linear_weights(node: Node) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(W [K, N], bias [N]) with alpha and beta folded in, when the node is a linear layer
    (_is_linear); W is the model's own array where it needs no change (no copy of BERT's 85M
    weights per compile)."""
    if not _is_linear(node):
        return None
    _, trans_b, alpha, beta = _gemm_attrs(node)
    b, c = node.inputs[1], node.input(2)
    w = b.const.T if trans_b else b.const
    n = w.shape[1]
    bias = None if c is None else np.broadcast_to(c.const.reshape(-1), (n,)) * np.float32(beta)
    w = w if alpha == 1.0 else w * np.float32(alpha)
    # as it is stored, transposed or not: PartitionSource.const takes either without a copy
    return w if w.dtype == np.float32 else w.astype(np.float32), None if bias is None else bias.astype(np.float32)


def check_matmul(node: Node) -> str | None:
    why, r = dense(node, (0, 1, 2, 3)), node.input(3)
    if not why and r is not None and r.shape != node.outputs[0].shape:
        why = "the residual is not of the product's shape"
    if why or _is_linear(node):
        return why
    a, b, c = node.inputs[0], node.inputs[1], node.input(2)
    if a.rank < 2 or b.rank < 2:
        return "a 1-D operand"
    # oneDNN needs equal ranks: only a constant operand is reshaped to the other's rank
    if a.rank != b.rank and (a if a.rank < b.rank else b).const is None:
        return "the operands' ranks differ and the lower-rank one is computed at run time"
    if c is not None:
        out = node.outputs[0]
        if c.const is None and c.rank != out.rank:
            return "the bias's rank differs from the output's and it is computed at run time"
        if c.const is None and _gemm_attrs(node)[3] != 1.0:
            return "beta scales a bias computed at run time"
    return None


def _same_rank(p: PartitionSource, v: Value, rank: int) -> int:
    if v.rank == rank:
        return p.ref(v)
    return p.const(v.const.reshape((1,) * (rank - v.rank) + v.const.shape), v.name)


@native("MatMul", "Gemm", fused("FusedMatMul"), check=check_matmul, reduced=True)
def emit_matmul(node: Node, p: PartitionSource) -> None:
    """oneDNN matmul: a linear layer (constant B) on the weight reordered once, with bias,
    residual and activation as post-ops; else a batched product of two dense operands."""
    acts_ = node_acts(node) if node.domain else []
    residual = [p.ref(node.input(3))] if node.input(3) is not None else []
    linear = _linear_weights(node)
    if linear is not None:
        w, bias = linear
        p.call("linear", p.out(node), p.ref(node.inputs[0]), p.const(w, node.inputs[1].name),
               -1 if bias is None else p.const(bias, f"{node.name}_bias"), p.acts(acts_), *residual)
        return
    trans_a, trans_b, alpha, beta = _gemm_attrs(node)
    rank = node.outputs[0].rank
    a, b, c = node.inputs[0], node.inputs[1], node.input(2)
    cref = -1
    if c is not None:
        cref = p.const((c.const * np.float32(beta)).reshape((1,) * (rank - c.rank) + c.shape), c.name) \
            if c.const is not None else p.ref(c)
    p.call("matmul", p.out(node), _same_rank(p, a, rank), _same_rank(p, b, rank), cref,
           p.bool(trans_a), p.bool(trans_b), p.float(alpha), p.acts(acts_), *residual)


def check_pool_gemm(node: Node) -> str | None:
    why = first(dense(node), constant(node, 1, "weight"), constant(node, 2, "bias"),
                None if node.inputs[1].rank == 2 else "the weight is not 2-D")
    c = node.input(2)
    if why or c is None:
        return why
    outs = node.outputs[0].shape[-1]
    return None if c.const.size == 1 or c.const.shape[-1:] == (outs,) and c.const.size == outs else \
        "the bias varies along the batch"


@native(fused("PoolGemm"), check=check_pool_gemm, reduced=True)
def emit_pool_gemm(node: Node, p: PartitionSource) -> None:
    """Global average pooling into a dense temporary (summed by the gate that writes the input,
    where one does), then the linear layer."""
    x, w, c = node.inputs[0], node.inputs[1].const, node.input(2)
    n, ch = x.shape[:2]
    weight = (w.T if node.attr("transB", 0) else w) * np.float32(node.attr("alpha", 1.0))
    outs = weight.shape[1]
    pooled = p.temp([n, ch] + [1] * (x.rank - 2), plain=True)
    rows = p.temp([n, ch], plain=True)
    bias = -1 if c is None else p.const(
        np.broadcast_to(c.const.reshape(-1) * np.float32(node.attr("beta", 1.0)), (outs,)).astype(np.float32),
        c.name)
    k = list(x.shape[2:])
    zeros, ones = dims([0] * len(k)), dims([1] * len(k))
    if gated(x) is None:
        p.call("mean_in_gate", pooled, p.ref(x))
    else:
        p.call("pool", pooled, p.ref(x), p.name("Pool::AvgExcludePad"), dims(k), ones, ones, zeros, zeros)
    p.call("reshape", rows, pooled)
    p.call("linear", p.out(node), rows, p.const(np.ascontiguousarray(weight, np.float32), node.inputs[1].name),
           bias, p.acts([]))


# ---- normalization and attention -------------------------------------------------------------

def _norm_axis(node: Node) -> int:
    return node.attr("axis", -1) % node.inputs[0].rank


def check_layer_norm(node: Node) -> str | None:
    x, r = node.inputs[0], node.input(3)
    return first(dense(node), constant(node, 1, "scale"), constant(node, 2, "bias"),
                 None if r is None or same_where_nonempty(r.shape, x.shape) else "the residual broadcasts")


@native(fused("LayerNorm"), check=check_layer_norm, plain=(0, 3))
def emit_layer_norm(node: Node, p: PartitionSource) -> None:
    """Layer normalization over the trailing axes of x (+ the residual): the runtime's own row loop
    where the result is dense (runtime/layernorm.h), else oneDNN's binary add and layer
    normalization."""
    axis = _norm_axis(node)
    p.call("layer_norm", p.out(node), p.ref(node.inputs[0]), p.ref(node.input(1)),
           p.ref(node.input(2)), p.ref(node.input(3)), axis, p.float(node.attr("epsilon", 1e-5)))


def check_onnx_layer_norm(node: Node) -> str | None:
    why = first(dense(node, (0, 1, 2)), constant(node, 1, "scale"), constant(node, 2, "bias"))
    if why:
        return why
    x = node.inputs[0]
    normalized = product(x.shape[_norm_axis(node):])
    if any(v is not None and v.const.size != normalized for v in node.inputs[1:3]):
        return "the scale or bias broadcasts over the normalized axes"
    return None


@native("LayerNormalization", check=check_onnx_layer_norm, plain=(0,), tensors=(0,))
def emit_onnx_layer_norm(node: Node, p: PartitionSource) -> None:
    """ONNX's LayerNormalization (its Mean and InvStdDev outputs unused) as the fused LayerNorm."""
    p.call("layer_norm", p.out(node), p.ref(node.inputs[0]), p.ref(node.input(1)),
           p.ref(node.input(2)), -1, _norm_axis(node), p.float(node.attr("epsilon", 1e-5)))


def check_instance_norm(node: Node) -> str | None:
    return first(dense(node), constant(node, 1, "scale"), constant(node, 2, "bias"),
                 None if node.inputs[0].rank in (3, 4, 5) else "3-D to 5-D inputs only")


@native("InstanceNormalization", check=check_instance_norm, plain=(0,), tensors=(0,))
def emit_instance_norm(node: Node, p: PartitionSource) -> None:
    """Each (image, channel)'s values normalized as one row (the layer norm's row loop over the
    axes after the channel, into a dense temporary), then the per-channel scale and bias as a
    batch norm whose statistics change nothing (mean 0, variance 1, epsilon 0)."""
    x, scale, bias = node.inputs
    channels = x.shape[1]
    normed = p.temp(list(x.shape), plain=True)
    p.call("layer_norm", normed, p.ref(x), -1, -1, -1, 2, p.float(node.attr("epsilon", 1e-5)))
    p.call("batch_norm", p.out(node), normed, p.ref(scale), p.ref(bias),
           p.const(np.zeros(channels, np.float32), f"{node.name}_mean"),
           p.const(np.ones(channels, np.float32), f"{node.name}_variance"), p.float(0.0), p.acts([]))


def check_norm_matmul(node: Node) -> str | None:
    return first(dense(node), None if node.attr("norm") == "LayerNorm" else
                 f"{node.attr('norm')}: oneDNN 3.2 has no RMS normalization",
                 None if _is_linear(node) else "not a linear layer",
                 None if node.input(3) is None or node.input(3).shape == node.inputs[0].shape else
                 "the residual broadcasts")


@native(fused("NormMatMul"), check=check_norm_matmul, plain=(0, 3), reduced=True)
def emit_norm_matmul(node: Node, p: PartitionSource) -> None:
    """Layer norm without affine (the rule folded it into the weight) into a dense temporary,
    then the linear layer."""
    x = node.inputs[0]
    w, bias = _linear_weights(node)
    # the normed rows only the product reads: in bf16 when it runs in bf16
    normed = p.temp(list(x.shape), plain=True, bf16=p.plan.decisions[node].precision == "bf16")
    p.call("layer_norm", normed, p.ref(x), -1, -1, p.ref(node.input(3)), x.rank - 1,
           p.float(node.attr("epsilon", 1e-5)))
    p.call("linear", p.out(node), normed, p.const(w, node.inputs[1].name),
           -1 if bias is None else p.const(bias, f"{node.name}_bias"), p.acts(node_acts(node)))


def check_attention(node: Node) -> str | None:
    why = dense(node)
    if why:
        return why
    q, k, mask = node.inputs[0], node.inputs[1], node.input(3)
    if mask is None:
        return None
    scores = (*q.shape[:-1], k.shape[-2])
    if not mask_fits(mask.shape, scores):
        return "the mask grows the scores"
    if mask.const is None and mask.rank != q.rank:
        return "the mask's rank differs from the scores' and it is computed at run time"
    if node.attr("nan_to_zero", 0) and (mask.const is None or mask_dead_rows(mask.const)):
        return "a query row the mask rules out must give 0, which needs a check per call"
    return None


@native(fused("Attention"), check=check_attention, plain=(0, 1, 2, 3), reduced=True,
        reorders_output=True)
def emit_attention(node: Node, p: PartitionSource) -> None:
    """q·kᵀ with the scale and mask as post-ops, softmax, then ·v: three oneDNN primitives."""
    mask = node.input(3)
    m = -1 if mask is None else _same_rank(p, mask, node.inputs[0].rank)
    p.call("attention", p.out(node), p.ref(node.inputs[0]), p.ref(node.inputs[1]),
           p.ref(node.inputs[2]), m, p.float(node.attr("scale", 1.0)))


# ---- int8: a quantized model's integers (fusion/rules/quantized.py) --------------------------

def _scalar_constant(v: Value | None) -> bool:
    return v is None or (v.const is not None and v.const.size == 1)


def _per_tensor(node: Node, *inputs: int) -> str | None:
    for i in inputs:
        if not _scalar_constant(node.input(i)):
            return f"{node.input(i).name!r} is not one constant: the native int8 steps quantize per tensor"
    return None


def _computed(node: Node, *inputs: int) -> str | None:
    """A constant of integers is not held as such (the program's constants are f32)."""
    for i in inputs:
        if node.inputs[i].const is not None:
            return f"input {node.inputs[i].name!r} is a constant: a native int8 step reads computed integers"
    return None


def _scale(v: Value) -> float:
    return float(np.float32(v.const.reshape(-1)[0]))


def _zero_point(v: Value | None) -> int:
    return 0 if v is None else int(v.const.reshape(-1)[0])


def check_quantize(node: Node) -> str | None:
    return first(dense(node, (0,), output_types=INTEGERS), _per_tensor(node, 1, 2),
                 "blocked quantization" if node.attr("block_size", 0) else None,
                 "a narrower precision for the division" if node.attr("precision") else None)


@native("QuantizeLinear", check=check_quantize, tensors=(0,))
def emit_quantize(node: Node, p: PartitionSource) -> None:
    """The runtime's own loop: f32 to u8/s8, ONNX's rounding (half to even) and saturation, in
    the input's layout."""
    p.call("quantize", p.out(node), p.ref(node.inputs[0]), p.float(_scale(node.inputs[1])),
           _zero_point(node.input(2)))


def check_dequantize(node: Node) -> str | None:
    return first(_computed(node, 0),   # a weight: folded at level 1
                 dense(node, (0,), types=INTEGERS, output_types=FLOAT), _per_tensor(node, 1, 2),
                 "blocked quantization" if node.attr("block_size", 0) else None)


@native("DequantizeLinear", check=check_dequantize, tensors=(0,))
def emit_dequantize(node: Node, p: PartitionSource) -> None:
    """The runtime's own loop: u8/s8 to f32, in the input's layout."""
    p.call("dequantize", p.out(node), p.ref(node.inputs[0]), p.float(_scale(node.inputs[1])),
           _zero_point(node.input(2)))


def _int8_weight_problem(w: Value, w_scale: Value, w_zero_point: Value | None) -> str | None:
    """What oneDNN's int8 products ask of the CPU and the weight: VNNI, a constant of int8 with
    zero points of 0 (its int8 kernels take none for weights), its scales constant."""
    if not has_vnni():
        return "this CPU has no VNNI: oneDNN's int8 products would add in saturating 16-bit lanes"
    if w.dtype != DType.INT8 or w.const is None:
        return f"the weight {w.name!r} is not a constant of int8"
    if w_zero_point is not None and (w_zero_point.const is None or np.any(w_zero_point.const != 0)):
        return f"the weight's zero point {w_zero_point.name!r} is not 0: oneDNN's int8 kernels take none"
    if w_scale.const is None:
        return f"the weight's scale {w_scale.name!r} is not a constant"
    return None


def _int8_problem(node: Node) -> str | None:
    """What every int8 product asks: the weight as above, integer operands, activations quantized
    per tensor, a constant float bias."""
    out = INTEGERS if node.input(7) is not None else FLOAT   # no output scale: a float result
    return first(_int8_weight_problem(node.inputs[1], node.inputs[5], node.input(6)), _computed(node, 0),
                 dense(node, (0,), types=INTEGERS, output_types=out), _per_tensor(node, 3, 4, 7, 8),
                 constant(node, 2, "bias"))


def _weight_scales(node: Node, p: PartitionSource) -> int:
    return p.const(np.ascontiguousarray(node.inputs[5].const.reshape(-1), np.float32), node.inputs[5].name)


def _int8_quantization(node: Node, p: PartitionSource) -> tuple:
    """x's scale and zero point, the output's (a scale of 0: a float result)."""
    y_scale = node.input(7)
    return (p.float(_scale(node.inputs[3])), _zero_point(node.input(4)),
            p.float(0.0 if y_scale is None else _scale(y_scale)), _zero_point(node.input(8)))


def check_quantized_binary(node: Node) -> str | None:
    a, b = node.inputs[0], node.inputs[1]
    return first(_computed(node, 0, 1), dense(node, (0, 1), types=INTEGERS), _per_tensor(node, 2, 3, 4, 5, 6, 7),
                 None if a.shape == b.shape or per_channel_of(a, b) else
                 "its operands' shapes differ other than as a value per channel: the int8 step does not broadcast",
                 None if node.attr("activation", "") in ("", "Relu", "Clip") else "an activation other than a clamp")


@native(fused("QuantizedAdd"), fused("QuantizedMul"), check=check_quantized_binary, tensors=(0, 1))
def emit_quantized_binary(node: Node, p: PartitionSource) -> None:
    """The runtime's own loop: both sides dequantized, added or multiplied, clamped (ReLU, Clip)
    and quantized in one pass over the integers, each step in f32 as the Q/DQ graph takes it."""
    name, (_, params) = node.attr("activation", ""), activation(node)
    low, high = {"": (-math.inf, math.inf), "Relu": (0.0, math.inf)}.get(name) or tuple(params)   # Clip's (min, max)
    p.call("qbinary", p.out(node), p.ref(node.inputs[0]), p.ref(node.inputs[1]),
           p.name(f"Bin::{node.op_type.removeprefix('Quantized')}"),
           p.float(_scale(node.inputs[2])), _zero_point(node.input(3)), p.float(_scale(node.inputs[4])),
           _zero_point(node.input(5)), p.float(_scale(node.inputs[6])), _zero_point(node.input(7)),
           p.float(low), p.float(high))


def check_quantized_activation(node: Node) -> str | None:
    return first(_computed(node, 0), dense(node, (0,), types=INTEGERS), _per_tensor(node, *range(1, len(node.inputs))))


@native(fused("QuantizedActivation"), fused("QuantizedGatedActivation"), check=check_quantized_activation,
        tensors=(0,))
def emit_quantized_activation(node: Node, p: PartitionSource) -> None:
    """A table of the function's 256 results, computed here by the node's own PyTorch kernel over
    every input (so the two agree exactly), read by the runtime's own loop."""
    x = node.inputs[0]
    info = np.iinfo(x.dtype.numpy)
    codes = torch.arange(info.min, info.max + 1).to(getattr(torch, x.dtype.numpy.name))   # the table's order
    run = torch_impl(node).build(node)
    table = run(codes, *(None if v is None else torch.from_numpy(np.asarray(v.const)) for v in node.inputs[1:]))
    p.call("lookup", p.out(node), p.ref(x), p.const(table.numpy().astype(np.float32), f"{node.name}_table"))


def check_quantized_conv(node: Node) -> str | None:
    return first(_int8_problem(node), None if node.inputs[0].rank in (3, 4, 5) else "1-D to 3-D convolutions only")


@native(fused("QuantizedConv"), check=check_quantized_conv)
def emit_quantized_conv(node: Node, p: PartitionSource) -> None:
    """oneDNN's int8 convolution (VNNI here): u8/s8 activations with their zero point, s8 weights
    with a scale per tensor or output channel, s32 sums, the bias and activation, requantized."""
    nd = node.inputs[1].rank - 2
    pads = _conv_pads(node)
    p.call("qconv", p.out(node), p.ref(node.inputs[0]), p.ref(node.inputs[1]), p.ref(node.input(2)),
           dims(node.attr("strides") or [1] * nd), dims(node.attr("dilations") or [1] * nd),
           dims(pads[:nd]), dims(pads[nd:]), node.attr("group", 1), p.acts(node_acts(node)),
           _weight_scales(node, p), *_int8_quantization(node, p))


def check_quantized_conv_transpose(node: Node) -> str | None:
    pads = _conv_transpose_pads(node)
    return first(_int8_problem(node), None if node.inputs[0].rank in (3, 4, 5) else "1-D to 3-D only",
                 pads if isinstance(pads, str) else None)


@native(fused("QuantizedConvTranspose"), check=check_quantized_conv_transpose)
def emit_quantized_conv_transpose(node: Node, p: PartitionSource) -> None:
    """oneDNN's int8 deconvolution: as the int8 convolution, the weight held as ONNX holds it."""
    nd = node.inputs[1].rank - 2
    begin, end = _conv_transpose_pads(node)
    p.call("qdeconv", p.out(node), p.ref(node.inputs[0]), p.ref(node.inputs[1]), p.ref(node.input(2)),
           dims(node.attr("strides") or [1] * nd), dims(node.attr("dilations") or [1] * nd), dims(begin), dims(end),
           node.attr("group", 1), p.acts(node_acts(node)), _weight_scales(node, p), *_int8_quantization(node, p))


def check_quantized_matmul(node: Node) -> str | None:
    return first(_int8_problem(node), None if node.inputs[1].rank == 2 else "the weight is not 2-D")


@native(fused("QuantizedMatMul"), check=check_quantized_matmul, plain=(0,))
def emit_quantized_matmul(node: Node, p: PartitionSource) -> None:
    """oneDNN's int8 matmul over the input's rows: as the convolution, the weight's scales per
    column."""
    p.call("qmatmul", p.out(node), p.ref(node.inputs[0]), p.ref(node.inputs[1]), p.ref(node.input(2)),
           p.bool(node.attr("trans_b", 0)), p.acts(node_acts(node)), _weight_scales(node, p),
           *_int8_quantization(node, p))


def check_dynamic_quantized_matmul(node: Node) -> str | None:
    """A float32 input, a constant 2-D int8 weight with zero point 0 and constant scales."""
    w = node.inputs[1]
    return first(_int8_weight_problem(w, node.inputs[2], node.input(3)),
                 None if w.rank == 2 else f"the weight {w.name!r} is not 2-D", dense(node, (0,)))


@native(fused("DynamicQuantizedMatMul"), check=check_dynamic_quantized_matmul, plain=(0,))
def emit_dynamic_quantized_matmul(node: Node, p: PartitionSource) -> None:
    """The input quantized to uint8 over its range on each call (the runtime's own loop), then
    oneDNN's int8 matmul with that zero point and the scales' product as its run-time scales."""
    x = node.inputs[0]
    scales = node.inputs[2].const.reshape(-1)
    p.call("dynamic_qmatmul", p.out(node), p.ref(x), p.temp(list(x.shape), plain=True, dtype=DType.UINT8),
           p.ref(node.inputs[1]), p.const(np.ascontiguousarray(scales, np.float32), node.inputs[2].name))
