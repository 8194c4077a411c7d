"""The nodes autofusion has no kernel for, grouped into OnnxRuntimeCall nodes (ir/onnx_runtime_call.py)
so every valid model compiles: ONNX Runtime runs them, autofusion the rest.

A node is foreign when
  - its op is not in the op table (TfIdfVectorizer, com.microsoft::Gelu, a model-local function),
  - it has a subgraph attribute, unless it is an If, Loop, Scan (from Scan-9) or SequenceMap
    whose bodies hold only values the IR holds and nodes that run here (autofusion's own
    control flow then): a body with a foreign node keeps its whole node here, its outer reads
    by name becoming inputs of the group, or
  - it reads or writes a value the IR cannot hold: a map, an optional (optionals.py reads those
    of tensors as tensors before this), a sequence of anything but tensors, or strings.
A sequence of tensors is an IR value (ir/sequences.py), and may cross into or out of a group:
ONNX Runtime takes and returns it as a list.

Connected foreign nodes (one reads a value another makes) form one group, so the values between
them, whatever their type, never leave ONNX Runtime, and one session call runs them all. A group
runs as one node, so it must not reach itself through the rest of the graph (A→B with A→Relu→B
would wait on itself). Groups form in one pass in topological order: a foreign node joins the
group of each foreign node it reads from, unless the joined group would reach itself; the check
walks forward from the group through the nodes placed so far.

The model's node list is rewritten in place, each group standing as one node of the
autofusion.onnxruntime domain, in a topological order of the contracted graph.
"""
from __future__ import annotations

import functools
import heapq

import onnx
from onnx import helper

from ..errors import ModelLoadError, UnsupportedOpError
from ..ir import lookup, op_key
from ..ir.control_flow import BODIES
from ..ir.onnx_runtime_call import ORT_CALL, ORT_DOMAIN

def _subgraphs(n: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in n.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)]


def _free_names(g: onnx.GraphProto) -> set[str]:
    """The outer-scope values a subgraph (and the subgraphs in it) reads by name."""
    defined = {v.name for v in g.input} | {t.name for t in g.initializer} | \
        {o for n in g.node for o in n.output}
    used = {x for n in g.node for x in n.input if x}
    for n in g.node:
        for sub in _subgraphs(n):
            used |= _free_names(sub)
    return used - defined


def _reads(n: onnx.NodeProto) -> list[str]:
    """Every value the node reads: its inputs, then what its subgraphs read from outside."""
    outer = set().union(*map(_free_names, _subgraphs(n))) if n.attribute else set()
    return list(dict.fromkeys([x for x in n.input if x] + sorted(outer)))


def _not_a_tensor(t: onnx.TypeProto | None) -> str | None:
    """What a value is, when the IR cannot hold it (None: a tensor, or unknown)."""
    if t is None or t.WhichOneof("value") is None:
        return None
    if t.HasField("tensor_type"):
        return "string tensor" if t.tensor_type.elem_type == onnx.TensorProto.STRING else None
    if t.HasField("sequence_type"):   # a sequence of tensors is an IR value
        inner = _not_a_tensor(t.sequence_type.elem_type)
        nested = t.sequence_type.elem_type.HasField("sequence_type")
        return None if inner is None and not nested else f"sequence of {inner or 'sequences'}s"
    return t.WhichOneof("value").removesuffix("_type").replace("_", " ")


def _foreign(n: onnx.NodeProto, types: dict[str, onnx.TypeProto], opset: int = 21) -> bool:
    if n.op_type == "Constant" and n.domain == "":
        return any(a.name == "sparse_value" for a in n.attribute)
    if lookup(n.domain, n.op_type) is None or _subgraphs(n) and not bodies_run_here(n, types, opset):
        return True
    return any(_not_a_tensor(types.get(x)) for x in [*n.input, *n.output] if x)


def bodies_run_here(n: onnx.NodeProto, types: dict[str, onnx.TypeProto], opset: int) -> bool:
    """Whether a node with subgraphs is control flow autofusion runs (If, Loop, Scan but the
    Scan of opset 8, SequenceMap) with bodies of IR values whose every node runs here."""
    if n.domain not in ("", "ai.onnx") or n.op_type not in BODIES or n.op_type == "Scan" and opset < 9:
        return False
    for g in _subgraphs(n):
        inner = types | {vi.name: vi.type for vi in [*g.value_info, *g.input, *g.output]}
        if any(_not_a_tensor(vi.type) for vi in [*g.input, *g.output]) or \
                any(_foreign(m, inner, opset) for m in g.node):
            return False
    return True


