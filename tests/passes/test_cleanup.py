"""Clean-up passes: constant folding, static-shape folding, common subexpressions, dead code.

Each: the graph before/after (golden text or op lists), the count the pass returns, and a
numerical check that the cleaned graph computes what the original does."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import autofusion
from autofusion.backend import evaluate_node
from autofusion.frontend import import_onnx
from autofusion.ir import verify
from autofusion.ir.dims import inferred_dim
from autofusion.ir.symbolic import add, floordiv, mul
from autofusion.passes import cleanup
from autofusion.passes import (eliminate_common_subexpressions, eliminate_dead_code, fold_constants,
                               fold_static_shapes, read_shapes_upstream, refine_shapes,
                               shapes_from_inputs)

from ..fusion.rules.harness import onnx_model


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=outs[0], **attrs)


def assert_same_as_original(model: onnx.ModelProto, graph) -> None:
    """The cleaned graph gives the original model's outputs on random inputs, to float32 rounding:
    a folded constant is a new, dense tensor, and a matrix product over it may sum in another order
    than over the original's transposed view (one ulp apart on some CPUs)."""
    verify(graph)
    original, cleaned = autofusion.compile(model, level=0), autofusion.compile(graph, level=0)
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        feeds = {v.name: rng.standard_normal([d if isinstance(d, int) else 3 for d in v.shape])
                 .astype(np.float32) for v in original.graph.inputs}
        want, got = original.run(feeds), cleaned.run(feeds)
        assert want.keys() == got.keys()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


# ---- constant folding ------------------------------------------------------------------------

def folding_model():
    """y = x · (k1 + k2)ᵀ, with the constant part computed by nodes."""
    nodes = [node("Add", ["k1", "k2"], ["k"]), node("Transpose", ["k"], ["kt"]),
             node("MatMul", ["x", "kt"], ["y"])]
    rng = np.random.default_rng(0)
    return onnx_model(nodes, {"x": (2, 3)}, ["y"], {"k1": rng.standard_normal((4, 3)).astype(np.float32),
                                                     "k2": rng.standard_normal((4, 3)).astype(np.float32)})


def test_constant_subgraph_folds_to_one_constant():
    model = folding_model()
    graph = import_onnx(model)
    assert fold_constants(graph, evaluate_node) == 2
    eliminate_dead_code(graph)
    assert str(graph) == ("graph test(x: float[2,3]) -> (y: float[2,4])\n"
                          "  const kt_folded: float[3,4]\n"
                          "  y: float[2,4] = MatMul(x, kt_folded)")
    k1, k2 = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    np.testing.assert_array_equal(graph.constants["kt_folded"].const, (k1 + k2).T)
    assert_same_as_original(model, graph)


def test_a_graph_output_is_not_folded_away():
    model = onnx_model([node("Neg", ["k"], ["y"]), node("Relu", ["x"], ["z"])], {"x": (2,)}, ["y", "z"],
                       {"k": np.float32([1, -2])})
    graph = import_onnx(model)
    assert fold_constants(graph, evaluate_node) == 0
    assert [n.op for n in graph.nodes] == ["Neg", "Relu"]


def test_folding_stops_at_the_size_limit(monkeypatch):
    monkeypatch.setattr(cleanup, "MAX_FOLDED_BYTES", 8)   # the 4x3 float result is 48 bytes
    graph = import_onnx(folding_model())
    assert fold_constants(graph, evaluate_node) == 0
    assert [n.op for n in graph.nodes] == ["Add", "Transpose", "MatMul"]


# ---- static shapes ---------------------------------------------------------------------------

def test_shape_of_a_static_value_becomes_a_constant():
    nodes = [node("Shape", ["x"], ["s"], start=1), node("Reshape", ["z", "s"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3, 4), "z": (12,)}, ["y"])
    graph = import_onnx(model)
    assert fold_static_shapes(graph) == 1
    assert eliminate_dead_code(graph) == 0
    [reshape] = graph.nodes
    assert reshape.inputs[1].const.tolist() == [3, 4]
    assert_same_as_original(model, graph)


