"""Optionals of tensors read as what they hold, at import.

The IR has no optional type, but an optional that wraps a tensor is that tensor, and an empty one
is an absent value; ONNX's three optional ops then say nothing the graph does not already know:

    Optional(x)                      → Identity(x)
    Optional() (type: a tensor)      → absent (the node goes)
    OptionalGetElement(x)            → Identity(x)          (x a tensor, or an optional of one)
    OptionalHasElement(x)            → Constant(True)       (x a tensor, or an optional of one)
    OptionalHasElement(absent)       → Constant(False)      (no input, "", or an empty Optional())
    graph input optional(tensor)     → a graph input of that tensor type

An optional graph input is read as a tensor input the caller gives: the IR cannot hold "given no
value at run time", so a call without it is refused by name (InputError), never answered
wrongly. Getting the element of an empty optional is refused at import, as ONNX Runtime refuses
it at run time. Optionals of sequences (and of anything else) stay as they are: ONNX Runtime runs
them (onnx_runtime_groups.py), and a strict import refuses them.
"""
from __future__ import annotations

import onnx
from onnx import helper

from ..errors import ModelLoadError

OPTIONAL_OPS = {"Optional", "OptionalHasElement", "OptionalGetElement"}


def _tensor_held(t: onnx.TypeProto | None) -> onnx.TypeProto | None:
    """The tensor type a value of type t is or holds (an optional of a tensor), else None."""
    if t is None:
        return None
    if t.HasField("optional_type"):
        t = t.optional_type.elem_type
    return t if t.HasField("tensor_type") else None


def _type_attr(n: onnx.NodeProto) -> onnx.TypeProto | None:
    return next((a.tp for a in n.attribute if a.name == "type"), None)


def optionals_to_tensors(model: onnx.ModelProto, where: str = "") -> list[tuple[str, str]]:
    """Rewrite the optionals of tensors in place (after shape inference, which typed every
    value); return the optional ops left, as (op, node name), for a strict import to refuse."""
    g = model.graph
    if not any(n.op_type in OPTIONAL_OPS and n.domain in ("", "ai.onnx") for n in g.node):
        return []
    infos = {vi.name: vi for vi in [*g.value_info, *g.input, *g.output]}
    tensors = {t.name for t in g.initializer} | \
        {n.output[0] for n in g.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx")}
    absent: set[str] = set()

    def held(name: str) -> onnx.TypeProto | None:
        vi = infos.get(name)
        return _tensor_held(vi.type) if vi is not None else None

    def is_tensor(name: str) -> bool:
        return name in tensors or held(name) is not None

    nodes, left = [], []
    for i, n in enumerate(g.node):
        op, x = n.op_type, n.input[0] if n.input else ""
        name = n.name or f"{op}_{i}"
        if n.domain not in ("", "ai.onnx") or op not in OPTIONAL_OPS:
            nodes.append(n)
            continue
        if op == "Optional" and x and is_tensor(x):
            nodes.append(helper.make_node("Identity", [x], [n.output[0]], name=n.name))
        elif op == "Optional" and not x and _tensor_held(_type_attr(n)) is not None:
            absent.add(n.output[0])   # an empty optional of a tensor
        elif op == "OptionalHasElement" and (not x or x in absent or is_tensor(x)):
            nodes.append(helper.make_node("Constant", [], [n.output[0]], name=n.name,
                                          value=helper.make_tensor("", onnx.TensorProto.BOOL, [],
                                                                   [bool(x) and x not in absent])))
        elif op == "OptionalGetElement" and x in absent:
            raise ModelLoadError(f"{where}node {name!r} (OptionalGetElement) reads {x!r}, an empty "
                                 "optional")
        elif op == "OptionalGetElement" and is_tensor(x):
            nodes.append(helper.make_node("Identity", [x], [n.output[0]], name=n.name))
        else:
            nodes.append(n)
            left.append((op, name))
    still_read = {x for n in nodes for x in n.input} | {o.name for o in g.output}
    for v in absent & still_read:   # an empty optional something else reads: keep its node
        nodes.insert(0, next(n for n in g.node if n.op_type == "Optional" and n.output[0] == v))
        left.append(("Optional", v))
    # the optionals of tensors become their tensors, but where an op left here reads them
    kept = {x for n in nodes if n.op_type in OPTIONAL_OPS for x in [*n.input, *n.output]}
    for vi in [*g.input, *g.output, *g.value_info]:
        t = _tensor_held(vi.type)
        if t is not None and vi.type.HasField("optional_type") and vi.name not in kept:
            vi.type.CopyFrom(onnx.TypeProto(tensor_type=t.tensor_type))   # a copy: t is inside it
    del g.node[:]
    g.node.extend(nodes)
    return left
