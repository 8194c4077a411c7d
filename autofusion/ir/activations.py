"""Activations, each declared once: its parameters, its meaning in ONNX ops, its PyTorch form, its
oneDNN eltwise form and its scalar C form. Rules, decompositions, the torch kernels, the native
emitter and the generated kernels all read this table. Below it, the native runtime's elementwise
functions (ELTWISE: native.h's `Alg`, whose C++ list is generated from it) and ONNX's elementwise
ops that are no activation but run as one of them (FUNCTIONS).

A fused op carries its activation as an attribute pair: `activation` (a name below: an ONNX op
name, "SiLU", "GeluTanh", or "" for none) and `activation_params` (its float parameters in the
entry's order). The PyTorch form takes torch.nn.functional as its first argument, so the IR does
not import torch. The oneDNN form is a list of (algorithm, alpha, beta) in native/runtime's
names (native.h `Alg`). The C form maps a float expression to one (see scalar.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .graph import Node, Value
from .scalar import c_float

inf = math.inf


@dataclass(frozen=True)
class Activation:
    params: dict[str, float]   # name → default, in attribute order
    onnx: Callable             # (op, x, *params) → Value
    torch: Callable            # (F, x, *params) → Tensor
    onednn: Callable           # (*params) → [(ELTWISE name, alpha, beta)]
    c: Callable                # (x, *params) → a C float expression (x one too)
    op: str | None = None      # the ONNX op whose node is this activation alone
    clamps_nan: bool = False   # oneDNN's form is a max/min: NaN gives 0 or a bound, not NaN


def _clamp(F, x, low, high):
    if math.isinf(low) and math.isinf(high):
        return x
    return x.clamp(None if math.isinf(low) else low, None if math.isinf(high) else high)


def _hard_sigmoid(F, x, alpha, beta):
    return F.hardsigmoid(x) if (alpha, beta) == (1 / 6, 0.5) else (x * alpha + beta).clamp(0, 1)


ACTIVATIONS: dict[str, Activation] = {
    "": Activation({}, lambda op, x: x, lambda F, x: x, lambda: [], lambda x: x),
    "Relu": Activation({}, lambda op, x: op.Relu(x), lambda F, x: F.relu(x),
                       lambda: [("Relu", 0.0, 0.0)], lambda x: f"af_relu({x})", "Relu", clamps_nan=True),
    "LeakyRelu": Activation({"alpha": 0.01}, lambda op, x, alpha: op.LeakyRelu(x, alpha=alpha),
                            lambda F, x, alpha: F.leaky_relu(x, alpha),
                            lambda alpha: [("Relu", alpha, 0.0)],
                            lambda x, alpha: f"af_leaky_relu({x}, {c_float(alpha)})", "LeakyRelu"),
    "Clip": Activation({"min": -inf, "max": inf},
                       lambda op, x, min, max: op.Clip(x, scalar_constant(op, min, x),
                                                       scalar_constant(op, max, x)),
                       _clamp, lambda min, max: [("Clip", min, max)],
                       lambda x, min, max: f"af_clip({x}, {c_float(min)}, {c_float(max)})", "Clip",
                       clamps_nan=True),
    "Sigmoid": Activation({}, lambda op, x: op.Sigmoid(x), lambda F, x: x.sigmoid(),
                          lambda: [("Logistic", 0.0, 0.0)], lambda x: f"af_sigmoid({x})", "Sigmoid"),
    "Tanh": Activation({}, lambda op, x: op.Tanh(x), lambda F, x: x.tanh(),
                       lambda: [("Tanh", 0.0, 0.0)], lambda x: f"tanhf({x})", "Tanh"),
    "HardSigmoid": Activation({"alpha": 0.2, "beta": 0.5},
                              lambda op, x, alpha, beta: op.HardSigmoid(x, alpha=alpha, beta=beta),
                              _hard_sigmoid, lambda alpha, beta: [("HardSigmoid", alpha, beta)],
                              lambda x, alpha, beta:
                                  f"af_hard_sigmoid({x}, {c_float(alpha)}, {c_float(beta)})",
                              "HardSigmoid", clamps_nan=True),
    # x·HardSigmoid(x): the HardSwish op itself needs opset 14
    "HardSwish": Activation({}, lambda op, x: op.Mul(x, op.HardSigmoid(x, alpha=1 / 6, beta=0.5)),
                            lambda F, x: F.hardswish(x), lambda: [("HardSwish", 1 / 6, 0.5)],
                            lambda x: f"af_hard_swish({x})", "HardSwish", clamps_nan=True),
    "Elu": Activation({"alpha": 1.0}, lambda op, x, alpha: op.Elu(x, alpha=alpha),
                      lambda F, x, alpha: F.elu(x, alpha), lambda alpha: [("Elu", alpha, 0.0)],
                      lambda x, alpha: f"af_elu({x}, {c_float(alpha)})", "Elu"),
    "SiLU": Activation({}, lambda op, x: op.Mul(x, op.Sigmoid(x)), lambda F, x: F.silu(x),
                       lambda: [("SiLU", 1.0, 0.0)], lambda x: f"af_silu({x})"),
    "Gelu": Activation({}, lambda op, x: gelu(op, x, "none"), lambda F, x: F.gelu(x),
                       lambda: [("GeluErf", 0.0, 0.0)], lambda x: f"af_gelu({x})", "Gelu"),
    "GeluTanh": Activation({}, lambda op, x: gelu(op, x, "tanh"),
                           lambda F, x: F.gelu(x, approximate="tanh"), lambda: [("GeluTanh", 0.0, 0.0)],
                           lambda x: f"af_gelu_tanh({x})", "Gelu"),
}


@dataclass(frozen=True)
class Eltwise:
    """One of the native runtime's elementwise functions (native.h's `Alg`), with two parameters
    (alpha, beta): a post-op of a step, or a step of its own."""
    onednn: str                       # its dnnl::algorithm
    gate: bool = False                # last in a step, the runtime computes it after (gated.h)
    torch_post_op: Callable | None = None   # (alpha, beta) → PyTorch's oneDNN binding's post-op
                                            # (attr, scalars, algorithm), None where it has none


ELTWISE: dict[str, Eltwise] = {   # in the enum's order; "None" is no function
    "None": Eltwise("undef"),
    "Relu": Eltwise("eltwise_relu", torch_post_op=lambda a, b: ("relu", [], "") if a == 0 else ("leaky_relu", [a], "")),
    "Clip": Eltwise("eltwise_clip_v2", torch_post_op=lambda a, b: None if math.isinf(a) or math.isinf(b)
                    else ("hardtanh", [a, b], "")),
    "Logistic": Eltwise("eltwise_logistic", torch_post_op=lambda a, b: ("sigmoid", [], "")),
    "Tanh": Eltwise("eltwise_tanh", torch_post_op=lambda a, b: ("tanh", [], "")),
    "HardSigmoid": Eltwise("eltwise_hardsigmoid"),
    "HardSwish": Eltwise("eltwise_hardswish", torch_post_op=lambda a, b: ("hardswish", [], "")),
    "Elu": Eltwise("eltwise_elu"),
    # SiLU is oneDNN's swish with alpha 1; SiLU and tanh-GELU last in a step cost more than twice
    # as much as oneDNN's post-ops as the runtime's loop after the primitive (gated.h, on Zen 4)
    "SiLU": Eltwise("eltwise_swish", gate=True, torch_post_op=lambda a, b: ("swish", [], "")),
    "GeluErf": Eltwise("eltwise_gelu_erf", torch_post_op=lambda a, b: ("gelu", [], "none")),
    "GeluTanh": Eltwise("eltwise_gelu_tanh", gate=True, torch_post_op=lambda a, b: ("gelu", [], "tanh")),
    "Exp": Eltwise("eltwise_exp"),
    "Log": Eltwise("eltwise_log"),
    "Sqrt": Eltwise("eltwise_sqrt"),
    "Abs": Eltwise("eltwise_abs"),
    "Linear": Eltwise("eltwise_linear"),   # alpha·x + beta
    "SoftRelu": Eltwise("eltwise_soft_relu"),
    "Round": Eltwise("eltwise_round"),
    "Mish": Eltwise("eltwise_mish"),
    "Square": Eltwise("eltwise_square"),
}

# ONNX's elementwise ops that are no activation (no fused op carries them) but run as the
# runtime's elementwise functions
FUNCTIONS: dict[str, list[tuple[str, float, float]]] = {
    "Exp": [("Exp", 0.0, 0.0)], "Log": [("Log", 0.0, 0.0)], "Sqrt": [("Sqrt", 0.0, 0.0)],
    "Abs": [("Abs", 0.0, 0.0)], "Neg": [("Linear", -1.0, 0.0)], "Mish": [("Mish", 0.0, 0.0)],
}
ACTIVATION_OPS = tuple(dict.fromkeys(a.op for a in ACTIVATIONS.values() if a.op))


def eltwise_steps(node: Node) -> list[tuple[str, float, float]]:
    """A unary node (an activation op, a fused activation or GELU, one of FUNCTIONS) as the
    runtime's elementwise functions, (ELTWISE name, alpha, beta) each."""
    if node.op in FUNCTIONS:
        return FUNCTIONS[node.op]
    attrs = activation_of(node)
    return ACTIVATIONS[attrs["activation"]].onednn(*attrs["activation_params"])


