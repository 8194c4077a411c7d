"""What runs each native node, as the built partition reports it (the runtime's arena.cpp step_kernels,
Plan.kernels): oneDNN's implementation, a reorder inside the step, or the runtime's own loop
(gemv, softmax, a gate, the channel means in a gate, a generated kernel); nothing for a view.
The plan, the profile and the HTML report's "runs on" show it.
"""
from __future__ import annotations

import numpy as np
import pytest

import autofusion
from autofusion.backend.native import unavailable
from autofusion.export.graph_views import runs_on
from autofusion.ir import DType
from autofusion.ir.activations import activation_attrs

from .cpu import own_loops
from .test_impls import RNG, axes, const, graph
from .test_mean_in_gate import squeeze_excitation

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")



def compiled(g, **kw):
    return autofusion.compile(g, level=0, backend="native", **kw)


def linear(rows: int, act: str = ""):
    return graph({"x": (rows, 64)}, lambda op, x: [(op.FusedMatMul(
        x, const(op, 64, 40), const(op, 40), **activation_attrs(act)), (rows, 40))])


def kernel(model, op_type: str) -> str:
    (node,) = [n for n in model.graph.nodes if n.op_type == op_type]
    return model.plan.kernels[node]


@own_loops
def test_a_one_row_product_is_the_runtimes_gemv_and_the_plan_says_so():
    model = compiled(linear(1))
    assert kernel(model, "FusedMatMul") == "runtime gemv"
    assert "via onednn [runtime gemv]" in str(model.plan)


def test_a_product_of_two_rows_is_onednns_matmul():
    k = kernel(compiled(linear(2)), "FusedMatMul")
    assert k and "runtime" not in k and "reorder" not in k


@own_loops
def test_a_softmax_over_dense_rows_is_the_runtimes_own():
    g = graph({"x": (4, 100)}, lambda op, x: [(op.Softmax(x, axis=-1), (4, 100))])
    assert kernel(compiled(g), "Softmax") == "runtime softmax"


@own_loops
@pytest.mark.parametrize("residual", [False, True])
def test_a_layer_norm_over_dense_rows_is_the_runtimes_own(residual):
    g = graph({"x": (4, 100), "r": (4, 100)}, lambda op, x, r: [(op.LayerNorm(
        x, const(op, 100), None, r if residual else None, axis=-1), (4, 100))])
    assert kernel(compiled(g), "LayerNorm") == "runtime layernorm"


@own_loops
@pytest.mark.parametrize("act, gate", [("SiLU", "runtime silu"), ("GeluTanh", "runtime tanh-gelu"),
                                       ("Relu", None)])
def test_a_convolution_names_the_gate_the_runtime_computes_after_it(act, gate):
    g = graph({"x": (1, 16, 8, 8)}, lambda op, x: [(op.FusedConv(
        x, const(op, 32, 16, 1, 1), const(op, 32), **activation_attrs(act)), (1, 32, 8, 8))])
    parts = kernel(compiled(g), "FusedConv").split(" + ")
    # the plain input and output reordered to and from the layout oneDNN picked
    assert parts[0].startswith("reorder ") and parts[-1].startswith("reorder ")
    assert "runtime" not in parts[1] and "reorder" not in parts[1]
    assert parts[2:-1] == ([gate] if gate else [])


@own_loops
def test_a_mean_the_gate_sums_has_no_kernel_and_its_producer_says_it_sums():
    model = compiled(squeeze_excitation(24, 9))
    mean = next(n for n in model.graph.nodes if n.op_type == "GlobalAveragePool")
    gate = mean.inputs[0].producer
    assert model.plan.kernels[mean] == ""
    assert model.plan.kernels[gate].endswith(" + runtime silu + channel means")
    assert "via in-gate [" not in str(model.plan)


def test_a_view_runs_nothing():
    g = graph({"x": (2, 3, 4)}, lambda op, x: [(op.Relu(op.Reshape(x, axes(op, 6, 4))), (6, 4))])
    model = compiled(g)
    assert kernel(model, "Reshape") == ""
    assert kernel(model, "Relu")


