"""Time per node of a compiled model: where one run's time goes.

    prof = autofusion.profile(model, feeds)     # or: autofusion profile MODEL.onnx
    print(prof.text())

Each node of the plan gets the time it took per run: a torch node the time of its line in the
generated Python (a clock read before and after it), a node of a native partition the time of
its step inside the C call (every oneDNN primitive, reorder and generated kernel the step runs,
timed in the runtime's arena.cpp). What no node holds is said in two more lines: the native partitions'
boundaries (their inputs checked, outputs allocated, the C call made) and the rest of the run
(binding the inputs, the generated function's own lines, converting the outputs). With the
nodes they add up to the profiled runs' mean wall time, which the shares are of. The means
leave out a profiled run slower than OUTLIER times their median, whole: an interrupted run
would put its pause on whichever node it hit.

Counting costs time of its own, so the whole run is also timed without it: blocks of runs with
profiling off and on alternate after a warm-up (as measure.py does, so idle thread pools never
steal one mode's cores), and the text gives both medians and the difference.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .backend import CompiledModel, Plan, Program
from .backend.executor import StepTimes
from .errors import AutofusionError
from .ir.feeds import random_feeds

BOUNDARIES = "native partition calls outside their steps (inputs checked, outputs made, the C call)"
OUTSIDE = "outside the nodes (inputs bound, the generated code's own lines, outputs converted)"
OUTLIER = 1.5   # a profiled run slower than this many times the median is left out


@dataclass
class NodeTime:
    node: str
    op: str
    impl: str          # the implementation the plan chose, with what ran it (Plan.via)
    where: str         # "torch" or "native K" (partition K of the plan)
    seconds: float     # per run
    share: float       # of the profiled run's mean wall time


@dataclass
class Profile:
    model: str
    nodes: list[NodeTime]       # every node the run ran, slowest first
    boundaries: float           # s/run, see BOUNDARIES
    outside: float              # s/run, see OUTSIDE
    profiled: float             # mean wall time of the typical profiled runs (s): the shares' whole
    median_off: float           # median wall time of a run (s), profiling off
    median_on: float            # the same, profiling on
    runs: int                   # runs timed in each mode
    left_out: int               # profiled runs left out as interrupted (see typical())
    plan: Plan = field(repr=False)   # the plan the runs took (specialised to the inputs' sizes)

    @property
    def node_total(self) -> float:
        return sum(n.seconds for n in self.nodes)

    @property
    def overhead(self) -> float:
        """What counting adds to the median run: on / off - 1."""
        return self.median_on / self.median_off - 1

    def by_node(self) -> dict[str, NodeTime]:
        return {n.node: n for n in self.nodes}

    def unattributed(self) -> list[tuple[str, float]]:
        """What no node holds, labelled, s/run: the native partitions' boundaries (where any
        node ran natively), then the rest of the run. The text and the HTML page both list it."""
        boundaries = [(BOUNDARIES, self.boundaries)] if any(n.where != "torch" for n in self.nodes) else []
        return boundaries + [(OUTSIDE, self.outside)]

    def text(self, top: int = 20) -> str:
        return profile_text(self, top)


def profile(model: CompiledModel, feeds: Mapping[str, Any] | None = None, runs: int = 50,
            block: int = 5, warmup: int = 3) -> Profile:
    """Run the model on `feeds` (default: random inputs, symbolic sizes 1) `runs` times with
    profiling off and `runs` times on, in alternating blocks of `block` runs after `warmup`
    runs of each; the time per node and the whole-run times."""
    if runs < 1 or block < 1:
        raise AutofusionError(f"a profile needs at least one run and blocks of one (runs={runs}, "
                              f"block={block})")
    if feeds is None:
        feeds = random_feeds(model.graph)
    for _ in range(warmup):
        model.run(feeds)
    program = model.program_for_inputs(feeds)   # the one the runs take (made by the warm-up)
    profiled_runs(model, program, feeds, warmup)   # the profiled function's first calls
    off: list[float] = []
    on: list[tuple[float, StepTimes]] = []
    while len(on) < runs:
        n = min(block, runs - len(on))
        off += timed_runs(model, feeds, n)
        on += profiled_runs(model, program, feeds, n)
    return summarise(model, program.plan, off, on)


def timed_runs(model: CompiledModel, feeds: Mapping[str, Any], n: int) -> list[float]:
    """The wall times of n runs."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        model.run(feeds)
        times.append(time.perf_counter() - start)
    return times