def clamps_nan(node: Node) -> bool:
    """Whether the node's activation (its own op, or a fused node's attribute) runs on oneDNN as
    a max/min, which gives 0 or a bound for NaN where ONNX gives NaN."""
    name = node.attr("activation", "") or (node.op if node.op in ACTIVATION_OPS else "")
    return ACTIVATIONS[name].clamps_nan if name in ACTIVATIONS else False


def activation_attrs(name: str, **params: float) -> dict:
    """The attribute pair for an activation, parameters in the table's order."""
    return {"activation": name,
            "activation_params": [float(params.get(k, d)) for k, d in ACTIVATIONS[name].params.items()]}


def activation(node: Node) -> tuple[Activation, list[float]]:
    """A fused node's activation entry and its parameters."""
    act = ACTIVATIONS[node.attr("activation", "")]
    return act, list(node.attr("activation_params", list(act.params.values())))


def apply_activation(op, node: Node, x: Value) -> Value:
    """The node's activation of x, in ONNX ops."""
    act, params = activation(node)
    return act.onnx(op, x, *params)


def activation_of(act: Node) -> dict:
    """The attribute pair that stands for an activation node (an ONNX one or a fused one)."""
    if act.op in ("autofusion::Activation",) or "activation" in act.attrs:
        return {"activation": act.attr("activation", ""),
                "activation_params": list(act.attr("activation_params", []))}
    if act.op_type == "Gelu":
        return activation_attrs("GeluTanh" if act.attr("approximate") == "tanh" else "Gelu")
    if act.op_type == "Clip":
        low, high = clip_bounds(act)
        return activation_attrs("Clip", min=low, max=high)
    schema_defaults = ACTIVATIONS[act.op_type].params
    return activation_attrs(act.op_type, **{k: act.attr(k, d) for k, d in schema_defaults.items()})


