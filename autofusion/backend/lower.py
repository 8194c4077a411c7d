"""Lowering: the fused graph → a Plan, every decision the emitters follow, as data you can print.

    1. choose   for each node, every implementation of its op on the allowed targets is asked;
                the cheapest that accepts it wins; the others' reasons are kept
    2. order    of the nodes a run needs (those the outputs depend on through what each chosen
                implementation reads at run time: a shape computation only native steps read,
                as sizes they take from the plan, is not run), a topological order that stays on
                one target while it can (Kahn's algorithm, ready nodes of the current target
                first), so native runs are as long as the graph allows
    3. split    partitions: maximal runs of native nodes in that order, each one C++ function
                called once per run; every torch node is a step of its own
    4. precision where the compile asks for bf16: each native convolution or product computes in
                bf16, except the nodes the precision guard keeps in fp32 (backend/precision.py)
    5. values   for each native partition, what crosses its boundary (inputs, outputs,
                constants), and for each value inside: its layout (plain where a partition
                output or a consumer needs dense rows, else what oneDNN picks), its lifetime
                (first and last step) and whether its producer overwrites its input in place

Nothing here changes the graph.
"""
from __future__ import annotations

import functools

import heapq
from dataclasses import dataclass, field

from ..errors import AutofusionError, KernelBuildError
from ..ir import Graph, Node, Value
from ..ir.activations import clamps_nan
from ..ir.region_space import VIEWS
from ..ir.scalar import ROW_OPS
from ..ir.sequences import touches_sequences
from ..ir.symbolic import is_size, symbols
from ..passes.cleanup import computable_ahead
from .impl import Impl, implementations

BACKENDS = ("auto", "native", "torch")


@dataclass
class Decision:
    node: Node
    impl: Impl
    refused: list[tuple[str, str]]    # (implementation, reason) of the others considered
    precision: str = "fp32"           # what its products compute in: "fp32" | "bf16"


@dataclass
class ValuePlan:
    layout: str                       # "plain" | "any"
    first: int                        # step that writes it, within its partition
    last: int                         # last step that reads it
    in_place_of: Value | None = None  # its producer writes over this input's bytes
    bf16: bool = False                # only products in bf16 read it: a product writes it in bf16
    order: tuple[int, ...] | None = None   # its axes in memory, outermost first (None: as they are)


@dataclass
class Partition:
    index: int
    target: str
    nodes: list[Node]
    inputs: list[Value] = field(default_factory=list)    # read inside, made outside (no constants)
    outputs: list[Value] = field(default_factory=list)   # made inside, read outside
    values: dict[Value, ValuePlan] = field(default_factory=dict)


