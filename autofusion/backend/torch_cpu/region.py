"""The torch kernel of an automatic fusion region: its body's ops, one PyTorch call each.

This is the region's reference and its fallback (the torch backend, constant folding, a machine
without a C++ compiler); native partitions run the generated kernel instead.
"""
from __future__ import annotations

from ...ir import Graph, Node
from ...ir.builder import fused
from ...ir.fused_ops import typed_body
from ..impl import torch_impl
from .common import kernel, to_torch


@kernel(fused("Region"))
def region(node: Node):
    """The body's ops one by one."""
    return body_kernel(typed_body(node))


def body_kernel(body: Graph):
    """A kernel running a subgraph's ops one PyTorch call each (a region's body, a custom op's
    decomposition)."""
    values = {id(v): to_torch(v.const, v.dtype, v.name) for v in body.constants.values()}
    steps = []
    for n in body.nodes:
        fn = torch_impl(n).build(n)
        skip = getattr(fn, "baked_inputs", ())
        reads = [None if v is None else id(v) for i, v in enumerate(n.inputs) if i not in skip]
        steps.append((fn, reads, [id(v) for v in n.outputs]))
    ins = [id(v) for v in body.inputs]
    outs = [id(v) for v in body.outputs]

    def run(*xs):
        env = dict(values)
        env.update(zip(ins, xs))
        for fn, reads, writes in steps:
            out = fn(*[None if r is None else env[r] for r in reads])
            env.update(zip(writes, out if isinstance(out, tuple) else (out,)))
        results = tuple(env[o] for o in outs)
        return results if len(results) > 1 else results[0]
    return run
