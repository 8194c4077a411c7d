"""Core-ATen operators → the op table's ONNX operators: one lowering per ATen op, and the
patterns that undo what the core-ATen decompositions take apart.

A lowering reads the node's arguments by schema name (`bind`), writes IR nodes with `imp.op`
(a GraphBuilder named after the FX node) and returns the node's value(s). It raises Unmapped
with a reason for a form it cannot say in ONNX; the node then runs as a TorchCall of itself.
Element types follow PyTorch's promotion: the trace recorded each result's dtype, and operands
are cast to it (comparisons: to the operands' common type).

Patterns (matched before lowering, from the node that ends them):

    linear        view(addmm(c, view(x, [-1, K]), W), [..., N])   →  MatMul(x, W) + c
                  (nn.Linear on a rank-3+ input, as ONNX exporters write it)
    batched mm    view(bmm(view(expand(a)), view(expand(b))), [..., M, N])  →  MatMul(a, b)
                  (torch.matmul / @ on rank-4 attention operands)
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import fx

from ..ir import Value
from ..ir.dtypes import numpy_dtype_of_torch
from .fx_values import INT64_MAX, Unmapped, bind, dtype_of, ir_dim, meta_of
from .fx_writer import FxWriter, Lowering

aten = torch.ops.aten
LOWERINGS: dict[Any, Lowering] = {}


def lowers(*targets):
    def deco(fn: Lowering) -> Lowering:
        for t in targets:
            LOWERINGS[t] = fn
        return fn
    return deco


def out_dtype(node: fx.Node) -> torch.dtype:
    val = meta_of(node)
    return (val[0] if isinstance(val, (tuple, list)) else val).dtype


def rank(x) -> int:
    return meta_of(x).dim()


def axis(d: int, r: int) -> int:
    return d + r if d < 0 else d


def only_first_output_used(node: fx.Node, what: str) -> None:
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            if user.users or user.target is not operator.getitem:
                raise Unmapped(f"its {what} output is used")


# ---- elementwise ----------------------------------------------------------------------------

UNARY = {aten.relu.default: "Relu", aten.sigmoid.default: "Sigmoid", aten.tanh.default: "Tanh",
         aten.exp.default: "Exp", aten.log.default: "Log", aten.sqrt.default: "Sqrt",
         aten.neg.default: "Neg", aten.abs.default: "Abs", aten.floor.default: "Floor",
         aten.ceil.default: "Ceil", aten.round.default: "Round", aten.sin.default: "Sin",
         aten.cos.default: "Cos", aten.tan.default: "Tan", aten.erf.default: "Erf",
         aten.reciprocal.default: "Reciprocal", aten.sign.default: "Sign",
         aten.hardswish.default: "HardSwish", aten.mish.default: "Mish",
         aten.logical_not.default: "Not", aten.isnan.default: "IsNaN",
         aten.asin.default: "Asin", aten.acos.default: "Acos", aten.atan.default: "Atan",
         aten.sinh.default: "Sinh", aten.cosh.default: "Cosh"}


def unary(onnx_op: str) -> Lowering:
    def lower(imp: FxWriter, node: fx.Node):
        x = node.args[0]
        dtype = torch.bool if onnx_op == "Not" else meta_of(x).dtype
        return getattr(imp.op, onnx_op)(imp.cast(imp.value(x), dtype))
    return lower


for _target, _op in UNARY.items():
    LOWERINGS[_target] = unary(_op)


@lowers(aten.rsqrt.default)
def _rsqrt(imp, node):   # as exporters write it: 1 / sqrt(x)
    x = imp.value(node.args[0])
    return imp.op.Div(imp.scalar(1.0, out_dtype(node)), imp.op.Sqrt(x))


@lowers(aten.silu.default)
def _silu(imp, node):
    x = imp.value(node.args[0])
    return imp.op.Mul(x, imp.op.Sigmoid(x))


@lowers(aten.gelu.default)
def _gelu(imp, node):
    return imp.op.Gelu(imp.value(node.args[0]), approximate=bind(node)["approximate"])


@lowers(aten.hardsigmoid.default)
def _hardsigmoid(imp, node):
    return imp.op.HardSigmoid(imp.value(node.args[0]), alpha=1.0 / 6, beta=0.5)


@lowers(aten.leaky_relu.default)
def _leaky_relu(imp, node):
    return imp.op.LeakyRelu(imp.value(node.args[0]), alpha=float(bind(node)["negative_slope"]))


@lowers(aten.elu.default)
def _elu(imp, node):
    a = bind(node)
    if a["scale"] != 1 or a["input_scale"] != 1:
        raise Unmapped("ELU with scale or input_scale other than 1")
    return imp.op.Elu(imp.value(a["self"]), alpha=float(a["alpha"]))


@lowers(aten.softplus.default)
def _softplus(imp, node):
    a = bind(node)
    if a["beta"] != 1:
        raise Unmapped(f"softplus with beta={a['beta']}")
    return imp.op.Softplus(imp.value(a["self"]))


def _clip(imp, node, x, lo, hi):
    dtype = out_dtype(node)
    bound = lambda v: None if v is None else imp.operand(v, dtype)  # noqa: E731
    return imp.op.Clip(imp.cast(imp.value(x), dtype), bound(lo), bound(hi))


@lowers(aten.clamp.default)
def _clamp(imp, node):
    a = bind(node)
    return _clip(imp, node, a["self"], a["min"], a["max"])


@lowers(aten.hardtanh.default)
def _hardtanh(imp, node):
    a = bind(node)
    return _clip(imp, node, a["self"], a["min_val"], a["max_val"])


BINARY = {aten.add.Tensor: "Add", aten.add.Scalar: "Add", aten.sub.Tensor: "Sub",
          aten.sub.Scalar: "Sub", aten.mul.Tensor: "Mul", aten.mul.Scalar: "Mul",
          aten.div.Tensor: "Div", aten.div.Scalar: "Div", aten.maximum.default: "Max",
          aten.minimum.default: "Min", aten.pow.Tensor_Scalar: "Pow",
          aten.pow.Tensor_Tensor: "Pow", aten.pow.Scalar: "Pow"}
COMPARE = {aten.eq.Tensor: "Equal", aten.eq.Scalar: "Equal", aten.lt.Tensor: "Less",
           aten.lt.Scalar: "Less", aten.gt.Tensor: "Greater", aten.gt.Scalar: "Greater",
           aten.le.Tensor: "LessOrEqual", aten.le.Scalar: "LessOrEqual",
           aten.ge.Tensor: "GreaterOrEqual", aten.ge.Scalar: "GreaterOrEqual",
           aten.ne.Tensor: "Equal", aten.ne.Scalar: "Equal",
           aten.logical_and.default: "And", aten.logical_or.default: "Or",
           aten.logical_xor.default: "Xor"}


def common_dtype(*args) -> torch.dtype:
    """PyTorch's promotion of the operands (a dimensioned tensor outranks a 0-d one and a number)."""
    def stand_in(x):
        val = meta_of(x)
        if isinstance(val, torch.Tensor):
            return torch.empty(() if val.dim() == 0 else (1,), dtype=val.dtype)
        return val if isinstance(val, (int, float, bool)) else 0
    first, *rest = map(stand_in, args)
    dtype = first.dtype if isinstance(first, torch.Tensor) else torch.tensor(first).dtype
    acc = torch.empty((1,), dtype=dtype) if isinstance(first, torch.Tensor) and first.dim() else first
    for x in rest:
        acc = torch.empty((1,) if (isinstance(acc, torch.Tensor) and acc.dim()) or
                          (isinstance(x, torch.Tensor) and x.dim()) else (),
                          dtype=torch.result_type(acc, x))
    return acc.dtype if isinstance(acc, torch.Tensor) else torch.tensor(acc).dtype