def _kahn(preds: dict[int, set[int]]) -> list[int]:
    """A topological order, the smallest index first among those ready."""
    succs: dict[int, list[int]] = {v: [] for v in preds}
    for v, ps in preds.items():
        for p in ps:
            succs[p].append(v)
    pending = {v: len(ps) for v, ps in preds.items()}
    ready = [v for v, k in pending.items() if not k]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for s in succs[v]:
            pending[s] -= 1
            if not pending[s]:
                heapq.heappush(ready, s)
    return order


def _reenters(group: set[int], succs: dict[int, set[int]]) -> bool:
    """Whether a path leaves the group and comes back (it would wait on itself as one node)."""
    stack, seen = [s for v in group for s in succs[v] if s not in group], set()
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            for s in succs[v]:
                if s in group:
                    return True
                stack.append(s)
    return False


def _groups(order: list[int], preds: dict[int, set[int]],
            foreign: list[bool]) -> tuple[list[int], dict[int, set[int]]]:
    """Each node's group (named by its first node), and the contracted graph: each group and
    the groups it reads from. order: the nodes in a topological order; preds: their producers."""
    group = list(range(len(order)))

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i
    cpreds: dict[int, set[int]] = {}
    csuccs: dict[int, set[int]] = {}
    for i in order:
        cpreds[i] = {find(p) for p in preds[i]}
        csuccs[i] = set()
        for p in cpreds[i]:
            csuccs[p].add(i)
        if not foreign[i]:
            continue
        for g in sorted(p for p in cpreds[i] if foreign[p]):
            a, b = sorted((find(i), find(g)))
            if a == b or _reenters({a, b}, csuccs):
                continue
            group[b] = a   # merge b into a: b's edges become a's
            pb, sb = cpreds.pop(b), csuccs.pop(b)
            for p in pb:
                csuccs[p].discard(b)
                csuccs[p].add(a)
            for q in sb:
                cpreds[q].discard(b)
                cpreds[q].add(a)
            cpreds[a] = (cpreds[a] | pb) - {a, b}
            csuccs[a] = (csuccs[a] | sb) - {a, b}
    return [find(i) for i in range(len(order))], cpreds


