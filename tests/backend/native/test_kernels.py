"""Generated kernels: every scalar expression, row reduction and view against its torch kernel,
NaN and infinity semantics, the loop structure (collapse, strides), the source against reviewed
snapshots, that the compiler vectorises the inner loop (every reduction pass of a row kernel
too), and the check's refusals."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

import autofusion
from autofusion.backend.lower import lower
from autofusion.backend.native import build, unavailable
from autofusion.backend.native.kernels import collapse, kernel_source, refusal
from autofusion.backend.torch_cpu.region import region as op_by_op_kernel
from autofusion.ir import FUSED_DOMAIN, DType, Graph, GraphBuilder
from autofusion.ir.activations import ACTIVATIONS, activation_attrs
from autofusion.ir.region_space import Space
from autofusion.ir.scalar import EXPRESSIONS, ROW_OPS

from .test_emit import assert_snapshot

needs_native = pytest.mark.skipif(unavailable() is not None, reason=f"no native code: {unavailable()}")

SHAPE = (2, 3, 16)
# each unary op's inputs from inside its domain
DOMAIN = {"Log": "pos", "Sqrt": "pos", "Reciprocal": "pos", "Asin": "unit", "Acos": "unit",
          "Atanh": "unit", "Acosh": "ge1"}
ATTRS = {"LeakyRelu": {"alpha": 0.2}, "Elu": {"alpha": 0.7}, "Celu": {"alpha": 1.3},
         "ThresholdedRelu": {"alpha": 0.4}, "Shrink": {"bias": 0.1, "lambd": 0.6},
         "HardSigmoid": {"alpha": 0.3, "beta": 0.4}, "Gelu": {"approximate": "tanh"}}
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"]
VARIADIC = ["Sum", "Mean", "Max", "Min"]
NOT_UNARY = set(BINARY) | set(VARIADIC) | {"Clip", "Dropout"}


def region(body: Graph, inputs, outer: Graph) -> Graph:
    op = GraphBuilder(outer)
    outs = op.Region(*inputs, _domain=FUSED_DOMAIN, _outputs=len(body.outputs), body=body,
                     kernel="fused_test")
    outer.outputs = list(outs) if isinstance(outs, tuple) else [outs]
    for v, b in zip(outer.outputs, body.outputs):
        v.shape, v.dtype = b.shape, b.dtype
    return outer


def op_by_op(graph: Graph, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference: a one-region graph's body run one PyTorch call per op (torch_cpu/region.py);
    the torch backend runs the generated kernel itself where it builds."""
    node = graph.nodes[0]
    outs = op_by_op_kernel(node)(*[torch.from_numpy(data[v.name]) for v in node.inputs])
    outs = outs if isinstance(outs, tuple) else (outs,)
    return {v.name: o.numpy() for v, o in zip(graph.outputs, outs)}


def every_expression() -> Graph:
    """One region computing every op with a scalar expression, each a separate output."""
    body = Graph("all_ops", {"": 21})
    ins = {k: body.add_input(k, s, DType.FLOAT) for k, s in
           (("any", SHAPE), ("pos", SHAPE), ("unit", SHAPE), ("ge1", SHAPE), ("b", (3, 1)))}
    op = GraphBuilder(body)
    outs = []
    for key in sorted(EXPRESSIONS):
        if key.startswith(FUSED_DOMAIN) or key in NOT_UNARY:
            continue
        outs.append(getattr(op, key)(ins[DOMAIN.get(key, "any")], **ATTRS.get(key, {})))
    for key in BINARY:
        a, b = (ins["pos"], ins["b"]) if key == "Pow" else (ins["any"], ins["b"])
        outs.append(getattr(op, key)(a, b))
    for key in VARIADIC:
        outs.append(getattr(op, key)(ins["any"], ins["b"], ins["pos"]))
    outs.append(op.Clip(ins["any"], op.constant(np.array(-0.5, np.float32)),
                        op.constant(np.array(0.7, np.float32))))
    for name, act in ACTIVATIONS.items():
        if name:
            outs.append(op.Activation(ins["any"], **activation_attrs(name)))
    outs.append(op.Gelu(ins["any"], _domain=FUSED_DOMAIN))
    for v in outs:
        v.shape, v.dtype = SHAPE, DType.FLOAT
    body.outputs = outs
    outer = Graph("m", {"": 21})
    return region(body, [outer.add_input(v.name, v.shape, v.dtype) for v in body.inputs], outer)


