"""Rules and the rewrite driver.

A Rule is a public fused-op name (what users put in the disable list), a level, a one-line
description, one or more patterns, a check and a replacement. The driver applies a list of rules
to a fixed point (with a guard on the number of rounds): for each rule, for each node whose op is
the root of one of its patterns, it tries every structural match; a match whose intermediates
escape it, or whose check returns a reason, is a near-miss; the first that passes is replaced.
A near-miss is reported while some of its nodes stay unfused (if other rules fused them all,
the work got done another way).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import GraphError
from ..ir import DType, Graph, Node, Value
from ..ir.builder import GraphBuilder
from .cost import seconds
from .pattern import Match, Pattern, interior_escapes, match_at

Check = Callable[[Match], "str | None"]
Replace = Callable[["Rewriter", Match], "Value | list[Value]"]


@dataclass
class Rule:
    name: str                       # public fused-op name, e.g. "ConvReluFusionOp"
    level: int                      # 1: basic/adjacent rules, 2: everything
    description: str
    patterns: list[Callable]        # pattern functions: (op, *vars) -> output
    replace: Replace
    check: Check | None = None
    # a structural match the rule is not meant for, and so no near-miss (a Cast that changes
    # the type is not a no-op that failed a check)
    applies: Callable[[Match], bool] | None = None
    # the pattern node whose name the replacement takes (default: the first matched, in file order)
    named_after: str | None = None
    traced: list[Pattern] = field(init=False, repr=False)

    def __post_init__(self):
        if callable(self.patterns):
            self.patterns = [self.patterns]
        self.traced = [Pattern.trace(p) for p in self.patterns]


@dataclass
class NearMiss:
    rule: str
    nodes: list[str]
    reason: str
    matched: list[Node] = field(default_factory=list, repr=False, compare=False)

    def __str__(self) -> str:
        return f"{self.rule}: {self.reason}"


@dataclass
class RewriteResult:
    counts: dict[str, int] = field(default_factory=dict)        # rule -> times applied
    near_misses: list[NearMiss] = field(default_factory=list)
    rounds: int = 0
    # estimated seconds of the matched nodes before, and of their replacements after
    seconds_before: dict[str, float] = field(default_factory=dict)
    seconds_after: dict[str, float] = field(default_factory=dict)
    fused_into: dict[str, set[str]] = field(default_factory=dict)   # rule -> op types made


class Rewriter(GraphBuilder):
    """The `op` of a replacement: `op.FusedConv(x, w, b, activation="Relu")` adds a node,
    named after the first matched node, standing for all matched nodes, tagged with the rule."""

    def __init__(self, graph: Graph, rule: Rule, match: Match):
        matched = sorted(match.matched_nodes, key=graph.insertion_index)   # file order
        named = match.node(rule.named_after) if rule.named_after else matched[0]
        super().__init__(graph, named.name,
                         tuple(dict.fromkeys(o for n in matched for o in n.origin)))
        self.rule, self.match = rule, match

    def on_new_node(self, node: Node) -> None:
        node.meta["rule"] = self.rule.name


def _apply(graph: Graph, rule: Rule, m: Match) -> Rewriter:
    op = Rewriter(graph, rule, m)
    new = rule.replace(op, m)
    new = [new] if isinstance(new, Value) else list(new)
    old = m.root.outputs
    if len(new) != len(old):
        raise GraphError(f"rule {rule.name} replaced {len(old)} output(s) with {len(new)}")
    outputs = set(map(id, graph.outputs))
    for o, n in zip(old, new):
        is_output, fresh = id(o) in outputs, n.producer in op.new_nodes
        if is_output and not fresh and (n.producer is None or id(n) in outputs):
            # inputs, constants and other outputs keep their own names: the output gets a copy
            n, fresh = op.Identity(n, _domain=""), True
        if fresh:   # the replaced value's type is known better
            n.shape = o.shape if o.shape is not None else n.shape
            n.dtype = o.dtype if o.dtype is not None else n.dtype
        graph.replace_all_uses(o, n)
        if fresh or is_output:   # the value keeps the name users know it by
            o.name, n.name = n.name, o.name
    remove_dead(graph, m.matched_nodes)
    return op


def remove_dead(graph: Graph, nodes: list[Node]) -> None:
    """Remove those of `nodes` whose outputs are unused, consumers before producers."""
    outputs = set(map(id, graph.outputs))
    pending = [n for n in nodes if n.graph is graph]
    while pending:
        dead = [n for n in pending if all(not v.uses and id(v) not in outputs for v in n.outputs)]
        if not dead:
            return
        for n in dead:
            graph.remove(n)
        pending = [n for n in pending if n.graph is graph]


def apply_rules(graph: Graph, rules: list[Rule], max_rounds: int = 16) -> RewriteResult:
    """Apply the rules until none matches (or max_rounds); count applications per rule."""
    result = RewriteResult(counts={r.name: 0 for r in rules},
                           seconds_before={r.name: 0.0 for r in rules},
                           seconds_after={r.name: 0.0 for r in rules})
    misses: dict[tuple[str, int], NearMiss] = {}
    for result.rounds in range(1, max_rounds + 1):
        changed = False
        for rule in rules:
            roots = {p.root_op for p in rule.traced}
            for node in graph.nodes:
                if node.graph is not graph or (node.domain, node.op_type) not in roots:
                    continue
                for pattern in rule.traced:
                    miss = _try(graph, rule, pattern, node, result)
                    if miss is None:
                        changed = True
                        break
                    if miss is not True:
                        misses[(rule.name, id(node))] = miss
        if not changed:
            break
    result.near_misses = [miss for miss in misses.values()
                          if any(n.graph is graph for n in miss.matched)]
    return result


def _try(graph: Graph, rule: Rule, pattern: Pattern, node: Node,
         result: RewriteResult) -> NearMiss | bool | None:
    """None: applied. True: no structural match. A NearMiss: matched but refused."""
    miss: NearMiss | bool = True
    for m in match_at(pattern, node):
        if rule.applies is not None and not rule.applies(m):
            continue
        names = [n.name for n in m.matched_nodes]
        escape = interior_escapes(m, graph.outputs)
        if escape is not None:
            v, user = escape
            where = describe(user) if user else "a graph output"
            miss = NearMiss(rule.name, names, f"{v.name!r} is also used by {where}, so it "
                                              "must stay in memory", m.matched_nodes)
            continue
        reason = rule.check(m) if rule.check else None
        if reason:
            miss = NearMiss(rule.name, names, reason, m.matched_nodes)
            continue
        matched = m.matched_nodes
        before = seconds(matched)
        op = _apply(graph, rule, m)
        before -= seconds(n for n in matched if n.graph is graph)   # matched but kept
        result.counts[rule.name] += 1
        result.seconds_before[rule.name] += before
        result.seconds_after[rule.name] += seconds(op.new_nodes)
        result.fused_into.setdefault(rule.name, set()).update(n.op for n in op.new_nodes)
        return None
    return miss


# ---- what checks say ----------------------------------------------------------------------

def describe(node: Node) -> str:
    """A node as reasons name it: its op and name, e.g. "Conv '/layer4/conv2'"."""
    return f"{node.op_type} {node.name!r}"


def dims(v: Value) -> str:
    """A value's shape as reasons print it, e.g. "[N,768]" ("?" where unknown)."""
    return "?" if v.shape is None else "[" + ",".join("?" if d is None else str(d) for d in v.shape) + "]"


def not_float32(node: Node, *values: Value | None) -> str | None:
    """The reason, if one of the values is not float32 (the fused kernels' type)."""
    for v in values:
        if v is not None and v.dtype != DType.FLOAT:
            dtype = v.dtype.name.lower() if v.dtype is not None else "of unknown type"
            return f"{describe(node)}: {v.name!r} is {dtype}, the fused kernels are float32"
    return None


def scalar(v: Value | None) -> float | None:
    """The value of a constant whose elements are all equal, else None."""
    if v is None or v.const is None or v.const.size == 0 or v.dtype not in (
            DType.FLOAT, DType.DOUBLE, DType.FLOAT16, DType.INT64, DType.INT32):
        return None
    flat = np.asarray(v.const, dtype=np.float64).reshape(-1)
    return float(flat[0]) if np.all(flat == flat[0]) else None
