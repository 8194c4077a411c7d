"""Loss rules: LogSoftmax (or Log∘Softmax) + NegativeLogLikelihoodLoss → SoftmaxCrossEntropyLoss."""
from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import autofusion

from .harness import fuse, matched

CLASSES = 5


def loss_model(log_of_softmax=False, weight=False, opset=17, axis=1, x_shape=(4, CLASSES, 3),
               extra_output=False, **nll_attrs) -> onnx.ModelProto:
    """scores x [N, C, d] and int64 targets t [N, d] → NLL(log-softmax(x)) (+ the log-probs)."""
    if log_of_softmax:
        nodes = [helper.make_node("Softmax", ["x"], ["p"], axis=axis, name="softmax"),
                 helper.make_node("Log", ["p"], ["lp"], name="log")]
    else:
        nodes = [helper.make_node("LogSoftmax", ["x"], ["lp"], axis=axis, name="log_softmax")]
    nodes.append(helper.make_node("NegativeLogLikelihoodLoss", ["lp", "t"] + (["w"] if weight else []),
                                  ["loss"], name="nll", **nll_attrs))
    outputs = ["loss"] + (["lp"] if extra_output else [])
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("t", TensorProto.INT64, [x_shape[0], *x_shape[2:]])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [onnx.numpy_helper.from_array(np.linspace(0.5, 1.5, CLASSES).astype(np.float32), "w")] if weight else [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def assert_same_losses(model: onnx.ModelProto, seeds=(0, 1, 2)) -> None:
    """Fused equals unfused on random scores and valid targets (some equal to ignore_index)."""
    unfused, fused = autofusion.compile(model, level=0), autofusion.compile(model, level=2)
    x, t = unfused.graph.inputs
    for seed in seeds:
        rng = np.random.default_rng(seed)
        feeds = {"x": rng.standard_normal(x.shape).astype(np.float32),
                 "t": rng.integers(0, CLASSES, t.shape).astype(np.int64)}
        want, got = unfused.run(feeds), fused.run(feeds)
        for name in want:   # log_softmax vs the chain, then the same reduction: fp32 rounding
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


CASES = {
    "log_softmax_mean": {},
    "log_of_softmax_weighted_sum_ignore": dict(log_of_softmax=True, weight=True, reduction="sum", ignore_index=2),
    "none_ignore": dict(reduction="none", ignore_index=1),
    "weighted_mean_2d": dict(weight=True, x_shape=(6, CLASSES), axis=-1),
}


@pytest.mark.parametrize("kwargs", CASES.values(), ids=CASES.keys())
def test_log_softmax_nll_becomes_cross_entropy(kwargs):
    graph, report = fuse(loss_model(**kwargs), level=1)
    assert matched(report, "SoftmaxCrossEntropyFusionOp") == 1
    assert [n.op for n in graph.nodes] == ["SoftmaxCrossEntropyLoss"]


@pytest.mark.parametrize("kwargs", CASES.values(), ids=CASES.keys())
def test_cross_entropy_equals_unfused_on_random_inputs(kwargs):
    assert_same_losses(loss_model(**kwargs))


def test_cross_entropy_golden_before_after():
    graph, _ = fuse(loss_model(log_of_softmax=True, weight=True, reduction="sum", ignore_index=2), level=1)
    assert str(graph) == (
        "graph test(x: float[4,5,3], t: int64[4,3]) -> (loss: float[])\n"
        "  const w: float[5]\n"
        "  loss: float[] = SoftmaxCrossEntropyLoss[ignore_index=2, reduction='sum'](x, t, w)")


class TorchNLL(torch.nn.Module):   # what F.cross_entropy is made of, written by hand
    def forward(self, x, t):
        return F.nll_loss(F.log_softmax(x, dim=1), t, ignore_index=3)


def test_exported_log_softmax_nll_becomes_cross_entropy():
    f = io.BytesIO()
    torch.onnx.export(TorchNLL(), (torch.randn(4, CLASSES, 3), torch.zeros(4, 3, dtype=torch.long)), f,
                      dynamo=False, opset_version=17, input_names=["x", "t"])
    model = onnx.load_from_string(f.getvalue())
    graph, _ = fuse(model, level=1)
    [ce] = graph.nodes
    assert (ce.op, ce.attrs) == ("SoftmaxCrossEntropyLoss", {"reduction": "mean", "ignore_index": 3})
    assert_same_losses(model)


def test_softmax_over_another_axis_is_a_near_miss():
    graph, report = fuse(loss_model(axis=-1), level=1)
    assert [n.op for n in graph.nodes] == ["LogSoftmax", "NegativeLogLikelihoodLoss"]
    [miss] = report.near_misses
    assert miss.reason == "LogSoftmax 'log_softmax': axis=2, the loss's class axis is 1"


def test_opset_12_softmax_of_a_3d_input_is_a_near_miss():
    _, report = fuse(loss_model(opset=12), level=1)
    [miss] = report.near_misses
    assert miss.reason == "LogSoftmax 'log_softmax': before opset 13 it normalizes over all axes from 1 on"


def test_log_probs_used_elsewhere_are_a_near_miss():
    graph, report = fuse(loss_model(extra_output=True), level=1)
    assert matched(report, "SoftmaxCrossEntropyFusionOp") == 0
    [miss] = report.near_misses
    assert miss.reason == "'lp' is also used by a graph output, so it must stay in memory"