def feeds(rng) -> dict[str, np.ndarray]:
    u = lambda lo, hi, s=SHAPE: rng.uniform(lo, hi, s).astype(np.float32)   # noqa: E731
    return {"any": u(-3, 3), "pos": u(0.1, 3), "unit": u(-0.95, 0.95), "ge1": u(1.05, 3),
            "b": u(0.5, 2, (3, 1)) * rng.choice([-1, 1], (3, 1)).astype(np.float32)}


@needs_native
def test_every_scalar_expression_matches_its_torch_kernel(lanes):
    graph = every_expression()
    native = autofusion.compile(graph, level=0, backend="native")
    assert "generated" in str(native.plan)
    x = feeds(np.random.default_rng(0))
    got, want = native.run(x), op_by_op(graph, x)
    body = graph.nodes[0].attrs["body"]
    for v, b in zip(graph.outputs, body.outputs):
        op = b.producer.op
        scale = np.abs(want[v.name]).max() + 1e-6
        assert np.abs(got[v.name] - want[v.name]).max() <= 2e-6 * scale + 1e-6, op


@needs_native
def test_nan_and_infinity_propagate_as_onnx_says(lanes):
    body = Graph("nan", {"": 21})
    x, y = body.add_input("x", (8,), DType.FLOAT), body.add_input("y", (8,), DType.FLOAT)
    op = GraphBuilder(body)
    body.outputs = [op.Max(x, y), op.Min(x, y), op.Relu(x), op.Sigmoid(x), op.Exp(x)]
    for v in body.outputs:
        v.shape, v.dtype = (8,), DType.FLOAT
    outer = Graph("m", {"": 21})
    graph = region(body, [outer.add_input("x", (8,), DType.FLOAT), outer.add_input("y", (8,), DType.FLOAT)], outer)
    nan, inf = np.nan, np.inf
    data = {"x": np.array([nan, 1, inf, -inf, 0, -2, nan, 3], np.float32),
            "y": np.array([1, nan, 0, 0, -0.0, nan, nan, 2], np.float32)}
    got = autofusion.compile(graph, level=0, backend="native").run(data)
    want = op_by_op(graph, data)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=0)   # NaN where NaN


def test_strides_and_collapsed_loops():
    space = Space([1, 64, 112, 112])
    natural = ((0,), (1,), (2,), (3,))
    x, scale = space.strides((1, 64, 112, 112), natural), space.strides((1, 64, 1, 1), natural)
    assert x == (0, 12544, 112, 1) and scale == (0, 1, 0, 0)
    # [112·112, 64] transposed onto the space, and [64·112, 112] merged: strides follow the frame
    assert space.strides((12544, 64), ((2, 3), (1,))) == (0, 1, 7168, 64)
    assert space.strides((7168, 112), ((1, 2), (3,))) == (0, 12544, 112, 1)
    sizes, (sx, ss) = collapse(list(space.sizes), [list(x), list(scale)])
    assert sizes == [64, 12544] and sx == [12544, 1] and ss == [1, 0]
    assert collapse([4, 5], [[5, 1], [5, 1]]) == ([20], [[1], [1]])
    assert collapse([1, 1], [[0, 0]]) == ([1], [[0]])


def test_an_operand_stored_channels_last_has_its_strides_and_the_loops_follow_it():
    space, natural = Space([1, 64, 112, 112]), ((0,), (1,), (2,), (3,))
    assert space.strides((1, 64, 112, 112), natural, (0, 2, 3, 1)) == (0, 1, 7168, 64)
    assert space.strides((1, 64, 1, 1), natural, (0, 2, 3, 1)) == (0, 1, 0, 0)
    # x and the result channels-last, the per-channel shift as it is: pixels outside, channels inside
    source = kernel_source(silu_scale().nodes[0], "k", lanes=1, orders=([CL, None], [CL]))
    assert "i0 < 36" in source and "i1 < 8" in source
    assert "in0[i0 * 8 + i1]" in source and "in1[i1]" in source and "out0[i0 * 8 + i1]" in source


