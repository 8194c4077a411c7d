"""ONNX nodes → IR nodes: import_node, which the main graph's import (onnx_import.py) and every
body import alike, and the bodies of If, Loop, Scan and SequenceMap → IR Graphs
(ir/control_flow.py), their outer reads made explicit. A body's nodes are imported by
import_node, and a node's bodies by import_bodies: one recursion, so one module.

An ONNX body reads values of the enclosing graphs by name. Imported, each such value becomes
  - a constant of the body (the same data) where it is a constant outside (a weight, a Constant
    node): the rules inside the body need its data (Conv+BN folds the norm into the weights);
  - else a captured input: an input of the body after its ONNX inputs, and the outer value an
    input of the node after its ONNX inputs (attribute `captured` counts them).
A body nested in a body captures through each level: a Loop in an If reading a main-graph value
makes that value a captured input of the If, whose branch value the Loop captures in turn. If's
two branches take the same captured inputs (the union, in first-read order).

Types: ONNX's shape inference (as the importer runs it on the main graph) on each body as a
model of its own, its inputs typed as the node's operands give them (a Loop's carried values,
a Scan's slices), where the body does not declare them, and its outer reads typed as outside.
Dims inference makes up inside a body are unknown (they could equal unrelated dims outside).
A sequence (a Loop's carried list, a SequenceMap's input) is typed as one: SequenceMap's body
gets an element of each sequence input. A Loop's carried tensor gets, by a fixed point, the dims
its initial value (or declared type) and the body's result agree on: one that grows between
iterations has an unknown dim there. What ONNX cannot type, the op table's rules do.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from ..errors import ModelLoadError, UnsupportedOpError
from ..ir import FUSED_DOMAIN, DType, Graph, Shape, Value, lookup, op_key
from ..ir.builder import infer_types
from ..ir.control_flow import BODIES
from ..ir.dims import merge_shapes
from ..ir.graph import SequenceType
from ..ir.sequences import is_sequence_op, sequence_outputs
from ..ir.symbolic import names_and_sizes
from .onnx_runtime_groups import _free_names
from .onnx_values import (attribute_value, element_type, sequence_type, tensor_array, typed_value,
                          value_type)

Type = tuple[Shape, DType | None] | SequenceType   # a tensor's, or a sequence's elements
Types = dict[str, Type]


def is_subgraph(a: onnx.AttributeProto) -> bool:
    return a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def import_node(graph: Graph, n: onnx.NodeProto, name: str, named, values: dict[str, Value],
                types: dict, where: str, model: onnx.ModelProto) -> None:
    """One ONNX node into the graph: `named` finds the values it reads, `values` takes the ones
    it writes, `types` has their ONNX-inferred types. (The main graph's loop, in onnx_import.py,
    and each subgraph body's, below, import their nodes with it.)"""
    attrs = {a.name: attribute_value(a, f"{where}{name}") for a in n.attribute if not is_subgraph(a)}
    if n.op_type == "Constant" and n.domain == "":
        values[n.output[0]] = graph.add_constant(n.output[0], _constant_attr(attrs, name))
        return
    inputs = [named(x) if x else None for x in n.input]
    while inputs and inputs[-1] is None:
        inputs.pop()
    outs = []
    for k, o in enumerate(n.output):
        if not o:  # an omitted optional output (its index: two omitted need two names)
            o = graph.fresh_name(f"{name}_unused{k}")
        values[o] = typed_value(o, types)
        outs.append(values[o])
    if n.domain == FUSED_DOMAIN and n.op_type == "Region" and "body" not in attrs:
        attrs["body"] = _function_body(model, n, inputs, where)
    if any(is_subgraph(a) for a in n.attribute):   # If, Loop, Scan: bodies and captured inputs
        attrs, inputs = import_bodies(graph, n, name, attrs, inputs, named, where, model)
    node = graph.add_node(n.op_type, inputs, outs, attrs, name, n.domain)
    if all(v.dtype is None and v.sequence is None for v in outs):   # ONNX's inference does not
        infer_types(node)                    # know the op (a custom one): the op table's rule
    if is_sequence_op(node):   # the IR's rules: ONNX's inference gives a SequenceAt the
        infer_types(node)      # symbolic dims of the element type, which bind nothing
    for v, sequence in zip(outs, sequence_outputs(node)):
        if v.sequence is None and sequence is not None:   # in a body ONNX could not type
            v.sequence, v.shape, v.dtype = sequence, None, None


def _function_body(model: onnx.ModelProto, call: onnx.NodeProto, inputs: list[Value | None],
                   where: str) -> Graph:
    """The subgraph of the model-local function a call names (an exported region's body), its
    inputs typed as the call's; the exporter's Identity nodes naming the outputs are dropped."""
    fn = next((f for f in model.functions if (f.domain, f.name, f.overload) ==
               (call.domain, call.op_type, call.overload)), None)
    if fn is None:
        raise ModelLoadError(f"{where}node {call.name!r} ({call.op_type}) calls a function the "
                             "model does not define")
    opset = {i.domain: i.version for i in fn.opset_import}
    body = Graph(fn.overload or fn.name, opset)
    values = {name: body.add_input(name, v.shape, v.dtype)
              for name, v in zip(fn.input, inputs) if v is not None}
    renamed = {}
    for n in fn.node:
        attrs = {a.name: attribute_value(a, f"{where}{n.name}") for a in n.attribute}
        if n.op_type == "Constant" and n.domain == "":
            values[n.output[0]] = body.add_constant(n.output[0], _constant_attr(attrs, n.name))
        elif n.op_type == "Identity" and n.output[0] in fn.output:
            renamed[n.output[0]] = n.input[0]
        else:
            outs = [Value(o) for o in n.output]
            values.update(zip(n.output, outs))
            node = body.add_node(n.op_type, [values[x] if x else None for x in n.input], outs,
                                 attrs, n.name.rsplit("/", 1)[-1], n.domain)
            infer_types(node)
    body.outputs = [values[renamed.get(o, o)] for o in fn.output]
    return body


def _constant_attr(attrs: dict, node_name: str) -> np.ndarray:
    if "value" in attrs:
        return attrs["value"]
    for key, dtype in [("value_float", np.float32), ("value_int", np.int64),
                       ("value_floats", np.float32), ("value_ints", np.int64)]:
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    if "value_string" in attrs or "value_strings" in attrs:
        v = attrs.get("value_string", attrs.get("value_strings"))
        return np.array(v, dtype=np.object_)
    raise ModelLoadError(f"Constant node {node_name!r} has no value attribute")


class Scope:
    """The values a body reads by name: its own, else its enclosing graph's, taken on first read
    as a constant of the body or a captured input."""

    def __init__(self, graph: Graph, outer: Callable[[str], Value]):
        self.graph, self.outer = graph, outer
        self.own: dict[str, Value] = {}
        self.captured: list[Value] = []   # the outer values, in the order of the captured inputs

    def __call__(self, name: str) -> Value:
        if name not in self.own:
            v = self.outer(name)
            if v.const is not None:
                self.own[name] = self.graph.add_constant(name, v.const, v.dtype)
            else:
                self.own[name] = self.graph.add_input(name, v.shape, v.dtype, v.sequence)
                self.captured.append(v)
        return self.own[name]


def import_bodies(graph: Graph, n: onnx.NodeProto, name: str, attrs: dict, inputs: list,
                  named: Callable[[str], Value], where: str,
                  model: onnx.ModelProto) -> tuple[dict, list]:
    """The node's attributes with its bodies as IR Graphs, and its inputs with the captured ones."""
    if n.domain != "" or n.op_type not in BODIES:
        raise UnsupportedOpError([(op_key(n.domain, n.op_type) + " with a subgraph", name)])
    if n.op_type == "Scan" and graph.opset.get("", 21) < 9:
        raise UnsupportedOpError([("Scan-8 (a batch axis and sequence_lens)", name)])
    protos = {a.name: a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH}
    formal = _formal_types(n, attrs, inputs)
    scopes = []
    for key in BODIES[n.op_type]:
        if key not in protos:
            raise ModelLoadError(f"{where}node {name!r} ({n.op_type}) has no {key!r} subgraph")
        body, scope = _import_body(graph, protos[key], formal, named, f"{where}{name}/{key}: ", model,
                                   carried=n.op_type == "Loop")
        attrs[key] = body
        scopes.append(scope)
    captured = _align(scopes)
    attrs["captured"] = len(captured)
    return attrs, inputs + captured


def _formal_types(n: onnx.NodeProto, attrs: dict, inputs: list) -> list[Type]:
    """What the node hands its body's ONNX inputs, from its operands."""
    def t(v: Value | None):
        return (None, None) if v is None else v.sequence or (v.shape, v.dtype)
    if n.op_type == "If":
        return []
    if n.op_type == "SequenceMap":   # an element of each sequence, each tensor whole
        return [(v.sequence.shape, v.sequence.dtype) if v is not None and v.sequence else t(v)
                for v in inputs]
    if n.op_type == "Loop":
        return [((), DType.INT64), ((), DType.BOOL)] + [t(v) for v in inputs[2:]]
    m = attrs.get("num_scan_inputs", 0)
    states, scans = inputs[:len(inputs) - m], inputs[len(inputs) - m:]
    axes = attrs.get("scan_input_axes") or [0] * m
    slices = []
    for v, axis in zip(scans, axes):
        shape = None if v.shape is None else v.shape[:axis % len(v.shape)] + v.shape[axis % len(v.shape) + 1:]
        slices.append((shape, v.dtype))
    return [t(v) for v in states] + slices


def _import_body(graph: Graph, proto: onnx.GraphProto, formal: list, named: Callable[[str], Value],
                 where: str, model: onnx.ModelProto, carried: bool) -> tuple[Graph, Scope]:
    if len(proto.input) != len(formal):
        raise ModelLoadError(f"{where}the body takes {len(proto.input)} input(s), the node gives it {len(formal)}")
    ins = [_declared_or_given(vi, f) for vi, f in zip(proto.input, formal)]
    outer = {x: named(x) for x in sorted(_free_names(proto))}
    types = _inferred_types(proto, ins, outer, model)
    if carried:   # a carried value's dims: those its initial value and each iteration's agree on
        for _ in range(3):
            widened = [(merge_shapes(t[0], _shape(types.get(o.name))), t[1])
                       if k >= 2 and not isinstance(t, SequenceType) else t
                       for k, (t, o) in enumerate(zip(ins, [None, *proto.output]))]
            if widened == ins:
                break
            ins, types = widened, _inferred_types(proto, widened, outer, model)

    body = Graph(proto.name or "body", graph.opset)
    scope = Scope(body, named)
    for vi, t in zip(proto.input, ins):
        scope.own[vi.name] = (body.add_input(vi.name, None, None, t) if isinstance(t, SequenceType)
                              else body.add_input(vi.name, *t))
    for t in proto.initializer:
        what = f"{where}initializer {t.name!r}"
        scope.own[t.name] = body.add_constant(t.name, tensor_array(t, what), element_type(t.data_type, what))
    for i, node in enumerate(proto.node):
        if lookup(node.domain, node.op_type) is None and node.op_type != "Constant":
            raise UnsupportedOpError([(op_key(node.domain, node.op_type) + " (in a subgraph body)",
                                       node.name or f"#{i}")])
        import_node(body, node, node.name or f"{node.op_type}_{i}", scope, scope.own, types, where, model)
    for vi in proto.output:
        v = scope(vi.name)
        if v.sequence is None and sequence_type(vi) is not None:
            v.sequence = sequence_type(vi)
        shape, dtype = value_type(vi)
        v.shape = v.shape if v.shape is not None else shape
        v.dtype = v.dtype if v.dtype is not None else dtype
        body.outputs.append(v)
    return body, scope


def _inferred_types(proto: onnx.GraphProto, ins: list, outer: dict[str, Value],
                    model: onnx.ModelProto) -> Types:
    """ONNX's shape inference on the body as a model of its own (no types where it fails)."""
    known = {d for t in ins if not isinstance(t, SequenceType) for d in t[0] or () if isinstance(d, str)} | \
        {d for v in outer.values() for d in v.shape or () if isinstance(d, str)}
    part = onnx.ModelProto(ir_version=max(model.ir_version, 7), opset_import=model.opset_import,
                           functions=model.functions)
    g = part.graph
    g.name = proto.name or "body"
    g.node.extend(proto.node)
    g.initializer.extend(proto.initializer)
    g.value_info.extend(proto.value_info)
    for vi, t in zip(proto.input, ins):
        g.input.append(_value_info(vi.name, t))
    for name, v in outer.items():
        g.input.append(_value_info(name, v.sequence or (v.shape, v.dtype)))
    g.output.extend(onnx.ValueInfoProto(name=o.name) for o in proto.output)
    try:
        inferred = onnx.shape_inference.infer_shapes(part, data_prop=True).graph
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError):
        return {}
    types: Types = {}
    for vi in [*inferred.value_info, *inferred.output]:
        if vi.type.HasField("tensor_type"):
            shape, dtype = value_type(vi)
            if shape is not None:   # a dim inference made up inside the body: unknown
                shape = tuple(None if isinstance(d, str) and d not in known else d for d in shape)
            types[vi.name] = (shape, dtype)
        elif (element := sequence_type(vi)) is not None:   # a sequence: its elements' static dims
            types[vi.name] = element
    return types


