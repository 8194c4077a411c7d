"""The compile's steps (pipeline.py): each runs once, in STEPS' order, for an ONNX file and for
torch.compile alike; CompiledModel only runs what they made."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import autofusion
from autofusion import pipeline
from autofusion.backend.native import unavailable
from autofusion.backend.precision import has_bf16
from autofusion.errors import UnsupportedOpError
from autofusion.ir import DType, Graph, GraphBuilder

STEP_FUNCTIONS = {"check": "check_supported", "fuse": "optimize", "guard": "run_guard", "lower": "lower",
                  "build": "build", "report": "write_report"}


@pytest.fixture
def steps(monkeypatch):
    """The steps' names as the pipeline calls them (each the real function, counted)."""
    called: list[str] = []
    for step, fn in STEP_FUNCTIONS.items():
        real = getattr(pipeline, fn)

        @functools.wraps(real)
        def counted(*args, _step=step, _real=real, **kwargs):
            called.append(_step)
            return _real(*args, **kwargs)
        monkeypatch.setattr(pipeline, fn, counted)
    return called


def small_graph() -> Graph:
    g = Graph("small", {"": 21})
    x = g.add_input("x", (2, 8), DType.FLOAT)
    op = GraphBuilder(g)
    w = op.constant(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    g.outputs = [op.Relu(op.MatMul(x, w))]
    return g


def test_each_step_runs_once_in_order(steps):
    model = autofusion.compile(small_graph())
    assert steps == [s for s in pipeline.STEPS if s != "guard"]   # fp32: nothing to guard
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(model(x), np.maximum(x @ model.graph.nodes[0].inputs[1].const, 0), rtol=1e-5)


@pytest.mark.skipif(not has_bf16() or unavailable() is not None,
                    reason="no bf16 on this CPU, or no native backend: nothing reduced to guard")
def test_a_reduced_precision_is_guarded_between_fusing_and_lowering(steps):
    model = autofusion.compile(small_graph(), precision="bf16", backend="native")
    # the guard lowers the graph (at the calibration's sizes) to see which nodes are reduced
    assert steps == ["check", "fuse", "guard", "lower", "lower", "build", "report"]
    assert model.guard is not None and "checked" in model.report.precision


def test_torch_compile_runs_the_same_steps(steps):
    module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    out = autofusion.compile(module, example_inputs=(x,))(x)
    assert steps == [s for s in pipeline.STEPS if s != "guard"]
    torch.testing.assert_close(out[0] if isinstance(out, (list, tuple)) else out, module(x))


def test_the_check_refuses_before_anything_is_fused(steps):
    g = Graph("unsupported", {"": 21})
    x = g.add_input("x", (2,), DType.FLOAT)
    (y,) = g.add_node("NoSuchOp", [x], domain="custom.example").outputs
    g.outputs = [GraphBuilder(g).Relu(y)]
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        autofusion.compile(g)
    assert steps == ["check"]


def test_the_compile_runs_on_a_thread_that_ends_with_it():
    """So that its OpenMP work leaves no pool behind on the caller's thread (on_passing_thread
    says why): the steps ran elsewhere, and what they raise reaches the caller."""
    import threading
    seen = []
    assert pipeline.on_passing_thread(lambda: seen.append(threading.get_ident()) or 7) == 7
    assert seen and seen[0] != threading.get_ident()
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        g = Graph("unsupported", {"": 21})
        x = g.add_input("x", (2,), DType.FLOAT)
        (y,) = g.add_node("NoSuchOp", [x], domain="custom.example").outputs
        g.outputs = [y]
        autofusion.compile(g)


@pytest.mark.parametrize("threads, streams, each", [(2, 1, 2), (4, 2, 2), (2, 2, 1), (2, 3, 1), (None, 1, None)])
def test_streams_split_the_threads(threads, streams, each):
    model = autofusion.compile(small_graph(), threads=threads, streams=streams)
    assert (model.streams, model.threads) == (streams, each)
    mode = "calls one at a time" if streams == 1 else f"up to {streams} calls at once"
    assert mode in model.execution and mode in model.report.backend


def test_streams_come_from_the_environment_and_bad_ones_are_refused(monkeypatch):
    monkeypatch.setenv("AUTOFUSION_STREAMS", "2")
    assert autofusion.compile(small_graph(), threads=2).streams == 2
    assert autofusion.compile(small_graph(), threads=2, streams=1).streams == 1   # the argument first
    monkeypatch.setenv("AUTOFUSION_STREAMS", "many")
    with pytest.raises(autofusion.AutofusionError, match="AUTOFUSION_STREAMS="):
        autofusion.compile(small_graph())
    monkeypatch.delenv("AUTOFUSION_STREAMS")
    for bad in (0, -1, True, 1.5):
        with pytest.raises(autofusion.AutofusionError, match="streams="):
            autofusion.compile(small_graph(), streams=bad)


def test_submit_gives_futures_of_what_calls_return():
    model = autofusion.compile(small_graph(), streams=2)
    xs = [np.random.default_rng(k).standard_normal((2, 8)).astype(np.float32) for k in range(8)]
    futures = [model.submit(x) for x in xs]
    for x, f in zip(xs, futures):
        np.testing.assert_array_equal(f.result(timeout=60), model(x))
    bad = model.submit(np.ones((3, 8), np.float32))   # the wrong shape: the call's error, from result()
    with pytest.raises(autofusion.AutofusionError, match="x"):
        bad.result(timeout=60)
    model.close()
    np.testing.assert_array_equal(model.submit(xs[0]).result(timeout=60), model(xs[0]))   # starts again
    model.close()
