"""Elementwise, broadcast, comparison, logic, cast, reduction and normalization kernels."""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F

from ...errors import KernelBuildError
from ...ir import Node
from .common import (TORCH_DTYPES, Kernel, KernelBuilder, const_input, ints_of, kernel, opset,
                     torch_dtype)
from .unsigned import (comparing, extreme, is_wide_unsigned, unsigned_div, unsigned_mod, unsigned_shift,
                       unsigned_where, wrapping)

INF = float("inf")


def _dtype(node: Node, i: int = 0) -> torch.dtype | None:
    """The torch dtype of input i when the IR knows it."""
    v = node.input(i)
    return None if v is None or v.dtype is None else TORCH_DTYPES.get(v.dtype)


def _by_dtype(node: Node, float_fn: Callable, other_fn: Callable, i: int = 0) -> Callable:
    """float_fn or other_fn by input i's dtype: chosen now when the IR knows it, else per call."""
    dt = _dtype(node, i)
    if dt is not None:
        return float_fn if dt.is_floating_point else other_fn
    return lambda *a: (float_fn if a[i].is_floating_point() else other_fn)(*a)


def _unsigned_or(node: Node, fn: Callable, unsigned_fn: Callable, i: int = 0) -> Callable:
    """unsigned_fn for uint16/32/64 in input i (PyTorch lacks their kernels, see unsigned.py),
    else fn: chosen now when the IR knows the dtype, else per call."""
    dt = _dtype(node, i)
    if dt is not None:
        return unsigned_fn if is_wide_unsigned(dt) else fn
    return lambda *a: (unsigned_fn if is_wide_unsigned(a[i].dtype) else fn)(*a)


def _scalar(node: Node, i: int):
    """Constant input i as a Python number (None when omitted); raises if it is not constant."""
    if node.input(i) is None:
        return None
    c = const_input(node, i)
    if c is None:
        raise KernelBuildError(f"input {i} must be a constant")
    return c.reshape(-1)[0].item()


def _is_const_or_absent(node: Node, *idx: int) -> bool:
    return all(node.input(i) is None or const_input(node, i) is not None for i in idx)


# ---- unary elementwise --------------------------------------------------------------------

_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Erf": torch.erf,
    "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal,
    "Neg": torch.neg, "Abs": torch.abs, "Floor": torch.floor, "Ceil": torch.ceil,
    "Round": torch.round,  # half to even, as ONNX
    "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin, "Acos": torch.acos,
    "Atan": torch.atan, "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh,
    "Acosh": torch.acosh, "Atanh": torch.atanh, "Sign": torch.sign, "Softplus": F.softplus,
    "Softsign": F.softsign, "Mish": F.mish, "HardSwish": F.hardswish,  # ONNX's alpha=1/6, beta=1/2
    "Not": torch.logical_not, "IsNaN": torch.isnan, "BitwiseNot": torch.bitwise_not,
    "Identity": lambda x: x,
}
# their forms for uint16/32/64 (ONNX's Neg takes no unsigned type)
_UNARY_UNSIGNED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Abs": lambda x: x, "Sign": lambda x: (x != 0).to(x.dtype),
    "BitwiseNot": wrapping(torch.bitwise_not),
}
for _op, _fn in _UNARY.items():
    if _op in _UNARY_UNSIGNED:
        kernel(_op)(lambda node, _fn=_fn, _op=_op: _unsigned_or(node, _fn, _UNARY_UNSIGNED[_op]))
    else:
        kernel(_op)(lambda node, _fn=_fn: _fn)

# activations with attributes: op -> (node -> kernel)
_ACTIVATIONS: dict[str, KernelBuilder] = {
    "LeakyRelu": lambda n: functools.partial(F.leaky_relu, negative_slope=n.attr("alpha", 0.01)),
    "Elu": lambda n: functools.partial(F.elu, alpha=n.attr("alpha", 1.0)),
    "Celu": lambda n: functools.partial(F.celu, alpha=n.attr("alpha", 1.0)),
    "Gelu": lambda n: functools.partial(F.gelu, approximate=n.attr("approximate", "none")),
    "ThresholdedRelu": lambda n: functools.partial(F.threshold, threshold=n.attr("alpha", 1.0),
                                                   value=0.0),
}
for _op, _builder in _ACTIVATIONS.items():
    kernel(_op)(_builder)