CL = (0, 2, 3, 1)


def silu_scale() -> Graph:
    body = Graph("silu_scale", {"": 21})
    x, s = body.add_input("in0", (1, 8, 6, 6), DType.FLOAT), body.add_input("in1", (1, 8, 1, 1), DType.FLOAT)
    op = GraphBuilder(body)
    y = op.Add(op.Activation(x, **activation_attrs("SiLU")), s)
    body.outputs = [op.Mul(y, op.constant(np.array(0.5, np.float32)))]
    outer = Graph("m", {"": 21})
    return region(body, [outer.add_input("x", (1, 8, 6, 6), DType.FLOAT),
                         outer.add_input("s", (1, 8, 1, 1), DType.FLOAT)], outer)


def gate_and_product() -> Graph:
    """g = sigmoid(s) ([1,8,1,1], also an output) and y = x·g ([1,8,6,6])."""
    body = Graph("gate", {"": 21})
    x, s = body.add_input("in0", (1, 8, 6, 6), DType.FLOAT), body.add_input("in1", (1, 8, 1, 1), DType.FLOAT)
    op = GraphBuilder(body)
    g = op.Sigmoid(s)
    body.outputs = [op.Mul(x, g), g]
    outer = Graph("m", {"": 21})
    return region(body, [outer.add_input("x", (1, 8, 6, 6), DType.FLOAT),
                         outer.add_input("s", (1, 8, 1, 1), DType.FLOAT)], outer)


def ints(*v) -> np.ndarray:
    return np.array(v, np.int64)


def body_region(name: str, shapes: dict, build) -> Graph:
    """A region over inputs of these shapes whose body `build(op, *inputs)` returns its outputs."""
    body = Graph(name, {"": 21})
    ins = [body.add_input(f"in{i}", s, DType.FLOAT) for i, s in enumerate(shapes.values())]
    outs = build(GraphBuilder(body), *ins)
    body.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    outer = Graph("m", {"": 21})
    return region(body, [outer.add_input(k, s, DType.FLOAT) for k, s in shapes.items()], outer)


def softmax_scale_mask() -> Graph:
    """softmax(x·0.125 + mask) over the last axis, spelled out: three passes per row."""
    def build(op, x, mask):
        b = op.Add(op.Mul(x, op.constant(np.array(0.125, np.float32))), mask)
        e = op.Exp(op.Sub(b, op.ReduceMax(b, op.constant(ints(-1)), keepdims=1)))
        return op.Div(e, op.ReduceSum(e, op.constant(ints(-1)), keepdims=1))
    return body_region("softmax", {"x": (2, 4, 8, 64), "mask": (2, 1, 1, 64)}, build)


def rms_norm_weight() -> Graph:
    """x·(mean(x²) + ε)^-½·w over the last axis, and the mean square as a second output."""
    def build(op, x, w):
        ms = op.ReduceMean(op.Mul(x, x), op.constant(ints(-1)), keepdims=1)
        eps, power = op.constant(np.array(1e-6, np.float32)), op.constant(np.array(-0.5, np.float32))
        inv = op.Pow(op.Add(ms, eps), power)
        return [op.Mul(op.Mul(x, inv), w), ms]
    return body_region("rms_norm", {"x": (128, 768), "w": (768,)}, build)


