"""Quantized graphs before the rules: each reader of a dequantized activation gets its own
DequantizeLinear.

A Q/DQ graph dequantizes a tensor once for all its readers (a residual block's input feeds a
convolution and the Add), but each quantized op a rule makes (fusion/rules/quantized.py) reads the
integers through a DequantizeLinear of its own. A copy per reader gives each match one; the
copies no rule took merge again in the clean-up after the rules (common subexpressions).
"""
from __future__ import annotations

from ..ir import Graph


def dequantize_per_reader(graph: Graph) -> int:
    """Give every reader of a DequantizeLinear of a run-time tensor but the first a copy of its
    own; the number of copies made."""
    copies = 0
    outputs = set(map(id, graph.outputs))
    for node in graph.nodes:
        if node.op != "DequantizeLinear" or node.inputs[0].const is not None:
            continue
        y = node.outputs[0]
        for reader, i in list(y.uses)[0 if id(y) in outputs else 1:]:
            copy = graph.add_node("DequantizeLinear", node.inputs, 1, dict(node.attrs),
                                  graph.fresh_name(node.name), origin=node.origin)
            copy.outputs[0].shape, copy.outputs[0].dtype = y.shape, y.dtype
            graph.set_input(reader, i, copy.outputs[0])
            copies += 1
    return copies
