"""If, Loop and Scan import as autofusion's own ops: bodies are IR Graphs, what a body reads
from outside is a captured input of the body and of the node (a constant moves into the body),
nested bodies capture through each level, types come from ONNX's inference on each body."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from autofusion.errors import GraphError, ModelLoadError, UnsupportedOpError
from autofusion.frontend import import_onnx
from autofusion.ir import Graph, Value, format_graph, verify
from autofusion.ir.builder import infer_types
from autofusion.ir.control_flow import bodies, captured_inputs, formal_inputs
from autofusion.ir.onnx_runtime_call import ORT_KEY

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, t=F, shape=None):
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def the(graph: Graph, op: str):
    node, = [n for n in graph.nodes if n.op_type == op]
    return node


def loop_body(nodes, carried, outputs, name="body"):
    return helper.make_graph(nodes, name, [vi("i", I64, []), vi("cond_in", BOOL, []), *carried],
                             [vi("cond_out", BOOL, []), *outputs])


def test_a_loop_body_reads_outer_values_as_captured_inputs_and_outer_constants_as_its_own():
    w = numpy_helper.from_array(np.full((3,), 2.0, np.float32), "w")
    body = loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                      helper.make_node("Add", ["acc_in", "r"], ["sum"]),
                      helper.make_node("Mul", ["sum", "w"], ["acc_out"])],
                     [vi("acc_in", F, [3])], [vi("acc_out", F, [3])])
    m = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)],
              [vi("x", F, [3]), vi("n", I64, [])], [vi("y")], [w])
    g = import_onnx(m)
    verify(g)
    loop = the(g, "Loop")
    assert [None if v is None else v.name for v in loop.inputs] == ["n", None, "x", "r"]
    assert [v.name for v in captured_inputs(loop)] == ["r"] and loop.attrs["captured"] == 1
    body = loop.attrs["body"]
    verify(body)
    assert format_graph(body).splitlines() == [
        ("graph body(i: int64[], cond_in: bool[], acc_in: float[3], r: float[3]) -> "
         "(cond_out: bool[], acc_out: float[3])"),
        "  const w: float[3]",
        "  cond_out: bool[] = Identity(cond_in)",
        "  sum: float[3] = Add(acc_in, r)",
        "  acc_out: float[3] = Mul(sum, w)"]
    assert body.constants["w"].const is g.constants["w"].const   # the same data, not a copy
    assert not any(n.op == ORT_KEY for n in g.nodes)


def test_if_branches_take_the_same_captured_inputs_each_reading_those_it_needs():
    then = helper.make_graph([helper.make_node("Neg", ["a"], ["t"])], "then", [], [vi("t", F, [2])])
    other = helper.make_graph([helper.make_node("Abs", ["b"], ["e"])], "else", [], [vi("e", F, [2])])
    m = model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
               helper.make_node("Sigmoid", ["x"], ["b"], name="sigmoid"),
               helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
              [vi("x", F, [2]), vi("c", BOOL, [])], [vi("y")])
    g = import_onnx(m)
    node = the(g, "If")
    assert [v.name for v in node.inputs] == ["c", "a", "b"]
    then_g, else_g = node.attrs["then_branch"], node.attrs["else_branch"]
    assert [v.name for v in then_g.inputs] == ["a", "b"] and [v.name for v in else_g.inputs] == ["a", "b"]
    assert [n.op_type for n in then_g.inputs[0].users] == ["Neg"]
    assert not then_g.inputs[1].uses and not else_g.inputs[0].uses
    verify(g)


def nested_model():
    """If(c) then: Loop (reads x from the main graph, and k from the branch) else: Identity(x)."""
    body = loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                      helper.make_node("Add", ["acc_in", "x"], ["s"]),
                      helper.make_node("Mul", ["s", "k"], ["acc_out"])],
                     [vi("acc_in", F, [2])], [vi("acc_out", F, [2])], name="inner")
    then = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["k"]),
                              helper.make_node("Loop", ["n", "", "x"], ["t"], name="loop", body=body)],
                             "then", [], [vi("t", F, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, [2])])
    return model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                 [vi("x", F, [2]), vi("c", BOOL, []), vi("n", I64, [])], [vi("y")])


def test_a_loop_in_an_if_captures_through_each_level():
    g = import_onnx(nested_model())
    node = the(g, "If")
    assert [v.name for v in node.inputs] == ["c", "x", "n"]
    then = node.attrs["then_branch"]
    loop = the(then, "Loop")
    x_in_branch = then.inputs[0]
    assert loop.inputs[0] is then.inputs[1]                      # n, read by the Loop node itself
    assert captured_inputs(loop) == [x_in_branch, the(then, "Sigmoid").outputs[0]]
    inner = loop.attrs["body"]
    assert [v.name for v in inner.inputs] == ["i", "cond_in", "acc_in", "x", "k"]
    for graph in (g, then, inner, node.attrs["else_branch"]):
        verify(graph)


def test_a_loop_carried_value_that_grows_gets_the_dims_every_iteration_agrees_on():
    row = numpy_helper.from_array(np.ones((1, 3), np.float32), "row")
    body = loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                      helper.make_node("Concat", ["acc_in", "row"], ["acc_out"], axis=0)],
                     [vi("acc_in", F, None)], [vi("acc_out", F, None)])
    m = model([helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)],
              [vi("x", F, [1, 3]), vi("n", I64, [])], [vi("y")], [row])
    body = the(import_onnx(m), "Loop").attrs["body"]
    assert body.inputs[2].shape == (None, 3)          # [1,3], then [2,3], ...: rows unknown
    assert body.outputs[1].shape == (None, 3)


def test_scan_slices_are_typed_from_the_scan_inputs_and_outputs_stack_on_their_axes():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "a"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "b"], ["o"])], "body",
                             [vi("s_in"), vi("a"), vi("b")], [vi("s_out"), vi("o")])
    m = model([helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "ys"], name="scan", body=body,
                                num_scan_inputs=2, scan_input_axes=[0, 1], scan_output_axes=[1],
                                scan_input_directions=[0, 1])],
              [vi("s0", F, [4]), vi("xa", F, [5, 4]), vi("xb", F, [4, 5])], [vi("s"), vi("ys")])
    g = import_onnx(m)
    scan = the(g, "Scan")
    assert [v.shape for v in scan.attrs["body"].inputs] == [(4,), (4,), (4,)]
    infer_types(scan)   # the op table's rule: the scan output [4] stacked at axis 1, 5 long
    assert [v.shape for v in scan.outputs] == [(4,), (4, 5)]


def test_an_if_whose_branches_differ_in_shape_has_the_merged_shape():
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", F, [2, 3])])
    other = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=1)], "else", [],
                              [vi("e", F, [2, 6])])
    g = import_onnx(model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                          [vi("x", F, [2, 3]), vi("c", BOOL, [])], [vi("y")]))
    node = the(g, "If")
    infer_types(node)
    assert node.outputs[0].shape == (2, None)


def test_a_body_with_an_op_without_a_kernel_keeps_its_node_on_onnx_runtime_and_strict_refuses_it():
    body = loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                      helper.make_node("Binarizer", ["acc_in"], ["acc_out"], domain="ai.onnx.ml")],
                     [vi("acc_in", F, [3])], [vi("acc_out", F, [3])])
    g = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)], "g",
                          [vi("x", F, [3]), vi("n", I64, [])], [vi("y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)])
    call, = import_onnx(m).nodes
    assert call.op == ORT_KEY and call.attr("ops") == ["Loop"]
    with pytest.raises(UnsupportedOpError, match=r"ai.onnx.ml::Binarizer \(in a subgraph body\)"):
        import_onnx(m, strict=True)


def test_control_flow_nodes_list_their_bodies_and_formal_inputs():
    g = import_onnx(nested_model())
    node = the(g, "If")
    assert [k for k, _ in bodies(node)] == ["then_branch", "else_branch"]
    assert [v.name for v in formal_inputs(node)] == ["c"]
    assert bodies(the(node.attrs["then_branch"], "Sigmoid")) == []


def test_verify_checks_each_body_and_the_captured_inputs_matching_them():
    g = import_onnx(nested_model())
    verify(g)
    node = the(g, "If")
    node.attrs["captured"] = 1   # the branches take two captured inputs
    with pytest.raises(GraphError, match=r"node 'if' \(If\): its 1 captured input\(s\) do not match"):
        verify(g)
    node.attrs["captured"] = 2
    inner = the(node.attrs["then_branch"], "Loop").attrs["body"]
    inner.outputs.append(Value("stray"))
    with pytest.raises(GraphError, match="graph output 'stray' is not defined"):
        verify(g)


def test_a_node_inside_a_body_that_breaks_its_schema_is_refused_naming_it():
    body = loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                      helper.make_node("Softmax", ["acc_in"], ["acc_out"], name="softmax", axis=0, bogus=1)],
                     [vi("acc_in", F, [3])], [vi("acc_out", F, [3])])
    m = model([helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)],
              [vi("x", F, [3]), vi("n", I64, [])], [vi("y")])
    with pytest.raises(ModelLoadError, match=r"node 'softmax' \(Softmax\): .*bogus"):
        import_onnx(m)


def test_a_carried_value_declared_static_that_grows_is_not_taken_at_its_word():
    """The body declares acc_in [1, 3], but each iteration adds a row: its rows are unknown, so
    no pass folds Shape(acc_in) into the constant [1, 3]."""
    row = numpy_helper.from_array(np.ones((1, 3), np.float32), "row")
    body = loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                      helper.make_node("Concat", ["acc_in", "row"], ["acc_out"], axis=0)],
                     [vi("acc_in", F, [1, 3])], [vi("acc_out", F, None)])
    m = model([helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)],
              [vi("x", F, [1, 3]), vi("n", I64, [])], [vi("y")], [row])
    body = the(import_onnx(m), "Loop").attrs["body"]
    assert body.inputs[2].shape == (None, 3)
