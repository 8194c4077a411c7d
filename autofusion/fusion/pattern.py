"""Patterns that read like the math they match, and the matcher.

A pattern is written as a Python function over an op builder and named variables:

    def gelu_erf(op, x):
        return 0.5 * x * (1 + op.Erf(x / SQRT2))

Calling it with pattern variables traces a small DAG of NodePats. `op.Conv(x, w, b, _name="conv")`
binds the matched node under a name; keyword arguments are attribute conditions (a value, or a
predicate over the attribute); a Python number is a constant that matches a graph constant whose
every element equals it (within 1e-6 relative). A variable whose parameter defaults to None is
optional: it also matches an omitted input. `op.Optional.Cast(x)` matches a Cast or nothing, so a
rule can see through ops that may or may not be there.

The matcher walks the pattern from its output back towards its inputs, yielding every consistent
binding (commutative ops from the op table are tried both ways round); a variable seen twice must
bind the same value, a pattern node reached twice the same graph node.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import onnx

from ..ir import Node, Value, lookup


class Pat:
    """A value in a pattern. Arithmetic operators build the ONNX ops they denote."""

    def __add__(self, o): return _binary("Add", self, o)
    def __radd__(self, o): return _binary("Add", o, self)
    def __sub__(self, o): return _binary("Sub", self, o)
    def __rsub__(self, o): return _binary("Sub", o, self)
    def __mul__(self, o): return _binary("Mul", self, o)
    def __rmul__(self, o): return _binary("Mul", o, self)
    def __truediv__(self, o): return _binary("Div", self, o)
    def __rtruediv__(self, o): return _binary("Div", o, self)
    def __pow__(self, o): return _binary("Pow", self, o)
    def __matmul__(self, o): return _binary("MatMul", self, o)


@dataclass(eq=False)
class Var(Pat):
    name: str
    optional: bool = False   # also matches an omitted input

    def __repr__(self):
        return self.name


@dataclass(eq=False)
class Const(Pat):
    value: float

    def __repr__(self):
        return repr(self.value)


@dataclass(eq=False)
class NodePat:
    op_type: str
    inputs: list[Pat]
    attrs: dict[str, Any]
    domain: str = ""
    name: str | None = None
    optional: bool = False   # may be absent: then its output is its first input


@dataclass(eq=False)
class Out(Pat):
    node: NodePat
    index: int = 0

    def __repr__(self):
        return f"{self.node.op_type}(...)"


def _as_pat(x) -> Pat:
    if isinstance(x, Pat):
        return x
    if isinstance(x, (int, float)):
        return Const(float(x))
    raise TypeError(f"cannot use {x!r} in a pattern")


def _binary(op_type: str, a, b) -> Out:
    return Out(NodePat(op_type, [_as_pat(a), _as_pat(b)], {}))


class PatternBuilder:
    """`op.Relu(x)` in a pattern function; `op.Optional.Cast(x)` for an op that may be absent."""

    def __init__(self, optional: bool = False):
        self._optional = optional

    @property
    def Optional(self) -> PatternBuilder:  # noqa: N802 - reads as op.Optional.Cast(x)
        return PatternBuilder(optional=True)

    def __getattr__(self, op_type: str) -> Callable[..., Out | tuple[Out, ...]]:
        if op_type.startswith("_"):
            raise AttributeError(op_type)

        def make(*inputs, _name: str | None = None, _domain: str = "", _outputs: int = 1, **attrs):
            node = NodePat(op_type, [_as_pat(i) for i in inputs], attrs, _domain, _name, self._optional)
            outs = tuple(Out(node, i) for i in range(_outputs))
            return outs[0] if _outputs == 1 else outs
        return make


@dataclass
class Pattern:
    """A traced pattern: its variables (in parameter order) and its output."""
    fn: Callable
    vars: list[Var]
    output: Out

    @staticmethod
    def trace(fn: Callable) -> Pattern:
        params = list(inspect.signature(fn).parameters.values())[1:]  # first is `op`
        vars_ = [Var(p.name, optional=p.default is None) for p in params]
        out = fn(PatternBuilder(), *vars_)
        if not isinstance(out, Out) or out.node.optional:
            raise TypeError(f"pattern {fn.__name__} must end in a (non-optional) op")
        return Pattern(fn, vars_, out)

    @property
    def root_op(self) -> tuple[str, str]:
        return self.output.node.domain, self.output.node.op_type

    @functools.cached_property
    def root_producers(self) -> frozenset[tuple[str, str]]:
        """The ops that must make one of the root's inputs (those no `optional` lets go): a
        node whose inputs come from none of them cannot match, checked before matching."""
        return frozenset((i.node.domain, i.node.op_type) for i in self.output.node.inputs
                         if isinstance(i, Out) and not i.node.optional)

    def node_pats(self) -> list[NodePat]:
        """The pattern's ops, inputs before users."""
        order: dict[int, NodePat] = {}

        def walk(p: Pat):
            if isinstance(p, Out) and id(p.node) not in order:
                for i in p.node.inputs:
                    walk(i)
                order[id(p.node)] = p.node
        walk(self.output)
        return list(order.values())

    def describe(self) -> str:
        """E.g. "Conv+BatchNormalization+Relu?" (? marks an op that may be absent)."""
        return "+".join(n.op_type + ("?" if n.optional else "") for n in self.node_pats())