def profiled_runs(model: CompiledModel, program: Program, feeds: Mapping[str, Any],
                  n: int) -> list[tuple[float, StepTimes]]:
    """The wall time and the step times of each of n runs (read between runs, so a run an
    interruption slowed can be left out whole)."""
    out = []
    for _ in range(n):
        program.start_profile()
        try:
            start = time.perf_counter()
            model.run(feeds)
            wall = time.perf_counter() - start
        finally:
            counted = program.stop_profile()
        if counted.calls != 1:
            raise RuntimeError(f"a profiled run ran the profiled program {counted.calls} times")
        out.append((wall, counted))
    return out


def typical(on: list[tuple[float, StepTimes]]) -> list[tuple[float, StepTimes]]:
    """The profiled runs no interruption slowed: at most OUTLIER times their median wall time.
    A run the OS stopped for a while puts the pause on whichever node it hit, and one such run
    in fifty can double a small node's mean."""
    limit = OUTLIER * statistics.median(wall for wall, _ in on)
    return [r for r in on if r[0] <= limit]


def summarise(model: CompiledModel, plan: Plan, off: list[float],
              on: list[tuple[float, StepTimes]]) -> Profile:
    """The profile: node times and shares are means over the typical profiled runs."""
    kept = typical(on)
    runs = len(kept)
    profiled = sum(wall for wall, _ in kept) / runs
    steps = added([c.steps for _, c in kept])
    inside = {k: added([c.native[k] for _, c in kept]) for k in kept[0][1].native}
    rows: list[tuple[Any, str, float]] = []   # (node, where, seconds per run)
    boundaries = 0.0
    for part, step in zip(plan.partitions, steps):
        if part.target == "native":
            times = inside[part.index]
            rows += [(n, f"native {part.index}", t / runs) for n, t in zip(part.nodes, times)]
            boundaries += (step - sum(times)) / runs
        else:
            rows.append((part.nodes[0], "torch", step / runs))
    nodes = sorted((NodeTime(n.name, n.op, plan.via(n), where, t, t / profiled)
                    for n, where, t in rows), key=lambda r: -r.seconds)
    outside = profiled - sum(r.seconds for r in nodes) - boundaries
    name = model.report.model if model.report is not None else model.graph.name
    return Profile(name, nodes, boundaries, outside, profiled, statistics.median(off),
                   statistics.median(wall for wall, _ in on), len(on), len(on) - runs, plan)


def added(lists: list[list[float]]) -> list[float]:
    """Element by element sums of equally long lists."""
    return [sum(ts) for ts in zip(*lists)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]   # a name's end tells most


def profile_text(prof: Profile, top: int = 20) -> str:
    """The table of the `top` slowest nodes, the rest in one line, what no node holds, then
    the totals."""
    shown, rest = prof.nodes[:top], prof.nodes[top:]
    name_w = min(max([len(n.node) for n in shown] + [4]), 48)
    op_w = min(max([len(n.op) for n in shown] + [2]), 28)
    impl_w = max([len(n.impl) for n in shown] + [14])

    def columns(name: str, op: str, impl: str, where: str) -> str:
        return f"{_clip(name, name_w):<{name_w}}  {_clip(op, op_w):<{op_w}}  {impl:<{impl_w}}  {where}"

    labelled = [(columns(n.node, n.op, n.impl, n.where), n.seconds) for n in shown]
    if rest:
        labelled.append((f"the other {len(rest)} node(s)", sum(n.seconds for n in rest)))
    labelled += prof.unattributed()
    head = columns("node", "op", "implementation", "runs on")
    width = max(len(text) for text, _ in labelled + [(head, 0.0)])
    left_out = (f"; {prof.left_out} profiled run(s) over {OUTLIER}x the median left out"
                if prof.left_out else "")
    title = (f"Profile of {prof.model}: {len(prof.nodes)} nodes, {prof.runs} runs with profiling "
             f"off and {prof.runs} on, in alternating blocks{left_out}")
    lines = [title, f"  {head:<{width}}  {'ms/run':>8}  {'share':>6}"]
    lines += [f"  {text:<{width}}  {_ms(t):>8}  {t / prof.profiled:>6.1%}" for text, t in labelled]
    lines.append(f"Nodes in total: {_ms(prof.node_total)} ms/run, "
                 f"{prof.node_total / prof.profiled:.1%} of the profiled run "
                 f"({_ms(prof.profiled)} ms, the mean)")
    lines.append(f"Whole run: median {_ms(prof.median_off)} ms with profiling off, "
                 f"{_ms(prof.median_on)} ms on ({prof.overhead:+.1%} for the counting)")
    return "\n".join(lines)
