"""Every native implementation: numerics against its torch implementation on fresh random
inputs, and the check refusing what it cannot run, with its reason.

Bound: max |native − torch| ≤ 1e-5 · max(1, max |torch|); oneDNN and PyTorch round fp32
reductions in different orders, and oneDNN's transcendental eltwise kernels are within a few
ulp.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import autofusion
from autofusion.backend.impl import implementations
from autofusion.backend.native import unavailable
from autofusion.ir import DType, Graph, GraphBuilder
from autofusion.ir.activations import activation_attrs
from .cpu import bf16_dots, own_loops

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(7)


def graph(inputs: dict[str, tuple], build) -> Graph:
    """A level-0 graph: float32 inputs of these shapes, `build(op, *inputs)` its outputs with
    their shapes [(value, shape), ...] (fused ops have no shape rule to give them)."""
    g = Graph("case", {"": 21})
    xs = [g.add_input(n, s, DType.FLOAT) for n, s in inputs.items()]
    outs = build(GraphBuilder(g), *xs)
    for v, shape in outs:
        v.shape, v.dtype = tuple(shape), DType.FLOAT
    g.outputs = [v for v, _ in outs]
    return g


def const(op, *shape, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32)
    return op.constant(np.abs(a) + 0.5 if positive else a, "w")


def check_native(g: Graph, feeds: dict[str, np.ndarray] | None = None, bound: float = 1e-5):
    """The graph runs fully native and equals the torch backend."""
    feeds = feeds or {v.name: RNG.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    native = autofusion.compile(g, level=0, backend="native")
    reasons = {d.node.name: d.refused for d in native.plan.decisions.values()
               if d.impl.target != "native"}
    assert not reasons, reasons
    torch_model = autofusion.compile(g, level=0, backend="torch")
    got, want = native.run(feeds), torch_model.run(feeds)
    for name in want:
        finite = np.isfinite(want[name])   # NaN and ±inf where torch has them, exactly
        np.testing.assert_array_equal(got[name][~finite], want[name][~finite], err_msg=name)
        scale = max(1.0, float(np.abs(want[name][finite]).max(initial=0.0)))
        err = float(np.abs(got[name][finite] - want[name][finite]).max(initial=0.0))
        assert err <= bound * scale, f"{name}: {err} > {bound} * {scale}"
    return native


def refusal(g: Graph, node_name: str | None = None, impl_name: str = "onednn") -> str:
    """The native check's reason for the graph's (first) node (of `impl_name`, where the op has
    more than one)."""
    node = g.nodes[0] if node_name is None else next(n for n in g.nodes if n.name == node_name)
    impls = implementations(node.op, "native")
    (impl,) = impls if len(impls) == 1 else [i for i in impls if i.name == impl_name]
    why = impl.check(node)
    assert why is not None
    return why


# ---- convolution -----------------------------------------------------------------------------

CONVS = {   # name: (input shape, weight shape, attrs, output shape)
    "3x3": ((1, 8, 12, 12), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]), (1, 16, 12, 12)),
    "strided": ((1, 8, 13, 13), (16, 8, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), (1, 16, 7, 7)),
    "dilated": ((1, 8, 12, 12), (8, 8, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), (1, 8, 12, 12)),
    "grouped": ((1, 8, 10, 10), (16, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), (1, 16, 10, 10)),
    "depthwise": ((1, 16, 10, 10), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1]), (1, 16, 10, 10)),
    "asymmetric": ((1, 4, 9, 9), (8, 4, 3, 3), dict(pads=[0, 1, 2, 1], strides=[2, 2]), (1, 8, 5, 5)),
    "1x1": ((2, 24, 7, 7), (40, 24, 1, 1), {}, (2, 40, 7, 7)),
    "1-D": ((1, 6, 20), (8, 6, 5), dict(pads=[2, 2]), (1, 8, 20)),
    "3-D": ((1, 4, 6, 6, 6), (8, 4, 3, 3, 3), dict(pads=[1] * 6), (1, 8, 6, 6, 6)),
}


@pytest.mark.parametrize("case", CONVS)
def test_conv(case):
    xs, ws, attrs, ys = CONVS[case]
    check_native(graph({"x": xs}, lambda op, x: [
        (op.Conv(x, const(op, *ws), const(op, ws[0]), **attrs), ys)]))


ACTS = {"Relu": {}, "LeakyRelu": {"alpha": 0.1}, "Clip": {"min": 0.0, "max": 6.0},
        "ClipAbove": {"max": 0.5}, "Sigmoid": {}, "Tanh": {}, "HardSigmoid": {"alpha": 0.25},
        "HardSwish": {}, "Elu": {"alpha": 0.7}, "SiLU": {}, "Gelu": {}, "GeluTanh": {}}


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True])
def test_fused_conv_epilogues(act, residual):
    attrs = activation_attrs("Clip" if act == "ClipAbove" else act, **ACTS[act])
    check_native(graph({"x": (1, 8, 10, 10), "z": (1, 16, 10, 10)}, lambda op, x, z: [
        (op.FusedConv(x, const(op, 16, 8, 3, 3), const(op, 16), z if residual else None,
                      pads=[1, 1, 1, 1], **attrs), (1, 16, 10, 10))]))


def bottleneck(op, x, read_later: bool):
    """A ResNet bottleneck's end: a = relu(conv 1x1), b = relu(conv 3x3 of a), y = relu(conv 1x1
    of b + a), then y's mean; with read_later, a's mean too, after y (a's bytes outlive y's
    step). The same weights on every call."""
    rng, relu = np.random.default_rng(3), activation_attrs("Relu")
    w = lambda *shape: op.constant(rng.standard_normal(shape).astype(np.float32), "w")
    a = op.FusedConv(x, w(16, 8, 1, 1), w(16), **relu)
    a.shape, a.dtype = (1, 16, 10, 10), DType.FLOAT
    b = op.FusedConv(a, w(16, 16, 3, 3), w(16), pads=[1, 1, 1, 1], **relu)
    b.shape, b.dtype = (1, 16, 10, 10), DType.FLOAT
    y = op.FusedConv(b, w(16, 16, 1, 1), w(16), a, **relu)
    y.shape, y.dtype = (1, 16, 10, 10), DType.FLOAT
    means = [op.GlobalAveragePool(y)] + ([op.GlobalAveragePool(a)] if read_later else [])
    return [(m, (1, 16, 1, 1)) for m in means]


@pytest.mark.parametrize("read_later", [False, True])
def test_a_convolution_writes_over_the_residual_it_reads_last(read_later):
    """The sum post-op over the residual's bytes where the convolution is their last reader, the
    binary add into a buffer of its own where they are read later: the same result, in fp32 and
    (bit for bit, oneDNN adding the same values in the same order) in bf16."""
    g = graph({"x": (1, 8, 10, 10)}, lambda op, x: bottleneck(op, x, read_later))
    model = check_native(g)
    over = [v.name for v, vp in model.plan.partitions[0].values.items() if vp.in_place_of is not None]
    assert over == ([] if read_later else [g.outputs[0].producer.inputs[0].name])
    if not read_later:
        apart = graph({"x": (1, 8, 10, 10)}, lambda op, x: bottleneck(op, x, True))
        feeds = {"x": RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)}
        got = autofusion.compile(g, level=0, backend="native", precision="bf16").run(feeds)
        want = autofusion.compile(apart, level=0, backend="native", precision="bf16").run(feeds)
        np.testing.assert_array_equal(got[g.outputs[0].name], want[apart.outputs[0].name])


def plain_residual(op, x, z, written: bool):
    """FusedConv(x) + residual, then a 1x1 FusedConv: the residual the model's input z (NCHW),
    or z + z, which a step writes in z's layout and the convolution reads last."""
    r = op.Add(z, z) if written else z
    r.shape, r.dtype = (1, 32, 6, 6), DType.FLOAT
    y = op.FusedConv(x, const(op, 32, 16, 3, 3), const(op, 32), r, pads=[1, 1, 1, 1],
                     **activation_attrs("Relu"))
    y.shape, y.dtype = (1, 32, 6, 6), DType.FLOAT
    return [(op.FusedConv(y, const(op, 16, 32, 1, 1), const(op, 16)), (1, 16, 6, 6))]


