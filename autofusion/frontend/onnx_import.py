"""ONNX → IR.

Reads a path or ModelProto, runs ONNX's own shape inference (with data propagation, so shape
arithmetic resolves where it can), and maps every ONNX construct onto the IR one to one:
initializers and Constant nodes become constant Values, value_info gives each edge its shape and
dtype (a sequence of tensors its SequenceType), an omitted optional input becomes None; If,
Loop, Scan and SequenceMap bring their bodies as IR graphs (onnx_nodes.py). The nodes
without a kernel here (an op missing from the op table, a subgraph holding one, a map, an
optional of a sequence) become OnnxRuntimeCall nodes, one per connected group
(onnx_runtime_groups.py); a strict import reports them all together in one UnsupportedOpError.

Two spellings exporters use are read as what they mean. The domain "ai.onnx" is the default
domain "" (so rules match those nodes and shape inference reads them). A graph input's
dimension declared negative (-1, as Paddle writes a dynamic axis), left blank or named "?"
(paddle2onnx) is a free dimension of its own, named "<input>_dim<axis>" ("x_dim0"); ONNX
Runtime also takes any size there, and two such dims are not one size. A
dimension declared 0 stays a static, empty dimension, as in ONNX Runtime (which refuses any
other size for it).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from ..errors import GraphError, ModelLoadError, UnsupportedOpError
from ..ir import Graph, Value, lookup, op_key
from ..ir.onnx_runtime_call import ORT_DOMAIN
from .legacy import per_channel_slopes
from .onnx_checks import check_input_types, check_nodes, check_rules, check_text
from .onnx_nodes import import_node
from .contrib_quantized import read_contrib_quantized
from .onnx_runtime_groups import call_attributes, group_for_onnx_runtime, non_tensor_nodes
from .onnx_values import (check_declared, element_type, sequence_type, sequence_types, tensor_array,
                          typed_value, value_type)
from .optionals import OPTIONAL_OPS, optionals_to_tensors
from .sequences import sequences_to_split
from .untyped_ops import type_uninferred_outputs


def load_model(source: str | os.PathLike | onnx.ModelProto) -> onnx.ModelProto:
    """Read an ONNX file (with its external data) or accept a ModelProto; clear errors on failure."""
    if isinstance(source, onnx.ModelProto):   # a copy: import annotates and rewrites it
        model = onnx.ModelProto()
        model.CopyFrom(source)
        check_text(model, "")
        return model
    path = Path(source)
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such model file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError, OSError) as e:
        raise ModelLoadError(f"{path}: not a readable ONNX model (corrupt or truncated file): {e}") from None
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{path}: not a readable ONNX model (empty graph; corrupt or truncated file?)")
    check_text(model, f"{path}: ")
    _check_external_data(model, path.parent)
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path}: cannot load external data: {e}") from None
    return model


def _check_external_data(model: onnx.ModelProto, base: Path) -> None:
    for tensor in onnx.external_data_helper._get_all_tensors(model):
        if not onnx.external_data_helper.uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        file = base / location
        if not location or not file.is_file():
            raise ModelLoadError(f"tensor {tensor.name!r} keeps its data in external file "
                                 f"{str(file)!r}, which is missing")
        need = int(info.get("offset", 0)) + int(info.get("length", 0))
        if need > file.stat().st_size:
            raise ModelLoadError(f"external data file {str(file)!r} is truncated: tensor "
                                 f"{tensor.name!r} needs {need} bytes, file has {file.stat().st_size}")


def _infer_shapes(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """ONNX's shape inference, strict: a model whose shapes or types contradict is refused.

    It runs on a light copy whose large weights are declared by type and shape only (inference
    reads their shapes, never their values), then the inferred types are copied back: this keeps
    compile time of a 400 MB model to a fraction of a second, and lifts the 2 GB limit.
    """
    g = model.graph
    # at IR version 4 or later, as the importer reads every model: initializers are constants
    # (before it, ONNX's inference takes them for overridable inputs and can infer wrong sizes)
    light = onnx.ModelProto(ir_version=max(model.ir_version, 4), opset_import=model.opset_import,
                            functions=model.functions)
    lg = light.graph
    lg.name = g.name
    lg.node.extend(g.node)
    lg.input.extend(g.input)
    lg.output.extend(g.output)
    lg.value_info.extend(g.value_info)
    listed = {vi.name for vi in g.input}
    for vi in [*g.input, *g.output, *g.value_info]:
        value_type(vi)   # each element type known, before inference reads it
    for k, t in enumerate(g.initializer):
        check_declared(t, where + _initializer(k, t))   # before inference reads it
        if t.data_type in _WEIGHT_TYPES and np.prod(t.dims, dtype=np.int64) > _INLINE_ELEMENTS:
            if t.name not in listed:
                lg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            lg.initializer.append(t)
    lengths = _hide_long_lengths(lg)
    try:
        inferred = _strict_inference(light)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        raise ModelLoadError(f"{where}the model is inconsistent (ONNX shape inference failed): "
                             f"{e}") from None
    except MemoryError:
        raise ModelLoadError(f"{where}ONNX shape inference ran out of memory (are some "
                             "dimensions huge?)") from None
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        for d in vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ():
            if d.dim_param in lengths:
                d.dim_value = lengths[d.dim_param]
    del g.value_info[:]
    g.value_info.extend(inferred.graph.value_info)
    del g.output[:]
    g.output.extend(inferred.graph.output)
    return model


def _strict_inference(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX's strict inference; where it fails on the consumers of an op whose schema has no
    inference function (Scaler, TreeEnsembleRegressor), again with that op's outputs typed
    from its schema (untyped_ops.py)."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError:
        if not type_uninferred_outputs(model):
            raise
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


def _hide_long_lengths(g: onnx.GraphProto) -> dict[str, int]:
    """Declare each long 1-D input's length by a name, for inference only: ONNX's data
    propagation keeps a value per element of a 1-D tensor (meant for shapes), which for a
    waveform or a declared 2^30 takes seconds and gigabytes. The names and their lengths."""
    lengths = {}
    for vi in g.input:
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ()
        if len(dims) == 1 and dims[0].HasField("dim_value") and dims[0].dim_value > _SHAPE_ELEMENTS:
            name = f"autofusion_length_{len(lengths)}"
            lengths[name] = dims[0].dim_value
            dims[0].dim_param = name
    return lengths


_SHAPE_ELEMENTS = 1 << 12   # longer than any shape a data propagation is for


# Initializers inference needs only by type and shape: float weights above a few elements.
_WEIGHT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                 onnx.TensorProto.BFLOAT16}
_INLINE_ELEMENTS = 64


def _normalise_domains(model: onnx.ModelProto) -> None:
    """Write the default domain "" wherever a node or opset import spells it "ai.onnx", in the
    graph, its subgraphs and the model's functions: rules match domains as strings, and ONNX's
    shape inference knows only "" for it."""
    def fix_imports(imports) -> None:
        versions = {i.domain or "": i.version for i in imports}
        if "ai.onnx" in versions:
            versions[""] = max(versions.pop("ai.onnx"), versions.get("", 0))
            del imports[:]
            imports.extend(helper.make_opsetid(d, v) for d, v in versions.items())

    def fix_nodes(nodes) -> None:
        for n in nodes:
            if n.domain == "ai.onnx":
                n.domain = ""
            for a in n.attribute:
                for sub in [a.g] if a.HasField("g") else a.graphs:
                    fix_nodes(sub.node)

    fix_imports(model.opset_import)
    fix_nodes(model.graph.node)
    for f in model.functions:
        fix_imports(f.opset_import)
        fix_nodes(f.node)


FREE = ("?",)   # dim names that mean "any size" (paddle2onnx's), not one size shared by name


def _name_free_dims(g: onnx.GraphProto) -> None:
    """Give each free graph-input dimension (declared < 0, blank or "?") a symbolic name of its
    own before shape inference, so inference carries it through the graph, and two free dims
    are not taken for one; a free dimension declared on any other edge is unknown (inference
    fills it)."""
    taken = {d.dim_param for vi in [*g.input, *g.output, *g.value_info]
             if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim}
    for vi in g.input:
        for axis, d in enumerate(vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ()):
            if (d.HasField("dim_value") and d.dim_value < 0) or \
                    (not d.HasField("dim_value") and (not d.dim_param or d.dim_param in FREE)):
                name = f"{vi.name}_dim{axis}"
                while name in taken:
                    name += "_"
                taken.add(name)
                d.dim_param = name   # a oneof: clears dim_value
    for vi in [*g.output, *g.value_info]:
        for d in vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ():
            if (d.HasField("dim_value") and d.dim_value < 0) or d.dim_param in FREE:
                d.Clear()


def _initializer(k: int, t: onnx.TensorProto) -> str:
    return f"initializer {t.name!r}" if t.name else f"graph.initializer[{k}] (no name)"


def _check_defined(g: onnx.GraphProto, where: str) -> None:
    defined = {v.name for v in g.input} | {t.name for t in g.initializer} | \
        {o for n in g.node for o in n.output}
    for i, n in enumerate(g.node):
        for x in n.input:
            if x and x not in defined:
                raise ModelLoadError(f"{where}node {n.name or f'#{i}'!r} ({n.op_type}) reads "
                                     f"{x!r}, which is used but never defined")


def import_onnx(source: str | os.PathLike | onnx.ModelProto, strict: bool = False) -> Graph:
    """Load an ONNX model into an IR Graph. The nodes without a kernel here become
    OnnxRuntimeCall nodes (onnx_runtime_groups.py); strict: refuse them instead, all together
    in one UnsupportedOpError."""
    model = load_model(source)
    _normalise_domains(model)
    read_contrib_quantized(model)
    where = "" if isinstance(source, onnx.ModelProto) else f"{source}: "
    unsupported = [(op_key(n.domain, n.op_type), n.name or f"#{i}")
                   for i, n in enumerate(model.graph.node)
                   if lookup(n.domain, n.op_type) is None and n.op_type not in OPTIONAL_OPS]
    if unsupported and strict:
        raise UnsupportedOpError(unsupported)
    check_nodes(model, where)
    _check_defined(model.graph, where)
    _name_free_dims(model.graph)
    model = _infer_shapes(model, where)
    per_channel_slopes(model)
    unsupported = [(f"{op} (an optional of a sequence)", name) for op, name in optionals_to_tensors(model, where)]
    if unsupported and strict:
        raise UnsupportedOpError(unsupported)
    sequences_to_split(model)
    if not strict:
        group_for_onnx_runtime(model)
    elif non_tensor_nodes(model):
        raise UnsupportedOpError(non_tensor_nodes(model))
    g = model.graph
    opset = {imp.domain: imp.version for imp in model.opset_import}
    graph = Graph(g.name or "main", opset)

    types = {vi.name: value_type(vi) for vi in [*g.value_info, *g.input, *g.output]}
    types.update(sequence_types([*g.value_info, *g.input, *g.output]))
    values: dict[str, Value] = {}

    def named(name: str) -> Value:
        if name not in values:
            raise ModelLoadError(f"{where}value {name!r} is used but never defined")
        return values[name]

    try:
        initializers = {t.name for t in g.initializer}
        for k, t in enumerate(g.initializer):
            what = where + _initializer(k, t)
            values[t.name] = graph.add_constant(t.name, tensor_array(t, what), element_type(t.data_type, what))
        for vi in g.input:
            if vi.name in initializers:  # old-style models list initializers as inputs too
                continue
            shape, dtype = value_type(vi)
            values[vi.name] = graph.add_input(vi.name, shape, dtype, sequence_type(vi))

        for i, n in enumerate(g.node):
            name = n.name or f"{n.op_type}_{i}"
            if n.domain == ORT_DOMAIN:
                attrs, origin = call_attributes(n)
                outs = [typed_value(o, types) for o in n.output]
                values.update((v.name, v) for v in outs)
                graph.add_node(n.op_type, [named(x) for x in n.input], outs, attrs, name, n.domain, origin)
                continue
            import_node(graph, n, name, named, values, types, where, model)
        for k, vi in enumerate(g.output):
            if vi.name not in values:
                raise ModelLoadError(f"{where}graph.output[{k}] ({vi.name!r}) is never computed")
            graph.outputs.append(values[vi.name])
            shape, dtype = value_type(vi)
            v = values[vi.name]
            v.shape = v.shape if v.shape is not None else shape
            v.dtype = v.dtype if v.dtype is not None else dtype
    except GraphError as e:
        raise ModelLoadError(f"{where}malformed graph: {e}") from None
    check_input_types(graph, where)
    check_rules(graph, where)
    return graph


