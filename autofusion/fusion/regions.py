"""Automatic fusion: the connected elementwise, broadcast, reshape-like and row-reduction work
no rule named, grouped into regions; each region becomes one fused node (autofusion::Region)
run as one generated kernel.

    1. candidates  a node can join a region when generated kernels compute its op (a scalar
                   expression, ir/scalar.py; a row reduction or softmax, ir/scalar.py ROW_OPS;
                   a reshape or transpose, ir/region_space.py), its data inputs and output are
                   float32 of known shape, its axes or target shape are constants, and a
                   transpose keeps the innermost axis innermost (the kernels read it in place,
                   so the inner loop stays contiguous)
    2. grow        in topological order, a candidate joins the region of one of its producers,
                   the most recently started first, when (a) every other producer's group
                   started before that region did, (b) it fits the region's iteration space
                   (ir/region_space.py: it broadcasts with it; a reduction reduces the region's
                   innermost axes, the same ones as the region's other reductions: one row
                   structure per region; a reshape keeps the space indexable) and (c) the region
                   stays within the size limits; failing every producer's, it joins on the same
                   terms a sibling: the last region reading one of its inputs (a norm's E[x]
                   and E[x²]); otherwise it starts a region of its own. Once it has joined,
                   its other producers' regions merge into that one where the same terms hold
                   for both together (two chains meeting at an Add: |a|² + |b|²)
    3. keep        a region is kept when the cost model says one kernel beats its ops one by
                   one (a single op never does); the others dissolve
    4. rewrite     each kept region becomes one Region node whose body is a copy of its ops

A region's class is the max of its members' (OpClass: ELEMWISE < BROADCAST < INJECTIVE <
REDUCTION); what the kernel does per class is in backend/native/kernels.py.

Why (a) is enough for acyclicity: order every group (a region, or a node outside any) by the
position of its first node. Before any join that order is topological. A join adds edges only
into the joined region, from groups that (a) says come earlier; so the order stays topological
and the grouped graph stays a DAG. A sibling join is the same join (all its producers' groups
come earlier), and nothing in (b) adds edges, so siblings, reductions and views keep the
argument as it was. It is one comparison per input, and (b) a few per axis (a reshape that
refines the space rewrites the region's frames, at most once per factor of its size): the
planner is near-linear in the graph's size. It may refuse a join that would have been safe;
the report says so ("order").

Every candidate left alone, and every op next to a region that could not join it, gets a reason
code (as graph-autofusion's NF codes): see REASONS.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import DType, Graph, Node, OpClass, Value, lookup
from ..ir.builder import FUSED_DOMAIN
from ..ir.region_space import (RESHAPES, VIEWS, LayoutError, Space, computable, data_inputs,
                               is_row_op, reduced_axes)
from ..ir.scalar import expression
from .cost import BANDWIDTH_BPS, LAUNCH_S, nbytes, seconds

NAME = "AutoFusion"                  # the regions' name in the disable list
MAX_NODES = 1024                     # ops per region (default; a control)
MAX_INPUTS = 32                      # tensors a region reads (default; a control)

REASONS = {
    "opaque": "its op has no scalar expression, row reduction or view, so generated kernels "
              "cannot compute it",
    "dtype": "a value is not float32, the generated kernels' type",
    "rank": "a value's shape is unknown (or symbolic, for a reduction or a view)",
    "axes": "its axes or target shape are not constants (or it reduces none)",
    "order": "its other inputs come from a group started after the region (joining could make "
             "a cycle)",
    "shape": "its shape does not broadcast with the region's",
    "inner": "it reduces axes that are not an innermost run of the region's iteration space",
    "rows": "the region already reduces other axes (one row structure per region)",
    "view": "it reshapes or aligns the region's iteration space in a way the kernel cannot index",
    "stride": "a transpose that moves the innermost axis: the kernel's inner loop would step "
              "across rows on one side (left to the transpose kernel)",
    "size": "the region has reached its size limit ({limit} ops)",
    "inputs": "the region would read more than {limit} tensors",
    "alone": "a region of one op does not pay (no launch or memory traffic saved)",
}


@dataclass(eq=False)
class Region:
    nodes: list[Node]
    first: int                       # topological position of its first node
    space: Space                     # the iteration space and how each member maps onto it
    inputs: set[int] = field(default_factory=set)   # id() of tensors read from outside

    @property
    def kernel_name(self) -> str:
        return kernel_name(self.nodes)


@dataclass
class NotFused:
    node: str
    op: str
    code: str
    reason: str


@dataclass
class RegionPlan:
    regions: list[Region]
    not_fused: list[NotFused]


def kernel_name(nodes: list[Node]) -> str:
    """fused_sigmoid_mul_add: the region's distinct ops in order, the first four (a fused
    activation by its name: fused_silu_add)."""
    ops = list(dict.fromkeys((n.attr("activation") or n.op_type).lower() for n in nodes))
    return "fused_" + "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")


def _refusal(node: Node) -> str | None:
    """The reason code why the node cannot be in any region, or None."""
    if not computable(node) or any(v.uses for v in node.outputs[1:]):
        return "opaque"   # (a second output in use: Dropout's mask)
    data = data_inputs(node)
    if any(v is not None and v.const is None for v in node.inputs[len(data):]):
        return "axes"   # (before the output's shape, which they decide)
    for v in [*data, node.outputs[0]]:
        if v is None:
            continue
        if v.dtype != DType.FLOAT:
            return "dtype"
        if v.shape is None or any(d is None for d in v.shape):
            return "rank"
        if (is_row_op(node) or node.op in VIEWS) and any(not isinstance(d, int) for d in v.shape):
            return "rank"   # rows and views are laid out at compile time: static sizes only
    if is_row_op(node):
        try:
            reduced_axes(node)
        except LayoutError as e:
            return e.code
    if node.op == "Transpose" and _moves_innermost(node):
        return "stride"
    return None


def _moves_innermost(node: Node) -> bool:
    """A transpose whose last axis is not the input's last of size > 1 (the batch and head
    permutes of attention keep it; NCHW ↔ NHWC does not)."""
    shape = node.inputs[0].shape
    perm = node.attr("perm") or list(range(len(shape)))[::-1]
    moved = [p for p in perm if shape[p] != 1]
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    return bool(kept) and moved[-1] != kept[-1]


def _written_in(v: Value) -> bool:
    """A constant the region's body carries: a float scalar (written into the code), or a
    reshape's target shape or a reduction's axes."""
    return v.const is not None and (v.const.size == 1 or v.dtype != DType.FLOAT)


def plan_regions(graph: Graph, max_nodes: int = MAX_NODES, max_inputs: int = MAX_INPUTS) -> RegionPlan:
    """Group the graph's candidates into regions (nothing is changed)."""
    order = graph.nodes
    pos = {n: i for i, n in enumerate(order)}
    group: dict[Node, Region] = {}
    why: dict[Node, tuple[str, dict]] = {}
    candidates = {n for n in order if _refusal(n) is None}

    def started(n: Node) -> int:   # where a producer's group starts
        r = group.get(n)
        return r.first if r is not None else pos[n]

    def refuses(n: Node, r: Region, producers) -> tuple[str, dict] | None:
        """Why n cannot join r (and if it can, it has)."""
        if any(started(p) >= r.first for p in producers if group.get(p) is not r):
            return "order", {}
        if len(r.nodes) >= max_nodes:
            return "size", {"limit": max_nodes}
        reads = r.inputs | _reads(n, r, group)
        if len(reads) > max_inputs:
            return "inputs", {"limit": max_inputs}
        try:
            r.space.join(n)
        except LayoutError as e:
            return e.code, {}
        r.nodes.append(n)
        r.inputs = reads
        return None

    reader: dict[int, Region] = {}   # id() of a tensor read from outside → the last region reading
    moved: dict[Region, Region] = {}   # a region merged into another → that one
    for n in order:
        if n not in candidates:
            continue
        producers = {v.producer for v in n.inputs if v is not None and v.producer is not None}
        joined = None
        tried = {group[p] for p in producers if p in group}
        for r in sorted(tried, key=lambda r: -r.first):
            reason = refuses(n, r, producers)
            if reason is None:
                joined = r
                break
            why[n] = reason
        # else a sibling: the last region reading one of the same tensors (a norm's mean and
        # mean of squares, both of x), on the same terms
        siblings = {_live(reader[id(v)], moved) for v in data_inputs(n) if v is not None and id(v) in reader}
        siblings -= tried
        for r in sorted(siblings, key=lambda r: -r.first) if joined is None else ():
            if refuses(n, r, producers) is None:
                joined = r
                break
        if joined is None:
            try:
                space = Space.start(n)
            except LayoutError as e:   # it cannot be in a region even alone
                why.setdefault(n, (e.code, {}))
                continue
            joined = Region([n], pos[n], space)
            joined.inputs = _reads(n, joined, group)
        else:
            why.pop(n, None)
            for other in sorted(tried - {joined}, key=lambda r: -r.first):
                merged = _merged(joined, other, pos, group, max_nodes, max_inputs)
                if merged is not None:
                    for m in other.nodes:
                        group[m] = joined
                    moved[other] = joined
                    joined.nodes, joined.first, joined.space, joined.inputs = merged
        group[n] = joined
        for v in data_inputs(n):
            if v is not None and (v.producer is None or group.get(v.producer) is not joined):
                reader[id(v)] = joined

    regions = list(dict.fromkeys(group.values()))
    kept = [r for r in regions if _pays(r)]
    dissolved = set(regions) - set(kept)
    not_fused = []
    for r in regions:   # a region's first op that could not join its producer's, and why
        for n in (r.nodes if r in dissolved else r.nodes[:1]):
            alone = r in dissolved and n.op not in VIEWS   # a view alone: nothing it could have saved
            code, params = why.get(n, ("alone", {}) if alone else (None, {}))
            if code:
                not_fused.append(NotFused(n.name, n.op_type, code, REASONS[code].format(**params)))
    members = {n for r in kept for n in r.nodes}
    for n in order:   # ops of a kind regions take, refused; ops next to a region it cannot take
        if n in members or n in group:
            continue
        if n in candidates:   # it fits no iteration space, even alone
            code, params = why[n]
            not_fused.append(NotFused(n.name, n.op_type, code, REASONS[code].format(**params)))
            continue
        opdef = lookup(n.domain, n.op_type)
        near = any(v is not None and v.producer in members for v in n.inputs) or \
            any(u in members for v in n.outputs for u in v.users)
        if expression(n) is not None or is_row_op(n) or \
                (near and opdef is not None and opdef.op_class <= OpClass.REDUCTION):
            code = _refusal(n) or "opaque"
            not_fused.append(NotFused(n.name, n.op_type, code, REASONS[code]))
    return RegionPlan(kept, not_fused)