def binary(onnx_op: str) -> Lowering:
    def lower(imp: FxWriter, node: fx.Node):
        x, y = node.args[0], node.args[1]
        dtype = out_dtype(node)
        if onnx_op == "Div" and bind(node).get("rounding_mode") is not None:
            raise Unmapped("division with a rounding mode")
        a, b = imp.operand(x, dtype), imp.operand(y, dtype)
        alpha = bind(node).get("alpha", 1)
        if alpha is not None and alpha != 1:
            b = imp.op.Mul(b, imp.scalar(alpha, dtype))
        return getattr(imp.op, onnx_op)(a, b)
    return lower


def compare(onnx_op: str, negate: bool) -> Lowering:
    def lower(imp: FxWriter, node: fx.Node):
        x, y = node.args[0], node.args[1]
        dtype = torch.bool if onnx_op in ("And", "Or", "Xor") else common_dtype(x, y)
        out = getattr(imp.op, onnx_op)(imp.operand(x, dtype), imp.operand(y, dtype))
        return imp.op.Not(out) if negate else out
    return lower


for _target, _op in BINARY.items():
    LOWERINGS[_target] = binary(_op)
for _target, _op in COMPARE.items():
    LOWERINGS[_target] = compare(_op, _target in (aten.ne.Tensor, aten.ne.Scalar))