@pytest.mark.parametrize("written", [False, True])
def test_a_residual_in_another_layout_is_reordered_not_added_by_the_reference_kernel(written):
    """oneDNN adds a residual by its fast kernels only in the layout they write; one in NCHW
    made it pick its reference convolution, hundreds of times slower."""
    g = graph({"x": (1, 16, 6, 6), "z": (1, 32, 6, 6)}, lambda op, x, z: plain_residual(op, x, z, written))
    model = check_native(g)
    kernels = [model.plan.kernels[n] for n in model.graph.nodes if n.op_type == "FusedConv"]
    assert all(k and "ref" not in k for k in kernels), kernels


def silu_chain(op, x):
    """FusedConv(SiLU) 8 -> 12 channels (a blocked layout pads them to 16) -> FusedConv(SiLU)."""
    y = op.FusedConv(x, const(op, 12, 8, 3, 3), const(op, 12), pads=[1, 1, 1, 1], **activation_attrs("SiLU"))
    y.shape, y.dtype = (1, 12, 9, 9), DType.FLOAT
    return [(op.FusedConv(y, const(op, 16, 12, 1, 1), const(op, 16), **activation_attrs("SiLU")), (1, 16, 9, 9))]


def test_silu_after_a_convolution_in_bf16():
    """The runtime's own SiLU over a bf16 result in oneDNN's blocked layout, padding included,
    and over the f32 output: within bf16's rounding of the fp32 result."""
    g = graph({"x": (1, 8, 9, 9)}, silu_chain)
    feeds = {"x": RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)}
    fp32 = autofusion.compile(g, level=0, backend="torch").run(feeds)[g.outputs[0].name]
    bf16 = autofusion.compile(g, level=0, backend="native", precision="bf16")
    assert all(d.impl.target == "native" for d in bf16.plan.decisions.values())
    got = bf16.run(feeds)[g.outputs[0].name]
    assert np.abs(got - fp32).max() <= 2e-2 * np.abs(fp32).max()


@bf16_dots
def test_a_gate_over_a_bf16_convolution_rounds_once():
    """Conv + SiLU in bf16 whose result stays internal (a max pool reads it: bf16 values out as
    they are): the SiLU runs on the f32 result, which is rounded to bf16 after it, once."""
    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.5
    b = RNG.standard_normal(16).astype(np.float32)

    def build(op, x):
        y = op.FusedConv(x, op.constant(w, "w"), op.constant(b, "b"), pads=[1, 1, 1, 1],
                         **activation_attrs("SiLU"))
        y.shape, y.dtype = (1, 16, 12, 12), DType.FLOAT
        return [(op.MaxPool(y, kernel_shape=[2, 2], strides=[2, 2]), (1, 16, 6, 6))]
    g = graph({"x": (1, 8, 12, 12)}, build)
    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    got = autofusion.compile(g, level=0, backend="native", precision="bf16").run({"x": x})[g.outputs[0].name]
    bf16 = lambda t: t.to(torch.bfloat16).to(torch.float32)   # noqa: E731
    conv = torch.nn.functional.conv2d(bf16(torch.from_numpy(x)).double(), bf16(torch.from_numpy(w)).double(),
                                      torch.from_numpy(b).double(), padding=1)
    once = torch.nn.functional.max_pool2d(bf16(torch.nn.functional.silu(conv).float()), 2).numpy()
    # rounding before the SiLU as well gives about 70% of these
    assert (got == once).mean() >= 0.98


