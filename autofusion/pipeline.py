"""Compiling an imported graph into a CompiledModel, one named step at a time:

    check   every node has a kernel (one error listing all that do not)
    fuse    the rules and automatic regions of the level asked for, into the fusion report
            (fusion/pipeline.py); with precision="int8", before the rules: calibrated, each
            product checked alone, the ones within tolerance written as the Q/DQ graph the int8
            rules fuse (passes/int8.py, backend/int8.py)
    guard   in reduced precision, each reduced node checked against fp32 on calibration inputs
            (backend/precision.py); those over the tolerance stay fp32
    lower   the plan: each node's implementation and why, partitions, layouts (backend/lower.py)
    build   the plan's program: its native partitions set up (runtime library, generated
            kernels) and the Python that calls them (backend/executor.py)
    report  what ran where, in which precision, and the precision guard's findings, into the
            fusion report

api.compile (ONNX files and IR graphs) and the torch.compile backend (dynamo.py) run these
steps on what they imported; CompiledModel is what the last returns, the callable alone.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .backend.branches import Branches, Decision, decidable
from .backend.executor import Program, check_supported, evaluate_node
from .backend.lower import Plan, lower
from .backend.model import CompiledModel, specialised_to
from .backend.native import build_partitions, unavailable
from .backend.int8 import Quantized, quantize_int8
from .backend.precision import (TOLERANCE, GuardReport, Precision, calibration_sets, guard, output_error,
                                propagate, resolve)
from .controls import resolve_size_cache, resolve_streams, threads_per_stream
from .errors import AutofusionError
from .fusion import optimize
from .ir import Graph
from .ir.graph import copied
from .ir.onnx_runtime_call import onnx_runtime_ops
from .passes.int8 import computes_in_int8
from .progress import step

STEPS = ("check", "fuse", "guard", "lower", "build", "report")


@dataclass(frozen=True)
class FusionOptions:
    """What a compile asks of fusion (resolved by controls.py)."""
    level: int = 2
    disable: tuple[str, ...] = ()
    region_limits: dict = field(default_factory=dict)   # max_region_nodes / max_region_inputs


@dataclass(frozen=True)
class BuildOptions:
    """What a compile asks of the steps after fusion (each resolved by controls.py)."""
    backend: str = "auto"            # auto | native | torch
    threads: int | None = None       # the OpenMP threads every kernel uses (None: torch's)
    precision: str = "fp32"          # what was asked: fp32 | bf16 | fp16 | int8
    calibration: Any = None          # the guard's inputs (None: random; a list: several sets)
    tolerance: float | None = None   # the guards' bound (None: each guard's TOLERANCE)
    size_cache: int | None = None    # sets of sizes each native partition keeps built
    streams: int | None = None       # calls run at once, the threads split among them
    calibration_method: str | None = None   # int8's ranges: minmax | percentile (None: minmax)


@dataclass
class Guarded:
    """The guard's findings, with the inputs it checked on and the fp32 outputs there."""
    report: GuardReport
    feeds: dict
    reference: dict


def compile_graph(graph: Graph, name: str, fusion: FusionOptions, options: BuildOptions,
                  report_of: Callable[[Any], Any] = lambda report: report) -> CompiledModel:
    """The steps in order (STEPS), on a thread that ends with them (on_passing_thread);
    report_of: the fusion report as the caller shows it."""
    return on_passing_thread(_compile_graph, graph, name, fusion, options, report_of)


def on_passing_thread(fn: Callable, *args):
    """fn(*args) on a thread of its own that ends with it; what it returns or raises. Why:
    libgomp keeps an OpenMP pool for each thread that ever ran a parallel region, as long as that
    thread lives, and counts every pool's threads against the CPUs; where they outnumber the CPUs,
    every team's threads sleep between parallel regions instead of waiting awake (MobileNetV3-L
    called from a second thread: 5.4 ms a call, against 2.0). A compile's parallel work (weights
    reordered, the guard's PyTorch ops) would leave a pool on the caller's thread for good, and
    the calls, from whichever thread serves them, would make the second."""
    result: list = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            result.append(fn(*args))
        except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
            failed.append(e)

    worker = threading.Thread(target=work, name="autofusion-compile", daemon=True)
    worker.start()
    worker.join()
    if failed:
        raise failed[0]
    return result[0]


def _compile_graph(graph: Graph, name: str, fusion: FusionOptions, options: BuildOptions,
                   report_of: Callable[[Any], Any]) -> CompiledModel:
    check_supported(graph)
    why_not_native = unavailable() if options.backend != "torch" else None
    if options.backend == "native" and why_not_native is not None:
        raise AutofusionError(f"backend 'native' cannot run here: {why_not_native}")
    precision = resolve(options.precision, options.backend != "torch" and why_not_native is None)
    quantized: list[Quantized] = []   # what the int8 step found, where it ran

    def to_int8(g: Graph) -> None:
        with step("quantizing to int8"):
            quantized.append(quantize_int8(g, calibration_sets(g, options.calibration),
                                           "random" if options.calibration is None else "given",
                                           options.calibration_method, options.tolerance))

    cleaned: list[tuple[Graph, Decision]] = []   # where Ifs are decided by the inputs

    def before_rules(g: Graph) -> None:
        if precision.int8:
            to_int8(g)
            return
        if decidable(g) is not None:   # decided again on the copy: the Ifs of the copy
            copy = copied(g)
            cleaned.append((copy, decidable(copy)))

    with step("fusing"):
        report = report_of(optimize(graph, fusion.level, list(fusion.disable), evaluate_node, model_name=name,
                                    before_rules=before_rules, **fusion.region_limits))
    with step("lowering and building native code"):
        model = build_model(graph, report, options, why_not_native, precision, quantized[0] if quantized else None)
    if cleaned:
        model.branches = Branches(*cleaned[0], lambda version: compile_graph(version, name, fusion, options,
                                                                             report_of))
        if report is not None:
            report.backend += "; " + model.branches.describe()
    return model


