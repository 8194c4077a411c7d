"""Generated kernels: every scalar expression against its torch kernel, NaN and infinity
semantics, the loop structure (collapse, strides), the source against reviewed snapshots, that
the compiler vectorises the inner loop, and the check's refusals."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import autofusion
from autofusion.backend.lower import lower
from autofusion.backend.native import build, unavailable
from autofusion.backend.native.kernels import collapse, kernel_source, refusal, strides_over
from autofusion.ir import FUSED_DOMAIN, DType, Graph, GraphBuilder
from autofusion.ir.activations import ACTIVATIONS, activation_attrs
from autofusion.ir.scalar import EXPRESSIONS

SNAPSHOTS = Path(__file__).parent / "snapshots"
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
def test_every_scalar_expression_matches_its_torch_kernel():
    graph = every_expression()
    native = autofusion.compile(graph, level=0, backend="native")
    assert "generated" in str(native.plan)
    reference = autofusion.compile(graph, level=0, backend="torch")
    x = feeds(np.random.default_rng(0))
    got, want = native.run(x), reference.run(x)
    body = graph.nodes[0].attrs["body"]
    for v, b in zip(graph.outputs, body.outputs):
        op = b.producer.op
        scale = np.abs(want[v.name]).max() + 1e-6
        assert np.abs(got[v.name] - want[v.name]).max() <= 2e-6 * scale + 1e-6, op


@needs_native
def test_nan_and_infinity_propagate_as_onnx_says():
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
    want = autofusion.compile(graph, level=0, backend="torch").run(data)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=0)   # NaN where NaN


def test_strides_and_collapsed_loops():
    space = [1, 64, 112, 112]
    x, scale = strides_over((1, 64, 112, 112), space), strides_over((1, 64, 1, 1), space)
    assert x == [0, 12544, 112, 1] and scale == [0, 1, 0, 0]
    sizes, (sx, ss) = collapse(space, [x, scale])
    assert sizes == [64, 12544] and sx == [12544, 1] and ss == [1, 0]
    assert collapse([4, 5], [[5, 1], [5, 1]]) == ([20], [[1], [1]])
    assert collapse([1, 1], [[0, 0]]) == ([1], [[0]])


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


@pytest.mark.parametrize("make", [silu_scale, gate_and_product])
def test_generated_source_matches_the_snapshot(make):
    source = kernel_source(make().nodes[0], "kernel_0_0")
    path = SNAPSHOTS / f"region_{make.__name__}.cpp"
    if os.environ.get("AUTOFUSION_UPDATE_SNAPSHOTS"):
        path.write_text(source + "\n")
    assert source + "\n" == path.read_text()


@needs_native
@pytest.mark.parametrize("make", [silu_scale, gate_and_product])
def test_the_compiler_vectorises_the_inner_loop(tmp_path, make):
    tc = build.toolchain()
    src = tmp_path / "k.cpp"
    src.write_text('#include "native.h"\n#include "scalar.h"\nusing namespace af;\n'
                   + kernel_source(make().nodes[0], "kernel_0_0").replace("static ", ""))
    done = subprocess.run([tc.compiler, *build.MODEL_FLAGS, "-c", str(src), "-o", str(tmp_path / "k.o"),
                           f"-I{build.RUNTIME_DIR}", "-fopt-info-vec-optimized"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "loop vectorized" in done.stderr


def test_the_check_refuses_what_it_cannot_run_with_the_reason():
    graph = silu_scale()
    assert refusal(graph.nodes[0]) is None
    graph.inputs[0].shape = ("batch", 8, 6, 6)
    assert "static shapes" in refusal(graph.nodes[0])
    graph.inputs[0].shape, graph.inputs[0].dtype = (1, 8, 6, 6), DType.DOUBLE
    assert "not float32" in refusal(graph.nodes[0])
    plan = lower(graph, "auto")
    assert "not float32" in str(plan)
