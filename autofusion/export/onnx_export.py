"""IR → ONNX ModelProto: the inverse mapping of the importer.

Constants become initializers, every typed edge gets a value_info entry, attributes keep their
ONNX meaning; an attribute whose Python value does not say its type (an empty list) takes the
type from the operator's schema.

A fused node (domain "autofusion") is written as a call of a model-local ONNX function whose
body is the node's decomposition into standard ops. Each fused node gets its own function
overload (ONNX IR 10), named after the node, so its attributes and constants are its own. ONNX
Runtime and Netron open and run the file through the bodies; autofusion reads the fused nodes
back as fused nodes (an automatic fusion region takes its body back from its function).

If, Loop and Scan are written with their bodies as ONNX subgraphs (fused nodes inside them as
function calls too); a body's captured inputs go back to reads of the outer values by name, and
a body's own names are made unique across the model (ONNX's scoping wants no shadowing).
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir import FUSED_DOMAIN, DType, Graph, Node, Value
from ..ir.control_flow import bodies, formal_count, is_control_flow
from ..ir.fused_ops import decompose
from ..ir.onnx_runtime_call import ORT_KEY
from ..ir.symbolic import names_and_sizes

_IR_VERSION = 10  # understood by onnxruntime >= 1.20


def _value_info(v: Value, name: str | None = None) -> onnx.ValueInfoProto:
    """The value's ONNX type: a tensor's, or a sequence of its elements' tensor type."""
    if v.sequence is not None:
        return helper.make_tensor_sequence_value_info(name or v.name, int(v.sequence.dtype or 0),
                                                      names_and_sizes(v.sequence.shape))
    return helper.make_tensor_value_info(name or v.name, int(v.dtype or 0), names_and_sizes(v.shape))


def _typed(v: Value) -> bool:
    return v.dtype is not None or v.sequence is not None


def _tensor(name: str, data: np.ndarray, dtype: DType | None) -> onnx.TensorProto:
    t = numpy_helper.from_array(np.asarray(data), name)
    if dtype is not None and t.data_type != int(dtype):
        t = helper.make_tensor(name, int(dtype), data.shape, np.asarray(data).flatten().tolist())
    return t


def _schema_attr_type(node: Node, key: str, opset: dict[str, int]):
    try:
        schema = onnx.defs.get_schema(node.op_type, opset.get(node.domain, 1), node.domain)
        return schema.attributes[key].type
    except (onnx.defs.SchemaError, KeyError):
        return onnx.AttributeProto.INTS  # an empty list with no schema: ints is the common case


def _attribute(node: Node, key: str, value, opset: dict[str, int]) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, (list, tuple)) and not value:
        return helper.make_attribute(key, [], attr_type=_schema_attr_type(node, key, opset))
    if isinstance(value, (list, tuple)) and isinstance(value[0], np.ndarray):
        return helper.make_attribute(key, [numpy_helper.from_array(t) for t in value])
    return helper.make_attribute(key, value)


def _own_name(v: Value) -> str:
    return v.name


def _node_proto(n: Node, opset: dict[str, int], name=_own_name) -> onnx.NodeProto:
    """The node as ONNX writes it, each value named by `name` (a body renames some)."""
    proto = helper.make_node(n.op_type, [name(v) if v is not None else "" for v in n.inputs],
                             [name(v) for v in n.outputs], name=n.name, domain=n.domain or None)
    proto.attribute.extend(_attribute(n, k, a, opset) for k, a in _plain_attrs(n).items())
    return proto


def _graph_nodes(graph: Graph, functions: list[onnx.FunctionProto], taken: set[str],
                 name=_own_name) -> list[onnx.NodeProto]:
    """The graph's nodes as ONNX nodes; each fused node's function, and the functions an
    OnnxRuntimeCall's nodes call, added to `functions`; `taken`: the names the enclosing scopes
    define (a body's own must differ)."""
    nodes = []
    for n in graph.nodes:
        if n.op == ORT_KEY:
            protos, called = _onnx_runtime_nodes(n)
            nodes.extend(protos)
            have = {(f.domain, f.name, f.overload) for f in functions}
            functions.extend(f for f in called if (f.domain, f.name, f.overload) not in have)
            continue
        if is_control_flow(n):
            nodes.append(_control_flow_proto(n, graph.opset, functions, name, taken))
            continue
        proto = _node_proto(n, graph.opset, name)
        if n.domain == FUSED_DOMAIN:
            proto.overload = f"{n.op_type}_{len(functions)}"
            functions.append(_function(n, proto.overload))
        nodes.append(proto)
    return nodes


def _control_flow_proto(n: Node, opset: dict[str, int], functions: list[onnx.FunctionProto],
                        name, taken: set[str]) -> onnx.NodeProto:
    """If, Loop or Scan with its ONNX inputs (not the captured ones) and its bodies as subgraphs."""
    formal = formal_count(n)
    proto = helper.make_node(n.op_type, [name(v) if v is not None else "" for v in n.inputs[:formal]],
                             [name(v) for v in n.outputs], name=n.name)
    outer = [name(v) for v in n.inputs[formal:]]
    proto.attribute.extend(_attribute(n, k, a, opset) for k, a in _plain_attrs(n).items() if k != "captured")
    for key, body in bodies(n):
        proto.attribute.append(helper.make_attribute(key, _body_proto(body, outer, functions, taken)))
    return proto


