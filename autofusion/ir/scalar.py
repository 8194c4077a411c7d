"""Elementwise ops as scalar expressions: what a generated kernel computes per element.

An entry maps a node and its operands — C float expressions, None for an omitted input — to one
C float expression. Expressions call the C library's float functions and the helpers of
backend/native/runtime/scalar.h (af_sigmoid, af_max, …), which give ONNX's semantics where the C
library's differ (NaN propagates through Max, Min and Relu). An op with an entry can join an
automatic fusion region; custom ops add theirs through `register_expression`. Row reductions and
softmax (ROW_OPS, at the end) are templates: a reduction per row, then what follows it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .graph import Node

Expression = Callable[..., str]    # (node, *operands) → C expression
EXPRESSIONS: dict[str, Expression] = {}    # op-table key → its expression


def c_float(x: float) -> str:
    """A float32 literal in C (infinities and NaN as native.h names them)."""
    x = float(x)
    if math.isinf(x):
        return "af::inf" if x > 0 else "(-af::inf)"
    if math.isnan(x):
        return "af::nan"
    return repr(float(np.float32(x))) + "f"


def register_expression(key: str, expr: Expression) -> None:
    EXPRESSIONS[key] = expr


def expression(node: Node) -> Expression | None:
    return EXPRESSIONS.get(node.op)


def _constant(node: Node, i: int) -> float | None:
    """Input i's value when it is a one-element constant."""
    v = node.input(i)
    return float(v.const.reshape(-1)[0]) if v is not None and v.const is not None and v.const.size == 1 else None


def _fold(fn: str) -> Expression:
    """A variadic op (Max, Min, Sum) as nested calls of a binary one."""
    def expr(node: Node, *xs: str) -> str:
        out = xs[0]
        for x in xs[1:]:
            out = f"{fn}({out}, {x})" if fn.isidentifier() else f"({out} {fn} {x})"
        return out
    return expr


def _pow(node: Node, x: str, y: str) -> str:
    k = _constant(node, 1)
    return {2.0: f"({x} * {x})", 1.0: x, 0.5: f"sqrtf({x})", -1.0: f"(1.f / {x})",
            3.0: f"({x} * {x} * {x})"}.get(k, f"powf({x}, {y})")


def _clip(node: Node, x: str, low: str | None = None, high: str | None = None) -> str:
    if node.graph is not None and node.graph.opset.get("", 21) < 11:
        low, high = c_float(node.attr("min", -math.inf)), c_float(node.attr("max", math.inf))
    return f"af_clip({x}, {low or '(-af::inf)'}, {high or 'af::inf'})"


def _attr(node: Node, key: str, default: float) -> str:
    return c_float(node.attr(key, default))


