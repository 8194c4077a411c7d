"""Benchmark one model on every system: export once, compile each system, check, time.

For each model:
  1. export it to ONNX once (TorchScript exporter, exporter optimisation off), cached in the
     output directory; every ONNX-consuming system reads that same file;
  2. load and compile each system, recording the compile/session-creation time; the reference
     (PyTorch eager; ONNX Runtime for the micro models) goes first;
  3. run each system once and compare with the reference: max|diff|/max|ref| above the
     tolerance (for a bf16 system at least PRECISION_TOLERANCE's) marks the system "wrong", and
     it is not timed (its time would not be the time of a correct answer); an exception marks
     it "error" with a short message, a missing optional package (openvino) "skipped";
  4. time the systems that are right together, alternating in blocks (timing.py).
A failure of one system never stops the others, nor the run.
"""
from __future__ import annotations

import gc
import importlib.util
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ..measure import time_in_blocks
from . import models, timing
from .progress import Progress
from .systems import (PRECISION_TOLERANCE, REFERENCE, ModelCase, System, all_systems, as_arrays,
                      max_rel_diff)


@dataclass
class Settings:
    models: list[str]
    systems: list[str]
    batch: int
    threads: int
    rounds: int          # rounds of blocks; every system runs one block per round
    block: int           # consecutive timed runs per block
    warmup: int          # untimed runs per system before the first round
    pause_s: float       # sleep after each block, for the previous system's threads to park
    tolerance: float     # on max|diff| / max|ref| against PyTorch eager
    out_dir: str


