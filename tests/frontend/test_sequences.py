"""Tensor sequences at import and export: sequence-typed graph inputs, outputs, intermediate values
and body values become IR sequences (Value.sequence), strict accepts them, the clean-up passes
never fold or treat them as tensors, and the fused file writes them back as ONNX sequence types.
(The SplitToSequence → Split rewrite is tested in test_onnx_import.py; running the ops, in
tests/backend/test_sequences.py.)"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend.executor import evaluate_node
from autofusion.frontend import import_onnx
from autofusion.fusion.pipeline import cleanup
from autofusion.ir import verify

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _construct_model():
    nodes = [helper.make_node("SequenceInsert", ["s", "x"], ["t"], name="insert"),
             helper.make_node("SequenceAt", ["t", "p"], ["y"], name="at")]
    return _model(nodes, [helper.make_tensor_sequence_value_info("s", F, ["N", 3]),
                          helper.make_tensor_value_info("x", F, [2, 3]),
                          helper.make_tensor_value_info("p", I64, [])],
                  [helper.make_tensor_sequence_value_info("t", F, None),
                   helper.make_tensor_value_info("y", F, None)])


def test_sequence_values_import_typed_and_strict_accepts_them():
    graph = import_onnx(_construct_model(), strict=True)
    verify(graph)
    s = graph.inputs[0]
    # a symbolic dim of an element binds nothing across elements: unknown
    assert s.type_str() == "seq(float[?,3])" and s.shape is None and s.dtype is None
    assert str(graph).splitlines()[1:] == [
        "  t: seq(float[?,3]) = SequenceInsert(s, x)",
        "  y: float[?,3] = SequenceAt(t, p)"]


def _loop_model(declare_body_input: bool):
    seq_in = helper.make_tensor_sequence_value_info("s_in", F, None) if declare_body_input else \
        helper.make_value_info("s_in", helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None)))
    body = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                 seq_in],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_out", F, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("M", I64, [])],
                  [helper.make_tensor_value_info("y", F, None)])


def test_a_loop_body_carrying_a_sequence_imports_as_an_ir_graph():
    for declared in (True, False):
        graph = import_onnx(_loop_model(declared), strict=True)
        verify(graph)
        loop = next(n for n in graph.nodes if n.op_type == "Loop")
        body = loop.attrs["body"]
        assert body.inputs[2].sequence is not None and body.outputs[1].sequence is not None
        assert loop.outputs[0].type_str().startswith("seq(float")
        assert graph.nodes[-1].outputs[0].dtype == autofusion.ir.DType.FLOAT


def test_a_sequence_map_body_takes_an_element_of_each_sequence():
    body = helper.make_graph([helper.make_node("Add", ["e", "b"], ["y"])], "map_body",
                             [helper.make_tensor_value_info("e", F, None), helper.make_tensor_value_info("b", F, [3])],
                             [helper.make_tensor_value_info("y", F, None)])
    model = _model([helper.make_node("SequenceMap", ["s", "b"], ["t"], body=body)],
                   [helper.make_tensor_sequence_value_info("s", F, [2, 3]), helper.make_tensor_value_info("b", F, [3])],
                   [helper.make_tensor_sequence_value_info("t", F, None)])
    graph = import_onnx(model, strict=True)
    verify(graph)
    node, = graph.nodes
    e, b = node.attrs["body"].inputs
    assert (e.sequence, e.shape, b.shape) == (None, (2, 3), (3,))   # one element; the tensor whole
    assert node.outputs[0].type_str() == "seq(float[2,3])"


def test_clean_up_never_folds_a_sequence_and_removes_dead_ones():
    one = numpy_helper.from_array(np.ones(3, np.float32), "one")
    nodes = [helper.make_node("SequenceConstruct", ["one", "one"], ["s"]),     # constant inputs
             helper.make_node("SequenceConstruct", ["one", "one"], ["s_twin"]),
             helper.make_node("SequenceEmpty", [], ["dead"]),
             helper.make_node("ConcatFromSequence", ["s"], ["a"], axis=0),
             helper.make_node("ConcatFromSequence", ["s_twin"], ["b"], axis=0),
             helper.make_node("Add", ["a", "b"], ["y"])]
    graph = import_onnx(_model(nodes, [], [helper.make_tensor_value_info("y", F, None)], [one]), strict=True)
    cleanup(graph, evaluate_node, {})
    verify(graph)
    hist = graph.op_histogram()
    assert hist.get("SequenceConstruct") == 1 and "SequenceEmpty" not in hist   # CSE merged, dead gone
    assert hist.get("ConcatFromSequence") == 1   # never folded: a sequence is no constant
    np.testing.assert_array_equal(autofusion.compile(graph).run({})["y"], np.full(6, 2, np.float32))


def test_export_writes_sequence_types_and_reads_back_the_same_graph():
    for model in (_construct_model(), _loop_model(True)):
        compiled = autofusion.compile(model, strict=True)
        exported = autofusion.export_onnx(compiled.graph)
        kinds = {vi.name: vi.type.WhichOneof("value")
                 for vi in [*exported.graph.input, *exported.graph.output, *exported.graph.value_info]}
        assert kinds.get("s") == "sequence_type" or kinds.get("t") == "sequence_type"
        again = import_onnx(exported, strict=True)
        verify(again)
        assert [v.type_str() for v in again.inputs] == [v.type_str() for v in compiled.graph.inputs]
