"""A call's sizes checked against the graph: what a set of symbolic sizes must satisfy before
native code reads tensors of those sizes.

The shape rules derive every dim from the inputs' symbols, but a call may give sizes the graph
cannot have (x: [batch, ?] into a MatMul with an [8, 16] weight, called with ? = 2): the native
steps would read memory that is not there. So each new set of sizes is checked once, node by
node for the native nodes whose shapes are symbolic: the op's shape rule, run on the shapes
those sizes give its inputs, must not find them impossible, and must give the outputs the sizes
the plan holds for them. A contradiction is an InputError naming the node. Nodes alike (one op,
its attributes, the same symbolic shapes in and out, the same small constants: a transformer's
layers) are probed once, the first of them standing for all.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from ..errors import InputError
from ..ir import Node, Value, lookup
from ..ir.symbolic import compile_sizes, is_symbolic, symbols
from .lower import Plan


class SizesCheck:
    """The check of one plan's native nodes; remembers the last `keep` sets of sizes it passed.
    Every dim it reads is evaluated at once, by one function compiled for the call's symbols on
    the first check; each node is probed with its inputs' shapes at those sizes."""

    def __init__(self, plan: Plan, keep: int):
        self.nodes = [n for part in plan.partitions if part.target == "native" for n in part.nodes
                      if any(is_symbolic(d) for v in (*n.inputs, *n.outputs) if v is not None
                             for d in v.shape or ())]
        self.keep = keep
        self.passed: OrderedDict[tuple, None] = OrderedDict()
        self._probes: list[_Probe] | None = None
        self._dims: Callable[[tuple], tuple] | None = None
        self._lock = threading.Lock()   # calls from several threads: the order, the first compile

    def __call__(self, sizes: dict[str, int]) -> None:
        key = tuple(sizes.items())
        with self._lock:
            if key in self.passed:
                self.passed.move_to_end(key)
                return
            if self._probes is None:
                self._compile(list(sizes))
        values = self._dims(tuple(sizes.values())) if self._dims else ()
        for probe in self._probes:
            why = probe.contradiction(values)
            if why:
                given = ", ".join(f"{d}={k}" for d, k in sizes.items())
                raise InputError(f"inputs with {given} do not fit {probe.node.describe()}: {why}")
        with self._lock:
            self.passed[key] = None
            if len(self.passed) > self.keep:
                self.passed.popitem(last=False)

    def _compile(self, names: list[str]) -> None:
        """The probes, and one function computing every symbolic dim they read whose symbols the
        call gives (a dim known only at run time is left unknown)."""
        known = set(names)
        dims: list = []
        at: dict = {}   # each distinct dim once

        def slots(shape) -> tuple | None:
            if shape is None:
                return None
            out = []
            for d in shape:
                if isinstance(d, int):
                    out.append(d)
                elif is_symbolic(d) and symbols(d) <= known:
                    if d not in at:
                        at[d] = len(dims)
                        dims.append(d)
                    out.append(_Slot(at[d]))
                else:
                    out.append(None)
            return tuple(out)
        probes: dict = {}
        for n in self.nodes:
            key = _alike(n) or id(n)   # a node with a subgraph attribute: a probe of its own
            if key not in probes:
                probes[key] = _Probe(n, [None if v is None else slots(v.shape) for v in n.inputs],
                                     [slots(v.shape) for v in n.outputs])
        self._probes = list(probes.values())
        self._dims = compile_sizes(dims, names) if dims else None


# a constant of at most this many values is told apart by its values (a shape, axes, a scale: what
# a shape rule reads), a larger one by its shape and type (a weight: a shape rule reads no value)
SMALL_CONSTANT = 64


def _alike(node: Node) -> tuple | None:
    """What a node's check depends on: two nodes with the same key find the same sizes possible
    or impossible. None where an attribute is not plain data (a subgraph): probed on its own."""
    def constant(v: Value | None):
        if v is None or v.const is None:
            return None
        c = v.const
        small = c.size <= SMALL_CONSTANT and c.dtype != object
        return c.shape, str(c.dtype), c.tobytes() if small else None
    attrs = []
    for k, a in sorted(node.attrs.items()):
        if a is None or isinstance(a, (int, float, str, bytes)):
            attrs.append((k, a))
        elif isinstance(a, (list, tuple)) and all(isinstance(x, (int, float, str, bytes)) for x in a):
            attrs.append((k, tuple(a)))
        else:
            return None
    shapes = tuple(None if v is None else (v.shape, v.dtype) for v in (*node.inputs, *node.outputs))
    return node.op_type, node.domain, id(node.graph), tuple(attrs), shapes, tuple(map(constant, node.inputs))


class _Slot(int):
    """Where a symbolic dim's value is in the evaluated dims."""


def _at(shape: tuple | None, values: tuple):
    return None if shape is None else tuple(values[d] if type(d) is _Slot else d for d in shape)


class _Probe:
    """One node's check: a copy of it whose inputs take the shapes a call's sizes give."""

    def __init__(self, node: Node, inputs: list, outputs: list):
        self.node, self.inputs, self.outputs = node, inputs, outputs
        self.values = [None if v is None else Value(v.name, None, v.dtype, const=v.const) for v in node.inputs]
        self.probe = Node(node.op_type, self.values, [Value(o.name) for o in node.outputs], node.attrs,
                          node.name, node.domain)
        self.probe.graph = node.graph   # the opset it is imported at
        opdef = lookup(node.domain, node.op_type)
        self.infer = opdef.infer if opdef is not None else None

    def contradiction(self, values: tuple) -> str | None:
        """What the node's op finds wrong with the shapes these sizes give it, or None."""
        if self.infer is None:
            return None
        try:
            for v, shape in zip(self.values, self.inputs):
                if v is not None:
                    v.shape = _at(shape, values)
            types = self.infer(self.probe) or ()
        except ValueError as e:
            return str(e)
        except (TypeError, KeyError, IndexError, AttributeError, ArithmeticError):
            return None
        for v, (shape, _), planned in zip(self.node.outputs, types, self.outputs):
            want = _at(planned, values)
            if shape is not None and want is not None and len(shape) == len(want) and \
                    any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(shape, want)):
                return f"its output {v.name!r} would be {list(shape)}, where the graph makes it {list(want)}"
        return None
