"""Branches taken per call: an If whose condition the inputs' sizes decide (or a small integer
input's value) becomes, per branch taken, a model of its own with that branch inlined.

Exporters write such Ifs where the source tests a shape or a flag: Silero VAD's whole graph is
one If on the sample rate, and inside it Ifs on "batch == 1" and on ranks. An If runs its bodies
on PyTorch (control_flow.py) and cuts the plan around it, and the values after it have no known
shape, so nothing near it can be native. But which branch runs is known before anything runs:

    decidable   a top-level If of the cleaned graph whose condition is computed, by small
                tensors (a shape, a flag: at most SMALL elements each), from the inputs' shapes
                (Shape, Size) and from integer inputs of at most SMALL elements read by value
    per call    those conditions evaluated (numpy, the nodes' own kernels), memoized by the
                inputs' shapes and those inputs' values: the same call finds its model at once
    version     per set of branches taken, the cleaned graph with those conditions constant,
                compiled like any model (its Ifs inlined by clean-up, fused across where they
                stood, native); an If nested in a taken branch is now top-level, so a version
                may have branches of its own. Compiled on first use, once, and kept

The model compiled with the Ifs in place (its plan) is what `print(model.plan)` shows; a call
runs the version its inputs pick (`model.program_for_inputs`).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

from ..ir import Graph, Node, Value
from ..ir.control_flow import is_control_flow
from ..ir.dtypes import DType
from ..ir.graph import copied
from ..ir.symbolic import evaluate, symbols
from .executor import evaluate_node, to_numpy
from .specialise import symbolic_dims

SMALL = 64          # elements of a value a decision computes or reads by value, at most
KEEP = 64           # sets of input shapes and values remembered with the model they pick

_BY_VALUE = {DType.BOOL, DType.INT8, DType.INT16, DType.INT32, DType.INT64,
             DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64}


def _small(v: Value) -> bool:
    shape = v.shape
    return shape is not None and all(isinstance(d, int) for d in shape) and int(np.prod(shape)) <= SMALL


def _read_by_value(v: Value) -> bool:
    return v.dtype in _BY_VALUE and _small(v)


def _sized(v: Value, known: set[str]) -> bool:
    """Whether v's shape follows from the inputs' sizes (each dim a number or their arithmetic)."""
    if v.shape is None:
        return False
    return all(isinstance(d, int) or (d is not None and symbols(d) <= known) for d in v.shape)


class Decision:
    """The decidable Ifs of a graph, and the nodes that compute their conditions (in order)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.symbols = symbolic_dims(graph)
        self.ifs: list[Node] = []
        needed: set[Node] = set()
        self.by_value: set[Value] = set()
        self._not: set[Node] = set()   # nodes found not computable (each looked at once)
        for node in graph.nodes:
            if is_control_flow(node) and node.op_type == "If":
                nodes, inputs = set(), set()
                if self._computable(node.inputs[0], nodes, inputs):
                    self.ifs.append(node)
                    needed |= nodes
                    self.by_value |= inputs
        self.nodes = [n for n in graph.nodes if n in needed]

    def _computable(self, v: Value, nodes: set[Node], inputs: set[Value]) -> bool:
        """Whether v is computed from sizes and small integer inputs alone; the nodes and
        inputs it reads added to the sets."""
        if v.const is not None:
            return True
        node = v.producer
        if node is None:   # an input
            if v.sequence is None and _read_by_value(v):
                inputs.add(v)
                return True
            return False
        if node in nodes:
            return True
        if node in self._not or node.domain != "" or is_control_flow(node) or \
                not all(_small(o) for o in node.outputs) or \
                (node.op_type in ("Shape", "Size") and not _sized(node.inputs[0], self.symbols)) or \
                (node.op_type not in ("Shape", "Size") and
                 not all(x is None or (_small(x) and self._computable(x, nodes, inputs)) for x in node.inputs)):
            self._not.add(node)
            return False
        nodes.add(node)
        return True

    def __call__(self, tensors: list) -> tuple[bool, ...]:
        """The branch each If takes for these (checked) inputs: True for then_branch."""
        sizes: dict[str, int] = {}
        for v, t in zip(self.graph.inputs, tensors):
            for d, n in zip(v.shape or (), getattr(t, "shape", ())):
                if isinstance(d, str):
                    sizes[d] = int(n)
        values: dict[Value, np.ndarray] = {v: to_numpy(t) for v, t in zip(self.graph.inputs, tensors)
                                           if v in self.by_value}

        def array(v: Value) -> np.ndarray | None:
            if v is None:
                return None
            return v.const if v.const is not None else values[v]
        for node in self.nodes:
            if node.op_type in ("Shape", "Size"):
                dims = np.array([evaluate(d, sizes) for d in node.inputs[0].shape], dtype=np.int64)
                if node.op_type == "Size":
                    out = np.array(int(np.prod(dims)), dtype=np.int64)
                else:
                    rank = len(dims)
                    start, end = node.attr("start", 0), node.attr("end", rank)
                    out = dims[start:end]
                values[node.outputs[0]] = out
                continue
            for o, a in zip(node.outputs, evaluate_node(node, [array(x) for x in node.inputs])):
                values[o] = a
        return tuple(bool(np.asarray(array(n.inputs[0])).reshape(-1)[0]) for n in self.ifs)