def _body_proto(body: Graph, outer: list[str], functions: list[onnx.FunctionProto],
                taken: set[str]) -> onnx.GraphProto:
    """A body as an ONNX subgraph: its captured inputs read the outer values (named `outer`),
    its own values named apart from every name already taken."""
    formal = len(body.inputs) - len(outer)
    names = {id(v): o for v, o in zip(body.inputs[formal:], outer)}

    def own(v: Value) -> None:
        fresh, k = v.name, 0
        while fresh in taken:
            k += 1
            fresh = f"{v.name}_{k}"
        taken.add(fresh)
        names[id(v)] = fresh
    for v in [*body.inputs[:formal], *body.constants.values(), *(o for m in body.nodes for o in m.outputs)]:
        own(v)

    def name(v: Value) -> str:
        return names[id(v)]
    nodes = _graph_nodes(body, functions, taken, name)
    outputs, written = [], set()
    for k, v in enumerate(body.outputs):
        # an ONNX body output is a value the body computes, once: an input, a constant or a
        # value given twice goes out through an Identity
        if v.producer is None or id(v) in written:
            out = Value(v.name, v.shape, v.dtype, sequence=v.sequence)
            own(out)
            nodes.append(helper.make_node("Identity", [name(v)], [name(out)], name=f"{name(out)}/out{k}"))
            v = out
        written.add(id(v))
        outputs.append(_value_info(v, name(v)))
    inner = [v for m in body.nodes for v in m.outputs if _typed(v) and id(v) not in written]
    return helper.make_graph(
        nodes, body.name,
        inputs=[_value_info(v, name(v)) for v in body.inputs[:formal]],
        outputs=outputs,
        initializer=[_tensor(name(v), v.const, v.dtype) for v in body.constants.values()
                     if v.uses or any(o is v for o in body.outputs)],
        value_info=[_value_info(v, name(v)) for v in inner])


def _plain_attrs(n: Node) -> dict:
    """The attributes a call writes: a Region's body is its function's body, not an attribute."""
    return {k: a for k, a in n.attrs.items() if not isinstance(a, Graph)}


def _function(node: Node, overload: str) -> onnx.FunctionProto:
    """The fused node's decomposition as a function: inputs in0.., outputs out0.."""
    body = decompose(node)
    nodes = []
    for name, v in body.constants.items():
        if v.uses:
            nodes.append(helper.make_node("Constant", [], [name], name=f"{overload}/{name}",
                                          value=_tensor(name, v.const, v.dtype)))
    for n in body.nodes:   # names unique across functions: runtimes inline bodies by name
        proto = _node_proto(n, body.opset)
        proto.name = f"{overload}/{n.name}"
        nodes.append(proto)
    outputs = []
    for i, v in enumerate(body.outputs):
        outputs.append(f"out{i}")
        nodes.append(helper.make_node("Identity", [v.name], [f"out{i}"], name=f"{overload}/out{i}"))
    # the default domain, and any other its body uses (a custom op inside a region)
    model_opset = node.graph.opset if node.graph else {}
    opset = {"": body.opset.get("", 17)} | {n.domain: model_opset.get(n.domain, 1)
                                            for n in body.nodes if n.domain}
    return helper.make_function(
        FUSED_DOMAIN, node.op_type, [f"in{i}" for i in range(len(node.inputs))], outputs, nodes,
        [helper.make_opsetid(d, v) for d, v in sorted(opset.items())],
        attributes=sorted(_plain_attrs(node)), overload=overload)


def _onnx_runtime_nodes(n: Node) -> tuple[list[onnx.NodeProto], list[onnx.FunctionProto]]:
    """An OnnxRuntimeCall as the original nodes it stands for (and the functions they call), with
    an Identity where the graph now names a value they read or write otherwise."""
    part = onnx.ModelProto.FromString(n.attr("model"))
    into = [helper.make_node("Identity", [v.name], [name], name=f"{n.name}/in/{name}")
            for name, v in zip(n.attr("input_names"), n.inputs) if v.name != name]
    out = [helper.make_node("Identity", [name], [v.name], name=f"{n.name}/out/{name}")
           for name, v in zip(n.attr("output_names"), n.outputs) if v.name != name]
    return into + list(part.graph.node) + out, list(part.functions)


def export_onnx(graph: Graph, path: str | os.PathLike | None = None, *,
                producer: str = "autofusion") -> onnx.ModelProto:
    """Write the graph as an ONNX model (to `path` if given) and return the ModelProto."""
    functions: list[onnx.FunctionProto] = []
    nodes = _graph_nodes(graph, functions, {v.name for v in graph.values()})
    inner = [v for n in graph.nodes for v in n.outputs
             if _typed(v) and all(v is not o for o in graph.outputs)]
    g = helper.make_graph(
        nodes, graph.name,
        inputs=[_value_info(v) for v in graph.inputs],
        outputs=[_value_info(v) for v in graph.outputs],
        initializer=[_tensor(v.name, v.const, v.dtype) for v in graph.constants.values()],
        value_info=[_value_info(v) for v in inner],
    )
    opset = dict(graph.opset)
    if functions:
        opset.setdefault(FUSED_DOMAIN, 1)
    for f in functions:
        for imp in f.opset_import:
            opset.setdefault(imp.domain, imp.version)
    model = helper.make_model(
        g, producer_name=producer, ir_version=_IR_VERSION, functions=functions,
        opset_imports=[helper.make_opsetid(d, ver) for d, ver in sorted(opset.items())])
    if path is not None:
        large = model.ByteSize() > 2**31 - 1
        onnx.save_model(model, os.fspath(path), save_as_external_data=large,
                        location=os.path.basename(os.fspath(path)) + ".data" if large else None)
    return model
