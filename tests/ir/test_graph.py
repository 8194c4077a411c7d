"""The IR: building, mutating, ordering, verify() and the text form."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autofusion.errors import GraphError
from autofusion.ir import (DType, Graph, Node, OpClass, Value, broadcast_shapes, lookup, ops_of_class,
                           verify)


def small_graph() -> Graph:
    g = Graph("g")
    x = g.add_input("x", ("N", 4), DType.FLOAT)
    w = g.add_constant("w", np.ones((4, 4), np.float32))
    mm = g.add_node("MatMul", [x, w], ["h"], name="mm")
    r = g.add_node("Relu", [mm.outputs[0]], ["y"], name="relu")
    g.outputs.append(r.outputs[0])
    return g


def test_text_form_is_readable_and_deterministic():
    g = small_graph()
    assert str(g) == (
        "graph g(x: float[N,4]) -> (y: ?[...])\n"
        "  const w: float[4,4]\n"
        "  h: ?[...] = MatMul(x, w)\n"
        "  y: ?[...] = Relu(h)")
    verify(g)


def test_producer_and_users_are_linked():
    g = small_graph()
    mm, relu = g.nodes
    assert mm.outputs[0].producer is mm
    assert mm.outputs[0].users == [relu]
    assert g.inputs[0].users == [mm]


def test_replace_all_uses_then_remove():
    g = small_graph()
    mm, relu = g.nodes
    x = g.inputs[0]
    g.replace_all_uses(relu.outputs[0], mm.outputs[0])  # graph output now reads h
    g.remove(relu)
    verify(g)
    assert [n.op_type for n in g.nodes] == ["MatMul"]
    assert g.outputs == [mm.outputs[0]]
    assert x.users == [mm]


def test_remove_refuses_a_node_still_in_use():
    g = small_graph()
    with pytest.raises(GraphError, match="still used"):
        g.remove(g.nodes[0])


def test_nodes_come_out_in_topological_order_whatever_the_insertion_order():
    g = Graph()
    x = g.add_input("x", (2,), DType.FLOAT)
    a, b = Value("a"), Value("b")
    g.insert(Node("Relu", [a], [b], name="second"))
    g.insert(Node("Neg", [x], [a], name="first"))
    g.outputs.append(b)
    assert [n.name for n in g.nodes] == ["first", "second"]
    verify(g)


def test_verify_catches_a_cycle():
    g = Graph()
    a, b = Value("a"), Value("b")
    g.insert(Node("Relu", [a], [b], name="n1"))
    g.insert(Node("Relu", [b], [a], name="n2"))
    with pytest.raises(GraphError, match="cycle"):
        verify(g)


def test_verify_catches_an_unknown_op_and_an_undefined_input():
    g = Graph()
    x = g.add_input("x", (2,), DType.FLOAT)
    g.add_node("NoSuchOp", [x], name="weird")
    with pytest.raises(GraphError, match="'weird'.*not in the op table"):
        verify(g)
    g2 = Graph()
    g2.add_node("Relu", [Value("ghost")], name="r")
    with pytest.raises(GraphError, match="'ghost'.*not defined"):
        verify(g2)


def test_a_value_cannot_be_defined_twice():
    g = Graph()
    g.add_input("x", (2,), DType.FLOAT)
    with pytest.raises(GraphError, match="defined twice"):
        g.add_constant("x", np.zeros(2, np.float32))


def test_fresh_names_never_collide():
    g = small_graph()
    assert g.fresh_name("h") == "h_1"
    assert g.fresh_name("new") == "new"


def test_op_classes_are_ordered_and_derived_from_the_table():
    assert OpClass.ELEMWISE < OpClass.BROADCAST < OpClass.INJECTIVE < OpClass.REDUCTION \
        < OpClass.COMPLEX < OpClass.OPAQUE
    assert max(OpClass.ELEMWISE, OpClass.COMPLEX) == OpClass.COMPLEX
    assert "Relu" in ops_of_class(OpClass.ELEMWISE)
    assert "Conv" in ops_of_class(OpClass.COMPLEX)
    assert lookup("", "Add").commutative and not lookup("", "Sub").commutative


def test_shape_rules():
    g = Graph()
    a = g.add_input("a", ("N", 1, 8), DType.FLOAT)
    b = g.add_input("b", (3, 1), DType.FLOAT)
    add = g.add_node("Add", [a, b])
    assert lookup("", "Add").infer(add) == [(("N", 3, 8), DType.FLOAT)]
    eq = g.add_node("Equal", [a, b])
    assert lookup("", "Equal").infer(eq) == [(("N", 3, 8), DType.BOOL)]
    w = g.add_input("w", (8, 5), DType.FLOAT)
    mm = g.add_node("MatMul", [a, w])
    assert lookup("", "MatMul").infer(mm) == [(("N", 1, 5), DType.FLOAT)]
    t = g.add_node("Transpose", [a], attrs={"perm": [2, 0, 1]})
    assert lookup("", "Transpose").infer(t) == [((8, "N", 1), DType.FLOAT)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 4), min_size=0, max_size=4), min_size=1, max_size=3))
def test_broadcast_matches_numpy(shapes):
    shapes = [tuple(s) for s in shapes]
    try:
        want = np.broadcast_shapes(*shapes)
    except ValueError:
        with pytest.raises(ValueError):
            broadcast_shapes(*shapes)
        return
    assert broadcast_shapes(*shapes) == want


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_random_chains_stay_valid_under_mutation(data):
    """Build a random DAG of unary/binary ops, bypass random nodes, and verify() each time."""
    g = Graph()
    vals = [g.add_input("x0", (4,), DType.FLOAT), g.add_input("x1", (4,), DType.FLOAT)]
    for _ in range(data.draw(st.integers(1, 12))):
        if data.draw(st.booleans()):
            n = g.add_node("Relu", [data.draw(st.sampled_from(vals))])
        else:
            n = g.add_node("Add", [data.draw(st.sampled_from(vals)), data.draw(st.sampled_from(vals))])
        vals.append(n.outputs[0])
    g.outputs.append(vals[-1])
    verify(g)
    for node in list(g.nodes):
        if node.op_type == "Relu" and data.draw(st.booleans()):
            g.replace_all_uses(node.outputs[0], node.inputs[0])
            g.remove(node)
            verify(g)


def test_reshape_and_expand_shape_rules_read_constant_shapes():
    g = Graph()
    x = g.add_input("x", (2, 3, 4), DType.FLOAT)
    r = g.add_node("Reshape", [x, g.add_constant("s", np.array([0, -1], np.int64))])
    assert lookup("", "Reshape").infer(r) == [((2, 12), DType.FLOAT)]
    y = g.add_input("y", ("N", 1, 4), DType.FLOAT)
    e = g.add_node("Expand", [y, g.add_constant("t", np.array([5, 4], np.int64))])
    assert lookup("", "Expand").infer(e) == [(("N", 5, 4), DType.FLOAT)]