def bitwise(logical: str, bitwise_op: str) -> Lowering:
    """And/Or/Xor on bools (the masks transformers builds), BitwiseAnd/… on integers."""
    def lower(imp: FxWriter, node: fx.Node):
        dtype = out_dtype(node)
        if dtype.is_floating_point:
            raise Unmapped("bitwise ops on floats")
        op = logical if dtype == torch.bool else bitwise_op
        return getattr(imp.op, op)(imp.operand(node.args[0], dtype), imp.operand(node.args[1], dtype))
    return lower


for _target, (_logical, _bitwise) in {
        aten.bitwise_and.Tensor: ("And", "BitwiseAnd"), aten.bitwise_or.Tensor: ("Or", "BitwiseOr"),
        aten.bitwise_xor.Tensor: ("Xor", "BitwiseXor"), aten.bitwise_and.Scalar: ("And", "BitwiseAnd"),
        aten.bitwise_or.Scalar: ("Or", "BitwiseOr")}.items():
    LOWERINGS[_target] = bitwise(_logical, _bitwise)


@lowers(aten.where.self)
def _where(imp, node):
    cond, x, y = node.args
    dtype = out_dtype(node)
    return imp.op.Where(imp.cast(imp.value(cond), torch.bool), imp.operand(x, dtype), imp.operand(y, dtype))


# ---- copies, casts and constants ------------------------------------------------------------

@lowers(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default,
        aten.contiguous.default)
def _same_value(imp, node):   # the IR is functional: a copy is the value itself
    return imp.value(node.args[0])


@lowers(aten.copy.default)
def _copy(imp, node):
    """copy(self, src): src in self's dtype, broadcast to self's shape (functionalized in-place ops)."""
    a = bind(node)
    value = imp.cast(imp.value(a["src"]), out_dtype(node))
    if imp.dims(a["src"]) == imp.dims(a["self"]):
        return value
    return imp.op.Expand(value, imp.ints(list(meta_of(a["self"]).shape)))


@lowers(aten._to_copy.default)
def _to_copy(imp, node):
    a = bind(node)
    device = a.get("device")
    if device is not None and torch.device(device).type != "cpu":
        raise Unmapped(f"a copy to {device}")
    return imp.cast(imp.value(a["self"]), out_dtype(node))


@lowers(aten.scalar_tensor.default)
def _scalar_tensor(imp, node):
    return imp.scalar(meta_of(node.args[0]), out_dtype(node))


def _filled(imp, node, sizes, fill):
    dtype = out_dtype(node)
    fill = meta_of(fill)
    if not isinstance(fill, (int, float, bool)):
        raise Unmapped("a fill value computed at run time")
    if all(isinstance(s, int) for s in map(meta_of, sizes)):
        return imp.const(np.full([meta_of(s) for s in sizes], fill, numpy_dtype_of_torch(dtype)), dtype_of(dtype, "full"))
    return imp.op.ConstantOfShape(imp.ints(sizes), value=np.array([fill], numpy_dtype_of_torch(dtype)))


@lowers(aten.full.default)
def _full(imp, node):
    return _filled(imp, node, node.args[0], node.args[1])


@lowers(aten.full_like.default)
def _full_like(imp, node):
    return _filled(imp, node, list(meta_of(node.args[0]).shape), node.args[1])