@bf16_dots
@pytest.mark.parametrize("act", ["SiLU", "GeluTanh"])
def test_a_gate_rounded_to_bf16_is_within_its_rounding_everywhere(act):
    """The gate over a bf16 convolution computes its sigmoid to bf16's precision only
    (vector.h sigmoid16_for_bf16): over magnitudes from 1e-30 to 1e30, both signs, past e^±88,
    each result is the float64 one rounded to bf16, or its neighbour (or 0 below 1e-35)."""
    mags = np.geomspace(1e-30, 1e30, 16 * 12 * 12 * 8 // 2)
    x = torch.from_numpy(np.concatenate([mags, -mags])).to(torch.bfloat16).float()   # the conv reads bf16
    x[:8] = torch.tensor([0.0, -0.0, 88.0, -88.0, 88.5, -88.5, 104.0, -104.0])
    x = x.reshape(8, 16, 12, 12).numpy()

    def build(op, v):
        y = op.FusedConv(v, op.constant(np.eye(16, dtype=np.float32).reshape(16, 16, 1, 1), "w"),
                         **activation_attrs(act))
        y.shape, y.dtype = x.shape, DType.FLOAT
        return [(op.MaxPool(y, kernel_shape=[1, 1]), x.shape)]   # reads the gate's bf16 values
    g = graph({"x": x.shape}, build)
    got = autofusion.compile(g, level=0, backend="native", precision="bf16").run({"x": x})[g.outputs[0].name]
    d = torch.from_numpy(x).double()
    exact = d * torch.sigmoid(d if act == "SiLU" else 2 * np.sqrt(2 / np.pi) * (d + 0.044715 * d ** 3))
    want = exact.float().to(torch.bfloat16)
    bits = want.view(torch.int16)
    up, down = (bits + 1).view(torch.bfloat16), (bits - 1).view(torch.bfloat16)   # its neighbours
    g16 = torch.from_numpy(got).to(torch.bfloat16)
    # below e^-88 both sigmoids give 0: SiLU(-89) is -0, not -2e-37
    ok = (g16 == want) | (g16 == up) | (g16 == down) | ((want.float().abs() < 1e-35) & (g16.float().abs() < 1e-35))
    assert bool(ok.all()), f"{int((~ok).sum())} values off, e.g. x={x.reshape(-1)[~ok.reshape(-1).numpy()][:3]}"
    assert float((g16 == want).float().mean()) >= 0.97


def gated_pointwise(op, x, size: int, act: str, bias: bool, kernel: int = 1):
    """FusedConv(act) 16 -> 64 channels over size x size: at 256 and up its f32 result reaches
    16 MB, where the runtime convolves and gates it in tiles of pixels (~2000 here)."""
    y = op.FusedConv(x, const(op, 64, 16, kernel, kernel), const(op, 64) if bias else None,
                     pads=[kernel // 2] * 4, **activation_attrs(act))
    y.shape, y.dtype = (1, 64, size, size), DType.FLOAT
    return y


def step_kernel(model, op_type: str = "FusedConv") -> str:
    return next(k for n, k in model.plan.kernels.items() if n.op_type == op_type)


@own_loops
@pytest.mark.parametrize("act", ["SiLU", "GeluTanh"])
@pytest.mark.parametrize("bias", [True, False])
def test_a_large_gated_pointwise_convolution_runs_in_tiles(act, bias):
    """260 x 260 pixels (34 tiles, the last one shorter), the gated result read on by a max pool:
    equal to the torch backend, and its step says it ran in tiles."""
    g = graph({"x": (1, 16, 260, 260)}, lambda op, x: [
        (op.MaxPool(gated_pointwise(op, x, 260, act, bias), kernel_shape=[2, 2], strides=[2, 2]), (1, 64, 130, 130))])
    model = check_native(g, bound=1e-4)
    assert re.search(r"in tiles of \d+ pixels \+ runtime (silu|tanh-gelu)$", step_kernel(model))


@bf16_dots
def test_tiles_in_bf16_equal_the_whole_gate_rounded_once():
    """In bf16 the tiles' gate writes the bf16 result from the f32 one, as the whole step does:
    each value is the torch backend's, rounded to bf16 (or its neighbour)."""
    g = graph({"x": (1, 16, 256, 256)}, lambda op, x: [
        (op.MaxPool(gated_pointwise(op, x, 256, "SiLU", True), kernel_shape=[1, 1]), (1, 64, 256, 256))])
    x = torch.randn(1, 16, 256, 256).to(torch.bfloat16).float().numpy()
    bf16 = autofusion.compile(g, level=0, backend="native", precision="bf16")
    assert "in tiles of" in step_kernel(bf16)
    got = torch.from_numpy(bf16.run({"x": x})[g.outputs[0].name])
    w, b = (torch.from_numpy(v.const) for v in g.nodes[0].inputs[1:3])
    want = torch.nn.functional.silu(torch.nn.functional.conv2d(torch.from_numpy(x).double(),
                                                               w.to(torch.bfloat16).double(), b.double()))
    assert float((got - want).abs().max()) <= 2 ** -7 * float(want.abs().max())


@own_loops
@pytest.mark.parametrize("size, kernel", [(64, 1), (260, 3)])
def test_small_or_not_pointwise_gated_convolutions_run_whole(size, kernel):
    g = graph({"x": (1, 16, size, size)}, lambda op, x: [
        (op.MaxPool(gated_pointwise(op, x, size, "SiLU", True, kernel), kernel_shape=[1, 1]), (1, 64, size, size))])
    model = autofusion.compile(g, level=0, backend="native")
    assert step_kernel(model).endswith(" + runtime silu") and "tiles" not in step_kernel(model)


@own_loops
def test_a_large_gated_convolution_with_a_computed_weight_runs_whole():
    """A weight computed at run time (a gate folded into it) is reordered on each call, which the
    tiles do not do: the step runs whole, and right."""
    def build(op, x, w):
        y = op.FusedConv(x, op.Mul(w, const(op, 64, 1, 1, 1)), const(op, 64), **activation_attrs("SiLU"))
        y.producer.inputs[1].shape, y.producer.inputs[1].dtype = (64, 16, 1, 1), DType.FLOAT
        y.shape, y.dtype = (1, 64, 256, 256), DType.FLOAT
        return [(op.MaxPool(y, kernel_shape=[2, 2], strides=[2, 2]), (1, 64, 128, 128))]
    model = check_native(graph({"x": (1, 16, 256, 256), "w": (64, 16, 1, 1)}, build), bound=1e-4)
    assert "tiles" not in step_kernel(model) and step_kernel(model).endswith(" + runtime silu")


def test_a_chain_of_convolutions_keeps_oneDNN_layouts_between_them():
    def build(op, x):
        y = x
        for i in range(3):
            y = op.FusedConv(y, const(op, 16, 16, 3, 3), const(op, 16), pads=[1, 1, 1, 1],
                             **activation_attrs("Relu"))
            y.shape, y.dtype = (1, 16, 8, 8), DType.FLOAT
        return [(y, (1, 16, 8, 8))]
    model = check_native(graph({"x": (1, 16, 8, 8)}, build))
    part = model.plan.partitions[0]
    assert [vp.layout for vp in part.values.values()] == ["any", "any"]


def test_conv_with_a_weight_computed_at_run_time():
    check_native(graph({"x": (1, 4, 6, 6), "w": (8, 4, 3, 3)}, lambda op, x, w: [
        (op.Conv(x, w, const(op, 8), pads=[1, 1, 1, 1]), (1, 8, 6, 6))]))


def test_fused_conv_with_a_gated_weight_in_bf16():
    """W·g computed in a step of its own, reordered into the bf16 convolution's layout each call;
    the gate comes out of a bf16 convolution, so the product converts it first."""
    def build(op, x, s):
        gate = op.FusedConv(s, const(op, 8, 4, 1, 1), const(op, 8), **activation_attrs("Sigmoid"))
        gate.shape, gate.dtype = (1, 8, 1, 1), DType.FLOAT
        w = op.Mul(const(op, 16, 8, 3, 3), gate)
        w.shape, w.dtype = (16, 8, 3, 3), DType.FLOAT
        return [(op.FusedConv(x, w, const(op, 16), pads=[1, 1, 1, 1]), (1, 16, 10, 10))]
    g = graph({"x": (1, 8, 10, 10), "s": (1, 4, 1, 1)}, build)
    feeds = {"x": RNG.standard_normal((1, 8, 10, 10)).astype(np.float32),
             "s": RNG.standard_normal((1, 4, 1, 1)).astype(np.float32)}
    fp32 = autofusion.compile(g, level=0, backend="torch").run(feeds)[g.outputs[0].name]
    bf16 = autofusion.compile(g, level=0, backend="native", precision="bf16")
    assert all(d.impl.target == "native" for d in bf16.plan.decisions.values())
    got = bf16.run(feeds)[g.outputs[0].name]
    assert np.abs(got - fp32).max() <= 2e-2 * np.abs(fp32).max()   # bf16 operands
    np.testing.assert_array_equal(got, bf16.run(feeds)[g.outputs[0].name])   # W intact


def test_conv_refuses_a_computed_weight_of_a_grouped_convolution():
    g = graph({"x": (1, 4, 6, 6), "w": (4, 2, 3, 3)},
              lambda op, x, w: [(op.Conv(x, w, group=2), (1, 4, 4, 4))])
    assert "computed weight of a grouped convolution" in refusal(g)


def test_conv_takes_a_symbolic_batch_and_refuses_an_unknown_one():
    g = graph({"x": ("n", 4, 6, 6)}, lambda op, x: [(op.Conv(x, const(op, 4, 4, 3, 3)), ("n", 4, 4, 4))])
    g.outputs[0].shape = ("n", 4, 4, 4)
    (impl,) = implementations("Conv", "native")
    assert impl.check(g.nodes[0]) is None
    g.outputs[0].shape = (None, 4, 4, 4)
    assert "every dim known" in refusal(g)


# ---- pooling ---------------------------------------------------------------------------------

POOLS = {
    "max 3x3 s2": ("MaxPool", (1, 8, 11, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4), (1, 8, 6, 6)),
    "max ceil": ("MaxPool", (1, 4, 10, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), (1, 4, 5, 5)),
    "max dilated": ("MaxPool", (1, 4, 10, 10), dict(kernel_shape=[2, 2], dilations=[2, 2]), (1, 4, 8, 8)),
    "avg exclude pad": ("AveragePool", (1, 4, 9, 9), dict(kernel_shape=[3, 3], pads=[1] * 4), (1, 4, 9, 9)),
    "avg include pad": ("AveragePool", (1, 4, 9, 9), dict(kernel_shape=[3, 3], pads=[1] * 4,
                                                           count_include_pad=1), (1, 4, 9, 9)),
    "avg ceil": ("AveragePool", (1, 4, 10, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), (1, 4, 5, 5)),
    "global avg": ("GlobalAveragePool", (2, 8, 7, 7), {}, (2, 8, 1, 1)),
    "global max": ("GlobalMaxPool", (1, 8, 5, 5), {}, (1, 8, 1, 1)),
}


@pytest.mark.parametrize("case", POOLS)
def test_pool(case):
    op_type, xs, attrs, ys = POOLS[case]
    check_native(graph({"x": xs}, lambda op, x: [(getattr(op, op_type)(x, **attrs), ys)]))


def test_average_pool_refuses_to_count_ceil_mode_padding():
    g = graph({"x": (1, 4, 10, 10)}, lambda op, x: [(op.AveragePool(
        x, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1), (1, 4, 5, 5))])
    assert "ceil_mode" in refusal(g)


def axes(op, *a):
    return op.constant(np.array(a, np.int64), "axes")


@pytest.mark.parametrize("xs, spatial", [((1, 8, 6, 7), (-2, -1)), ((2, 4, 9), (2,)), ((1, 4, 3, 4, 5), (2, 3, 4))])
def test_reduce_mean_over_the_image_is_a_global_average_pool(xs, spatial):
    ys = (*xs[:2], *[1] * (len(xs) - 2))
    check_native(graph({"x": xs}, lambda op, x: [(op.ReduceMean(x, axes(op, *spatial)), ys)]))


@pytest.mark.parametrize("spatial, keepdims, ys", [((1, 2, 3), 1, (1, 1, 1, 1)), ((2, 3), 0, (1, 8))])
def test_reduce_mean_refuses_other_axes_and_dropped_dims(spatial, keepdims, ys):
    g = graph({"x": (1, 8, 6, 7)}, lambda op, x: [
        (op.ReduceMean(x, axes(op, *spatial), keepdims=keepdims), ys)])
    assert "only the mean over every spatial axis" in refusal(g)


# ---- elementwise -----------------------------------------------------------------------------

UNARY = {"Relu": {}, "LeakyRelu": {"alpha": 0.2}, "Sigmoid": {}, "Tanh": {}, "Exp": {}, "Abs": {},
         "Neg": {}, "Elu": {"alpha": 0.5}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
         "HardSwish": {}, "Mish": {}}


@pytest.mark.parametrize("op_type", UNARY)
def test_unary(op_type):
    check_native(graph({"x": (2, 3, 17)}, lambda op, x: [(getattr(op, op_type)(x, **UNARY[op_type]), (2, 3, 17))]))


@pytest.mark.parametrize("op_type", ["Log", "Sqrt"])
def test_unary_of_positive_inputs(op_type):
    g = graph({"x": (4, 33)}, lambda op, x: [(getattr(op, op_type)(x), (4, 33))])
    check_native(g, {"x": RNG.uniform(0.1, 5, (4, 33)).astype(np.float32)})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    check_native(graph({"x": (3, 40)}, lambda op, x: [(op.Gelu(x, _domain="", approximate=approximate), (3, 40)),
                                                      (op.Gelu(x, approximate=approximate), (3, 40))]))


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (None, 0.5), (-0.5, None)])
def test_clip(bounds):
    def build(op, x):
        lo, hi = (None if b is None else op.constant(np.array(b, np.float32), "b") for b in bounds)
        return [(op.Clip(x, lo, hi), (5, 9))]
    check_native(graph({"x": (5, 9)}, build))


def test_clip_refuses_bounds_computed_at_run_time():
    g = graph({"x": (5, 9), "lo": (1,)}, lambda op, x, lo: [(op.Clip(x, op.Squeeze(lo)), (5, 9))])
    assert "computed at run time" in refusal(g, g.nodes[1].name)


GATE_EDGES = [np.nan, np.inf, -np.inf, 100.0, -100.0, 87.0, -87.0, -87.5, 1e-30, -0.0]


@pytest.mark.parametrize("act", ["SiLU", "GeluTanh"])
@pytest.mark.parametrize("in_place", [False, True])
def test_runtime_gate_alone(act, in_place):
    """SiLU and tanh-GELU by the runtime (gated.h) over 33,333 values (split across threads, a
    5-value tail), over a copy of the input or in place over an Abs's result; non-finite and
    far-out values as torch has them."""
    shape = (3, 1, 11111)
    def build(op, x):
        if not in_place:
            return [(op.Activation(x, **activation_attrs(act)), shape)]
        y = op.Abs(x)
        y.shape, y.dtype = shape, DType.FLOAT
        z = op.Activation(y, **activation_attrs(act))
        z.shape, z.dtype = shape, DType.FLOAT
        return [(op.Neg(z), shape)]
    x = RNG.standard_normal(shape).astype(np.float32) * 8
    x.reshape(-1)[[0, 17, 9000, -3, -2, -1, 500, 1000, 2000, 3000]] = GATE_EDGES
    model = check_native(graph({"x": shape}, build), {"x": x})
    in_place_values = [v.name for v, vp in model.plan.partitions[0].values.items() if vp.in_place_of is not None]
    assert in_place_values == (["Activation_out0"] if in_place else [])


def test_an_activation_chain_runs_in_place():
    def build(op, x):
        y = op.Relu(op.Conv(x, const(op, 8, 8, 1, 1)))
        y.producer.inputs[0].shape, y.producer.inputs[0].dtype = (1, 8, 6, 6), DType.FLOAT
        return [(op.Sigmoid(op.Exp(op.Tanh(y))), (1, 8, 6, 6))]
    model = check_native(graph({"x": (1, 8, 6, 6)}, build))
    in_place = [v.name for v, vp in model.plan.partitions[0].values.items() if vp.in_place_of is not None]
    assert in_place == ["Relu_out0", "Tanh_out0", "Exp_out0"]   # Sigmoid writes the output


BINARY_SHAPES = {"same": ((2, 8, 5, 5), (2, 8, 5, 5)), "per channel": ((2, 8, 5, 5), (1, 8, 1, 1)),
                 "lower rank": ((2, 8, 5, 5), (5,)), "scalar": ((3, 7), ())}


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("shapes", BINARY_SHAPES)
def test_binary_with_a_constant(op_type, shapes):
    a, b = BINARY_SHAPES[shapes]
    check_native(graph({"x": a}, lambda op, x: [(getattr(op, op_type)(x, const(op, *b, positive=True)), a)]))


@pytest.mark.parametrize("op_type", ["Add", "Mul", "Sub", "Div"])
def test_binary_of_two_inputs(op_type):
    check_native(graph({"x": (1, 16, 4, 4), "y": (1, 16, 1, 1)}, lambda op, x, y: [
        (getattr(op, op_type)(x, y), (1, 16, 4, 4))]))


def test_binary_takes_the_broadcast_operand_second_when_it_may():
    check_native(graph({"x": (1, 16, 1, 1), "y": (1, 16, 4, 4)}, lambda op, x, y: [(op.Mul(x, y), (1, 16, 4, 4))]))


@pytest.mark.parametrize("op_type", ["Add", "Mul", "Sub"])
def test_binary_of_an_operand_of_lower_rank_computed_at_run_time(op_type):
    """A second operand of fewer dims (ones in front, as ONNX broadcasts) that a step computes: a
    YOLO head's strides [1, N] times its boxes [b, 4, N]; one written in a blocked layout by a
    1-D convolution, and a plain input."""
    def build(op, x, z, w):
        y = op.Conv(z, const(op, 16, 8, 3), pads=[1, 1])   # [1, 16, 12]
        y.shape, y.dtype = (1, 16, 12), DType.FLOAT
        v = getattr(op, op_type)(op.Relu(x), y)
        v.shape, v.dtype = (2, 3, 16, 12), DType.FLOAT
        return [(getattr(op, op_type)(v, w), (2, 3, 16, 12))]
    model = check_native(graph({"x": (2, 3, 16, 12), "z": (1, 8, 12), "w": (16, 12)}, build))
    assert not [k for k in model.plan.kernels.values() if "ref" in k], model.plan.kernels


def test_binary_refuses_a_broadcast_first_operand_of_sub():
    g = graph({"x": (1, 16, 1, 1), "y": (1, 16, 4, 4)}, lambda op, x, y: [(op.Sub(x, y), (1, 16, 4, 4))])
    assert "first operand broadcasts" in refusal(g)


def test_binary_refuses_int64():
    g = Graph("case", {"": 21})
    x, y = g.add_input("x", (3,), DType.INT64), g.add_input("y", (3,), DType.INT64)
    g.outputs = [GraphBuilder(g).Add(x, y)]
    assert "int64" in refusal(g)


def test_batch_norm():
    check_native(graph({"x": (2, 6, 5, 5)}, lambda op, x: [(op.BatchNormalization(
        x, const(op, 6), const(op, 6), const(op, 6), const(op, 6, positive=True), epsilon=1e-3),
        (2, 6, 5, 5))]))


# ---- reshapes, concat, transpose, softmax ----------------------------------------------------

def test_views_of_a_convolution_read_it_dense():
    def build(op, x):
        c = op.Conv(x, const(op, 16, 4, 1, 1))
        c.shape, c.dtype = (1, 16, 3, 3), DType.FLOAT
        flat = op.Flatten(c, axis=1)
        r = op.Reshape(c, op.constant(np.array([1, 4, 36], np.int64), "s"))
        return [(op.Relu(flat), (1, 144)), (op.Unsqueeze(op.Squeeze(r, op.constant(
            np.array([0], np.int64), "a")), op.constant(np.array([1], np.int64), "a")), (4, 1, 36))]
    model = check_native(graph({"x": (1, 4, 3, 3)}, build))
    conv_out = model.plan.partitions[0].nodes[0].outputs[0]
    assert model.plan.partitions[0].values[conv_out].layout == "plain"


def test_transpose_and_concat():
    check_native(graph({"x": (2, 3, 4), "y": (2, 5, 4)}, lambda op, x, y: [
        (op.Transpose(x, perm=[2, 0, 1]), (4, 2, 3)), (op.Concat(x, y, x, axis=1), (2, 11, 4))]))


def test_concat_of_convolutions():
    def build(op, x):
        a, b = op.Conv(x, const(op, 16, 8, 1, 1)), op.Conv(x, const(op, 8, 8, 3, 3), pads=[1] * 4)
        a.shape, b.shape, a.dtype, b.dtype = (1, 16, 6, 6), (1, 8, 6, 6), DType.FLOAT, DType.FLOAT
        return [(op.Concat(a, b, axis=1), (1, 24, 6, 6))]
    check_native(graph({"x": (1, 8, 6, 6)}, build))


@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax(op_type, axis):
    check_native(graph({"x": (2, 5, 7)}, lambda op, x: [(getattr(op, op_type)(x, axis=axis), (2, 5, 7))]))


@own_loops
@pytest.mark.parametrize("cols", [1, 7, 16, 197, 4099])
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_runtime_softmax_over_rows(op_type, cols):
    """The runtime's own row loop (softmax.h): rows shorter than a vector, with a tail, one long
    row, enough values to split across threads; rows holding NaN, ±inf, -inf alone, all -inf
    or values far below the row's largest, as torch has them."""
    rows = max(3, (1 << 15) // cols + 1)
    x = RNG.standard_normal((rows, cols)).astype(np.float32) * 10
    edges = [[np.nan], [np.inf], [-np.inf], [-np.inf] * cols, [-200.0], [-87.5], [3e38]]
    for r, edge in enumerate(edges):
        x[r, :len(edge)] = edge[:cols]
    check_native(graph({"x": (rows, cols)}, lambda op, x: [(getattr(op, op_type)(x, axis=-1), (rows, cols))]),
                 {"x": x})


@pytest.mark.parametrize("shape, axis", [((2, 5, 7), 1), ((1, 16, 4, 1100), 1), ((3, 4, 2), 0)])
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_runtime_softmax_along_an_inner_axis(op_type, shape, axis):
    """The runtime's column loop (softmax.h; oneDNN's is its reference kernel there): columns
    split across blocks and threads (a detector's [1, 16, 4, anchors] over its 16 bins), columns
    holding NaN, +inf, -inf alone or only -inf, as torch has them; any CPU."""
    x = RNG.standard_normal(shape).astype(np.float32) * 10
    columns = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])   # a copy: edited, then put back
    for c, edge in enumerate([[np.nan], [np.inf], [-np.inf], [-np.inf] * shape[axis], [-200.0]]):
        columns[c, :len(edge)] = edge
    rest = tuple(d for i, d in enumerate(shape) if i != axis)
    x = np.ascontiguousarray(np.moveaxis(columns.reshape(*rest, shape[axis]), -1, axis))
    model = check_native(graph({"x": shape}, lambda op, x: [(getattr(op, op_type)(x, axis=axis), shape)]),
                         {"x": x})
    assert "runtime softmax columns" in str(model.plan)