@dataclass
class Plan:
    backend: str                      # what was asked for
    native: str | None                # why native code cannot run at all, None when it can
    decisions: dict[Node, Decision]
    partitions: list[Partition]       # in execution order; torch partitions hold one node
    precision: str = "fp32"           # what the compile asked the products to compute in
    unused: list[Node] = field(default_factory=list)   # not run: only sizes native steps take from the plan
    # what runs each native node, as its built partition reports (oneDNN's implementation, the
    # runtime's own loop): the runtime picks some at build time, from layouts only oneDNN knows;
    # for symbolic sizes, as last set up, for these sizes (by partition index)
    kernels: dict[Node, str] = field(default_factory=dict)
    # what the runtime chose for a native node where the plan left it open (a layout, where a
    # mask is added), each with its reason, as last set up
    choices: dict[Node, list[str]] = field(default_factory=dict)
    sizes: dict[int, dict[str, int]] = field(default_factory=dict)

    def set_up(self, index: int, nodes: list[Node], kernels: list[str], choices: list[list[str]],
               sizes: dict[str, int]) -> None:
        """Native partition `index` was set up for a set of sizes: what runs its nodes, what the
        runtime chose for them, and for which sizes (the fields above, as last set up)."""
        self.kernels.update(zip(nodes, kernels))
        self.choices.update(zip(nodes, choices))
        if sizes:
            self.sizes[index] = sizes

    def via(self, node: Node) -> str:
        """The node's implementation, with what runs it where its partition says."""
        kernel = self.kernels.get(node)
        return self.decisions[node].impl.name + (f" [{kernel}]" if kernel else "")

    @functools.cached_property
    def nan_clamping(self) -> list[str]:
        """The nodes oneDNN runs as a ReLU or Clip (a step, or a convolution's or product's
        post-op): its max/min instructions give 0 or the bound for NaN, where ONNX gives NaN."""
        return [n.name for n, d in self.decisions.items() if d.impl.name == "onednn" and clamps_nan(n)]

    def summary(self) -> str:
        """One line for the report."""
        native = [p for p in self.partitions if p.target == "native"]
        n_native = sum(len(p.nodes) for p in native)
        n_torch = sum(len(p.nodes) for p in self.partitions if p.target == "torch")
        if self.native is not None and self.backend != "torch":
            return f"Backend: torch (native unavailable: {self.native})"
        if self.backend == "torch":
            return f"Backend: torch ({n_torch} nodes as PyTorch calls)"
        return (f"Backend: native — {n_native} node(s) in {len(native)} native partition(s), "
                f"{n_torch} node(s) on PyTorch" + (f", {len(self.unused)} not run (sizes the plan holds)"
                                                   if self.unused else ""))

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  not run {n.name} ({n.op}): only sizes native steps read, which the plan holds"
                  for n in self.unused]
        for part in self.partitions:
            if part.target == "torch":
                d = self.decisions[part.nodes[0]]
                lines.append(f"  torch   {d.node.name} ({d.node.op}) via {d.impl.name}"
                             + "".join(f"\n            not {name}: {why}" for name, why in d.refused))
                continue
            sizes = self.sizes.get(part.index)
            lines.append(f"  native partition {part.index}: {len(part.nodes)} node(s), inputs "
                         f"{[v.name for v in part.inputs]}, outputs {[v.name for v in part.outputs]}"
                         + (f"; last set up for {', '.join(f'{k}={v}' for k, v in sizes.items())}"
                            if sizes else ""))
            for step, n in enumerate(part.nodes):
                outs = []
                for v in n.outputs:
                    vp = part.values.get(v)
                    if vp is not None:
                        order = f" order {','.join(map(str, vp.order))}" if vp.order else ""
                        outs.append(f"{v.name} {v.type_str()} {vp.layout}{' bf16' if vp.bf16 else ''}{order} "
                                    f"steps {vp.first}-{vp.last}"
                                    + (f" in place of {vp.in_place_of.name}" if vp.in_place_of else ""))
                    elif v in part.outputs:
                        outs.append(f"{v.name} {v.type_str()} (partition output)")
                d = self.decisions[n]
                at = f" in {d.precision}" if self.precision != "fp32" and d.impl.reduced else ""
                lines.append(f"    {step:3d} {n.name} ({n.op}) via {self.via(n)}{at}"
                             + (f" -> {'; '.join(outs)}" if outs else ""))
                lines += [f"          chose: {c}" for c in self.choices.get(n, ())]
        return "\n".join(lines)


