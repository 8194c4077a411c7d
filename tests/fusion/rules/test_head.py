"""The classifier-head rule: global average pool (or spatial mean) + flatten + Gemm → PoolGemm."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from torch import nn

from tests.models.architectures import ARCHITECTURES

from .harness import assert_same_outputs, fuse, matched, onnx_model, torch_model


class PoolFlattenLinear(nn.Module):   # torchvision's ResNet / MobileNet head
    def __init__(self, dims=2):
        super().__init__()
        pool = {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}[dims]
        self.head = nn.Sequential(pool(1), nn.Flatten(), nn.Linear(16, 5))

    def forward(self, x):
        return self.head(x)


class MeanLinear(nn.Module):   # ShuffleNet's head: x.mean([2, 3]), no flatten
    def __init__(self, keepdim=False):
        super().__init__()
        self.keepdim, self.fc = keepdim, nn.Linear(16, 5)

    def forward(self, x):
        pooled = x.mean((2, 3), keepdim=self.keepdim)
        return self.fc(pooled.flatten(1) if self.keepdim else pooled)


CASES = {
    "avgpool-flatten-linear": (PoolFlattenLinear(), (2, 16, 7, 7), 17),
    "avgpool1d": (PoolFlattenLinear(1), (2, 16, 9), 17),
    "avgpool3d": (PoolFlattenLinear(3), (2, 16, 3, 4, 5), 17),
    "mean": (MeanLinear(), (2, 16, 7, 7), 17),
    "mean-keepdim-flatten": (MeanLinear(keepdim=True), (2, 16, 7, 7), 17),
    "mean-axes-input": (MeanLinear(), (2, 16, 7, 7), 18),   # opset 18: ReduceMean's axes are an input
}


@pytest.mark.parametrize("case", CASES)
def test_head_becomes_one_pool_gemm(case):
    module, shape, opset = CASES[case]
    model = torch_model(module, shape, opset=opset)
    graph, report = fuse(model, level=1)
    assert matched(report, "PoolGemmFusionOp") == 1
    assert [n.op for n in graph.nodes] == ["autofusion::PoolGemm"]
    assert_same_outputs(model, level=1)


W = np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32)
HEAD = [helper.make_node("GlobalAveragePool", ["x"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten")]


def test_golden_before_after():
    nodes = [*HEAD, helper.make_node("Gemm", ["f", "W", "b"], ["y"], name="gemm", alpha=0.5, beta=2.0)]
    model = onnx_model(nodes, {"x": (2, 16, 3, 3)}, ["y"], {"W": W, "b": np.ones(5, np.float32)})
    graph, _ = fuse(model, level=1)
    assert str(graph) == ("graph test(x: float[2,16,3,3]) -> (y: float[2,5])\n"
                          "  const W: float[16,5]\n"
                          "  const b: float[5]\n"
                          "  y: float[2,5] = autofusion::PoolGemm[alpha=0.5, beta=2.0](x, W, b)")
    assert_same_outputs(model, level=1)


@pytest.mark.parametrize("bias", [None, (5,), (1, 5), (2, 5), ()],
                         ids=["none", "row", "row2d", "full", "scalar"])
def test_gemm_bias_shapes(bias):
    nodes = [*HEAD, helper.make_node("Gemm", ["f", "W"] + ([] if bias is None else ["b"]), ["y"], beta=0.5)]
    consts = {"W": W}
    if bias is not None:
        consts["b"] = np.arange(np.prod(bias), dtype=np.float32).reshape(bias)
    model = onnx_model(nodes, {"x": (2, 16, 3, 3)}, ["y"], consts)
    assert [n.op for n in fuse(model, level=1)[0].nodes] == ["autofusion::PoolGemm"]
    assert_same_outputs(model, level=1)


def test_computed_weight_runs_generically():
    nodes = [*HEAD, helper.make_node("Gemm", ["f", "w"], ["y"], name="gemm", transB=1, alpha=2.0)]
    model = onnx_model(nodes, {"x": (2, 16, 3, 3), "w": (5, 16)}, ["y"])
    assert [n.op for n in fuse(model, level=1)[0].nodes] == ["autofusion::PoolGemm"]
    assert_same_outputs(model, level=1)


def near_misses(report):
    return [m.reason for m in report.near_misses if m.rule == "PoolGemmFusionOp"]


def test_mean_over_channels_too_is_refused():
    nodes = [helper.make_node("ReduceMean", ["x"], ["p"], name="mean", axes=[1, 2, 3]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "W"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 16, 3, 3)}, ["y"], {"W": np.ones((1, 5), np.float32)}, opset=13)
    graph, report = fuse(model, level=1)
    assert matched(report, "PoolGemmFusionOp") == 0
    assert near_misses(report) == ["ReduceMean 'mean': axes=[1, 2, 3], rule needs the spatial axes [2, 3]"]


def test_transposed_features_are_refused():
    nodes = [*HEAD, helper.make_node("Gemm", ["f", "W"], ["y"], name="gemm", transA=1)]
    model = onnx_model(nodes, {"x": (16, 2, 3, 3)}, ["y"], {"W": np.ones((16, 5), np.float32)})
    _, report = fuse(model, level=1)
    assert near_misses(report) == ["Gemm 'gemm': transA=1, the pooled features must be its rows"]


def test_flatten_on_another_axis_is_refused():
    nodes = [HEAD[0], helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=2),
             helper.make_node("Gemm", ["f", "W"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 16, 3, 3)}, ["y"], {"W": np.ones((1, 5), np.float32)})
    _, report = fuse(model, level=1)
    assert near_misses(report) == ["Flatten 'flatten': axis=2, rule needs 1"]


def test_resnet_stack_head():
    model, _ = ARCHITECTURES["resnet_stack"]()
    graph, report = fuse(model, level=1)
    assert matched(report, "PoolGemmFusionOp") == 1 and graph.nodes[-1].op == "autofusion::PoolGemm"
    assert_same_outputs(model, level=1, rtol=1e-4)


def test_pool_output_used_elsewhere_is_a_near_miss():
    nodes = [*HEAD, helper.make_node("Gemm", ["f", "W"], ["y"]),
             helper.make_node("Neg", ["p"], ["q"], name="neg")]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 16, 3, 3)}, ["y", "q"], {"W": W}), level=1)
    assert near_misses(report) == ["'p' is also used by Neg 'neg', so it must stay in memory"]
