"""fp16 models computed in fp32: the model's inputs and outputs keep fp16, everything between is fp32.

The native kernels compute in fp32 (and this project's CPUs have no fp16 arithmetic), so an ONNX
file stored in fp16 would otherwise run op by op on PyTorch's slow fp16 paths and fuse nowhere:
the rules and the native kernels take float32. Widened, it fuses and runs natively like the fp32
model, with one Cast after each fp16 input and one before each fp16 output. Every value is at
least as accurate as in fp16.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType, Graph

# attributes that name an output's element type, per op
DTYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
               "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype",
               "Multinomial": "dtype"}


def widen_float16(graph: Graph) -> int:
    """Make every fp16 value inside a graph stored in fp16 (fp16 weights, inputs or outputs)
    fp32; the number of values changed. An fp32 model that casts to fp16 on purpose (to round)
    keeps its casts."""
    stored = [*graph.constants.values(), *graph.inputs, *graph.outputs]
    if not any(v.dtype == DType.FLOAT16 for v in stored):
        return 0
    if any(v.sequence is not None for v in graph.values()):
        return 0   # a sequence's elements keep the types they come with: the tensors read from
        #            one would be typed fp32 and be fp16

    changed = 0
    half_outputs = {id(o) for o in graph.outputs if o.dtype == DType.FLOAT16}
    for v in graph.constants.values():
        if v.dtype == DType.FLOAT16 and id(v) not in half_outputs:
            v.const, v.dtype = v.const.astype(np.float32), DType.FLOAT
            changed += 1
    for x in [x for x in graph.inputs if x.dtype == DType.FLOAT16 and x.uses]:
        uses = list(x.uses)
        cast = graph.add_node("Cast", [x], [graph.fresh_name(f"{x.name}_fp32")], {"to": int(DType.FLOAT)})
        wide = cast.outputs[0]
        wide.shape, wide.dtype = x.shape, DType.FLOAT
        for node, i in uses:
            graph.set_input(node, i, wide)
        changed += 1
    for n in graph.nodes:
        if n.op_type == "Cast" and n.inputs[0] in graph.inputs and n.attr("to") == DType.FLOAT:
            continue   # an input's own cast, made above
        key = DTYPE_ATTRS.get(n.op_type)
        if key is not None and n.attr(key) == DType.FLOAT16:
            n.attrs[key] = int(DType.FLOAT)
        value = n.attrs.get("value")
        if n.op_type == "ConstantOfShape" and isinstance(value, np.ndarray) and value.dtype == np.float16:
            n.attrs["value"] = value.astype(np.float32)
        for o in n.outputs:
            if o.dtype == DType.FLOAT16:
                o.dtype = DType.FLOAT
                changed += 1
    for k, out in enumerate(graph.outputs):
        if out.producer is None or id(out) not in half_outputs:
            continue
        cast = graph.add_node("Cast", [out], [graph.fresh_name(f"{out.name}_fp16")],
                              {"to": int(DType.FLOAT16)})
        narrow = cast.outputs[0]
        narrow.shape, narrow.dtype = out.shape, DType.FLOAT16
        graph.outputs[k] = narrow
        out.name, narrow.name = narrow.name, out.name   # the output keeps the name users know
    return changed
