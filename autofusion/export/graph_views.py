"""The two views of the HTML report: the graph before fusion and after, as drawings with details.

Before: every imported node. The nodes one fused node stands for (its `origin`) are drawn
together as a cluster, filled with the colour of the rule that made it; nodes no later node
stands for were removed by clean-up (folded, merged, dead) or by a redundancy rule, and are drawn
dashed. After: every node of the fused graph, fused nodes filled with their rule's colour, the
native partitions of the plan drawn as dashed clusters. In both, a node a rule nearly fused is
drawn with a red border and carries the reasons.

Each box has details (op, inputs and outputs with their types, attributes, the rule that made
it, the ONNX nodes it stands for, what runs it) and peers: the boxes in the other view that
stand for the same ONNX nodes, so selecting a node in one view finds it in the other.

With a profile (profiling.py), the fused graph is filled by time instead: a heat scale from
the fastest node to the slowest, the rule's colour kept on the border, each node's time in its
details; the plan drawn is the one the profiled runs took (specialised to their input sizes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..fusion.report import FusionReport
from ..ir import FUSED_DOMAIN, Graph, Node, Value
from .dot import Box, Cluster, Drawing

# (fill, border) per rule, in the order rules first appear; cycles past the end
PALETTE = [("#aec7e8", "#1f77b4"), ("#ffbb78", "#e07000"), ("#98df8a", "#2ca02c"),
           ("#c5b0d5", "#9467bd"), ("#c49c94", "#8c564b"), ("#f7b6d2", "#e377c2"),
           ("#dbdb8d", "#9a9a10"), ("#9edae5", "#17becf"), ("#ffe680", "#c9a400"),
           ("#80cdc1", "#018571"), ("#b3b3ff", "#4040c0")]
NEAR_MISS_BORDER = "#d00000"
REMOVED = ("#f4f4f4", "#9a9a9a")
PLAIN = ("#ffffff", "#555555")
IO = ("#eeeeee", "#777777")
PARTITION = ("#fbfbfb", "#b0b0b0")
STUB = ("#ffffff", "#bbbbbb")
NOT_TIMED = "#f4f4f4"   # a node the profiled runs did not run (folded for their sizes)
HEAT = ["#ffffcc", "#fed976", "#fd8d3c", "#f03b20"]   # no time → the slowest node's time
READERS_DRAWN_AS_STUBS = 8
ATTR_CHARS = 160


@dataclass
class View:
    drawing: Drawing
    details: dict[str, dict[str, Any]] = field(default_factory=dict)   # box id -> facts


def rule_colours(report: FusionReport, after: Graph) -> dict[str, tuple[str, str]]:
    """A colour per rule that made a node, most matches first (the report's order), then any
    other maker of a node."""
    makers = [r.name for r in sorted(report.rules, key=lambda r: -r.matched) if r.matched]
    makers += sorted({n.meta["rule"] for n in after.nodes if "rule" in n.meta} - set(makers))
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(makers)}


def near_miss_reasons(report: FusionReport) -> dict[str, list[str]]:
    """Node name -> "Rule: reason" for every near-miss that names it."""
    reasons: dict[str, list[str]] = {}
    for nm in report.near_misses:
        for name in nm.nodes:
            text = f"{nm.rule}: {nm.reason}"
            if text not in reasons.setdefault(name, []):
                reasons[name].append(text)
    return reasons


def attr_text(value: Any) -> str:
    """An attribute as a short readable string."""
    if isinstance(value, np.ndarray):
        text = f"tensor({value.tolist()})" if value.size <= 8 else f"tensor<{value.dtype}{list(value.shape)}>"
    elif isinstance(value, Graph):
        text = f"graph<{value.name}> ({len(value)} nodes)"
    elif isinstance(value, float):
        text = repr(float(value))
    elif isinstance(value, bytes):   # an OnnxRuntimeCall's model
        text = f"bytes<{len(value)}>"
    else:
        text = repr(value)
    return text if len(text) <= ATTR_CHARS else text[:ATTR_CHARS - 1] + "…"


def heat(fraction: float) -> str:
    """The colour of a node that took `fraction` of the slowest node's time (0..1): HEAT's
    stops, interpolated."""
    x = min(max(fraction, 0.0), 1.0) * (len(HEAT) - 1)
    i = min(int(x), len(HEAT) - 2)
    a, b = (tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in HEAT[i:i + 2])
    return "#" + "".join(f"{round(p + (q - p) * (x - i)):02x}" for p, q in zip(a, b))


def time_text(seconds: float, share: float) -> str:
    return f"{seconds * 1e3:.3f} ms per run, {share:.1%} of the run"


def _value_row(v: Value | None) -> list[str]:
    if v is None:
        return ["(omitted)", ""]
    kind = "constant" if v.const is not None else "input" if v.producer is None else ""
    return [v.name, v.type_str() + (f" ({kind})" if kind else "")]


def node_facts(node: Node) -> dict[str, Any]:
    """What the page shows for a node, whatever the view."""
    facts: dict[str, Any] = {
        "name": node.name, "op": node.op,
        "inputs": [_value_row(v) for v in node.inputs],
        "outputs": [_value_row(v) for v in node.outputs],
        "attrs": {k: attr_text(v) for k, v in sorted(node.attrs.items())},
    }
    if "rule" in node.meta:
        facts["rule"] = node.meta["rule"]
    if node.origin and node.origin != (node.name,):
        facts["origin"] = list(node.origin)
    return facts


def _label(node: Node) -> list[str]:
    out = node.outputs[0].type_str() if node.outputs else ""
    return [node.op_type] + ([out] if out else [])


def _io_box(view: View, box_id: str, v: Value, role: str) -> str:
    """A graph input or output, drawn as an ellipse."""
    fill, border = IO
    view.drawing.boxes.append(Box(box_id, f"{role} {v.name}", [v.name, v.type_str()], fill, border,
                                  shape="ellipse", classes=["af-io"]))
    view.details[box_id] = {"name": v.name, "op": f"graph {role}",
                            "inputs" if role == "output" else "outputs": [_value_row(v)]}
    return box_id


def _io_boxes(graph: Graph, prefix: str, view: View) -> tuple[dict[int, str], list[str]]:
    """Boxes for the graph's inputs and outputs; returns {id(input value): box id}, output ids."""
    inputs = {id(v): _io_box(view, f"{prefix}-in{i}", v, "input") for i, v in enumerate(graph.inputs)}
    outputs = [_io_box(view, f"{prefix}-out{i}", v, "output") for i, v in enumerate(graph.outputs)]
    return inputs, outputs


def _sources(graph: Graph, box_of: dict[Node, str], inputs: dict[int, str],
             outputs: list[str]) -> list[tuple[str, str]]:
    """(source box, consumer box) per producer-consumer pair, in order; constants are not drawn."""
    pairs: dict[tuple[str, str], None] = {}
    reads = [(v, box_of[n]) for n in graph.nodes for v in n.inputs if v is not None]
    for v, dst in reads + list(zip(graph.outputs, outputs)):
        src = box_of.get(v.producer) if v.producer is not None else inputs.get(id(v))
        if src is not None:
            pairs[(src, dst)] = None
    return list(pairs)


def _connect(view: View, pairs: list[tuple[str, str]]) -> None:
    """Arrows for the pairs; a box read by READERS_DRAWN_AS_STUBS or more boxes gets, instead of
    its long arrows, a small stub beside each reader that names it (as TensorBoard extracts
    high-degree nodes): the dependency stays visible without a fan of arrows across the page."""
    readers: dict[str, int] = {}
    for src, _ in pairs:
        readers[src] = readers.get(src, 0) + 1
    names = {b.id: b.name for b in view.drawing.boxes}
    prefix = view.drawing.id
    for src, dst in pairs:
        if readers[src] < READERS_DRAWN_AS_STUBS:
            view.drawing.arrows.append((src, dst))
            continue
        stub = f"{prefix}-r{len(view.drawing.arrows)}"
        fill, border = STUB
        view.drawing.boxes.append(Box(stub, f"{names[src]} (to {names[dst]})", [f"↑ {names[src]}"],
                                      fill, border, shape="note", classes=["af-stub"]))
        view.details[stub] = {"stub_of": src}
        view.details[src]["readers"] = readers[src]
        view.drawing.arrows.append((stub, dst))


def _owners(after: Graph) -> dict[str, list[Node]]:
    """Original node name -> the nodes of the fused graph that stand for it: rule-made first,
    fused ops before the plain ops a rule made beside them (AttentionFusionOp makes a Transpose
    too)."""
    owners: dict[str, list[Node]] = {}
    for node in sorted(after.nodes, key=lambda n: ("rule" not in n.meta, n.domain != FUSED_DOMAIN)):
        for name in node.origin:
            owners.setdefault(name, []).append(node)
    return owners


def _group(owner: Node, owners: list[Node]) -> list[Node]:
    """The nodes one match of a rule made: those with the owner's rule and origin."""
    return [n for n in owners if n.meta.get("rule") == owner.meta["rule"] and n.origin == owner.origin]


def _named(nodes: list[Node]) -> str:
    return " + ".join(f"{n.name!r} ({n.op})" for n in nodes)


def _fate(node: Node, owners: list[Node]) -> str:
    if not owners:
        return "removed: folded, merged or dead after clean-up, or eliminated by a redundancy rule"
    owner = owners[0]
    if "rule" in owner.meta:
        return f"fused by {owner.meta['rule']} into {_named(_group(owner, owners))}"
    if owner.name == node.name and owner.op == node.op:
        return "kept as it is"
    return f"rewritten by clean-up as {_named(owners)}"


def before_view(before: Graph, after: Graph, report: FusionReport, *,
                colours: dict[str, tuple[str, str]], after_ids: dict[Node, str]) -> View:
    """The imported graph, each fused group a cluster in its rule's colour."""
    view = View(Drawing("before"))
    owners, reasons = _owners(after), near_miss_reasons(report)
    inputs, outputs = _io_boxes(before, "before", view)
    box_of: dict[Node, str] = {}
    groups: dict[tuple[Node, ...], list[str]] = {}   # what one match made -> the boxes it stands for
    for i, node in enumerate(before.nodes):
        box_id = box_of[node] = f"before-n{i}"
        mine = owners.get(node.name, [])
        rule = mine[0].meta.get("rule") if mine else None
        fill, border = colours[rule] if rule else PLAIN if mine else REMOVED
        classes = ["af-fused"] if rule else [] if mine else ["af-removed"]
        if node.name in reasons:
            classes.append("af-near-miss")
        view.drawing.boxes.append(Box(
            box_id, node.name, _label(node), fill,
            NEAR_MISS_BORDER if node.name in reasons else border, dashed=not mine,
            bold_border=node.name in reasons, classes=classes))
        facts = node_facts(node) | {"fate": _fate(node, mine)}
        if node.name in reasons:
            facts["near_misses"] = reasons[node.name]
        if mine:
            facts["peers"] = [after_ids[n] for n in mine]
        if rule:
            groups.setdefault(tuple(_group(mine[0], mine)), []).append(box_id)
        view.details[box_id] = facts
    for k, (made, box_ids) in enumerate(groups.items()):
        rule = made[0].meta["rule"]
        view.drawing.clusters.append(Cluster(
            f"before-g{k}", f"{' + '.join(n.name for n in made)} ({rule})", box_ids, "#fcfcfc",
            colours[rule][1], classes=["af-group"]))
    _connect(view, _sources(before, box_of, inputs, outputs))
    return view


def after_view(after: Graph, report: FusionReport, plan: Any | None, *,
               colours: dict[str, tuple[str, str]], after_ids: dict[Node, str],
               before_ids: dict[str, str], profile: Any | None = None) -> View:
    """The fused graph: fused nodes in their rule's colour (or by time, with a profile),
    native partitions as clusters."""
    view = View(Drawing("after"))
    reasons = near_miss_reasons(report)
    inputs, outputs = _io_boxes(after, "after", view)
    if profile is not None:
        plan = profile.plan
    runs = runs_on(plan) if plan is not None else {}
    times = profile.by_node() if profile is not None else {}
    slowest = max((t.seconds for t in times.values()), default=0.0) or 1.0
    for node in after.nodes:
        box_id = after_ids[node]
        rule = node.meta.get("rule")
        fill, border = colours[rule] if rule else PLAIN
        if profile is not None:
            timed = times.get(node.name)
            fill = heat(timed.seconds / slowest) if timed is not None else NOT_TIMED
        classes = ["af-fused"] if rule else []
        if node.name in reasons:
            classes.append("af-near-miss")
        view.drawing.boxes.append(Box(
            box_id, node.name, _label(node), fill,
            NEAR_MISS_BORDER if node.name in reasons else border,
            bold_border=node.name in reasons, classes=classes))
        facts = node_facts(node)
        if node.name in reasons:
            facts["near_misses"] = reasons[node.name]
        if node.name in runs:
            facts["runs"] = runs[node.name]
        if profile is not None:
            timed = times.get(node.name)
            facts["time"] = (time_text(timed.seconds, timed.share) if timed is not None else
                             "not run by the profiled runs (folded away for their input sizes)")
        facts["peers"] = [before_ids[o] for o in node.origin if o in before_ids]
        view.details[box_id] = facts
    if plan is not None:
        ids = {n.name: box_id for n, box_id in after_ids.items()}   # a specialised plan's nodes are copies
        for part in plan.partitions:
            if part.target == "native":
                fill, border = PARTITION
                view.drawing.clusters.append(Cluster(
                    f"after-p{part.index}", f"native partition {part.index} ({len(part.nodes)} nodes)",
                    [ids[n.name] for n in part.nodes if n.name in ids], fill, border,
                    dashed=True, classes=["af-partition"]))
    _connect(view, _sources(after, after_ids, inputs, outputs))
    return view


def runs_on(plan: Any) -> dict[str, str]:
    """Node name -> what runs it, from the backend's plan (implementation, partition, refusals)."""
    where: dict[str, str] = {}
    for part in plan.partitions:
        for node in part.nodes:
            decision = plan.decisions[node]
            text = (f"native partition {part.index} via {plan.via(node)}"
                    if part.target == "native" else f"PyTorch via {decision.impl.name}")
            text += "".join(f"; not {name}: {why}" for name, why in decision.refused)
            where[node.name] = text
    return where


def graph_views(before: Graph, after: Graph, report: FusionReport, plan: Any | None = None,
                profile: Any | None = None) -> tuple[View, View, dict[str, tuple[str, str]]]:
    """Both views and the rule colours they use; with a profile, the fused graph by time."""
    colours = rule_colours(report, after)
    after_ids = {n: f"after-n{i}" for i, n in enumerate(after.nodes)}
    before_ids = {n.name: f"before-n{i}" for i, n in enumerate(before.nodes)}
    return (before_view(before, after, report, colours=colours, after_ids=after_ids),
            after_view(after, report, plan, colours=colours, after_ids=after_ids,
                       before_ids=before_ids, profile=profile),
            colours)
