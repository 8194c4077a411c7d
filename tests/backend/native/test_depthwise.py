"""A bf16 depthwise convolution with a bf16 result on the runtime's own loop (runtime/depthwise.h),
in place of oneDNN 3.2's jit_dw: each tap size, stride, padding, activation and channel count it
takes equals PyTorch's convolution of the same bf16 input in float64, rounded to bf16; what it
does not take (fp32, an f32 result, a dilation, a kernel size it has no loop for, an activation
it does not compute, a residual) stays on oneDNN's kernels.

The result stays bf16 only where no plain-layout step reads it, so the cases read it out through
a 1x1 max pool, which passes bf16 values through as they are.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import autofusion
from autofusion.backend import native
from autofusion.backend.precision import has_bf16
from autofusion.ir import DType
from autofusion.ir.activations import ACTIVATIONS, activation_attrs

from .test_impls import RNG, graph

pytestmark = pytest.mark.skipif(native.unavailable() is not None or not has_bf16(),
                                reason="native backend unavailable, or no bf16 arithmetic on this CPU")


def depthwise(channels: int, size: tuple[int, int], k: int, stride: int, pads: list[int], act: str = "Relu",
              batch: int = 1, dilation: int = 1, bias: bool = True, residual: bool = False,
              read_out: bool = True, **params):
    """x → k×k depthwise FusedConv(act) → a 1x1 MaxPool (read_out) → output, with the
    convolution's weight and bias."""
    w = RNG.standard_normal((channels, 1, k, k)).astype(np.float32) * 0.5
    b = RNG.standard_normal(channels).astype(np.float32) if bias else None
    h, wd = size
    span = dilation * (k - 1) + 1
    out = (batch, channels, (h + pads[0] + pads[2] - span) // stride + 1, (wd + pads[1] + pads[3] - span) // stride + 1)

    def build(op, x, *z):
        ins = [x, op.constant(w, "w"), op.constant(b, "b") if bias else None, *z]
        y = op.FusedConv(*ins, group=channels, strides=[stride] * 2, pads=pads, dilations=[dilation] * 2,
                         **activation_attrs(act, **params))
        y.shape, y.dtype = out, DType.FLOAT
        return [(op.MaxPool(y, kernel_shape=[1, 1]) if read_out else y, out)]
    inputs = {"x": (batch, channels, h, wd), **({"z": out} if residual else {})}
    return graph(inputs, build), w, b


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, pads: list[int], act: str,
              **params) -> np.ndarray:
    """PyTorch's convolution of x rounded to bf16 (what the step reads) in float64, the weight
    and bias as they are (the loop keeps them f32), then the activation; not rounded."""
    xb = torch.from_numpy(x).to(torch.bfloat16).double()
    xb = torch.nn.functional.pad(xb, (pads[1], pads[3], pads[0], pads[2]))
    y = torch.nn.functional.conv2d(xb, torch.from_numpy(w).double(), None if b is None else torch.from_numpy(b).double(),
                                   stride=stride, groups=x.shape[1])
    entry = ACTIVATIONS[act]
    return entry.torch(torch.nn.functional, y, *[params.get(n, d) for n, d in entry.params.items()]).numpy()


def within_rounding(got: np.ndarray, want: np.ndarray) -> bool:
    """got is want rounded to bf16: within half a unit in bf16's last place (2^-8 of the value),
    and 1e-6 of the largest output for the loop's f32 sums against float64's."""
    return bool((np.abs(got - want) <= 2.0 ** -8 * np.abs(want) + 1e-6 * np.abs(want).max()).all())


def kernels_of(model) -> list[str]:
    """What runs the depthwise step: the input's reorder (the graph's NCHW f32 into channels-last
    bf16) and the convolution."""
    return next(k for n, k in model.plan.kernels.items() if n.op_type == "FusedConv").split(" + ")


def run_bf16(g, x):
    model = autofusion.compile(g, level=0, backend="native", precision="bf16")
    return model, model.run({"x": x, **{v.name: RNG.standard_normal(v.shape).astype(np.float32)
                                         for v in g.inputs[1:]}})[g.outputs[0].name]


CASES = [   # channels, (height, width), k, stride, pads (top, left, bottom, right)
    (16, (14, 14), 3, 1, [1, 1, 1, 1]),
    (72, (28, 28), 5, 2, [2, 2, 2, 2]),
    (40, (9, 23), 3, 2, [1, 1, 1, 1]),     # channels off the 16 lanes, a row longer than 2 blocks
    (24, (7, 7), 5, 1, [2, 2, 2, 2]),      # every block reaches an edge
    (32, (12, 10), 7, 1, [3, 3, 3, 3]),
    (8, (15, 15), 7, 2, [3, 3, 3, 3]),     # fewer channels than lanes
    (16, (11, 13), 3, 2, [0, 1, 1, 0]),    # asymmetric padding (TensorFlow's SAME)
    (16, (10, 10), 3, 1, [0, 0, 0, 0]),    # none
]


