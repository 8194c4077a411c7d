"""Automatic fusion regions: what the planner groups, what it refuses and why, and that a fused
region computes what its ops compute (max|fused - unfused| <= 1e-5·max|unfused| + 1e-6)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import autofusion
from autofusion.export import export_onnx
from autofusion.frontend import import_onnx
from autofusion.fusion.regions import kernel_name, plan_regions

from .rules.harness import fuse, onnx_model

SCALE = np.random.default_rng(0).random((1, 8, 1, 1)).astype(np.float32)


def chain_model() -> onnx.ModelProto:
    """x·sigmoid(x) + scale → relu → ·0.5 → tanh → − x → abs, on [1,8,6,6]."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"], name="sig"),
             helper.make_node("Mul", ["x", "a"], ["b"], name="silu"),
             helper.make_node("Add", ["b", "s"], ["c"], name="add"),
             helper.make_node("Relu", ["c"], ["d"], name="relu"),
             helper.make_node("Mul", ["d", "h"], ["e"], name="half"),
             helper.make_node("Tanh", ["e"], ["f"], name="tanh"),
             helper.make_node("Sub", ["f", "x"], ["g"], name="sub"),
             helper.make_node("Abs", ["g"], ["y"], name="abs")]
    return onnx_model(nodes, {"x": (1, 8, 6, 6)}, ["y"], {"s": SCALE, "h": np.array(0.5, np.float32)})


def assert_close(a, b, rtol=1e-5):
    assert np.abs(a - b).max() <= rtol * np.abs(b).max() + 1e-6


def run_both(model: onnx.ModelProto, feeds: dict, backend: str, **kw):
    fused = autofusion.compile(model, level=2, backend=backend, **kw)
    unfused = autofusion.compile(model, level=0, backend="torch")
    return fused, fused.run(feeds), unfused.run(feeds)


# ---- golden --------------------------------------------------------------------------------

def test_a_chain_becomes_one_region_named_after_its_ops():
    graph, report = fuse(chain_model(), regions=True)
    (node,) = graph.nodes
    assert node.op == "autofusion::Region" and node.attrs["kernel"] == "fused_silu_add_relu_mul_etc"
    body = node.attrs["body"]
    assert [n.op_type for n in body.nodes] == ["Activation", "Add", "Relu", "Mul", "Tanh", "Sub", "Abs"]
    assert [v.name for v in node.inputs] == ["x", "s"]        # the scalar 0.5 is in the body
    assert list(body.constants) and "h" not in graph.constants
    assert node.outputs[0].name == "y"                          # graph outputs keep their names
    assert report.regions[0].ops == [n.op_type for n in body.nodes]
    assert "Auto-fused: 7 ops into 1 kernel" in report.text()


def test_kernel_names_are_the_first_four_distinct_ops():
    graph = import_onnx(chain_model())
    assert kernel_name(graph.nodes[:3]) == "fused_sigmoid_mul_add"
    assert kernel_name(graph.nodes).endswith("_etc")


@pytest.mark.parametrize("backend", ["native", "torch"])
def test_fused_region_equals_its_ops(backend):
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype(np.float32)
    fused, a, b = run_both(chain_model(), {"x": x}, backend)
    assert fused.graph.op_histogram() == {"autofusion::Region": 1}
    assert_close(a["y"], b["y"])
    if backend == "native":
        assert "generated" in str(fused.plan)


def test_an_output_that_also_leaves_before_a_broadcast_is_written_once():
    # g = sigmoid(s) is [1,8,1,1] and a graph output; y = x·g is [1,8,6,6]
    nodes = [helper.make_node("Sigmoid", ["s"], ["g"], name="gate"),
             helper.make_node("Mul", ["x", "g"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    model = onnx_model(nodes, {"x": (1, 8, 6, 6), "s": (1, 8, 1, 1)}, ["y", "g"])
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32),
             "s": rng.standard_normal((1, 8, 1, 1)).astype(np.float32)}
    for backend in ("native", "torch"):
        fused, a, b = run_both(model, feeds, backend)
        assert fused.graph.op_histogram() == {"autofusion::Region": 1}
        for k in ("y", "g"):
            assert_close(a[k], b[k])


# ---- refusals, with their reason codes -----------------------------------------------------

def codes(report) -> dict[str, str]:
    return {m.node: m.code for m in report.not_auto_fused}


def test_an_op_alone_does_not_form_a_region():
    model = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], {"x": (2, 3)}, ["y"])
    graph, report = fuse(model, regions=True)
    assert graph.op_histogram() == {"Relu": 1} and codes(report) == {"relu": "alone"}


