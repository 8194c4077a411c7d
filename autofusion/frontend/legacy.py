"""Operator versions from before numpy broadcasting (opset < 7), read as what they mean.

PRelu-6 takes a slope of shape [C] per channel of x [N, C, …] (PyTorch's PReLU(num_parameters=C),
as its exporter wrote it at opset 6); numpy-style broadcasting, which the IR's PRelu follows, would
match [C] against x's last axis. A constant slope is reshaped to [C, 1, …, 1], which broadcasts
as PRelu-6 means.
"""
from __future__ import annotations

import onnx


def _rank_and_channels(g: onnx.GraphProto, name: str) -> tuple[int, int | None] | None:
    for vi in [*g.input, *g.value_info]:
        if vi.name == name and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            channels = dims[1].dim_value if len(dims) > 1 and dims[1].HasField("dim_value") else None
            return len(dims), channels
    return None


def per_channel_slopes(model: onnx.ModelProto) -> None:
    """Reshape each PRelu-6 constant slope [C] read per channel to [C, 1, …] (in place; after
    shape inference, which gives x's rank)."""
    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 21)
    g = model.graph
    if opset >= 7 or not any(n.op_type == "PRelu" for n in g.node):
        return
    slopes = {t.name: t for t in g.initializer}
    readers: dict[str, int] = {}
    for n in g.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1
    for n in g.node:
        if n.op_type != "PRelu" or len(n.input) < 2 or n.input[1] not in slopes or readers[n.input[1]] != 1:
            continue
        slope, shape = slopes[n.input[1]], _rank_and_channels(g, n.input[0])
        if shape is None or len(slope.dims) != 1 or slope.dims[0] == 1 or shape[0] < 3 or \
                shape[1] not in (None, slope.dims[0]):
            continue
        per_channel = [slope.dims[0]] + [1] * (shape[0] - 2)
        del slope.dims[:]
        slope.dims.extend(per_channel)
        for vi in g.input:   # an old model lists its initializers as inputs too
            if vi.name == slope.name:
                vi.type.tensor_type.shape.Clear()
                for d in per_channel:
                    vi.type.tensor_type.shape.dim.add().dim_value = d
