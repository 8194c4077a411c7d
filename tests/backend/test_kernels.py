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
