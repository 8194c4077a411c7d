"""Ops autofusion has no kernel for run on ONNX Runtime (OnnxRuntimeCall), one session per
connected group; strict=True refuses them. Every result is checked against ONNX Runtime running
the whole model. The ops used are ones autofusion will not grow a kernel for: ai.onnx.ml's,
com.microsoft's contrib ops and a model-local function (my.ops::Swish, x·sigmoid(x))."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import native
from autofusion.cli import main
from autofusion.errors import UnsupportedOpError
from autofusion.frontend import import_onnx
from autofusion.ir import lookup
from autofusion.ir.onnx_runtime_call import ORT_KEY

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1),
         helper.make_opsetid("ai.onnx.ml", 3),
         helper.make_opsetid("my.ops", 1)]
SWISH = helper.make_function("my.ops", "Swish", ["x"], ["y"],
                             [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
                             [helper.make_opsetid("", 18)])


def swish(x: str, y: str, name: str) -> onnx.NodeProto:
    return helper.make_node("Swish", [x], [y], name=name, domain="my.ops")


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, F, None) for n in outputs], list(inits))
    return helper.make_model(g, opset_imports=OPSET, functions=[SWISH])


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(model, feeds, **kwargs):
    compiled = autofusion.compile(model, **kwargs)
    got = compiled.run(feeds)
    for name, want in zip([o.name for o in model.graph.output], _ort(model, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-4, err_msg=name)
    return compiled


def _calls(graph):
    return [n for n in graph.nodes if n.op == ORT_KEY]


def ml_model():
    """Features -> ai.onnx.ml Binarizer (no kernel here) -> scale and Relu (ours)."""
    assert lookup("ai.onnx.ml", "Binarizer") is None, "Binarizer has a kernel now: these tests need an op without one"
    scale = numpy_helper.from_array(np.arange(1, 8, dtype=np.float32), "scale")
    nodes = [helper.make_node("Binarizer", ["x"], ["t"], name="binarizer", domain="ai.onnx.ml",
                              threshold=0.25),
             helper.make_node("Mul", ["t", "scale"], ["s"], name="mul"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    return _model(nodes, [("x", F, [2, 7])], ["y"], [scale])


FEATURES = {"x": np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)}


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_an_op_without_a_kernel_runs_on_onnx_runtime_and_the_report_names_it(backend):
    m = _check(ml_model(), FEATURES, backend=backend)
    assert [n.attr("ops") for n in _calls(m.graph)] == [["ai.onnx.ml::Binarizer"]]
    assert "Runs on ONNX Runtime: ai.onnx.ml::Binarizer ×1" in m.report.text()
    assert m.report.to_json()["onnx_runtime"] == {"ai.onnx.ml::Binarizer": 1}
    assert "via onnxruntime" in str(m.plan)


def test_the_torch_backend_from_the_environment_runs_it_too(monkeypatch):
    monkeypatch.setenv("AUTOFUSION_BACKEND", "torch")
    m = _check(ml_model(), FEATURES)
    assert m.plan.backend == "torch"


def test_strict_refuses_it_naming_the_node():
    with pytest.raises(UnsupportedOpError, match=r"ai.onnx.ml::Binarizer \(1x\): 'binarizer'"):
        autofusion.compile(ml_model(), strict=True)


def test_ops_no_one_has_are_all_named_at_once():
    """Two custom ops neither autofusion nor ONNX Runtime registers, apart in the graph: one error
    names both (a user fixes them together, not one per run)."""
    nodes = [helper.make_node("Foo", ["x"], ["a"], name="foo", domain="my.ops"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Bar", ["b"], ["y"], name="bar", domain="my.ops")]
    with pytest.raises(UnsupportedOpError, match=r"2 node\(s\) use operators neither autofusion nor ONNX "
                                                 r"Runtime has a kernel for:\n  my.ops::Bar \(1x\): 'bar'\n"
                                                 r"  my.ops::Foo \(1x\): 'foo'"):
        autofusion.compile(_model(nodes, [("x", F, [2, 3])], ["y"]))


def test_connected_unsupported_nodes_are_one_session_and_outputs_without_shapes_still_run():
    """com.microsoft::QuickGelu has no ONNX shape rule: its output and Neg's get no type at import."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             swish("a", "b", "swish"),
             helper.make_node("QuickGelu", ["b"], ["c"], name="quick_gelu", domain="com.microsoft"),
             helper.make_node("Neg", ["c"], ["y"], name="neg")]
    model = _model(nodes, [("x", F, [2, 3, 3])], ["y"])
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32)}
    for backend in ("auto", "torch"):
        m = _check(model, feeds, backend=backend)
        calls = _calls(m.graph)
        assert len(calls) == 1 and calls[0].attr("ops") == ["my.ops::Swish", "com.microsoft::QuickGelu"]
        assert calls[0].outputs[0].dtype is None     # known only when ONNX Runtime runs it
        assert calls[0].origin == ("swish", "quick_gelu")
        assert "Runs on ONNX Runtime: com.microsoft::QuickGelu ×1, my.ops::Swish ×1" in m.report.text()