def test_ops_without_a_scalar_expression_stay_out_and_are_named():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["a"], ["b"], name="neg"),
             helper.make_node("Softmax", ["b"], ["y"], name="softmax", axis=-1)]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 5)}, ["y"]), regions=True)
    assert graph.op_histogram() == {"autofusion::Region": 1, "Softmax": 1}
    assert codes(report) == {"softmax": "opaque"}


def test_integer_ops_stay_out():
    nodes = [helper.make_node("Cast", ["x"], ["i"], name="cast", to=TensorProto.INT64),
             helper.make_node("Add", ["i", "i"], ["j"], name="iadd"),
             helper.make_node("Mul", ["j", "j"], ["k"], name="imul"),
             helper.make_node("Cast", ["k"], ["y"], name="back", to=TensorProto.FLOAT)]
    graph, report = fuse(onnx_model(nodes, {"x": (4,)}, ["y"]), regions=True)
    assert "autofusion::Region" not in graph.op_histogram()
    assert codes(report)["iadd"] == "dtype"


def test_the_size_limit_splits_a_chain():
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"v{i}" if i else "x"], [f"v{i + 1}"],
                              name=f"n{i}") for i in range(7)]
    model = onnx_model(nodes, {"x": (3, 4)}, ["v7"])
    graph = import_onnx(model)
    plan = plan_regions(graph, max_nodes=3)
    assert [len(r.nodes) for r in plan.regions] == [3, 3]
    assert [(m.node, m.code) for m in plan.not_fused] == [("n3", "size"), ("n6", "size")]
    compiled = autofusion.compile(model, max_region_nodes=3)
    assert compiled.graph.op_histogram()["autofusion::Region"] == 2


def test_the_input_limit_holds():
    nodes = [helper.make_node("Add", [f"v{i}" if i else "x", f"x{i}"], [f"v{i + 1}"], name=f"n{i}")
             for i in range(4)]
    model = onnx_model(nodes, {"x": (3, 4), **{f"x{i}": (3, 4) for i in range(4)}}, ["v4"])
    plan = plan_regions(import_onnx(model), max_inputs=3)
    assert all(len(r.inputs) <= 3 for r in plan.regions)
    assert "inputs" in [m.code for m in plan.not_fused]


