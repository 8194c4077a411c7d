"""Native Resize (oneDNN's resampling, where its coordinates are ONNX's) and reductions over one
run of axes (the runtime's own loop): equal to ONNX Runtime, at symbolic sizes too; what they
refuse, with the reason."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend.native import unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(3)


def one_node(op: str, x_shape, consts: dict, inputs: list[str], opset: int = 19, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, inputs, ["y"], name=op.lower(), **attrs)
    g = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def plan_line(model, op: str) -> str:
    return next(line for line in str(model.plan).split("\n") if f"({op})" in line)


def equals_onnx_runtime(m: onnx.ModelProto, shapes: list[tuple]):
    model = autofusion.compile(m, backend="native")
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)
    return model


SCALES = {"scales": np.array([1, 1, 2, 2], np.float32)}


@pytest.mark.parametrize("attrs", [
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "nearest"},   # half_pixel, round_prefer_floor
    {"mode": "linear"},    # half_pixel
    {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}])
def test_resize_by_two_is_onednn_resampling_at_every_size(attrs):
    m = one_node("Resize", ["n", 8, "h", "w"], SCALES, ["x", "", "scales"], **attrs)
    model = equals_onnx_runtime(m, [(1, 8, 5, 7), (2, 8, 16, 16), (1, 8, 1, 9)])
    assert "via onednn" in plan_line(model, "Resize")


def test_resize_to_given_sizes_linear_is_native():
    sizes = {"sizes": np.array([1, 4, 11, 6], np.int64)}
    m = one_node("Resize", [1, 4, 7, 9], sizes, ["x", "", "", "sizes"], mode="linear")
    equals_onnx_runtime(m, [(1, 4, 7, 9)])


def upsampled_to_the_input(ctm: str) -> onnx.ModelProto:
    """x [1, 4, h, w] -> a strided 3x3 convolution -> upsampled (linear) back to x's own h and w,
    the sizes a Concat of Shape slices (how torchvision's segmentation heads are exported)."""
    w = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Shape", ["c"], ["sc"]),
             helper.make_node("Slice", ["sc", "zero", "two"], ["nc"]),
             helper.make_node("Slice", ["sx", "two", "four"], ["hw"]),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["c", "", "", "sizes"], ["y"], name="resize", mode="linear",
                              coordinate_transformation_mode=ctm)]
    g = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")] +
                          [numpy_helper.from_array(np.array([k], np.int64), n) for n, k in (("zero", 0), ("two", 2), ("four", 4))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_resize_to_sizes_computed_from_shapes_is_native_at_every_size():
    """The sizes are dims the shape rules know ([1, 4, h, w]): the output has that shape, and
    oneDNN's resampling computes it (the ratio of the sizes, half_pixel)."""
    model = equals_onnx_runtime(upsampled_to_the_input("half_pixel"), [(1, 4, 12, 10), (1, 4, 7, 9), (1, 4, 5, 16)])
    assert "onednn" in plan_line(model, "Resize") and "float[1,4,h,w]" in plan_line(model, "Resize")


def test_resize_to_computed_sizes_with_pytorch_half_pixel_stays_on_pytorch():
    model = equals_onnx_runtime(upsampled_to_the_input("pytorch_half_pixel"), [(1, 4, 12, 10), (1, 4, 1, 3)])
    assert "an output of 1 reads 0 there" in str(model.plan)


@pytest.mark.parametrize("attrs, consts, why", [
    ({"mode": "nearest"}, {"scales": np.array([1, 1, 1.5, 1.5], np.float32)}, "not an integer"),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "round_prefer_floor"},
     SCALES, "rounds half_pixel"),
    ({"mode": "cubic"}, SCALES, "nearest and linear"),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, SCALES, "half_pixel")])
def test_resize_forms_onednn_does_not_compute_stay_on_pytorch(attrs, consts, why):
    m = one_node("Resize", [1, 4, 6, 6], consts, ["x", "", "scales"], **attrs)
    model = equals_onnx_runtime(m, [(1, 4, 6, 6)])
    line = str(model.plan)
    assert "torch   resize (Resize)" in line and why in line


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
@pytest.mark.parametrize("axes, keepdims", [([2], 0), ([1, 2], 1), ([-1], 0), ([0], 1)])
def test_a_reduction_over_one_run_of_axes_is_the_runtimes_loop(op, axes, keepdims):
    m = one_node(op, ["b", 6, "h", 5], {"axes": np.array(axes, np.int64)}, ["x", "axes"], 18, keepdims=keepdims)
    model = equals_onnx_runtime(m, [(2, 6, 3, 5), (1, 6, 40, 5)])
    assert "runtime reduction" in plan_line(model, op)


@pytest.mark.parametrize("op, numpy_op", [("ReduceMax", np.max), ("ReduceMin", np.min)])
def test_max_and_min_propagate_nan_as_pytorch_and_numpy_do(op, numpy_op):
    # ONNX Runtime's answer depends on where the NaN falls in its vector (some columns NaN, some
    # not): NumPy's and PyTorch's, a NaN anywhere in the reduced run, is the one to match
    m = one_node(op, [2, 6, 4, 5], {"axes": np.array([2], np.int64)}, ["x", "axes"], 18)
    x = RNG.standard_normal((2, 6, 4, 5)).astype(np.float32)
    x.reshape(-1)[::7] = np.nan
    got = autofusion.compile(m, backend="native")(x)
    np.testing.assert_array_equal(got, numpy_op(x, axis=2, keepdims=True))
    assert np.isnan(got).any() and not np.isnan(got).all()


def test_axes_that_are_not_one_run_stay_on_pytorch():
    m = one_node("ReduceMean", [2, 6, 4, 5], {"axes": np.array([1, 3], np.int64)}, ["x", "axes"], 18)
    model = equals_onnx_runtime(m, [(2, 6, 4, 5)])
    assert "not one run" in str(model.plan)
