"""`python -m autofusion.benchmarks.layers`: one model's time per layer, autofusion against OpenVINO.

    python -m autofusion.benchmarks.layers MODEL.onnx --threads 2
    python -m autofusion.benchmarks.layers MODEL.onnx --precision bf16 --top 30

Each layer is named after the ONNX node that anchors it: a Conv, Gemm or MatMul of the model.
Both sides fuse differently, but both keep where a fused op came from (autofusion the node's
origin, OpenVINO its runtime op's `originalLayersNames`), so the two times of one convolution
(with whatever each fused into it) stand side by side. What no anchor claims is summed per kind
of op ("Reorder", "autofusion::FusedAttention", ...). Layers are grouped by the anchor's kind
(1x1, k x k and depthwise convolutions, products) with totals.

The times are each runtime's own per-node counters: `autofusion.profile` (a clock around every
step of a native partition) and OpenVINO's `PERF_COUNT`, means over `--runs` runs after a
warm-up, the two alternating `--rounds` times. Counters add a little to each node, and each side
counts its own way, so compare layers and kinds, not the totals with the suite's medians.
OpenVINO runs with the suite's settings (systems.py): the latency hint, one stream, f32 for
`--precision fp32`, its default (bf16 on this CPU) for bf16.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import onnx

import autofusion
from autofusion.ir.feeds import random_feeds

from .cli import pin_threads

ANCHORS = ("Conv", "Gemm", "MatMul")
FOLLOWERS = ("BatchNormalization", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh",
             "Gelu", "Erf", "Add", "Mul")


@dataclass
class Side:
    """One runtime's seconds per run: per anchor, and per kind for what no anchor claims."""
    anchored: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernels: dict[str, str] = field(default_factory=dict)    # anchor -> what ran it
    unanchored: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, names: list[str], owner: dict[str, str], kind: str, kernel: str,
            seconds: float) -> None:
        """A node's time, on the first anchor among the names it came from, else on the anchor
        of the first of them that has one (a name may be a node's or its output's, or either's
        with a suffix, as OpenVINO's "/conv/Conv/WithoutBiases")."""
        owned = [(owner[p], owner[p] == p) for n in names for p in _prefixes(n) if p in owner]
        anchor = next((a for a, itself in owned if itself), owned[0][0] if owned else None)
        if anchor is None:
            self.unanchored[kind] += seconds
        else:
            self.anchored[anchor] += seconds
            self.kernels.setdefault(anchor, kernel)


def _prefixes(name: str) -> list[str]:
    """The name and each of its '/'-separated prefixes, longest first."""
    parts = name.split("/")
    return [name] + ["/".join(parts[:k]) for k in range(len(parts) - 1, 1, -1)]


def anchors_of(model: onnx.ModelProto) -> tuple[dict[str, str], dict[str, str]]:
    """Each anchor node's kind ("conv 1x1", "depthwise 5x5", "product", ...) by its name, and
    the anchor each node's time goes to: its own name for an anchor, the anchor of its first
    input made by a node that has one for a node that follows one (FOLLOWERS: a batch norm, an
    activation, a bias, a residual or a gate), none for the rest."""
    shapes = {i.name: i.dims for i in model.graph.initializer}
    kinds, owner, producer = {}, {}, {}
    for n in model.graph.node:
        for out in n.output:
            producer[out] = n.name
        if n.op_type in ANCHORS and n.name:
            owner[n.name] = n.name
            kinds[n.name] = "product" if n.op_type != "Conv" else _conv_kind(n, shapes.get(n.input[1]))
        elif n.op_type in FOLLOWERS:
            led = next((producer[i] for i in n.input if producer.get(i) in owner), None)
            if led is not None:
                owner[n.name] = owner[led]
    for n in model.graph.node:   # OpenVINO names a graph output's op after the output
        if n.name in owner:
            owner.update((out, owner[n.name]) for out in n.output)
    return kinds, owner


def _conv_kind(n: onnx.NodeProto, w) -> str:
    group = next((a.i for a in n.attribute if a.name == "group"), 1)
    size = "x".join(map(str, w[2:])) if w is not None else "?"
    return (f"depthwise {size}" if group > 1 and w is not None and w[1] == 1
            else f"grouped {size}" if group > 1 else f"conv {size}")


def autofusion_side(model, feeds: dict, runs: int, side: Side, owner: dict[str, str]) -> None:
    prof = autofusion.profile(model, feeds, runs=runs)
    nodes = {n.name: n for part in prof.plan.partitions for n in part.nodes}
    for t in prof.nodes:
        node = nodes[t.node]
        side.add(list(node.origin) or [node.name], owner, node.op, t.impl, t.seconds)
    side.unanchored["(partition calls and the rest of the run)"] += prof.boundaries + prof.outside