def every_row_op() -> Graph:
    """One region computing every row op over the last axis of [2,3,16] (keepdims on and off),
    and every view of relu(x) (a transpose stored at strides out of order), each an output."""
    def build(op, x, pos):
        outs = []
        for k, key in enumerate(sorted(ROW_OPS)):
            src = pos if key == "ReduceLogSum" else x
            if key in ("Softmax", "LogSoftmax"):
                outs.append(getattr(op, key)(src, axis=-1))
            elif key.startswith("Global"):
                outs.append(getattr(op, key)(op.Unsqueeze(src, op.constant(ints(2)))))   # over [1, 16]
            else:
                outs.append(getattr(op, key)(src, op.constant(ints(-1)), keepdims=k % 2))
        y = op.Relu(x)
        outs += [op.Reshape(y, op.constant(ints(6, 16))), op.Flatten(y, axis=1),
                 op.Unsqueeze(y, op.constant(ints(0))),
                 op.Squeeze(op.Unsqueeze(y, op.constant(ints(1))), op.constant(ints(1))),
                 op.Transpose(y, perm=[2, 0, 1])]
        return outs
    return body_region("row_ops", {"x": (2, 3, 16), "pos": (2, 3, 16)}, build)


@needs_native
def test_every_row_op_and_view_matches_its_torch_kernel():
    graph = every_row_op()
    native = autofusion.compile(graph, level=0, backend="native")
    assert "generated" in str(native.plan)
    rng = np.random.default_rng(1)
    x = {"x": rng.uniform(-3, 3, (2, 3, 16)).astype(np.float32),
         "pos": rng.uniform(0.1, 3, (2, 3, 16)).astype(np.float32)}
    got, want = native.run(x), op_by_op(graph, x)
    body = graph.nodes[0].attrs["body"]
    assert len(body.outputs) == len(ROW_OPS) + 5
    for v, b in zip(graph.outputs, body.outputs):
        assert got[v.name].shape == want[v.name].shape, b.producer.op
        scale = np.abs(want[v.name]).max() + 1e-6
        assert np.abs(got[v.name] - want[v.name]).max() <= 2e-6 * scale + 1e-6, b.producer.op


def test_a_row_kernel_has_a_pass_per_level_of_reductions():
    source = kernel_source(softmax_scale_mask().nodes[0], "k")
    assert source.count("#pragma omp simd reduction(af_max") == 1 and source.count("reduction(+") == 1
    assert source.count("#pragma omp simd") == 3   # max, sum of exp, store
    assert "64 row(s) of 64" in source
    norm = kernel_source(rms_norm_weight().nodes[0], "k")
    assert norm.count("#pragma omp simd") == 2 and "#pragma omp parallel for" in norm   # 128 × 768 rows


@pytest.mark.parametrize("make, lanes", [(silu_scale, 1), (silu_scale, 16), (gate_and_product, 1),
                                         (gate_and_product, 16), (softmax_scale_mask, 1), (rms_norm_weight, 1)])
def test_generated_source_matches_the_snapshot(make, lanes):
    source = kernel_source(make().nodes[0], "kernel_0_0", lanes)
    assert_snapshot(source + "\n", f"region_{make.__name__}{'_16_lanes' if lanes > 1 else ''}.cpp")