def test_softmax_after_a_bf16_product_is_within_bf16_rounding():
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((6, 40)).astype(np.float32), rng.standard_normal((40, 50)).astype(np.float32)
    def build(op, x):
        y = op.MatMul(x, op.constant(w, "w"))
        y.shape, y.dtype = (6, 50), DType.FLOAT
        return [(op.Softmax(y, axis=-1), (6, 50))]
    g = graph({"x": (6, 40)}, build)
    got = autofusion.compile(g, level=2, backend="native", precision="bf16").run({"x": a})
    want = autofusion.compile(g, level=0, backend="torch").run({"x": a})
    (name,) = want
    assert np.abs(got[name] - want[name]).max() <= 2e-2 * np.abs(want[name]).max()


def test_softmax_before_opset_13_refuses_an_inner_axis():
    g = graph({"x": (2, 5, 7)}, lambda op, x: [(op.Softmax(x, axis=1), (2, 5, 7))])
    g.opset[""] = 11
    assert "opset 13" in refusal(g)


# ---- matrix products -------------------------------------------------------------------------

def test_matmul_linear_and_batched():
    check_native(graph({"x": (2, 5, 16), "y": (2, 16, 3)}, lambda op, x, y: [
        (op.MatMul(x, const(op, 16, 24)), (2, 5, 24)), (op.MatMul(x, y), (2, 5, 3))]))


