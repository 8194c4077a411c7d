"""The cost model's estimates: fusion gains come from bytes and launches saved, and a fused
kernel that still writes a temporary out is not credited with saving it."""
from __future__ import annotations

import numpy as np
import pytest

from .rules.harness import fuse, node, onnx_model


def estimate(report, rule: str) -> float:
    return next(r.est_speedup for r in report.rules if r.name == rule)


def test_conv_bn_relu_is_estimated_to_save_two_round_trips():
    rng = np.random.default_rng(0)
    nodes = [node("Conv", ["x", "w"], ["c"]), node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             node("Relu", ["n"], ["y"])]
    consts = {"w": rng.standard_normal((16, 16, 3, 3)).astype(np.float32),
              **{k: np.ones(16, np.float32) for k in "sbmv"}}
    _, report = fuse(onnx_model(nodes, {"x": (1, 16, 32, 32)}, ["y"], consts))
    assert estimate(report, "ConvBNReluFusionOp") > 1.5


@pytest.mark.parametrize("rule, nodes", [
    ("AddLayerNormFusionOp", [node("Add", ["x", "r"], ["h"]), node("LayerNormalization", ["h", "g"], ["y"])]),
    ("LayerNormMatMulFusionOp", [node("LayerNormalization", ["x", "g"], ["n"]), node("MatMul", ["n", "w"], ["y"])])])
def test_kernels_that_write_a_temporary_are_not_credited_with_its_bytes(rule, nodes):
    """torch writes x + r before layer_norm, and the normalized rows before the GEMM."""
    consts = {"g": np.ones(768, np.float32), "w": np.ones((768, 8), np.float32)}
    _, report = fuse(onnx_model(nodes, {"x": (128, 768), "r": (128, 768)}, ["y"], consts))
    assert 0.9 < estimate(report, rule) < 1.1
