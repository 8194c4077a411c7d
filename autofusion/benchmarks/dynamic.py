"""`python -m autofusion.benchmarks.dynamic`: models exported with dynamic axes — one compile, any size —
against the same models exported static, and against ONNX Runtime and OpenVINO f32 on the
dynamic file.

    zoo      each model at two sizes (models.inputs_at: the size it was trained at and another):
             autofusion L2 on the dynamic file and on a static export at that size, ORT (all
             optimisations) and OpenVINO f32 on the dynamic file; the systems alternated in
             blocks, ratios round by round (timing.py)
    stream   the OCR-style recognizer (models.ocr_recognizer, 48-pixel lines) over 100 lines of
             random widths 100-800 (or --stream-model bert-base over 100 texts of 16-256
             tokens): each system's total time over the stream, every first call at a new size
             included (its compile not), three passes in turn
    compile  compile times of each model: autofusion cold (an empty kernel cache, the runtime
             library already built, as after a first use on the machine), warm, and its first
             call at a new size less a steady call (a build for any size), its call that gets
             the sizes native code of their own (the SPECIALISE_AT-th) less a steady one, and a
             call of the build for any size over a steady one of their own ("any size / own");
             ORT's session creation and OpenVINO's compile_model, and their first call at a new
             size less a steady one; each the median of --compile-rounds rounds, the systems in
             turn within a round
    builds   each model at its two sizes: steady calls of builds for any size against builds of
             the sizes' own (docs/runtime.md, "What a new size costs"), alternated in blocks
    --specialise-at 1 gives every set of sizes its own code at its first call (as before builds
    for any size), for a before/after in one command.

    python -m autofusion.benchmarks.dynamic --part zoo --models mobilenet_v3_large,resnet50 --rounds 10
    python -m autofusion.benchmarks.dynamic --part stream
    python -m autofusion.benchmarks.dynamic --part stream --stream-model bert-base
    python -m autofusion.benchmarks.dynamic --part compile

Exports go to --out/onnx (reused), results to --out/dynamic-<part>.md and .json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ..backend.native import library
from ..measure import time_in_blocks
from . import models, timing
from .runner import short_error
from .systems import Autofusion, ModelCase, OnnxRuntime, OpenVino, as_arrays, max_rel_diff

ZOO = ["resnet50", "resnet101", "bert-base", "efficientnet_b4", "vit_b_16", "mobilenet_v3_large",
       "convnext_tiny", "gpt2"]
# (the size it was trained at, another): images' side, tokens' count, ViT's batch
SIZES = {"efficientnet_b4": (380, 300), "bert-base": (128, 64), "gpt2": (128, 64), "vit_b_16": (1, 2),
         "ocr_recognizer": (320, 640), "yolo_detector": (640, 320)}
DEFAULT_SIZES = (224, 160)
# per stream model, the range its sizes are drawn from: a text line's width, a text's tokens
STREAMS = {"ocr_recognizer": (100, 800), "bert-base": (16, 256)}


def export(name: str, out: Path, size: int | None = None) -> str:
    """The model's ONNX file: dynamic (size None) or static at `size`; exported unless there."""
    path = out / "onnx" / f"{name}.{'dynamic' if size is None else f's{size}'}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        at = SIZES.get(name, DEFAULT_SIZES)[0] if size is None else size
        models.export_module(models.build(name), models.inputs_at(name, at), path,
                             outputs=models.spec(name).outputs,
                             dynamic_axes=models.DYNAMIC_AXES[name] if size is None else None)
    return str(path)


def case(name: str, path: str, size: int, threads: int) -> ModelCase:
    return ModelCase(name, path, models.inputs_at(name, size), None, threads)


# ---- zoo -----------------------------------------------------------------------------------

