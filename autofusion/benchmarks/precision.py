"""`python -m autofusion.benchmarks.precision`: how far bf16 moves each zoo model's outputs from fp32.

    python -m autofusion.benchmarks.precision                       # every zoo model, 16 inputs each
    python -m autofusion.benchmarks.precision --models resnet50 --inputs 32

For each model, a fixed set of seeded inputs (images or token ids, batch 1) runs through PyTorch
eager in fp32 (the reference), autofusion level 2 in bf16 and OpenVINO's default (bf16 on CPUs
with avx512_bf16 or AMX). Per system: the relative error max|Δ|/max|ref| (of the worst output)
for the worst input and as the mean over the inputs (one input's realisation moves the worst by a
tenth or more), and for the classifiers top-1 agreement (the same class
as fp32) and top-5 agreement (fp32's class among the system's five best). Weights are the zoo's
seeded random ones (models.py), so the classes mean nothing; agreement still measures how often
bf16 changes the answer. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

from . import models
from .cli import ZOO, pin_threads
from .machine import usable_cores
from .systems import max_rel_diff


def seeded_inputs(name: str, count: int) -> list[dict[str, torch.Tensor]]:
    """`count` inputs shaped like the model's example, drawn from seeds 1..count."""
    example = models.example_inputs(name)
    out = []
    for k in range(1, count + 1):
        g = torch.Generator().manual_seed(k)
        out.append({n: torch.randn(t.shape, generator=g) if t.is_floating_point() else
                    torch.randint(0, 1000, t.shape, generator=g, dtype=t.dtype)
                    if n == "input_ids" else t   # masks and type ids as the example has them
                    for n, t in example.items()})
    return out


def agreement(logits: list[np.ndarray], reference: list[np.ndarray], k: int) -> float:
    """The share of inputs whose fp32 class is among the system's k best."""
    hits = [int(np.argmax(r)) in np.argsort(-y.reshape(-1))[:k] for y, r in zip(logits, reference)]
    return sum(hits) / len(hits)


def run_autofusion(path: str, inputs: list[dict], threads: int) -> list[list[np.ndarray]]:
    import autofusion
    m = autofusion.compile(path, precision="bf16", threads=threads)
    return [[o.numpy() for o in _tuple(m(**x))] for x in inputs]


def run_openvino(path: str, inputs: list[dict], threads: int) -> list[list[np.ndarray]]:
    import openvino as ov
    import openvino.properties as props
    compiled = ov.Core().compile_model(path, "CPU", {props.inference_num_threads(): threads})
    request = compiled.create_infer_request()
    outs = []
    for x in inputs:
        feeds = {k: next(x[n].numpy() for n in port.get_names() if n in x)
                 for k, port in enumerate(compiled.inputs)}
        outs.append([np.array(o) for o in request.infer(feeds).to_tuple()])
    return outs


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def measure(name: str, onnx_dir: Path, count: int, threads: int) -> dict[str, dict]:
    path = onnx_dir / f"{name}.b1.torchscript.onnx"
    if not path.exists():
        models.export_onnx(name, path)
    inputs = seeded_inputs(name, count)
    module = models.build(name)
    with torch.no_grad():
        reference = [[o.numpy() for o in _tuple(module(*x.values()))] for x in inputs]
    systems = {"autofusion L2 bf16": run_autofusion}
    if importlib.util.find_spec("openvino") is not None:
        systems["OpenVINO default (bf16 here)"] = run_openvino
    results = {}
    for label, run in systems.items():
        outs = run(str(path), inputs, threads)
        errors = [max_rel_diff([o.astype(np.float64) for o in y], [o.astype(np.float64) for o in ref])
                  for y, ref in zip(outs, reference)]
        r = {"max_rel": max(errors), "mean_rel": float(np.mean(errors))}
        if models.spec(name).outputs == ("logits",):
            first = [y[0] for y in outs]
            ref0 = [ref[0] for ref in reference]
            r.update(top1=agreement(first, ref0, 1), top5=agreement(first, ref0, 5))
        results[label] = r
    return results


def markdown(results: dict[str, dict[str, dict]], count: int) -> str:
    labels = list(dict.fromkeys(label for per in results.values() for label in per))
    lines = [(f"bf16 against PyTorch eager fp32, {count} seeded inputs per model: relative error "
              "(max|Δ|/max|ref|) of the worst input and the mean over the inputs, top-1 / top-5 "
              "agreement for the classifiers."), "",
             "| model | " + " | ".join(labels) + " |", "| --- |" + " ---: |" * len(labels)]
    for name, per in results.items():
        cells = []
        for label in labels:
            r = per.get(label)
            cells.append("—" if r is None else f"{r['max_rel']:.1e} (mean {r['mean_rel']:.1e})" + (
                f", {r['top1']:.0%} / {r['top5']:.0%}" if "top1" in r else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.precision", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(ZOO), metavar="A,B")
    p.add_argument("--inputs", type=int, default=16, help="inputs per model (default %(default)s)")
    p.add_argument("--threads", type=int, default=usable_cores())
    p.add_argument("--out", default="bench-out", help="where the ONNX exports live (<out>/onnx)")
    args = p.parse_args(argv)
    pin_threads(args.threads)
    onnx_dir = Path(args.out) / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        print(f"{name} …", file=sys.stderr)
        results[name] = measure(name, onnx_dir, args.inputs, args.threads)
    print(markdown(results, args.inputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
