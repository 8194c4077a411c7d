"""A region's generated C++ kernel called from a torch partition: equals level 0 and ONNX Runtime,
the plan says which kernel runs each region and why, a symbolic dim or a machine without a
compiler keeps op by op, the kernel library comes from the cache on a second compile, and a
kernel that does not build, or a tensor the plan does not expect, is a clear error."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import autofusion
from autofusion.backend import native
from autofusion.backend.impl import implementations
from autofusion.backend.torch_cpu import generated, region
from autofusion.errors import KernelBuildError
from autofusion.ir import FUSED_DOMAIN

needs_native = pytest.mark.skipif(native.unavailable() is not None,
                                  reason=f"no native code: {native.unavailable()}")
REGION = f"{FUSED_DOMAIN}::Region"


def head_model(batch: int | str = 4) -> onnx.ModelProto:
    """Four kinds of region around two MatMuls (which no region joins): bias + SiLU gate (an
    elementwise chain with a broadcast), a reshape joining the per-column scale and residual
    after the first product (a scalar would be the product's alpha, and the residual its
    epilogue), and a scaled, masked softmax (a row region) after the second."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    w1 = helper.make_tensor("w1", f, [32, 32], rng.standard_normal((32, 32)).astype(np.float32).ravel())
    w2 = helper.make_tensor("w2", f, [16, 16], rng.standard_normal((16, 16)).astype(np.float32).ravel())
    bias = helper.make_tensor("bias", f, [32], rng.standard_normal(32).astype(np.float32))
    scale = helper.make_tensor("scale", f, [], [0.25])
    columns = helper.make_tensor("columns", f, [32], rng.uniform(0.5, 1.5, 32).astype(np.float32))
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [-1, 16, 16])
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["xb"]),
        helper.make_node("Sigmoid", ["xb"], ["sg"]),
        helper.make_node("Mul", ["xb", "sg"], ["silu"]),
        helper.make_node("MatMul", ["silu", "w1"], ["h"]),
        helper.make_node("Mul", ["h", "columns"], ["hs"]),
        helper.make_node("Add", ["hs", "x"], ["res"]),
        helper.make_node("Reshape", ["res", "shape"], ["sq"]),
        helper.make_node("Tanh", ["sq"], ["t"]),
        helper.make_node("MatMul", ["t", "w2"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["ss"]),
        helper.make_node("Add", ["ss", "mask"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "head",
        [helper.make_tensor_value_info("x", f, [batch, 8, 32]),
         helper.make_tensor_value_info("mask", f, [1, 16, 16])],
        [helper.make_tensor_value_info("y", f, None)],
        [w1, w2, bias, scale, columns, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(batch: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    mask = np.where(rng.random((1, 16, 16)) < 0.2, -1e4, 0.0).astype(np.float32)
    return {"x": rng.standard_normal((batch, 8, 32)).astype(np.float32), "mask": mask}


def regions(model) -> list:
    return [d for n, d in model.plan.decisions.items() if n.op == REGION]


@needs_native
def test_regions_run_as_generated_kernels_and_equal_level_0_and_onnxruntime():
    onnx_model, x = head_model(), feeds()
    fused = autofusion.compile(onnx_model, backend="torch")
    decisions = regions(fused)
    kinds = {n.op_type for d in decisions for n in d.node.attrs["body"].nodes}
    assert len(decisions) >= 3 and {"Activation", "Reshape", "Softmax"} <= kinds, kinds
    assert all(d.impl.name == "generated kernel" for d in decisions)
    for d in decisions:
        assert f"{d.node.name} ({REGION}) via generated kernel\n            not op by op: costs more" \
            in str(fused.plan)
    want = ort.InferenceSession(onnx_model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, x)[0]
    level0 = autofusion.compile(onnx_model, level=0, backend="torch").run(x)["y"]
    got = fused.run(x)["y"]
    np.testing.assert_allclose(got, level0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_native
def test_on_the_native_backend_regions_stay_native_steps():
    # the ctypes call costs more than a step inside a partition, less than the ops one by one
    onnx_model, x = head_model(), feeds()
    fused = autofusion.compile(onnx_model, backend="auto")
    assert all(d.impl.target == "native" for d in regions(fused))   # cheaper than a ctypes call
    costs = {i.name: i.cost(regions(fused)[0].node)
             for i in implementations(REGION)}
    assert costs["generated"] < costs["generated kernel"] < costs["op by op"]
    np.testing.assert_allclose(fused.run(x)["y"], autofusion.compile(onnx_model, backend="torch").run(x)["y"],
                               rtol=1e-5, atol=1e-6)


def test_a_region_with_a_symbolic_dim_reads_its_sizes_off_its_inputs():
    """One kernel for every batch: its symbolic sizes (d[k]) come from the input that has them,
    on each call; nothing is compiled for a new size."""
    onnx_model = head_model("n")
    fused = autofusion.compile(onnx_model, backend="torch")
    decisions = regions(fused)
    assert decisions and all(d.impl.name == "generated kernel" for d in decisions)
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    libraries = kernel_libraries(fused)
    for n in (3, 1, 5):
        x = feeds(n)
        np.testing.assert_allclose(fused.run(x)["y"], session.run(None, x)[0], rtol=1e-5, atol=1e-6)
    assert kernel_libraries(fused) == libraries


def test_without_a_compiler_the_torch_backend_runs_regions_op_by_op(monkeypatch):
    monkeypatch.setattr(generated, "unavailable", lambda: "no C++ compiler (set CXX, or install g++ or clang++)")
    fused = autofusion.compile(head_model(), backend="torch")
    decisions = regions(fused)
    assert decisions and all(d.impl.name == "op by op" for d in decisions)
    assert "not generated kernel: no native code on this machine: no C++ compiler" in str(fused.plan)
    x = feeds()
    level0 = autofusion.compile(head_model(), level=0, backend="torch").run(x)["y"]
    np.testing.assert_allclose(fused.run(x)["y"], level0, rtol=1e-5, atol=1e-6)


def kernel_libraries(model) -> list:
    return [model.program.namespace[f"k{p.index}"].library for p in model.plan.partitions
            if p.target == "torch" and model.plan.decisions[p.nodes[0]].impl.name == "generated kernel"]


@needs_native
def test_a_second_compile_reuses_the_cached_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOFUSION_CACHE_DIR", str(tmp_path))
    first = kernel_libraries(autofusion.compile(head_model(), backend="torch"))
    assert first and all(p.parent == tmp_path for p in first)
    built = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.so")}
    assert set(first) <= set(built)
    again = kernel_libraries(autofusion.compile(head_model(), backend="torch"))
    assert again == first
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.so")} == built   # nothing rebuilt


@needs_native
def test_a_kernel_that_does_not_build_names_its_region(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOFUSION_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(generated, "library_source", lambda kernel, node: "this is not C++;\n")
    with pytest.raises(KernelBuildError) as e:
        autofusion.compile(head_model(), backend="torch")
    assert "fused_" in str(e.value) and REGION in str(e.value)
    assert "its generated kernel does not build: the C++ compiler failed" in str(e.value)


@needs_native
def test_the_kernel_takes_strided_tensors_and_refuses_what_the_plan_does_not_say():
    fused = autofusion.compile(head_model(), backend="torch")
    node = next(d.node for d in regions(fused) if "softmax" in d.node.attrs["kernel"])
    run = generated.generated_kernel(node)
    reference = region.region(node)
    shapes = [tuple(v.shape) for v in node.inputs]
    rng = torch.Generator().manual_seed(0)
    # each input made as its transpose and transposed back: same values, not contiguous
    xs = [torch.randn(tuple(reversed(s)), generator=rng).permute(*reversed(range(len(s)))) for s in shapes]
    assert not all(x.is_contiguous() for x in xs if x.dim() > 1)
    torch.testing.assert_close(run(*xs), reference(*xs), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="the plan says float32"):
        run(*[x.double() for x in xs])
    with pytest.raises(RuntimeError, match="the plan says float32"):
        run(*[x[:1] for x in xs])


@needs_native
def test_the_kernels_threads_are_pytorchs_openmp_pool():
    before = torch.get_num_threads()
    try:
        autofusion.compile(head_model(), backend="torch", threads=1).run(feeds())
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    maps = Path("/proc/self/maps").read_text().splitlines()
    gomp = {line.split()[-1] for line in maps if "libgomp" in line}
    assert len(gomp) == 1, gomp   # one OpenMP runtime: set_num_threads holds for the kernels