def conv_swish_conv_model(batch="N"):
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             swish("r1", "l", "swish"),
             helper.make_node("Conv", ["l", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    return _model(nodes, [("x", F, [batch, 3, 8, 8])], ["y"], [w1, w2])


@pytest.mark.skipif(native.unavailable() is not None, reason="no native backend on this machine")
@pytest.mark.parametrize("batch", [1, "N"])
def test_on_the_native_backend_it_is_a_torch_step_between_native_partitions(batch):
    model = conv_swish_conv_model(batch)
    for n in (1, 2) if batch == "N" else (1,):
        x = np.random.default_rng(n).standard_normal((n, 3, 8, 8)).astype(np.float32)
        m = _check(model, {"x": x}, backend="native")
        assert [(p.target, [d.op for d in p.nodes]) for p in m.plan.partitions] == [
            ("native", ["autofusion::FusedConv"]), ("torch", [ORT_KEY]), ("native", ["autofusion::FusedConv"])]


def test_an_if_runs_here_now_its_branches_reading_outer_values_as_captured_inputs():
    w = numpy_helper.from_array(np.full((3,), 2.0, np.float32), "w")
    then = helper.make_graph([helper.make_node("Add", ["r", "w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, [3])])
    other = helper.make_graph([helper.make_node("Mul", ["r", "w"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, [3])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("If", ["c"], ["i"], name="if", then_branch=then, else_branch=other),
             helper.make_node("Neg", ["i"], ["y"], name="neg")]
    model = _model(nodes, [("x", F, [3]), ("c", TensorProto.BOOL, [])], ["y"], [w])
    m = None
    for c in (True, False):
        m = _check(model, {"x": np.array([-1, 0.5, 3], np.float32), "c": np.array(c)})
    assert not _calls(m.graph)   # If is autofusion's own op (tests/*/test_control_flow.py)
    node, = [n for n in m.graph.nodes if n.op_type == "If"]
    assert [v.name for v in node.inputs] == ["c", "r"]   # w, a constant, moved into the branches


def _sequence_loop_body(foreign: bool) -> onnx.GraphProto:
    """acc += r (through Binarizer first where foreign), and the new acc appended to a sequence."""
    seq = TensorProto.FLOAT
    step = [helper.make_node("Binarizer", ["acc_in"], ["bin"], domain="ai.onnx.ml", threshold=0.0),
            helper.make_node("Add", ["bin", "r"], ["acc_out"])] if foreign else \
        [helper.make_node("Add", ["acc_in", "r"], ["acc_out"])]
    return helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), *step,
         helper.make_node("SequenceInsert", ["seq_in", "acc_out"], ["seq_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3]),
         helper.make_tensor_sequence_value_info("seq_in", seq, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [3]),
         helper.make_tensor_sequence_value_info("seq_out", seq, [3])])


def _sequence_loop_model(foreign: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("SequenceEmpty", [], ["empty"], name="empty", dtype=F),
             helper.make_node("Loop", ["n", "", "x", "empty"], ["final", "seq"], name="loop",
                              body=_sequence_loop_body(foreign)),
             helper.make_node("ConcatFromSequence", ["seq"], ["cat"], name="cat", axis=0),
             helper.make_node("Sigmoid", ["cat"], ["y"], name="sigmoid")]
    return _model(nodes, [("x", F, [3]), ("n", TensorProto.INT64, [])], ["final", "y"])


def test_a_loop_whose_body_uses_sequences_runs_here():
    """SequenceInsert inside a Loop body: sequences are IR values, so the Loop is autofusion's
    own, and strict accepts it (tests/backend/test_sequences.py has more)."""
    for backend in ("auto", "torch"):
        m = _check(_sequence_loop_model(False), {"x": np.array([-1, 0.5, 2], np.float32),
                                                 "n": np.array(3, np.int64)}, backend=backend, strict=True)
        assert not _calls(m.graph)
        assert {n.op_type for n in m.graph.nodes} >= {"SequenceEmpty", "Loop", "ConcatFromSequence"}


def test_a_loop_whose_body_holds_a_foreign_op_runs_on_onnx_runtime_and_its_sequence_comes_back():
    """Binarizer in the body keeps the whole Loop on ONNX Runtime, alone in its group: the empty
    sequence SequenceEmpty makes here crosses into it as a list, and the sequence the Loop makes
    comes back as one, into ConcatFromSequence here."""
    for backend in ("auto", "torch"):
        m = _check(_sequence_loop_model(True), {"x": np.array([-1, 0.5, 2], np.float32),
                                                "n": np.array(3, np.int64)}, backend=backend)
        call, = _calls(m.graph)
        assert call.attr("ops") == ["Loop"]
        assert "Runs on ONNX Runtime: Loop ×1" in m.report.text()
        assert {n.op_type for n in m.graph.nodes} == {"Relu", "SequenceEmpty", "OnnxRuntimeCall",
                                                       "ConcatFromSequence", "Sigmoid"}


def test_a_loop_with_scan_outputs_runs_here_and_its_output_shape_comes_at_run_time():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_out", "r"], ["scan_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [3]), helper.make_tensor_value_info("scan_out", F, [3])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Loop", ["n", "", "x"], ["final", "scans"], name="loop", body=body),
             helper.make_node("Sigmoid", ["scans"], ["y"], name="sigmoid")]
    step = numpy_helper.from_array(np.ones(3, np.float32), "step")
    model = _model(nodes, [("x", F, [3]), ("n", TensorProto.INT64, [])], ["final", "y"], [step])
    for n in (1, 4):
        m = _check(model, {"x": np.array([-1, 0.5, 2], np.float32), "n": np.array(n, np.int64)})
        assert m.run({"x": np.zeros(3, np.float32), "n": np.array(n, np.int64)})["y"].shape == (n, 3)
        assert not _calls(m.graph) and "Loop" in m.graph.op_histogram()


def test_a_sequence_crosses_into_and_out_of_an_onnx_runtime_group():
    """An optional of a sequence stays on ONNX Runtime (optionals.py reads only those of
    tensors): the sequence SequenceConstruct makes here goes in as a list, and the one
    OptionalGetElement gives comes back as one, into ConcatFromSequence here."""
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("SequenceConstruct", ["a", "x"], ["s"], name="seq"),
             helper.make_node("Optional", ["s"], ["o"], name="optional",
                              type=helper.make_optional_type_proto(seq_type)),
             helper.make_node("OptionalGetElement", ["o"], ["t"], name="get"),
             helper.make_node("ConcatFromSequence", ["t"], ["c"], name="cat", axis=0),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid")]
    model = _model(nodes, [("x", F, [2, 3])], ["y"])
    for backend in ("auto", "torch"):
        m = _check(model, {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)},
                   backend=backend)
        call, = _calls(m.graph)
        assert call.attr("ops") == ["Optional", "OptionalGetElement"]
        assert {"SequenceConstruct", "ConcatFromSequence"} <= {n.op_type for n in m.graph.nodes}


PAIR = helper.make_function("my.ops", "Pair", ["a", "b"], ["y"], [helper.make_node("Mul", ["a", "b"], ["y"])],
                            [helper.make_opsetid("", 18)])


def test_a_group_that_would_wait_on_itself_is_split():
    """Swish -> Relu -> Pair(Swish's output, Relu's): one group {Swish, Pair} would need Relu's
    output, which needs the group's."""
    nodes = [swish("x", "l", "swish"),
             helper.make_node("Relu", ["l"], ["r"], name="relu"),
             helper.make_node("Pair", ["l", "r"], ["y"], name="pair", domain="my.ops")]
    model = _model(nodes, [("x", F, [1, 3, 4, 4])], ["y"])
    model.functions.append(PAIR)
    m = _check(model, {"x": np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)})
    assert sorted(n.attr("ops") for n in _calls(m.graph)) == [["my.ops::Pair"], ["my.ops::Swish"]]


def test_an_optional_of_a_sequence_leaving_the_graph_is_refused_naming_the_node():
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2]))
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"], name="seq"),
             helper.make_node("Optional", ["s"], ["y"], name="optional",
                              type=helper.make_optional_type_proto(seq_type))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                          [helper.make_value_info("y", helper.make_optional_type_proto(seq_type))])
    with pytest.raises(UnsupportedOpError, match="Optional: value 'y' is a optional.*'optional'"):
        autofusion.compile(helper.make_model(g, opset_imports=OPSET))


