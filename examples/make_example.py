"""Regenerate examples/tiny_resnet.onnx, the model the README's example command compiles.

    python examples/make_example.py

It is the benchmark zoo's `tiny_resnet` (autofusion/benchmarks/models.py): a small ResNet-style classifier
with seeded random weights and non-trivial BatchNorm statistics, exported with PyTorch's
TorchScript exporter and its constant folding off, so the file is what a framework emits — every
BatchNorm still a node — the kind of graph autofusion exists for.
"""
from pathlib import Path

from autofusion.benchmarks.models import export_onnx

if __name__ == "__main__":
    out = Path(__file__).with_name("tiny_resnet.onnx")
    export_onnx("tiny_resnet", out)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)")
