"""A squeeze-excitation's scale on a channels-last activation, y = x·s with s one value per
channel (runtime/channel_scale.h): equal to the torch backend for channel counts on and off the
16-lane width, a scale per batch or one for all, f32 and bf16; a scale that is not per channel,
or an activation that is not channels-last, goes to oneDNN's binary as before.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import autofusion
from autofusion.ir import DType

from .test_impls import RNG, check_native, const, graph, step_kernel
from .cpu import bf16_dots, own_loops

pytestmark = pytest.mark.skipif(__import__("autofusion.backend.native", fromlist=["unavailable"]).unavailable()
                                is not None, reason="native backend unavailable")


def scaled(channels: int, size: int, batch: int, scales: tuple, out_channels: int = 8):
    """x → 3x3 FusedConv(ReLU) [channels-last] → · s → 1x1 FusedConv: the scale between two
    convolutions, as in MobileNetV3's and EfficientNet's blocks."""
    def build(op, x, s):
        y = op.FusedConv(x, const(op, channels, channels, 3, 3), const(op, channels), pads=[1, 1, 1, 1],
                         activation="Relu")
        y.shape, y.dtype = (batch, channels, size, size), DType.FLOAT
        m = op.Mul(y, s)
        m.shape, m.dtype = y.shape, DType.FLOAT
        return [(op.FusedConv(m, const(op, out_channels, channels, 1, 1)), (batch, out_channels, size, size))]
    return graph({"x": (batch, channels, size, size), "s": scales}, build)


@own_loops
@pytest.mark.parametrize("channels", [16, 24, 40, 144])
@pytest.mark.parametrize("batch, per_batch", [(1, False), (2, False), (2, True)])
def test_the_runtime_scales_the_channels_as_torch_does(channels, batch, per_batch):
    model = check_native(scaled(channels, 9, batch, (batch if per_batch else 1, channels, 1, 1)))
    assert step_kernel(model, "Mul") == "runtime channel scale"


def test_a_parallel_scale_equals_torch_at_one_and_two_threads():
    g = scaled(96, 28, 1, (1, 96, 1, 1))   # 75,264 values: a parallel loop
    feeds = {v.name: RNG.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    want = autofusion.compile(g, level=0, backend="torch").run(feeds)
    for threads in (1, 2):
        got = autofusion.compile(g, level=0, backend="native", threads=threads).run(feeds)
        for name in want:
            assert np.abs(got[name] - want[name]).max() <= 1e-5 * max(1.0, np.abs(want[name]).max())


@bf16_dots
def test_a_bf16_scale_is_the_f32_product_rounded_to_bf16():
    """In bf16 the activation and the scale are bf16 and the product is rounded once: every value
    is within bf16's rounding of the torch backend's fp32 product of the same bf16 operands."""
    def build(op, x, s):
        m = op.Mul(op.FusedConv(x, const(op, 40, 40, 1, 1), activation="Relu"), s)
        m.producer.inputs[0].shape = m.shape = (1, 40, 12, 12)
        m.producer.inputs[0].dtype = m.dtype = DType.FLOAT
        return [(op.MaxPool(m, kernel_shape=[1, 1]), (1, 40, 12, 12))]
    g = graph({"x": (1, 40, 12, 12), "s": (1, 40, 1, 1)}, build)
    bf16 = autofusion.compile(g, level=0, backend="native", precision="bf16")
    assert step_kernel(bf16, "Mul") == "runtime channel scale"
    feeds = {k: torch.randn(v.shape).to(torch.bfloat16).float().numpy() for k, v in
             {v.name: v for v in g.inputs}.items()}
    got = bf16.run(feeds)[g.outputs[0].name]
    conv = bf16.graph.nodes[0]
    w = torch.from_numpy(conv.inputs[1].const).to(torch.bfloat16).double()
    y = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(feeds["x"]).double(), w))
    want = (y.to(torch.bfloat16).double() * torch.from_numpy(feeds["s"]).double()).numpy()
    assert np.abs(got - want).max() <= 2 ** -8 * np.abs(want).max()


@pytest.mark.parametrize("scales", [(1, 24, 9, 1), (1, 1, 1, 1)], ids=["per row", "one value"])
def test_a_scale_not_one_per_channel_is_oneDNNs_binary(scales):
    model = check_native(scaled(24, 9, 1, scales))
    assert step_kernel(model, "Mul") != "runtime channel scale"


def test_a_plain_activation_is_oneDNNs_binary():
    """x·s on the graph's input (dense row-major, channels outermost): not channels-last."""
    g = graph({"x": (1, 24, 9, 9), "s": (1, 24, 1, 1)}, lambda op, x, s: [(op.Mul(x, s), (1, 24, 9, 9))])
    model = check_native(g)
    assert step_kernel(model, "Mul") != "runtime channel scale"