def test_the_fused_model_exports_with_the_original_nodes_and_onnx_runtime_runs_it():
    m = autofusion.compile(ml_model())
    exported = autofusion.export_onnx(m.graph)
    assert "Binarizer" in [n.op_type for n in exported.graph.node]
    np.testing.assert_allclose(_ort(exported, FEATURES)[0], _ort(ml_model(), FEATURES)[0])
    assert [n.attr("ops") for n in _calls(import_onnx(exported))] == [["ai.onnx.ml::Binarizer"]]


def test_the_command_line_runs_it_and_strict_refuses_it(tmp_path, capsys):
    path = tmp_path / "binarizer.onnx"
    onnx.save(ml_model(), path)
    assert main(["compile", str(path)]) == 0
    assert "Runs on ONNX Runtime: ai.onnx.ml::Binarizer ×1" in capsys.readouterr().out
    assert main(["run", str(path), "--compare-ort"]) == 0
    assert "y: max abs diff 0," in capsys.readouterr().out
    assert main(["run", str(path), "--strict"]) == 2
    assert "ai.onnx.ml::Binarizer (1x): 'binarizer'" in capsys.readouterr().err
    assert main(["info", str(path)]) == 0
    assert "runs on ONNX Runtime (no kernel here; --strict refuses these):\n  ai.onnx.ml::Binarizer: binarizer" in \
        capsys.readouterr().out
