"""A roofline cost model for estimates: time = launch + max(bytes / bandwidth, flops / peak).

It ranks and explains; it does not promise. A fused node moves only its own inputs and outputs
(intermediates stay in cache) and pays one launch, which is where fusion's estimated gains come
from, except for the temporaries a fused kernel still writes out (see `temporaries`). Symbolic dimensions count as 1. The constants describe one 2-core CPU like the machines
here; measured speedups come from running both graphs and are labelled as such.
"""
from __future__ import annotations

import math

from ..ir import DType, Node, Value

LAUNCH_S = 4e-6            # per-op dispatch overhead on the PyTorch CPU path
BANDWIDTH_BPS = 12e9       # sustained memory bandwidth
PEAK_FLOPS = 100e9         # fp32 FMA throughput of the cores


def numel(v: Value | None) -> int:
    if v is None or v.shape is None:
        return 0
    return math.prod(d if isinstance(d, int) else 1 for d in v.shape)


def nbytes(v: Value | None) -> int:
    if v is None:
        return 0
    size = {DType.DOUBLE: 8, DType.INT64: 8, DType.FLOAT16: 2, DType.BFLOAT16: 2, DType.BOOL: 1,
            DType.INT8: 1, DType.UINT8: 1}.get(v.dtype, 4)
    return numel(v) * size


def flops(node: Node) -> float:
    """Multiply-adds x2 of the heavy ops; elementwise work is memory-bound and ignored."""
    out = node.outputs[0] if node.outputs else None
    if node.op_type in ("Conv", "FusedConv", "ConvTranspose"):
        w = node.inputs[1]
        if w.shape is None:
            return 0.0
        per_out = math.prod(d if isinstance(d, int) else 1 for d in w.shape[1:])
        return 2.0 * numel(out) * per_out
    if node.op_type in ("MatMul", "Gemm", "FusedMatMul", "NormMatMul", "PoolGemm"):
        a = node.inputs[0]
        k = a.shape[-1] if a.shape and isinstance(a.shape[-1], int) else 1
        if node.op_type == "Gemm" and node.attr("transA", 0) and a.shape:
            k = a.shape[0] if isinstance(a.shape[0], int) else 1
        return 2.0 * numel(out) * k
    if node.op_type == "Attention":
        q = node.inputs[0]
        if q.shape is None or len(q.shape) < 2:
            return 0.0
        seq = q.shape[-2] if isinstance(q.shape[-2], int) else 1
        return 4.0 * numel(q) * seq   # q·kᵀ and p·v, each 2·[seq × head_dim × seq] per head
    return 0.0


def temporaries(node: Node) -> int:
    """Bytes a fused kernel writes out and reads back itself, where it runs as two library calls:
    LayerNorm with a residual writes x + r before normalizing it (torch has no add-and-norm),
    NormMatMul writes the normalized rows before the GEMM."""
    if node.op_type == "LayerNorm" and node.input(3) is not None:
        return 2 * nbytes(node.outputs[0])
    if node.op_type == "NormMatMul":
        return 2 * nbytes(node.inputs[0]) * (2 if node.input(3) is not None else 1)
    return 0


def node_roofline(node: Node) -> float:
    """Seconds the node's bytes or flops take at best, whichever is longer; no call overhead."""
    moved = sum(nbytes(v) for v in node.inputs) + sum(nbytes(v) for v in node.outputs) + temporaries(node)
    return max(moved / BANDWIDTH_BPS, flops(node) / PEAK_FLOPS)


def node_seconds(node: Node) -> float:
    return LAUNCH_S + node_roofline(node)


def seconds(nodes) -> float:
    return sum(node_seconds(n) for n in nodes)