def test_matmul_broadcasts_batch_dims():
    check_native(graph({"x": (3, 4, 5, 8), "y": (1, 4, 8, 6)}, lambda op, x, y: [(op.MatMul(x, y), (3, 4, 5, 6))]))


def test_matmul_of_a_constant_by_a_lower_rank_run_time_operand_is_refused():
    # Swin V2's relative-position MLP at level 0: a constant [1, 15, 15, 2] table times a
    # [2, 8] weight transposed at run time (the crash the architecture sweep found)
    g = graph({"w": (8, 2)}, lambda op, w: [(op.MatMul(const(op, 1, 5, 5, 2), op.Transpose(w, perm=[1, 0])),
                                             (1, 5, 5, 8))])
    assert refusal(g, g.nodes[-1].name) == \
        "the operands' ranks differ and the lower-rank one is computed at run time"
    model = autofusion.compile(g, level=0, backend="native")
    feeds = {"w": RNG.standard_normal((8, 2)).astype(np.float32)}
    (name,) = [v.name for v in g.outputs]
    want = autofusion.compile(g, level=0, backend="torch").run(feeds)[name]
    np.testing.assert_allclose(model.run(feeds)[name], want, rtol=1e-5, atol=1e-5)


GEMMS = {"plain": ({}, (7,)), "transB alpha beta": (dict(transB=1, alpha=0.5, beta=2.0), (7,)),
         "transA": (dict(transA=1), (1, 7)), "full C": ({}, (3, 7)), "column C": (dict(beta=0.3), (3, 1))}


