"""Specialising a graph with symbolic dimensions to the sizes of one call.

Native partitions need static shapes. A model exported with dynamic axes ("batch", "seq") gets,
on the first call with new sizes, a copy of its graph with those sizes written into every shape,
then the clean-up passes of the fusion pipeline (shape rules again, the shape arithmetic folded
into constants, dead code out), so what computed reshape targets at run time is gone; that copy
is lowered and built like any static graph. The copy shares the constants' data (ir/graph.py
copied); the original graph is never changed.
"""
from __future__ import annotations

from ..errors import InputError
from ..fusion.pipeline import cleanup
from ..ir import Graph, Shape
from ..ir.builder import shape_contradiction
from ..ir.graph import copied
from .executor import evaluate_node


def symbolic_dims(graph: Graph) -> set[str]:
    return {d for v in graph.inputs for d in (v.shape or ()) if isinstance(d, str)}


def specialise(graph: Graph, sizes: dict[str, int]) -> Graph:
    """A copy of the graph with each symbolic dimension in `sizes` replaced by its size."""
    def sized(shape: Shape) -> Shape:
        return None if shape is None else tuple(sizes.get(d, d) if isinstance(d, str) else d for d in shape)

    g = copied(graph, sized)
    for n in g.nodes:   # sizes the symbols took that the graph cannot have (a product's 8 as 2)
        why = shape_contradiction(n)
        if why:
            given = ", ".join(f"{d}={k}" for d, k in sizes.items())
            raise InputError(f"inputs with {given} do not fit {n.describe()}: {why}")
    cleanup(g, evaluate_node, {})
    return g
