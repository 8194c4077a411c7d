"""Activation rules: GELU (erf, tanh), SiLU, hard-swish, hard-sigmoid written out in primitives."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from onnx import helper

from .harness import assert_same_outputs, fuse, matched, onnx_model, torch_model


class GeluTanh(torch.nn.Module):  # GPT-2's "new GELU"
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GeluHalfFirst(torch.nn.Module):  # BERT's gelu as HF writes it
    def forward(self, x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class HardSwishByHand(torch.nn.Module):  # MobileNet as some code bases write it
    def forward(self, x):
        return x * torch.nn.functional.relu6(x + 3.0) / 6.0


CASES = [
    ("GeluFusionOp", torch.nn.GELU(), "Gelu[approximate='none']"),
    ("GeluFusionOp", GeluHalfFirst(), "Gelu[approximate='none']"),
    ("GeluTanhFusionOp", GeluTanh(), "Gelu[approximate='tanh']"),
    ("GeluTanhFusionOp", torch.nn.GELU(approximate="tanh"), "Gelu[approximate='tanh']"),
    ("SiLUFusionOp", torch.nn.SiLU(), "autofusion::Activation[activation='SiLU'"),
    ("HardSwishFusionOp", torch.nn.Hardswish(), "autofusion::Activation[activation='HardSwish'"),
    ("HardSwishFusionOp", HardSwishByHand(), "autofusion::Activation[activation='HardSwish'"),
]


IDS = [type(m).__name__ + ("_tanh" if getattr(m, "approximate", "none") == "tanh" else "")
       for _, m, _ in CASES]


@pytest.mark.parametrize("rule, module, fused", CASES, ids=IDS)
def test_chain_becomes_one_node(rule, module, fused):
    # opset 13: before HardSwish became an ONNX op, so exporters write it out
    model = torch_model(module, (3, 8), opset=13)
    graph, report = fuse(model, level=1)
    assert matched(report, rule) == 1
    assert len(graph) == 1 and fused in str(graph).splitlines()[-1]


@pytest.mark.parametrize("rule, module, fused", CASES, ids=IDS)
def test_fused_equals_unfused_on_random_inputs(rule, module, fused):
    assert_same_outputs(torch_model(module, (4, 16), opset=13), level=1, rtol=1e-5)


def test_gelu_golden_before_after():
    s2 = np.array(math.sqrt(2), np.float32)
    nodes = [helper.make_node("Div", ["x", "s2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["one", "e"], ["a"], name="add"),   # operands commuted
             helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="mul2")]
    model = onnx_model(nodes, {"x": (2, 3)}, ["y"], {"s2": s2, "one": np.float32(1), "half": np.float32(0.5)})
    graph, _ = fuse(model, level=1)
    assert str(graph) == ("graph test(x: float[2,3]) -> (y: float[2,3])\n"
                          "  y: float[2,3] = autofusion::Gelu[approximate='none'](x)")


def test_gelu_with_a_wrong_constant_is_left_alone():
    nodes = [helper.make_node("Div", ["x", "s"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3)}, ["y"],
                       {"s": np.float32(1.5), "one": np.float32(1), "half": np.float32(0.5)})
    graph, report = fuse(model, level=1)
    assert matched(report, "GeluFusionOp") == 0 and len(graph) == 5


def test_shared_intermediate_is_a_near_miss_with_its_reason():
    """sigmoid(x) also feeds another output: fusing would recompute or spill it."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["y"], name="mul"),
             helper.make_node("Neg", ["s"], ["z"], name="neg")]
    graph, report = fuse(onnx_model(nodes, {"x": (4,)}, ["y", "z"]), level=1)
    assert matched(report, "SiLUFusionOp") == 0
    [miss] = [m for m in report.near_misses if m.rule == "SiLUFusionOp"]
    assert miss.reason == "'s' is also used by Neg 'neg', so it must stay in memory"
    assert miss.nodes == ["mul", "sig"]


def test_disabled_rule_does_not_fire():
    model = torch_model(torch.nn.SiLU(), (2, 4), opset=13)
    graph, report = fuse(model, level=1, disable=["SiLUFusionOp"])
    assert [n.op_type for n in graph.nodes] == ["Sigmoid", "Mul"]
    assert "SiLUFusionOp" not in [r.name for r in report.rules]
