"""InstanceNormalization natively (impls.py emit_instance_norm: each (image, channel) normalized
as one row by the layer norm's loop, then the per-channel scale and bias as a batch norm whose
statistics change nothing): 3-D to 5-D, symbolic sizes, PyTorch's GroupNorm export (a reshape to
one group per row, InstanceNormalization, the affine after); equal to ONNX Runtime. A scale
computed at run time refused, by name."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import autofusion
from autofusion.backend.native import unavailable
from tests.helpers import one_native_node_like_onnxruntime

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(0)


def instance_norm_model(shape: list, channels: int, scale_input: bool = False) -> onnx.ModelProto:
    scale = RNG.standard_normal(channels).astype(np.float32)
    bias = RNG.standard_normal(channels).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    inits = [onnx.numpy_helper.from_array(bias, "b")]
    if scale_input:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [channels]))
    else:
        inits.append(onnx.numpy_helper.from_array(scale, "s"))
    g = helper.make_graph([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="norm", epsilon=1e-3)],
                          "instance_norm", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape", [(2, 8, 37), (1, 4, 9, 11), (2, 3, 4, 5, 6)])
def test_equals_onnx_runtime(shape):
    one_native_node_like_onnxruntime(instance_norm_model(list(shape), shape[1]), shape, tolerance=2e-6)


def test_symbolic_sizes():
    one_native_node_like_onnxruntime(instance_norm_model(["n", 6, "t"], 6), (1, 6, 50), (3, 6, 7), (2, 6, 1),
                                     tolerance=2e-6)


def test_a_group_norm_as_pytorch_exports_it_runs_natively(tmp_path):
    """wav2vec2's first feature layer: GroupNorm with a group per channel, exported as a reshape,
    InstanceNormalization (scale 1, bias 0) and the affine after."""
    module = torch.nn.Sequential(torch.nn.Conv1d(1, 16, 10, 5), torch.nn.GroupNorm(16, 16), torch.nn.GELU()).eval()
    path = tmp_path / "group_norm.onnx"
    torch.onnx.export(module, (torch.randn(1, 1, 400),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 2: "time"}}, dynamo=False)
    model = autofusion.compile(str(path), backend="native")
    assert not [n for p in model.plan.partitions if p.target != "native" for n in p.nodes]
    import onnxruntime as ort
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for size in (400, 1000):
        x = RNG.standard_normal((2, 1, size)).astype(np.float32)
        np.testing.assert_allclose(model(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_scale_computed_at_run_time_is_refused_by_name():
    model = autofusion.compile(instance_norm_model([1, 4, 5, 5], 4, scale_input=True), level=0, backend="native")
    (node,) = model.graph.nodes
    decision = model.plan.decisions[node]
    assert decision.impl.target == "torch"
    assert any("the scale is computed at run time" in why for _, why in decision.refused), decision.refused
