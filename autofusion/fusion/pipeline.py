"""The compile pipeline: the passes and rule sets of each level, in order, with the report.

    level 0   nothing: every operator runs as imported
    level 1   fp16 models widened to compute in fp32 (passes/precision.py), clean-up (static
              shapes, constant folding, CSE, dead code), redundancy rules and
              the adjacent-operator rules of level 1
    level 2   everything: level 1 plus the level-2 rules (cross-operator, attention, …), then
              automatic fusion: what the rules left of elementwise work grouped into regions

Rules apply to a fixed point, then clean-up runs again (folding leaves unused constants behind).
The bodies of If, Loop and Scan then go through the same pipeline at the same level, each as a
graph of its own (after their constant captured inputs moved inside), innermost bodies with
them; what fused there is counted in the report, saying where ("in Loop 'loop' body").
"""
from __future__ import annotations

from typing import Callable, Iterable

from ..ir import Graph, Node
from ..ir.control_flow import bodies
from ..passes import (Evaluator, batch_norms_as_affine, close_over_constants, dequantize_per_reader, eliminate_common_subexpressions, eliminate_dead_code,
                      fold_constants, fold_static_shapes, inline_constant_ifs, read_shapes_upstream,
                      refine_shapes, resolve_cast_like, shapes_from_inputs, widen_float16)
from .cost import seconds
from .regions import MAX_INPUTS, MAX_NODES, NAME as AUTO_FUSION, fuse_regions, plan_regions
from .report import FusionReport, NearMissReport, NotFusedReport, RegionReport, RuleReport
from .rule import Rule, apply_rules
from .rules import RULES


def rule_names() -> list[str]:
    """The names the disable list takes: every rule's, and automatic fusion's."""
    return [r.name for r in RULES] + [AUTO_FUSION]


def is_dequantized_weight(node: Node) -> bool:
    """A DequantizeLinear of constants: an int8 weight the quantized rules take as it is."""
    return node.op == "DequantizeLinear"


def cleanup(graph: Graph, evaluate: Evaluator | None, counts: dict[str, int], before_rules: bool = False) -> None:
    """The clean-up passes to a fixed point; `before_rules`: an int8 weight stays int8."""
    keep = is_dequantized_weight if before_rules else None
    for _ in range(8):   # each pass can expose work for another; a guard bounds the loop
        changed = 0
        for name, run in (("CastLike resolved", resolve_cast_like),
                          ("static shapes folded", fold_static_shapes),
                          ("constants folded", (lambda g: fold_constants(g, evaluate, keep)) if evaluate else None),
                          ("shapes refined", refine_shapes),
                          ("If with a constant condition inlined", inline_constant_ifs),
                          ("Shape reads moved upstream", read_shapes_upstream),
                          ("Shapes computed from the inputs'", shapes_from_inputs),
                          ("duplicates merged", eliminate_common_subexpressions),
                          ("unused nodes and constants removed", eliminate_dead_code)):
            if run is None:
                continue
            n = run(graph)
            counts[name] = counts.get(name, 0) + n
            changed += n
        if not changed:
            return


CLOSED = "captured inputs moved into bodies or dropped"   # the report's name of that pass
DEQUANTIZED = "DequantizeLinear copied for each reader"


def optimize(graph: Graph, level: int, disable: Iterable[str] = (),
             evaluate: Evaluator | None = None, model_name: str = "",
             max_region_nodes: int = MAX_NODES, max_region_inputs: int = MAX_INPUTS,
             *, body: bool = False, before_rules: Callable[[Graph], None] | None = None) -> FusionReport:
    """Run the level's passes and rules on the graph (in place) and report what happened.
    max_region_nodes / max_region_inputs bound automatic fusion's regions (level 2). body: the
    graph is the body of an If, Loop or Scan (its types are its node's: no fp16 widening).
    before_rules: a rewrite of the cleaned graph before the rules (precision="int8" writes its
    Q/DQ graph there, pipeline.py), at level 1 and up."""
    disable = list(disable)
    before_hist, before_ops, before_s = graph.op_histogram(), len(graph), seconds(graph.nodes)
    rules: list[Rule] = [r for r in RULES if r.level <= level and r.name not in disable]
    passes: dict[str, int] = {}
    result = None
    if level == 0:   # no operator changes, but every dim the graph determines derived (cleanup does it above)
        passes["shapes refined"] = refine_shapes(graph)
    if level >= 1:
        if not body and not any(bodies(n) for n in graph.nodes):   # a body's types are its node's:
            passes["fp16 values computed in fp32"] = widen_float16(graph)   # not widened apart
        cleanup(graph, evaluate, passes, before_rules=True)
        if before_rules is not None:
            before_rules(graph)
        passes[DEQUANTIZED] = dequantize_per_reader(graph)
        result = apply_rules(graph, rules)
        cleanup(graph, evaluate, passes)
        passes[CLOSED] = close_over_constants(graph)   # before the bodies' own clean-up
    auto = None
    if level >= 2 and AUTO_FUSION not in disable:
        passes["BatchNormalization as Mul+Add"] = batch_norms_as_affine(graph)   # so it fuses
        auto = plan_regions(graph, max_region_nodes, max_region_inputs)
        made = fuse_regions(graph, auto)
        eliminate_dead_code(graph)   # the scalar constants now written into the regions' bodies
    report = FusionReport(model=model_name or graph.name, level=level, disabled=disable,
                          ops_before=before_ops, ops_after=len(graph),
                          histogram_before=before_hist, histogram_after=graph.op_histogram(),
                          passes=passes, est_seconds_before=before_s,
                          est_seconds_after=seconds(graph.nodes))
    if result is not None:
        for r in rules:
            n, after = result.counts[r.name], result.seconds_after[r.name]
            report.rules.append(RuleReport(
                r.name, r.level, r.description, " | ".join(dict.fromkeys(p.describe() for p in r.traced)), n,
                sorted(result.fused_into.get(r.name, ())),
                round(result.seconds_before[r.name] / after, 3) if n and after else None))
        report.near_misses = [NearMissReport(m.rule, m.nodes, m.reason) for m in result.near_misses]
    if auto is not None:
        report.regions = [RegionReport(node.name, node.attrs["kernel"], [n.op_type for n in r.nodes],
                                       [n.name for n in r.nodes]) for node, r in zip(made, auto.regions)]
        report.not_auto_fused = [NotFusedReport(m.node, m.op, m.code, m.reason) for m in auto.not_fused]
    for node in graph.nodes:
        for key, subgraph in bodies(node):
            report.add_body(f"{node.op_type} {node.name!r} {key}",
                            optimize(subgraph, level, disable, evaluate, subgraph.name, max_region_nodes,
                                     max_region_inputs, body=True))
    closed = close_over_constants(graph) if level >= 1 else 0   # a cleaned body reads less
    if closed:
        passes[CLOSED] = passes.get(CLOSED, 0) + closed
        eliminate_dead_code(graph)
        report.ops_after, report.histogram_after = len(graph), graph.op_histogram()
    return report
