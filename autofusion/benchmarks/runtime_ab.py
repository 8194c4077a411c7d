"""`python -m autofusion.benchmarks.runtime_ab`: one model compiled against the native runtime of an earlier
revision and against the working tree's, timed side by side in one process.

    python -m autofusion.benchmarks.runtime_ab MODEL.onnx --rev HEAD~2 --precision bf16

A change inside the runtime (runtime/*.h, *.cpp) has no switch to turn it off, so the suite's
systems cannot show it; this compiles the same model twice, the first time with the runtime
sources of `--rev` (from git, into a temporary directory: the build cache keys on the sources,
so each gets its own library), and times the two alternating in blocks (timing.py). The
model's programs and kernels are the working tree's either way: the revision's runtime must
read the calls they make (runtime/program.cpp; it refuses them by name otherwise).
Prints both medians, their ratio, the median of the two blocks' ratios round by round (robust to
the host's slow and fast phases) and how far the outputs differ. Inputs (static shapes only):
seeded standard-normal floats, integers below 100 (token ids), ones for an integer "mask", zeros
for an integer "type" (BERT's token types: its table has two rows).
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx

import autofusion
from autofusion.backend.native import build

from ..measure import time_in_blocks
from .timing import paired_ratio, round_medians, summarize


def runtime_at(rev: str, into: Path) -> Path:
    """The runtime directory's files as they were at `rev`, written into `into`."""
    repo = Path(__file__).resolve().parents[2]
    rel = build.RUNTIME_DIR.resolve().relative_to(repo).as_posix()
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{rel}"], cwd=repo, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in names:
        blob = subprocess.run(["git", "show", f"{rev}:{rel}/{name}"], cwd=repo, check=True,
                              capture_output=True).stdout
        (into / name).write_bytes(blob)
    return into


def compile_with_runtime(path: str, runtime: Path, **options) -> autofusion.CompiledModel:
    current = build.RUNTIME_DIR
    build.RUNTIME_DIR = runtime
    try:
        return autofusion.compile(path, backend="native", **options)
    finally:
        build.RUNTIME_DIR = current


def seeded_feeds(path: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    graph = onnx.load(path, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    feeds = {}
    for i in graph.input:
        if i.name in initializers:
            continue
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if not all(dims):
            raise SystemExit(f"input {i.name!r} has a dynamic shape: runtime_ab takes static shapes only")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        feeds[i.name] = (rng.standard_normal(dims).astype(dtype) if np.issubdtype(dtype, np.floating) else
                         np.ones(dims, dtype) if "mask" in i.name else
                         np.zeros(dims, dtype) if "type" in i.name else rng.integers(0, 100, dims).astype(dtype))
    return feeds


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.runtime_ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="an ONNX file")
    p.add_argument("--rev", required=True, help="the git revision whose runtime is the baseline")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--block", type=int, default=5)
    args = p.parse_args(argv)
    feeds = seeded_feeds(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        options = dict(precision=args.precision, threads=args.threads)
        models = {args.rev: compile_with_runtime(args.model, runtime_at(args.rev, Path(tmp)), **options),
                  "working tree": compile_with_runtime(args.model, build.RUNTIME_DIR, **options)}
    outputs = [m.run(feeds) for m in models.values()]
    diff = max(float(np.abs(outputs[0][k] - outputs[1][k]).max() / max(np.abs(outputs[0][k]).max(), 1e-30))
               for k in outputs[0])
    timings = time_in_blocks({name: (lambda m=m: m.run(feeds)) for name, m in models.items()},
                             rounds=args.rounds, block=args.block, warmup=args.block, pause_s=0.05)
    medians = {name: summarize(s) for name, s in timings.samples.items()}
    print(f"{Path(args.model).name}, {args.precision}, {args.threads} thread(s), {args.rounds} rounds x "
          f"{args.block} runs; outputs differ by max|Δ|/max|ref| = {diff:.1e}")
    for name, s in medians.items():
        print(f"  runtime at {name:14s} median {s.median_ms:8.2f} ms (p10 {s.p10_ms:.2f}, p90 {s.p90_ms:.2f})")
    base, new = (medians[n].median_ms for n in models)
    print(f"  {args.rev} / working tree: {base / new:.3f}x")
    print(f"  paired by round: {paired_ratio(*(round_medians(timings.samples[n], args.block) for n in models)):.3f}x")


if __name__ == "__main__":
    main()
