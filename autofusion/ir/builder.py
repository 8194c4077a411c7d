"""A small builder that adds nodes to a graph: `op.Conv(x, w, strides=[2, 2])` returns its output.

Used wherever code writes graph fragments: fusion replacements and fused-op decompositions.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import GraphError
from .graph import Graph, Node, Value, op_key
from .ops import lookup
from .sequences import sequence_outputs

FUSED_DOMAIN = "autofusion"


def fused(op_type: str) -> str:
    """The op-table key of a fused op: "autofusion::FusedConv"."""
    return op_key(FUSED_DOMAIN, op_type)


class GraphBuilder:
    def __init__(self, graph: Graph, name_hint: str = "", origin: tuple[str, ...] = ()):
        self.graph = graph
        self.name_hint = name_hint
        self.origin = origin
        self.new_nodes: list[Node] = []

    def constant(self, data: np.ndarray, hint: str = "const") -> Value:
        """A new constant; dense, in either axis order (a weight made from one stored transposed
        stays transposed: the backends read it so), at least 1-D (a scalar becomes [1])."""
        kept = isinstance(data, np.ndarray) and data.ndim >= 1 and (data.flags.c_contiguous or data.flags.f_contiguous)
        return self.graph.add_constant(self.graph.fresh_name(hint), data if kept else np.ascontiguousarray(data))

    def node_name(self, op_type: str) -> str:
        hint = self.name_hint if self.name_hint and not self.new_nodes else \
            f"{self.name_hint}/{op_type}" if self.name_hint else op_type
        return self.graph.fresh_name(hint)

    def on_new_node(self, node: Node) -> None:
        """Hook for subclasses (e.g. to type or tag the node)."""

    def __getattr__(self, op_type: str) -> Callable[..., Any]:
        if op_type.startswith("_"):
            raise AttributeError(op_type)

        def make(*inputs: Value | None, _domain: str | None = None, _outputs: int = 1, **attrs):
            # a fused op of that name wins: it is what rules and decompositions mean by it
            domain = _domain if _domain is not None else (
                FUSED_DOMAIN if lookup(FUSED_DOMAIN, op_type) else "")
            if lookup(domain, op_type) is None:
                raise GraphError(f"cannot build {op_type}: it is not in the op table")
            inputs = list(inputs)
            while inputs and inputs[-1] is None:
                inputs.pop()
            name = self.node_name(op_type)
            node = self.graph.add_node(op_type, inputs,
                                       [self.graph.fresh_name(f"{name}_out{i}") for i in range(_outputs)],
                                       {k: v for k, v in attrs.items() if v is not None}, name, domain,
                                       self.origin)
            self.new_nodes.append(node)
            infer_types(node)
            self.on_new_node(node)
            return node.outputs[0] if _outputs == 1 else tuple(node.outputs)
        return make


def shape_contradiction(node: Node) -> str | None:
    """What the op's shape rule finds impossible in the node (it raises a ValueError: an axis out
    of range, sizes that cannot meet); None where it finds nothing wrong or cannot tell."""
    opdef = lookup(node.domain, node.op_type)
    if opdef is None or opdef.infer is None:
        return None
    try:
        opdef.infer(node)
    except ValueError as e:
        return str(e)
    except (TypeError, KeyError, IndexError, AttributeError, ArithmeticError):
        return None
    return None


def infer_types(node: Node) -> None:
    """Type the node's outputs with its op's shape rule, where it has one and can tell."""
    opdef = lookup(node.domain, node.op_type)
    if opdef is None or opdef.infer is None:
        return
    try:
        types = opdef.infer(node)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return
    for v, (shape, dtype) in zip(node.outputs, types or ()):
        v.shape, v.dtype = shape, dtype
    for v, sequence in zip(node.outputs, sequence_outputs(node)):
        v.sequence = sequence   # an Identity of a sequence, a SequenceInsert: a sequence
