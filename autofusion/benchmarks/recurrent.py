"""`python -m autofusion.benchmarks.recurrent`: one LSTM or GRU layer (PyTorch's module, exported
by torch.onnx) at a few shapes, forward and bidirectional, autofusion against ONNX Runtime and
OpenVINO f32, with the kernel autofusion runs it on (runtime/recurrent.cpp).

    python -m autofusion.benchmarks.recurrent
    python -m autofusion.benchmarks.recurrent --cells gru --shapes 128x128x100x1

A shape is IxHxTxN (input size, hidden size, time steps, batch). Median ms over rounds of blocks, the systems alternating (measure.py), a pause
between blocks (ONNX Runtime's threads spin a while after its runs).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..measure import time_in_blocks
from . import timing
from .runner import short_error
from .systems import Autofusion, ModelCase, OnnxRuntime, OpenVino

SHAPES = ["384x96x80x1", "192x96x80x1", "512x512x50x1", "256x256x50x16"]


class Layer(nn.Module):
    def __init__(self, cell: str, size: int, hidden: int, bidirectional: bool):
        super().__init__()
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(size, hidden, bidirectional=bidirectional)

    def forward(self, x):
        return self.rnn(x)[0]


def measure(cell: str, shape: str, bidirectional: bool, args) -> dict:
    size, hidden, steps, batch = map(int, shape.split("x"))
    torch.manual_seed(0)
    x = torch.randn(steps, batch, size)
    systems = {"autofusion": Autofusion(2), "ORT (all)": OnnxRuntime("ORT_ENABLE_ALL"), "OpenVINO f32": OpenVino("fp32")}
    with tempfile.TemporaryDirectory() as folder:   # each system has read the file once compiled
        path = Path(folder) / "layer.onnx"
        torch.onnx.export(Layer(cell, size, hidden, bidirectional).eval(), (x,), str(path), input_names=["x"],
                          opset_version=17, dynamo=False)
        case = ModelCase(f"{cell} {shape}", str(path), {"x": x}, None, args.threads)
        for system in systems.values():
            system.load(case)
            system.compile()
    times = time_in_blocks({label: system.run for label, system in systems.items()}, rounds=args.rounds,
                           block=args.block, warmup=args.warmup, pause_s=0.3, describe_error=short_error)
    rounds = {k: timing.round_medians(v, args.block) for k, v in times.samples.items() if v}
    row = {"cell": cell, "shape": shape, "bidirectional": bidirectional,
           "kernel": next(iter(systems["autofusion"].model.plan.kernels.values())),
           "median_ms": {k: float(np.median(v)) for k, v in rounds.items()}, "errors": times.errors}
    vs = timing.against_faster(rounds, "autofusion", ("ORT (all)", "OpenVINO f32"))
    if vs is not None:
        row["vs_best_peer"] = vs
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default="lstm,gru")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args(argv)
    rows = []
    for cell in args.cells.split(","):
        for shape in args.shapes.split(","):
            for bidirectional in (False, True):
                row = measure(cell, shape, bidirectional, args)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("| cell | shape IxHxTxN | directions | autofusion kernel | autofusion ms | ORT ms | OpenVINO ms | vs best |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        m = r["median_ms"]
        cell = lambda k: f"{m[k]:.3f}" if k in m else "—"   # noqa: E731
        print(f"| {r['cell']} | {r['shape']} | {2 if r['bidirectional'] else 1} | {r['kernel']} | {cell('autofusion')} "
              f"| {cell('ORT (all)')} | {cell('OpenVINO f32')} | {r.get('vs_best_peer', 0):.2f}x |")


if __name__ == "__main__":
    main()
