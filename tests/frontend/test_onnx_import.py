"""ONNX import: the mapping to the IR, and a clear error for every kind of bad input."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.errors import InputError, ModelLoadError, UnsupportedOpError
from autofusion.frontend import import_onnx
from autofusion.ir import verify

from ..helpers import conv_relu_model


def test_import_maps_nodes_constants_and_shapes():
    g = import_onnx(conv_relu_model())
    verify(g)
    assert str(g) == (
        "graph conv_relu(x: float[N,3,8,8]) -> (y: float[N,4,8,8])\n"
        "  const W: float[4,3,3,3]\n"
        "  const B: float[4]\n"
        "  c: float[N,4,8,8] = Conv[pads=[1, 1, 1, 1]](x, W, B)\n"
        "  r: float[N,4,8,8] = Relu(c)\n"
        "  y: float[N,4,8,8] = Add(r, c)")
    assert g.opset == {"": 17}


def test_constant_nodes_become_constants_and_omitted_inputs_none():
    nodes = [helper.make_node("Constant", [], ["lo"], value=numpy_helper.from_array(np.float32(0))),
             helper.make_node("Clip", ["x", "lo", ""], ["y"], name="clip"),
             helper.make_node("Clip", ["x", "", "lo"], ["z"], name="clip2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    graph = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    clip, clip2 = graph.nodes
    assert "lo" in graph.constants and len(clip.inputs) == 2  # trailing omitted input dropped
    assert clip2.inputs[1] is None and clip2.inputs[2].name == "lo"


def test_unsupported_ops_are_listed_together_with_node_names_when_strict():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("FancyOp", ["a"], ["b"], name="fancy1", domain="my.domain"),
             helper.make_node("Gizmo", ["b"], ["c"], name="gizmo", domain="other.domain"),
             helper.make_node("FancyOp", ["c"], ["y"], name="fancy2", domain="my.domain")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1),
                                                helper.make_opsetid("other.domain", 1)])
    with pytest.raises(UnsupportedOpError) as e:
        autofusion.compile(model, strict=True)
    msg = str(e.value)
    assert "3 node(s)" in msg and "my.domain::FancyOp (2x): 'fancy1', 'fancy2'" in msg
    assert "other.domain::Gizmo (1x): 'gizmo'" in msg


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="no such model file"):
        autofusion.compile(tmp_path / "nope.onnx")


def test_corrupt_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xfe")
    with pytest.raises(ModelLoadError, match="bad.onnx.*corrupt or truncated"):
        autofusion.compile(bad)


def test_truncated_file(tmp_path):
    data = conv_relu_model().SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="cut.onnx.*corrupt or truncated"):
        autofusion.compile(cut)


def _save_external(model, tmp_path):
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    return path


def test_external_data_model_loads_and_runs(tmp_path):
    path = _save_external(conv_relu_model(), tmp_path)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = autofusion.compile(conv_relu_model())(x)
    np.testing.assert_allclose(autofusion.compile(path)(x), want, rtol=1e-6)


def test_missing_external_data_file(tmp_path):
    path = _save_external(conv_relu_model(), tmp_path)
    (tmp_path / "ext.onnx.data").unlink()
    with pytest.raises(ModelLoadError, match="'W'.*ext.onnx.data.*missing"):
        autofusion.compile(path)


def test_truncated_external_data_file(tmp_path):
    path = _save_external(conv_relu_model(), tmp_path)
    data = tmp_path / "ext.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ModelLoadError, match="ext.onnx.data.*truncated"):
        autofusion.compile(path)


def test_inconsistent_model_is_reported():
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    w = numpy_helper.from_array(np.zeros((5,), np.float32), "w")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    with pytest.raises(ModelLoadError, match="shape inference failed"):
        import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_undefined_value_is_reported():
    nodes = [helper.make_node("Relu", ["ghost"], ["y"], name="r")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    with pytest.raises(ModelLoadError, match=r"node 'r' \(Relu\) reads 'ghost', which is used but never defined"):
        import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.fixture(scope="module")
def compiled():
    return autofusion.compile(conv_relu_model())


def test_missing_input(compiled):
    with pytest.raises(InputError, match=r"missing input\(s\) \['x'\]"):
        compiled()


def test_unknown_input_name(compiled):
    with pytest.raises(InputError, match="unknown input 'image'.*\\['x'\\]"):
        compiled(image=np.zeros((1, 3, 8, 8), np.float32))


def test_wrong_dtype(compiled):
    with pytest.raises(InputError, match="input 'x': expected dtype float, got float64"):
        compiled(np.zeros((1, 3, 8, 8)))


def test_wrong_rank(compiled):
    with pytest.raises(InputError, match=r"input 'x': expected rank 4 .*got shape \(3, 8, 8\)"):
        compiled(np.zeros((3, 8, 8), np.float32))


def test_wrong_static_dimension(compiled):
    with pytest.raises(InputError, match=r"input 'x': dimension 1 must be 3 .*got shape \(1, 5, 8, 8\)"):
        compiled(np.zeros((1, 5, 8, 8), np.float32))


def test_inconsistent_symbolic_dimension():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N"]),
                                       helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    m = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(InputError, match="input 'b': dimension 0 \\('N'\\) is 4, but 'a' gave 'N' = 3"):
        m(np.zeros(3, np.float32), np.zeros(4, np.float32))


def _split_to_sequence_model(split, keepdims=1, positions=(0, 1, 2), opset=18):
    inits = [numpy_helper.from_array(np.array(p, np.int64), f"p{p}") for p in positions]
    nodes = [helper.make_node("SplitToSequence", ["x"] + (["split"] if split is not None else []),
                              ["seq"], name="split", axis=1, keepdims=keepdims)]
    nodes += [helper.make_node("SequenceAt", ["seq", f"p{p}"], [f"y{p}"], name=f"at{p}") for p in positions]
    if split is not None:
        inits.append(numpy_helper.from_array(np.asarray(split, np.int64), "split"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                          [helper.make_tensor_value_info(f"y{p}", TensorProto.FLOAT, None) for p in positions],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("split, keepdims, positions, opset", [
    (2, 1, (0, 1, 2), 18),            # torch's x.split(2, dim=1), as the dynamo exporter writes it
    ([1, 2, 3], 1, (2, 0), 18),       # explicit sizes, pieces used out of order
    (None, 0, (0, 5, -1), 18),        # one piece per element, squeezed; a negative position
    (None, 0, (0, 5), 12),            # before opset 13 Squeeze takes its axes as an attribute
])
def test_split_to_sequence_imports_as_split(split, keepdims, positions, opset):
    import onnxruntime as ort
    model = _split_to_sequence_model(split, keepdims, positions, opset)
    graph = import_onnx(model)
    assert "Split" in graph.op_histogram() and not {"SplitToSequence", "SequenceAt"} & set(graph.op_histogram())
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = autofusion.compile(model, level=0).run({"x": x})
    for w, name in zip(want, [f"y{p}" for p in positions]):
        np.testing.assert_array_equal(got[name], w)


def test_a_sequence_used_otherwise_stays_a_sequence_and_strict_accepts_it():
    """A SequenceLength reads the sequence too: no Split then, the sequence ops run as they are
    (tests/backend/test_sequences.py checks them)."""
    model = _split_to_sequence_model(2)
    model.graph.node.append(helper.make_node("SequenceLength", ["seq"], ["n"], name="len"))
    model.graph.output.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    graph = import_onnx(model, strict=True)
    assert {"SplitToSequence", "SequenceAt", "SequenceLength"} <= set(graph.op_histogram())
    assert graph.nodes[0].outputs[0].type_str() == "seq(float[2,?])"
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    got = autofusion.compile(model, strict=True).run({"x": x})
    assert int(got["n"]) == 3
    np.testing.assert_array_equal(got["y2"], x[:, 4:])


def test_a_sequence_used_otherwise_runs_on_onnx_runtime():
    import onnxruntime as ort
    model = _split_to_sequence_model(2)
    model.graph.node.append(helper.make_node("SequenceLength", ["seq"], ["n"], name="len"))
    model.graph.output.append(helper.make_tensor_value_info("n", TensorProto.INT64, None))
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    got = autofusion.compile(model).run({"x": x})
    for w, vi in zip(ort.InferenceSession(model.SerializeToString()).run(None, {"x": x}), model.graph.output):
        np.testing.assert_array_equal(got[vi.name], w)


# ---- inputs as exporters write them --------------------------------------------------------

def _conv_relu_in(domain: str, x_shape: list, opset_domain: str = "") -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv", domain=domain),
             helper.make_node("Relu", ["c"], ["y"], name="relu", domain=domain)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, 8, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid(opset_domain, 17)])


@pytest.mark.parametrize("domain, opset_domain", [("ai.onnx", ""), ("", "ai.onnx"), ("ai.onnx", "ai.onnx")])
def test_the_ai_onnx_domain_is_the_default_domain_and_fuses(domain, opset_domain):
    import onnxruntime as ort
    model = _conv_relu_in(domain, [1, 3, 8, 8], opset_domain)
    graph = import_onnx(model)
    assert {n.domain for n in graph.nodes} == {""} and graph.opset == {"": 17}
    m = autofusion.compile(model)
    assert m.graph.op_histogram() == {"autofusion::FusedConv": 1}
    plain = autofusion.compile(_conv_relu_in("", [1, 3, 8, 8]))
    assert [(r.name, r.matched) for r in m.report.rules] == [(r.name, r.matched) for r in plain.report.rules]
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-5)


def test_a_negative_or_blank_input_dimension_is_a_named_symbolic_dimension():
    model = _conv_relu_in("", [-1, 3, 8, 8])
    model.graph.input[0].type.tensor_type.shape.dim[2].Clear()   # blank: neither value nor name
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 8
    graph = import_onnx(model)
    assert graph.inputs[0].shape == ("x_dim0", 3, 8, 8)
    assert graph.outputs[0].shape == ("x_dim0", 4, 8, 8)   # carried by shape inference
    m = autofusion.compile(model)
    for batch in (1, 3):   # the Paddle export once refused: "dimension 0 must be -1"
        assert m(np.zeros((batch, 3, 8, 8), np.float32)).shape == (batch, 4, 8, 8)
    blank = _conv_relu_in("", ["N", 3, 8, 8])
    blank.graph.input[0].type.tensor_type.shape.dim[3].Clear()
    assert import_onnx(blank).inputs[0].shape == ("N", 3, 8, "x_dim3")


def test_a_zero_dimension_stays_static_and_empty_as_in_onnx_runtime():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert m.graph.inputs[0].shape == (0, 3)
    assert m(np.zeros((0, 3), np.float32)).shape == (0, 3)
    with pytest.raises(InputError, match="dimension 0 must be 0"):
        m(np.zeros((2, 3), np.float32))