_TABLE: dict[str, Expression] = {
    "Add": _fold("+"), "Sub": lambda n, a, b: f"({a} - {b})", "Mul": _fold("*"),
    "Div": lambda n, a, b: f"({a} / {b})", "Pow": _pow,
    "Max": _fold("af_max"), "Min": _fold("af_min"), "Sum": _fold("+"),
    "Mean": lambda n, *xs: f"({_fold('+')(n, *xs)} * {c_float(1 / len(xs))})",
    "PRelu": lambda n, x, slope: f"af_prelu({x}, {slope})",
    "Relu": lambda n, x: f"af_relu({x})",
    "LeakyRelu": lambda n, x: f"af_leaky_relu({x}, {_attr(n, 'alpha', 0.01)})",
    "Elu": lambda n, x: f"af_elu({x}, {_attr(n, 'alpha', 1.0)})",
    "Selu": lambda n, x: f"af_selu({x}, {_attr(n, 'alpha', 1.67326319217681884765625)}, "
                         f"{_attr(n, 'gamma', 1.05070102214813232421875)})",
    "Celu": lambda n, x: f"af_celu({x}, {_attr(n, 'alpha', 1.0)})",
    "ThresholdedRelu": lambda n, x: f"af_thresholded_relu({x}, {_attr(n, 'alpha', 1.0)})",
    "Shrink": lambda n, x: f"af_shrink({x}, {_attr(n, 'bias', 0.0)}, {_attr(n, 'lambd', 0.5)})",
    "Sigmoid": lambda n, x: f"af_sigmoid({x})",
    "HardSigmoid": lambda n, x: f"af_hard_sigmoid({x}, {_attr(n, 'alpha', 0.2)}, {_attr(n, 'beta', 0.5)})",
    "HardSwish": lambda n, x: f"af_hard_swish({x})",
    "Softplus": lambda n, x: f"af_softplus({x})",
    "Softsign": lambda n, x: f"({x} / (1.f + fabsf({x})))",
    "Mish": lambda n, x: f"af_mish({x})",
    "Gelu": lambda n, x: f"af_gelu_tanh({x})" if n.attr("approximate") == "tanh" else f"af_gelu({x})",
    "Clip": _clip,
    "Tanh": lambda n, x: f"tanhf({x})", "Erf": lambda n, x: f"erff({x})",
    "Exp": lambda n, x: f"expf({x})", "Log": lambda n, x: f"logf({x})",
    "Sqrt": lambda n, x: f"sqrtf({x})", "Reciprocal": lambda n, x: f"(1.f / {x})",
    "Neg": lambda n, x: f"(-{x})", "Abs": lambda n, x: f"fabsf({x})",
    "Floor": lambda n, x: f"floorf({x})", "Ceil": lambda n, x: f"ceilf({x})",
    "Round": lambda n, x: f"nearbyintf({x})",   # half to even, as ONNX rounds
    "Sign": lambda n, x: f"af_sign({x})",
    "Sin": lambda n, x: f"sinf({x})", "Cos": lambda n, x: f"cosf({x})",
    "Tan": lambda n, x: f"tanf({x})", "Asin": lambda n, x: f"asinf({x})",
    "Acos": lambda n, x: f"acosf({x})", "Atan": lambda n, x: f"atanf({x})",
    "Sinh": lambda n, x: f"sinhf({x})", "Cosh": lambda n, x: f"coshf({x})",
    "Asinh": lambda n, x: f"asinhf({x})", "Acosh": lambda n, x: f"acoshf({x})",
    "Atanh": lambda n, x: f"atanhf({x})",
    "Identity": lambda n, x: x, "Dropout": lambda n, x, *_: x,   # inference: the identity
}
for _op, _expr in _TABLE.items():
    register_expression(_op, _expr)
del _op, _expr


# ---- row reductions ------------------------------------------------------------------------

@dataclass(frozen=True)
class RowOp:
    """A row op as a generated kernel computes it: per row, each reduction combines ("sum",
    "max", "min") one term per element, `{x}` the element and `{r0}`, `{r1}` the earlier
    reductions' results; then `result`, of those, `{x}` and `{n}` (elements per row): one value
    per row, or one per element where it reads `{x}` (softmax). All in float32; max and min
    propagate NaN (af_max), as PyTorch and the ONNX reference do."""
    reductions: tuple[tuple[str, str], ...]
    result: str


_SUM, _MAX = (("sum", "{x}"),), (("max", "{x}"),)
_EXP_SUM = (("max", "{x}"), ("sum", "expf({x} - {r0})"))
ROW_OPS: dict[str, RowOp] = {
    "ReduceSum": RowOp(_SUM, "{r0}"),
    "ReduceMean": RowOp(_SUM, "({r0} / {n})"),
    "ReduceMax": RowOp(_MAX, "{r0}"),
    "ReduceMin": RowOp((("min", "{x}"),), "{r0}"),
    "ReduceSumSquare": RowOp((("sum", "({x} * {x})"),), "{r0}"),
    "ReduceL1": RowOp((("sum", "fabsf({x})"),), "{r0}"),
    "ReduceL2": RowOp((("sum", "({x} * {x})"),), "sqrtf({r0})"),
    "ReduceLogSum": RowOp(_SUM, "logf({r0})"),
    # the max taken out where finite, as torch.logsumexp does: an infinite max stays itself
    "ReduceLogSumExp": RowOp((("max", "{x}"), ("sum", "expf({x} - af_finite_or_zero({r0}))")),
                             "(logf({r1}) + af_finite_or_zero({r0}))"),
    "GlobalAveragePool": RowOp(_SUM, "({r0} / {n})"),
    "GlobalMaxPool": RowOp(_MAX, "{r0}"),
    "Softmax": RowOp(_EXP_SUM, "(expf({x} - {r0}) / {r1})"),
    "LogSoftmax": RowOp(_EXP_SUM, "(({x} - {r0}) - logf({r1}))"),
}
