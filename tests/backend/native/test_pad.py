"""Pad natively (impls.py emit_pad): constant mode by the runtime's pad step (the border filled,
the input copied into the interior, a negative count cropping), reflect, edge and wrap by its
pad_from_input loop (each output row copied from the input row it reads); any axes, a value,
opset 11 and 18 forms (axes), symbolic sizes; equal to ONNX Runtime. Pads computed at run time
and modes ONNX does not define are refused with their reason."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import autofusion
from autofusion.backend.native import unavailable
from tests.helpers import one_native_node_like_onnxruntime

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(0)


def pad_model(shape: list, pads: list[int], value: float | None = None, axes: list[int] | None = None,
              mode: str = "constant", pads_input: bool = False) -> onnx.ModelProto:
    inits = [] if pads_input else [onnx.numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    names = ["x", "pads", "" if value is None else "value"] + (["axes"] if axes is not None else [])
    if value is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(value, np.float32), "value"))
    if axes is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    if pads_input:
        inputs.append(helper.make_tensor_value_info("pads", TensorProto.INT64, [len(pads)]))
    g = helper.make_graph([helper.make_node("Pad", names, ["y"], name="pad", mode=mode)], "pad", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def check(model: onnx.ModelProto, *sizes: tuple) -> autofusion.CompiledModel:
    return one_native_node_like_onnxruntime(model, *sizes)


@pytest.mark.parametrize("pads, value", [
    ([0, 0, 1, 2, 0, 0, 3, 4], None),        # a detector's spatial zero padding
    ([0, 1, 0, 0, 0, 2, 0, 0], -1.5),        # channels, with a value
    ([0, 0, -1, 2, 0, 0, 1, -2], 0.25),      # cropping and padding at once
    ([0, 0, 0, 0, 0, 0, 0, 0], None),        # nothing: a copy
])
def test_constant_padding_equals_onnx_runtime(pads, value):
    check(pad_model([1, 3, 5, 6], pads, value), (1, 3, 5, 6))


def test_padding_of_the_named_axes_only():
    check(pad_model([2, 7, 4], [1, 3], 2.0, axes=[-1]), (2, 7, 4))


def test_symbolic_sizes():
    check(pad_model([1, 4, "h", "w"], [0, 0, 0, 1, 0, 0, 1, 1]), (1, 4, 3, 5), (1, 4, 8, 1), (1, 4, 1, 1))


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("shape, pads", [
    ([1, 3, 5, 6], [0, 0, 1, 2, 0, 0, 3, 4]),      # an image's border, both spatial axes
    ([1, 512], [0, 64, 0, 0]),                      # an STFT's reflected frame (Silero VAD)
    ([2, 4, 7], [0, 1, 0, 0, 2, 3]),                # an outer axis too
    ([1, 3, 5, 6], [0, 0, -1, 2, 0, 0, 1, -2]),     # cropping and padding at once
])
def test_modes_that_read_the_border_from_the_input_equal_onnx_runtime(mode, shape, pads):
    compiled = check(pad_model(shape, pads, mode=mode), tuple(shape))
    assert "runtime pad" in str(compiled.plan)


def test_wrap_equals_onnx_runtime():
    model = pad_model([2, 3, 5], [0, 1, 2, 0, 2, 3], mode="wrap")
    model.opset_import[0].version = 19   # wrap is opset 19's
    check(model, (2, 3, 5))


def test_reflect_for_any_size():
    check(pad_model([1, "n"], [0, 3, 0, 2], mode="reflect"), (1, 9), (1, 4), (1, 40))


@pytest.mark.parametrize("mode, pads_input, reason", [
    ("constant", True, "the pads are computed at run time"),
])
def test_what_it_refuses_it_names(mode, pads_input, reason):
    model = pad_model([1, 3, 5, 6], [0, 0, 1, 1, 0, 0, 1, 1], mode=mode, pads_input=pads_input)
    compiled = autofusion.compile(model, level=0, backend="native")
    (node,) = compiled.graph.nodes
    assert compiled.plan.decisions[node].impl.target == "torch"
    assert any(reason in why for _, why in compiled.plan.decisions[node].refused), compiled.plan.decisions[node].refused
