"""What a damaged or hand-edited ONNX file is refused for at import, each check naming the place.

ONNX's shape inference (run by onnx_import) refuses much that is inconsistent; these refuse the
rest ONNX Runtime refuses, before any of it can reach a kernel as a bare exception or a wrong
answer: a name that is not UTF-8, a node that breaks its operator's schema (ONNX's own node
check: the op at the model's opset, attribute names and types, input and output counts), a flag
other than 0 or 1 and a mode no kernel knows, an input of a type the schema does not allow, and
what the op table's shape rules find impossible (an axis out of range, sizes that cannot meet).
"""
from __future__ import annotations

import functools

import onnx

from ..errors import ModelLoadError
from ..ir import Graph, Value
from ..ir.builder import shape_contradiction


def _bad_text(msg, path: str) -> tuple[str, bytes] | None:
    """The first string field under msg that is not UTF-8 (protobuf hands those over as bytes),
    as (its path, its bytes); None where all are text. Bytes fields (tensor data) and the free
    text nothing reads (doc strings, the producer) are not read: not even fetched, as a tensor's
    raw data would be copied."""
    for name, repeated, is_message in _text_fields(msg.DESCRIPTOR):
        if is_message and not repeated and not msg.HasField(name):
            continue
        value = getattr(msg, name)
        for k, v in enumerate(value if repeated else [value]):
            where = f"{path}{name}" + (f"[{k}]" if repeated else "")
            bad = (where, v) if isinstance(v, bytes) else _bad_text(v, where + ".") if is_message else None
            if bad:
                return bad
    return None


@functools.lru_cache(maxsize=None)
def _text_fields(descriptor) -> tuple[tuple[str, bool, bool], ...]:
    """A message type's string and message fields: (name, repeated, a message)."""
    out = []
    for f in descriptor.fields:
        if f.name in _FREE_TEXT or f.type not in (f.TYPE_STRING, f.TYPE_MESSAGE):
            continue
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
        out.append((f.name, repeated, f.type == f.TYPE_MESSAGE))
    return tuple(out)


_FREE_TEXT = {"doc_string", "producer_name", "producer_version"}


def check_text(model: onnx.ModelProto, where: str) -> None:
    bad = _bad_text(model, "")
    if bad:
        shown = repr(bad[1][:40]) + ("..." if len(bad[1]) > 40 else "")
        raise ModelLoadError(f"{where}{bad[0]} is not UTF-8 text ({shown}): a corrupt file?")


