"""The program of a small model (its runtime calls, written as C++), against a reviewed snapshot
(snapshots/*.txt).

Regenerate after an intended change with AUTOFUSION_UPDATE_SNAPSHOTS=1 and read the diff."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from autofusion.backend.lower import lower
from autofusion.backend.native.emit import c_float, emit_model
from autofusion.ir import DType, Graph, GraphBuilder
from autofusion.ir.activations import activation_attrs

SNAPSHOTS = Path(__file__).parent / "snapshots"


def assert_snapshot(source: str, name: str) -> None:
    """source equals snapshots/NAME (rewritten first under AUTOFUSION_UPDATE_SNAPSHOTS)."""
    path = SNAPSHOTS / name
    if os.environ.get("AUTOFUSION_UPDATE_SNAPSHOTS"):
        path.write_text(source)
    assert source == path.read_text()


def small_cnn() -> Graph:
    """conv+relu → conv+residual+relu → global pool + linear head, with a reshape in between."""
    g = Graph("small_cnn", {"": 21})
    x = g.add_input("x", (1, 3, 8, 8), DType.FLOAT)
    op = GraphBuilder(g)
    w = lambda *s: op.constant(np.zeros(s, np.float32), "w")   # noqa: E731 - values do not matter
    a = op.FusedConv(x, w(8, 3, 3, 3), w(8), pads=[1, 1, 1, 1], **activation_attrs("Relu"))
    b = op.FusedConv(a, w(8, 8, 3, 3), w(8), a, pads=[1, 1, 1, 1], **activation_attrs("Relu"))
    head = op.PoolGemm(b, w(4, 8), w(4), transB=1)
    flat = op.Flatten(b, axis=1)
    for v, s in ((a, (1, 8, 8, 8)), (b, (1, 8, 8, 8)), (head, (1, 4)), (flat, (1, 512))):
        v.shape, v.dtype = s, DType.FLOAT
    g.outputs = [head, op.Sigmoid(flat)]
    return g


def test_generated_source_matches_the_snapshot():
    code = emit_model(lower(small_cnn(), "native"), "small_cnn")
    assert_snapshot(code.text() + "\n", "small_cnn.txt")
    (part,) = code.programs.values()
    assert [c.shape for c in part.constants] == [(8, 3, 3, 3), (8,), (8, 8, 3, 3), (8,), (4,), (8, 4)]
    assert not code.kernels   # nothing to compile


def residual_linear() -> Graph:
    """A linear layer with its bias and a residual input (MatMulResidualFusionOp's output)."""
    g = Graph("residual_linear", {"": 21})
    x, r = g.add_input("x", (1, 6, 16), DType.FLOAT), g.add_input("r", (1, 6, 8), DType.FLOAT)
    op = GraphBuilder(g)
    y = op.FusedMatMul(x, op.constant(np.zeros((16, 8), np.float32), "w"),
                       op.constant(np.zeros(8, np.float32), "b"), r)
    y.shape, y.dtype = (1, 6, 8), DType.FLOAT
    g.outputs = [y]
    return g


def test_a_residual_is_the_linear_calls_last_argument():
    code = emit_model(lower(residual_linear(), "native"), "residual_linear")
    assert_snapshot(code.text() + "\n", "residual_linear.txt")


def test_float_literals():
    assert [c_float(x) for x in (1.0, 1 / 6, float("inf"), -float("inf"))] == \
        ["1.0f", "0.1666666716337204f", "af::inf", "(-af::inf)"]


def test_a_weight_given_transposed_is_held_as_it_is_stored():
    """Gemm(transB=1)'s [N, K] weight: the program holds the model's own array, declared [K, N]
    with its axes in order (1, 0) — no transposed copy at compile (the runtime's reorder does it)."""
    g = Graph("gemm", {"": 21})
    x = g.add_input("x", (2, 16), DType.FLOAT)
    op = GraphBuilder(g)
    w = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    y = op.Gemm(x, op.constant(w, "w"), transB=1)
    y.shape, y.dtype = (2, 8), DType.FLOAT
    g.outputs = [y]
    (program,) = emit_model(lower(g, "native"), "gemm").programs.values()
    (held,) = program.constants
    assert np.shares_memory(held, g.constants["w"].const) and held.shape == (8, 16)
    assert "p.constant(2, 0, {16, 8}, {1, 0});   // w" in program.text()


def test_an_int8_block_declares_its_integers_and_calls_the_int8_steps():
    """A residual block quantized as ONNX Runtime writes it, after the quantized rules: u8 values
    declared typed, quantize → qconv → qbinary → dequantize."""
    from autofusion.backend import evaluate_node
    from autofusion.frontend import import_onnx
    from autofusion.fusion import optimize
    from tests.helpers import qdq_conv_block
    graph = import_onnx(qdq_conv_block(residual=True, channels=4, size=4))
    optimize(graph, 1, [], evaluate_node)
    code = emit_model(lower(graph, "native"), "qdq_block")
    assert_snapshot(code.text() + "\n", "int8_residual_block.txt")


def padded() -> Graph:
    """x [1, 2, 512] padded by reflection (an STFT's frame, Silero VAD), then by zeros."""
    g = Graph("padded", {"": 21})
    x = g.add_input("x", (1, 2, 512), DType.FLOAT)
    op = GraphBuilder(g)
    pads = lambda *p: op.constant(np.array(p, np.int64), "pads")   # noqa: E731
    r = op.Pad(x, pads(0, 0, 64, 0, 0, 0), mode="reflect")
    z = op.Pad(r, pads(0, 1, 0, 0, 1, 0))
    r.shape, z.shape, r.dtype, z.dtype = (1, 2, 576), (1, 4, 576), DType.FLOAT, DType.FLOAT
    g.outputs = [z]
    return g


def test_a_pad_by_reflection_is_the_runtimes_pad_from_input_call():
    code = emit_model(lower(padded(), "native"), "padded")
    assert_snapshot(code.text() + "\n", "padded.txt")