def test_a_transpose_is_copied_by_the_step_that_reads_it_dense():
    g = graph({"x": (8, 24)}, lambda op, x: [(op.Softmax(op.Transpose(x, perm=[1, 0]), axis=-1), (24, 8))])
    model = compiled(g)
    assert kernel(model, "Transpose") == ""
    assert kernel(model, "Softmax").startswith("reorder ")


@own_loops
def test_a_region_is_a_generated_kernel():
    g = graph({"x": (1, 64, 8, 8), "y": (1, 64, 1, 1)},
              lambda op, x, y: [(op.Relu(op.Add(op.Mul(op.Sigmoid(x), y), x)), (1, 64, 8, 8))])
    model = autofusion.compile(g, backend="native")
    (region,) = [n for n in model.graph.nodes if n.op_type == "Region"]
    assert model.plan.kernels[region] == "generated"


def test_the_profile_and_the_report_show_what_ran():
    model = compiled(linear(2))
    (node,) = model.graph.nodes
    feeds = {"x": RNG.standard_normal((2, 64)).astype(np.float32)}
    prof = autofusion.profile(model, feeds, runs=2, block=1, warmup=1)
    assert prof.by_node()[node.name].impl == f"onednn [{model.plan.kernels[node]}]"
    assert runs_on(model.plan)[node.name].startswith(f"native partition 0 via onednn [{model.plan.kernels[node]}]")


def test_a_step_says_what_it_chose_and_why_and_the_plan_prints_it():
    # a sum of a convolution's result (a layout oneDNN picks) and a plain input of its shape: the
    # input is reordered into the result's layout, as oneDNN's fast binary kernels want
    def build(op, x, y):
        conv = op.FusedConv(x, const(op, 32, 16, 3, 3), const(op, 32), pads=[1, 1, 1, 1])
        conv.shape, conv.dtype = (1, 32, 8, 8), DType.FLOAT
        return [(op.Add(conv, y), (1, 32, 8, 8))]
    model = compiled(graph({"x": (1, 16, 8, 8), "y": (1, 32, 8, 8)}, build))
    add = next(n for n in model.graph.nodes if n.op_type == "Add")
    assert model.plan.choices[add] == ["second operand reordered into the first's layout: oneDNN mixes "
                                       "layouts on its reference kernel only"]
    assert f"chose: {model.plan.choices[add][0]}" in str(model.plan)
    # a step that had nothing to choose says nothing
    relu = compiled(graph({"x": (4, 100)}, lambda op, x: [(op.Relu(x), (4, 100))]))
    assert list(relu.plan.choices.values()) == [[]] and "chose:" not in str(relu.plan)


def test_an_attention_says_where_its_mask_is_added():
    g = graph({"q": (1, 4, 6, 8), "k": (1, 4, 6, 8), "v": (1, 4, 6, 8), "m": (1, 1, 6, 6)},
              lambda op, q, k, v, m: [(op.Attention(q, k, v, m, scale=0.35), (1, 4, 6, 8))])
    model = compiled(g)
    (att,) = model.graph.nodes
    masks = [c for c in model.plan.choices[att] if c.startswith("mask added by")]
    assert len(masks) == 1, model.plan.choices[att]
    assert any(c.startswith("q and k ") for c in model.plan.choices[att])


def test_the_torch_backend_names_no_kernels():
    model = autofusion.compile(linear(1), level=0, backend="torch")
    assert model.plan.kernels == {}
    assert "[" not in str(model.plan)


def test_every_step_of_a_partition_has_its_line():
    g = graph({"x": (1, 16, 8, 8)}, lambda op, x: [(op.GlobalAveragePool(op.FusedConv(
        x, const(op, 16, 16, 3, 3), const(op, 16), pads=[1, 1, 1, 1], **activation_attrs("Relu"))),
        (1, 16, 1, 1))])
    g.nodes[0].outputs[0].shape, g.nodes[0].outputs[0].dtype = (1, 16, 8, 8), DType.FLOAT
    model = compiled(g)
    (part,) = model.plan.partitions
    assert [n in model.plan.kernels for n in part.nodes] == [True, True]
    assert all(model.plan.kernels[n] for n in part.nodes)
