"""The runtime's own product of one row by a constant matrix (runtime/gemv.h): a linear layer at
batch 1. fp32 equals torch; bf16 equals the product of the bf16-rounded operands summed in
float64 (the kernel's only error is its f32 sums), for odd K (the last pair of rows padded),
N off the 16-lane width, a gate after it, and x read in bf16 from a product that wrote it so.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import autofusion
from autofusion.backend.native import unavailable
from autofusion.ir.activations import activation_attrs

from .test_impls import RNG, check_native, graph
from .cpu import bf16_dots

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

SHAPES = [(1, 1), (5, 3), (37, 21), (64, 16), (33, 100), (960, 1280), (1280, 1000)]


def bf16(a: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16).double().numpy()


def linear(k: int, n: int, act: str = "", bias: bool = True):
    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32) if bias else None
    g = graph({"x": (1, k)}, lambda op, x: [(op.FusedMatMul(
        x, op.constant(w, "w"), None if b is None else op.constant(b, "b"), **activation_attrs(act)), (1, n))])
    return g, w, b


@pytest.mark.parametrize("k, n", SHAPES)
@pytest.mark.parametrize("act, bias", [("", True), ("", False), ("SiLU", True)])
def test_one_row_in_fp32_equals_torch(k, n, act, bias):
    check_native(linear(k, n, act, bias)[0])


@bf16_dots
@pytest.mark.parametrize("k, n", SHAPES)
def test_one_row_in_bf16_is_the_product_of_the_rounded_operands(k, n):
    g, w, b = linear(k, n)
    x = RNG.standard_normal((1, k)).astype(np.float32)
    got = autofusion.compile(g, level=0, backend="native", precision="bf16").run({"x": x})
    want = bf16(x) @ bf16(w) + b
    (y,) = got.values()
    assert np.abs(y - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


@bf16_dots
def test_a_row_written_in_bf16_by_one_product_and_read_by_the_next():
    """y = (x·W1)·W2 in bf16: the middle row only the second product reads, so the first writes
    it in bf16 and the second reads those bits (x rounded, the middle rounded once)."""
    w1 = RNG.standard_normal((37, 50)).astype(np.float32)
    w2 = RNG.standard_normal((50, 19)).astype(np.float32)
    g = graph({"x": (1, 37)}, lambda op, x: [(op.FusedMatMul(
        op.FusedMatMul(x, op.constant(w1, "w1")), op.constant(w2, "w2")), (1, 19))])
    g.nodes[0].outputs[0].shape, g.nodes[0].outputs[0].dtype = (1, 50), g.outputs[0].dtype
    model = autofusion.compile(g, level=0, backend="native", precision="bf16")
    part = model.plan.partitions[0]
    assert part.values[g.nodes[0].outputs[0]].bf16
    x = RNG.standard_normal((1, 37)).astype(np.float32)
    (y,) = model.run({"x": x}).values()
    want = bf16(bf16(x) @ bf16(w1)) @ bf16(w2)
    assert np.abs(y - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_split_the_column_panels(threads):
    g, w, b = linear(1280, 1000)
    x = RNG.standard_normal((1, 1280)).astype(np.float32)
    (y,) = autofusion.compile(g, level=0, backend="native", threads=threads).run({"x": x}).values()
    want = x.astype(np.float64) @ w + b
    assert np.abs(y - want).max() <= 1e-5 * np.abs(want).max()


def test_a_nan_in_the_row_reaches_every_output():
    g, _, _ = linear(33, 40)
    x = RNG.standard_normal((1, 33)).astype(np.float32)
    x[0, 32] = np.nan
    for precision in ("fp32", "bf16"):
        (y,) = autofusion.compile(g, level=0, backend="native", precision=precision).run({"x": x}).values()
        assert np.isnan(y).all(), precision
