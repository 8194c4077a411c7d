"""A call whose inputs hold NaN or an infinity, where oneDNN's ReLU or Clip would give 0 for NaN:
it runs on PyTorch kernels and gives ONNX Runtime's answer; finite inputs keep the native plan."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import native


def conv_relu_model():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "r"], ["y"], name="square")]
    graph = helper.make_graph(nodes, "conv_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(native.unavailable() is not None, reason="the guard is for oneDNN's kernels")
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("array", [np.asarray, torch.from_numpy])   # torch: the one C call checks
def test_a_non_finite_input_gives_onnx_runtimes_answer(value, array):
    model = conv_relu_model()
    compiled = autofusion.compile(model, backend="native")
    assert len(compiled.plan.nan_clamping) == 1     # the fused Conv+ReLU
    assert compiled.program.whole is not None       # one native partition: the runtime checks
    assert "NaN or an infinity runs on PyTorch" in compiled.report.backend
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    x[0, 0, 2, 3] = value
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.asarray(compiled(array(x)))
    assert not np.isfinite(want).all()     # the value reaches the output
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert compiled.program.exact is not None                   # it took the PyTorch path


@pytest.mark.skipif(native.unavailable() is not None, reason="the guard is for oneDNN's kernels")
def test_finite_inputs_run_natively():
    compiled = autofusion.compile(conv_relu_model(), backend="native")
    compiled(np.ones((1, 3, 8, 8), np.float32))
    assert compiled.program.exact is None


def test_a_plan_without_onednn_clamps_has_no_guard():
    compiled = autofusion.compile(conv_relu_model(), backend="torch")
    assert compiled.plan.nan_clamping == []
    assert "NaN" not in compiled.report.backend


@pytest.mark.skipif(native.unavailable() is not None, reason="the runtime's check")
def test_the_check_finds_each_non_finite_value_and_only_those():
    """The native runtime's loop for dense float32 inputs (a vector body and a tail of 5), torch
    for the others; finite values whose sum would overflow are finite."""
    program = autofusion.compile(conv_relu_model(), backend="native").program
    big = torch.full((37,), 3e38)
    assert program.all_finite([big, torch.zeros(0), torch.arange(3)])
    for value in (np.nan, np.inf, -np.inf):
        for at in (0, 15, 16, 36):
            x = big.clone()
            x[at] = value
            assert not program.all_finite([x]), (value, at)
            assert not program.all_finite([x.double()]) and not program.all_finite([x[::2 if at % 2 == 0 else 1]])
    assert program.all_finite([big[::2].double() * 0])
    many = torch.zeros(1 << 17)   # split over the OpenMP team
    assert program.all_finite([many])
    for at in (0, (1 << 16) - 1, 1 << 16, (1 << 17) - 1):
        x = many.clone()
        x[at] = np.nan
        assert not program.all_finite([x]), at
