"""`python -m autofusion.benchmarks.call_overhead`: what a model call costs beyond its kernels.

    python -m autofusion.benchmarks.call_overhead MODEL.onnx --threads 2

For a model whose plan is one native partition (static input shapes), three ways of running the
same work, timed in pairs that alternate call by call (so both of a pair meet the same phase of
the host, and both follow a run that pushed Python's code out of cache, as a real call does):

    model      CompiledModel.__call__ with torch tensors: inputs checked, the NaN check, the
               generated function, the partition's Python (outputs made, pointers passed)
    partition  the NativePartition alone
    C call     af_run through ctypes with pointer arrays made once and outputs reused: the floor

Prints the median of each pair's difference in µs (the model's whole run is milliseconds; the
difference is what the Python around the C call costs after the kernels ran).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import autofusion
from autofusion.backend.native import library
from autofusion.ir.feeds import random_feeds

from .cli import pin_threads


def paired_us(first, second, pairs: int) -> float:
    """The median of first's time minus second's over `pairs` pairs, in µs."""
    diffs = []
    for _ in range(pairs):
        start = time.perf_counter()
        first()
        middle = time.perf_counter()
        second()
        diffs.append(2 * middle - start - time.perf_counter())
    return statistics.median(diffs) * 1e6


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.call_overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="an ONNX file with static input shapes")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pairs", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    pin_threads(args.threads)
    model = autofusion.compile(args.model, level=2, threads=args.threads, backend="native")
    parts = list(model.program.native.values())
    if len(model.plan.partitions) != 1 or len(parts) != 1:
        raise SystemExit(f"{args.model}: the plan has {len(model.plan.partitions)} partitions; "
                         "this compares a one-native-partition plan's call with its C call")
    [part] = parts
    built = part.last   # a static model's one set of sizes
    if part.symbols:
        raise SystemExit(f"{args.model}: its sizes {part.symbols} are symbolic; this compares a static "
                         "model's call with its C call")
    feeds = random_feeds(model.graph)
    xs = [torch.from_numpy(feeds[n]) for n in model.input_names]
    outs = [torch.empty(s) for s in built.out_shapes]
    ins = (library._c * len(xs))(*[x.data_ptr() for x in xs])
    ptrs = (library._c * len(outs))(*[o.data_ptr() for o in outs])

    def c_call():
        built._run(built.handle, ins, ptrs, 0, -1)

    def run_model():
        model(*xs)

    def run_partition():
        part(None, *xs)

    for _ in range(5):
        run_model()
        c_call()
    print(f"{args.model}, {args.threads} thread(s): the median difference within a pair, µs, "
          f"{args.pairs} pairs a column")
    print("model − C call | partition − C call | model − partition | C call − C call")
    for _ in range(args.rounds):
        print(f"{paired_us(run_model, c_call, args.pairs):.1f} | "
              f"{paired_us(run_partition, c_call, args.pairs):.1f} | "
              f"{paired_us(run_model, run_partition, args.pairs):.1f} | "
              f"{paired_us(c_call, c_call, args.pairs):.1f}")


if __name__ == "__main__":
    main()
