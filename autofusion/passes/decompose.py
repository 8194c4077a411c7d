"""Ops the rules left whole, written as the elementwise ops they are, so automatic fusion can
group them with their neighbours.

A BatchNormalization at inference is a per-channel affine map. After a convolution the rules
fold it into the weight; what is left (DenseNet's and pre-activation ResNets' BatchNorm+ReLU
on a Concat or an Add, a norm after pooling) is one pass over the tensor, and its ReLU another.
As x·a + b with a = scale/√(var+ε) and b = B − mean·a, constants of shape [C, 1, …], it joins
the region of its ReLU: one pass for both.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType, Graph, Node
from ..ir.builder import GraphBuilder


def batch_norms_as_affine(graph: Graph) -> int:
    """Rewrite each inference BatchNormalization with constant statistics on a float32 tensor of
    known rank as Mul and Add; the number rewritten."""
    rewritten = 0
    for bn in [n for n in graph.nodes if n.op == "BatchNormalization" and _affine(n)]:
        x, scale, bias, mean, var = bn.inputs[:5]
        a = scale.const.astype(np.float64) / np.sqrt(var.const.astype(np.float64) + bn.attr("epsilon", 1e-5))
        b = bias.const.astype(np.float64) - mean.const.astype(np.float64) * a
        per_channel = (-1,) + (1,) * (len(x.shape) - 2)
        op = GraphBuilder(graph, bn.name, bn.origin)
        y = op.Add(op.Mul(x, op.constant(a.astype(np.float32).reshape(per_channel), f"{bn.name}_scale")),
                   op.constant(b.astype(np.float32).reshape(per_channel), f"{bn.name}_shift"))
        y.shape, y.dtype = bn.outputs[0].shape, bn.outputs[0].dtype
        graph.replace_all_uses(bn.outputs[0], y)
        graph.remove(bn)
        rewritten += 1
    return rewritten


def _affine(bn: Node) -> bool:
    x = bn.inputs[0]
    if bn.attr("training_mode", 0) or any(o.uses for o in bn.outputs[1:]) or \
            any(v is None or v.const is None for v in bn.inputs[1:5]):
        return False
    # var + ε <= 0 (a negative ε) divides by 0 or takes a root of a negative: left to the
    # norm's own formula, whose NaN and infinities fall where ONNX has them
    positive = bool((bn.inputs[4].const.astype(np.float64) + bn.attr("epsilon", 1e-5) > 0).all())
    return positive and x.dtype == DType.FLOAT and x.shape is not None and len(x.shape) >= 2
