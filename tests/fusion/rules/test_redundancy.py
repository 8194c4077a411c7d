"""Redundancy rules: Transpose∘Transpose, Reshape∘Reshape, Squeeze∘Unsqueeze pairs, and
Identity / inference Dropout / same-type Cast removed; graph outputs keep their names."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from .harness import assert_same_outputs, fuse, matched, node, onnx_model, ops, torch_model






# ---- from an exported module: every redundancy at once -----------------------------------------

class Redundant(torch.nn.Module):   # (the exporter composes transposes and drops Dropout itself)
    def forward(self, x):                                # x: [2, 3, 4]
        y = x.reshape(4, 6).reshape(2, 2, 6)             # one Reshape
        y = y.unsqueeze(0).squeeze(0)                    # cancels
        return torch.relu(y.to(torch.float32))           # a Cast to float of a float


def test_exported_redundancies_are_removed():
    model = torch_model(Redundant(), (2, 3, 4), opset=13)
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["Reshape", "Relu"]
    assert {r.name: r.matched for r in report.rules if r.matched} == {
        "ReshapeReshapeFusionOp": 1, "SqueezeUnsqueezeFusionOp": 1, "NoOpRemovalFusionOp": 1}
    assert not report.near_misses


def test_exported_redundancies_fused_equals_unfused():
    assert_same_outputs(torch_model(Redundant(), (2, 3, 4), opset=13), level=1, rtol=0)


# ---- Transpose∘Transpose -------------------------------------------------------------------

def test_transposes_compose_golden():
    nodes = [node("Transpose", ["x"], ["a"], perm=[1, 2, 0]), node("Transpose", ["a"], ["y"], perm=[0, 2, 1])]
    model = onnx_model(nodes, {"x": (2, 3, 4)}, ["y"])
    graph, report = fuse(model, level=1)
    assert matched(report, "TransposeTransposeFusionOp") == 1
    assert str(graph) == ("graph test(x: float[2,3,4]) -> (y: float[3,2,4])\n"
                          "  y: float[3,2,4] = Transpose[perm=[1, 0, 2]](x)")
    assert_same_outputs(model, level=1, rtol=0)


def test_default_perm_reverses_the_axes():
    nodes = [node("Transpose", ["x"], ["a"]), node("Transpose", ["a"], ["y"], perm=[1, 0, 2])]
    model = onnx_model(nodes, {"x": (2, 3, 4)}, ["y"])
    graph, _ = fuse(model, level=1)
    assert [(n.op, n.attrs) for n in graph.nodes] == [("Transpose", {"perm": [1, 2, 0]})]
    assert_same_outputs(model, level=1, rtol=0)


def test_cancelling_transposes_at_a_graph_output_leave_an_identity_that_keeps_the_name():
    nodes = [node("Transpose", ["x"], ["a"], perm=[0, 2, 1]), node("Transpose", ["a"], ["y"], perm=[0, 2, 1])]
    model = onnx_model(nodes, {"x": (2, 3, 4)}, ["y"])
    graph, report = fuse(model, level=1)
    assert str(graph) == ("graph test(x: float[2,3,4]) -> (y: float[2,3,4])\n"
                          "  y: float[2,3,4] = Identity(x)")
    assert not report.near_misses   # the Identity stays, and that is not a missed fusion
    assert_same_outputs(model, level=1, rtol=0)


def test_shared_inner_transpose_is_a_near_miss():
    nodes = [node("Transpose", ["x"], ["a"], perm=[1, 0]), node("Transpose", ["a"], ["y"], perm=[1, 0]),
             node("Relu", ["a"], ["z"])]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 3)}, ["y", "z"]), level=1)
    assert ops(graph) == ["Transpose", "Transpose", "Relu"]
    [miss] = [m for m in report.near_misses if m.rule == "TransposeTransposeFusionOp"]
    assert miss.reason == "'a' is also used by Relu 'z', so it must stay in memory"


# ---- Reshape∘Reshape -------------------------------------------------------------------------

def test_reshapes_keep_the_last_and_spell_out_copied_dims():
    nodes = [node("Reshape", ["x", "s1"], ["a"]), node("Reshape", ["a", "s2"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3, 4)}, ["y"], {"s1": np.array([6, 4]), "s2": np.array([0, -1, 2])})
    graph, report = fuse(model, level=1)
    assert matched(report, "ReshapeReshapeFusionOp") == 1
    assert str(graph) == ("graph test(x: float[2,3,4]) -> (y: float[6,2,2])\n"
                          "  const shape: int64[3]\n"
                          "  y: float[6,2,2] = Reshape(x, shape)")
    assert graph.constants["shape"].const.tolist() == [6, -1, 2]   # the 0 copied a's 6, not x's 2
    assert_same_outputs(model, level=1, rtol=0)


def test_reshape_to_a_shape_read_off_a_shape_op_keeps_the_last():
    # Shape(z) holds no 0 (its symbols are sizes): the second Reshape copies nothing of the first's
    nodes = [node("Reshape", ["x", "s1"], ["a"]), node("Shape", ["z"], ["s2"]),
             node("Reshape", ["a", "s2"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3, 4), "z": ("n", 12)}, ["y"], {"s1": np.array([6, 4])})
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["Shape", "Reshape"]
    assert matched(report, "ReshapeReshapeFusionOp") == 1
    assert_same_outputs(model, level=1, rtol=0)   # (n given 2)


def test_reshape_to_a_shape_given_at_run_time_is_a_near_miss():
    nodes = [node("Reshape", ["x", "s1"], ["a"]), node("Reshape", ["a", "s2"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3, 4), "s2": (2,)}, ["y"], {"s1": np.array([6, 4])})
    model.graph.input[1].type.tensor_type.elem_type = onnx.TensorProto.INT64
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["Reshape", "Reshape"]
    [miss] = report.near_misses
    assert miss.reason == ("Reshape 'y': its shape 's2' is computed at run time and may copy dims (0) "
                           "of the intermediate")


# ---- Squeeze∘Unsqueeze and Unsqueeze∘Squeeze ---------------------------------------------------

@pytest.mark.parametrize("opset", [11, 13])   # axes as attribute, then as input
@pytest.mark.parametrize("order", ["squeeze_unsqueeze", "unsqueeze_squeeze"])
def test_squeeze_unsqueeze_pairs_cancel(order, opset):
    axes = {"axes": [0, -1]} if opset < 13 else {}
    axes_in = ["ax"] if opset >= 13 else []
    first, second = ("Unsqueeze", "Squeeze") if order == "squeeze_unsqueeze" else ("Squeeze", "Unsqueeze")
    nodes = [node(first, ["x", *axes_in], ["a"], **axes), node(second, ["a", *axes_in], ["b"], **axes),
             node("Relu", ["b"], ["y"])]
    shape = (2, 3) if first == "Unsqueeze" else (1, 2, 3, 1)
    model = onnx_model(nodes, {"x": shape}, ["y"], {"ax": np.array([0, -1])} if axes_in else {}, opset=opset)
    graph, report = fuse(model, level=1)
    assert matched(report, "SqueezeUnsqueezeFusionOp") == 1
    assert str(graph).splitlines()[1:] == [f"  y: float[{','.join(map(str, shape))}] = Relu(x)"]
    assert_same_outputs(model, level=1, rtol=0)


def test_squeeze_without_axes_cancels_when_the_shape_tells_which():
    nodes = [node("Squeeze", ["x"], ["a"]), node("Unsqueeze", ["a", "ax"], ["b"]), node("Relu", ["b"], ["y"])]
    graph, _ = fuse(onnx_model(nodes, {"x": (2, 1, 3)}, ["y"], {"ax": np.array([1])}, opset=13), level=1)
    assert ops(graph) == ["Relu"]


def test_squeeze_of_other_axes_is_a_near_miss():
    nodes = [node("Unsqueeze", ["x", "a0"], ["a"]), node("Squeeze", ["a", "a1"], ["b"]),
             node("Relu", ["b"], ["y"])]
    model = onnx_model(nodes, {"x": (1, 3)}, ["y"], {"a0": np.array([0]), "a1": np.array([1])}, opset=13)
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["Unsqueeze", "Squeeze", "Relu"]
    [miss] = [m for m in report.near_misses if m.rule == "SqueezeUnsqueezeFusionOp"]
    assert miss.reason == "Unsqueeze 'a' works on axes [0] but Squeeze 'b' on [1]"


# ---- Identity, Dropout, Cast -----------------------------------------------------------------

def test_no_ops_golden_before_after():
    nodes = [node("Identity", ["x"], ["a"]), node("Dropout", ["a", "ratio", "off"], ["b"]),
             node("Cast", ["b"], ["c"], to=1), node("CastLike", ["c", "x"], ["d"]),
             node("Reshape", ["d", "same"], ["e"]), node("Relu", ["e"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3)}, ["y"], {"ratio": np.float32(0.5), "off": np.array(False),
                                                     "same": np.array([2, -1])})
    graph, report = fuse(model, level=1)
    assert matched(report, "NoOpRemovalFusionOp") == 5
    assert str(graph) == ("graph test(x: float[2,3]) -> (y: float[2,3])\n"
                          "  y: float[2,3] = Relu(x)")
    assert_same_outputs(model, level=1, rtol=0)


def test_dropout_with_an_unused_mask_is_removed():
    nodes = [helper.make_node("Dropout", ["x"], ["a", "mask"], name="drop"), node("Relu", ["a"], ["y"])]
    graph, _ = fuse(onnx_model(nodes, {"x": (2, 3)}, ["y"], opset=11), level=1)
    assert ops(graph) == ["Relu"]


def test_training_dropout_is_a_near_miss():
    nodes = [node("Dropout", ["x", "ratio", "on"], ["a"]), node("Relu", ["a"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3)}, ["y"], {"ratio": np.float32(0.5), "on": np.array(True)})
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["Dropout", "Relu"]
    [miss] = report.near_misses
    assert miss.reason == "Dropout 'a': training_mode 'on' is not a constant false"


def test_cast_to_another_type_stays():
    nodes = [node("Cast", ["x"], ["a"], to=7), node("Cast", ["a"], ["y"], to=1)]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 3)}, ["y"]), level=1)
    assert matched(report, "NoOpRemovalFusionOp") == 0
    assert ops(graph) == ["Cast", "Cast"]


def test_a_removed_no_op_before_a_graph_output_hands_its_name_to_the_value():
    nodes = [node("Relu", ["x"], ["r"]), node("Identity", ["r"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3)}, ["y"])
    graph, report = fuse(model, level=1)
    assert str(graph) == ("graph test(x: float[2,3]) -> (y: float[2,3])\n"
                          "  y: float[2,3] = Relu(x)")
    assert_same_outputs(model, level=1, rtol=0)


def test_a_cast_that_changes_the_type_is_not_a_near_miss():
    nodes = [node("Cast", ["x"], ["h"], to=10), node("Cast", ["h"], ["y"], to=1)]   # via float16
    graph, report = fuse(onnx_model(nodes, {"x": (2, 3)}, ["y"]), level=1)
    assert ops(graph) == ["Cast", "Cast"] and not report.near_misses


def test_reshape_to_another_shape_stays():
    model = onnx_model([node("Reshape", ["x", "s"], ["y"])], {"x": (2, 3)}, ["y"], {"s": np.array([3, 2])})
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["Reshape"] and matched(report, "NoOpRemovalFusionOp") == 0
