"""Tensor sequences in the IR: which values are sequences, what their elements are, and who may
read one.

A sequence is a Value whose `sequence` is a SequenceType (its elements' dtype and shape, as far
as they are known); its own shape and dtype are None, so nothing that reads tensor types takes
it for a tensor. At run time it is a Python list of tensors, never changed in place (an insert
makes a new list), so CSE may share one between readers.

Which outputs are sequences follows from the op and its inputs, written once here:
  - SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase, SplitToSequence: a
    sequence; SequenceMap: each output a sequence of what its body makes;
  - Identity: what its input is; If: what its branches make; Loop: a carried value is what
    the body makes of it (a scan output is always a tensor);
  - every other op (SequenceAt, SequenceLength, ConcatFromSequence included): tensors.
Only the sequence ops' sequence operands, Identity, If and Loop (carried and captured values),
SequenceMap and OnnxRuntimeCall may read a sequence; verify() refuses any other reader.
"""
from __future__ import annotations

from .dims import merge_shapes
from .dtypes import DType
from .graph import Graph, Node, SequenceType
from .onnx_runtime_call import ORT_KEY
from .ops import OpClass, OpDef, register

# the sequence ops, and the inputs of each that must be sequences
SEQUENCE_OPERANDS: dict[str, tuple[int, ...]] = {
    "SequenceEmpty": (), "SequenceConstruct": (), "SequenceInsert": (0,), "SequenceErase": (0,),
    "SequenceAt": (0,), "SequenceLength": (0,), "SplitToSequence": (), "ConcatFromSequence": (0,),
    "SequenceMap": (0,),
}
# ops that pass any value through, sequences included
_ANY_VALUE = {"Identity", "If", "Loop", "SequenceMap"}


def _element(v) -> SequenceType:
    return v.sequence if v is not None and v.sequence is not None else SequenceType()


def _tensor_element(values) -> SequenceType:
    """What a sequence of these tensors holds: their common dtype, their shapes merged."""
    values = [v for v in values if v is not None]
    if not values:
        return SequenceType()
    shape = values[0].shape
    for v in values[1:]:
        shape = merge_shapes(shape, v.shape)
    return SequenceType(values[0].dtype, shape)


def _joined(a: SequenceType, b: SequenceType) -> SequenceType:
    """The elements of a sequence that holds a's and b's."""
    return SequenceType(a.dtype or b.dtype, merge_shapes(a.shape, b.shape))


def _split_element(node: Node) -> SequenceType:
    x = node.inputs[0]
    if x.shape is None:
        return SequenceType(x.dtype)
    axis = node.attr("axis", 0) % len(x.shape) if x.shape else 0
    if node.input(1) is not None:
        shape = x.shape[:axis] + (None,) + x.shape[axis + 1:]
    elif node.attr("keepdims", 1):
        shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    else:
        shape = x.shape[:axis] + x.shape[axis + 1:]
    return SequenceType(x.dtype, shape)


def _insert_element(node: Node) -> SequenceType:
    seq, t = _element(node.inputs[0]), node.inputs[1]
    if node.inputs[0].producer is not None and node.inputs[0].producer.op_type == "SequenceEmpty":
        return SequenceType(t.dtype or seq.dtype, t.shape)   # the first element
    return _joined(seq, SequenceType(t.dtype, t.shape))


