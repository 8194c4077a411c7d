"""The torch kernel of an automatic fusion region: its body's ops, one PyTorch call each.

This is the region's reference and its fallback (constant folding, a region with symbolic
dims, a machine without a C++ compiler); native partitions run the generated kernel instead, and
so do torch partitions where it builds (generated.py).
"""
from __future__ import annotations

from ...fusion.cost import node_roofline
from ...ir import Graph, Node
from ...ir.builder import fused
from ...ir.fused_ops import typed_body
from ..impl import LAUNCH_S, torch_impl
from .common import kernel, to_torch


def op_by_op_seconds(node: Node) -> float:
    """One PyTorch call per body op, each moving its own operands through memory."""
    return sum(LAUNCH_S["torch"] + node_roofline(n) for n in typed_body(node).nodes)


@kernel(fused("Region"), impl="op by op", generic=True, estimate=op_by_op_seconds)
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
