"""The pattern language and matcher: variables, constants, commutativity, optional ops."""
from __future__ import annotations

import numpy as np

from autofusion.fusion.pattern import Pattern, match_at
from autofusion.ir import DType, Graph


def graph_with(*ops):
    """A graph from (op, inputs, attrs) triples; names a, b, ... are the results."""
    g = Graph()
    vals = {"x": g.add_input("x", (4,), DType.FLOAT), "y": g.add_input("y", (4,), DType.FLOAT),
            "two": g.add_constant("two", np.full((1,), 2.0, np.float32))}
    for i, (op, ins, attrs) in enumerate(ops):
        vals[chr(ord("a") + i)] = g.add_node(op, [vals[n] for n in ins], attrs=attrs, name=chr(ord("a") + i)).outputs[0]
    g.outputs.append(vals[chr(ord("a") + len(ops) - 1)])
    return g


def matches(fn, g):
    return list(match_at(Pattern.trace(fn), g.nodes[-1]))


def test_variables_bind_consistently():
    def square(op, v):
        return v * v
    assert len(matches(square, graph_with(("Mul", "xx", {})))) == 1
    assert matches(square, graph_with(("Mul", "xy", {}))) == []


def test_constants_match_by_value_and_commutative_ops_both_ways():
    def double(op, v):
        return v * 2
    [m] = matches(double, graph_with(("Mul", ["two", "x"], {})))
    assert m.v.name == "x"
    assert matches(lambda op, v: v * 3, graph_with(("Mul", ["x", "two"], {}))) == []


def test_non_commutative_ops_keep_their_order():
    def halve(op, v):
        return v / 2
    assert matches(halve, graph_with(("Div", ["two", "x"], {}))) == []
    assert len(matches(halve, graph_with(("Div", ["x", "two"], {})))) == 1


def test_attribute_conditions_and_schema_defaults():
    def softmax_last(op, v):
        return op.Softmax(v, axis=-1)
    assert len(matches(softmax_last, graph_with(("Softmax", "x", {})))) == 1   # default axis -1 (opset 21)
    assert matches(softmax_last, graph_with(("Softmax", "x", {"axis": 0}))) == []
    def leaky_small(op, v):
        return op.LeakyRelu(v, alpha=lambda a: a < 0.1)
    assert len(matches(leaky_small, graph_with(("LeakyRelu", "x", {})))) == 1   # default 0.01


def test_optional_op_matches_with_and_without_it():
    def relu_of_maybe_cast(op, v):
        return op.Relu(op.Optional.Cast(v, _name="cast"))
    m = matches(relu_of_maybe_cast, graph_with(("Cast", "x", {"to": 1}), ("Relu", "a", {})))[0]
    assert m.has("cast") and m.v.name == "x"   # the greedy match comes first
    [m] = matches(relu_of_maybe_cast, graph_with(("Relu", "x", {})))
    assert not m.has("cast") and m.v.name == "x"


def test_optional_input_matches_an_omitted_one():
    def clip(op, v, lo=None):
        return op.Clip(v, lo)
    [m] = matches(clip, graph_with(("Clip", "x", {})))
    assert m.lo is None


def test_pattern_describes_itself():
    def chain(op, v):
        return op.Relu(op.Optional.BatchNormalization(op.Conv(v, v)))
    assert Pattern.trace(chain).describe() == "Conv+BatchNormalization?+Relu"