def build_model(graph: Graph, report: Any, options: BuildOptions, why_not_native: str | None,
                precision: Precision, quantized: Quantized | None = None) -> CompiledModel:
    """The steps after fusion (guard, lower, build, report) on a checked graph."""
    guarded = (run_guard(graph, options, why_not_native, precision) if precision.compute != "fp32" else None)
    plan = lower(graph, options.backend, why_not_native, precision.compute,
                 guarded.report.kept if guarded is not None else frozenset())
    size_cache = resolve_size_cache(options.size_cache)
    streams = resolve_streams(options.streams)
    threads = threads_per_stream(options.threads, streams, torch.get_num_threads())
    program = build(graph, plan, threads, size_cache)
    model = CompiledModel(graph, program, report, threads, size_cache,
                          guarded.report if guarded is not None else None, streams)
    if report is not None:
        write_report(report, model, precision, guarded, quantized)
    return model


def run_guard(graph: Graph, options: BuildOptions, why_not_native: str | None, precision: Precision) -> Guarded:
    """The precision guard on the calibration inputs, on the graph specialised to their sizes."""
    feeds = calibration_sets(graph, options.calibration)[0]
    checked = specialised_to(graph, feeds)
    plan = lower(checked, options.backend, why_not_native, precision.compute)
    values = propagate(checked, feeds)
    tolerance = TOLERANCE if options.tolerance is None else options.tolerance
    found = guard(checked, plan, values, tolerance, "random" if options.calibration is None else "given")
    return Guarded(found, feeds, {v.name: values[v] for v in checked.outputs})


def build(graph: Graph, plan: Plan, threads: int | None, size_cache: int) -> Program:
    """The plan's program, its native partitions built with the model's thread count: oneDNN
    splits a primitive's work for the count current when it is created, and runs it on that many
    threads whatever the count later. The process's count is given back (torch.compile checks
    that it is kept)."""
    if plan.native is not None:
        return Program(graph, plan, {}, "", size_cache)
    before = torch.get_num_threads()
    if threads is not None and before != threads:
        torch.set_num_threads(threads)   # one OpenMP pool: torch's and oneDNN's
    try:
        partitions, code = build_partitions(plan, graph.name, size_cache, plan.set_up)
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
    return Program(graph, plan, partitions, code.text(), size_cache)


def write_report(report: Any, model: CompiledModel, precision: Precision, guarded: Guarded | None,
                 quantized: Quantized | None = None) -> None:
    """What runs where and in which precision, into the fusion report; with a guard, the
    end-to-end error the compiled model makes on the calibration inputs (it runs them) against
    the fp32 model's."""
    plan = model.plan
    native_symbolic = model.symbols and any(p.target == "native" for p in plan.partitions)
    report.backend = plan.summary() + (
        f"; native partitions are set up for each new set of input sizes on first use, "
        f"without compiling (the last {model.size_cache} kept)" if native_symbolic else "") + (
        f"; a call whose inputs hold NaN or an infinity runs on PyTorch kernels (oneDNN's "
        f"ReLU and Clip, here {len(plan.nan_clamping)} node(s), give 0 for NaN)"
        if plan.nan_clamping else "") + f"; {model.execution}"
    nodes = {n.name: d.precision for n, d in plan.decisions.items()}
    report.precision = {"requested": precision.requested, "compute": precision.compute,
                        "note": precision.note, "nodes": nodes}
    if guarded is not None:
        g = guarded.report
        planned = g.precisions()   # of the graph specialised to the calibration sizes
        report.precision.update(nodes={n: planned.get(n, "fp32") for n in nodes},
                                tolerance=g.tolerance, calibration=g.calibration,
                                checked=[vars(c) for c in g.checked])
    if quantized is not None:
        q = quantized.report
        report.precision["nodes"].update({n.name: "int8" for n in plan.decisions if computes_in_int8(n)})
        report.precision["int8"] = {"method": q.method, "tolerance": q.tolerance, "calibration": q.calibration,
                                    "sets": q.sets, "tensors": q.tensors, "folded": q.folded,
                                    "checked": [vars(c) for c in q.checked]}
    reference = quantized or guarded
    if reference is not None:
        outs = model.run(reference.feeds)
        report.precision["end_to_end"] = {k: output_error(outs[k], r) for k, r in reference.reference.items()}
    report.onnx_runtime = onnx_runtime_ops(model.graph)
