"""Lowering: the implementation chosen per node and why, partitions, layouts and lifetimes."""
from __future__ import annotations

import numpy as np
import pytest

import autofusion
from autofusion.backend.lower import lower, schedule
from autofusion.backend.native import unavailable
from autofusion.errors import AutofusionError
from autofusion.ir import DType, Graph, GraphBuilder

from ..helpers import conv_relu_model   # x: [N, 3, 8, 8]

needs_native = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")


def side_branch_graph() -> Graph:
    """x → Relu → Sigmoid ─┐
       x → Softplus ───────┴ Add → y     (Softplus has no native implementation)"""
    g = Graph("branch", {"": 21})
    x = g.add_input("x", (2, 8), DType.FLOAT)
    op = GraphBuilder(g)
    soft = op.Softplus(x)
    g.outputs = [op.Add(op.Sigmoid(op.Relu(x)), soft)]
    return g


def test_the_torch_backend_runs_every_node_on_torch():
    plan = lower(side_branch_graph(), "torch")
    assert [p.target for p in plan.partitions] == ["torch"] * 4
    assert plan.summary() == "Backend: torch (4 nodes as PyTorch calls)"


@needs_native
def test_native_runs_are_as_long_as_the_graph_allows():
    g = side_branch_graph()
    plan = lower(g, "auto")
    # file order alternates (Softplus comes first); the schedule keeps Relu and Sigmoid together
    assert [[n.op_type for n in p.nodes] for p in plan.partitions] == [["Softplus"], ["Relu", "Sigmoid", "Add"]]
    native = plan.partitions[1]
    assert [v.name for v in native.inputs] == ["x", "Softplus_out0"]
    assert [v.name for v in native.outputs] == ["Add_out0"]
    assert "Backend: native — 3 node(s) in 1 native partition(s), 1 node(s) on PyTorch" in str(plan)


@needs_native
def test_a_refused_implementation_is_recorded_with_its_reason():
    g = Graph("unknown", {"": 21})
    x = g.add_input("x", (None, 8), DType.FLOAT)
    g.outputs = [GraphBuilder(g).Relu(x)]
    decision = lower(g, "auto").decisions[g.nodes[0]]
    assert decision.impl.name == "torch"
    assert decision.refused == [("onednn", "input 'x' has shape float[?,8]: native partitions need every dim known")]
    assert "not onednn: input 'x' has shape float[?,8]" in str(lower(g, "auto"))


@needs_native
def test_lifetimes_and_in_place_steps():
    g = Graph("chain", {"": 21})
    x = g.add_input("x", (4, 4), DType.FLOAT)
    op = GraphBuilder(g)
    a = op.Relu(x)                   # step 0: x is the caller's, so not in place
    b = op.Tanh(a)                   # step 1: a is read for the last time: in place
    c = op.Mul(b, op.constant(np.ones((4, 4), np.float32)))
    g.outputs = [op.Add(c, b)]       # step 3: b is read again, so Mul (step 2) is not in place
    part = lower(g, "auto").partitions[0]
    plans = {v.name: (vp.first, vp.last, vp.in_place_of and vp.in_place_of.name) for v, vp in part.values.items()}
    assert plans == {"Relu_out0": (0, 1, None), "Tanh_out0": (1, 3, "Relu_out0"), "Mul_out0": (2, 3, None)}


def products_graph() -> Graph:
    """x → MatMul → h → MatMul → y, and h → Transpose → MatMul → z: h read by products alone
    (one of them through a view); r = MatMul(x) read by a product and an Add."""
    g = Graph("products", {"": 21})
    x = g.add_input("x", (4, 8), DType.FLOAT)
    op = GraphBuilder(g)
    w = lambda *s: op.constant(np.ones(s, np.float32))   # noqa: E731
    h = op.MatMul(x, w(8, 8))
    r = op.MatMul(x, w(8, 8))
    g.outputs = [op.MatMul(h, w(8, 4)), op.MatMul(op.Transpose(h, perm=[1, 0]), w(4, 2)),
                 op.Add(op.MatMul(r, w(8, 8)), r)]
    return g


@needs_native
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_value_only_bf16_products_read_is_kept_in_bf16(precision):
    g = products_graph()
    part = lower(g, "native", precision=precision).partitions[0]
    bf16 = {v.producer.name: vp.bf16 for v, vp in part.values.items() if v.producer.op_type == "MatMul"}
    assert bf16 == {"MatMul": precision == "bf16", "MatMul_1": False, "MatMul_4": False}


def test_schedule_is_a_topological_order():
    g = side_branch_graph()
    order = schedule(g, {n: "native" if n.op_type != "Softplus" else "torch" for n in g.nodes})
    seen = set()
    for n in order:
        assert all(v.producer is None or v.producer in seen for v in n.inputs)
        seen.add(n)


def test_an_unknown_backend_is_an_error_naming_the_choices(monkeypatch):
    with pytest.raises(AutofusionError, match="auto, native, torch"):
        autofusion.compile(side_branch_graph(), backend="cuda")
    monkeypatch.setenv("AUTOFUSION_BACKEND", "fast")
    with pytest.raises(AutofusionError, match="AUTOFUSION_BACKEND='fast'"):
        autofusion.compile(side_branch_graph())


@needs_native
def test_symbolic_sizes_are_native_and_set_up_for_each_new_set_on_first_use():
    model = autofusion.compile(conv_relu_model(), level=0, backend="auto")
    reference = autofusion.compile(conv_relu_model(), level=0, backend="torch")
    assert [p.target for p in model.plan.partitions] == ["native"]   # N is symbolic
    assert "set up for each new set of input sizes on first use, without compiling" in model.report.backend
    rng = np.random.default_rng(0)
    for n in (2, 3, 2):
        x = rng.standard_normal((n, 3, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(model(x), reference(x), rtol=1e-5, atol=1e-5)
    (part,) = model.program.native.values()
    assert part.symbols == ["N"] and list(part.built) == [(3,), (2,)]   # the most recent last
    assert "last set up for N=2" in str(model.plan)
