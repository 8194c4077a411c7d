"""Pinning the OpenMP workers (affinity.py): which CPUs, when not, and that the runtime pins."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

import autofusion
from autofusion.backend.native import affinity, unavailable
from autofusion.ir import DType, Graph, GraphBuilder

TWO_CORES = {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1)}.get   # CPUs 2 and 3: 0 and 1's siblings


def test_the_first_cpu_of_each_core_comes_before_any_sibling():
    assert affinity.cpu_order({3, 2, 1, 0}, TWO_CORES) == [0, 1, 2, 3]
    siblings_adjacent = {0: "a", 1: "a", 2: "b", 3: "b"}.get
    assert affinity.cpu_order({0, 1, 2, 3}, siblings_adjacent) == [0, 2, 1, 3]


@pytest.mark.parametrize("threads, cpus", [(1, None), (2, [0, 1]), (3, [0, 1, 2]), (4, [0, 1, 2, 3]),
                                           (5, None)])
def test_a_team_is_pinned_only_where_it_covers_every_core_and_no_cpu_twice(threads, cpus):
    assert affinity.worker_cpus(threads, {0, 1, 2, 3}, TWO_CORES) == cpus
    assert affinity.worker_cpus(threads, range(8), lambda cpu: cpu) == (
        list(range(8)) if threads == 8 else None)


def model() -> autofusion.CompiledModel:
    g = Graph("relu", {"": 21})
    x = g.add_input("x", (64, 4096), DType.FLOAT)
    g.outputs = [GraphBuilder(g).Relu(x)]
    g.outputs[0].shape, g.outputs[0].dtype = (64, 4096), DType.FLOAT
    return autofusion.compile(g, level=2, backend="native", threads=2)


def on_worker(fn):
    """fn() on a thread other than the main one (where a latency-mode call runs on the model's
    stream: model._on_streams); what it returns."""
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def worker_affinities() -> list[set[int]]:
    """The CPU sets of this process's threads other than the caller's."""
    tids = [int(t) for t in os.listdir("/proc/self/task") if int(t) != os.getpid()]
    return [os.sched_getaffinity(t) for t in tids]


@pytest.mark.skipif(unavailable() is not None, reason=f"no native code: {unavailable()}")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) != 2, reason="for a process with 2 CPUs")
def test_a_models_call_pins_its_worker_and_a_user_binding_or_the_switch_prevents_it(monkeypatch):
    before = torch.get_num_threads()
    try:
        for env in ({"AUTOFUSION_PIN_THREADS": "0"}, {"OMP_PROC_BIND": "close"}, {}):
            monkeypatch.setattr(affinity, "_pinned", threading.local())
            for name in ("AUTOFUSION_PIN_THREADS", *affinity.USER_BINDING):
                monkeypatch.delenv(name, raising=False)
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            m = model()
            on_worker(lambda: m(torch.ones(64, 4096)))
            want = None if env else affinity.worker_cpus(2, os.sched_getaffinity(0))
            assert m._streams[2].cpus == want   # the stream's team, which ran the call
        [_, worker] = want
        assert {worker} in worker_affinities()   # the team's thread 1, pinned by the runtime
        started = []

        def call_elsewhere():
            torch.set_num_threads(2)   # whatever PyTorch makes for that, and the input, before counting
            x = torch.ones(64, 4096)
            before = len(os.listdir("/proc/self/task"))
            m(x)
            started.append(len(os.listdir("/proc/self/task")) - before)

        other = threading.Thread(target=call_elsewhere)
        other.start()
        other.join()
        assert started == [0]   # the stream ran it: no OpenMP pool of the caller's
        assert os.sched_getaffinity(0) == set(want)   # the caller's thread stays free
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(unavailable() is not None, reason=f"no native code: {unavailable()}")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) != 2, reason="for a process with 2 CPUs")
def test_a_thread_pins_its_own_team_though_a_finished_thread_had_its_ident(monkeypatch):
    """Python gives a finished thread's ident to a later one: a pool pinned for the first is not
    the later one's (libgomp makes each thread's pool anew), so the later one pins its own."""
    from autofusion.backend.native import build, runtime
    library = runtime(build.toolchain())
    monkeypatch.delenv("AUTOFUSION_PIN_THREADS", raising=False)
    for name in affinity.USER_BINDING:
        monkeypatch.delenv(name, raising=False)
    want = affinity.worker_cpus(2, os.sched_getaffinity(0))
    found = []

    def pin():
        me = threading.get_native_id()
        before = set(os.listdir("/proc/self/task"))
        cpus = affinity.pin_workers(library, 2)
        made = set(os.listdir("/proc/self/task")) - before   # this thread's pool, made by the pinning
        found.append((threading.get_ident(), cpus, [os.sched_getaffinity(int(t)) for t in made if int(t) != me]))

    for _ in range(32):   # threads one after another until an ident comes back
        t = threading.Thread(target=pin)
        t.start()
        t.join()
        if len({ident for ident, _, _ in found}) < len(found):
            break
    else:
        pytest.skip("no thread ident came back in 32 threads")
    assert all(cpus == want and made == [{want[1]}] for _, cpus, made in found), found   # each its own pinned worker


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="for a process with 2 CPUs or more")
def test_the_caller_is_held_on_the_cpu_no_worker_has_and_given_back_its_own():
    own = os.sched_getaffinity(0)
    cpus = sorted(own)[:2]
    assert affinity.hold_caller(None) is None
    assert affinity.hold_caller([max(own) + 1, cpus[1]]) is None   # a CPU the caller may not use
    try:
        assert affinity.hold_caller(cpus) == own
        assert os.sched_getaffinity(0) == {cpus[0]}
    finally:
        os.sched_setaffinity(0, own)


def products_model(n: int = 512, depth: int = 8) -> autofusion.CompiledModel:
    """One native partition of `depth` n×n products: a call long enough to watch."""
    return autofusion.compile(products_model_graph(n, depth), level=2, backend="native", threads=2)


def products_model_graph(n: int = 512, depth: int = 8) -> Graph:
    g = Graph("products", {"": 21})
    b = GraphBuilder(g)
    y = g.add_input("x", (n, n), DType.FLOAT)
    for k in range(depth):
        y = b.MatMul(y, b.constant(np.eye(n, dtype=np.float32) * 0.5, f"w{k}"))
    g.outputs = [y]
    y.shape, y.dtype = (n, n), DType.FLOAT
    return g


@pytest.mark.skipif(unavailable() is not None, reason=f"no native code: {unavailable()}")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) != 2, reason="for a process with 2 CPUs")
def test_a_one_call_model_runs_on_its_stream_held_on_the_cpu_no_worker_has():
    """The model is one native partition, so its calls run on the model's stream (runner.cpp), a
    thread of the runtime's: a watcher sees that thread on the CPU no worker has while the calls
    run, and the caller's own set never changes."""
    m = products_model()
    assert m.program.whole is not None
    x = torch.ones(512, 512)
    before = set(os.listdir("/proc/self/task"))
    on_worker(lambda: m(x))   # a call from a thread other than the main one runs on the stream
    want = m._streams[2].cpus
    if want is None:
        pytest.skip("the workers could not be pinned here")
    started = set(os.listdir("/proc/self/task")) - before   # the stream's thread and its team's
    own, seen, done = os.sched_getaffinity(0), set(), threading.Event()

    def watch():
        while not done.is_set():
            for t in started:
                try:
                    seen.add(frozenset(os.sched_getaffinity(int(t))))
                except ProcessLookupError:   # a thread that has ended since (on_worker's)
                    pass

    def calls():
        caller_own = os.sched_getaffinity(0)
        for _ in range(20):
            m(x)
        return caller_own, os.sched_getaffinity(0)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        before_calls, after_calls = on_worker(calls)
    finally:
        done.set()
        watcher.join()
    assert frozenset({want[0]}) in seen and frozenset({want[1]}) in seen
    assert before_calls == after_calls and os.sched_getaffinity(0) == own   # callers' sets never change
    np.testing.assert_allclose(m(x).numpy(), np.full((512, 512), 0.5 ** 8), rtol=1e-6)


@pytest.mark.skipif(unavailable() is not None, reason=f"no native code: {unavailable()}")
def test_a_latency_mode_call_from_the_main_thread_runs_there():
    """The main thread's own PyTorch work gives it an OpenMP pool anyway: its calls share that
    pool rather than make the streams' a second one (model._on_streams); from another thread,
    the stream; both give the same answer, and the main thread's CPU set is given back."""
    assert threading.current_thread() is threading.main_thread()
    m = products_model()
    x = torch.ones(512, 512)
    own = os.sched_getaffinity(0)
    y = m(x)
    assert m._streams == {} and os.sched_getaffinity(0) == own
    np.testing.assert_array_equal(on_worker(lambda: m(x)).numpy(), y.numpy())
    assert m._streams   # the worker's call started the stream
    streamed = autofusion.compile(products_model_graph(), level=2, backend="native", threads=2, streams=2)
    streamed(x)
    assert streamed._streams   # throughput mode: every call on the streams
