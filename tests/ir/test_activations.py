"""The activation table: each entry's ONNX meaning, PyTorch form and oneDNN form agree; the
runtime's elementwise functions (ELTWISE) and the unary ops that run as them."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import autofusion
from autofusion.ir import DType, Graph, GraphBuilder
from autofusion.ir.activations import (ACTIVATION_OPS, ACTIVATIONS, ELTWISE, FUNCTIONS, activation_attrs,
                                      clamps_nan, eltwise_steps)
from autofusion.ir.fused_ops import decompose

PARAMS = {"LeakyRelu": {"alpha": 0.3}, "Clip": {"min": -0.5, "max": 0.7}, "Elu": {"alpha": 0.6},
          "HardSigmoid": {"alpha": 0.25, "beta": 0.4}}


@pytest.mark.parametrize("name", [n for n in ACTIVATIONS if n])
def test_the_onnx_meaning_equals_the_torch_form(name):
    g = Graph("act", {"": 21})
    x = g.add_input("x", (4, 16), DType.FLOAT)
    g.outputs = [GraphBuilder(g).Activation(x, **activation_attrs(name, **PARAMS.get(name, {})))]
    body = decompose(g.nodes[0])   # standard ONNX ops only
    data = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32) * 3
    got = autofusion.compile(body, level=0, backend="torch")(data)
    params = activation_attrs(name, **PARAMS.get(name, {}))["activation_params"]
    want = ACTIVATIONS[name].torch(F, torch.from_numpy(data), *params).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert all(alg in ELTWISE for alg, _, _ in ACTIVATIONS[name].onednn(*params))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_fused_gelu_decomposes(approximate):
    g = Graph("gelu", {"": 21})
    x = g.add_input("x", (3, 5), DType.FLOAT)
    g.outputs = [GraphBuilder(g).Gelu(x, approximate=approximate)]
    data = np.linspace(-4, 4, 15, dtype=np.float32).reshape(3, 5)
    got = autofusion.compile(decompose(g.nodes[0]), level=0, backend="torch")(data)
    np.testing.assert_allclose(got, F.gelu(torch.from_numpy(data), approximate=approximate).numpy(),
                               rtol=1e-5, atol=1e-6)


def unary(op_type: str, **attrs):
    g = Graph("unary", {"": 21})
    x = g.add_input("x", (2, 3), DType.FLOAT)
    return getattr(GraphBuilder(g), op_type)(x, **attrs).producer


@pytest.mark.parametrize("op_type, attrs, steps", [
    ("Relu", {}, [("Relu", 0.0, 0.0)]),
    ("LeakyRelu", {"alpha": 0.2}, [("Relu", 0.2, 0.0)]),
    ("LeakyRelu", {}, [("Relu", 0.01, 0.0)]),
    ("HardSigmoid", {}, [("HardSigmoid", 0.2, 0.5)]),
    ("Gelu", {"approximate": "tanh"}, [("GeluTanh", 0.0, 0.0)]),
    ("Neg", {}, [("Linear", -1.0, 0.0)]),
    ("Exp", {}, [("Exp", 0.0, 0.0)]),
])
def test_a_unary_op_as_the_runtimes_elementwise_steps(op_type, attrs, steps):
    node = unary(op_type, **attrs)
    assert eltwise_steps(node) == pytest.approx(steps)
    assert op_type in ACTIVATION_OPS or op_type in FUNCTIONS


def test_every_elementwise_form_names_one_of_the_runtimes_functions():
    assert all(alg in ELTWISE for steps in FUNCTIONS.values() for alg, _, _ in steps)
    assert [n for n, e in ELTWISE.items() if e.gate] == ["SiLU", "GeluTanh"]   # gated.h's loops


@pytest.mark.parametrize("op_type, attrs, clamps", [
    ("Relu", {}, True), ("Clip", {}, True), ("HardSwish", {}, True), ("LeakyRelu", {"alpha": 0.1}, False),
    ("Sigmoid", {}, False), ("Exp", {}, False), ("Activation", activation_attrs("HardSigmoid"), True),
    ("Activation", activation_attrs("SiLU"), False),
])
def test_which_activations_give_a_number_for_nan_on_onednn(op_type, attrs, clamps):
    assert clamps_nan(unary(op_type, **attrs)) is clamps