def sequence_outputs(node: Node) -> list[SequenceType | None]:
    """For each output of the node, the sequence it is (None: a tensor)."""
    op, n = node.op, len(node.outputs)
    if op == "SequenceEmpty":
        return [SequenceType(DType(node.attr("dtype", int(DType.FLOAT))))]
    if op == "SequenceConstruct":
        return [_tensor_element(node.inputs)]
    if op == "SequenceInsert":
        return [_insert_element(node)]
    if op == "SequenceErase":
        return [_element(node.inputs[0])]
    if op == "SplitToSequence":
        return [_split_element(node)]
    if op == "SequenceMap":
        body: Graph = node.attrs["body"]
        return [SequenceType(o.dtype, o.shape) if o.sequence is None else o.sequence
                for o in body.outputs]
    if op == "Identity":
        return [node.inputs[0].sequence if node.inputs else None]
    if op == "If":
        then, other = node.attrs["then_branch"].outputs, node.attrs["else_branch"].outputs
        return [None if a.sequence is None and b.sequence is None else
                _joined(_element(a), _element(b)) for a, b in zip(then, other)]
    if op == "Loop":
        body = node.attrs["body"]
        carried = body.outputs[1:1 + n]
        initial = node.inputs[2:2 + len(carried)]
        out: list[SequenceType | None] = []
        for k, o in enumerate(carried):
            v = initial[k] if k < len(initial) else None
            if o.sequence is None and (v is None or v.sequence is None):
                out.append(None)
            else:   # the elements the first and every later iteration agree on
                out.append(_joined(_element(o), _element(v)))
        return out + [None] * (n - len(carried))
    return [None] * n


def is_sequence_op(node: Node) -> bool:
    return node.domain == "" and node.op_type in SEQUENCE_OPERANDS


def touches_sequences(node: Node) -> bool:
    """Whether the node reads or writes a sequence (a native partition never holds one)."""
    return any(v is not None and v.sequence is not None for v in [*node.inputs, *node.outputs])


def sequence_misuse(node: Node) -> str | None:
    """What is wrong with the node's sequences: a sequence read as a tensor, a tensor where the
    op needs a sequence, an output whose kind contradicts the op; None where all is right."""
    must = SEQUENCE_OPERANDS.get(node.op, ()) if node.domain == "" else ()
    may_read = node.op in _ANY_VALUE or node.op == ORT_KEY
    for i, v in enumerate(node.inputs):
        if v is None:
            continue
        if i in must and v.sequence is None:
            return f"input {i} ({v.name!r}) must be a sequence, and is a tensor"
        if v.sequence is not None and i not in must and not may_read:
            return f"input {i} ({v.name!r}) is a sequence, which {node.op} cannot read as a tensor"
    if node.op == ORT_KEY:
        return None
    for v, kind in zip(node.outputs, sequence_outputs(node)):
        if (v.sequence is None) != (kind is None):
            what = "a sequence" if kind is not None else "a tensor"
            return f"output {v.name!r} must be {what}"
    return None


# ---- the sequence ops' entries in the op table, with their tensor type rules ---------------
def no_tensor_outputs(node: Node):
    """Sequence outputs have no tensor type (sequence_outputs gives their elements)."""
    return [(None, None)] * len(node.outputs)


def sequence_at(node: Node):
    e = _element(node.inputs[0])
    return [(e.shape, e.dtype)]


def sequence_length(node: Node):
    return [((), DType.INT64)]


def concat_from_sequence(node: Node):
    e = _element(node.inputs[0])
    if e.shape is None:
        return [(None, e.dtype)]
    shape = list(e.shape)
    if node.attr("new_axis", 0):
        axis = node.attr("axis") % (len(shape) + 1)
        shape.insert(axis, None)
    else:
        shape[node.attr("axis") % len(shape)] = None
    return [(tuple(shape), e.dtype)]


for _op, _rule in [("SequenceEmpty", no_tensor_outputs), ("SequenceConstruct", no_tensor_outputs),
                   ("SequenceInsert", no_tensor_outputs), ("SequenceErase", no_tensor_outputs),
                   ("SplitToSequence", no_tensor_outputs), ("SequenceMap", no_tensor_outputs),
                   ("SequenceAt", sequence_at), ("SequenceLength", sequence_length),
                   ("ConcatFromSequence", concat_from_sequence)]:
    register(OpDef(_op, OpClass.OPAQUE, _rule))
del _op, _rule