def test_shape_of_a_symbolic_value_stays():
    nodes = [node("Shape", ["x"], ["s"]), node("Cast", ["s"], ["y"], to=1)]
    graph = import_onnx(onnx_model(nodes, {"x": ("n", 3)}, ["y"]))
    assert fold_static_shapes(graph) == 0 and len(graph) == 2


def test_shape_reads_move_to_the_first_value_of_that_shape():
    """Shape(LayerNorm(x + r)) is Shape(x + r) is Shape(x), and LayerNorm's output then has one
    user; the walk stops where the symbolic shape changes."""
    nodes = [node("Add", ["x", "r"], ["h"]), node("LayerNormalization", ["h", "g"], ["n"]),
             node("Shape", ["n"], ["s"]), node("Reshape", ["n", "flat"], ["m"]),
             node("Reshape", ["m", "s"], ["y"]), node("Shape", ["m"], ["t"]), node("Reshape", ["y", "t"], ["z"])]
    model = onnx_model(nodes, {"x": ("b", "s", 4), "r": ("b", "s", 4)}, ["z"],
                       {"g": np.ones(4, np.float32), "flat": np.array([-1, 4])})
    graph = import_onnx(model)
    assert read_shapes_upstream(graph) == 1
    shapes = [n for n in graph.nodes if n.op_type == "Shape"]
    assert [n.inputs[0].name for n in shapes] == ["x", "m"]
    [norm] = [n for n in graph.nodes if n.op_type == "LayerNormalization"]
    assert [user.op_type for user, _ in norm.outputs[0].uses] == ["Reshape"]
    assert read_shapes_upstream(graph) == 0
    assert_same_as_original(model, graph)


def test_the_shape_of_an_intermediate_is_computed_from_the_inputs_shapes():
    """Shape(p), p = MaxPool(x) of x: [b, 4, h], is [4, h // 2] from Shape(x): p is no longer
    read for its shape, only for its values."""
    nodes = [node("MaxPool", ["x"], ["p"], kernel_shape=[2], strides=[2]),
             node("Shape", ["p"], ["s"], start=1), node("Cast", ["s"], ["y"], to=1)]
    model = onnx_model(nodes, {"x": ("b", 4, "h")}, ["y", "p"])
    graph = import_onnx(model)
    refine_shapes(graph)
    assert shapes_from_inputs(graph) == 1
    [pool] = [n for n in graph.nodes if n.op_type == "MaxPool"]
    assert pool.outputs[0].uses == []
    assert {n.inputs[0].name for n in graph.nodes if n.op_type == "Shape"} == {"x"}
    assert "Div" in [n.op_type for n in graph.nodes]
    assert shapes_from_inputs(graph) == 0
    assert_same_as_original(model, graph)


def test_a_shape_with_a_dim_no_input_names_stays():
    nodes = [node("NonZero", ["x"], ["i"]), node("Shape", ["i"], ["s"]), node("Cast", ["s"], ["y"], to=1)]
    graph = import_onnx(onnx_model(nodes, {"x": ("n", 3)}, ["y"]))
    assert shapes_from_inputs(graph) == 0


# ---- common subexpressions --------------------------------------------------------------------

def test_duplicates_merge_but_different_attributes_do_not():
    nodes = [node("Softmax", ["x"], ["a"], axis=1), node("Softmax", ["x"], ["b"], axis=1),
             node("Softmax", ["x"], ["c"], axis=0), node("Add", ["a", "b"], ["ab"]),
             node("Add", ["ab", "c"], ["y"])]
    model = onnx_model(nodes, {"x": (3, 4)}, ["y"])
    graph = import_onnx(model)
    assert eliminate_common_subexpressions(graph) == 1
    assert str(graph).splitlines()[1:] == [
        "  a: float[3,4] = Softmax[axis=1](x)",
        "  c: float[3,4] = Softmax[axis=0](x)",
        "  ab: float[3,4] = Add(a, a)",
        "  y: float[3,4] = Add(ab, c)"]
    assert_same_as_original(model, graph)