@pytest.mark.parametrize("case", GEMMS)
def test_gemm(case):
    attrs, c_shape = GEMMS[case]
    a_shape = (5, 3) if attrs.get("transA") else (3, 5)
    b_shape = (7, 5) if attrs.get("transB") else (5, 7)
    check_native(graph({"a": a_shape}, lambda op, a: [(op.Gemm(a, const(op, *b_shape), const(op, *c_shape),
                                                               **attrs), (3, 7))]))


@pytest.mark.parametrize("act", ["", "Relu", "Gelu", "GeluTanh", "SiLU"])
def test_fused_matmul_linear(act):
    check_native(graph({"x": (1, 6, 32)}, lambda op, x: [(op.FusedMatMul(
        x, const(op, 48, 32), const(op, 48), trans_b=1, alpha=0.7, beta=1.5, **activation_attrs(act)),
        (1, 6, 48))]))


@pytest.mark.parametrize("act", ["Relu", "SiLU"])
def test_fused_matmul_of_two_inputs_with_a_bias_input(act):
    check_native(graph({"a": (2, 4, 8), "b": (2, 6, 8), "c": (2, 4, 6)}, lambda op, a, b, c: [(op.FusedMatMul(
        a, b, c, trans_b=1, alpha=0.25, **activation_attrs(act)), (2, 4, 6))]))


