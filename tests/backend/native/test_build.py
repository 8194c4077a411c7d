"""Building native code: the on-disk cache, concurrent builds, compiler errors, no toolchain."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import autofusion
from autofusion.backend.native import build, unavailable
from autofusion.errors import AutofusionError
from autofusion.ir import DType, Graph, GraphBuilder

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")


def relu_graph(n: int = 8) -> Graph:
    g = Graph("relu", {"": 21})
    x = g.add_input("x", (2, n), DType.FLOAT)
    g.outputs = [GraphBuilder(g).Relu(x)]
    return g


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One fresh cache directory for the module (the runtime library builds once, ~5 s)."""
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOFUSION_CACHE_DIR", str(path))
        yield path


def gated_graph(n: int = 8) -> Graph:
    """x·sigmoid(x) + 1: an automatic fusion region, a generated kernel."""
    g = Graph("gated", {"": 21})
    x = g.add_input("x", (2, n), DType.FLOAT)
    op = GraphBuilder(g)
    g.outputs = [op.Add(op.Mul(x, op.Sigmoid(x)), op.constant(np.ones((), np.float32), "one"))]
    return g


def libraries(cache) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in cache.iterdir() if p.name.endswith(".so")}


def test_a_model_without_generated_kernels_builds_no_cpp(cache):
    autofusion.compile(relu_graph(), backend="native")
    assert [n.startswith("libafrt-") for n in libraries(cache)] == [True]   # the runtime alone
    model = autofusion.compile(relu_graph(12), backend="native")
    assert len(libraries(cache)) == 1
    np.testing.assert_array_equal(model(np.array([[-1.0] * 12, [2.0] * 12], np.float32))[1], [2.0] * 12)


def test_a_second_compile_builds_nothing(cache):
    autofusion.compile(gated_graph(), backend="native")
    files = libraries(cache)
    assert sum(n.startswith("kernel-") for n in files) == 1   # the model's kernels, beside the runtime
    model = autofusion.compile(gated_graph(), backend="native")
    assert libraries(cache) == files
    x = np.array([[-1.0] * 8, [2.0] * 8], np.float32)
    np.testing.assert_allclose(model(x), x / (1 + np.exp(-x)) + 1, rtol=1e-6)


def test_two_processes_building_one_model_at_once(cache):
    script = ("import autofusion, numpy as np\n"
              "from autofusion.ir import DType, Graph, GraphBuilder\n"
              "g = Graph('relu', {'': 21}); x = g.add_input('x', (3, 5), DType.FLOAT)\n"
              "g.outputs = [GraphBuilder(g).Relu(x)]\n"
              "m = autofusion.compile(g, backend='native')\n"
              "assert (m(-np.ones((3, 5), np.float32)) == 0).all()\n")
    runs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    assert [r.wait(timeout=120) for r in runs] == [0, 0]
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


def test_a_compiler_error_names_the_generated_source(cache):
    with pytest.raises(build.NativeBuildError, match=r"kernel-\w+\.cpp"):
        build.kernel_library(build.toolchain(), "this is not C++;")


def test_without_a_compiler_the_torch_backend_runs_and_the_report_says_so(monkeypatch, cache):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    build.toolchain.cache_clear()
    try:
        model = autofusion.compile(relu_graph(), level=1, backend="auto")
        assert model.report.backend.startswith("Backend: torch (native unavailable: no C++ compiler "
                                               "(set CXX, or install g++ or clang++)); calls one at a time")
        assert model.report.backend in model.report.text()
        assert (model(np.ones((2, 8), np.float32)) == 1).all()
        with pytest.raises(AutofusionError, match="backend 'native' cannot run here"):
            autofusion.compile(relu_graph(), backend="native")
    finally:
        build.toolchain.cache_clear()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_torch_and_native_code_share_one_openmp_runtime():
    """oneDNN links libgomp.so.1; PyTorch's own libgomp carries that soname and is loaded first,
    so both run on one OpenMP pool instead of two fighting over the cores."""
    autofusion.compile(relu_graph(), backend="native")(np.ones((2, 8), np.float32))
    with open("/proc/self/maps") as maps:
        runtimes = {line.split()[-1] for line in maps if "libgomp" in line or "libiomp" in line}
    assert len(runtimes) == 1, runtimes


def test_a_partition_refuses_inputs_its_plan_did_not_type():
    """The C++ reads the caller's buffers as the plan typed them; anything else is an error."""
    model = autofusion.compile(relu_graph(), backend="native")
    (call,) = (f for name, f in model.program.fn.__globals__.items() if name.startswith("p"))
    with pytest.raises(RuntimeError, match=r"input 'x' is torch.float64\[2, 8\], the plan says float32\[2, 8\]"):
        call(None, torch.ones(2, 8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"torch.float32\[3, 8\]"):
        call(None, torch.ones(3, 8))
    with pytest.raises(RuntimeError, match=r"takes 1 input\(s\), got 0"):
        call(None)


@pytest.mark.parametrize("threads", [1, 2])
def test_partitions_are_built_for_the_models_thread_count(monkeypatch, threads):
    """oneDNN fixes a primitive's threads when it creates it: a model compiled with threads=N in
    a process whose pool has another count builds its partitions with N threads set, and leaves
    the process's count as it was."""
    from autofusion import pipeline
    seen = []
    real = pipeline.build_partitions
    monkeypatch.setattr(pipeline, "build_partitions", lambda *a: seen.append(torch.get_num_threads()) or real(*a))
    before = torch.get_num_threads()
    torch.set_num_threads(3 - threads)
    try:
        autofusion.compile(relu_graph(), level=0, backend="native", threads=threads)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert seen == [threads] and after == 3 - threads
