"""Tensor sequences that are only a way of spelling Split, turned back into Split at import.

torch's dynamo exporter writes `x.split(n, dim)` followed by indexing as SplitToSequence plus
one SequenceAt per piece (GPT-2's fused QKV projection does this). When every use of the
sequence is a SequenceAt at a constant position, the pair is exactly a Split whose outputs are
the indexed pieces. The IR holds sequences (ir/sequences.py), but a sequence op is opaque to
fusion, while Split's pieces are tensors the rules and regions see; so this is the form it
imports. Every other sequence stays one.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

SPLIT_SPELLING = {"SplitToSequence", "SequenceAt"}   # the ops of the idiom


def _constants(g: onnx.GraphProto) -> dict[str, np.ndarray]:
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = numpy_helper.to_array(a.t)
                elif a.name in ("value_int", "value_ints"):
                    consts[n.output[0]] = np.array(helper.get_attribute_value(a), np.int64)
    return consts


def _dim(g: onnx.GraphProto, name: str, axis: int) -> int | None:
    for vi in [*g.value_info, *g.input]:
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            d = dims[axis % len(dims)] if dims else None
            return d.dim_value if d is not None and d.HasField("dim_value") else None
    return None


def sequences_to_split(model: onnx.ModelProto) -> int:
    """Rewrite SplitToSequence→SequenceAt groups into Split in place; how many it rewrote."""
    g = model.graph
    if not any(n.op_type in SPLIT_SPELLING for n in g.node):
        return 0
    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 21)
    consts = _constants(g)
    users: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for x in n.input:
            users.setdefault(x, []).append(n)
    graph_outputs = {o.name for o in g.output}
    replaced: dict[int, list[onnx.NodeProto]] = {}   # id(SplitToSequence) -> its replacement
    dropped: set[int] = set()
    for s in g.node:
        if s.op_type != "SplitToSequence":
            continue
        axis = next((a.i for a in s.attribute if a.name == "axis"), 0)
        keepdims = next((a.i for a in s.attribute if a.name == "keepdims"), 1)
        gets = users.get(s.output[0], [])
        split = consts.get(s.input[1]) if len(s.input) > 1 and s.input[1] else None
        dim = _dim(g, s.input[0], axis)
        if not gets or s.output[0] in graph_outputs or any(
                u.op_type != "SequenceAt" or u.input[1] not in consts for u in gets):
            continue
        if split is None:
            if dim is None:
                continue
            sizes = [1] * dim
        elif split.ndim == 0:
            if dim is None:
                continue
            chunk = int(split)
            sizes = [chunk] * (dim // chunk) + ([dim % chunk] if dim % chunk else [])
        else:
            sizes = [int(v) for v in split]
        pieces = [f"{s.output[0]}__piece{i}" for i in range(len(sizes))]
        new = []
        size_name = f"{s.output[0]}__sizes"
        if opset >= 13:
            g.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), size_name))
            new.append(helper.make_node("Split", [s.input[0], size_name], pieces, name=s.name, axis=axis))
        else:
            new.append(helper.make_node("Split", [s.input[0]], pieces, name=s.name, axis=axis, split=sizes))
        for u in gets:
            p = int(consts[u.input[1]]) % len(sizes)
            if split is None and not keepdims and opset < 13:   # Squeeze's axes an attribute
                new.append(helper.make_node("Squeeze", [pieces[p]], [u.output[0]], name=u.name, axes=[axis]))
            elif split is None and not keepdims:
                axes = f"{u.output[0]}__axes"
                g.initializer.append(numpy_helper.from_array(np.array([axis], np.int64), axes))
                new.append(helper.make_node("Squeeze", [pieces[p], axes], [u.output[0]], name=u.name))
            else:
                new.append(helper.make_node("Identity", [pieces[p]], [u.output[0]], name=u.name))
            dropped.add(id(u))
        replaced[id(s)] = new
    nodes = []
    for n in g.node:
        if id(n) in replaced:
            nodes.extend(replaced[id(n)])
        elif id(n) not in dropped:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    return len(replaced)