@dataclass
class Match:
    """A successful structural match: variable bindings and named/matched nodes."""
    values: dict[str, Value | None] = field(default_factory=dict)
    nodes: dict[int, Node] = field(default_factory=dict)     # id(NodePat) -> Node
    named: dict[str, Node] = field(default_factory=dict)
    root: Node | None = None

    def __getattr__(self, name: str):
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def node(self, name: str) -> Node:
        return self.named[name]

    def has(self, name: str) -> bool:
        return name in self.named

    @property
    def matched_nodes(self) -> list[Node]:
        return list(dict.fromkeys(self.nodes.values()))

    def copy(self) -> Match:
        return Match(dict(self.values), dict(self.nodes), dict(self.named), self.root)


def const_equals(v: Value, c: float, rtol: float = 1e-6) -> bool:
    data = v.const
    if data is None or data.dtype == np.object_ or data.size == 0:
        return False
    data = np.asarray(data, dtype=np.float64)
    return bool(np.all(np.abs(data - c) <= rtol * max(abs(c), 1e-30)))


@functools.lru_cache(maxsize=None)
def schema_default(domain: str, op_type: str, version: int, key: str) -> Any:
    """An attribute's default from the ONNX schema (None where there is none)."""
    try:
        attr = onnx.defs.get_schema(op_type, version, domain).attributes[key]
    except (onnx.defs.SchemaError, KeyError):
        return None
    if not attr.default_value.name:
        return None
    value = onnx.helper.get_attribute_value(attr.default_value)
    return value.decode() if isinstance(value, bytes) else value


def attr_value(node: Node, key: str) -> Any:
    """The node's attribute, or the schema's default when the node leaves it out."""
    if key in node.attrs:
        return node.attrs[key]
    version = node.graph.opset.get(node.domain, 1) if node.graph is not None else 21
    return schema_default(node.domain, node.op_type, version, key)


def _attr_ok(node: Node, key: str, want: Any) -> bool:
    have = attr_value(node, key)
    if callable(want):
        return bool(want(have))
    if isinstance(want, (list, tuple)):
        return have is not None and list(have) == list(want)
    return have == want


def match_value(p: Pat, v: Value | None, m: Match) -> Iterator[Match]:
    if isinstance(p, Var):
        if v is None and not p.optional:
            return
        if p.name in m.values:
            if m.values[p.name] is v:
                yield m
            return
        m2 = m.copy()
        m2.values[p.name] = v
        yield m2
    elif isinstance(p, Const):
        if v is not None and const_equals(v, p.value):
            yield m
    elif isinstance(p, Out):
        node = v.producer if v is not None else None
        if node is not None and node.outputs[p.index] is v:
            yield from match_node(p.node, node, m)    # greedy: with the op first
        if p.node.optional and p.node.inputs:
            yield from match_value(p.node.inputs[0], v, m)   # then without it


def match_node(p: NodePat, node: Node, m: Match) -> Iterator[Match]:
    bound = m.nodes.get(id(p))
    if bound is not None:
        if bound is node:
            yield m
        return
    if node.op_type != p.op_type or node.domain != p.domain:
        return
    if any(not _attr_ok(node, k, w) for k, w in p.attrs.items()):
        return
    inputs = list(node.inputs)
    if len(inputs) > len(p.inputs):
        return
    inputs += [None] * (len(p.inputs) - len(inputs))
    m = m.copy()
    m.nodes[id(p)] = node
    if p.name:
        m.named[p.name] = node
    orders = [p.inputs]
    opdef = lookup(node.domain, node.op_type)
    if opdef is not None and opdef.commutative and len(p.inputs) == 2 and inputs[0] is not inputs[1]:
        orders.append(p.inputs[::-1])
    for pats in orders:
        yield from _match_inputs(pats, inputs, m)


def _match_inputs(pats: list[Pat], values: list[Value | None], m: Match) -> Iterator[Match]:
    if not pats:
        yield m
        return
    for m2 in match_value(pats[0], values[0], m):
        yield from _match_inputs(pats[1:], values[1:], m2)


def match_at(pattern: Pattern, node: Node) -> Iterator[Match]:
    """Every structural match of the pattern whose output node is `node`."""
    if pattern.root_producers:
        made_by = {(v.producer.domain, v.producer.op_type) for v in node.inputs
                   if v is not None and v.producer is not None}
        if not pattern.root_producers <= made_by:
            return
    for m in match_node(pattern.output.node, node, Match()):
        m.root = node
        yield m


def interior_escapes(m: Match, graph_outputs: list[Value]) -> tuple[Value, Node | None] | None:
    """An intermediate value of the match used outside it (so the match cannot be fused away)."""
    inside = set(map(id, m.matched_nodes))
    outs = {id(o) for o in graph_outputs}
    for node in m.matched_nodes:
        if node is m.root:
            continue
        for v in node.outputs:
            if id(v) in outs:
                return v, None
            for user in v.users:
                if id(user) not in inside:
                    return v, user
    return None


__all__ = ["Pat", "Var", "Const", "NodePat", "Out", "Pattern", "PatternBuilder", "Match",
           "match_at", "interior_escapes", "const_equals"]