def zoo(names: list[str], out: Path, args) -> list[dict]:
    rows = []
    for name in names:
        for size in SIZES.get(name, DEFAULT_SIZES):
            dynamic, static = export(name, out), export(name, out, size)
            systems = {"autofusion (dynamic file)": (Autofusion(2), dynamic),
                       "autofusion (static file)": (Autofusion(2), static),
                       "ORT (all)": (OnnxRuntime("ORT_ENABLE_ALL"), dynamic),
                       "OpenVINO f32": (OpenVino("fp32"), dynamic)}
            ready, reference, row = {}, None, {"model": name, "size": size, "errors": {}}
            for label, (system, path) in systems.items():
                try:
                    system.load(case(name, path, size, args.threads))
                    system.compile()
                    outputs = as_arrays(system.run())
                except Exception as e:  # noqa: BLE001 - recorded; the others go on
                    row["errors"][label] = short_error(e)
                    continue
                reference = reference if reference is not None else outputs
                row.setdefault("max_rel_diff", {})[label] = max_rel_diff(outputs, reference)
                ready[label] = system.run
            times = time_in_blocks(ready, rounds=args.rounds, block=args.block, warmup=args.warmup,
                                          pause_s=0.2, describe_error=short_error)
            rounds = {k: timing.round_medians(v, args.block) for k, v in times.samples.items() if v}
            row["median_ms"] = {k: float(np.median(v)) for k, v in rounds.items()}
            ours = rounds.get("autofusion (dynamic file)")
            vs = timing.against_faster(rounds, "autofusion (dynamic file)", ("ORT (all)", "OpenVINO f32"))
            if vs is not None:
                row["vs_best_peer"] = vs
            if ours and "autofusion (static file)" in rounds:
                row["vs_static"] = timing.paired_ratio(rounds["autofusion (static file)"], ours)
            row["errors"].update(times.errors)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def zoo_table(rows: list[dict]) -> str:
    lines = ["| model | size | autofusion dynamic | autofusion static | ORT (all) | OpenVINO f32 | "
             "vs best peer | vs static |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m = r.get("median_ms", {})
        cell = lambda k: f"{m[k]:.2f}" if k in m else "—"   # noqa: E731
        ratio = lambda k: f"{r[k]:.2f}x" if k in r else "—"   # noqa: E731
        lines.append(f"| {r['model']} | {r['size']} | {cell('autofusion (dynamic file)')} | "
                     f"{cell('autofusion (static file)')} | {cell('ORT (all)')} | {cell('OpenVINO f32')} | "
                     f"{ratio('vs_best_peer')} | {ratio('vs_static')} |")
    return "\n".join(lines)


# ---- builds --------------------------------------------------------------------------------

def builds(names: list[str], out: Path, args) -> list[dict]:
    """Per model and size, steady calls of two compiles of the dynamic file: one whose builds stay
    for any size, one whose builds are the sizes' own (library.SPECIALISE_AT, set before each of
    its calls), alternated in blocks."""
    rows = []
    for name in names:
        path = export(name, out)
        for size in SIZES.get(name, DEFAULT_SIZES):
            systems = {"for any size": Autofusion(2), "own": Autofusion(2)}
            for system in systems.values():
                system.load(case(name, path, size, args.threads))
                system.compile()

            def at(system, specialise_at: int, long_call: float):
                def run():
                    library.SPECIALISE_AT, library.LONG_CALL = specialise_at, long_call
                    return system.run()
                return run
            ready = {"for any size": at(systems["for any size"], 1 << 30, float("inf")),
                     "own": at(systems["own"], 1, library.LONG_CALL)}
            times = time_in_blocks(ready, rounds=args.rounds, block=args.block, warmup=args.warmup, pause_s=0.2,
                                   describe_error=short_error)
            rounds = {k: timing.round_medians(v, args.block) for k, v in times.samples.items() if v}
            row = {"model": name, "size": size, "median_ms": {k: float(np.median(v)) for k, v in rounds.items()},
                   "errors": times.errors}
            if len(rounds) == 2:
                row["any_over_own"] = timing.paired_ratio(rounds["for any size"], rounds["own"])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def builds_table(rows: list[dict]) -> str:
    lines = ["| model | size | for any size (ms) | own (ms) | for any size / own |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        m = r["median_ms"]
        cell = lambda k: f"{m[k]:.2f}" if k in m else "—"   # noqa: E731
        ratio = f"{r['any_over_own']:.2f}x" if "any_over_own" in r else "—"
        lines.append(f"| {r['model']} | {r['size']} | {cell('for any size')} | {cell('own')} | {ratio} |")
    return "\n".join(lines)


# ---- stream --------------------------------------------------------------------------------

def stream(out: Path, args) -> list[dict]:
    """Passes over 100 inputs of random sizes (other ones each pass), the systems in turn over
    each; each system compiled afresh for each pass; total seconds of the 100 calls."""
    name = args.stream_model
    path = export(name, out)
    low, high = STREAMS[name]
    # other sizes each pass (the systems in turn over the same ones): oneDNN's primitive cache is
    # the process's, and a size an earlier pass set up would find its primitives made
    passes = [[int(w) for w in np.random.default_rng(k).integers(low, high + 1, 100)] for k in range(args.passes)]
    makers = {"autofusion": lambda: Autofusion(2), "ORT (all)": lambda: OnnxRuntime("ORT_ENABLE_ALL"),
              "OpenVINO f32": lambda: OpenVino("fp32")}
    totals: dict[str, list[float]] = {k: [] for k in makers}
    errors: dict[str, str] = {}
    for widths in passes:
        lines = [models.inputs_at(name, w) for w in widths]
        for label, make in makers.items():
            if label in errors:
                continue
            system = make()
            try:
                system.load(case(name, path, widths[0], args.threads))
                system.compile()
                start = time.perf_counter()
                for feed in lines:
                    run_on(system, feed)
                totals[label].append(time.perf_counter() - start)
            except Exception as e:  # noqa: BLE001
                errors[label] = short_error(e)
            del system
            time.sleep(0.5)
    row = {"model": name, "widths": passes, "total_s": totals, "errors": errors,
           "median_total_s": {k: float(np.median(v)) for k, v in totals.items() if v}}
    print(json.dumps({k: v for k, v in row.items() if k != "widths"}), flush=True)
    return [row]


def run_on(system, feed: dict[str, torch.Tensor]):
    """One call of a compiled system on other inputs than its case's."""
    if isinstance(system, Autofusion):
        return system.model(**feed)
    arrays = {k: v.numpy() for k, v in feed.items()}
    if isinstance(system, OnnxRuntime):
        return system.session.run(None, {i.name: arrays[i.name] for i in system.session.get_inputs()})
    return system.request.infer({k: arrays[next(n for n in port.get_names() if n in arrays)]
                                 for k, port in enumerate(system.compiled.inputs)}, share_inputs=True).to_tuple()


def stream_table(rows: list[dict]) -> str:
    r = rows[0]
    m = r["median_total_s"]
    ours = m.get("autofusion")
    lines = ["| system | total over 100 inputs (s, median of passes) | autofusion's speed against it |",
             "|---|---:|---:|"]
    for k, v in m.items():
        lines.append(f"| {k} | {v:.3f} | {v / ours:.2f}x |" if ours else f"| {k} | {v:.3f} | — |")
    return "\n".join(lines)


# ---- compile -------------------------------------------------------------------------------

def compile_times(names: list[str], out: Path, args) -> list[dict]:
    """Per model, each measure the median of `args.compile_rounds` rounds, the systems in turn
    within a round (a compile is seconds, and this host's load varies over minutes)."""
    import autofusion
    from autofusion.backend.native import build
    rows = []
    runtime = build.runtime_library(build.toolchain())   # built (or found) before any timing
    for name in names:
        path = export(name, out)
        first, other = SIZES.get(name, DEFAULT_SIZES)
        times: dict[str, list[float]] = {}
        errors: dict[str, str] = {}
        for r in range(args.compile_rounds):
            # a new size each round: oneDNN's primitive cache is the process's, and a size an
            # earlier round set up would find its primitives made
            new = other - r * (32 if other >= 128 else 8) if other >= 32 else other + r
            feeds = {s: models.inputs_at(name, s) for s in (first, new)}
            for label, seconds in _autofusion_compile(autofusion, runtime, path, feeds).items():
                times.setdefault(label, []).append(seconds)
            for label, system in (("ORT", OnnxRuntime("ORT_ENABLE_ALL")), ("OpenVINO f32", OpenVino("fp32"))):
                try:
                    system.load(case(name, path, first, args.threads))
                    start = time.perf_counter()
                    system.compile()
                    times.setdefault(label, []).append(time.perf_counter() - start)
                    times.setdefault(f"{label} new size", []).append(
                        first_call(lambda f: run_on(system, f), feeds))
                except Exception as e:  # noqa: BLE001
                    errors[label] = short_error(e)
        row = {"model": name, **{k: float(np.median(v)) for k, v in times.items()}, **errors,
               "rounds": {k: v for k, v in times.items()}}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
    return rows


def _autofusion_compile(autofusion, runtime: Path, path: str, feeds: dict) -> dict[str, float]:
    """Cold (a fresh cache holding the runtime alone), warm (again) and a new size's first call."""
    with tempfile.TemporaryDirectory() as cache:
        shutil.copy(runtime, Path(cache) / runtime.name)
        os.environ["AUTOFUSION_CACHE_DIR"] = cache
        try:
            start = time.perf_counter()
            autofusion.compile(path)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            model = autofusion.compile(path)
            warm = time.perf_counter() - start
            parts = [p for p in model.program.native.values() if p.symbols]
            new, calls, kinds = first_calls(lambda f: model(**f), feeds,
                                            lambda: tuple(p.last is not None and p.last.any_size for p in parts))
            # the calls at which a partition got a build of the sizes' own (library.SPECIALISE_AT,
            # or LONG_CALL), and a call of builds for any size against a steady one of their own
            times = {"autofusion cold": cold, "autofusion warm": warm, "autofusion new size": new}
            state, turns = (True,) * len(parts), []   # after the first call at the size: all for any size
            for i, k in enumerate(kinds):
                if k != state:
                    turns.append(i)
                    state = k
            if turns and turns[-1] + 1 < len(calls):
                steady = float(np.median(calls[turns[-1] + 1:]))
                times["autofusion own code"] = sum(calls[i] - steady for i in turns)
                if turns[0] > 0:
                    times["any size / own"] = float(np.median(calls[:turns[0]])) / steady
            return times
        finally:
            del os.environ["AUTOFUSION_CACHE_DIR"]


def first_call(call, feeds: dict[int, dict]) -> float:
    """Seconds the first call at a new size costs over a steady call at it (after a first size
    has run): the set-up a new size costs."""
    return first_calls(call, feeds)[0]


def first_calls(call, feeds: dict[int, dict], kind=None) -> tuple[float, list[float], list]:
    """first_call's measure, the seconds of the five calls after it at that size (their median
    the steady call), and what kind() says after each of them."""
    first, other = feeds
    for _ in range(3):
        call(feeds[first])
    start = time.perf_counter()
    call(feeds[other])
    new = time.perf_counter() - start
    after, kinds = [], []
    for _ in range(5):
        start = time.perf_counter()
        call(feeds[other])
        after.append(time.perf_counter() - start)
        kinds.append(kind() if kind is not None else None)
    return new - float(np.median(after)), after, kinds


def compile_table(rows: list[dict]) -> str:
    keys = ["autofusion cold", "autofusion warm", "ORT", "OpenVINO f32", "autofusion new size",
            "autofusion own code", "any size / own", "ORT new size", "OpenVINO f32 new size"]
    lines = ["| model | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for r in rows:
        def cell(k):
            v = r.get(k)
            if not isinstance(v, float):
                return "—"
            return f"{v:.2f}x" if k == "any size / own" else \
                f"{v * 1e3:.0f} ms" if "new size" in k or "own code" in k else f"{v:.2f} s"
        cells = [cell(k) for k in keys]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.dynamic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=["zoo", "stream", "compile", "builds"], default="zoo")
    p.add_argument("--models", default=",".join(ZOO), help="comma-separated (zoo, compile and builds)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=3, help="stream: passes over the 100 inputs")
    p.add_argument("--stream-model", choices=list(STREAMS), default="ocr_recognizer",
                   help="stream: the model (the text recognizer over widths 100-800, BERT-Base over "
                        "16-256 tokens)")
    p.add_argument("--compile-rounds", type=int, default=3, help="compile: rounds, each measure their median")
    p.add_argument("--specialise-at", type=int, default=library.SPECIALISE_AT,
                   help="the call at which a set of sizes gets native code of its own (1: at once, as "
                        "before builds for any size; the first calls before it run those)")
    p.add_argument("--out", default="bench-out")
    args = p.parse_args(argv)
    library.SPECIALISE_AT = args.specialise_at
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.models.split(",") if n]
    parts = {"zoo": (lambda: zoo(names, out, args), zoo_table), "stream": (lambda: stream(out, args), stream_table),
             "compile": (lambda: compile_times(names, out, args), compile_table),
             "builds": (lambda: builds(names, out, args), builds_table)}
    run, table_of = parts[args.part]
    rows = run()
    table = table_of(rows)
    print(table)
    stamp = time.strftime("%Y-%m-%d")
    (out / f"dynamic-{args.part}-{stamp}.md").write_text(table + "\n")
    (out / f"dynamic-{args.part}-{stamp}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