@kernel("Selu")
def _selu(node: Node) -> Kernel:
    alpha = node.attr("alpha", 1.67326319217681884765625)
    gamma = node.attr("gamma", 1.05070102214813232421875)
    return lambda x: F.elu(x, alpha).mul_(gamma)


@kernel("HardSigmoid")
def _hard_sigmoid(node: Node) -> Kernel:
    alpha, beta = node.attr("alpha", 0.2), node.attr("beta", 0.5)
    return lambda x: torch.clamp_(x * alpha + beta, 0.0, 1.0)


@kernel("Shrink")
def _shrink(node: Node) -> Kernel:
    bias, lambd = node.attr("bias", 0.0), node.attr("lambd", 0.5)
    if bias == 0.0:
        return functools.partial(F.hardshrink, lambd=lambd)
    if bias == lambd:
        return functools.partial(F.softshrink, lambd=lambd)
    return lambda x: torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, 0))


@kernel("IsInf")
def _isinf(node: Node) -> Kernel:
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if pos and neg:
        return torch.isinf
    if pos or neg:
        return torch.isposinf if pos else torch.isneginf
    return lambda x: torch.zeros_like(x, dtype=torch.bool)


@kernel("Clip")
def _clip(node: Node) -> Kernel:
    if opset(node) < 11:  # bounds are attributes
        lo, hi = node.attr("min", -INF), node.attr("max", INF)
        return lambda x: torch.clamp(x, lo, hi)
    if _is_const_or_absent(node, 1, 2):
        lo, hi = _scalar(node, 1), _scalar(node, 2)
        if lo is None and hi is None:
            return lambda x, *_: x
        return lambda x, *_: torch.clamp(x, lo, hi)  # min > max gives max, as ONNX
    return lambda x, lo=None, hi=None: x if lo is None and hi is None else torch.clamp(x, lo, hi)


@kernel("Dropout")
def _dropout(node: Node) -> Kernel:
    # inference is the identity (opset < 7 models are treated as inference whatever is_test says);
    # the optional mask, bool from opset 10 (else x's type), is all ones
    mask_dtype = torch.bool if opset(node) >= 10 else _dtype(node)
    two = len(node.outputs) > 1
    check = opset(node) >= 12 and node.input(2) is not None  # training_mode given
    if check and _is_const_or_absent(node, 1, 2):
        ratio = _scalar(node, 1)
        if _scalar(node, 2) and (0.5 if ratio is None else ratio) > 0:
            raise KernelBuildError("Dropout in training mode (random masks) is not supported")
        check = False
    if not check and not two:
        return lambda x, *_: x

    def run(x, r=None, t=None):
        if check and bool(t) and (0.5 if r is None else float(r)) > 0:
            raise NotImplementedError("Dropout in training mode (random masks) is not supported")
        return (x, torch.ones_like(x, dtype=mask_dtype or x.dtype)) if two else x
    return run


# ---- cast ---------------------------------------------------------------------------------

@kernel("Cast")
def _cast(node: Node) -> Kernel:
    to = torch_dtype(node.attr("to"), "Cast: ")  # float -> int truncates; x -> bool is x != 0
    return lambda x: x.to(to)


@kernel("CastLike")
def _cast_like(node: Node) -> Kernel:
    to = _dtype(node, 1)
    if to is None:
        return lambda x, like: x.to(like.dtype)
    return lambda x, like: x.to(to)


# ---- binary and variadic (broadcasting) ---------------------------------------------------

# ops that are one torch call with ONNX's signature and numpy broadcasting
_DIRECT: dict[str, Callable] = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
    "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
    "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or,
    "Xor": torch.logical_xor, "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or,
    "BitwiseXor": torch.bitwise_xor, "Where": torch.where,
}
# their forms for uint16/32/64, and which input says the dtype (Where's is the second)
_DIRECT_UNSIGNED: dict[str, tuple[Callable, int]] = {
    "Add": (wrapping(torch.add), 0), "Sub": (wrapping(torch.sub), 0),
    "Mul": (wrapping(torch.mul), 0), "Less": (comparing(torch.lt), 0),
    "Greater": (comparing(torch.gt), 0), "LessOrEqual": (comparing(torch.le), 0),
    "GreaterOrEqual": (comparing(torch.ge), 0),
    "BitwiseAnd": (wrapping(torch.bitwise_and), 0),
    "BitwiseOr": (wrapping(torch.bitwise_or), 0),
    "BitwiseXor": (wrapping(torch.bitwise_xor), 0), "Where": (unsigned_where, 1),
}
for _op, _fn in _DIRECT.items():
    if _op in _DIRECT_UNSIGNED:
        kernel(_op)(lambda node, _fn=_fn, _op=_op: _unsigned_or(node, _fn, *_DIRECT_UNSIGNED[_op]))
    else:
        kernel(_op)(lambda node, _fn=_fn: _fn)


