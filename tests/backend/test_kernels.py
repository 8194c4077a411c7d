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
