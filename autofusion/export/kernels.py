"""`--dump-kernels DIR`: each automatic fusion region as files you can read and rerun.

Per Region node (those inside If, Loop and Scan bodies too), named after its kernel and its
index (fused_sigmoid_mul_3):
    .onnx   its body as a standalone ONNX model (inputs in0.., outputs as the region's), typed
            for the region's inputs: ONNX Runtime or Netron open it
    .cpp    the C++ loop nest the native backend generates for it (it includes the runtime's
            scalar.h; a symbolic size is its argument d[k]); where the region cannot be one
            kernel, the reason
Returns the paths written.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..backend.native.kernels import kernel_source, refusal
from ..ir import FUSED_DOMAIN, Graph
from ..ir.control_flow import all_nodes
from ..ir.fused_ops import typed_body
from .onnx_export import export_onnx


def dump_kernels(graph: Graph, directory: str | os.PathLike) -> list[Path]:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    regions = [n for n in all_nodes(graph) if n.domain == FUSED_DOMAIN and n.op_type == "Region"]
    for k, node in enumerate(regions):
        stem = out / f"{node.attrs['kernel']}_{k}"
        body = typed_body(node)
        body.name = stem.name
        export_onnx(body, stem.with_suffix(".onnx"))
        why = refusal(node)
        source = (f"// {node.name}: not generated here: {why}\n" if why else
                  f'// {node.name}, from the nodes {", ".join(node.origin)}\n#include <cstdint>\n'
                  '#include "scalar.h"\n\nusing namespace af;\n\n'
                  + kernel_source(node, stem.name) + "\n")
        stem.with_suffix(".cpp").write_text(source)
        written += [stem.with_suffix(".onnx"), stem.with_suffix(".cpp")]
    return written
