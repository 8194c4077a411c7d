"""A call on a machine where another process keeps a core busy runs on one thread fewer (load.py):
measured from /proc with a real process spinning, not a made-up reading."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import autofusion
from tests.backend.native.test_affinity import on_worker
from autofusion.backend.native import load, unavailable
from autofusion.ir import DType, Graph, GraphBuilder

CPUS = len(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def adapting(monkeypatch):
    monkeypatch.setenv(load.ADAPT_VAR, "1")   # the suite keeps it off elsewhere (tests/conftest.py)


@pytest.fixture
def spinner():
    """Another process keeping one core busy."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)
    yield p
    p.kill()
    p.wait()


def until(condition, seconds: float = 5.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.skipif(CPUS < 2, reason="one CPU: no thread to give up")
def test_a_core_another_process_keeps_busy_is_counted_and_a_thread_given_up(spinner, monkeypatch):
    monkeypatch.setattr(load, "_monitors", {})
    monitor = load.OtherLoad(frozenset(os.sched_getaffinity(0)))
    assert until(lambda: monitor.taken() >= 0.5)
    assert until(lambda: load.threads_for(CPUS) == CPUS - 1)
    assert load.threads_for(CPUS - 1) == CPUS - 1   # a team that leaves a core free keeps its count
    monkeypatch.setenv(load.ADAPT_VAR, "0")
    assert load.threads_for(CPUS) == CPUS


def products_model() -> autofusion.CompiledModel:
    g = Graph("products", {"": 17})
    x = g.add_input("x", (256, 256), DType.FLOAT)
    op = GraphBuilder(g)
    w = op.constant(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32) / 16, "w")
    y = x
    for _ in range(4):
        y = op.Relu(op.MatMul(y, w))
    g.outputs = [y]
    return autofusion.compile(g, backend="native", threads=CPUS)


@pytest.mark.skipif(unavailable() is not None, reason=f"no native code: {unavailable()}")
@pytest.mark.skipif(CPUS < 2, reason="one CPU: no thread to give up")
def test_a_model_on_a_busy_machine_runs_on_fewer_threads_and_gives_the_same_answers(spinner, monkeypatch):
    monkeypatch.setattr(load, "_monitors", {})
    model = products_model()
    x = torch.randn(256, 256)
    idle = model(x)
    call = lambda: on_worker(lambda: model(x))   # noqa: E731 - on the streams (a worker's calls)
    assert until(lambda: (call(), CPUS - 1 in model._streams)[1])   # a team of one fewer ran
    np.testing.assert_allclose(call().numpy(), idle.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(x).numpy(), idle.numpy(), rtol=1e-5, atol=1e-6)   # the main thread's
    assert torch.get_num_threads() == CPUS   # the process's count as it was