def short_error(e: BaseException, limit: int = 300) -> str:
    """The exception's type and first line: enough to see what failed, short enough for a table."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def export_once(name: str, settings: Settings, progress: Progress) -> tuple[str, float | None]:
    """The model's ONNX file in <out>/onnx/, exported unless already there; (path, export seconds
    or None when cached)."""
    path = Path(settings.out_dir) / "onnx" / f"{name}.b{settings.batch}.torchscript.onnx"
    if path.exists():
        return str(path), None
    path.parent.mkdir(parents=True, exist_ok=True)
    progress.step(f"{name}: exporting to ONNX")
    partial = path.with_suffix(".partial")     # an interrupted export never looks finished
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the exporter's tracer warnings are not ours
        models.export_onnx(name, partial, batch=settings.batch, exporter="torchscript")
    os.replace(partial, path)
    return str(path), time.perf_counter() - start


def benchmark_model(name: str, settings: Settings, progress: Progress) -> dict:
    """The result of one model: its status, and one entry per system (see report.py)."""
    spec = models.spec(name)
    if importlib.util.find_spec(spec.package) is None:
        return _skipped(name, f"needs {spec.package}, not installed (pip install -e '.[bench]')",
                        progress)
    try:
        onnx_path, export_s = export_once(name, settings, progress)
    except models.ModelUnavailable as e:
        return _skipped(name, str(e), progress)
    except Exception as e:  # noqa: BLE001 - one model failing to export must not stop the run
        progress.note(f"{name}: export failed: {short_error(e)}")
        return {"status": "error", "message": f"export failed: {short_error(e)}", "systems": {}}

    case = ModelCase(name, onnx_path, models.example_inputs(name, settings.batch),
                     lambda: models.build(name), settings.threads)
    systems = [s for s in all_systems() if s.name in settings.systems]
    results = run_case(case, systems, settings, progress)

    inputs = {k: list(v.shape) for k, v in case.inputs.items()}
    del systems, case
    _release_compiled_state()
    return {"status": "ok", "onnx": onnx_path, "export_s": export_s, "inputs": inputs,
            "systems": results}


def run_case(case: ModelCase, systems: list[System], settings: Settings, progress: Progress,
             reference: str = REFERENCE) -> dict[str, dict]:
    """Compile, check against `reference` (one of `systems`) and time the systems on one model;
    one result per system, by name."""
    results = {s.name: _empty_result(s) for s in systems}
    ready = compile_and_check(systems, case, results, settings, progress, reference)
    time_systems(ready, case.name, results, settings, progress)
    return results


def compile_and_check(systems: list[System], case: ModelCase, results: dict[str, dict],
                      settings: Settings, progress: Progress,
                      reference: str = REFERENCE) -> dict[str, System]:
    """Load, compile (timed) and run each system once; the ones whose outputs match the
    reference system's, by name. Fills compile_s, max_rel_diff, info, and the status of those
    that fail."""
    # the reference first: every other system is checked against its outputs
    systems = sorted(systems, key=lambda s: s.name != reference)
    reference_label = results[reference]["label"]
    expected = None
    ready: dict[str, System] = {}
    for system in systems:
        result = results[system.name]
        if system.package and importlib.util.find_spec(system.package) is None:
            _fail(result, "skipped", f"needs {system.package}, not installed "
                  "(pip install -e '.[bench]')", case.name, system, progress)
            continue
        progress.step(f"{case.name}: compiling {system.label}")
        try:
            system.load(case)
            start = time.perf_counter()
            system.compile()
            result["compile_s"] = time.perf_counter() - start
            outputs = as_arrays(system.run())
            result["info"] = system.info()
        except Exception as e:  # noqa: BLE001 - recorded, the other systems go on
            _fail(result, "error", short_error(e), case.name, system, progress)
            continue
        if system.name == reference:
            expected = outputs
        if expected is None:
            _fail(result, "error", f"no reference: {reference_label} did not run", case.name,
                  system, progress)
            continue
        result["max_rel_diff"] = diff = max_rel_diff(outputs, expected)
        tolerance = max(settings.tolerance, PRECISION_TOLERANCE.get(system.precision, 0.0))
        if diff > tolerance:
            _fail(result, "wrong", f"outputs differ from {reference_label}: max rel diff "
                  f"{diff:.3g} > {tolerance:g}", case.name, system, progress)
            continue
        ready[system.name] = system
    return ready


def time_systems(ready: dict[str, System], model: str, results: dict[str, dict],
                 settings: Settings, progress: Progress) -> None:
    """Time the ready systems together (timing.py) and fill in their latency statistics."""
    progress.step(f"{model}: timing {len(ready)} systems, {settings.rounds} rounds x "
                  f"{settings.block} runs")

    def show_block(round_index: int, system: str) -> None:
        when = "warm-up" if round_index < 0 else f"round {round_index + 1}/{settings.rounds}"
        progress.detail(f"{model}: {when} {results[system]['label']}")

    timings = time_in_blocks(
        {n: s.run for n, s in ready.items()}, rounds=settings.rounds, block=settings.block,
        warmup=settings.warmup, pause_s=settings.pause_s, on_block=show_block,
        describe_error=short_error)
    for name, samples in timings.samples.items():
        if name in timings.errors:
            _fail(results[name], "error", timings.errors[name], model, ready[name], progress)
        elif samples:
            results[name].update(status="ok", **vars(timing.summarize(samples)),
                                 round_ms=timing.round_medians(samples, settings.block))


def _empty_result(system: System) -> dict:
    return {"label": system.label, "peer": system.peer, "precision": system.precision,
            "status": "not run", "median_ms": None, "p10_ms": None, "p90_ms": None, "runs": 0,
            "round_ms": None, "compile_s": None, "max_rel_diff": None, "error": None, "info": {}}


def _fail(result: dict, status: str, message: str, model: str, system: System,
          progress: Progress) -> None:
    result.update(status=status, error=message)
    progress.note(f"{model}: {system.label}: {status}: {message}")


def _skipped(name: str, message: str, progress: Progress) -> dict:
    progress.note(f"{name}: skipped: {message}")
    return {"status": "skipped", "message": message, "systems": {}}


def _release_compiled_state() -> None:
    """Free the model's compiled graphs before the next model: Dynamo keeps them in caches."""
    gc.collect()
    torch._dynamo.reset()
