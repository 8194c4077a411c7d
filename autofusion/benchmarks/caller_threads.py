"""`python -m autofusion.benchmarks.caller_threads`: a call's time by what else ran OpenMP work on
which thread (docs/runtime.md, "Many callers": libgomp has every team sleep between parallel
regions once its pools' threads outnumber the CPUs).

    python -m autofusion.benchmarks.caller_threads MODEL.onnx --shape 1,3,224,224

Each case in a process of its own (a pool lives as long as its thread), median ms of blocks of
calls after a warm-up, every case timing the same model and input:

    main               calls from the main thread, nothing else run
    main, torch first  a torch product run on the main thread before the calls
    worker             calls from a worker thread, nothing else run
    main, then worker  the main thread calls (a warm-up), then a worker thread's calls are timed
    two models         a second compile of the file called first, then the first timed
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import torch

CASES = ("main", "main, torch first", "worker", "main, then worker", "two models")


def timed(call, blocks: int = 5, block: int = 20) -> float:
    """The median over blocks of one call's mean time in a block, in ms, after a warm-up."""
    for _ in range(5):
        call()
    means = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(block):
            call()
        means.append((time.perf_counter() - start) / block * 1e3)
    return statistics.median(means)


def on_worker(fn):
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def run_case(case: str, path: str, shape: tuple[int, ...], threads: int) -> float:
    import autofusion
    torch.set_num_threads(threads)
    model = autofusion.compile(path, threads=threads)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))   # no torch op
    call = lambda: model(x)   # noqa: E731
    if case == "main, torch first":
        a = torch.randn(512, 512)
        (a @ a).relu_().sum()
    if case == "main, then worker":
        call()
    if case == "two models":
        other = autofusion.compile(path, threads=threads)
        other(x)
    if case in ("worker", "main, then worker"):
        return on_worker(lambda: timed(call))
    return timed(call)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--shape", required=True, help="the input's shape, e.g. 1,3,224,224")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--case", help=argparse.SUPPRESS)   # the child process timing one case
    args = p.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split(","))
    if args.case:
        print(json.dumps(run_case(args.case, args.model, shape, args.threads)))
        return
    for case in CASES:
        done = subprocess.run([sys.executable, "-m", "autofusion.benchmarks.caller_threads", args.model,
                               "--shape", args.shape, "--threads", str(args.threads), "--case", case],
                              capture_output=True, text=True)
        result = done.stdout.strip().splitlines()[-1] if done.returncode == 0 else "failed: " + \
            (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{case:20s} {result} ms" if done.returncode == 0 else f"{case:20s} {result}", flush=True)


if __name__ == "__main__":
    main()