@pytest.mark.parametrize("rows", [1, 6], ids=["one row", "rows"])
@pytest.mark.parametrize("act", ["", "Relu", "SiLU", "GeluTanh"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
def test_fused_matmul_linear_with_a_residual(rows, act, bias):
    """The residual as the linear layer's binary post-op, before oneDNN's activation or the
    runtime's own (SiLU, tanh-GELU); one row too, which without the residual would run on the
    runtime's gemv."""
    check_native(graph({"x": (1, rows, 32), "r": (1, rows, 48)}, lambda op, x, r: [(op.FusedMatMul(
        x, const(op, 32, 48), const(op, 48) if bias else None, r, alpha=0.7, **activation_attrs(act)),
        (1, rows, 48))]))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
def test_fused_matmul_of_two_inputs_with_a_residual(bias):
    inputs = {"a": (2, 4, 8), "b": (2, 6, 8), "r": (2, 4, 6)} | ({"c": (1, 1, 6)} if bias else {})
    check_native(graph(inputs, lambda op, a, b, r, c=None: [(op.FusedMatMul(
        a, b, c, r, trans_b=1, alpha=0.25, **activation_attrs("Relu")), (2, 4, 6))]))


@bf16_dots
def test_a_linear_layer_with_a_residual_in_bf16():
    """The residual stays fp32 (not a product operand) and is added to the fp32 accumulator: the
    result is within bf16's rounding of the operands of the fp32 one, and the residual's own
    large values come through unrounded."""
    g = graph({"x": (1, 16, 64), "r": (1, 16, 32)}, lambda op, x, r: [(op.FusedMatMul(
        x, const(op, 64, 32), const(op, 32), r), (1, 16, 32))])
    feeds = {"x": RNG.standard_normal((1, 16, 64)).astype(np.float32),
             "r": (RNG.standard_normal((1, 16, 32)) * 1000 + 1e4).astype(np.float32)}
    fp32 = autofusion.compile(g, level=0, backend="torch").run(feeds)[g.outputs[0].name]
    bf16 = autofusion.compile(g, level=0, backend="native", precision="bf16")
    assert all(d.impl.target == "native" and d.precision == "bf16" for d in bf16.plan.decisions.values())
    got = bf16.run(feeds)[g.outputs[0].name]
    assert np.abs(got - fp32).max() <= 0.5   # the product is ~8 in size; 1e4 in bf16 would be off by 32


def test_a_residual_that_broadcasts_is_refused():
    g = graph({"x": (1, 6, 32), "r": (1, 1, 48)}, lambda op, x, r: [(op.FusedMatMul(
        x, const(op, 32, 48), None, r), (1, 6, 48))])
    assert refusal(g) == "the residual is not of the product's shape"


def test_pool_gemm():
    check_native(graph({"x": (2, 16, 5, 5)}, lambda op, x: [(op.PoolGemm(
        x, const(op, 10, 16), const(op, 10), transB=1, alpha=0.5), (2, 10))]))


# ---- normalization and attention -------------------------------------------------------------

@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(residual, affine):
    check_native(graph({"x": (2, 7, 32), "r": (2, 7, 32)}, lambda op, x, r: [(op.LayerNorm(
        x, const(op, 32) if affine else None, const(op, 32) if affine else None, r if residual else None,
        axis=-1, epsilon=1e-5), (2, 7, 32))]))


@pytest.mark.parametrize("cols", [1, 7, 16, 80, 197, 768])
@pytest.mark.parametrize("residual", [False, True])
def test_runtime_layer_norm_over_rows(cols, residual):
    """The runtime's own row loop (layernorm.h): rows shorter than a vector, with a tail, a
    multiple of 16 but not of 64 (the four sums), BERT's 768; enough rows to split across
    threads; a row offset by 1e4 (float32 holds its values to ~1e-3, hence the bound; the
    variance as E[t²] - mean² would be off by more than the variance itself); a row holding
    NaN or an infinity is NaN throughout, as in torch."""
    rows = max(3, (1 << 15) // cols + 1)
    x = RNG.standard_normal((rows, cols)).astype(np.float32) * 3
    x[0] += 1e4
    x[1, 0], x[2, -1] = np.nan, np.inf
    check_native(graph({"x": (rows, cols), "r": (rows, cols)}, lambda op, x, r: [(op.LayerNorm(
        x, const(op, cols), const(op, cols), r if residual else None, axis=-1, epsilon=1e-5),
        (rows, cols))]), {"x": x, "r": RNG.standard_normal((rows, cols)).astype(np.float32)}, bound=1e-3)


def test_layer_norm_over_two_axes():
    check_native(graph({"x": (3, 4, 5)}, lambda op, x: [(op.LayerNorm(x, const(op, 4, 5), axis=1), (3, 4, 5))]))


def test_norm_matmul():
    check_native(graph({"x": (1, 5, 24), "r": (1, 5, 24)}, lambda op, x, r: [(op.NormMatMul(
        x, const(op, 24, 40), const(op, 40), r, norm="LayerNorm", epsilon=1e-5,
        **activation_attrs("Gelu")), (1, 5, 40))]))


@pytest.mark.parametrize("residual", [False, True])
def test_rms_norm_matmul_normalizes_in_a_generated_kernel(residual):
    inputs = {"x": (1, 5, 24)} | ({"r": (1, 5, 24)} if residual else {})
    m = check_native(graph(inputs, lambda op, x, r=None: [(op.NormMatMul(
        x, const(op, 24, 40), const(op, 40), r, norm="RMSNorm", epsilon=1e-6,
        **activation_attrs("Gelu")), (1, 5, 40))]))
    assert "RMS normalization of 5 row(s) of 24" in m.native_source


ATTENTION = {"no mask": (None, 4), "constant causal mask": ("causal", 4), "mask input": ("input", 4),
             "multi-query": (None, 1)}


@pytest.mark.parametrize("case", ATTENTION)
def test_attention(case):
    mask, kv_heads = ATTENTION[case]
    inputs = {"q": (1, 4, 6, 8), "k": (1, kv_heads, 6, 8), "v": (1, kv_heads, 6, 8)}
    if mask == "input":
        inputs["m"] = (1, 1, 1, 6)

    def build(op, q, k, v, m=None):
        if mask == "causal":
            m = op.constant(np.triu(np.full((6, 6), -np.inf, np.float32), 1), "mask")
        return [(op.Attention(q, k, v, m, scale=1 / math.sqrt(8)), (1, 4, 6, 8))]
    check_native(graph(inputs, build))


@pytest.mark.parametrize("mask", [(3, 16, 16), (1, 3, 16, 16), (16, 16), (8, 1, 16, 16)])
def test_a_mask_shared_by_the_batch_is_added_by_fast_kernels(mask):
    """Swin's relative-position bias ([1,3,49,49] over 64 windows) and a causal mask at batch 8:
    oneDNN's fast products add a mask only where it spans every batch axis of more than one;
    others were added by its reference kernel (Swin-T: 180 ms of 230 a run)."""
    def build(op, q, k, v):
        m = op.constant(RNG.standard_normal(mask).astype(np.float32), "mask")
        return [(op.Attention(q, k, v, m, scale=0.3), (8, 3, 16, 8))]
    model = check_native(graph({"q": (8, 3, 16, 8), "k": (8, 3, 16, 8), "v": (8, 3, 16, 8)}, build))
    (kernels,) = model.plan.kernels.values()
    assert "ref" not in kernels and "reorder" not in kernels, kernels


def test_attention_refuses_a_run_time_mask_that_must_zero_dead_rows():
    g = graph({"q": (1, 2, 4, 8), "k": (1, 2, 4, 8), "v": (1, 2, 4, 8), "m": (1, 1, 4, 4)},
              lambda op, q, k, v, m: [(op.Attention(q, k, v, m, scale=0.3, nan_to_zero=1), (1, 2, 4, 8))])
    assert "rules out" in refusal(g)


# ---- blocks of a tensor: Gather by one index, Slice, Split ------------------------------------

def test_gather_by_one_index():
    index = lambda op, i: op.graph.add_constant(op.graph.fresh_name("i"), np.array(i, np.int64))  # noqa: E731
    check_native(graph({"x": (3, 2, 4, 5)}, lambda op, x: [
        (op.Gather(x, index(op, 1), axis=0), (2, 4, 5)), (op.Gather(x, index(op, -1), axis=2), (3, 2, 5)),
        (op.Gather(x, op.constant(np.array([2], np.int64), "i"), axis=3), (3, 2, 4, 1))]))


def test_gather_by_many_indices_is_refused():
    g = graph({"x": (3, 4)}, lambda op, x: [(op.Gather(x, op.constant(np.array([2, 0], np.int64), "i")), (2, 4))])
    assert "not a single block" in refusal(g)


def test_slice():
    ints = lambda *v: np.array(v, np.int64)   # noqa: E731
    check_native(graph({"x": (2, 6, 8)}, lambda op, x: [
        (op.Slice(x, op.constant(ints(1, -6), "s"), op.constant(ints(5, 2**63 - 1), "e"),
                  op.constant(ints(1, 2), "a")), (2, 4, 6))]))


def test_slice_of_opset_1_by_attributes():
    g = graph({"x": (2, 6, 8)}, lambda op, x: [(op.Slice(x, starts=[1, -6], ends=[5, 100], axes=[1, 2]),
                                                 (2, 4, 6))])
    g.opset[""] = 9
    check_native(g)


def test_split_into_every_output():
    def build(op, x):
        a, b, c = op.Split(x, op.constant(np.array([2, 3, 1], np.int64), "s"), axis=1, _outputs=3)
        for v, n in ((a, 2), (b, 3), (c, 1)):
            v.shape, v.dtype = (2, n, 4), DType.FLOAT
        return [(op.Relu(a), (2, 2, 4)), (b, (2, 3, 4)), (op.Tanh(c), (2, 1, 4))]
    check_native(graph({"x": (2, 6, 4)}, build))


def test_onnx_layer_normalization():
    check_native(graph({"x": (2, 5, 16)}, lambda op, x: [(op.LayerNormalization(
        x, const(op, 16), const(op, 16), axis=-1, epsilon=1e-5), (2, 5, 16))]))


def test_a_residual_of_the_same_size_where_sizes_are_nonempty_is_not_a_broadcast():
    """wav2vec2's positional convolution: one side sliced to `max(0, t - 1)` frames, the other
    `t - 1`; equal wherever the partition runs (every dim at least 1), so the LayerNorm that adds
    them stays native (it was refused: "the residual broadcasts")."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    ints = {"zero": [0], "minus1": [-1], "two": [2]}
    inits = [numpy_helper.from_array((rng.standard_normal((8, 1, k)) * 0.05).astype(np.float32), f"w{k}")
             for k in (320, 640)] + [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in ints.items()] + \
            [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), n) for n in ("g", "b")]
    nodes = [helper.make_node("Conv", ["x", "w320"], ["c1"], strides=[320]),
             helper.make_node("Slice", ["c1", "zero", "minus1", "two"], ["s1"]),   # max(0, s // 320 - 1)
             helper.make_node("Conv", ["x", "w640"], ["c2"], strides=[320]),           # s // 320 - 1
             helper.make_node("Transpose", ["s1"], ["t1"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["c2"], ["t2"], perm=[0, 2, 1]),
             helper.make_node("Add", ["t1", "t2"], ["a"]),
             helper.make_node("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1)]
    m = helper.make_model(helper.make_graph(nodes, "positional", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "s"])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    model = autofusion.compile(m, backend="native")
    assert [p.target for p in model.plan.partitions] == ["native"]
    assert any(n.op_type == "LayerNorm" and n.input(3) is not None for n in model.graph.nodes)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for samples in (3200, 6500):
        x = rng.standard_normal((1, 1, samples)).astype(np.float32)
        np.testing.assert_allclose(model(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def fpn_sum_model():
    """An FPN's sum: a stride-2 map, (h + 1) // 2, and a stride-4 one upsampled, 2 * ((h + 3) // 4):
    one size for every input the model takes; a 1 against a 2 (h of 1 or 2) is a broadcast."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.2).astype(np.float32), n) for n in ("w2", "w4")] + \
            [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w4"], ["c4"], strides=[4, 4], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c4", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Add", ["c2", "up"], ["y"])]
    g = helper.make_graph(nodes, "fpn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_sum_whose_sides_agree_at_run_time_runs_natively_and_a_broadcast_on_pytorch():
    import onnxruntime as ort
    m = fpn_sum_model()
    model = autofusion.compile(m, backend="native")
    assert [p.target for p in model.plan.partitions] == ["native"]
    (part,) = model.program.native.values()
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for side, native in ((8, True), (16, True), (2, False)):   # 1 against 2 at a side of 2: a broadcast
        x = rng.standard_normal((1, 3, side, side)).astype(np.float32)
        np.testing.assert_allclose(model(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
        assert ((side, side) in part.built) == native
    with pytest.raises(autofusion.InputError, match="do not broadcast"):   # 3 against 4: no model takes it
        model(rng.standard_normal((1, 3, 6, 6)).astype(np.float32))


def test_a_step_oneDNN_cannot_create_is_an_error_naming_the_node():
    g = graph({"x": (1, 4, 6, 6)}, lambda op, x: [(op.Conv(x, const(op, 4, 4, 3, 3)), (1, 4, 5, 5))])
    with pytest.raises(autofusion.KernelBuildError, match=r"^node 'Conv' \(Conv\): could not create"):
        autofusion.compile(g, level=0, backend="native")   # a 3x3 conv of 6x6 is 4x4, not 5x5


def test_binary_after_a_convolution_reads_its_other_operand_right():
    """The conv's output is in oneDNN's layout (nhwc here); a per-channel operand is read in that
    axis order, a full-shape dense one as it is."""
    def build(op, x, full):
        c = op.Conv(x, const(op, 24, 8, 1, 1))
        c.shape, c.dtype = (1, 24, 5, 5), DType.FLOAT
        return [(op.Mul(c, const(op, 1, 24, 1, 1)), (1, 24, 5, 5)), (op.Add(c, full), (1, 24, 5, 5))]
    check_native(graph({"x": (1, 8, 5, 5), "full": (1, 24, 5, 5)}, build))


def _int64_graph(build):
    g = Graph("case", {"": 21})
    x = g.add_input("x", (2, 3), DType.INT64)
    g.outputs = [build(GraphBuilder(g), x)]
    return g


REFUSALS = {   # one graph per implementation the tests above do not refuse already: (graph, reason)
    "batch norm in training mode": (lambda: graph({"x": (1, 2, 3, 3)}, lambda op, x: [(op.BatchNormalization(
        x, const(op, 2), const(op, 2), const(op, 2), const(op, 2, positive=True), training_mode=1), (1, 2, 3, 3))]),
        "training mode"),
    "a view of int64": (lambda: _int64_graph(lambda op, x: op.Flatten(x)), "int64"),
    "Dropout with a training flag": (lambda: graph({"x": (2, 3), "t": (1,)}, lambda op, x, t: [(op.Dropout(
        x, None, op.Cast(t, to=9)), (2, 3))]), "training mode"),
    "concat of int64": (lambda: _int64_graph(lambda op, x: op.Concat(x, x, axis=0)), "int64"),
    "transpose of int64": (lambda: _int64_graph(lambda op, x: op.Transpose(x, perm=[1, 0])), "int64"),
    "a 1-D matmul operand": (lambda: graph({"x": (4,), "y": (4, 3)}, lambda op, x, y: [(op.MatMul(x, y), (3,))]),
                             "1-D operand"),
    "a bias varying along the batch": (lambda: graph({"x": (2, 4, 3, 3)}, lambda op, x: [(op.PoolGemm(
        x, const(op, 4, 5), const(op, 2, 5)), (2, 5))]), "varies along the batch"),
    "a broadcast residual of LayerNorm": (lambda: graph({"x": (2, 3, 8), "r": (1, 3, 8)}, lambda op, x, r: [(
        op.LayerNorm(x, None, None, r, axis=-1), (2, 3, 8))]), "residual broadcasts"),
    "a broadcast scale of LayerNormalization": (lambda: graph({"x": (2, 3, 8)}, lambda op, x: [(
        op.LayerNormalization(x, const(op, 1), axis=-1), (2, 3, 8))]), "broadcasts over the normalized axes"),
    "an unknown dim in an eltwise": (lambda: graph({"x": (None, 4)}, lambda op, x: [(op.Tanh(x), (None, 4))]),
                                     "every dim known"),
    "an unknown dim in a pool": (lambda: graph({"x": ("n", 4, None, 5)}, lambda op, x: [
        (op.GlobalMaxPool(x), ("n", 4, 1, 1))]), "every dim known"),
    "a softmax of int64": (lambda: _int64_graph(lambda op, x: op.Softmax(x)), "int64"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_checks_refuse_with_their_reason(case):
    build, reason = REFUSALS[case]
    g = build()
    node = next(n for n in g.nodes if implementations(n.op, "native") and n.op_type != "Cast")
    assert reason in refusal(g, node.name)


@pytest.mark.parametrize("shape, axis", [((2, 5, 24), -1), ((3, 4, 5), 1), ((64, 4096), -1)])
def test_rms_norm_is_a_generated_row_kernel(shape, axis):
    cols = math.prod(shape[axis % len(shape):])
    scale = RNG.standard_normal(shape[axis % len(shape):]).astype(np.float32)
    for with_scale in (True, False):
        m = check_native(graph({"x": shape}, lambda op, x: [(op.RMSNorm(
            x, *([op.constant(scale, "s")] if with_scale else []), axis=axis, epsilon=1e-6), shape)]))
        assert f"RMS normalization of {math.prod(shape) // cols} row(s) of {cols}" in m.native_source


def test_rms_norm_refuses_a_scale_that_broadcasts():
    g = graph({"x": (2, 5, 24)}, lambda op, x: [(op.RMSNorm(x, const(op, 1), epsilon=1e-6), (2, 5, 24))])
    assert "broadcasts" in refusal(g)


def test_the_generated_norm_matmul_leaves_layer_norm_to_the_runtime():
    g = graph({"x": (1, 5, 24)}, lambda op, x: [(op.NormMatMul(x, const(op, 24, 40), norm="LayerNorm",
                                                               epsilon=1e-5), (1, 5, 40))])
    generated = next(i for i in implementations(g.nodes[0].op, "native") if i.name == "generated")
    assert "LayerNorm" in generated.check(g.nodes[0])
