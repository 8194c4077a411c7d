"""Operator versions from before numpy broadcasting (frontend/legacy.py): PRelu-6's per-channel
slope. ONNX Runtime has no PRelu-6 kernel, so the reference is the op's meaning, PyTorch's PReLU."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import autofusion


def prelu6(shape, slope: np.ndarray) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
                           helper.make_tensor_value_info("slope", TensorProto.FLOAT, list(slope.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                          [numpy_helper.from_array(slope, "slope")])
    return helper.make_model(g, ir_version=3, opset_imports=[helper.make_opsetid("", 6)])


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 4, 5)])
@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_prelu6_slope_is_per_channel(shape, backend):
    slope = np.array([0.1, -0.5, 2.0], np.float32)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = torch.nn.functional.prelu(torch.from_numpy(x), torch.from_numpy(slope)).numpy()
    got = autofusion.compile(prelu6(shape, slope), backend=backend, strict=True)(x)
    np.testing.assert_array_equal(got, want)


def test_a_slope_of_one_value_is_left_as_it_is():
    slope = np.array([0.25], np.float32)
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    got = autofusion.compile(prelu6((2, 3, 4), slope))(x)
    np.testing.assert_array_equal(got, np.where(x < 0, x * slope, x))