def test_merging_cascades_through_users():
    """Once the two Relus are one, the two Negs of them are duplicates too."""
    nodes = [node("Relu", ["x"], ["a"]), node("Relu", ["x"], ["b"]), node("Neg", ["a"], ["na"]),
             node("Neg", ["b"], ["nb"]), node("Mul", ["na", "nb"], ["y"])]
    model = onnx_model(nodes, {"x": (5,)}, ["y"])
    graph = import_onnx(model)
    assert eliminate_common_subexpressions(graph) == 2
    assert [n.op for n in graph.nodes] == ["Relu", "Neg", "Mul"]
    assert_same_as_original(model, graph)


def test_a_duplicate_graph_output_keeps_its_name():
    model = onnx_model([node("Relu", ["x"], ["y"]), node("Relu", ["x"], ["z"])], {"x": (5,)}, ["y", "z"])
    graph = import_onnx(model)
    assert eliminate_common_subexpressions(graph) == 0
    assert [v.name for v in graph.outputs] == ["y", "z"]


# ---- dead code ------------------------------------------------------------------------------

def test_dead_nodes_and_unused_constants_are_removed():
    nodes = [node("Relu", ["x"], ["y"]), node("Neg", ["x"], ["dead1"]), node("Mul", ["dead1", "k"], ["dead2"])]
    model = onnx_model(nodes, {"x": (2, 3)}, ["y"], {"k": np.float32(2), "unused": np.float32(3)})
    graph = import_onnx(model)
    assert eliminate_dead_code(graph) == 4   # two nodes, then k and unused
    assert str(graph) == ("graph test(x: float[2,3]) -> (y: float[2,3])\n"
                          "  y: float[2,3] = Relu(x)")
    assert_same_as_original(model, graph)


def test_a_node_with_one_live_output_stays():
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2, name="split"),
             node("Relu", ["a"], ["y"])]
    graph = import_onnx(onnx_model(nodes, {"x": (4,)}, ["y"], opset=18))
    assert eliminate_dead_code(graph) == 0 and len(graph) == 2


def test_the_pipeline_cleans_to_a_fixed_point():
    """Folding exposes dead constants and duplicates; level 1 runs the passes until none changes."""
    model = folding_model()
    compiled = autofusion.compile(model, level=1)
    assert [n.op for n in compiled.graph.nodes] == ["autofusion::FusedMatMul"]   # the rule ran after
    assert compiled.report.passes["constants folded"] == 2
    assert_same_as_original(model, compiled.graph)


# ---- CastLike with a known target type -----------------------------------------------------------

def test_cast_like_of_a_constant_becomes_a_foldable_cast():
    """dynamo's zero bias: Expand(CastLike(0, activation), Shape(weight)[:1]) folds to a constant."""
    nodes = [node("Relu", ["x"], ["r"]), node("CastLike", ["zero", "r"], ["z"]),
             node("Add", ["r", "z"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3)}, ["y"], {"zero": np.array(0, np.float64)})
    graph = import_onnx(model)
    assert cleanup.resolve_cast_like(graph) == 1
    assert [n.op_type for n in graph.nodes] == ["Relu", "Cast", "Add"]
    assert fold_constants(graph, evaluate_node) == 1
    assert [n.op_type for n in graph.nodes] == ["Relu", "Add"]
    assert_same_as_original(model, graph)


# ---- shapes re-derived after folding ----------------------------------------------------------

