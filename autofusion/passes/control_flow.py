"""The captured inputs of If, Loop and Scan (ir/control_flow.py) kept to what their bodies need.

After clean-up of the enclosing graph, a captured value may have become a constant (folded) and
a body may no longer read one (cleaned). A constant moves into each body as a body constant
(the rules there need its data: a Conv's weights, a bias), and an input no body reads is
dropped from the node, so dead code and CSE outside see only the real dependencies.

An If whose condition is a constant (a shape test folded) is the branch it takes: its nodes
move into the enclosing graph, where the rules and automatic fusion see them.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphBuilder, Node, Value
from ..ir.control_flow import bodies, captured_inputs, formal_count, is_control_flow
from ..ir.fused_ops import inline


def close_over_constants(graph: Graph) -> int:
    """For every control-flow node of the graph: constants into its bodies, unread captured
    inputs dropped. How many captured inputs went."""
    changed = 0
    for node in graph.nodes:
        subgraphs = [b for _, b in bodies(node)]
        if not subgraphs or not node.attrs.get("captured"):
            continue
        outer = captured_inputs(node)
        inner = [b.inputs[len(b.inputs) - len(outer):] for b in subgraphs]
        keep = []
        for k, v in enumerate(outer):
            for body, ins in zip(subgraphs, inner):
                if v.const is not None:
                    body.replace_all_uses(ins[k], body.add_constant(body.fresh_name(ins[k].name), v.const, v.dtype))
            keep.append(any(_read(ins[k], body) for body, ins in zip(subgraphs, inner)))
        if all(keep):
            continue
        for body, ins in zip(subgraphs, inner):
            body.inputs = body.inputs[:len(body.inputs) - len(outer)] + [b for b, k in zip(ins, keep) if k]
        _set_captured(node, [v for v, k in zip(outer, keep) if k])
        changed += keep.count(False)
    return changed


def inline_constant_ifs(graph: Graph) -> int:
    """Replace each If whose condition is a constant by the nodes of the branch it takes; how many.
    A graph output it made keeps its name."""
    inlined = 0
    for node in graph.nodes:
        cond = node.inputs[0] if is_control_flow(node) and node.op_type == "If" else None
        if cond is None or cond.const is None or cond.const.size != 1:
            continue
        branch = node.attrs["then_branch" if bool(np.asarray(cond.const).reshape(-1)[0]) else "else_branch"]
        op = GraphBuilder(graph, node.name, node.origin)
        for old, new in zip(node.outputs, inline(op, branch, captured_inputs(node))):
            output = any(o is old for o in graph.outputs)
            if output and (new.producer is None or any(o is new for o in graph.outputs)):
                new = op.Identity(new)   # an input, a constant or another output: a value of its own
            if new.shape is None:   # what the op table cannot tell, ONNX's inference did
                new.shape, new.dtype = old.shape, new.dtype or old.dtype
            graph.replace_all_uses(old, new)
            if output:
                old.name, new.name = new.name, old.name
        graph.remove(node)
        inlined += 1
    return inlined


def _read(v: Value, body: Graph) -> bool:
    return bool(v.uses) or any(o is v for o in body.outputs)


def _set_captured(node: Node, values: list[Value]) -> None:
    """Replace the node's captured inputs by `values` (through the graph, so uses stay right)."""
    graph, formal = node.graph, formal_count(node)
    for i in reversed(range(formal, len(node.inputs))):
        graph.set_input(node, i, None)
    del node.inputs[formal:]
    for v in values:
        node.inputs.append(None)
        graph.set_input(node, len(node.inputs) - 1, v)
    node.attrs["captured"] = len(values)