def check_nodes(model: onnx.ModelProto, where: str) -> None:
    """ONNX's own check of each standard node against its operator's schema at the model's
    opset, as ONNX Runtime makes it: the op exists there, the attributes are known and of the
    right type, the required ones are given, the inputs and outputs are as many as it takes;
    then flags and modes. The nodes inside If, Loop and Scan bodies too (autofusion runs them);
    the node with a subgraph itself is left to ONNX's inference, which checks it in its scope."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {i.domain: i.version for i in model.opset_import}
    for i, n in enumerate(model.graph.node):
        _check_node(n, n.name or f"#{i}", ctx, where)


def _check_node(n: onnx.NodeProto, label: str, ctx, where: str) -> None:
    subgraphs = [g for a in n.attribute for g in ([a.g] if a.HasField("g") else a.graphs)]
    for g in subgraphs:
        for k, m in enumerate(g.node):
            _check_node(m, m.name or f"#{k} of {g.name or 'the body'} in {label}", ctx, where)
    if n.domain not in ("", "ai.onnx.ml") or subgraphs:
        return
    try:
        onnx.checker.check_node(n, ctx)
        why = next(filter(None, (_attribute_problem(n.op_type, a) for a in n.attribute)), None)
    except onnx.checker.ValidationError as e:
        why = str(e).split("\n")[0]
        if "is deprecated" in why:   # still runs (ONNX Runtime runs GroupNormalization-18)
            return
    if why:
        raise ModelLoadError(f"{where}node {label!r} ({n.op_type}): {why}")


def _attribute_problem(op_type: str, a: onnx.AttributeProto) -> str | None:
    if a.name in _FLAGS and a.type == onnx.AttributeProto.INT and a.i not in (0, 1):
        return f"attribute {a.name!r} is a flag, 0 or 1, not {a.i}"
    choices = _CHOICES.get((op_type, a.name), _CHOICES.get(("", a.name)))
    if choices and a.type == onnx.AttributeProto.STRING and a.s.decode(errors="replace") not in choices:
        return f"attribute {a.name!r} is one of {sorted(choices)}, not {a.s!r}"
    return None


# Attributes that are on/off switches: ONNX Runtime reads some as `== 1`, others as `!= 0`, so
# any other value is refused rather than given a meaning.
_FLAGS = frozenset({"keepdims", "noop_with_empty_axes", "select_last_index", "transA", "transB",
                    "ceil_mode", "count_include_pad", "exclusive", "reverse", "largest", "sorted",
                    "center_point_box", "detect_negative", "detect_positive", "saturate", "layout",
                    "input_forget", "storage_order", "training_mode", "fmod", "upper", "onesided",
                    "inverse", "antialias", "is_causal", "interleaved", "new_axis", "periodic",
                    "allowzero", "align_corners"})

# String attributes that name one of a few modes: a kernel takes any other value for its
# default, so it is refused here, as ONNX Runtime does. ("", name): on every op.
_RESIZE = {"mode": {"nearest", "linear", "cubic"},
           "coordinate_transformation_mode": {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                              "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                              "tf_crop_and_resize"},
           "nearest_mode": {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"},
           "keep_aspect_ratio_policy": {"stretch", "not_larger", "not_smaller"}}
_CHOICES = {("", "auto_pad"): {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"},
            **{(op, "direction"): {"forward", "reverse", "bidirectional"} for op in ("LSTM", "GRU", "RNN")},
            ("BitShift", "direction"): {"LEFT", "RIGHT"},
            ("ScatterElements", "reduction"): {"none", "add", "mul", "max", "min"},
            ("ScatterND", "reduction"): {"none", "add", "mul", "max", "min"},
            ("SoftmaxCrossEntropyLoss", "reduction"): {"none", "sum", "mean"},
            ("NegativeLogLikelihoodLoss", "reduction"): {"none", "sum", "mean"},
            ("Pad", "mode"): {"constant", "reflect", "edge", "wrap"},
            ("Upsample", "mode"): {"nearest", "linear", "bilinear"},
            ("DepthToSpace", "mode"): {"DCR", "CRD"},
            ("Gelu", "approximate"): {"none", "tanh"},
            ("GridSample", "mode"): {"bilinear", "nearest", "bicubic", "linear", "cubic"},
            ("GridSample", "padding_mode"): {"zeros", "border", "reflection"},
            ("RoiAlign", "mode"): {"avg", "max"},
            ("RoiAlign", "coordinate_transformation_mode"): {"half_pixel", "output_half_pixel"},
            **{("Resize", k): v for k, v in _RESIZE.items()}}


def check_input_types(graph: Graph, where: str) -> None:
    """Each standard node's input types against its schema's type constraints, as ONNX Runtime
    checks them: inputs bound to one type parameter (MatMul's two T) share a type, and each type
    is one the parameter allows. ONNX's inference does not always check this."""
    for node in graph.nodes:
        if node.domain:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, graph.opset.get("", 1), "")
        except onnx.defs.SchemaError:
            continue
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        bound: dict[str, Value] = {}
        for i, v in enumerate(node.inputs):
            if not schema.inputs or v is None or v.dtype is None:
                continue
            formal = schema.inputs[min(i, len(schema.inputs) - 1)]
            variadic = formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
            if i >= len(schema.inputs) and not variadic or variadic and not formal.is_homogeneous:
                continue
            param, have = formal.type_str, f"tensor({v.dtype.name.lower()})"
            if have not in allowed.get(param, {param}):
                raise ModelLoadError(f"{where}node {node.name!r} ({node.op_type}): input {i} "
                                     f"{v.name!r} is {v.dtype.name.lower()}, which its "
                                     f"{formal.name!r} ({param}) does not take")
            first = bound.setdefault(param, v)
            if param in allowed and first.dtype != v.dtype:
                raise ModelLoadError(f"{where}node {node.name!r} ({node.op_type}): inputs "
                                     f"{first.name!r} ({first.dtype.name.lower()}) and {v.name!r} "
                                     f"({v.dtype.name.lower()}) must have one type ({param})")


def check_rules(graph: Graph, where: str) -> None:
    """Each node against its op's shape rule (shape_contradiction): ONNX's inference lets some
    impossible nodes through (an axis out of range, a scale too long), ONNX Runtime refuses them."""
    for node in graph.nodes:
        why = shape_contradiction(node)
        if why:
            raise ModelLoadError(f"{where}node {node.name!r} ({node.op_type}): {why}")
