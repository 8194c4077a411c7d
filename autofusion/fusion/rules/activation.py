"""Activations written out in primitive ops, recognised and run as one kernel each.

Exporters spell GELU, SiLU, hard-swish and hard-sigmoid as chains of Mul/Add/Div/Erf/Tanh/Clip;
each chain below becomes one node. Products are matched in the association orders exporters
emit (commuted operands are tried by the matcher).
"""
from __future__ import annotations

import math

from ...ir.activations import activation_attrs
from ..rule import Rule

SQRT2 = math.sqrt(2)
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


# ---- GELU, exact: 0.5·x·(1 + erf(x/√2)) --------------------------------------------------

def gelu_erf(op, x):
    return x * (op.Erf(x / SQRT2) + 1) * 0.5


def gelu_erf_half_first(op, x):
    return x * 0.5 * (op.Erf(x / SQRT2) + 1)


def gelu_erf_by_reciprocal(op, x):
    return x * (op.Erf(x * (1 / SQRT2)) + 1) * 0.5


def gelu_erf_replace(op, m):
    return op.Gelu(m.x, approximate="none")


# ---- GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) -----------------

def cube_by_pow(op, x):
    return op.Pow(x, 3)


def cube_by_mul(op, x):     # torch's own nn.GELU(approximate="tanh") export
    return x * x * x


def gelu_tanh(cube, half_first: bool):
    def pattern(op, x):
        t = op.Tanh(SQRT_2_OVER_PI * (x + 0.044715 * cube(op, x))) + 1
        return x * 0.5 * t if half_first else x * t * 0.5
    pattern.__name__ = f"gelu_tanh_{cube.__name__}{'_half_first' if half_first else ''}"
    return pattern


def gelu_tanh_replace(op, m):
    return op.Gelu(m.x, approximate="tanh")


# ---- SiLU (swish): x·sigmoid(x) ----------------------------------------------------------

def silu(op, x):
    return x * op.Sigmoid(x)


def silu_replace(op, m):
    return op.Activation(m.x, **activation_attrs("SiLU"))


# ---- hard-sigmoid and hard-swish: relu6(x + 3) / 6 and x·relu6(x + 3) / 6 -------------------

def hard_sigmoid_clip(op, x):
    return op.Clip(x + 3, 0, 6) / 6


def hard_swish_clip(op, x):
    return x * op.Clip(x + 3, 0, 6) / 6


def hard_swish_clip_div_first(op, x):
    return x * (op.Clip(x + 3, 0, 6) / 6)


def hard_swish_hard_sigmoid(op, x):
    return x * op.HardSigmoid(x, alpha=lambda a: math.isclose(a, 1 / 6, rel_tol=1e-6),
                              beta=lambda b: math.isclose(b, 0.5, rel_tol=1e-6))


def hard_sigmoid_replace(op, m):
    return op.Activation(m.x, **activation_attrs("HardSigmoid", alpha=1 / 6, beta=0.5))


def hard_swish_replace(op, m):
    return op.Activation(m.x, **activation_attrs("HardSwish"))


RULES = [
    Rule("GeluFusionOp", 1, "GELU spelled 0.5·x·(1+erf(x/√2)) → one GELU kernel",
         [gelu_erf, gelu_erf_half_first, gelu_erf_by_reciprocal], gelu_erf_replace),
    Rule("GeluTanhFusionOp", 1, "tanh-approximated GELU spelled out → one GELU(tanh) kernel",
         [gelu_tanh(cube, half_first) for cube in (cube_by_pow, cube_by_mul) for half_first in (True, False)],
         gelu_tanh_replace),
    Rule("HardSwishFusionOp", 1, "x·relu6(x+3)/6 or x·HardSigmoid(x) → one hard-swish kernel",
         [hard_swish_clip, hard_swish_clip_div_first, hard_swish_hard_sigmoid], hard_swish_replace),
    Rule("HardSigmoidFusionOp", 1, "relu6(x+3)/6 → one hard-sigmoid kernel",
         [hard_sigmoid_clip], hard_sigmoid_replace),
    Rule("SiLUFusionOp", 1, "x·sigmoid(x) → one SiLU kernel", [silu], silu_replace),
]