def _functions_called(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> list[onnx.FunctionProto]:
    """The model-local functions the nodes call, and those these call."""
    defined = {(f.domain, f.name): f for f in model.functions}
    seen: set[tuple[str, str]] = set()
    todo = [(n.domain, n.op_type) for n in nodes]
    while todo:
        key = todo.pop()
        if key in defined and key not in seen:
            seen.add(key)
            todo.extend((n.domain, n.op_type) for n in defined[key].node)
    return [f for f in model.functions if (f.domain, f.name) in seen]


def _inputs(members: list[onnx.NodeProto]) -> list[str]:
    """What a group reads from outside itself, in the order its nodes first read them."""
    made = {o for n in members for o in n.output if o}
    return list(dict.fromkeys(x for n in members for x in _reads(n) if x not in made))


def _call(model: onnx.ModelProto, members: list[onnx.NodeProto], outputs: list[str]) -> onnx.NodeProto:
    """The OnnxRuntimeCall node standing for a group."""
    inputs = _inputs(members)
    part = onnx.ModelProto(ir_version=max(model.ir_version, 7), opset_import=model.opset_import,
                           functions=_functions_called(model, members))
    part.graph.name = members[0].name
    part.graph.node.extend(members)
    call = helper.make_node(ORT_CALL, inputs, outputs, name=members[0].name, domain=ORT_DOMAIN)
    call.attribute.extend([helper.make_attribute("model", part.SerializeToString()),
                           helper.make_attribute("ops", [op_key(n.domain, n.op_type) for n in members])])
    return call


def call_attributes(call: onnx.NodeProto) -> tuple[dict, tuple[str, ...]]:
    """The IR attributes of an OnnxRuntimeCall node this module wrote, and the names of the
    ONNX nodes it stands for."""
    attrs = {a.name: a for a in call.attribute}
    part = onnx.ModelProto.FromString(attrs["model"].s)
    return ({"model": attrs["model"].s, "input_names": list(call.input),
             "output_names": list(call.output), "ops": [s.decode() for s in attrs["ops"].strings]},
            tuple(n.name for n in part.graph.node))


def non_tensor_nodes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """The nodes of ops in the table that read or write a value the IR cannot hold (an optional
    of a sequence, a map, strings), as (op and what, node name): what a strict import refuses
    beyond the ops without a kernel."""
    g = model.graph
    types = {vi.name: vi.type for vi in [*g.value_info, *g.input, *g.output]}
    found = []
    for i, n in enumerate(g.node):
        kinds = [_not_a_tensor(types.get(x)) for x in [*n.input, *n.output] if x]
        kind = next((k for k in kinds if k), None)
        if kind and lookup(n.domain, n.op_type) is not None:
            article = "an" if kind[0] in "aeiou" else "a"
            found.append((f"{op_key(n.domain, n.op_type)} (on {article} {kind})", n.name or f"#{i}"))
    return found


@functools.lru_cache(maxsize=1)
def _onnx_runtime_ops() -> frozenset[tuple[str, str]]:
    """(domain, op) of every kernel ONNX Runtime's CPU provider registers."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort
    return frozenset((d.domain or "", d.op_name) for d in ort.get_all_opkernel_def()
                     if d.provider == "CPUExecutionProvider")


def _runs_nowhere(model: onnx.ModelProto, n: onnx.NodeProto) -> bool:
    """Whether neither ONNX Runtime (a kernel, a standard op's function body) nor the model (a
    local function) has the op: a custom op no one registered."""
    domain = "" if n.domain == "ai.onnx" else n.domain
    return (domain, n.op_type) not in _onnx_runtime_ops() and \
        not onnx.defs.has(n.op_type, domain) and \
        not any(f.name == n.op_type and f.domain == n.domain for f in model.functions)


def group_for_onnx_runtime(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """Rewrite the model's nodes so each group of foreign nodes is one OnnxRuntimeCall node;
    return every foreign node as (op, node name), what a strict import refuses. An op that runs
    nowhere (a custom op no one registered) is an UnsupportedOpError naming every such node."""
    g = model.graph
    types = {vi.name: vi.type for vi in [*g.value_info, *g.input, *g.output]}
    nodes = list(g.node)
    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 21)
    foreign = [_foreign(n, types, opset) for n in nodes]
    if not any(foreign):
        return []
    nowhere = [(op_key(n.domain, n.op_type), n.name or f"{n.op_type}_{i}")
               for i, (n, f) in enumerate(zip(nodes, foreign)) if f and _runs_nowhere(model, n)]
    if nowhere:
        raise UnsupportedOpError(nowhere, "neither autofusion nor ONNX Runtime has a kernel for")
    for i, n in enumerate(nodes):   # a name for each: errors and the report name the nodes
        if not n.name:
            n.name = f"{n.op_type}_{i}"
    reads = [_reads(n) for n in nodes]
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    preds = {i: {producer[x] for x in xs if x in producer} for i, xs in enumerate(reads)}
    node_order = _kahn(preds)
    if len(node_order) < len(nodes):
        stuck = nodes[min(set(preds) - set(node_order))]
        raise ModelLoadError(f"the graph has a cycle through node {stuck.name!r}")
    vertex, contracted = _groups(node_order, preds, foreign)
    members: dict[int, list[int]] = {}
    for i in node_order:
        members.setdefault(vertex[i], []).append(i)
    read_by: dict[str, set[int]] = {}
    for i, xs in enumerate(reads):
        for x in xs:
            read_by.setdefault(x, set()).add(vertex[i])
    graph_outputs = {o.name for o in g.output}
    rewritten = []
    for v in _kahn(contracted):
        group = [nodes[i] for i in members[v]]
        if not foreign[v]:
            rewritten.append(group[0])
            continue
        outputs = [o for n in group for o in n.output
                   if o and (o in graph_outputs or read_by.get(o, set()) - {v})]
        crossing = [x for x in [*_inputs(group), *outputs] if _not_a_tensor(types.get(x))]
        if crossing:
            x, first = crossing[0], group[0]
            why = (f"{op_key(first.domain, first.op_type)}: value {x!r} is a "
                   f"{_not_a_tensor(types[x])}, and autofusion passes only tensors between its steps")
            raise UnsupportedOpError([(why, first.name)])
        rewritten.append(_call(model, group, outputs))
    del g.node[:]
    g.node.extend(rewritten)
    return [(op_key(nodes[i].domain, nodes[i].op_type), nodes[i].name)
            for i in range(len(nodes)) if foreign[i]]
