"""The activation table: each entry's ONNX meaning, PyTorch form and oneDNN form agree."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import autofusion
from autofusion.ir import DType, Graph, GraphBuilder
from autofusion.ir.activations import ACTIVATIONS, activation_attrs
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
    assert all(isinstance(alg, str) for alg, _, _ in ACTIVATIONS[name].onednn(*params))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_fused_gelu_decomposes(approximate):
    g = Graph("gelu", {"": 21})
    x = g.add_input("x", (3, 5), DType.FLOAT)
    g.outputs = [GraphBuilder(g).Gelu(x, approximate=approximate)]
    data = np.linspace(-4, 4, 15, dtype=np.float32).reshape(3, 5)
    got = autofusion.compile(decompose(g.nodes[0]), level=0, backend="torch")(data)
    np.testing.assert_allclose(got, F.gelu(torch.from_numpy(data), approximate=approximate).numpy(),
                               rtol=1e-5, atol=1e-6)