def _live(r: Region, moved: dict[Region, Region]) -> Region:
    while r in moved:
        r = moved[r]
    return r


MERGED_NODES = 16    # a region merged into the one its reader joined has at most this many ops,
MERGING_NODES = 256  # and that one at most this many: a merge re-lays the space out (bounded work)


def _merged(r: Region, other: Region, pos: dict[Node, int], group: dict[Node, Region],
            max_nodes: int, max_inputs: int) -> tuple | None:
    """Region r (which a node just joined) and `other`, another of its producers' regions, as one: its
    nodes, first position, space and inputs; None where that could make a cycle, breaks the
    space or the limits. Two chains that meet (|a|² + |b|², two branches into one Add) are one
    kernel so. Safe as a join is (the top of this file): every producer from outside both
    started before the earlier of the two, so the merged group still comes after all it reads."""
    if len(other.nodes) > MERGED_NODES or len(r.nodes) > MERGING_NODES or \
            len(other.nodes) + len(r.nodes) > max_nodes:
        return None
    members = set(r.nodes) | set(other.nodes)
    first = min(r.first, other.first)
    for m in members:
        for v in m.inputs:
            p = v.producer if v is not None else None
            if p is not None and p not in members and \
                    (group[p].first if p in group else pos[p]) >= first:
                return None
    nodes = sorted(members, key=pos.__getitem__)
    try:
        space = Space.start(nodes[0])
        for m in nodes[1:]:
            space.join(m)
    except LayoutError:
        return None
    inputs = {id(v) for m in nodes for v in m.inputs if v is not None and not _written_in(v)
              and v.producer not in members}
    if len(inputs) > max_inputs:
        return None
    return nodes, first, space, inputs