def test_a_join_that_could_order_after_a_later_group_is_refused():
    # r = relu(x) starts a region; t = transpose(exp(...)) is a group started later that reads
    # nothing of it; add(r, t) may not join r's region without proving t independent of it
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["n"], name="neg"),
             helper.make_node("Transpose", ["n"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Exp", ["r"], ["e"], name="exp"),
             helper.make_node("Add", ["e", "t"], ["y"], name="add")]
    model = onnx_model(nodes, {"x": (4, 4)}, ["y"])
    graph, report = fuse(model, regions=True)
    graph.verify()   # no cycle: relu-neg-exp-add in one region would need transpose inside it
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    for backend in ("native", "torch"):
        _, a, b = run_both(model, {"x": x}, backend)
        assert_close(a["y"], b["y"])


def test_disable_list_turns_automatic_fusion_off():
    compiled = autofusion.compile(chain_model(), disable="AutoFusion")
    assert "autofusion::Region" not in compiled.graph.op_histogram() and not compiled.report.regions


# ---- export ---------------------------------------------------------------------------------

def test_regions_export_as_functions_that_onnxruntime_runs_and_read_back_fused(tmp_path):
    compiled = autofusion.compile(chain_model())
    path = tmp_path / "fused.onnx"
    export_onnx(compiled.graph, path)
    x = np.random.default_rng(4).standard_normal((1, 8, 6, 6)).astype(np.float32)
    ref = compiled(x)
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert_close(got, ref)
    back = import_onnx(path)
    (node,) = back.nodes   # the body in standard ops: SiLU as Sigmoid and Mul
    assert node.op == "autofusion::Region" and node.attrs["kernel"] == "fused_silu_add_relu_mul_etc"
    assert [n.op_type for n in node.attrs["body"].nodes] == \
        ["Sigmoid", "Mul", "Add", "Relu", "Mul", "Tanh", "Sub", "Abs"]
    assert_close(autofusion.compile(back)(x), ref)


# ---- property: random DAGs ------------------------------------------------------------------

UNARY = ["Relu", "Neg", "Sigmoid", "Tanh", "Abs", "Exp", "Softplus", "HardSwish"]
BINARY = ["Add", "Sub", "Mul", "Max", "Min"]
OPAQUE = ["Softmax", "Transpose", "ReduceSum"]
SHAPES = [(2, 4, 4), (1, 4, 1), (4, 4), (4,), (2, 1, 4)]


@st.composite
def random_dags(draw):
    """A DAG over values whose shapes broadcast to [2,4,4], with int64 islands and ops no
    region takes; every value may be read by any later op."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = [("x", (2, 4, 4), "f"), ("y", (4,), "f")]
    nodes, inits = [], {}
    for i in range(draw(st.integers(2, 14))):
        kind = draw(st.sampled_from(["unary"] * 3 + ["binary"] * 3 + ["opaque", "const", "int"]))
        out = f"v{i}"
        pick = lambda: values[draw(st.integers(0, len(values) - 1))]   # noqa: E731
        a = pick()
        if a[2] != "f":
            a = values[0]
        if kind == "unary":
            nodes.append(helper.make_node(draw(st.sampled_from(UNARY)), [a[0]], [out], name=out))
            values.append((out, a[1], "f"))
        elif kind in ("binary", "const"):
            if kind == "const":
                shape = draw(st.sampled_from(SHAPES + [()]))
                b = (f"c{i}", shape, "f")
                inits[b[0]] = rng.standard_normal(shape).astype(np.float32)
            else:
                b = pick()
                b = b if b[2] == "f" else values[0]
            nodes.append(helper.make_node(draw(st.sampled_from(BINARY)), [a[0], b[0]], [out], name=out))
            values.append((out, np.broadcast_shapes(a[1], b[1]), "f"))
        elif kind == "opaque":
            op = draw(st.sampled_from(OPAQUE))
            perm = list(range(len(a[1])))
            perm[-2:] = perm[-2:][::-1]   # the last two axes swapped: still broadcasts to [2,4,4]
            attrs = {"Softmax": {"axis": -1}, "Transpose": {"perm": perm}, "ReduceSum": {"keepdims": 1}}[op]
            nodes.append(helper.make_node(op, [a[0]], [out], name=out, **attrs))
            shape = [a[1][p] for p in perm] if op == "Transpose" else \
                (1,) * len(a[1]) if op == "ReduceSum" else a[1]
            values.append((out, tuple(shape), "f"))
        else:   # an int64 detour and back: never in a region, still correct
            nodes += [helper.make_node("Cast", [a[0]], [f"{out}i"], name=f"{out}c", to=TensorProto.INT64),
                      helper.make_node("Add", [f"{out}i", f"{out}i"], [f"{out}j"], name=f"{out}a"),
                      helper.make_node("Cast", [f"{out}j"], [out], name=out, to=TensorProto.FLOAT)]
            values.append((out, a[1], "f"))
    outs = [v[0] for v in values[2:] if not any(v[0] in n.input for n in nodes)] or [values[-1][0]]
    return onnx_model(nodes, {"x": (2, 4, 4), "y": (4,)}, outs, inits)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.integers(1, 6))
def test_random_dags_fuse_without_cycles_and_keep_their_values(model, max_nodes):
    graph, _ = fuse(model, regions=True)
    graph.verify()   # a cycle would fail the topological sort here
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 4, 4)).astype(np.float32),
             "y": rng.standard_normal(4).astype(np.float32)}
    fused = autofusion.compile(model, level=2, backend="torch", max_region_nodes=max_nodes)
    fused.graph.verify()
    want = autofusion.compile(model, level=0, backend="torch").run(feeds)
    got = fused.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_random_dags_through_generated_kernels(model):
    rng = np.random.default_rng(6)
    feeds = {"x": rng.standard_normal((2, 4, 4)).astype(np.float32),
             "y": rng.standard_normal(4).astype(np.float32)}
    want = autofusion.compile(model, level=0, backend="torch").run(feeds)
    got = autofusion.compile(model, level=2, backend="native").run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
