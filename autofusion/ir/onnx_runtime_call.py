"""OnnxRuntimeCall: a group of ONNX nodes autofusion has no kernel for, run by ONNX Runtime
(domain "autofusion.onnxruntime").

The ONNX importer writes one for each connected group of such nodes (frontend/onnx_runtime_groups.py),
so every valid model compiles and the rest of it fuses around the group. Its attributes:

    model         bytes: a partial ONNX ModelProto — the group's original nodes, the model's
                  opset imports and the model-local functions they call; no graph inputs,
                  outputs or initializers (the backend adds those from the node's inputs)
    input_names   the names the group's nodes read its inputs by, one per node input
    output_names  the names they write its outputs by, one per node output
    ops           the group's op types ("TfIdfVectorizer", "com.microsoft::Gelu"), for reports

It is opaque (it never joins a fusion), has no shape rule (its output types are what ONNX's
shape inference said, or unknown), and exports as its original nodes.
"""
from __future__ import annotations

from .graph import Graph, op_key
from .ops import OpClass, OpDef, register

ORT_DOMAIN = "autofusion.onnxruntime"
ORT_CALL = "OnnxRuntimeCall"
ORT_KEY = op_key(ORT_DOMAIN, ORT_CALL)

register(OpDef(ORT_CALL, OpClass.OPAQUE, None, domain=ORT_DOMAIN,
               doc="ONNX nodes without a kernel here, run as one ONNX Runtime session"))


def onnx_runtime_ops(graph: Graph) -> dict[str, int]:
    """How many of each op the graph runs on ONNX Runtime, most first."""
    counts: dict[str, int] = {}
    for n in graph.nodes:
        if n.op == ORT_KEY:
            for op in n.attr("ops", []):
                counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