@kernel("Div")
def _div(node: Node) -> Kernel:
    # integer division truncates toward zero (C semantics)
    signed = _by_dtype(node, torch.div, functools.partial(torch.div, rounding_mode="trunc"))
    return _unsigned_or(node, signed, unsigned_div)


@kernel("Pow")
def _pow(node: Node) -> Kernel:
    # the result has the base's type, whatever the exponent's type
    base, expo = _dtype(node, 0), _dtype(node, 1)
    e = const_input(node, 1)
    if base is not None and base.is_floating_point and e is not None and e.size == 1:
        e = e.reshape(-1)[0].item()
        return lambda x, _: torch.pow(x, e)
    if base is not None and expo is not None and torch.promote_types(base, expo) == base:
        return torch.pow
    return lambda x, y: torch.pow(x, y).to(x.dtype)


def _fold(fn: Callable, unsigned_fn: Callable | None = None) -> KernelBuilder:
    def build(node: Node) -> Kernel:
        step = fn if unsigned_fn is None else _unsigned_or(node, fn, unsigned_fn)

        def run(*xs):
            y = xs[0]
            for x in xs[1:]:
                y = step(y, x)
            return y
        return run
    return build


kernel("Max")(_fold(torch.maximum, extreme(torch.maximum)))  # NaN propagates, as numpy
kernel("Min")(_fold(torch.minimum, extreme(torch.minimum)))
kernel("Sum")(_fold(torch.add, wrapping(torch.add)))


@kernel("Mean")
def _mean(node: Node) -> Kernel:
    add, n = _fold(torch.add)(node), len(node.inputs)
    return lambda *xs: add(*xs) / n


def _py_mod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # numpy's float mod: fmod, then moved to the divisor's sign; a zero takes the divisor's sign
    r = torch.fmod(a, b)
    return torch.where(r != 0, torch.where((r < 0) != (b < 0), r + b, r),
                       torch.copysign(torch.zeros_like(r), b))


@kernel("Mod")
def _mod(node: Node) -> Kernel:
    if node.attr("fmod", 0):
        return _unsigned_or(node, torch.fmod, unsigned_mod)  # sign of the dividend
    return _unsigned_or(node, _by_dtype(node, _py_mod, torch.remainder), unsigned_mod)  # of the divisor


@kernel("PRelu")
def _prelu(node: Node) -> Kernel:
    return lambda x, slope: torch.where(x < 0, x * slope, x)


@kernel("BitShift")
def _bitshift(node: Node) -> Kernel:
    # a shift count < 0 or >= the bit width gives 0, or -1 for a right shift of a negative value
    left = node.attr("direction") == "LEFT"
    dt = _dtype(node)
    if is_wide_unsigned(dt):
        return lambda x, y: unsigned_shift(x, y, left)

    def run(x, y):
        if is_wide_unsigned(x.dtype):
            return unsigned_shift(x, y, left)
        w = torch.iinfo(dt or x.dtype).bits
        out = (y < 0) | (y >= w)
        if left:
            return torch.where(out, 0, x << y.clamp(0, w - 1))
        if (dt or x.dtype).is_signed:
            return x >> torch.where(out, w - 1, y)
        return torch.where(out, 0, x >> y.clamp(0, w - 1))
    return run


# ---- batch normalization ------------------------------------------------------------------

@kernel("BatchNormalization")
def _batchnorm(node: Node) -> Kernel:
    eps = node.attr("epsilon", 1e-5)
    # training mode: the attribute from opset 14, before it the running-statistics outputs
    if node.attr("training_mode", 0) if opset(node) >= 14 else len(node.outputs) > 1:
        raise KernelBuildError("BatchNormalization in training mode is not supported")
    def formula(x, s, b, m, v):
        return (x - m) / torch.sqrt(v + eps) * s + b

    if opset(node) < 9 and node.attr("spatial", 1) == 0:
        return formula   # per-element statistics of shape x.shape[1:]: plain broadcasting
    if eps < 0:
        # PyTorch refuses a negative epsilon; ONNX's formula, per channel (NaN where var + eps < 0)
        return lambda x, *stats: formula(x, *(t.reshape(-1, *[1] * (x.dim() - 2)) for t in stats))
    return lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, False, 0.0, eps)


