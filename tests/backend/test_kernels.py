"""Kernels the ONNX node suite does not cover, checked against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import autofusion


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    node = helper.make_node("GlobalLpPool", ["x"], ["y"], p=p)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(p).standard_normal((2, 3, 4, 5)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(autofusion.compile(model, level=0)(x), want, rtol=1e-5)


def test_a_failing_kernel_names_its_node():
    """A reshape that cannot apply to the runtime shape fails with the node's name."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [5, -1])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="/model/reshape")],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])
    compiled = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), level=0)
    with pytest.raises(autofusion.NodeExecutionError, match=r"While executing node '/model/reshape' \(Reshape\)"):
        compiled(np.zeros(7, np.float32))


@pytest.mark.parametrize("start, end, step", [(-10, -10, -1), (-10, 2, 1), (3, -10, -1), (10, -10, -2),
                                              (-1, -7, -1), (2, 100, 2), (-3, -1, 1)])
def test_slice_clamps_as_onnx_says(start, end, step):
    """Going back from before -d starts at 0 in ONNX (Python's slicing takes nothing there)."""
    consts = [helper.make_tensor(n, TensorProto.INT64, [1], [v])
              for n, v in (("s", start), ("e", end), ("a", 0), ("t", step))]
    g = helper.make_graph([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(6, dtype=np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(autofusion.compile(model, level=0)(x), want)


@pytest.mark.parametrize("backend", ["torch", "native"])
@pytest.mark.parametrize("shape", [[2, 3], [1, 3, 2, 2]])
def test_a_batch_norm_of_negative_epsilon_runs_by_onnx_formula(backend, shape):
    """PyTorch's batch_norm refuses a negative epsilon; ONNX's formula gives NaN where var + eps < 0."""
    from autofusion.backend.native import unavailable
    if backend == "native" and unavailable() is not None:
        pytest.skip(f"no native code: {unavailable()}")
    rng = np.random.default_rng(3)
    stats = {"s": rng.uniform(0.5, 2, 3), "b": rng.normal(size=3), "m": rng.normal(size=3),
             "v": np.array([1.0, 2.0, 1.2])}
    consts = [helper.make_tensor(n, TensorProto.FLOAT, [3], v.astype(np.float32)) for n, v in stats.items()]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=-1.5, name="bn")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], consts)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    x = rng.standard_normal(shape).astype(np.float32)
    per_channel = [-1] + [1] * (len(shape) - 2)
    s, b, m, v = (stats[k].astype(np.float32).reshape(per_channel) for k in "sbmv")
    with np.errstate(invalid="ignore"):
        want = (x - m) / np.sqrt(v - np.float32(1.5)) * s + b
    got = autofusion.compile(model, level=2, backend=backend)(x)
    assert np.isnan(got[:, [0, 2]]).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("covers", [True, False])
def test_scatter_elements_of_whole_slices(axis, covers):
    """An index Expand broadcasts over the other axes writes whole slices (torchvision's multi-
    scale RoIAlign merging its levels): copied slice by slice, negative indices too; an index that
    does not cover the other axes scatters element by element. Both equal ONNX Runtime."""
    x_shape = [5, 4, 3]
    a = axis % 3
    u_shape = list(x_shape)
    u_shape[a] = 2
    if not covers:
        u_shape[(a + 1) % 3] -= 1
    index_shape = [2 if d == a else 1 for d in range(3)]
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    g = helper.make_graph(
        [helper.make_node("Expand", ["slices", "shape"], ["index"]),
         helper.make_node("ScatterElements", ["x", "index", "u"], ["y"], axis=axis)], "g",
        [helper.make_tensor_value_info("x", f, x_shape), helper.make_tensor_value_info("slices", i64, index_shape),
         helper.make_tensor_value_info("u", f, u_shape)],
        [helper.make_tensor_value_info("y", f, None)],
        [helper.make_tensor("shape", i64, [3], u_shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(a)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "slices": np.array([-1, 1], np.int64).reshape(index_shape),
             "u": rng.standard_normal(u_shape).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(autofusion.compile(model, level=0).run(feeds)["y"], want)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("ties", ["inside", "at the k-th"])
def test_top_k_of_a_few_among_many_puts_the_lower_index_first(largest, ties):
    """k ≤ n/2 takes torch.topk, whose order among equal values ONNX fixes (lower index first);
    equal values across the k-th one take the stable sort. Both equal ONNX Runtime."""
    rng = np.random.default_rng(largest)
    if ties == "inside":   # every value twice and k even: the k-th value's twin is in too
        x = (rng.permuted(np.tile(np.arange(500), (3, 2)), axis=1) / 7).astype(np.float32)
    else:
        x = rng.random((3, 1000)).round(2).astype(np.float32)
    k = helper.make_tensor("k", TensorProto.INT64, [1], [40])
    g = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1000])],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)], [k])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = autofusion.compile(model, level=0).run({"x": x})
    np.testing.assert_array_equal(got["v"], want[0])
    np.testing.assert_array_equal(got["i"], want[1])