def lower(graph: Graph, backend: str = "auto", native_unavailable: str | None = None,
          precision: str = "fp32", keep_fp32: frozenset[str] = frozenset()) -> Plan:
    """The plan for a graph. native_unavailable: why native code cannot run here, if it cannot.
    precision: "bf16" runs native convolutions and products in bf16, but for the nodes named in
    keep_fp32."""
    if backend not in BACKENDS:
        raise AutofusionError(f"backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    targets = ("torch",) if backend == "torch" or native_unavailable else ("torch", "native")
    decisions = {n: choose(n, targets) for n in graph.nodes}
    if precision == "bf16":
        for n, d in decisions.items():
            if d.impl.reduced and n.name not in keep_fp32:
                d.precision = "bf16"
    ahead = set(sizes_derived(graph))
    for n in ahead:   # once per set of sizes on PyTorch (executor.SizesMemo), not each call
        if decisions[n].impl.target == "native":
            d = decisions[n] = choose(n, ("torch",))
            d.refused.insert(0, ("onednn", "it depends on the inputs' sizes alone: computed once per set of "
                                           "sizes, ahead of the run"))
    inputs_give = {d for v in graph.inputs for d in v.shape or () if isinstance(d, str)}
    while True:   # each round leaves a node whose sizes no one gives to PyTorch; rarely a second
        needed = needed_at_run_time(graph, decisions)   # a node moved to PyTorch reads all its inputs
        order = schedule(graph, {n: d.impl.target for n, d in decisions.items()}, needed)
        partitions = split(order, decisions)
        given = inputs_give | set(run_time_sizes(order, decisions, ahead))
        unbound = {n: s for part in partitions if part.target == "native"
                   for n, s in unbound_sizes(part, given).items()}
        if not unbound:
            break
        for n, s in unbound.items():
            d = decisions[n] = choose(n, ("torch",))
            d.refused.insert(0, ("onednn", f"its size {s!r} is known only at run time, and no input of "
                                           "its native partition has it as a dim"))
    for part in partitions:
        if part.target == "native":
            plan_values(part, decisions, graph, needed)
    return Plan(backend, native_unavailable, decisions, partitions, precision,
                unused=[n for n in graph.nodes if n not in needed])


def sizes_derived(graph: Graph) -> list[Node]:
    """The nodes whose results depend on the graph inputs' sizes alone (an anchor grid, a causal
    mask, a dynamic export's shape arithmetic): a Shape or Size of an input or of such a result,
    and each node computable ahead that reads only those results and constants. None where a
    call's sizes do not fix every input's shape."""
    if any(v.shape is None or v.sequence is not None or not all(isinstance(d, (int, str)) for d in v.shape)
           for v in graph.inputs):
        return []
    inputs = set(map(id, graph.inputs))
    made: set[int] = set()   # the outputs of the nodes found
    found = []
    for n in graph.nodes:
        if not computable_ahead(n):
            continue
        if n.op_type in ("Shape", "Size"):
            ok = id(n.inputs[0]) in inputs or id(n.inputs[0]) in made
        else:
            ins = [v for v in n.inputs if v is not None]
            ok = any(id(v) in made for v in ins) and all(id(v) in made or v.const is not None for v in ins)
        if ok:
            found.append(n)
            made |= {id(v) for v in n.outputs}
    return found


def run_time_sizes(order: list[Node], decisions: dict[Node, Decision], ahead: set[Node]) -> dict[str, tuple[Value, int]]:
    """The sizes a call learns as it runs: each symbol that is a dim of a PyTorch step's result
    (a Resize to computed sizes, a count NonZero made), with the first such result in the run's
    order and its axis. The executor reads it there, and hands it to the native partitions after
    (whose inputs may show it only through arithmetic: an FPN level's floor(h/8)). Steps computed
    from the inputs' sizes alone (`ahead`, memoized) are left out."""
    found: dict[str, tuple[Value, int]] = {}
    for n in order:
        if decisions[n].impl.target != "torch" or n in ahead:
            continue
        for v in n.outputs:
            for axis, d in enumerate(v.shape or ()):
                if isinstance(d, str):
                    found.setdefault(d, (v, axis))
    return found


def unbound_sizes(part: Partition, given: set[str]) -> dict[Node, str]:
    """The nodes of a native partition that read or write a dim of a symbol neither a call gives
    (a graph input's) nor an input of the partition has as a dim (one known only at run time: a
    count NonZero made, a size ONNX's inference named and no rule derives): each with one."""
    inside = set(part.nodes)
    bound = set(given) | {d for n in part.nodes for v in n.inputs
                          if v is not None and v.producer not in inside for d in v.shape or ()
                          if isinstance(d, str)}
    out: dict[Node, str] = {}
    for n in part.nodes:
        free = {s for v in (*n.inputs, *n.outputs) if v is not None for d in v.shape or ()
                for s in symbols(d)} - bound
        if free:
            out[n] = min(free)
    return out


def needed_at_run_time(graph: Graph, decisions: dict[Node, Decision]) -> set[Node]:
    """The nodes the graph's outputs depend on through the inputs each node's implementation
    reads at run time (a native reshape takes its target's dims from the plan, not from the
    tensor a shape computation makes)."""
    needed: set[Node] = set()
    todo = [v.producer for v in graph.outputs if v.producer is not None]
    while todo:
        n = todo.pop()
        if n in needed:
            continue
        needed.add(n)
        todo += [v.producer for v in decisions[n].impl.reads(n) if v.producer is not None]
    return needed


def choose(node: Node, targets: tuple[str, ...]) -> Decision:
    accepted, refused = [], []
    for impl in (i for t in targets for i in implementations(node.op, t)):
        if impl.target == "native" and touches_sequences(node):
            why = "a tensor sequence (a Python list at run time): native partitions pass only tensors"
        else:
            why = impl.check(node)
        if why is None:
            accepted.append(impl)
        else:
            refused.append((impl.name, why))
    if not accepted:
        raise KernelBuildError(f"no implementation accepts {node.describe()}: "
                               + "; ".join(f"{n}: {w}" for n, w in refused))
    best = min(accepted, key=lambda i: i.cost(node))   # ties: the first registered
    rejected = [(i.name, "costs more") for i in accepted if i is not best]
    return Decision(node, best, refused + rejected)


def schedule(graph: Graph, target: dict[Node, str], needed: set[Node] | None = None) -> list[Node]:
    """A topological order of the needed nodes (default all) that takes the ready nodes of the
    current target first."""
    nodes = [n for n in graph.nodes if needed is None or n in needed]
    rank = {n: i for i, n in enumerate(nodes)}
    pending = {n: len({v.producer for v in n.inputs if v is not None and v.producer in rank})
               for n in nodes}
    ready: dict[str, list[int]] = {"torch": [], "native": []}   # ranks, in the graph's order
    for n in nodes:
        if not pending[n]:
            heapq.heappush(ready[target[n]], rank[n])
    order, current = [], None
    while ready["torch"] or ready["native"]:
        if current is None or not ready[current]:
            current = min((t for t in ready if ready[t]), key=lambda t: ready[t][0])
        n = nodes[heapq.heappop(ready[current])]
        order.append(n)
        for user in {u for v in n.outputs for u in v.users if u in rank}:
            pending[user] -= 1
            if not pending[user]:
                heapq.heappush(ready[target[user]], rank[user])
    return order


def split(order: list[Node], decisions: dict[Node, Decision]) -> list[Partition]:
    parts: list[Partition] = []
    for n in order:
        target = decisions[n].impl.target
        if target == "native" and parts and parts[-1].target == "native":
            parts[-1].nodes.append(n)
        else:
            parts.append(Partition(len(parts), target, [n]))
    return parts


# the operands a step in bf16 reads in bf16 (oneDNN's src and weights); the rest stay fp32
PRODUCT_OPERANDS = {"Attention": (0, 1, 2)}   # q, k, v; the scores and softmax are fp32 (runtime attention.cpp)
DEFAULT_OPERANDS = (0, 1)


def bf16_operands(node: Node) -> tuple[int, ...]:
    return PRODUCT_OPERANDS.get(node.op_type, DEFAULT_OPERANDS)


def _read_by_bf16_products_only(part: Partition, decisions: dict[Node, Decision],
                                readers: dict[Value, list[tuple[Node, int]]], out_set: set[Value]):
    """value → whether only products the plan runs in bf16 read it, as operands they convert to
    bf16 anyway, directly or through views that are not partition outputs: a bf16 product writes
    such a value dense in bf16 (a conversion and half the bytes saved)."""
    memo: dict[Value, bool] = {}

    def only(v: Value) -> bool:
        if v not in memo:
            memo[v] = v not in out_set and bool(readers.get(v)) and all(
                (decisions[r].impl.reduced and decisions[r].precision == "bf16"
                 and i in bf16_operands(r))
                or (decisions[r].impl.view and all(only(o) for o in r.outputs))
                for r, i in readers[v])
        return memo[v]
    return only


def _order_for_reader(writer: Node, reads: list[tuple[Node, int]],
                      decisions: dict[Node, Decision]) -> tuple[int, ...] | None:
    """The axis order a writer that can reorder its output stores it in: that of the one
    Transpose that reads it, when the transpose keeps the last axis last (an attention's heads
    merged back, [B,H,S,D] → [B,S,H,D]). The transpose's output is then dense, and the reshape
    after it a view, where it would be a copy."""
    if not decisions[writer].impl.reorders_output or len(reads) != 1:
        return None
    reader = reads[0][0]
    if reader.op_type != "Transpose" or not decisions[reader].impl.view:
        return None
    rank = reader.inputs[0].rank
    perm = tuple(reader.attr("perm") or range(rank)[::-1])
    return perm if perm[-1] == rank - 1 and perm != tuple(range(rank)) else None


CONVOLUTIONS = frozenset({"Conv", "ConvTranspose", "autofusion::FusedConv"})


def channels_last(rank: int) -> tuple[int, ...]:
    """NCHW's axes stored as NHWC (NCL as NLC, NCDHW as NDHWC), outermost first."""
    return (0, *range(2, rank), 1)


def _channels_last_operands(n: Node, part: Partition, decisions: dict[Node, Decision],
                            readers: dict[Value, list[tuple[Node, int]]]) -> list[Value]:
    """The tensors an elementwise region next to a convolution reads and writes channels-last:
    convolutions run channels-last, and a row-major region between them costs a reorder on
    each side (DenseNet's BatchNorm+ReLU after each Concat: 62 of each). They are its operands
    of its output's full shape (a per-channel scale or a scalar broadcasts either way), when all
    are values inside the partition that no other step needs row-major or as a view; none
    otherwise."""
    if n.op != "autofusion::Region" or any(m.op in ROW_OPS or m.op in VIEWS for m in n.attrs["body"].nodes):
        return []
    shape = n.outputs[0].shape
    if shape is None or len(shape) < 3 or not all(is_size(d) for d in shape):
        return []
    full = [v for v in (*n.inputs, *n.outputs) if v is not None and v.const is None and v.shape == shape]
    neighbours = [m for v in full for m in (v.producer, *(r for r, _ in readers.get(v, ())))]
    if any(v not in part.values or decisions[v.producer].impl.view for v in full) or \
            any(r is not n and (decisions[r].impl.reads_plain(i) or decisions[r].impl.view)
                for v in full for r, i in readers.get(v, ())) or \
            not any(m.op in CONVOLUTIONS for m in neighbours):
        return []
    return full


def plan_values(part: Partition, decisions: dict[Node, Decision], graph: Graph,
                needed: set[Node] | None = None) -> None:
    """Boundary, layouts, lifetimes and in-place steps of one native partition (`needed`: the
    nodes a run runs, default all)."""
    step_of = {n: i for i, n in enumerate(part.nodes)}
    graph_outputs = set(graph.outputs)
    inputs: dict[Value, None] = {}
    for n in part.nodes:
        for v in decisions[n].impl.reads(n):
            if v.const is None and v.producer not in step_of:
                inputs.setdefault(v)
    part.inputs = list(inputs)
    outputs = [v for n in part.nodes for v in n.outputs
               if v in graph_outputs or any(u not in step_of and (needed is None or u in needed) for u in v.users)]
    part.outputs = outputs
    out_set = set(outputs)

    readers: dict[Value, list[tuple[Node, int]]] = {}
    for n in part.nodes:
        impl = decisions[n].impl
        picked = range(len(n.inputs)) if impl.tensor_inputs is None else impl.tensor_inputs
        for i in picked:
            v = n.input(i)
            if v is not None and v.producer in step_of:
                readers.setdefault(v, []).append((n, i))
    bf16_only = _read_by_bf16_products_only(part, decisions, readers, out_set)
    for n in part.nodes:
        for v in n.outputs:
            reads = readers.get(v)
            if v in out_set or not reads:
                continue   # the caller's buffer, or never read (the emitter writes a temporary)
            plain = any(decisions[r].impl.reads_plain(i) for r, i in reads)
            bf16 = decisions[n].precision == "bf16" and decisions[n].impl.reduced and bf16_only(v)
            part.values[v] = ValuePlan("plain" if plain else "any", step_of[n],
                                       max(step_of[r] for r, _ in reads), bf16=bf16,
                                       order=_order_for_reader(n, reads, decisions))
    for n in part.nodes:
        for v in _channels_last_operands(n, part, decisions, readers):
            part.values[v].order = channels_last(len(v.shape))

    # in place: a step may write over the operand its impl's `overwrites` names (an eltwise or
    # binary step's first, a convolution's residual) when that operand, and every view of its
    # bytes, is read for the last time by this step
    views = {v: n.inputs[0] for n in part.nodes if decisions[n].impl.view for v in n.outputs}
    root = {}
    for v in part.values:
        r = v
        while r in views:
            r = views[r]
        root[v] = r
    group_last: dict[Value, int] = {}
    for v, vp in part.values.items():
        group_last[root[v]] = max(group_last.get(root[v], -1), vp.last)
    for n in part.nodes:
        overwrites = decisions[n].impl.overwrites
        if overwrites is None:
            continue
        out, src = n.outputs[0], overwrites(n)
        vp, sp = part.values.get(out), part.values.get(src)
        if vp is None or sp is None or src in views:
            continue
        others = [v for v in n.inputs if v is not None and v is not src]
        if group_last[src] != step_of[n] or any(root.get(v) is src for v in others):
            continue   # its bytes are read later, or by this step through another operand
        if vp.layout == "plain" and sp.layout != "plain":
            continue
        vp.in_place_of = src
