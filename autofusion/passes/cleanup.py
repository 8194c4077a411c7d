"""Graph clean-up passes: dead code, common subexpressions, constant folding.

Each pass takes a graph, mutates it through the IR's methods, and returns how many nodes (or
constants) it changed, so the pipeline can report and iterate to a fixed point.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..ir import Graph, Node, OpClass, Value, lookup

# Evaluates one node on constant inputs: (node, input arrays, None for omitted) -> output arrays.
Evaluator = Callable[[Node, Sequence["np.ndarray | None"]], Sequence[np.ndarray]]


def eliminate_dead_code(graph: Graph) -> int:
    """Remove nodes none of whose outputs reach a graph output, and constants nobody reads."""
    live: set[int] = {id(v) for v in graph.outputs}
    removed = 0
    for node in reversed(graph.nodes):
        if any(id(v) in live for v in node.outputs):
            live.update(id(v) for v in node.inputs if v is not None)
        else:   # consumers come later in the order, so dead ones are already gone
            graph.remove(node)
            removed += 1
    for name, v in list(graph.constants.items()):
        if not v.uses and id(v) not in live:
            del graph.constants[name]
            removed += 1
    return removed


def _attr_key(value) -> object:
    if isinstance(value, np.ndarray):
        return ("tensor", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list):
        return tuple(_attr_key(v) for v in value)
    return value


def eliminate_common_subexpressions(graph: Graph) -> int:
    """Merge nodes with the same op, attributes and inputs (ops without side effects only)."""
    seen: dict[tuple, Node] = {}
    outputs = set(map(id, graph.outputs))
    merged = 0
    for node in graph.nodes:
        key = (node.domain, node.op_type, tuple(id(v) if v is not None else None for v in node.inputs),
               tuple(sorted((k, _attr_key(a)) for k, a in node.attrs.items())), len(node.outputs))
        twin = seen.get(key)
        if twin is None:
            seen[key] = node
            continue
        if any(id(v) in outputs for v in node.outputs):
            continue   # graph outputs keep their own names
        for old, new in zip(node.outputs, twin.outputs):
            graph.replace_all_uses(old, new)
        graph.remove(node)
        merged += 1
    return merged


MAX_FOLDED_BYTES = 64 << 20   # a folded constant larger than this would bloat the model


def fold_constants(graph: Graph, evaluate: Evaluator) -> int:
    """Evaluate nodes whose inputs are all constants and replace them by their results."""
    folded = 0
    outputs = set(map(id, graph.outputs))
    for node in graph.nodes:
        opdef = lookup(node.domain, node.op_type)
        if opdef is None or node.domain or not node.outputs:
            continue
        if not all(v is None or v.const is not None for v in node.inputs):
            continue
        if opdef.op_class == OpClass.OPAQUE and node.op_type not in ("Shape", "Size", "ConstantOfShape", "Range"):
            continue
        if any(id(v) in outputs for v in node.outputs):
            continue
        results = evaluate(node, [None if v is None else v.const for v in node.inputs])
        if sum(np.asarray(r).nbytes for r in results) > MAX_FOLDED_BYTES:
            continue
        for v, data in zip(node.outputs, results):
            c = graph.add_constant(graph.fresh_name(v.name + "_folded"), np.asarray(data), v.dtype)
            graph.replace_all_uses(v, c)
        graph.remove(node)
        folded += 1
    return folded


def fold_static_shapes(graph: Graph) -> int:
    """Shape/Size of a value whose shape is fully static become constants."""
    folded = 0
    outputs = set(map(id, graph.outputs))
    for node in graph.nodes:
        if node.domain or node.op_type not in ("Shape", "Size") or id(node.outputs[0]) in outputs:
            continue
        x: Value = node.inputs[0]
        if not x.is_static:
            continue
        if node.op_type == "Size":
            data = np.array(int(np.prod(x.shape)), np.int64)
        else:
            start, end = node.attr("start", 0), node.attr("end")
            data = np.array(x.shape[start:end], np.int64)
        c = graph.add_constant(graph.fresh_name(node.outputs[0].name + "_folded"), data)
        graph.replace_all_uses(node.outputs[0], c)
        graph.remove(node)
        folded += 1
    return folded
