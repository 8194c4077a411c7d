"""What the ONNX importer's modules share: ONNX protos read as IR pieces (element types,
shapes, sequence types, tensors, attribute values), each refusal a ModelLoadError naming the
place (a damaged or hand-edited file)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import ModelLoadError
from ..ir import DType, Value
from ..ir.graph import SequenceType


def _dims(tt) -> tuple | None:
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            dims.append(None)   # a free dimension where _name_free_dims did not reach (a body)
        elif d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def value_type(vi: onnx.ValueInfoProto):
    t = vi.type
    if t.HasField("tensor_type"):
        et = t.tensor_type.elem_type
        return _dims(t.tensor_type), (element_type(et, f"value {vi.name!r}") if et else None)
    return None, None


def sequence_type(vi: onnx.ValueInfoProto) -> SequenceType | None:
    """What a value ONNX types as a sequence of tensors holds (None: not such a sequence)."""
    t = vi.type
    if not t.HasField("sequence_type"):
        return None
    elem = t.sequence_type.elem_type
    if elem.WhichOneof("value") is None:
        return SequenceType()
    if not elem.HasField("tensor_type"):
        return None
    et = elem.tensor_type.elem_type
    # a symbolic dim binds nothing across elements (ONNX's own tests give elements of several
    # lengths for "N"), so it is unknown here
    dims = _dims(elem.tensor_type)
    dims = None if dims is None else tuple(d if isinstance(d, int) else None for d in dims)
    return SequenceType(element_type(et, f"value {vi.name!r}") if et else None, dims)


def sequence_types(vis) -> dict[str, SequenceType]:
    """The sequences among these ValueInfos, by name: a `types` entry (beside the (shape,
    dtype) of each tensor) is a SequenceType for a sequence."""
    return {vi.name: st for vi in vis if (st := sequence_type(vi)) is not None}


def element_type(code: int, what: str) -> DType:
    """The DType of an ONNX element-type code; a ModelLoadError naming `what` for an unknown one."""
    try:
        return DType(code)
    except ValueError:
        raise ModelLoadError(f"{what} has element type {code}, which is not an ONNX type "
                             "autofusion knows") from None


def check_declared(t: onnx.TensorProto, what: str) -> DType:
    """A TensorProto's element type, known, and dimensions, none negative."""
    if any(d < 0 for d in t.dims):
        raise ModelLoadError(f"{what} has a negative dimension: {list(t.dims)}")
    return element_type(t.data_type, what)


def tensor_array(t: onnx.TensorProto, what: str) -> np.ndarray:
    """A TensorProto's data as a numpy array; a ModelLoadError naming `what` where its type,
    dimensions and data disagree (a corrupt or hand-edited file)."""
    dtype = check_declared(t, what)
    try:
        return numpy_helper.to_array(t)
    except (ValueError, TypeError) as e:
        raise ModelLoadError(f"{what}: its data does not fit its type {dtype.name.lower()} and "
                             f"dimensions {list(t.dims)} ({e})") from None


def attribute_value(a: onnx.AttributeProto, node: str = ""):
    """An ONNX attribute as a plain Python value (tensors as numpy arrays)."""
    A = onnx.AttributeProto
    if a.type == A.GRAPH or a.type == A.GRAPHS:
        raise NotImplementedError("subgraph attributes")
    what = f"node {node!r}: attribute {a.name!r}"
    if a.type not in _ATTRIBUTE_TYPES:
        raise ModelLoadError(f"{what} has type {A.AttributeType.Name(a.type)}, which no operator "
                             "autofusion runs takes")
    value = onnx.helper.get_attribute_value(a)
    if a.type == A.TENSOR:
        return tensor_array(a.t, what)
    if a.type == A.TENSORS:
        return [tensor_array(t, what) for t in a.tensors]
    try:
        if a.type == A.STRING:
            return value.decode()
        if a.type == A.STRINGS:
            return [s.decode() for s in value]
    except UnicodeDecodeError:
        raise ModelLoadError(f"{what} is not UTF-8 text: {value!r}") from None
    if a.type in (A.INTS, A.FLOATS):
        return list(value)
    return value


_ATTRIBUTE_TYPES = {onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT, onnx.AttributeProto.STRING,
                    onnx.AttributeProto.TENSOR, onnx.AttributeProto.FLOATS,
                    onnx.AttributeProto.INTS, onnx.AttributeProto.STRINGS,
                    onnx.AttributeProto.TENSORS}


def typed_value(name: str, types: dict) -> Value:
    """A new Value with the type ONNX's inference gave it: a tensor's shape and dtype, or the
    elements of a sequence."""
    t = types.get(name, (None, None))
    return Value(name, sequence=t) if isinstance(t, SequenceType) else Value(name, *t)
