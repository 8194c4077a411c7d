"""`python -m autofusion.benchmarks.realworld`: the real-model corpus (corpus.py) — detectors,
segmenters, OCR, speech, vocoders, text models, and models written by another framework's
exporter — each at one or more sizes:

    correct   autofusion at levels 0 and 2 against ONNX Runtime (max|Δ| / max|ref| over the outputs)
    speed     autofusion L2, ORT (all optimisations) and OpenVINO f32 side by side, alternating in
              blocks of runs over rounds (measure.py; a block at least 20 ms long, more runs for a
              fast model); L2 against the faster peer, round by round
    work      the model's GFLOP at that size (convolutions, products, attention: fusion/cost.py),
              L2's GFLOP/s, and the share of L2's run inside native steps (oneDNN primitives, the
              runtime's loops, generated kernels) against everything else (PyTorch nodes, the
              partitions' boundaries, Python), from a short profile (profiling.py)
    native    the nodes of L2's plan that run on PyTorch, counted by op and reason

    python -m autofusion.benchmarks.realworld --list
    python -m autofusion.benchmarks.realworld --models unet,hifigan_vocoder --rounds 8
    AUTOFUSION_TF_PYTHON=/path/tfenv/bin/python AUTOFUSION_PADDLE_PYTHON=/path/paddleenv/bin/python \\
        python -m autofusion.benchmarks.realworld

Exports go to --out/onnx/realworld (reused), results to --out/realworld.md and .json.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from ..backend.model import specialised_to
from ..frontend import import_onnx
from ..fusion.cost import flops
from ..measure import time_in_blocks
from ..profiling import profile
from . import timing
from .corpus import CORPUS, Entry
from .models import ModelUnavailable
from .runner import short_error
from .systems import Autofusion, ModelCase, OnnxRuntime, OpenVino, as_arrays, max_rel_diff

CORRECT = 1e-3   # max|Δ| / max|ref| against ONNX Runtime that counts as equal (fp32)


def exported(entry: Entry, out: Path) -> Path:
    path = out / "onnx" / "realworld" / f"{entry.name}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        entry.export(path)
    return path


def not_native(plan) -> dict[str, int]:
    """The plan's nodes on PyTorch: 'op: reason' -> how many."""
    counts: Counter = Counter()
    for part in plan.partitions:
        if part.target != "torch":
            continue
        decision = plan.decisions[part.nodes[0]]
        reason = next((why for name, why in decision.refused if name.startswith("onednn") or name == "reduction"),
                      decision.refused[0][1] if decision.refused else "no native implementation")
        counts[f"{part.nodes[0].op}: {reason}"] += 1
    return dict(counts.most_common())


def gflop(graph, feeds: dict) -> float:
    """The graph's multiply-adds ×2 at these inputs' sizes (fusion/cost.py's count), in GFLOP."""
    return sum(flops(n) for n in specialised_to(graph, feeds).nodes) / 1e9


def native_share(model, feeds: dict) -> float:
    """The share of a profiled run inside the native partitions' steps."""
    found = profile(model, feeds, runs=10, block=5, warmup=2)
    return sum(n.seconds for n in found.nodes if n.where.startswith("native")) / found.profiled


BLOCK_S = 0.02   # a block of runs lasts at least this long


def block_for(ready: dict, least: int) -> int:
    """Runs a block: `least`, or more where the slowest system's call is so short that a block
    of `least` would be mostly the wake-up after the pause between blocks (Silero VAD's 50 µs
    call swung ±30% between runs at 5); at most 200."""
    slowest = 0.0
    for run in ready.values():
        try:
            times = []
            for _ in range(7):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            slowest = max(slowest, float(np.median(times)))
        except Exception:  # noqa: BLE001 - the timing names a failing system itself
            continue
    return max(least, min(200, math.ceil(BLOCK_S / slowest))) if slowest > 0 else least