class Branches:
    """A model's decidable Ifs and the versions compiled for the branches calls take."""

    def __init__(self, graph: Graph, decision: Decision, compile_version: Callable[[Graph], object]):
        """graph: the cleaned graph (a copy of its own, never changed); compile_version: the
        compile's steps on a version of it."""
        self.graph, self.decision, self.compile_version = graph, decision, compile_version
        self.names = [n.name for n in decision.ifs]
        self.versions: dict[tuple[bool, ...], object] = {}
        self._picked: OrderedDict[tuple, object] = OrderedDict()
        self._by_value = [v in decision.by_value for v in graph.inputs]
        self._lock = threading.Lock()

    def describe(self) -> str:
        values = ", ".join(repr(v.name) for v in self.decision.by_value)
        return (f"If {', '.join(repr(n) for n in self.names)} decided by the inputs' sizes"
                f"{f' and the values of {values}' if values else ''}: each set of branches calls take "
                f"is compiled on its first call as a model of its own, the branches inlined")

    def key(self, arrays: list) -> tuple | None:
        """What picks the model: each input's type, dtype and shape, and the values of the
        inputs a condition reads; None where an input is no array (the check will say)."""
        try:
            return tuple((type(a), a.dtype, tuple(a.shape), _values(a) if by_value else None)
                         for a, by_value in zip(arrays, self._by_value))
        except AttributeError:
            return None

    def model_for(self, arrays: list, check: Callable[[list], list]):
        """The model (a version with no branches of its own) these inputs run; check: the
        inputs as checked tensors (an InputError naming a wrong one), called where the inputs'
        shapes and values are new."""
        key = self.key(arrays)
        picked = self._picked.get(key) if key is not None else None
        if picked is not None:
            return picked
        tensors = check(arrays)
        if key is None:
            key = self.key(tensors)
        taken = self.decision(tensors)
        with self._lock:
            version = self.versions.get(taken)
            if version is None:
                version = self.versions[taken] = self.compile_version(self._taking(taken))
        picked = version if version.branches is None else version.branches.model_for(tensors, _checked)
        with self._lock:
            self._picked[key] = picked
            if len(self._picked) > KEEP:
                self._picked.popitem(last=False)
        return picked

    def _taking(self, taken: tuple[bool, ...]) -> Graph:
        """The cleaned graph with each decided If's condition the constant it took."""
        g = copied(self.graph)
        ifs = {n.name: n for n in g.nodes if n.op_type == "If"}
        for name, branch in zip(self.names, taken):
            node = ifs[name]
            g.set_input(node, 0, g.add_constant(g.fresh_name(f"{name}_taken"), np.array(branch)))
        return g


def _checked(tensors: list) -> list:
    return tensors


def _values(a):
    """A small array's values, hashable (a 0-d array's: a number)."""
    values = a.tolist()
    return tuple(np.ravel(values).tolist()) if isinstance(values, list) else values


def decidable(graph: Graph) -> Decision | None:
    """The graph's Ifs the inputs' sizes and small integer inputs decide, or None."""
    if not any(is_control_flow(n) and n.op_type == "If" for n in graph.nodes) or \
            any(v.sequence is not None for v in graph.inputs):
        return None
    decision = Decision(graph)
    return decision if decision.ifs else None
