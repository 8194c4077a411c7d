"""If, Loop and Scan: control flow whose subgraph attributes are IR Graphs.

ONNX meaning, kept exactly:

    If(cond)                          then_branch() / else_branch() -> outputs
    Loop(M?, cond?, v_initial...)     body(iter, cond, v...) -> (cond, v..., scan...)
                                      -> (v_final..., scan_outputs...)  (scans stacked on axis 0)
    Scan(state..., scan_inputs...)    body(state..., slices...) -> (state..., scan...)
                                      num_scan_inputs, scan_input_axes/directions,
                                      scan_output_axes/directions

A body is a closed graph. What it reads from the enclosing graph (by name, in ONNX) is a
captured input here: an extra input of the body after its ONNX inputs, and the same value as
an extra input of the node after its ONNX inputs (attribute `captured`: how many). Passes over
the enclosing graph so see the dependency (dead code, CSE and topological order stay right).
If's two branches take the same captured inputs, each reading those it needs.
"""
from __future__ import annotations

from .dims import merge_shapes
from .graph import Graph, Node
from .ops import OpClass, OpDef, register

# op -> its subgraph attributes (SequenceMap's body runs per element: ir/sequences.py)
BODIES = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",),
          "SequenceMap": ("body",)}


def is_control_flow(node: Node) -> bool:
    return node.domain == "" and node.op_type in BODIES


def bodies(node: Node) -> list[tuple[str, Graph]]:
    """The node's subgraphs as (attribute, Graph); none for other ops (a Region's body is a
    fusion's product, not control flow)."""
    if not is_control_flow(node):
        return []
    return [(k, node.attrs[k]) for k in BODIES[node.op_type] if isinstance(node.attrs.get(k), Graph)]


def all_nodes(graph: Graph) -> list[Node]:
    """The graph's nodes and, after each control-flow node, those of its bodies (recursively)."""
    return [m for n in graph.nodes for m in [n, *(x for _, b in bodies(n) for x in all_nodes(b))]]


def formal_count(node: Node) -> int:
    """How many of the node's inputs are its ONNX inputs (the rest are captured)."""
    return len(node.inputs) - node.attrs.get("captured", 0)


def formal_inputs(node: Node) -> list:
    return node.inputs[:formal_count(node)]


def captured_inputs(node: Node) -> list:
    return node.inputs[formal_count(node):]


def _if(node: Node):
    then, other = node.attrs["then_branch"], node.attrs["else_branch"]
    return [(merge_shapes(a.shape, b.shape), a.dtype or b.dtype) for a, b in zip(then.outputs, other.outputs)]


def _loop(node: Node):
    body: Graph = node.attrs["body"]
    initial = formal_inputs(node)[2:]
    carried = [(merge_shapes(o.shape, v.shape) if v is not None else None, o.dtype)
               for o, v in zip(body.outputs[1:1 + len(initial)], initial)]
    # a scan output's length is the trip count, known only when the loop has run
    scans = [(None if o.shape is None else (None, *o.shape), o.dtype)
             for o in body.outputs[1 + len(initial):]]
    return carried + scans


def _scan(node: Node):
    body: Graph = node.attrs["body"]
    formal = formal_inputs(node)
    m = node.attr("num_scan_inputs")
    n_state = len(formal) - m
    states = [(merge_shapes(o.shape, v.shape), o.dtype) for o, v in zip(body.outputs, formal[:n_state])]
    length = None
    first = formal[n_state] if m else None
    if first is not None and first.shape is not None:
        axis = (node.attr("scan_input_axes") or [0] * m)[0]
        length = first.shape[axis % len(first.shape)]
    scans = []
    out_axes = node.attr("scan_output_axes") or [0] * (len(body.outputs) - n_state)
    for o, axis in zip(body.outputs[n_state:], out_axes):
        if o.shape is None:
            scans.append((None, o.dtype))
            continue
        shape = list(o.shape)
        shape.insert(axis % (len(shape) + 1), length)
        scans.append((tuple(shape), o.dtype))
    return states + scans


for _op, _rule in (("If", _if), ("Loop", _loop), ("Scan", _scan)):
    register(OpDef(_op, OpClass.OPAQUE, _rule))
del _op, _rule
