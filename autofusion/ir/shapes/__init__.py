"""The op table's entries for the ONNX operators: each one's fusion class and shape/dtype rule,
registered beside the rule, one module per op family (the IR's own ops register beside their
definitions: fused_ops.py, control_flow.py, sequences.py, torch_call.py, onnx_runtime_call.py).

A shape rule takes the node and returns one (shape, dtype) per output, or None where it cannot
tell (the importer's ONNX shape inference has already annotated imported graphs; rules exist so
passes can type the nodes they create, and so refine_shapes can carry a shape that folding
recovered through everything downstream: it re-runs the rules after folding, in order, so one
shape a fold recovers, a Reshape whose target was read off x.shape, carries on). A rule states
only what it is sure of: a dim it cannot tell is None, never a guess, since a wrong static dim
would let a fusion rule fire where it must not. The rules compute with the symbolic-dimension
arithmetic of ../dims.py and read attributes through ../attributes.py.
"""
from . import elementwise, tensor, indexing, reduction, nn, signal, vision  # noqa: F401 - each registers its ops
