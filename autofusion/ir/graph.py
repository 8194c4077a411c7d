"""The IR: Graph, Node, Value.

A Value is a tensor edge: name, shape (ints, symbolic names, None for unknown), dtype, the node
that produces it (None for graph inputs and constants), the nodes that use it, and its data when
it is a constant; or a sequence of tensors (`Value.sequence`, ir/sequences.py). A Node is one
operator application with ONNX semantics (op type, domain, attributes). A Graph owns its
nodes, inputs, outputs and constants.

Nodes are kept as an insertion-ordered set; `Graph.nodes` gives them in a stable topological
order, recomputed only after a mutation. Passes therefore never have to find the right place to
insert a node, and insert/remove are O(1).
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..errors import GraphError
from .dtypes import DType

Dim = int | str | None          # static size, symbolic name, or unknown
Shape = tuple[Dim, ...] | None  # None: rank unknown


@dataclass(frozen=True)
class SequenceType:
    """What a sequence of tensors holds: its elements' dtype and shape, each None where unknown
    (a dim where the elements differ is None)."""
    dtype: DType | None = None
    shape: Shape = None

    def type_str(self) -> str:
        return f"seq({Value('', self.shape, self.dtype).type_str()})"


class Value:
    __slots__ = ("name", "shape", "dtype", "producer", "uses", "const", "sequence")

    def __init__(self, name: str, shape: Shape = None, dtype: DType | None = None,
                 const: np.ndarray | None = None, sequence: SequenceType | None = None):
        self.name = name
        self.shape: Shape = tuple(shape) if shape is not None else None
        self.dtype = dtype
        # a sequence of tensors (a Python list at run time): no tensor shape or dtype of its own,
        # so nothing that reads tensors' types takes it for one
        self.sequence = sequence
        if sequence is not None:
            self.shape = self.dtype = None
        self.producer: Node | None = None
        self.uses: list[tuple[Node, int]] = []   # (consumer, input index)
        self.const = const
        if const is not None:
            self.shape = tuple(const.shape)
            if dtype is None and const.dtype != np.object_:
                self.dtype = DType.from_numpy(const.dtype)

    @property
    def users(self) -> list[Node]:
        """Distinct consuming nodes, in first-use order."""
        return list(dict.fromkeys(n for n, _ in self.uses))

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def type_str(self) -> str:
        if self.sequence is not None:
            return self.sequence.type_str()
        dt = self.dtype.name.lower() if self.dtype is not None else "?"
        if self.shape is None:
            return f"{dt}[...]"
        return f"{dt}[{','.join('?' if d is None else str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type_str()}"


class Node:
    __slots__ = ("op_type", "domain", "inputs", "outputs", "attrs", "name", "graph", "origin", "meta")

    def __init__(self, op_type: str, inputs: Sequence[Value | None], outputs: Sequence[Value],
                 attrs: dict[str, Any] | None = None, name: str = "", domain: str = "",
                 origin: Sequence[str] = ()):
        self.op_type = op_type
        self.domain = domain
        self.inputs: list[Value | None] = list(inputs)   # None: an omitted optional input
        self.outputs: list[Value] = list(outputs)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.name = name
        self.graph: Graph | None = None
        # names of the original (imported) nodes this node stands for, for error messages
        self.origin: tuple[str, ...] = tuple(origin) or ((name,) if name else ())
        self.meta: dict[str, Any] = {}   # facts passes leave for later stages, e.g. {"rule": ...}

    @property
    def op(self) -> str:
        """Op identifier: "Conv" for the default domain, "domain::Op" otherwise."""
        return op_key(self.domain, self.op_type)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def describe(self) -> str:
        """For errors: the node, its op, the rule that made it and the ONNX nodes it stands for."""
        facts = [f"made by {self.meta['rule']}"] if "rule" in self.meta else []
        if self.origin and self.origin != (self.name,):
            facts.append(f"from ONNX node{'s' if len(self.origin) > 1 else ''} "
                         + ", ".join(map(repr, self.origin)))
        return f"node {self.name!r} ({self.op})" + (f" [{'; '.join(facts)}]" if facts else "")

    def __repr__(self) -> str:
        return f"<Node {self.name!r} {self.op}>"


def op_key(domain: str, op_type: str) -> str:
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


class Graph:
    def __init__(self, name: str = "main", opset: dict[str, int] | None = None):
        self.name = name
        self.opset: dict[str, int] = dict(opset or {"": 21})
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.constants: dict[str, Value] = {}
        self._nodes: dict[Node, int] = {}     # node -> insertion stamp
        self._order: list[Node] | None = []
        self._stamp = itertools.count()
        self._names: set[str] = set()        # value names (unique)
        self._node_names: set[str] = set()   # node names (kept unique for names we make)
        self._suffix: dict[str, int] = {}    # fresh_name: the last suffix per hint

    # ---- building ---------------------------------------------------------------------
    def add_input(self, name: str, shape: Shape, dtype: DType | None,
                  sequence: SequenceType | None = None) -> Value:
        v = Value(name, shape, dtype, sequence=sequence)
        self._claim(name)
        self.inputs.append(v)
        return v

    def add_constant(self, name: str, data: np.ndarray, dtype: DType | None = None) -> Value:
        v = Value(name, data.shape, dtype, const=data)
        self._claim(name)
        self.constants[name] = v
        return v

    def add_node(self, op_type: str, inputs: Sequence[Value | None], outputs: int | Sequence[str | Value] = 1,
                 attrs: dict[str, Any] | None = None, name: str | None = None, domain: str = "",
                 origin: Sequence[str] = ()) -> Node:
        """Create a node consuming `inputs`; outputs are fresh Values (by count or by name)."""
        if isinstance(outputs, int):
            outputs = [self.fresh_name(f"{(name or op_type)}_out") for _ in range(outputs)]
        outs = [o if isinstance(o, Value) else Value(o) for o in outputs]
        for o in outs:
            self._claim(o.name)
        node = Node(op_type, inputs, outs, attrs, name or self.fresh_name(op_type), domain, origin)
        self.insert(node)
        return node

    def insert(self, node: Node) -> Node:
        """Add a node to the graph, linking it to its inputs' users and its outputs' producer."""
        if node.graph is not None:
            raise GraphError(f"{node.describe()} already belongs to a graph")
        node.graph = self
        self._nodes[node] = next(self._stamp)
        self._node_names.add(node.name)
        self._order = None
        for i, v in enumerate(node.inputs):
            if v is not None:
                v.uses.append((node, i))
        for v in node.outputs:
            if v.producer is not None and v.producer is not node:
                raise GraphError(f"value {v.name!r} is already produced by {v.producer.describe()}")
            v.producer = node
        return node

    def remove(self, node: Node) -> None:
        """Remove a node whose outputs are no longer used."""
        for v in node.outputs:
            if v.uses or any(o is v for o in self.outputs):
                raise GraphError(f"cannot remove {node.describe()}: output {v.name!r} is still used")
        for i, v in enumerate(node.inputs):
            if v is not None:
                v.uses.remove((node, i))
        for v in node.outputs:
            v.producer = None
        del self._nodes[node]
        node.graph = None
        self._order = None

    def set_input(self, node: Node, i: int, value: Value | None) -> None:
        old = node.inputs[i]
        if old is not None:
            old.uses.remove((node, i))
        node.inputs[i] = value
        if value is not None:
            value.uses.append((node, i))
        self._order = None

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every consumer of `old` (and the graph outputs) read `new` instead."""
        if old is new:
            return
        for node, i in list(old.uses):
            node.inputs[i] = new
            new.uses.append((node, i))
        old.uses.clear()
        self.outputs = [new if o is old else o for o in self.outputs]
        self._order = None

    def insertion_index(self, node: Node) -> int:
        """When the node was added: file order for imported nodes (a cheap, stable sort key)."""
        return self._nodes[node]

    def fresh_name(self, hint: str) -> str:
        """A name no value and no node of this graph has: the hint, else hint_1, hint_2, ...
        (counting on from the last suffix given for this hint, so n names cost O(n))."""
        name, k = hint, self._suffix.get(hint, 0)
        while name in self._names or name in self._node_names:
            k += 1
            name = f"{hint}_{k}"
        self._suffix[hint] = k
        return name

    def _claim(self, name: str) -> None:
        if name in self._names:
            raise GraphError(f"value name {name!r} is defined twice")
        self._names.add(name)

    # ---- reading ----------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """Nodes in a stable topological order (insertion order where the edges allow)."""
        if self._order is None:
            self._order = self._toposort()
        return list(self._order)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def values(self) -> Iterable[Value]:
        yield from self.inputs
        yield from self.constants.values()
        for n in self.nodes:
            yield from n.outputs

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op] = hist.get(n.op, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    def _toposort(self) -> list[Node]:
        pending = {n: sum(1 for v in set(filter(None, n.inputs)) if v.producer in self._nodes)
                   for n in self._nodes}
        heap = [(s, id(n), n) for n, s in self._nodes.items() if pending[n] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            _, _, n = heapq.heappop(heap)
            order.append(n)
            for v in n.outputs:
                for user in v.users:
                    pending[user] -= 1
                    if pending[user] == 0:
                        heapq.heappush(heap, (self._nodes[user], id(user), user))
        if len(order) != len(self._nodes):
            stuck = [n.describe() for n in self._nodes if pending[n] > 0][:5]
            raise GraphError(f"graph {self.name!r} has a cycle through {', '.join(stuck)}")
        return order

    # ---- text form --------------------------------------------------------------------
    def __str__(self) -> str:
        return format_graph(self)


def copied(graph: Graph, shape: Callable[[Shape], Shape] | None = None) -> Graph:
    """A copy of the graph, its bodies copied too, sharing the constants' data (no pass writes
    to it) and the nodes' plain attributes. shape: each value's shape in the copy, from the
    original's (its sequence elements' too); constants keep theirs."""
    def sized(s: Shape) -> Shape:
        return s if shape is None else shape(s)

    def value(v: Value) -> Value:
        seq = v.sequence and SequenceType(v.sequence.dtype, sized(v.sequence.shape))
        return Value(v.name, sized(v.shape), v.dtype, sequence=seq)

    g = Graph(graph.name, graph.opset)
    copies: dict[int, Value] = {}
    for v in graph.inputs:
        copies[id(v)] = c = value(v)
        g._claim(v.name)
        g.inputs.append(c)
    for v in graph.constants.values():
        copies[id(v)] = g.add_constant(v.name, v.const, v.dtype)
    for n in graph.nodes:
        outs = [value(o) for o in n.outputs]
        for o in outs:
            g._claim(o.name)
        copies.update((id(o), c) for o, c in zip(n.outputs, outs))
        attrs = {k: copied(a, shape) if isinstance(a, Graph) else a for k, a in n.attrs.items()}
        node = Node(n.op_type, [None if v is None else copies[id(v)] for v in n.inputs], outs,
                    attrs, n.name, n.domain, n.origin)
        node.meta = dict(n.meta)
        g.insert(node)
    g.outputs = [copies[id(v)] for v in graph.outputs]
    return g


def _fmt_attr(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= 4:
            return f"tensor({v.tolist()})"
        return f"tensor<{v.dtype}{list(v.shape)}>"
    if isinstance(v, float):
        return repr(float(v))
    if isinstance(v, Graph):
        return f"graph<{v.name}>"
    if isinstance(v, bytes):
        return f"bytes<{len(v)}>"
    return repr(v)


def format_graph(g: Graph) -> str:
    """A readable, deterministic text form, used by golden tests and error messages."""
    ins = ", ".join(f"{v.name}: {v.type_str()}" for v in g.inputs)
    outs = ", ".join(f"{v.name}: {v.type_str()}" for v in g.outputs)
    lines = [f"graph {g.name}({ins}) -> ({outs})"]
    for v in g.constants.values():
        lines.append(f"  const {v.name}: {v.type_str()}")
    for n in g.nodes:
        lhs = ", ".join(f"{v.name}: {v.type_str()}" for v in n.outputs)
        attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(n.attrs.items()))
        args = ", ".join("_" if v is None else v.name for v in n.inputs)
        lines.append(f"  {lhs} = {n.op}{f'[{attrs}]' if attrs else ''}({args})")
    return "\n".join(lines)
