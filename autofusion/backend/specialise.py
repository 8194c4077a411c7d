"""Specialising a graph with symbolic dimensions to the sizes of one call.

Native partitions need static shapes. A model exported with dynamic axes ("batch", "seq") gets,
on the first call with new sizes, a copy of its graph with those sizes written into every shape,
then the clean-up passes of the fusion pipeline (shape rules again, the shape arithmetic folded
into constants, dead code out), so what computed reshape targets at run time is gone; that copy
is lowered and built like any static graph. The copy shares the constants' data and the nodes'
attributes; the original graph is never changed.
"""
from __future__ import annotations

from ..errors import InputError
from ..fusion.pipeline import cleanup
from ..ir import Graph, Node, Shape, Value
from ..ir.builder import shape_contradiction
from ..ir.graph import SequenceType
from .executor import evaluate_node


def symbolic_dims(graph: Graph) -> set[str]:
    return {d for v in graph.inputs for d in (v.shape or ()) if isinstance(d, str)}


def specialise(graph: Graph, sizes: dict[str, int]) -> Graph:
    """A copy of the graph with each symbolic dimension in `sizes` replaced by its size."""
    def sized(shape: Shape) -> Shape:
        return None if shape is None else tuple(sizes.get(d, d) if isinstance(d, str) else d for d in shape)

    def sequence(v: Value) -> SequenceType | None:
        return v.sequence and SequenceType(v.sequence.dtype, sized(v.sequence.shape))

    g = Graph(graph.name, graph.opset)
    copies: dict[int, Value] = {}
    for v in graph.inputs:
        copies[id(v)] = g.add_input(v.name, sized(v.shape), v.dtype, sequence(v))
    for v in graph.constants.values():
        copies[id(v)] = g.add_constant(v.name, v.const, v.dtype)
    for n in graph.nodes:
        outs = [Value(o.name, sized(o.shape), o.dtype, sequence=sequence(o)) for o in n.outputs]
        copies.update((id(o), c) for o, c in zip(n.outputs, outs))
        copy = Node(n.op_type, [None if v is None else copies[id(v)] for v in n.inputs], outs,
                    n.attrs, n.name, n.domain, n.origin)
        copy.meta = dict(n.meta)
        g.insert(copy)
    g.outputs = [copies[id(v)] for v in graph.outputs]
    for n in g.nodes:   # sizes the symbols took that the graph cannot have (a product's 8 as 2)
        why = shape_contradiction(n)
        if why:
            given = ", ".join(f"{d}={k}" for d, k in sizes.items())
            raise InputError(f"inputs with {given} do not fit {n.describe()}: {why}")
    cleanup(g, evaluate_node, {})
    return g
