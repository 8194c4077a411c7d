"""torch.compile(backend="autofusion") beside the other ways to run a PyTorch model on CPU.

    python autofusion/benchmarks/torch_compile.py                       # the four models, 6 rounds
    python autofusion/benchmarks/torch_compile.py --models resnet50 --rounds 1 --block 2 --warmup 1

Systems, each on the same model object and the same inputs, under torch.no_grad():

    eager              the module as it is
    inductor-freezing  torch.compile(backend="inductor") with torch._inductor.config.freezing
                       = True (options={"freezing": True} silently does not freeze)
    autofusion         torch.compile(backend="autofusion"), level 2
    autofusion-onnx    the ONNX path: TorchScript export, autofusion.compile, level 2

For each: the largest difference of its outputs from eager's, the compile time (the first call
of a torch.compile'd module — dynamo's trace and the backend; for the ONNX path export plus
compile plus the first run) and the latency: median of the timed runs after warm-up, systems
alternated in blocks and rounds (autofusion/benchmarks/timing.py; the method and its reasons are there).
The models come from the benchmark zoo (autofusion/benchmarks/models.py: random seeded weights;
torchvision and transformers must be installed). Prints a table and writes JSON with --out.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

import torch

import autofusion
from autofusion.benchmarks import models
from autofusion.benchmarks.cli import pin_threads
from autofusion.benchmarks.timing import summarize
from autofusion.measure import time_in_blocks

MODELS = ["resnet50", "mobilenet_v3_large", "bert-base", "gpt2"]
SYSTEMS = ["eager", "inductor-freezing", "autofusion", "autofusion-onnx"]


def outputs_of(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]


def prepare(system: str, module: torch.nn.Module, inputs: dict[str, torch.Tensor],
            workdir: Path, name: str) -> tuple[Callable[[], object], float]:
    """(one inference, compile seconds) for a system."""
    args = tuple(inputs.values())
    start = time.perf_counter()
    if system == "eager":
        run = lambda: module(*args)  # noqa: E731
    elif system in ("inductor-freezing", "autofusion"):
        torch._inductor.config.freezing = system == "inductor-freezing"
        compiled = torch.compile(module, backend="inductor" if system == "inductor-freezing" else "autofusion")
        compiled(*args)   # dynamo compiles on the first call
        run = lambda: compiled(*args)  # noqa: E731
    elif system == "autofusion-onnx":
        path = workdir / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            models.export_onnx(name, path)
        compiled = autofusion.compile(path)
        feeds = {k: v.numpy() for k, v in inputs.items()}
        compiled.run(feeds)
        run = lambda: compiled.run(feeds)  # noqa: E731
    else:
        raise ValueError(f"unknown system {system!r}; known: {', '.join(SYSTEMS)}")
    return run, time.perf_counter() - start


def max_difference(got, want: list[torch.Tensor]) -> float:
    got = list(got.values()) if isinstance(got, dict) else outputs_of(got)
    got = [torch.as_tensor(g) for g in got]
    if len(got) != len(want):
        return float("nan")
    return max(float((g.float() - w.float()).abs().max()) for g, w in zip(got, want))


def benchmark(name: str, systems: list[str], args: argparse.Namespace, workdir: Path) -> dict:
    torch._dynamo.reset()
    module = models.build(name)
    inputs = models.example_inputs(name, batch=args.batch)
    result = {"systems": {}}
    with torch.no_grad():
        reference = outputs_of(module(*inputs.values()))
        runs = {}
        for system in systems:
            entry = result["systems"][system] = {}
            try:
                run, seconds = prepare(system, module, inputs, workdir, name)
                entry["compile_s"] = round(seconds, 3)
                entry["max_abs_diff"] = max_difference(run(), reference)
                runs[system] = run
            except Exception as e:  # noqa: BLE001 - one system failing must not stop the others
                entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        timings = time_in_blocks(runs, rounds=args.rounds, block=args.block, warmup=args.warmup,
                                 pause_s=args.pause)
    for system, samples in timings.samples.items():
        if samples:
            s = summarize(samples)
            result["systems"][system].update(median_ms=round(s.median_ms, 3), runs=s.runs)
    for system, error in timings.errors.items():
        result["systems"][system]["error"] = error
    eager = result["systems"].get("eager", {}).get("median_ms")
    for entry in result["systems"].values():
        if eager and entry.get("median_ms"):
            entry["vs_eager"] = round(eager / entry["median_ms"], 3)
    return result


def table(results: dict) -> str:
    lines = [f"{'model':<20} {'system':<18} {'median ms':>10} {'vs eager':>9} {'compile s':>10} {'max |diff|':>11}"]
    for name, result in results.items():
        for system, e in result["systems"].items():
            if "error" in e:
                lines.append(f"{name:<20} {system:<18} error: {e['error']}")
                continue
            lines.append(f"{name:<20} {system:<18} {e.get('median_ms', float('nan')):>10.2f} "
                         f"{e.get('vs_eager', float('nan')):>8.2f}x {e['compile_s']:>10.1f} "
                         f"{e['max_abs_diff']:>11.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python autofusion/benchmarks/torch_compile.py", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from: {', '.join(models.MODELS)}")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, from: {', '.join(SYSTEMS)}")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="threads for every system (default: torch's)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between blocks")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    systems = [s for s in args.systems.split(",") if s]
    unknown = [m for m in names if m not in models.MODELS] + [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown model or system: {', '.join(unknown)}")
    if args.threads:
        pin_threads(args.threads)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(f"{name} ...", flush=True)
            results[name] = benchmark(name, systems, args, Path(tmp))
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps({"threads": torch.get_num_threads(), "batch": args.batch,
                                        "models": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