def _reads(n: Node, r: Region, group: dict[Node, Region]) -> set[int]:
    """The tensors n reads from outside region r (scalar constants are written into the code)."""
    return {id(v) for v in n.inputs if v is not None and not _written_in(v)
            and (v.producer is None or group.get(v.producer) is not r)}


def _pays(r: Region) -> bool:
    """One kernel moving the region's inputs and outputs once beats its ops one by one (a view
    costs nothing one by one: a region must do the work of two ops to pay)."""
    work = [n for n in r.nodes if n.op not in RESHAPES]
    if len(work) < 2:
        return False
    ins, outs = _boundary(r.nodes)
    fused = LAUNCH_S + sum(nbytes(v) for v in ins + outs) / BANDWIDTH_BPS
    return fused < seconds(work)


def _boundary(nodes: list[Node]) -> tuple[list[Value], list[Value]]:
    """What a group of nodes reads from outside (in first-use order) and what leaves it."""
    members = set(nodes)
    outputs = set(map(id, nodes[0].graph.outputs)) if nodes[0].graph else set()
    ins = list(dict.fromkeys(v for n in nodes for v in n.inputs
                             if v is not None and v.producer not in members))
    outs = [v for n in nodes for v in n.outputs
            if id(v) in outputs or any(u not in members for u in v.users)]
    return ins, outs