# ---- reductions ---------------------------------------------------------------------------

def _reduce_axes(node: Node) -> list[int] | None:
    """The axes fixed at build time (empty: none given), or None when a runtime input gives them."""
    if opset(node) < (13 if node.op_type == "ReduceSum" else 18):
        return list(node.attr("axes", []))
    if node.input(1) is None:
        return []
    c = const_input(node, 1)
    return None if c is None else [int(a) for a in c.reshape(-1)]


def _extreme(fn: Callable, largest: bool) -> Callable:
    """amax/amin, giving the identity (-inf/inf, dtype min/max) for an empty reduction."""
    def f(x, dims, keep):
        if x.numel() == 0:
            dims = {d % x.dim() for d in dims}
            shape = [1 if i in dims else s for i, s in enumerate(x.shape) if keep or i not in dims]
            if x.dtype == torch.bool:
                fill = not largest
            elif x.is_floating_point():
                fill = -INF if largest else INF
            else:
                fill = torch.iinfo(x.dtype).min if largest else torch.iinfo(x.dtype).max
            return torch.full(shape, fill, dtype=x.dtype)
        return fn(x, dims, keep)
    return f


def _prod(x, dims, keep):
    for d in dims:  # torch.prod takes one dim at a time
        x = torch.prod(x, d, keepdim=True, dtype=x.dtype)
    return x if keep else x.squeeze(dims)


def _sum(x, dims, keep):
    return torch.sum(x, dims, keep, dtype=x.dtype)  # ints keep their type


# op -> (kernel for float inputs, kernel for other inputs), each (x, dims, keepdim) -> tensor
_REDUCE: dict[str, tuple[Callable, Callable]] = {
    "ReduceSum": (torch.sum, _sum),
    "ReduceMean": (torch.mean,
                   lambda x, d, k: torch.mean(x, d, k, dtype=torch.float64).to(x.dtype)),
    "ReduceMax": (_extreme(torch.amax, True),) * 2,
    "ReduceMin": (_extreme(torch.amin, False),) * 2,
    "ReduceProd": (_prod, _prod),
    "ReduceL1": (lambda x, d, k: torch.linalg.vector_norm(x, 1, d, k),
                 lambda x, d, k: _sum(x.abs(), d, k)),
    "ReduceL2": (lambda x, d, k: torch.linalg.vector_norm(x, 2, d, k),
                 lambda x, d, k: _sum(x * x, d, k).double().sqrt().to(x.dtype)),
    "ReduceSumSquare": (lambda x, d, k: torch.sum(x * x, d, k), lambda x, d, k: _sum(x * x, d, k)),
    "ReduceLogSum": (lambda x, d, k: torch.log(torch.sum(x, d, k)),
                     lambda x, d, k: torch.log(_sum(x, d, k).double()).to(x.dtype)),
    "ReduceLogSumExp": (torch.logsumexp,
                        lambda x, d, k: torch.logsumexp(x.double(), d, k).to(x.dtype)),
}


def _reduction(node: Node) -> Kernel:
    fn = _by_dtype(node, *_REDUCE[node.op_type])
    keep = bool(node.attr("keepdims", 1))
    noop = bool(node.attr("noop_with_empty_axes", 0))
    fixed = _reduce_axes(node)

    def run(x, axes=None):
        dims = fixed if fixed is not None else ints_of(axes)
        if not dims:  # no axes: all of them, or none with noop_with_empty_axes
            if noop:
                return x
            dims = range(x.dim())
        return fn(x, tuple(dims), keep)
    return run


for _op in _REDUCE:
    kernel(_op)(_reduction)


def _arg(fn: Callable) -> KernelBuilder:
    def build(node: Node) -> Kernel:
        axis, keep = node.attr("axis", 0), bool(node.attr("keepdims", 1))
        if not node.attr("select_last_index", 0):
            return lambda x: fn(x, axis, keep)  # the first extreme index on ties
        # the last extreme index: n - 1 - the first one in the input reversed along the axis
        return lambda x: (x.shape[axis] - 1) - fn(x.flip(axis), axis, keep)
    return build


kernel("ArgMax")(_arg(torch.argmax))
kernel("ArgMin")(_arg(torch.argmin))


