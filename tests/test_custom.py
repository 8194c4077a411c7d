"""Custom operators: registered once, they load from ONNX, run, and join regions when their
meaning is elementwise. Bound: fused vs op by op within 1e-6 (float32, the same ops)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import autofusion
from autofusion.errors import AutofusionError

DOMAIN = "test.custom"


@pytest.fixture
def registered():
    names = []

    def register(name, *args, **kwargs):
        names.append(name)
        return autofusion.register_op(DOMAIN, name, *args, **kwargs)
    yield register
    for name in names:
        autofusion.unregister_op(DOMAIN, name)


def model_with(op: str, shape=(2, 3, 8, 8), **attrs):
    """x → Relu → Abs → op → Add x: the custom op between built-in elementwise ops."""
    nodes = [helper.make_node("Relu", ["x"], ["q"], name="relu"),
             helper.make_node("Abs", ["q"], ["r"], name="abs"),
             helper.make_node(op, ["r"], ["c"], domain=DOMAIN, name="custom", **attrs),
             helper.make_node("Add", ["c", "x"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def swish(op, node, x):
    """x·sigmoid(beta·x)"""
    return op.Mul(x, op.Sigmoid(op.Mul(x, node.attr("beta", 1.0))))


def reference(x, beta=1.0):
    r = np.maximum(x, 0)
    return r / (1 + np.exp(-beta * r)) + x


X = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)


def test_an_elementwise_custom_op_joins_a_region(registered):
    registered("Swish", decomposition=swish)
    model = model_with("Swish", beta=2.0)
    fused = autofusion.compile(model)
    assert [n.op_type for n in fused.graph.nodes] == ["Region"]
    assert [r.ops for r in fused.report.regions] == [["Relu", "Abs", "Swish", "Add"]]
    np.testing.assert_allclose(fused(X), autofusion.compile(model, level=0)(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fused(X), reference(X, 2.0), rtol=1e-5, atol=1e-6)
    if fused.plan.native is None and fused.backend != "torch":   # inside the generated kernel
        assert re.search(r"af_sigmoid\(\(t1(\[u\])? \* 2\.0f\)\)", fused.native_source)   # [u]: unrolled


def test_a_model_with_a_fused_custom_op_exports_and_reads_back(registered, tmp_path):
    registered("Swish", decomposition=swish)
    fused = autofusion.compile(model_with("Swish"))
    path = tmp_path / "fused.onnx"
    autofusion.export_onnx(fused.graph, path)
    again = autofusion.compile(str(path))
    assert [n.op_type for n in again.graph.nodes] == ["Region"]
    np.testing.assert_allclose(again(X), reference(X), rtol=1e-5, atol=1e-6)


def test_a_torch_kernel_is_used_where_given(registered):
    calls = []

    def kernel(x, beta=1.0):
        calls.append(beta)
        return x * torch.sigmoid(beta * x)
    registered("Swish", decomposition=swish, torch=kernel)
    m = autofusion.compile(model_with("Swish", beta=3.0), level=0)
    np.testing.assert_allclose(m(X), reference(X, 3.0), rtol=1e-5, atol=1e-6)
    assert calls == [3.0]


def test_an_opaque_custom_op_runs_alone_and_the_report_says_why(registered):
    registered("Swish", torch=lambda x, beta=1.0: x * torch.sigmoid(beta * x))
    m = autofusion.compile(model_with("Swish"))
    assert "Swish" in [n.op_type for n in m.graph.nodes]
    miss = [nf for nf in m.report.not_auto_fused if nf.op == "Swish"]
    assert [nf.code for nf in miss] == ["opaque"] and miss[0].node == "custom"
    np.testing.assert_allclose(m(X), reference(X), rtol=1e-5, atol=1e-6)


def test_a_decomposition_with_a_non_elementwise_op_needs_a_kernel(registered):
    def softmax(op, node, x):
        return op.Softmax(x, axis=-1)
    with pytest.raises(AutofusionError, match="Softmax has no scalar expression"):
        registered("Soft", decomposition=softmax)
    registered("Soft2", "reduction", decomposition=softmax, shape=lambda n: [(n.inputs[0].shape, n.inputs[0].dtype)])
    m = autofusion.compile(model_with("Soft2"))
    x = torch.from_numpy(X)
    np.testing.assert_allclose(m(X), (torch.softmax(x.relu(), -1) + x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "give its meaning"),
    ({"decomposition": swish, "op_class": "weird"}, "op_class 'weird'"),
    ({"decomposition": swish, "op_class": "complex"}, "needs its shape rule"),
])
def test_bad_registrations_are_clear_errors(kwargs, message):
    with pytest.raises(AutofusionError, match=message):
        autofusion.register_op(DOMAIN, "Bad", **kwargs)
    with pytest.raises(AutofusionError, match="a domain of its own"):
        autofusion.register_op("", "Relu2", decomposition=swish)


def test_registering_twice_is_an_error(registered):
    registered("Swish", decomposition=swish)
    with pytest.raises(AutofusionError, match="already registered"):
        autofusion.register_op(DOMAIN, "Swish", decomposition=swish)