def _shape(t: Type | None) -> Shape:
    return None if t is None or isinstance(t, SequenceType) else t[0]


def _value_info(name: str, t: Type) -> onnx.ValueInfoProto:
    if isinstance(t, SequenceType):
        return helper.make_tensor_sequence_value_info(name, int(t.dtype or 0), names_and_sizes(t.shape))
    return helper.make_tensor_value_info(name, int(t[1] or 0), names_and_sizes(t[0]))


def _declared_or_given(vi: onnx.ValueInfoProto, given: Type) -> Type:
    """A body input's type: what the body declares, completed by what the node gives."""
    declared = sequence_type(vi)
    if declared is not None or isinstance(given, SequenceType):
        d = declared or SequenceType()
        g = given if isinstance(given, SequenceType) else SequenceType()
        return SequenceType(d.dtype or g.dtype, d.shape if d.shape is not None else g.shape)
    (s, d), (fs, fd) = value_type(vi), given
    return (s if s is not None else fs, d or fd)


def _align(scopes: list[Scope]) -> list[Value]:
    """The captured values of the node, the same for each of its bodies (If's two branches): the
    union in first-read order; each body gets an input for each, in that order."""
    union: list[Value] = list(dict.fromkeys(v for s in scopes for v in s.captured))
    for s in scopes:
        body = s.graph
        formal = body.inputs[:len(body.inputs) - len(s.captured)]
        mine = dict(zip(map(id, s.captured), body.inputs[len(formal):]))
        for v in union:
            if id(v) not in mine:
                mine[id(v)] = body.add_input(body.fresh_name(v.name), v.shape, v.dtype, v.sequence)
        body.inputs = formal + [mine[id(v)] for v in union]
    return union