def fuse_regions(graph: Graph, plan: RegionPlan) -> list[Node]:
    """Replace each planned region by one Region node; returns the new nodes."""
    made = []
    for k, r in enumerate(plan.regions):
        made.append(_rewrite(graph, r, k))
    return made


def _rewrite(graph: Graph, r: Region, k: int) -> Node:
    ins, outs = _boundary(r.nodes)
    inputs = [v for v in ins if not _written_in(v)]
    body = Graph(f"{r.kernel_name}_{k}", dict(graph.opset))
    copies: dict[int, Value] = {}
    for i, v in enumerate(inputs):
        copies[id(v)] = body.add_input(f"in{i}", v.shape, v.dtype)
    for v in ins:
        if _written_in(v):
            copies[id(v)] = body.add_constant(body.fresh_name(v.name), v.const, v.dtype)
    for n in r.nodes:
        outs_copy = [Value(body.fresh_name(o.name), o.shape, o.dtype) for o in n.outputs]
        body.add_node(n.op_type, [None if v is None else copies[id(v)] for v in n.inputs],
                      outs_copy, dict(n.attrs), n.name, n.domain, n.origin)
        copies.update((id(o), c) for o, c in zip(n.outputs, outs_copy))
    body.outputs = [copies[id(v)] for v in outs]
    node = graph.add_node(
        "Region", inputs, [graph.fresh_name(f"{r.kernel_name}_{k}_out{j}") for j in range(len(outs))],
        {"body": body, "kernel": r.kernel_name}, graph.fresh_name(f"{r.kernel_name}_{k}"),
        FUSED_DOMAIN, tuple(o for n in r.nodes for o in n.origin))
    node.meta["rule"] = NAME
    for old, new in zip(outs, node.outputs):
        new.shape, new.dtype = old.shape, old.dtype
        graph.replace_all_uses(old, new)
        old.name, new.name = new.name, old.name   # the value keeps the name users know it by
    for n in reversed(r.nodes):   # consumers before producers: each is unused when removed
        graph.remove(n)
    return node