def clip_bounds(clip: Node) -> tuple[float, float] | None:
    """Clip's (min, max): from its inputs (opset ≥ 11) or attributes; ±inf when absent; None when
    a bound is computed at run time."""
    if clip.graph is not None and clip.graph.opset.get("", 21) < 11:
        return float(clip.attr("min", -inf)), float(clip.attr("max", inf))
    bounds = []
    for i, default in ((1, -inf), (2, inf)):
        v = clip.input(i)
        if v is not None and (v.const is None or v.const.size != 1):
            return None
        bounds.append(default if v is None else float(v.const.reshape(-1)[0]))
    return bounds[0], bounds[1]


def scalar_constant(op, x: float, like: Value) -> Value:
    dtype = like.dtype.numpy if like.dtype is not None else np.float32
    return op.constant(np.array(x, dtype=dtype), "c")


def gelu(op, x: Value, approximate: str) -> Value:
    """GELU in ONNX ops: 0.5·x·(1 + erf(x/√2)), or its tanh approximation."""
    c = lambda value: scalar_constant(op, value, x)   # noqa: E731
    if approximate == "tanh":   # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        inner = op.Mul(c(math.sqrt(2 / math.pi)), op.Add(x, op.Mul(c(0.044715), op.Mul(x, op.Mul(x, x)))))
        return op.Mul(op.Mul(c(0.5), x), op.Add(c(1.0), op.Tanh(inner)))
    return op.Mul(op.Mul(c(0.5), x), op.Add(c(1.0), op.Erf(op.Div(x, c(math.sqrt(2))))))
