"""Custom operators: one call puts an operator of your own in the op table, so models using it
load from ONNX, run, and — when its meaning is elementwise — fuse like a built-in op.

    register_op("my.ops", "Swish2", "elementwise",
                decomposition=lambda op, node, x: op.Mul(x, op.Sigmoid(op.Mul(x, 2.0))))

The decomposition (the op written in ONNX ops, with the GraphBuilder `op`, the node for its
attributes, and the node's inputs) is its meaning. Where every op of it has a scalar expression
(ir/scalar.py) and its constants are scalars, the custom op gets the composed expression: it
joins automatic fusion regions and runs inside their generated kernels. `torch` is an optional
kernel (called with the input tensors and the node's attributes as keywords); without one the
decomposition runs op by op. An op registered with a torch kernel only is opaque to fusion: it
runs as its own node, and the report says why it did not join a region.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from .backend.torch_cpu import kernel
from .backend.torch_cpu.region import body_kernel
from .errors import AutofusionError
from .ir import (
    DType,
    Graph,
    GraphBuilder,
    Node,
    OpClass,
    OpDef,
    Value,
    lookup,
    register,
)
from .ir.scalar import c_float, expression, register_expression
from .ir.shapes import elementwise

CLASSES = {"elementwise": OpClass.ELEMWISE, "broadcast": OpClass.BROADCAST,
           "injective": OpClass.INJECTIVE, "reduction": OpClass.REDUCTION,
           "complex": OpClass.COMPLEX, "opaque": OpClass.OPAQUE}
Decomposition = Callable[..., "Value | tuple[Value, ...]"]


def register_op(domain: str, name: str, op_class: str = "elementwise", *,
                decomposition: Decomposition | None = None, torch: Callable | None = None,
                shape: Callable[[Node], list] | None = None) -> OpDef:
    """Add the operator `domain`::`name` to the op table (see the module docstring).

    op_class: elementwise | broadcast (numpy broadcasting of the inputs, the default shape rule
    for both) | injective | reduction | complex | opaque. shape: the shape/dtype rule, node →
    [(shape, dtype)] per output, required for the other classes."""
    if not domain or domain in ("ai.onnx", "autofusion"):
        raise AutofusionError(f"custom op {name!r}: give it a domain of its own, not {domain!r}")
    if op_class not in CLASSES:
        raise AutofusionError(f"custom op {domain}::{name}: op_class {op_class!r} is not one of "
                              f"{', '.join(CLASSES)}")
    if decomposition is None and torch is None:
        raise AutofusionError(f"custom op {domain}::{name}: give its meaning (decomposition=) "
                              "or a kernel (torch=)")
    cls = CLASSES[op_class]
    if shape is None and cls > OpClass.BROADCAST:
        raise AutofusionError(f"custom op {domain}::{name}: a {op_class} op needs its shape rule (shape=)")
    if lookup(domain, name) is not None:
        raise AutofusionError(f"custom op {domain}::{name} is already registered")
    opdef = register(OpDef(name, cls, shape or elementwise.broadcast, domain=domain,
                           doc=(decomposition or torch).__doc__ or ""))
    key = f"{domain}::{name}"
    if decomposition is not None and cls <= OpClass.BROADCAST:
        arity = len(inspect.signature(decomposition).parameters) - 2
        why = _not_scalar(decomposition, domain, name, arity)
        if why is None:
            register_expression(key, _composed(decomposition))
        elif torch is None:
            raise AutofusionError(f"custom op {key}: {why}; its decomposition cannot run inside a "
                                  "generated kernel, so give it a torch kernel or another class")
    kernel(key)(_torch_kernel(torch) if torch is not None else _decomposed_kernel(decomposition))
    return opdef


def unregister_op(domain: str, name: str) -> None:
    """Take a custom op out of the tables again (tests register and remove theirs)."""
    from .backend.impl import IMPLEMENTATIONS
    from .backend.torch_cpu import KERNELS
    from .ir import OPS
    from .ir.scalar import EXPRESSIONS
    key = f"{domain}::{name}"
    for table in (OPS, EXPRESSIONS, KERNELS, IMPLEMENTATIONS):
        table.pop(key, None)


# ---- the decomposition as a graph, an expression, a kernel -----------------------------------

class _Builder(GraphBuilder):
    """GraphBuilder taking Python numbers for operands: `op.Mul(x, 2.0)` (float32 constants)."""

    def __getattr__(self, op_type: str):
        make = super().__getattr__(op_type)

        def make_with_numbers(*inputs, **attrs):
            return make(*[self.constant(np.float32(x), "scalar") if isinstance(x, (int, float)) else x
                          for x in inputs], **attrs)
        return make_with_numbers


def body_of(decomposition: Decomposition, node: Node) -> Graph:
    """The node written out in ONNX ops: inputs in0.., typed like the node's."""
    g = Graph(f"{node.op_type}_body", dict(node.graph.opset) if node.graph else None)
    ins = [None if v is None else g.add_input(f"in{i}", v.shape, v.dtype) for i, v in enumerate(node.inputs)]
    outs = decomposition(_Builder(g), node, *ins)
    g.outputs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    return g


def _probe(domain: str, name: str, arity: int) -> Node:
    """A node of the op on float scalars (what registration checks the decomposition with)."""
    g = Graph("probe")
    ins = [g.add_input(f"x{i}", (1,), DType.FLOAT) for i in range(arity)]
    node = g.add_node(name, ins, 1, domain=domain)
    node.outputs[0].shape, node.outputs[0].dtype = (1,), DType.FLOAT
    return node


def _not_scalar(decomposition: Decomposition, domain: str, name: str, arity: int) -> str | None:
    """Why the decomposition is not one scalar expression, or None."""
    body = body_of(decomposition, _probe(domain, name, arity))
    if len(body.outputs) != 1:
        return "it has more than one output"
    for v in body.constants.values():
        if v.const.size != 1:
            return f"its constant {v.name!r} is not a scalar"
    missing = sorted({n.op for n in body.nodes if expression(n) is None})
    return f"{', '.join(missing)} has no scalar expression" if missing else None


def _composed(decomposition: Decomposition):
    """The C expression of a node: its decomposition's ops' expressions, nested."""
    def expr(node: Node, *operands: str) -> str:
        body = body_of(decomposition, node)
        names = {id(b): x for b, x in zip(body.inputs, operands)}
        names.update((id(v), c_float(v.const.reshape(-1)[0])) for v in body.constants.values())
        for n in body.nodes:
            names[id(n.outputs[0])] = expression(n)(n, *[None if v is None else names[id(v)]
                                                         for v in n.inputs])
        return names[id(body.outputs[0])]
    return expr


def _torch_kernel(fn: Callable):
    def build(node: Node):
        attrs = dict(node.attrs)
        return lambda *xs: fn(*xs, **attrs)
    return build


def _decomposed_kernel(decomposition: Decomposition):
    """The decomposition's ops, one PyTorch call each."""
    return lambda node: body_kernel(body_of(decomposition, node))
