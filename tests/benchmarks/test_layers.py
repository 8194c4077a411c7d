"""The layer comparison's bookkeeping: which anchor (Conv, Gemm, MatMul) each node's time goes to."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from autofusion.benchmarks.layers import Side, anchors_of


def _model():
    """x -> 1x1 conv -> BN -> Relu -> 3x3 depthwise -> + x = y -> Flatten -> z."""
    inits = [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in
             [("w1", (4, 4, 1, 1)), ("w2", (4, 1, 3, 3)), ("s", (4,)), ("b", (4,)), ("m", (4,)), ("v", (4,))]]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="/a/Conv"),
             helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"], name="/a/BN"),
             helper.make_node("Relu", ["n1"], ["r1"], name="/a/Relu"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="/b/Conv", group=4, pads=[1] * 4),
             helper.make_node("Add", ["c2", "x"], ["y"], name="/b/Add"),
             helper.make_node("Flatten", ["y"], ["z"], name="/flat")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g)


def test_each_anchor_has_a_kind_and_its_followers_time():
    kinds, owner = anchors_of(_model())
    assert kinds == {"/a/Conv": "conv 1x1", "/b/Conv": "depthwise 3x3"}
    assert owner["/a/BN"] == owner["/a/Relu"] == "/a/Conv"
    assert owner["/b/Add"] == owner["y"] == "/b/Conv"   # a node's output names it too
    assert "/flat" not in owner


def test_a_fused_node_goes_to_the_anchor_it_holds_before_a_follower_of_another():
    _, owner = anchors_of(_model())
    side = Side()
    # autofusion's origin order: the Relu of /a first, then the depthwise /b it fused with
    side.add(["/a/Relu", "/b/Conv"], owner, "FusedConv", "brdgmm", 1.0)
    # OpenVINO's: an op of its own naming, then the originals with suffixes
    side.add(["Multiply_1", "/a/Conv/WithoutBiases", "/a/BN"], owner, "Convolution", "brgconv", 2.0)
    side.add(["z_reorder"], owner, "Reorder", "reorder", 0.5)
    assert dict(side.anchored) == {"/b/Conv": 1.0, "/a/Conv": 2.0}
    assert side.kernels == {"/b/Conv": "brdgmm", "/a/Conv": "brgconv"}
    assert dict(side.unanchored) == {"Reorder": 0.5}
