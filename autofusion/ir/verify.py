"""verify(graph): the IR's invariants, checked after every pass in tests. It reads the op table
(every op known), the sequence rules (who may read a sequence) and control flow (each body
verified too), so it sits above all three rather than inside Graph."""
from __future__ import annotations

from ..errors import GraphError
from .control_flow import bodies, captured_inputs, formal_count, is_control_flow
from .graph import Graph, Node, Value
from .ops import lookup
from .sequences import sequence_misuse


def verify(graph: Graph) -> None:
    """Check the IR invariants; raise GraphError naming the first broken one."""
    defined: dict[str, Value] = {}

    def define(v: Value, what: str) -> None:
        if v.name in defined and defined[v.name] is not v:
            raise GraphError(f"value {v.name!r} is defined twice ({what})")
        defined[v.name] = v

    for v in graph.inputs:
        if v.producer is not None:
            raise GraphError(f"graph input {v.name!r} has a producer")
        define(v, "graph input")
    for v in graph.constants.values():
        if v.const is None or v.producer is not None:
            raise GraphError(f"constant {v.name!r} has no data or has a producer")
        define(v, "constant")
    seen: set[int] = set()
    for node in graph.nodes:  # raises on a cycle
        if node.graph is not graph:
            raise GraphError(f"{node.describe()} is listed but owned by another graph")
        if lookup(node.domain, node.op_type) is None:
            raise GraphError(f"{node.describe()}: operator {node.op} is not in the op table")
        misuse = sequence_misuse(node)
        if misuse:
            raise GraphError(f"{node.describe()}: {misuse}")
        for i, v in enumerate(node.inputs):
            if v is None:
                continue
            if v.name not in defined or defined[v.name] is not v:
                raise GraphError(f"{node.describe()} input {i} ({v.name!r}) is not defined "
                                 "before it is used")
            if (node, i) not in v.uses:
                raise GraphError(f"{node.describe()} is missing from the uses of {v.name!r}")
        for v in node.outputs:
            if v.producer is not node:
                raise GraphError(f"output {v.name!r} of {node.describe()} names another producer")
            define(v, f"output of {node.describe()}")
        seen.add(id(node))
    for v in defined.values():
        for user, i in v.uses:
            if id(user) not in seen or user.inputs[i] is not v:
                raise GraphError(f"value {v.name!r} lists a stale use by {user.describe()}")
    for v in graph.outputs:
        if v.name not in defined or defined[v.name] is not v:
            raise GraphError(f"graph output {v.name!r} is not defined")
    for node in graph.nodes:   # If, Loop, Scan: their bodies too
        _verify_bodies(node)


def _verify_bodies(node: Node) -> None:
    """verify() for each body, and the node's captured inputs matching each body's: as many,
    of the same types where both know them."""
    if not is_control_flow(node):
        return
    captured, formal = captured_inputs(node), formal_count(node)
    # what the node hands each body before the captured values: If nothing, Loop (iter, cond,
    # v...), Scan its inputs (state..., one slice of each scan input), SequenceMap its inputs
    # (an element of each sequence)
    given = {"If": 0, "Loop": 2 + max(formal - 2, 0), "Scan": formal, "SequenceMap": formal}[node.op_type]
    for key, body in bodies(node):
        verify(body)
        inner = body.inputs[given:]
        if len(inner) != len(captured) or any(
                a is None or a.dtype and b.dtype and a.dtype != b.dtype for a, b in zip(captured, inner)):
            raise GraphError(f"{node.describe()}: its {len(captured)} captured input(s) do not match "
                             f"the inputs of its {key} after the {given} it gives "
                             f"({[v.name for v in inner]})")