@kernel("CumSum")
def _cumsum(node: Node) -> Kernel:
    exclusive, reverse = node.attr("exclusive", 0), node.attr("reverse", 0)
    fixed = _scalar(node, 1) if const_input(node, 1) is not None else None

    def run(x, axis):
        d = fixed if fixed is not None else int(axis)
        if reverse:
            x = x.flip(d)
        y = torch.cumsum(x, d, dtype=x.dtype)
        if exclusive and x.shape[d]:  # shift by one: y[i] = sum of x[:i]
            y = torch.cat([torch.zeros_like(y.narrow(d, 0, 1)), y.narrow(d, 0, y.shape[d] - 1)],
                          d)
        return y.flip(d) if reverse else y
    return run


# ---- softmax family -----------------------------------------------------------------------

def _hardmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.zeros_like(x).scatter_(dim, x.argmax(dim, keepdim=True), 1)


def _softmax_like(fn: Callable) -> KernelBuilder:
    def build(node: Node) -> Kernel:
        if opset(node) >= 13:
            axis = node.attr("axis", -1)
            return lambda x: fn(x, axis)
        axis = node.attr("axis", 1)

        def run(x):  # before opset 13: over the input flattened to 2-D at `axis`
            a = axis % max(x.dim(), 1)
            if a >= x.dim() - 1:
                return fn(x, -1)
            return fn(x.flatten(a), -1).reshape(x.shape)
        return run
    return build


kernel("Softmax")(_softmax_like(torch.softmax))
kernel("LogSoftmax")(_softmax_like(torch.log_softmax))
kernel("Hardmax")(_softmax_like(_hardmax))


# ---- normalization ------------------------------------------------------------------------

@kernel("LayerNormalization")
def _layernorm(node: Node) -> Kernel:
    axis, eps, nout = node.attr("axis", -1), node.attr("epsilon", 1e-5), len(node.outputs)
    stash = torch_dtype(node.attr("stash_type", 1), "LayerNormalization stash_type: ")

    def run(x, w, b=None):
        a = axis % x.dim()
        shape = x.shape[a:]
        if nout == 1 and w.shape == shape and (b is None or b.shape == shape):
            return F.layer_norm(x, shape, w, b, eps)
        xs = x.to(stash)  # Mean and InvStdDev are computed (and returned) in stash_type
        var, mean = torch.var_mean(xs, tuple(range(a, x.dim())), correction=0, keepdim=True)
        inv = torch.rsqrt(var + eps)
        y = ((xs - mean) * inv).to(x.dtype) * w
        if b is not None:
            y = y + b
        return (y, mean, inv)[:nout] if nout > 1 else y
    return run


@kernel("GroupNormalization")
def _groupnorm(node: Node) -> Kernel:
    groups, eps = node.attr("num_groups"), node.attr("epsilon", 1e-5)
    if opset(node) >= 21:
        return lambda x, w, b: F.group_norm(x, groups, w, b, eps)

    def run(x, w, b):  # opset 18: scale and bias are per group, not per channel
        per = x.shape[1] // groups
        return F.group_norm(x, groups, w.repeat_interleave(per), b.repeat_interleave(per), eps)
    return run


@kernel("InstanceNormalization")
def _instancenorm(node: Node) -> Kernel:
    eps = node.attr("epsilon", 1e-5)
    return lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=eps)


@kernel("LpNormalization")
def _lpnorm(node: Node) -> Kernel:
    axis, p = node.attr("axis", -1), node.attr("p", 2)

    def run(x):  # a zero norm gives 0 (its inputs are all 0), not NaN
        n = torch.linalg.vector_norm(x, p, axis, keepdim=True)
        return x / n.masked_fill_(n == 0, 1)
    return run


@kernel("MeanVarianceNormalization")
def _mvn(node: Node) -> Kernel:
    axes = tuple(node.attr("axes", [0, 2, 3]))

    def run(x):
        var, mean = torch.var_mean(x, axes, correction=0, keepdim=True)
        return (x - mean) / (var.sqrt_() + 1e-9)
    return run


def _spatial(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.dim()))


@kernel("GlobalAveragePool")
def _global_avg(node: Node) -> Kernel:
    return lambda x: torch.mean(x, _spatial(x), keepdim=True)


@kernel("GlobalMaxPool")
def _global_max(node: Node) -> Kernel:
    return lambda x: torch.amax(x, _spatial(x), keepdim=True)


@kernel("GlobalLpPool")
def _global_lp(node: Node) -> Kernel:
    p = node.attr("p", 2)
    return lambda x: torch.linalg.vector_norm(x, p, _spatial(x), keepdim=True)


del _op, _fn, _builder