@pytest.mark.parametrize("channels, size, k, stride, pads", CASES)
def test_the_loop_equals_the_convolution_of_the_bf16_input(channels, size, k, stride, pads):
    g, w, b = depthwise(channels, size, k, stride, pads)
    x = RNG.standard_normal((1, channels, *size)).astype(np.float32)
    model, got = run_bf16(g, x)
    assert "runtime depthwise" in kernels_of(model)
    assert within_rounding(got, reference(x, w, b, stride, pads, "Relu"))


@pytest.mark.parametrize("act, params", [("", {}), ("Relu", {}), ("LeakyRelu", {"alpha": 0.1}),
                                         ("Clip", {"min": 0.0, "max": 6.0}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                                         ("HardSwish", {}), ("Sigmoid", {})])
def test_each_activation_after_the_loop(act, params):
    """The post-ops the loop computes."""
    g, w, b = depthwise(24, (9, 9), 3, 1, [1, 1, 1, 1], act, **params)
    x = RNG.standard_normal((1, 24, 9, 9)).astype(np.float32) * 3
    model, got = run_bf16(g, x)
    assert "runtime depthwise" in kernels_of(model)
    assert within_rounding(got, reference(x, w, b, 1, [1, 1, 1, 1], act, **params))


def test_batches():
    g, w, b = depthwise(20, (8, 8), 5, 2, [2, 2, 2, 2], batch=3)
    x = RNG.standard_normal((3, 20, 8, 8)).astype(np.float32)
    model, got = run_bf16(g, x)
    assert "runtime depthwise" in kernels_of(model)
    assert within_rounding(got, reference(x, w, b, 2, [2, 2, 2, 2], "Relu"))


def test_no_bias():
    """oneDNN 3.2 takes a bf16 depthwise convolution without a bias on brdgmm_dw here, which the
    loop leaves alone; the result is the convolution's either way."""
    g, w, _ = depthwise(20, (8, 8), 5, 1, [2, 2, 2, 2], bias=False)
    x = RNG.standard_normal((1, 20, 8, 8)).astype(np.float32)
    _, got = run_bf16(g, x)
    want = reference(x, w, None, 1, [2, 2, 2, 2], "Relu")
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


def test_in_a_bf16_chain_within_bf16_rounding_of_fp32():
    """1x1 → depthwise (HardSwish) → 1x1, as in MobileNetV3's blocks: the depthwise reads and
    writes bf16 between oneDNN's products, and the whole is within bf16's error of fp32."""
    def build(op, x):
        e = op.FusedConv(x, op.constant(RNG.standard_normal((48, 16, 1, 1)).astype(np.float32) * 0.3, "w"),
                         **activation_attrs("Relu"))
        e.shape, e.dtype = (1, 48, 14, 14), DType.FLOAT
        d = op.FusedConv(e, op.constant(RNG.standard_normal((48, 1, 3, 3)).astype(np.float32) * 0.3, "w"),
                         op.constant(RNG.standard_normal(48).astype(np.float32), "b"), group=48, pads=[1, 1, 1, 1], strides=[2, 2], **activation_attrs("HardSwish"))
        d.shape, d.dtype = (1, 48, 7, 7), DType.FLOAT
        return [(op.FusedConv(d, op.constant(RNG.standard_normal((16, 48, 1, 1)).astype(np.float32) * 0.3, "w")),
                 (1, 16, 7, 7))]
    g = graph({"x": (1, 16, 14, 14)}, build)
    x = RNG.standard_normal((1, 16, 14, 14)).astype(np.float32)
    fp32 = autofusion.compile(g, level=0, backend="torch").run({"x": x})[g.outputs[0].name]
    bf16 = autofusion.compile(g, level=0, backend="native", precision="bf16")
    dw = next(k for n, k in bf16.plan.kernels.items() if n.attrs.get("group", 1) > 1)
    assert dw == "runtime depthwise"   # bf16 in, bf16 out: no reorder on either side
    got = bf16.run({"x": x})[g.outputs[0].name]
    assert np.abs(got - fp32).max() <= 2e-2 * np.abs(fp32).max()


@pytest.mark.parametrize("why, case", [
    ("fp32", dict(precision="fp32")),
    ("a dilation", dict(dilation=2)),
    ("a kernel size with no loop", dict(k=4, pads=[1, 1, 2, 2])),
    ("an activation the loop does not compute", dict(act="Elu")),
    ("a residual", dict(residual=True)),
    ("an f32 result (a graph output): oneDNN's brdgmm_dw", dict(read_out=False)),
    ("a SiLU: the gate after it rounds an f32 result", dict(act="SiLU")),
])
def test_what_the_loop_does_not_take_stays_on_oneDNN(why, case):
    precision = case.pop("precision", "bf16")
    args = dict(channels=16, size=(10, 10), k=3, stride=1, pads=[1, 1, 1, 1]) | case
    g, *_ = depthwise(**args)
    model = autofusion.compile(g, level=0, backend="native", precision=precision)
    assert "runtime depthwise" not in kernels_of(model), why
    feeds = {v.name: RNG.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    want = autofusion.compile(g, level=0, backend="torch").run(feeds)[g.outputs[0].name]
    got = model.run(feeds)[g.outputs[0].name]
    assert np.abs(got - want).max() <= (1e-5 if precision == "fp32" else 2e-2) * np.abs(want).max()