@lowers(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(imp, node):
    a = bind(node)
    start, end, step = ((0, a["end"], 1) if node.target == aten.arange.default
                        else (a["start"], a["end"], a.get("step", 1)))
    dtype = out_dtype(node)
    values = [meta_of(v) for v in (start, end, step)]
    if all(isinstance(v, (int, float)) for v in values):
        return imp.const(np.arange(*values).astype(numpy_dtype_of_torch(dtype)), dtype_of(dtype, "arange"))
    return imp.op.Range(*(imp.operand(v, dtype) for v in (start, end, step)))


# ---- shapes ---------------------------------------------------------------------------------

def _reshape(imp, node, x) -> Value:
    """x in the node's output shape: Flatten, or a Reshape whose target copies (0) the dims it
    shares with x in place, infers (-1) one other symbolic dim, and computes the rest."""
    src, target = imp.dims(x), imp.dims(node)
    value = imp.value(x)
    if src == target:
        return value
    if len(target) == 2 and len(src) > 2 and target[0] == src[0]:
        return imp.op.Flatten(value, axis=1)
    if 0 in target:
        return imp.op.Reshape(value, imp.ints(list(meta_of(node).shape)), allowzero=1)
    entries: list = [0 if i < len(src) and isinstance(d, str) and d == src[i] else d
                     for i, d in enumerate(target)]
    symbolic = [i for i, d in enumerate(entries) if isinstance(d, str)]
    if len(symbolic) == 1:
        entries[symbolic[0]] = -1
    if all(isinstance(d, int) for d in entries):
        return imp.op.Reshape(value, imp.const(np.array(entries, np.int64), hint="shape"))
    return imp.op.Reshape(value, imp.ints(list(meta_of(node).shape)))


@lowers(aten.view.default, aten._unsafe_view.default, aten.view_copy.default, aten.reshape.default)
def _view(imp, node):
    return _reshape(imp, node, node.args[0])


@lowers(aten.permute.default, aten.permute_copy.default)
def _permute(imp, node):
    x, dims = node.args[0], node.args[1]
    r = rank(x)
    perm = [axis(d, r) for d in dims]
    if perm == list(range(r)):
        return imp.value(x)
    return imp.op.Transpose(imp.value(x), perm=perm)


@lowers(aten.expand.default, aten.expand_copy.default)
def _expand(imp, node):
    x = node.args[0]
    src, target = imp.dims(x), imp.dims(node)
    if src == target:
        return imp.value(x)
    offset = len(target) - len(src)
    sizes = list(meta_of(node).shape)
    entries = [1 if i >= offset and src[i - offset] == d else sizes[i] for i, d in enumerate(target)]
    return imp.op.Expand(imp.value(x), imp.ints(entries))


@lowers(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def _unsqueeze(imp, node):
    x, dim = node.args
    return imp.op.Unsqueeze(imp.value(x), imp.const(np.array([axis(dim, rank(x) + 1)], np.int64), hint="axes"))


@lowers(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.squeeze_copy.dim,
        aten.squeeze_copy.dims)
def _squeeze(imp, node):
    x = node.args[0]
    dims = imp.dims(x)
    wanted = node.args[1] if len(node.args) > 1 else list(range(len(dims)))
    wanted = [wanted] if isinstance(wanted, int) else wanted
    axes = sorted({axis(d, len(dims)) for d in wanted if dims[axis(d, len(dims))] == 1})
    if not axes:
        return imp.value(x)
    return imp.op.Squeeze(imp.value(x), imp.const(np.array(axes, np.int64), hint="axes"))


@lowers(aten.cat.default)
def _cat(imp, node):
    a = bind(node)
    dtype = out_dtype(node)
    r = meta_of(node).dim()
    parts = [t for t in a["tensors"] if not (meta_of(t).dim() == 1 and meta_of(t).shape[0] == 0 and r != 1)]
    return imp.op.Concat(*(imp.cast(imp.value(t), dtype) for t in parts), axis=axis(a["dim"], r))


@lowers(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(imp, node):
    a = bind(node)
    x, dim = a["self"], axis(a["dim"], rank(a["self"]))
    start = 0 if a["start"] is None else a["start"]
    end = INT64_MAX if a["end"] is None else a["end"]
    step = a["step"]
    size = imp.dims(x)[dim]
    whole_end = (isinstance(meta_of(end), int) and isinstance(size, int) and meta_of(end) >= size) or \
        meta_of(end) == INT64_MAX or (not isinstance(meta_of(end), int) and ir_dim(meta_of(end)) == size)
    if meta_of(start) == 0 and step == 1 and whole_end:
        return imp.value(x)
    return imp.op.Slice(imp.value(x), imp.ints([start]), imp.ints([min(meta_of(end), INT64_MAX)
                                                                    if isinstance(meta_of(end), int) else end]),
                        imp.const(np.array([dim], np.int64), hint="axes"),
                        imp.const(np.array([step], np.int64), hint="steps"))


@lowers(aten.select.int, aten.select_copy.int)
def _select(imp, node):
    x, dim, index = node.args
    return imp.op.Gather(imp.value(x), imp.index(index), axis=axis(dim, rank(x)))


@lowers(aten.split_with_sizes.default, aten.split_with_sizes_copy.default)
def _split(imp, node):
    a = bind(node)
    sizes = a["split_sizes"]
    outs = imp.op.Split(imp.value(a["self"]), imp.ints(sizes), axis=axis(a["dim"], rank(a["self"])),
                        _outputs=len(sizes))
    return outs if isinstance(outs, tuple) else (outs,)


@lowers(aten.index_select.default)
def _index_select(imp, node):
    x, dim, index = node.args
    return imp.op.Gather(imp.value(x), imp.value(index), axis=axis(dim, rank(x)))


@lowers(aten.embedding.default)
def _embedding(imp, node):
    weight, indices = node.args[0], node.args[1]
    return imp.op.Gather(imp.value(weight), imp.value(indices), axis=0)


@lowers(aten.index.Tensor)
def _index(imp, node):
    x, indices = node.args
    used = [(k, i) for k, i in enumerate(indices) if i is not None]
    if len(used) != 1 or meta_of(used[0][1]).dtype not in (torch.int64, torch.int32):
        raise Unmapped("indexing with more than one index tensor, or a boolean mask")
    k, index = used[0]
    return imp.op.Gather(imp.value(x), imp.value(index), axis=k)


@lowers(aten.gather.default)
def _gather(imp, node):
    a = bind(node)
    return imp.op.GatherElements(imp.value(a["self"]), imp.value(a["index"]), axis=axis(a["dim"], rank(a["self"])))


@lowers(aten.constant_pad_nd.default)
def _pad(imp, node):
    a = bind(node)
    x, pad = a["self"], [meta_of(p) for p in a["pad"]]
    if not all(isinstance(p, int) for p in pad):
        raise Unmapped("padding computed at run time")
    r = rank(x)
    begins, ends = [0] * r, [0] * r
    for k in range(len(pad) // 2):   # torch pads the last axis first
        begins[r - 1 - k], ends[r - 1 - k] = pad[2 * k], pad[2 * k + 1]
    dtype = out_dtype(node)
    return imp.op.Pad(imp.value(x), imp.const(np.array(begins + ends, np.int64), hint="pads"),
                      imp.scalar(a["value"], dtype), mode="constant")


@lowers(aten.tril.default, aten.triu.default)
def _trilu(imp, node):
    a = bind(node)
    return imp.op.Trilu(imp.value(a["self"]), imp.index(a["diagonal"]),
                        upper=int(node.target == aten.triu.default))


# ---- reductions -----------------------------------------------------------------------------

def _axes(imp, x, dims) -> Value | None:
    r = rank(x)
    if dims is None or len(dims) == 0:
        return None
    return imp.const(np.array(sorted(axis(d, r) for d in dims), np.int64), hint="axes")


def reduction(onnx_op: str) -> Lowering:
    def lower(imp: FxWriter, node: fx.Node):
        a = bind(node)
        x = a["self"]
        dims = a.get("dim")
        dims = [dims] if isinstance(dims, int) else dims
        r = rank(x)
        if onnx_op == "ReduceMean" and a.get("keepdim") and r >= 3 and dims is not None and \
                sorted(axis(d, r) for d in dims) == list(range(2, r)):
            return imp.op.GlobalAveragePool(imp.cast(imp.value(x), out_dtype(node)))
        value = imp.cast(imp.value(x), out_dtype(node))
        return getattr(imp.op, onnx_op)(value, _axes(imp, x, dims), keepdims=int(bool(a.get("keepdim", False))))
    return lower


for _target, _op in {aten.mean.dim: "ReduceMean", aten.sum.dim_IntList: "ReduceSum",
                     aten.sum.default: "ReduceSum", aten.amax.default: "ReduceMax",
                     aten.amin.default: "ReduceMin", aten.mean.default: "ReduceMean"}.items():
    LOWERINGS[_target] = reduction(_op)


@lowers(aten.argmax.default, aten.argmin.default)
def _argmax(imp, node):
    a = bind(node)
    op = "ArgMax" if node.target == aten.argmax.default else "ArgMin"
    if a["dim"] is None:
        if a["keepdim"]:
            raise Unmapped("argmax over all axes keeping them")
        flat = imp.op.Reshape(imp.value(a["self"]), imp.const(np.array([-1], np.int64), hint="shape"))
        return getattr(imp.op, op)(flat, axis=0, keepdims=0)
    return getattr(imp.op, op)(imp.value(a["self"]), axis=axis(a["dim"], rank(a["self"])),
                               keepdims=int(a["keepdim"]))


@lowers(aten._softmax.default, aten._log_softmax.default)
def _softmax(imp, node):
    x, dim = node.args[0], node.args[1]
    op = "Softmax" if node.target == aten._softmax.default else "LogSoftmax"
    return getattr(imp.op, op)(imp.value(x), axis=axis(dim, rank(x)))


def _ones(imp, shape, dtype, fill=1.0) -> Value:
    return imp.const(np.full(shape, fill, numpy_dtype_of_torch(dtype)), dtype_of(dtype, "norm"), "ones" if fill else "zeros")


@lowers(aten.native_layer_norm.default)
def _layer_norm(imp, node):
    only_first_output_used(node, "mean or rstd")
    a = bind(node)
    x, shape = a["input"], [int(s) for s in a["normalized_shape"]]
    dtype = meta_of(x).dtype
    scale = imp.value(a["weight"]) if a["weight"] is not None else _ones(imp, shape, dtype)
    bias = imp.value(a["bias"]) if a["bias"] is not None else _ones(imp, shape, dtype, 0.0)
    y = imp.op.LayerNormalization(imp.value(x), scale, bias, axis=-len(shape), epsilon=float(a["eps"]))
    return (y, None, None)


def _batch_norm(imp, node, a):
    only_first_output_used(node, "saved statistics")
    x = a["input"]
    channels = meta_of(x).shape[1]
    if not isinstance(channels, int):
        raise Unmapped("a symbolic channel count")
    dtype = meta_of(x).dtype
    scale = imp.value(a["weight"]) if a["weight"] is not None else _ones(imp, [channels], dtype)
    bias = imp.value(a["bias"]) if a["bias"] is not None else _ones(imp, [channels], dtype, 0.0)
    y = imp.op.BatchNormalization(imp.value(x), scale, bias, imp.value(a["running_mean"]),
                                  imp.value(a["running_var"]), epsilon=float(a["eps"]))
    return (y, None, None)


@lowers(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_inference(imp, node):
    return _batch_norm(imp, node, bind(node))


@lowers(aten.native_batch_norm.default)
def _native_batch_norm(imp, node):
    a = bind(node)
    if a["training"]:
        raise Unmapped("batch norm in training mode (call .eval())")
    return _batch_norm(imp, node, a)


# ---- convolution, pooling, products ---------------------------------------------------------

@lowers(aten.convolution.default)
def _convolution(imp, node):
    a = bind(node)
    w = meta_of(a["weight"])
    kernel = [ir_dim(d) for d in w.shape[2:]]
    if not all(isinstance(k, int) for k in kernel):
        raise Unmapped("a symbolic kernel size")
    nd = len(kernel)
    pads = [int(p) for p in a["padding"]] * (2 if len(a["padding"]) == nd else 1)
    if len(pads) != 2 * nd:
        pads = [int(a["padding"][0])] * 2 * nd
    attrs = dict(kernel_shape=kernel, strides=[int(s) for s in a["stride"]] or [1] * nd, pads=pads,
                 dilations=[int(d) for d in a["dilation"]] or [1] * nd, group=int(a["groups"]))
    bias = imp.value(a["bias"]) if a["bias"] is not None else None
    x, weight = imp.value(a["input"]), imp.value(a["weight"])
    if a["transposed"]:
        return imp.op.ConvTranspose(x, weight, bias, output_padding=[int(p) for p in a["output_padding"]], **attrs)
    return imp.op.Conv(x, weight, bias, **attrs)


def _window(a, nd: int) -> dict:
    kernel = [int(k) for k in a["kernel_size"]] * (nd if len(a["kernel_size"]) == 1 else 1)
    stride = [int(s) for s in a["stride"]] or kernel
    stride = stride * (nd if len(stride) == 1 else 1)
    padding = [int(p) for p in a["padding"]] if isinstance(a["padding"], (list, tuple)) else [int(a["padding"])]
    padding = padding * (nd if len(padding) == 1 else 1)
    return dict(kernel_shape=kernel, strides=stride, pads=padding * 2, ceil_mode=int(bool(a["ceil_mode"])))


@lowers(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool(imp, node):
    only_first_output_used(node, "indices")
    a = bind(node)
    nd = rank(a["self"]) - 2
    dilation = [int(d) for d in a["dilation"]] if isinstance(a["dilation"], (list, tuple)) else [int(a["dilation"])]
    attrs = _window(a, nd)
    attrs["dilations"] = dilation * (nd if len(dilation) == 1 else 1)
    return (imp.op.MaxPool(imp.value(a["self"]), **attrs), None)


@lowers(aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(imp, node):
    a = bind(node)
    if a["divisor_override"] is not None:
        raise Unmapped("average pooling with divisor_override")
    attrs = _window(a, rank(a["self"]) - 2)
    return imp.op.AveragePool(imp.value(a["self"]), count_include_pad=int(bool(a["count_include_pad"])), **attrs)


@lowers(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool(imp, node):
    x, size = node.args[0], [int(s) for s in node.args[1]]
    spatial = imp.dims(x)[2:]
    if all(s == 1 for s in size):
        return imp.op.GlobalAveragePool(imp.value(x))
    if not all(isinstance(d, int) and d % s == 0 for d, s in zip(spatial, size)):
        raise Unmapped(f"adaptive pooling of {spatial} to {size} is not one window size")
    kernel = [d // s for d, s in zip(spatial, size)]
    return imp.op.AveragePool(imp.value(x), kernel_shape=kernel, strides=kernel)


def _transposed_2d(x) -> fx.Node | None:
    """The matrix a 2-D operand is the transpose of (permute [1, 0]), else None."""
    if isinstance(x, fx.Node) and x.target in (aten.permute.default, aten.permute_copy.default) \
            and list(x.args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0]) and rank(x) == 2:
        return x.args[0]
    return None


@lowers(aten.addmm.default)
def _addmm(imp, node):
    a = bind(node)
    b, trans_b = a["mat2"], 0
    if (w := _transposed_2d(b)) is not None:
        b, trans_b = w, 1
    return imp.op.Gemm(imp.value(a["mat1"]), imp.value(b), imp.value(a["self"]), transB=trans_b,
                       alpha=float(a["alpha"]), beta=float(a["beta"]))


@lowers(aten.mm.default, aten.bmm.default)
def _mm(imp, node):
    return imp.op.MatMul(imp.value(node.args[0]), imp.value(node.args[1]))


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa(imp, node):
    """softmax(q·kᵀ·scale + mask)·v, written as ONNX exporters write it (the attention rule
    makes it one kernel again); a query row masked out everywhere gives 0, as torch's does."""
    only_first_output_used(node, "logsumexp")
    a = bind(node)
    q, k, v = a["query"], a["key"], a["value"]
    if a["dropout_p"]:
        raise Unmapped("attention with dropout")
    dtype = meta_of(q).dtype
    head = ir_dim(meta_of(q).shape[-1])
    if not isinstance(head, int):
        raise Unmapped("a symbolic head size")
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(head)
    r = rank(k)
    kt = imp.op.Transpose(imp.value(k), perm=[*range(r - 2), r - 1, r - 2])
    s = imp.op.Mul(imp.op.MatMul(imp.value(q), kt), imp.scalar(scale, dtype))
    mask = a["attn_mask"]
    if a["is_causal"]:
        lq, lk = ir_dim(meta_of(q).shape[-2]), ir_dim(meta_of(k).shape[-2])
        if not (isinstance(lq, int) and isinstance(lk, int)):
            raise Unmapped("a causal mask over a symbolic sequence length")
        causal = np.triu(np.full((lq, lk), -np.inf, numpy_dtype_of_torch(dtype)), 1)
        s = imp.op.Add(s, imp.const(causal, dtype_of(dtype, "mask"), "causal"))
    if mask is not None:
        if meta_of(mask).dtype == torch.bool:
            additive = imp.op.Where(imp.value(mask), imp.scalar(0.0, dtype), imp.scalar(-math.inf, dtype))
        else:
            additive = imp.cast(imp.value(mask), dtype)
        s = imp.op.Add(s, additive)
    p = imp.op.Softmax(s, axis=-1)
    p = imp.op.Where(imp.op.IsNaN(p), imp.scalar(0.0, dtype), p)
    return (imp.op.MatMul(p, imp.value(v)), None)


# ---- patterns -------------------------------------------------------------------------------

@dataclass
class Match:
    reads: list[fx.Node]
    lower: Callable[[FxWriter], Any]


VIEWS = (aten.view.default, aten._unsafe_view.default, aten.view_copy.default, aten.reshape.default)
EXPANDS = (aten.expand.default, aten.expand_copy.default)


def _sole_input(node: Any, targets) -> fx.Node | None:
    """The node, if it is one of `targets` with no user but the one asking."""
    if isinstance(node, fx.Node) and node.op == "call_function" and node.target in targets \
            and len(node.users) == 1:
        return node
    return None


def linear(imp: FxWriter, root: fx.Node) -> Match | None:
    """view(addmm(c, view(x, [-1, K]), W), x.shape[:-1] + [N]) → MatMul(x, W) + c."""
    product = _sole_input(root.args[0], (aten.addmm.default, aten.mm.default))
    if product is None:
        return None
    if product.target == aten.addmm.default:
        a = bind(product)
        c, m, w = a["self"], a["mat1"], a["mat2"]
        if a["alpha"] != 1 or a["beta"] != 1 or rank(c) > 1:
            return None
    else:
        c, (m, w) = None, product.args
    flat = _sole_input(m, VIEWS)
    if flat is None:
        return None
    x = flat.args[0]
    src, out = imp.dims(x), imp.dims(root)
    if len(src) < 3 or out != src[:-1] + [imp.dims(w)[-1]]:
        return None

    def lower(imp: FxWriter):
        y = imp.op.MatMul(imp.value(x), imp.value(w))
        return y if c is None else imp.op.Add(y, imp.value(c))
    return Match([n for n in (x, w, c) if n is not None], lower)


def batched_matmul(imp: FxWriter, root: fx.Node) -> Match | None:
    """view(bmm(view(expand(a)), view(expand(b))), [..., M, N]) → MatMul(a, b)."""
    bmm = _sole_input(root.args[0], (aten.bmm.default,))
    if bmm is None:
        return None
    operands = []
    for arg in bmm.args[:2]:
        flat = _sole_input(arg, VIEWS)
        if flat is None:
            return None
        full = flat.args[0]   # the operand at the full batch shape
        source = full.args[0] if _sole_input(full, EXPANDS) is not None else full
        operands.append((full, source))
    (fa, sa), (fb, sb) = operands
    ea, eb, out = imp.dims(fa), imp.dims(fb), imp.dims(root)
    if not (len(ea) == len(eb) == len(out) >= 3 and ea[:-2] == eb[:-2] == out[:-2]
            and out[-2:] == [ea[-2], eb[-1]] and ea[-1] == eb[-2]):
        return None

    def unexpanded(full: fx.Node, source: fx.Node) -> fx.Node:
        """The operand before its expand, where that expand only broadcast batch dims."""
        s, e = imp.dims(source), imp.dims(full)
        return source if source is not full and len(s) == len(e) and s[-2:] == e[-2:] else full

    a, b = unexpanded(fa, sa), unexpanded(fb, sb)
    # MatMul broadcasts the batch dims of a and b: each must reach the full size from one side
    if any(da != e and db != e for da, db, e in zip(imp.dims(a)[:-2], imp.dims(b)[:-2], ea[:-2])):
        a = fa

    def lower(imp: FxWriter):
        return imp.op.MatMul(imp.value(a), imp.value(b))
    return Match([a, b], lower)


PATTERNS: dict[Any, list] = {t: [linear, batched_matmul] for t in VIEWS}