def openvino_request(path: str, precision: str, threads: int):
    import openvino as ov
    import openvino.properties as props
    import openvino.properties.hint as hints
    config = {props.inference_num_threads(): threads,
              hints.performance_mode(): hints.PerformanceMode.LATENCY,
              hints.num_requests(): 1, props.num_streams(): 1, props.enable_profiling(): True}
    if precision == "fp32":
        config[hints.inference_precision()] = ov.Type.f32
    compiled = ov.Core().compile_model(path, "CPU", config)
    origins = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        names = op.get_rt_info()["originalLayersNames"].astype(str)
        origins[op.get_friendly_name()] = [n for n in names.split(",") if n]
    return compiled, compiled.create_infer_request(), origins


def openvino_side(compiled, request, origins: dict, feeds: dict, runs: int, side: Side,
                  owner: dict[str, str]) -> None:
    inputs = {k: feeds[next(n for n in port.get_names() if n in feeds)]
              for k, port in enumerate(compiled.inputs)}
    for _ in range(3):
        request.infer(inputs)
    for _ in range(runs):
        request.infer(inputs)
        for p in request.get_profiling_info():
            if p.real_time.total_seconds() > 0:
                side.add(origins.get(p.node_name, [p.node_name]), owner, p.node_type,
                         p.exec_type, p.real_time.total_seconds() / runs)


def table(ours: Side, theirs: Side, anchors: dict[str, str], rounds: int, top: int) -> str:
    def ms(s: float) -> str:
        return f"{s / rounds * 1e3:.3f}"

    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}x" if a > 0 and b > 0 else "—"

    lines = ["Layers by the time they differ (OpenVINO / autofusion > 1: autofusion faster)", "",
             "| layer | kind | autofusion ms | OpenVINO ms | OV / af | autofusion kernel | OpenVINO kernel |",
             "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    names = sorted(set(ours.anchored) | set(theirs.anchored),
                   key=lambda a: -abs(ours.anchored.get(a, 0) - theirs.anchored.get(a, 0)))
    for a in names[:top]:
        o, t = ours.anchored.get(a, 0.0), theirs.anchored.get(a, 0.0)
        lines.append(f"| {a} | {anchors[a]} | {ms(o)} | {ms(t)} | {ratio(o, t)} | "
                     f"{ours.kernels.get(a, '')} | {theirs.kernels.get(a, '')} |")
    if len(names) > top:
        lines.append(f"| ({len(names) - top} more) | | | | | | |")
    lines += ["", "By kind", "", "| kind | layers | autofusion ms | OpenVINO ms | OV / af |",
              "| --- | ---: | ---: | ---: | ---: |"]
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for a in names:
        row = by_kind[anchors[a]]
        row[0] += 1
        row[1] += ours.anchored.get(a, 0.0)
        row[2] += theirs.anchored.get(a, 0.0)
    for kind, (count, o, t) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {kind} | {count} | {ms(o)} | {ms(t)} | {ratio(o, t)} |")
    for label, side in (("autofusion", ours), ("OpenVINO", theirs)):
        for kind, s in sorted(side.unanchored.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {label} only: {kind} | | {ms(s) if side is ours else ''} | "
                         f"{ms(s) if side is theirs else ''} | |")
    total_o = sum(ours.anchored.values()) + sum(ours.unanchored.values())
    total_t = sum(theirs.anchored.values()) + sum(theirs.unanchored.values())
    lines.append(f"| **all** | {len(names)} | {ms(total_o)} | {ms(total_t)} | {ratio(total_o, total_t)} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.layers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="an ONNX file with static input shapes")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20, help="profiled runs per round and system")
    p.add_argument("--rounds", type=int, default=3, help="rounds, the systems alternating")
    p.add_argument("--top", type=int, default=25, help="layers listed (all are summed by kind)")
    args = p.parse_args(argv)
    pin_threads(args.threads)
    proto = onnx.load(args.model, load_external_data=False)
    anchors, owner = anchors_of(proto)
    model = autofusion.compile(args.model, level=2, precision=args.precision, threads=args.threads)
    feeds = {k: np.asarray(v) for k, v in random_feeds(model.graph).items()}
    compiled, request, origins = openvino_request(args.model, args.precision, args.threads)
    ours, theirs = Side(), Side()
    for _ in range(args.rounds):
        autofusion_side(model, feeds, args.runs, ours, owner)
        openvino_side(compiled, request, origins, feeds, args.runs, theirs, owner)
    print(f"{args.model}, {args.precision}, {args.threads} thread(s), {args.rounds} rounds of "
          f"{args.runs} profiled runs each\n")
    print(table(ours, theirs, anchors, args.rounds, args.top))


if __name__ == "__main__":
    main()
