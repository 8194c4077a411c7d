"""Types for the outputs of ops whose ONNX schema has no inference function.

Some `ai.onnx.ml` ops (Scaler, Normalizer, Imputer, LinearRegressor, SVMRegressor,
FeatureVectorizer, TreeEnsembleRegressor-1; the first versions of a few standard ops) declare no
type and shape inference, so ONNX's inference leaves their
outputs untyped, and in strict mode then fails on their consumers ("Input 0 expected to have
type but instead is null"). Their schemas still say each output's element type: a fixed one
(Scaler's Y is tensor(float)), a type parameter bound by an input (Imputer's T), or a class label
type the attributes choose (classlabels_strings → string, else int64). Declared on the outputs
(element type; the shape too for the elementwise ones, which keep their input's), inference
runs strict again; ONNX Runtime runs those ops (onnx_runtime_groups.py) and gives the other
shapes at run time.
"""
from __future__ import annotations

import onnx
from onnx import helper

_TENSOR_TYPES = {f"tensor({helper.tensor_dtype_to_string(t).removeprefix('TensorProto.').lower()})": t
                 for t in onnx.TensorProto.DataType.values() if t}


# ai.onnx.ml ops whose output has its input's shape (per-feature affine maps and fills)
SAME_SHAPE = {"Scaler", "Imputer", "Normalizer"}


def _schema(n: onnx.NodeProto, opsets: dict[str, int]) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(n.op_type, opsets.get(n.domain, 1), n.domain)
    except onnx.defs.SchemaError:
        return None


def lacks_inference(n: onnx.NodeProto, opsets: dict[str, int]) -> bool:
    """Whether ONNX knows the node's op but has no inference for it: no inference function,
    and no function body inference could read instead."""
    s = _schema(n, opsets)
    return s is not None and not (s.has_type_and_shape_inference_function or s.has_function or
                                  s.has_context_dependent_function)


def _element_type(n: onnx.NodeProto, schema: onnx.defs.OpSchema, type_str: str,
                  known: dict[str, int]) -> int | None:
    """The element type the schema gives an output of type `type_str`, else None."""
    if type_str in _TENSOR_TYPES:
        return _TENSOR_TYPES[type_str]
    for formal, actual in zip(schema.inputs, n.input):   # a parameter an input binds
        if formal.type_str == type_str and actual in known:
            return known[actual]
    allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == type_str), [])
    if sorted(allowed) == ["tensor(int64)", "tensor(string)"]:   # a classifier's labels
        strings = any(a.name == "classlabels_strings" and a.strings for a in n.attribute)
        return onnx.TensorProto.STRING if strings else onnx.TensorProto.INT64
    return _TENSOR_TYPES[allowed[0]] if len(allowed) == 1 and allowed[0] in _TENSOR_TYPES else None


def type_uninferred_outputs(model: onnx.ModelProto) -> list[str]:
    """Declare (in value_info) the element type of each output of a node whose schema has no
    inference function, from its schema, reading the input types non-strict inference gives;
    in place. The names of the outputs typed."""
    opsets = {i.domain: i.version for i in model.opset_import}
    g = model.graph
    if not any(lacks_inference(n, opsets) for n in g.node):
        return []
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    known = {vi.name: vi.type.tensor_type.elem_type
             for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
             if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
    known |= {t.name: t.data_type for t in g.initializer}
    shapes = {vi.name: vi.type.tensor_type.shape
              for vi in [*inferred.graph.value_info, *inferred.graph.input]
              if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
    declared = {vi.name for vi in g.value_info} | \
        {vi.name for vi in g.output if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
    typed = []
    for n in g.node:   # in order: one such op's output types the next one's input
        if not lacks_inference(n, opsets):
            continue
        schema = _schema(n, opsets)
        for formal, out in zip(schema.outputs, n.output):
            dtype = _element_type(n, schema, formal.type_str, known)
            if not out or dtype is None or out in declared:
                continue
            known[out] = dtype
            vi = helper.make_tensor_value_info(out, dtype, None)
            if n.op_type in SAME_SHAPE and n.input and n.input[0] in shapes:
                shapes[out] = shapes[n.input[0]]
                vi.type.tensor_type.shape.CopyFrom(shapes[out])
            g.value_info.append(vi)
            typed.append(out)
    return typed
