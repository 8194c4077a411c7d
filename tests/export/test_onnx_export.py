"""IR → ONNX: the exported file passes onnx.checker and ONNX Runtime gives identical outputs."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import autofusion
from autofusion.export import export_onnx
from autofusion.frontend import import_onnx

from ..helpers import conv_relu_model
from ..models.architectures import ARCHITECTURES


def ort_outputs(model: onnx.ModelProto, feeds, optimize: bool = True):
    options = ort.SessionOptions()
    if not optimize:   # ORT's own fusions depend on the shapes a file states: compare the graphs
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def roundtrip(model: onnx.ModelProto) -> onnx.ModelProto:
    exported = export_onnx(import_onnx(model))
    onnx.checker.check_model(exported, full_check=True)
    return exported


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_roundtrip_gives_identical_outputs(name):
    model, feeds = ARCHITECTURES[name]()
    for got, want in zip(ort_outputs(roundtrip(model), feeds, optimize=False),
                         ort_outputs(model, feeds, optimize=False)):
        np.testing.assert_array_equal(got, want)


def test_roundtrip_keeps_names_shapes_and_symbolic_dims():
    exported = roundtrip(conv_relu_model())
    assert [n.name for n in exported.graph.node] == ["conv", "relu", "add"]
    dims = exported.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N" and [d.dim_value for d in dims[1:]] == [3, 8, 8]
    assert {t.name for t in exported.graph.initializer} == {"W", "B"}


def test_reimport_gives_the_same_graph():
    g = import_onnx(conv_relu_model())
    assert str(import_onnx(export_onnx(g))) == str(g)


def test_empty_list_attribute_takes_its_type_from_the_schema():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="t"),
             helper.make_node("ReduceMean", ["t"], ["y"], name="r", keepdims=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    graph = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    graph.nodes[0].attrs["perm"] = [1, 0]
    graph.nodes[1].attrs["axes"] = []
    exported = export_onnx(graph)
    onnx.checker.check_model(exported)
    axes = exported.graph.node[1].attribute
    assert [a.type for a in axes if a.name == "axes"] == [onnx.AttributeProto.INTS]


def test_export_to_file_and_run(tmp_path):
    path = tmp_path / "out.onnx"
    export_onnx(import_onnx(conv_relu_model()), path)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(autofusion.compile(path)(x), autofusion.compile(conv_relu_model())(x))


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_fused_file_runs_in_onnxruntime_and_reloads_fused(name, tmp_path):
    model, feeds = ARCHITECTURES[name]()
    fused = autofusion.compile(model, level=2)
    path = tmp_path / "fused.onnx"
    exported = export_onnx(fused.graph, path)
    onnx.checker.check_model(exported, full_check=True)
    want = ort_outputs(model, feeds)[0]
    got = ort_outputs(exported, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    reloaded = autofusion.compile(path, level=0)
    assert reloaded.graph.op_histogram() == fused.graph.op_histogram()
    np.testing.assert_allclose(reloaded.run(feeds)["output"], fused.run(feeds)["output"], rtol=1e-6,
                               atol=1e-6 * np.abs(want).max())


def test_fused_nodes_are_function_calls_with_their_decomposition():
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["y"], name="mul")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    fused = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), level=1)
    exported = export_onnx(fused.graph)
    [node] = exported.graph.node
    [fn] = exported.functions
    assert (node.domain, node.op_type, node.overload) == ("autofusion", "Activation", fn.overload)
    assert [n.op_type for n in fn.node] == ["Sigmoid", "Mul", "Identity"]
    assert {o.domain: o.version for o in exported.opset_import} == {"": 17, "autofusion": 1}
