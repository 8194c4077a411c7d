"""A squeeze-excitation's mean summed by the gate before it (impls.py `in-gate`,
runtime/gated.h gated_summed_into): the mean over the image of a SiLU's (or tanh-GELU's) result
costs no pass of its own. It equals the torch backend for channel counts on and off the 16-lane
width, batches, both gates, GlobalAveragePool, ReduceMean and PoolGemm; threads agree; where the
gated value's layout is not channels-innermost (a plain output) the runtime pools as before; and
the plan takes it only after a gate the runtime computes.
"""
from __future__ import annotations

import numpy as np
import pytest

import autofusion
from autofusion.ir import DType
from autofusion.ir.activations import activation_attrs

from .test_impls import RNG, axes, check_native, const, graph, refusal
from .cpu import own_loops

pytestmark = pytest.mark.skipif(__import__("autofusion.backend.native", fromlist=["unavailable"]).unavailable()
                                is not None, reason="native backend unavailable")


def squeeze_excitation(channels: int, size: int, batch: int = 1, act: str = "SiLU", mean: str = "GlobalAveragePool",
                       gated_out: bool = False, depthwise: bool = True):
    """x → FusedConv(act) [the gated value] → mean over the image → a 1x1 conv; the gated value
    read on by another 1x1 conv (so it stays inside the partition unless gated_out)."""
    def build(op, x):
        if depthwise:
            y = op.FusedConv(x, const(op, channels, 1, 3, 3), const(op, channels), pads=[1, 1, 1, 1],
                             group=channels, **activation_attrs(act))
        else:
            y = op.FusedConv(x, const(op, channels, channels, 1, 1), const(op, channels), **activation_attrs(act))
        y.shape, y.dtype = (batch, channels, size, size), DType.FLOAT
        m = (op.GlobalAveragePool(y) if mean == "GlobalAveragePool" else
             op.ReduceMean(y, axes(op, 2, 3)))
        m.shape, m.dtype = (batch, channels, 1, 1), DType.FLOAT
        squeezed = (op.FusedConv(m, const(op, 8, channels, 1, 1), const(op, 8)), (batch, 8, 1, 1))
        onward = (y, y.shape) if gated_out else (op.FusedConv(y, const(op, 16, channels, 1, 1)), (batch, 16, size, size))
        return [squeezed, onward]
    return graph({"x": (batch, channels, size, size)}, build)


def mean_node(model):
    return next(n for n in model.graph.nodes if n.op_type in ("GlobalAveragePool", "ReduceMean"))


def mean_seconds(model) -> float:
    """What the mean's own step took in a short profile: 0 where the gate summed it."""
    feeds = {v.name: RNG.standard_normal(v.shape).astype(np.float32) for v in model.graph.inputs}
    return autofusion.profile(model, feeds, runs=2, block=1, warmup=1).by_node()[mean_node(model).name].seconds


@own_loops
@pytest.mark.parametrize("channels", [16, 24, 40, 144])
@pytest.mark.parametrize("batch", [1, 2])
def test_the_mean_summed_in_the_gate_equals_torch(channels, batch):
    model = check_native(squeeze_excitation(channels, 9, batch))
    assert model.plan.decisions[mean_node(model)].impl.name == "in-gate"
    assert mean_seconds(model) == 0.0


@pytest.mark.parametrize("act", ["SiLU", "GeluTanh"])
@pytest.mark.parametrize("mean", ["GlobalAveragePool", "ReduceMean"])
def test_either_gate_sums_either_mean(act, mean):
    model = check_native(squeeze_excitation(32, 7, act=act, mean=mean, depthwise=False))
    assert model.plan.decisions[mean_node(model)].impl.name == "in-gate"


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_split_the_rows_and_add_their_sums(threads):
    g = squeeze_excitation(48, 57)   # 155,952 values: a parallel loop
    feeds = {"x": RNG.standard_normal((1, 48, 57, 57)).astype(np.float32)}
    got = autofusion.compile(g, level=0, backend="native", threads=threads).run(feeds)
    want = autofusion.compile(g, level=0, backend="torch").run(feeds)
    for name in want:
        assert np.abs(got[name] - want[name]).max() <= 1e-5 * max(1.0, np.abs(want[name]).max()), name


def test_a_plain_gated_value_is_pooled_as_before():
    """The gated value is a graph output, so dense row-major (channels outermost): the runtime
    pools it with oneDNN, and the mean's step takes time of its own."""
    model = check_native(squeeze_excitation(24, 9, gated_out=True))
    assert model.plan.decisions[mean_node(model)].impl.name == "in-gate"
    assert mean_seconds(model) > 0.0


def test_the_mean_in_bf16_is_of_the_gated_values_before_rounding():
    g = squeeze_excitation(40, 11)
    feeds = {"x": RNG.standard_normal((1, 40, 11, 11)).astype(np.float32)}
    fp32 = autofusion.compile(g, level=0, backend="torch").run(feeds)
    bf16 = autofusion.compile(g, level=0, backend="native", precision="bf16")
    assert bf16.plan.decisions[mean_node(bf16)].impl.name == "in-gate"
    got = bf16.run(feeds)
    for name in fp32:
        assert np.abs(got[name] - fp32[name]).max() <= 2e-2 * np.abs(fp32[name]).max(), name


def test_pool_gemm_after_a_gate_sums_its_pool_there():
    w, b = RNG.standard_normal((10, 24)).astype(np.float32), RNG.standard_normal(10).astype(np.float32)

    def build(op, x):
        y = op.FusedConv(x, const(op, 24, 8, 1, 1), const(op, 24), **activation_attrs("SiLU"))
        y.shape, y.dtype = (2, 24, 6, 6), DType.FLOAT
        return [(op.PoolGemm(y, op.constant(w, "w"), op.constant(b, "b"), transB=1), (2, 10))]
    model = check_native(graph({"x": (2, 8, 6, 6)}, build))
    assert "p.mean_in_gate(" in model.native_source


@pytest.mark.parametrize("act", ["Relu", "HardSwish"])
def test_a_mean_after_an_activation_onednn_computes_is_pooled(act):
    """oneDNN computes these as post-ops, inside its kernel: no loop of the runtime's to sum in."""
    g = squeeze_excitation(16, 5, act=act)
    assert "not a SiLU or tanh-GELU" in refusal(g, mean_node_name(g), "in-gate")
    model = check_native(g)
    assert model.plan.decisions[mean_node(model)].impl.name == "onednn"


def test_a_mean_of_a_graph_input_is_pooled():
    g = graph({"x": (1, 16, 5, 5)}, lambda op, x: [(op.GlobalAveragePool(x), (1, 16, 1, 1))])
    assert "not a SiLU or tanh-GELU" in refusal(g, impl_name="in-gate")
    model = check_native(g)
    assert model.plan.decisions[g.nodes[0]].impl.name == "onednn"


def mean_node_name(g) -> str:
    return next(n.name for n in g.nodes if n.op_type in ("GlobalAveragePool", "ReduceMean"))