def test_expand_to_a_folded_shape_gets_a_static_shape():
    """BERT's 4-D mask: Expand(mask, Concat(Shape(ids)[0], 1, S, S)) is static once folded."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["b"], axis=0),
             node("Unsqueeze", ["b", "zero1"], ["b1"]), node("Concat", ["b1", "tail"], ["shape"], axis=0),
             node("Expand", ["x", "shape"], ["e"]), node("Relu", ["e"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 1, 1, 4)}, ["y"],
                       {"zero": np.array(0, np.int64), "zero1": np.array([0], np.int64),
                        "tail": np.array([3, 4, 4], np.int64)})
    graph = import_onnx(model)
    graph.nodes[-1].outputs[0].shape = ("unk__0", "unk__1", 4, 4)   # what inference may leave
    expand = next(n for n in graph.nodes if n.op_type == "Expand")
    expand.outputs[0].shape = ("unk__0", "unk__1", 4, 4)
    while fold_static_shapes(graph) + fold_constants(graph, evaluate_node):
        pass
    assert cleanup.refine_shapes(graph) == 2
    assert expand.outputs[0].shape == (2, 3, 4, 4) and graph.nodes[-1].outputs[0].shape == (2, 3, 4, 4)
    assert cleanup.refine_shapes(graph) == 0   # a fixed point
    assert_same_as_original(model, graph)


def test_a_view_with_symbolic_dims_gets_its_head_count():
    """HF's x.view(*x.shape[:-1], -1, 64) on [b, s, 768]: the target is built from Shape(x) at
    run time, and the -1 is 12 once b and s cancel. The symbols x already had stay."""
    nodes = [node("Shape", ["x"], ["sx"]), node("Slice", ["sx", "zero", "minus1"], ["bs"]),
             node("Concat", ["bs", "tail"], ["target"], axis=0), node("Reshape", ["x", "target"], ["h"]),
             node("Transpose", ["h"], ["y"], perm=[0, 2, 1, 3])]
    model = onnx_model(nodes, {"x": ("b", "s", 768)}, ["y"],
                       {"zero": np.array([0]), "minus1": np.array([-1]), "tail": np.array([-1, 64])})
    graph = import_onnx(model)
    cleanup.refine_shapes(graph)
    assert graph.outputs[0].shape == ("b", 12, "s", 64)
    assert_same_as_original(model, graph)


@pytest.mark.parametrize("total, others, dim", [
    (("b", "s", 768), ["b", "s", 64], 12), (("b", "s", 768), ["b", 12, 64], "s"),
    (("b", "s", 768), ["b", 7, 64], None), (("b", "s", 768), ["t", 12, 64], None),
    (("b", "s", 768), ["b", 64], mul(12, "s")), (("b", None, 768), ["b", 12, 64], None)])
def test_the_dim_a_reshape_infers(total, others, dim):
    assert inferred_dim(total, others) == dim


@pytest.mark.parametrize("old, new, merged", [
    (("unk__3", 4), ("seq", 4), ("seq", 4)),           # an input's name replaces a made-up one
    (("batch", 4), ("seq", 4), ("batch", 4)),          # an input's name already there stays
    (("unk__3", 4), ("unk__9", 4), ("unk__3", 4)),     # one made-up name is as good as another
    (("floor(seq/2) + 1", 4), (add(floordiv("seq", 2), 1), 4), (add(floordiv("seq", 2), 1), 4)),
    ((None, "unk__1"), (2, 3), (2, 3)),                 # sizes always win
    ((5, None), (None, None), (5, None))])
def test_refined_shapes_merge_what_they_add(old, new, merged):
    """The graph's inputs name batch and seq; an exporter's text for a computed size names
    nothing a call gives, and the rules' derived dim replaces it."""
    assert cleanup._merged(old, new, {"batch", "seq"}) == merged


def test_a_slice_of_a_shape_folds_with_onnx_clamping():
    """Shape [2,3,4] read back from before its start: ONNX starts at index 0 (Python: nothing)."""
    nodes = [node("Shape", ["x"], ["s"]), node("Slice", ["s", "start", "end", "axis", "step"], ["picked"]),
             node("Reshape", ["z", "picked"], ["y"])]
    consts = {"start": np.array([-10]), "end": np.array([-10]), "axis": np.array([0]), "step": np.array([-1])}
    model = onnx_model(nodes, {"x": (2, 3, 4), "z": (2,)}, ["y"], consts)
    graph = import_onnx(model)
    assert fold_static_shapes(graph) == 2
    assert graph.nodes[0].inputs[1].const.tolist() == [2]
    assert_same_as_original(model, graph)