@needs_native
@pytest.mark.parametrize("make", [silu_scale, gate_and_product, softmax_scale_mask, rms_norm_weight])
def test_the_compiler_vectorises_the_inner_loop(tmp_path, make):
    tc = build.toolchain()
    src = tmp_path / "k.cpp"
    text = '#include "native.h"\n#include "scalar.h"\nusing namespace af;\n' + \
        kernel_source(make().nodes[0], "kernel_0_0", lanes=1).replace("static ", "")
    src.write_text(text)
    done = subprocess.run([tc.compiler, *build.KERNEL_FLAGS, "-c", str(src), "-o", str(tmp_path / "k.o"),
                           f"-I{build.RUNTIME_DIR}", "-fopt-info-vec-optimized"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # every loop under `#pragma omp simd` (each reduction pass of a row kernel) is vectorised:
    # gcc names a line in the loop; the loop is the last `for` opened before it
    lines = text.splitlines()
    simd = {k + 2 for k, line in enumerate(lines) if line.strip().startswith("#pragma omp simd")}
    loops = [k + 1 for k, line in enumerate(lines) if line.strip().startswith("for (")]
    vectorized = {max(f for f in loops if f <= int(m.split(":")[1]))
                  for m in done.stderr.splitlines() if "loop vectorized" in m}
    assert simd and simd <= vectorized, done.stderr


@needs_native
def test_the_16_lane_form_is_straight_vector_code(tmp_path):
    """No call but OpenMP's in the 16-lane kernel: its SiLU is inline AVX-512 code."""
    if build.vector_lanes() < 16:
        pytest.skip("16-lane kernels need AVX-512 and GCC")
    tc = build.toolchain()
    src = tmp_path / "k.cpp"
    src.write_text('#include "scalar.h"\nusing namespace af;\n' +
                   kernel_source(silu_scale().nodes[0], "kernel_0_0", lanes=16).replace("static ", ""))
    done = subprocess.run([tc.compiler, *build.KERNEL_FLAGS, "-S", str(src), "-o", str(tmp_path / "k.s"),
                           f"-I{build.RUNTIME_DIR}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    asm = (tmp_path / "k.s").read_text()
    calls = {line.split()[1] for line in asm.splitlines() if line.strip().startswith("call")}
    assert calls <= {"GOMP_parallel@PLT", "omp_get_num_threads@PLT", "omp_get_thread_num@PLT"}, calls
    assert "%zmm" in asm and "vscalefps" in asm   # e^-x of the sigmoid, inline


@needs_native
@pytest.mark.parametrize("width", [37, 165])
def test_strided_reads_and_writes_and_a_masked_tail(lanes, width):
    """A transposed input, a broadcast one, a transposed output and one broadcast along the outer
    axis, over [3, 5, width] (37 = 2·16 + 5 along the inner axis: one unrolled step of 2 vectors,
    then a masked one; 165: 8 vectors a step, then 16 at a time to a masked end): every element
    once, none past the end."""
    def build_body(op, x, xt, s, w):
        g = op.Neg(w)
        y = op.Add(op.Add(op.Tanh(x), op.Transpose(xt, perm=[1, 2, 0])), g)
        return [op.Mul(y, s), op.Transpose(op.Sigmoid(y), perm=[2, 0, 1]), g]
    graph = body_region("strided", {"x": (3, 5, width), "xt": (width, 3, 5), "s": (1, 5, 1),
                                    "w": (1, 5, width)}, build_body)
    native = autofusion.compile(graph, level=0, backend="native")
    assert "generated" in str(native.plan)
    rng = np.random.default_rng(1)
    data = {k: rng.uniform(-4, 4, v.shape).astype(np.float32) for k, v in
            {v.name: v for v in graph.inputs}.items()}
    got, want = native.run(data), op_by_op(graph, data)
    for k in want:
        assert got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=2e-6, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("ops, unroll", [(7, 8), (100, 2), (300, 1)])
def test_a_longer_body_is_unrolled_over_fewer_vectors(ops, unroll):
    """Up to 8 vectors a step, and at most 256 ops × vectors: GCC's time grows faster than the
    unrolled code (the 30,000-op chain's 1,000-op regions stay one vector a step)."""
    def chain(op, x):
        for _ in range(ops):
            x = op.Relu(x)
        return x
    source = kernel_source(body_region("chain", {"x": (1, 64, 112, 112)}, chain).nodes[0], "k", lanes=16)
    assert (f"up to {unroll} vectors a step" in source) == (unroll > 1)
    assert ("AF_EACH" in source) == (unroll > 1)


def test_the_check_refuses_what_it_cannot_run_with_the_reason():
    graph = silu_scale()
    assert refusal(graph.nodes[0]) is None
    graph.inputs[0].shape = ("batch", 8, 6, 6)   # a symbolic dim: a size the kernel reads at run time
    assert refusal(graph.nodes[0]) is None
    graph.inputs[0].shape = (None, 8, 6, 6)
    assert "every dim known" in refusal(graph.nodes[0])
    graph.inputs[0].shape, graph.inputs[0].dtype = (1, 8, 6, 6), DType.DOUBLE
    assert "not float32" in refusal(graph.nodes[0])
    plan = lower(graph, "auto")
    assert "not float32" in str(plan)
