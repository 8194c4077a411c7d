"""Regenerate examples/tiny_resnet.onnx: a small ResNet-style classifier with random weights.

    python examples/make_example.py

Exported with PyTorch's TorchScript exporter and constant folding off, so the file is what a
framework emits (every BatchNorm still a node) — the kind of graph autofusion exists for.
"""
from pathlib import Path

import torch
from torch import nn


def block(cin: int, cout: int, stride: int) -> nn.Module:
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = (nn.Identity() if stride == 1 and cin == cout else
                         nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))
    return Residual()


def tiny_resnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        block(16, 16, 1), block(16, 32, 2), block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = tiny_resnet().eval()
    for m in model.modules():  # non-trivial statistics, as a trained model has
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.running_mean, -0.2, 0.2)
            nn.init.uniform_(m.running_var, 0.5, 1.5)
    out = Path(__file__).with_name("tiny_resnet.onnx")
    torch.onnx.export(model, (torch.randn(1, 3, 32, 32),), out, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}},
                      opset_version=17, do_constant_folding=False, dynamo=False)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)")
