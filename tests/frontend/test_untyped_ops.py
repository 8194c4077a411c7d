"""Ops whose ONNX schema has no inference function (frontend/untyped_ops.py): their outputs are
typed from the schema, so strict inference passes on their consumers; the ops run on ONNX
Runtime and the model gives ONNX Runtime's outputs."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import autofusion
from autofusion.errors import ModelLoadError, UnsupportedOpError

ML = "ai.onnx.ml"


def model(nodes, inputs: dict[str, list], outputs: list[str]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "ml", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                        for n, s in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])


SCALER_RELU = model([helper.make_node("Scaler", ["x"], ["s"], "scaler", domain=ML, offset=[0.5, -0.1, 0.2],
                                      scale=[2.0, 3.0, -1.0]),
                     helper.make_node("Relu", ["s"], ["y"], "relu")], {"x": [4, 3]}, ["y"])
REGRESSOR = model([helper.make_node("LinearRegressor", ["x"], ["r"], "regressor", domain=ML,
                                    coefficients=[0.5, -1.0, 2.0, 1.5, 0.25, -0.75], intercepts=[0.1, -0.2],
                                    targets=2),
                   helper.make_node("Add", ["r", "r"], ["y"], "add")], {"x": [5, 3]}, ["y"])
NORMALIZER = model([helper.make_node("Normalizer", ["x"], ["n"], "normalizer", domain=ML, norm="L2"),
                    helper.make_node("Sigmoid", ["n"], ["y"], "sigmoid")], {"x": [6, 2]}, ["y"])


@pytest.mark.parametrize("m", [SCALER_RELU, REGRESSOR, NORMALIZER], ids=["scaler", "regressor", "normalizer"])
def test_consumers_of_untyped_ops_import_and_equal_onnx_runtime(m):
    assert not onnx.defs.get_schema(m.graph.node[0].op_type, 3, ML).has_type_and_shape_inference_function
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    compiled = autofusion.compile(m)
    np.testing.assert_allclose(compiled(x), want, rtol=1e-6, atol=1e-7)
    assert f"Runs on ONNX Runtime: ai.onnx.ml::{m.graph.node[0].op_type} ×1" in str(compiled.report)


def test_the_elementwise_ones_keep_their_input_shape():
    compiled = autofusion.compile(SCALER_RELU)
    [relu] = [n for n in compiled.graph.nodes if n.op == "Relu"]
    assert relu.inputs[0].shape == (4, 3) and relu.inputs[0].dtype.name == "FLOAT"


def test_strict_refuses_the_untyped_op_by_node():
    with pytest.raises(UnsupportedOpError, match="ai.onnx.ml::Scaler \\(1x\\): 'scaler'"):
        autofusion.compile(SCALER_RELU, strict=True)


def test_a_model_inconsistent_elsewhere_is_still_refused():
    m = model([*SCALER_RELU.graph.node, helper.make_node("Add", ["y", "z"], ["w"], "add")],
              {"x": [4, 3], "z": [5, 7]}, ["w"])
    with pytest.raises(ModelLoadError, match="ONNX shape inference failed.*add"):
        autofusion.compile(m)