def run_entry(entry: Entry, out: Path, args) -> list[dict]:
    try:
        path = str(exported(entry, out))
    except ModelUnavailable as e:
        return [{"model": entry.name, "skipped": str(e)}]
    except Exception as e:  # noqa: BLE001 - an exporter's failure is a result, the others go on
        return [{"model": entry.name, "skipped": f"export failed: {short_error(e)}"}]
    rows = []
    for size, feeds_of in entry.sizes.items():
        feeds = feeds_of()
        case = ModelCase(entry.name, path, {k: torch.from_numpy(v) for k, v in feeds.items()}, None, args.threads)
        row: dict = {"model": entry.name, "size": size, "source": entry.source, "recipe": entry.recipe,
                     "errors": {}, "max_rel_diff": {}}
        systems = {"ORT (all)": OnnxRuntime("ORT_ENABLE_ALL"), "autofusion L2": Autofusion(2),
                   "autofusion L0": Autofusion(0), "OpenVINO f32": OpenVino("fp32")}
        ready, reference = {}, None
        for label, system in systems.items():
            try:
                system.load(case)
                start = time.perf_counter()
                system.compile()
                row.setdefault("compile_s", {})[label] = round(time.perf_counter() - start, 3)
                outputs = as_arrays(system.run())
            except Exception as e:  # noqa: BLE001
                row["errors"][label] = short_error(e)
                continue
            if label == "ORT (all)":
                reference = outputs
            elif reference is not None:
                row["max_rel_diff"][label] = max_rel_diff(outputs, reference)
            if label != "autofusion L0":
                ready[label] = system.run
            if label == "autofusion L2":
                plan = system.model.program_for_inputs(feeds).plan   # of the branches these take
                row["not_native"] = not_native(plan)
                row["plan"] = plan.summary()
                row["gflop"] = round(gflop(import_onnx(path), feeds), 3)
                row["in_native_steps"] = round(native_share(system.model, feeds), 3)
        block = row["block"] = block_for(ready, args.block)
        times = time_in_blocks(ready, rounds=args.rounds, block=block, warmup=args.warmup, pause_s=0.2,
                               describe_error=short_error)
        rounds = {k: timing.round_medians(v, block) for k, v in times.samples.items() if v}
        row["median_ms"] = {k: float(np.median(v)) for k, v in rounds.items()}
        if "gflop" in row and "autofusion L2" in row["median_ms"]:
            row["l2_gflop_per_s"] = round(row["gflop"] / (row["median_ms"]["autofusion L2"] / 1e3), 1)
        vs = timing.against_faster(rounds, "autofusion L2", ("ORT (all)", "OpenVINO f32"))
        if vs is not None:
            row["vs_best_peer"] = vs
        row["errors"].update(times.errors)
        rows.append(row)
    return rows


ROWS = "realworld rows: "


def in_child(name: str, args) -> list[dict]:
    command = [sys.executable, "-m", "autofusion.benchmarks.realworld", "--one", name, "--out", str(args.out),
               "--threads", str(args.threads), "--rounds", str(args.rounds), "--block", str(args.block),
               "--warmup", str(args.warmup)]
    done = subprocess.run(command, capture_output=True, text=True)
    found = [line[len(ROWS):] for line in done.stdout.splitlines() if line.startswith(ROWS)]
    if not found:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [{"model": name, "skipped": f"the benchmark process failed: {tail}"}]
    rows = json.loads(found[-1])
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | size | L0 / L2 / OpenVINO vs ORT (max rel. diff) | autofusion L2 ms | ORT (all) ms | OpenVINO f32 ms "
             "| L2 vs best peer | GFLOP | L2 GFLOP/s | L2 in native steps | on PyTorch in L2 (op: reason, count) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['model']} | — | skipped: {r['skipped']} | | | | | | | | |")
            continue
        d, m = r["max_rel_diff"], r.get("median_ms", {})
        diff = " / ".join(f"{d[k]:.1e}" if k in d else "—" for k in ("autofusion L0", "autofusion L2", "OpenVINO f32"))
        cell = lambda k: f"{m[k]:.2f}" if k in m else "—"   # noqa: E731
        torch_nodes = "; ".join(f"{k} ×{n}" for k, n in list(r.get("not_native", {}).items())[:3]) or "none"
        if len(r.get("not_native", {})) > 3:
            torch_nodes += f"; +{len(r['not_native']) - 3} more"
        vs = f"{r['vs_best_peer']:.2f}x" if "vs_best_peer" in r else "—"
        share = f"{r['in_native_steps']:.0%}" if "in_native_steps" in r else "—"
        lines.append(f"| {r['model']} | {r['size']} | {diff} | {cell('autofusion L2')} | {cell('ORT (all)')} | "
                     f"{cell('OpenVINO f32')} | {vs} | {r.get('gflop', '—')} | {r.get('l2_gflop_per_s', '—')} | {share} | "
                     f"{torch_nodes.replace('|', '/')} |")
    errors = [f"- {r['model']} {r.get('size', '')}: {k}: {v}" for r in rows for k, v in r.get("errors", {}).items()]
    return "\n".join(lines + (["", "Errors:", *errors] if errors else []))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.realworld", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help="comma-separated corpus names (default: all)")
    p.add_argument("--list", action="store_true", help="list the corpus with sources and recipes")
    p.add_argument("--out", type=Path, default=Path("benchmark-out"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--one", help=argparse.SUPPRESS)   # a child process: one model, its rows as JSON
    args = p.parse_args(argv)
    if args.list:
        for e in CORPUS.values():
            print(f"{e.name}: {e.source}\n    {e.recipe}\n    sizes: {', '.join(e.sizes)}")
        return
    names = args.models.split(",") if args.models else list(CORPUS)
    unknown = [n for n in names if n not in CORPUS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; the corpus: {', '.join(CORPUS)}")
    torch.set_num_threads(args.threads)
    if args.one:
        print(ROWS + json.dumps(run_entry(CORPUS[args.one], args.out, args)), flush=True)
        return
    # each model in a process of its own: a runtime's threads and caches from one model (ONNX
    # Runtime's spinning pools, OpenVINO's, oneDNN's) slowed the next ones by up to 2x
    rows = [row for n in names for row in in_child(n, args)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "realworld.json").write_text(json.dumps(rows, indent=1))
    (args.out / "realworld.md").write_text(table(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
