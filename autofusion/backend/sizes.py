"""A call's sizes checked against the graph: what a set of symbolic sizes must satisfy before
native code reads tensors of those sizes.

The shape rules derive every dim from the inputs' symbols, but a call may give sizes the graph
cannot have (x: [batch, ?] into a MatMul with an [8, 16] weight, called with ? = 2): the native
steps would read memory that is not there. So each new set of sizes is checked once, node by
node for the native nodes whose shapes are symbolic: the op's shape rule, run on the shapes
those sizes give its inputs, must not find them impossible, and must give the outputs the sizes
the plan holds for them. A contradiction is an InputError naming the node.
"""
from __future__ import annotations

from collections import OrderedDict

from ..errors import InputError
from ..ir import Node, Value, lookup
from ..ir.symbolic import evaluate, is_symbolic
from .lower import Plan


class SizesCheck:
    """The check of one plan's native nodes; remembers the last `keep` sets of sizes it passed."""

    def __init__(self, plan: Plan, keep: int):
        self.nodes = [n for part in plan.partitions if part.target == "native" for n in part.nodes
                      if any(is_symbolic(d) for v in (*n.inputs, *n.outputs) if v is not None
                             for d in v.shape or ())]
        self.keep = keep
        self.passed: OrderedDict[tuple, None] = OrderedDict()

    def __call__(self, sizes: dict[str, int]) -> None:
        key = tuple(sorted(sizes.items()))
        if key in self.passed:
            self.passed.move_to_end(key)
            return
        for n in self.nodes:
            why = contradiction(n, sizes)
            if why:
                given = ", ".join(f"{d}={k}" for d, k in sizes.items())
                raise InputError(f"inputs with {given} do not fit {n.describe()}: {why}")
        self.passed[key] = None
        if len(self.passed) > self.keep:
            self.passed.popitem(last=False)


def contradiction(node: Node, sizes: dict[str, int]) -> str | None:
    """What the node's op finds wrong with the shapes these sizes give it, or None."""
    opdef = lookup(node.domain, node.op_type)
    if opdef is None or opdef.infer is None:
        return None
    try:
        ins = [None if v is None else Value(v.name, _sized(v.shape, sizes), v.dtype, const=v.const)
               for v in node.inputs]
        probe = Node(node.op_type, ins, [Value(o.name) for o in node.outputs], node.attrs, node.name,
                     node.domain)
        probe.graph = node.graph   # the opset it is imported at
        types = opdef.infer(probe) or ()
    except ValueError as e:
        return str(e)
    except (TypeError, KeyError, IndexError, AttributeError, ArithmeticError):
        return None
    for v, (shape, _) in zip(node.outputs, types):
        want = _sized(v.shape, sizes)
        if shape is not None and want is not None and len(shape) == len(want) and \
                any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(shape, want)):
            return f"its output {v.name!r} would be {list(shape)}, where the graph makes it {list(want)}"
    return None


def _sized(shape, sizes: dict[str, int]):
    if shape is None:
        return None
    out = []
    for d in shape:
        try:
            out.append(evaluate(d, sizes) if d is not None else None)
        except KeyError:   # a size known only at run time
            out.append(None)
    return tuple(out)
