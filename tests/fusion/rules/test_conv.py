"""Conv rules: BatchNorm folded into the weights, residual and activation epilogues, and the
FusedConv kernel on both its implementations (oneDNN prepacked channels-last, PyTorch's conv).

Tolerance: fused and unfused agree to 1e-5 of the output's magnitude; the fused conv sums in a
different order (oneDNN's blocking) and with the BatchNorm scale folded into the weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import autofusion
from autofusion.backend.torch_cpu import fused
from tests.models.architectures import ARCHITECTURES, Bottleneck, export

from .harness import assert_same_outputs, fuse, matched, near_miss, onnx_model


@pytest.fixture(params=["onednn", "pytorch"])
def conv_path(request, monkeypatch):
    """Run every FusedConv on oneDNN, or every one on PyTorch's conv, whatever its size."""
    monkeypatch.setattr(fused, "conv_onednn_pays", lambda *args: request.param == "onednn")
    return request.param


class ConvBN(nn.Module):
    """conv → BatchNorm? → activation?, in 1-D, 2-D or 3-D."""

    def __init__(self, act=None, bn=True, cin=8, cout=16, k=3, stride=1, padding=1, dilation=1,
                 groups=1, dims=2):
        super().__init__()
        conv, norm = {1: (nn.Conv1d, nn.BatchNorm1d), 2: (nn.Conv2d, nn.BatchNorm2d),
                      3: (nn.Conv3d, nn.BatchNorm3d)}[dims]
        self.conv = conv(cin, cout, k, stride, padding, dilation, groups, bias=not bn)
        self.bn = norm(cout) if bn else nn.Identity()
        self.act = act or nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Residual(nn.Module):
    """act(BN(conv(x)) + x): a residual block's tail, any activation."""

    def __init__(self, act=None, c=16):
        super().__init__()
        self.body = ConvBN(cin=c, cout=c)
        self.act = act or nn.Identity()

    def forward(self, x):
        return self.act(self.body(x) + x)


def exported(module, *shape):
    """Exported with non-trivial BatchNorm statistics (so folding is really tested)."""
    torch.manual_seed(0)
    for m in module.modules():   # export() randomises BatchNorm2d only
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm3d)):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.5, 0.5)
    return export(module, (torch.randn(*shape),), ["x"])


X2 = (2, 8, 12, 12)
NUMERIC = {
    "bn": (ConvBN(), X2),
    "bn-relu": (ConvBN(nn.ReLU()), X2),
    "bn-relu6": (ConvBN(nn.ReLU6()), X2),
    "bn-leaky-relu": (ConvBN(nn.LeakyReLU(0.1)), X2),
    "bn-sigmoid": (ConvBN(nn.Sigmoid()), X2),
    "bn-tanh": (ConvBN(nn.Tanh()), X2),
    "bn-hardswish": (ConvBN(nn.Hardswish()), X2),
    "bn-hardsigmoid": (ConvBN(nn.Hardsigmoid()), X2),
    "bn-elu": (ConvBN(nn.ELU(0.5)), X2),
    "bn-silu": (ConvBN(nn.SiLU()), X2),
    "bn-gelu": (ConvBN(nn.GELU()), X2),
    "conv-bias-relu": (ConvBN(nn.ReLU(), bn=False), X2),
    "conv-bias": (ConvBN(bn=False), X2),
    "depthwise": (ConvBN(nn.ReLU(), cin=8, cout=8, groups=8), X2),
    "depthwise-multiplier": (ConvBN(nn.ReLU6(), cin=8, cout=16, groups=8), X2),
    "grouped": (ConvBN(nn.ReLU(), groups=4), X2),
    "strided": (ConvBN(nn.ReLU(), stride=2), X2),
    "dilated": (ConvBN(nn.ReLU(), padding=2, dilation=2), X2),
    "strided-dilated-5x5": (ConvBN(nn.ReLU(), k=5, stride=2, padding=3, dilation=2), X2),
    "1x1": (ConvBN(nn.ReLU(), k=1, padding=0), X2),
    "1d": (ConvBN(nn.ReLU(), dims=1, stride=2), (2, 8, 20)),
    "3d": (ConvBN(nn.ReLU(), dims=3, cin=4, cout=8), (2, 4, 5, 6, 7)),
    "residual": (Residual(), (2, 16, 10, 10)),
    "residual-relu": (Residual(nn.ReLU()), (2, 16, 10, 10)),
    "residual-sigmoid": (Residual(nn.Sigmoid()), (2, 16, 10, 10)),
    "residual-hardswish": (Residual(nn.Hardswish()), (2, 16, 10, 10)),
}


@pytest.mark.parametrize("case", NUMERIC)
def test_fused_equals_unfused_on_random_inputs(case, conv_path):
    module, shape = NUMERIC[case]
    model = exported(module, *shape)
    graph, _ = fuse(model)
    assert [n.op for n in graph.nodes] == ["autofusion::FusedConv"]   # the whole chain, one node
    assert_same_outputs(model, level=2, rtol=1e-5)


# ---- each rule: the graph before and after, and a refusal with its reason ------------------

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
BN = {name: a.astype(np.float32) for name, a in (
    ("scale", RNG.uniform(0.5, 1.5, 3)), ("shift", RNG.standard_normal(3)),
    ("mean", RNG.standard_normal(3)), ("var", RNG.uniform(0.5, 1.5, 3)))}
CONV = helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1])
BATCHNORM = helper.make_node("BatchNormalization", ["c", *BN], ["n"], name="bn")


def header(inputs="x: float[1,2,5,5]"):
    return f"graph test({inputs}) -> (y: float[1,3,5,5])\n"


def test_conv_bn_relu_golden():
    model = onnx_model([CONV, BATCHNORM, helper.make_node("Relu", ["n"], ["y"])],
                       {"x": (1, 2, 5, 5)}, ["y"], {"W": W, **BN})
    graph, report = fuse(model, level=1)
    assert matched(report, "ConvBNReluFusionOp") == 1
    assert str(graph) == header() + (
        "  const W_bn_folded: float[3,2,3,3]\n"
        "  const shift_bn_folded: float[3]\n"
        "  y: float[1,3,5,5] = autofusion::FusedConv[activation='Relu', activation_params=[], "
        "pads=[1, 1, 1, 1]](x, W_bn_folded, shift_bn_folded)")
    s = BN["scale"].astype(np.float64) / np.sqrt(BN["var"].astype(np.float64) + 1e-5)
    np.testing.assert_allclose(graph.constants["W_bn_folded"].const, W * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(graph.constants["shift_bn_folded"].const,
                               BN["shift"] - BN["mean"] * s, rtol=1e-6)


def test_conv_bn_golden():
    model = onnx_model([CONV, helper.make_node("BatchNormalization", ["c", *BN], ["y"], name="bn")],
                       {"x": (1, 2, 5, 5)}, ["y"], {"W": W, **BN})
    graph, report = fuse(model, level=1)
    assert matched(report, "ConvBNFusionOp") == 1
    assert str(graph).splitlines()[-1] == (
        "  y: float[1,3,5,5] = autofusion::FusedConv[pads=[1, 1, 1, 1]](x, W_bn_folded, shift_bn_folded)")


def test_plain_conv_golden():
    b = np.ones(3, np.float32)
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["y"], name="conv", strides=[2, 2],
                              auto_pad="SAME_UPPER")]
    graph, report = fuse(onnx_model(nodes, {"x": (1, 2, 10, 10)}, ["y"], {"W": W, "b": b}), level=1)
    assert matched(report, "ConvFusionOp") == 1
    assert str(graph).splitlines()[-1] == (   # SAME_UPPER: total pad 1, the odd unit at the end
        "  y: float[1,3,5,5] = autofusion::FusedConv[pads=[0, 0, 1, 1], strides=[2, 2]](x, W, b)")


def test_conv_add_relu_golden():
    nodes = [CONV, BATCHNORM, helper.make_node("Add", ["z", "n"], ["a"], name="add"),   # commuted
             helper.make_node("Relu", ["a"], ["y"])]
    model = onnx_model(nodes, {"x": (1, 2, 5, 5), "z": (1, 3, 5, 5)}, ["y"], {"W": W, **BN})
    graph, report = fuse(model, level=2)
    assert matched(report, "ConvAddReluFusionOp") == 1
    assert str(graph).splitlines()[-1] == (
        "  y: float[1,3,5,5] = autofusion::FusedConv[activation='Relu', activation_params=[], "
        "pads=[1, 1, 1, 1]](x, W_bn_folded, shift_bn_folded, z)")
    assert_same_outputs(model, level=2)


def test_conv_add_golden_then_an_activation_composes():
    """Conv+BN+Add+Sigmoid: folded, then the residual, then the activation appended."""
    nodes = [CONV, BATCHNORM, helper.make_node("Add", ["n", "z"], ["a"], name="add"),
             helper.make_node("Sigmoid", ["a"], ["y"])]
    model = onnx_model(nodes, {"x": (1, 2, 5, 5), "z": (1, 3, 5, 5)}, ["y"], {"W": W, **BN})
    graph, report = fuse(model, level=2)
    rules = ("ConvBNFusionOp", "ConvAddFusionOp", "ConvActivationFusionOp")
    assert [matched(report, r) for r in rules] == [1, 1, 1]
    assert str(graph).splitlines()[-1] == (
        "  y: float[1,3,5,5] = autofusion::FusedConv[activation='Sigmoid', activation_params=[], "
        "pads=[1, 1, 1, 1]](x, W_bn_folded, shift_bn_folded, z)")
    assert_same_outputs(model, level=2)


def test_relu6_clip_golden():
    nodes = [CONV, BATCHNORM, helper.make_node("Clip", ["n", "lo", "hi"], ["y"], name="clip")]
    model = onnx_model(nodes, {"x": (1, 2, 5, 5)}, ["y"],
                       {"W": W, **BN, "lo": np.float32(0), "hi": np.float32(6)})
    graph, report = fuse(model, level=1)
    assert matched(report, "ConvActivationFusionOp") == 1
    assert str(graph).splitlines()[-1] == (
        "  y: float[1,3,5,5] = autofusion::FusedConv[activation='Clip', activation_params=[0.0, 6.0], "
        "pads=[1, 1, 1, 1]](x, W_bn_folded, shift_bn_folded)")


def test_asymmetric_pads_are_padded_by_the_kernel(conv_path):
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[0, 1, 2, 1], strides=[2, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 2, 9, 8)}, ["y"], {"W": W})
    graph, _ = fuse(model, level=1)
    assert [n.op for n in graph.nodes] == ["autofusion::FusedConv"]
    assert_same_outputs(model, level=1)


def test_same_lower_auto_pad(conv_path):
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], name="conv", auto_pad="SAME_LOWER", strides=[2, 2])]
    model = onnx_model(nodes, {"x": (2, 2, 10, 9)}, ["y"], {"W": W})
    assert_same_outputs(model, level=1)


def near_misses(report, rule):
    return [m.reason for m in report.near_misses if m.rule == rule]


def test_computed_weight_is_refused():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"])]
    graph, report = fuse(onnx_model(nodes, {"x": (1, 2, 5, 5), "w": (3, 2, 3, 3)}, ["y"]), level=2)
    assert [n.op for n in graph.nodes] == ["Conv", "Relu"]
    assert near_misses(report, "ConvFusionOp") == [
        "Conv 'conv': weight 'w' is not a constant; FusedConv prepacks it at build time"]


# ---- a gate on the input channels, folded into the weight (ConvGateFusionOp) -------------------

class SqueezeExcite(nn.Module):
    """expand → depthwise → x·sigmoid(fc(mean x)) → project: the gate scales the projection's input."""

    def __init__(self, c=8, mid=32):
        super().__init__()
        self.expand, self.dw = nn.Conv2d(c, mid, 1), nn.Conv2d(mid, mid, 3, padding=1, groups=mid)
        self.fc1, self.fc2, self.project = nn.Conv2d(mid, 4, 1), nn.Conv2d(4, mid, 1), nn.Conv2d(mid, c, 1)

    def forward(self, x):
        y = torch.relu(self.dw(torch.relu(self.expand(x))))
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(nn.functional.adaptive_avg_pool2d(y, 1)))))
        return self.project(y * gate)


def gated(gate_shape, x_shape=(1, 2, 5, 5), gate=None, group=1):
    """y = Conv(x·g): the gate an input of gate_shape, or the constant `gate`."""
    w = W if group == 1 else RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "g"], ["xg"], name="gate"),
             helper.make_node("Conv", ["xg", "W"], ["y"], name="conv", pads=[1, 1, 1, 1],
                              **({"group": group} if group > 1 else {}))]
    inputs = {"x": x_shape} | ({} if gate is not None else {"g": gate_shape})
    return onnx_model(nodes, inputs, ["y"], {"W": w} | ({} if gate is None else {"g": gate}))


def test_a_squeeze_excitation_gate_moves_into_the_projection_weight(conv_path):
    model = exported(SqueezeExcite(), (1, 8, 12, 12))
    graph, report = fuse(model)
    assert matched(report, "ConvGateFusionOp") == 1
    project = graph.outputs[0].producer
    product = project.inputs[1].producer   # W·g, on each call: the gate is computed
    assert project.inputs[0].producer.op == "autofusion::FusedConv"   # the depthwise conv, ungated
    assert product.op == "Mul" and product.inputs[0].const is not None
    assert product.inputs[1].producer.attrs["activation"] == "Sigmoid"
    assert_same_outputs(model, level=2, rtol=1e-5)


def test_a_constant_gate_is_folded_into_the_weight_at_compile_time():
    g = RNG.uniform(0.5, 1.5, (2, 1, 1)).astype(np.float32)   # rank 3: right-aligned to x
    graph, report = fuse(gated(None, gate=g))
    assert matched(report, "ConvGateFusionOp") == 1
    assert str(graph).splitlines()[-1] == (
        "  y: float[1,3,5,5] = autofusion::FusedConv[pads=[1, 1, 1, 1]](x, W_gated)")
    np.testing.assert_allclose(graph.constants["W_gated"].const, W * g[None], rtol=1e-6)
    assert_same_outputs(gated(None, gate=g))


@pytest.mark.parametrize("gate_shape, x_shape", [
    ((2, 2, 1, 1), (2, 2, 5, 5)),   # one gate per image: no one weight serves the batch
    ((1, 2, 5, 5), (1, 2, 5, 5)),   # varies over positions too
    ((1, 1, 1, 5), (1, 2, 5, 5)),   # varies along the width
])
def test_a_gate_that_is_not_per_channel_stays_a_mul(gate_shape, x_shape):
    graph, report = fuse(gated(gate_shape, x_shape))
    assert matched(report, "ConvGateFusionOp") == 0
    assert [n.op for n in graph.nodes] == ["Mul", "autofusion::FusedConv"]
    assert near_misses(report, "ConvGateFusionOp") == []   # not a gate, so not a near-miss


def test_a_gate_is_refused_where_scaling_the_weight_costs_more():
    graph, report = fuse(gated((1, 2, 1, 1), (1, 2, 16, 16)))   # W: 54 values, x: 512 < 10·54
    assert [n.op for n in graph.nodes] == ["Mul", "autofusion::FusedConv"]
    assert near_misses(report, "ConvGateFusionOp") == [
        "Mul 'gate': does not pay: the weight has 54 values, the input 512; scaling the weight on "
        "each call costs more than scaling the input"]
    assert matched(fuse(gated((1, 2, 1, 1), (1, 2, 24, 24)))[1], "ConvGateFusionOp") == 1   # 1152


def test_a_gate_on_a_grouped_convolution_is_refused():
    graph, report = fuse(gated((1, 4, 1, 1), (1, 4, 32, 32), group=4))
    assert near_misses(report, "ConvGateFusionOp") == [
        "Mul 'gate': the convolution is grouped; its gate would scale each group's weight apart"]


def test_a_gated_input_used_elsewhere_stays_a_mul():
    model = gated((1, 2, 1, 1), (1, 2, 32, 32))
    model.graph.output.append(helper.make_tensor_value_info("xg", TensorProto.FLOAT, None))
    graph, report = fuse(model)
    assert matched(report, "ConvGateFusionOp") == 0
    assert "must stay in memory" in near_misses(report, "ConvGateFusionOp")[0]


def test_computed_batchnorm_statistics_are_refused_and_the_conv_fused_alone():
    nodes = [CONV,
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "m", "var"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["y"])]
    model = onnx_model(nodes, {"x": (1, 2, 5, 5), "m": (3,)}, ["y"],
                       {"W": W, "scale": BN["scale"], "shift": BN["shift"], "var": BN["var"]})
    graph, report = fuse(model, level=2)
    assert [n.op for n in graph.nodes] == ["autofusion::FusedConv", "BatchNormalization", "Relu"]
    reason = "BatchNormalization 'bn': mean 'm' is not a constant; folding needs it at compile time"
    assert near_misses(report, "ConvBNReluFusionOp") == near_misses(report, "ConvBNFusionOp") == [reason]


def test_training_mode_batchnorm_is_refused():
    nodes = [CONV, helper.make_node("BatchNormalization", ["c", *BN], ["y", "mean_out", "var_out"],
                                      name="bn", training_mode=1)]
    graph, report = fuse(onnx_model(nodes, {"x": (1, 2, 5, 5)}, ["y"], {"W": W, **BN}, opset=15), level=1)
    assert graph.op_histogram()["BatchNormalization"] == 1
    assert near_misses(report, "ConvBNFusionOp") == [
        "BatchNormalization 'bn': training_mode=1; folding needs the inference statistics"]


def test_a_batchnorm_whose_variance_plus_epsilon_is_not_positive_is_not_folded():
    """Folded, its weights would be NaN; unfolded, the node computes ONNX's formula (NaN there)."""
    nodes = [CONV, helper.make_node("BatchNormalization", ["c", *BN], ["y"], name="bn",
                                    epsilon=-float(BN["var"][1]))]
    graph, report = fuse(onnx_model(nodes, {"x": (1, 2, 5, 5)}, ["y"], {"W": W, **BN}), level=1)
    assert graph.op_histogram()["BatchNormalization"] == 1
    assert near_misses(report, "ConvBNFusionOp") == [
        "BatchNormalization 'bn': var + epsilon is not positive at channel 1; its output is not finite there"]


def test_broadcast_residual_is_refused():
    nodes = [CONV, helper.make_node("Add", ["c", "z"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"])]
    graph, report = fuse(onnx_model(nodes, {"x": (1, 2, 5, 5), "z": (1, 3, 1, 1)}, ["y"], {"W": W}), level=2)
    assert graph.op_histogram().get("Add") == 1
    assert near_misses(report, "ConvAddReluFusionOp") == [
        "Add 'add': residual 'z' has shape [1,3,1,1], the convolution [1,3,5,5]; "
        "FusedConv adds it without broadcasting"]


def test_float64_conv_is_refused():
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], name="conv")], "test",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [numpy_helper.from_array(W.astype(np.float64), "W")])
    graph, report = fuse(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), level=1)
    assert near_misses(report, "ConvFusionOp") == [
        "Conv 'conv': input is double, FusedConv runs float32 only"]


def test_4d_convolution_is_refused():
    w = np.ones((1, 1, 2, 2, 2, 2), np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], name="conv")]
    _, report = fuse(onnx_model(nodes, {"x": (1, 1, 3, 3, 3, 3)}, ["y"], {"W": w}), level=1)
    assert near_misses(report, "ConvFusionOp") == ["Conv 'conv': 4-D convolution; FusedConv runs 1-D to 3-D"]


def test_same_padding_that_depends_on_symbolic_sizes_is_refused():
    """Stride 2: SAME's pads depend on the size's parity (stride 1's are static, and fuse)."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], name="conv", auto_pad="SAME_UPPER", strides=[2, 2])]
    _, report = fuse(onnx_model(nodes, {"x": (1, 2, "h", "w")}, ["y"], {"W": W}), level=1)
    assert near_misses(report, "ConvFusionOp") == [
        "Conv 'conv': auto_pad=SAME_UPPER needs static input sizes to fix its pads"]


def test_clip_with_computed_bounds_is_refused():
    nodes = [CONV, helper.make_node("Clip", ["c", "lo"], ["y"], name="clip")]
    graph, report = fuse(onnx_model(nodes, {"x": (1, 2, 5, 5), "lo": ()}, ["y"], {"W": W}), level=1)
    assert [n.op for n in graph.nodes] == ["autofusion::FusedConv", "Clip"]
    assert near_misses(report, "ConvActivationFusionOp") == ["Clip 'clip': its bounds are not constants"]


def test_disabled_rule_leaves_its_chain_to_the_smaller_rules():
    model = onnx_model([CONV, BATCHNORM, helper.make_node("Relu", ["n"], ["y"])],
                       {"x": (1, 2, 5, 5)}, ["y"], {"W": W, **BN})
    graph, report = fuse(model, level=1, disable=["ConvBNReluFusionOp"])
    assert [matched(report, r) for r in ("ConvBNFusionOp", "ConvActivationFusionOp")] == [1, 1]
    graph, report = fuse(model, level=1, disable=["ConvBNReluFusionOp", "ConvBNFusionOp"])
    assert [n.op for n in graph.nodes] == ["autofusion::FusedConv", "BatchNormalization", "Relu"]


# ---- real architectures ---------------------------------------------------------------------

def test_resnet_stack_folds_every_batchnorm():
    model, _ = ARCHITECTURES["resnet_stack"]()
    graph, report = fuse(model, level=2)
    assert {r: matched(report, r) for r in ("ConvBNReluFusionOp", "ConvAddReluFusionOp", "ConvBNFusionOp")} \
        == {"ConvBNReluFusionOp": 7, "ConvAddReluFusionOp": 3, "ConvBNFusionOp": 2}   # 12 BatchNorms
    assert "Pattern: Conv+BatchNormalization+Relu\n  Matched: 7 times" in report.text()
    hist = graph.op_histogram()
    assert hist["autofusion::FusedConv"] == 12 and not {"BatchNormalization", "Relu", "Add"} & set(hist)
    assert_same_outputs(model, level=2, rtol=1e-4)


def test_mobilenet_block():
    """Depthwise conv, hard-swish, squeeze-excite (conv + relu, conv + hard-sigmoid), residual."""
    model, _ = ARCHITECTURES["mobilenet_block"]()
    graph, report = fuse(model, level=2)
    assert {r: matched(report, r) for r in ("ConvBNFusionOp", "ConvFusionOp", "ConvActivationFusionOp",
                                            "ConvAddFusionOp")} \
        == {"ConvBNFusionOp": 4, "ConvFusionOp": 2, "ConvActivationFusionOp": 5, "ConvAddFusionOp": 1}
    assert graph.op_histogram()["autofusion::FusedConv"] == 6
    assert_same_outputs(model, level=2, rtol=1e-4)


# ---- the kernel: layout and implementation choice ------------------------------------------

def test_a_chain_of_fused_convs_stays_channels_last(conv_path):
    """Two bottlenecks (six FusedConvs, two residuals) on a channels-last input: no activation is
    copied to another layout anywhere, and the output is channels-last too."""
    model = exported(nn.Sequential(Bottleneck(32, 8), Bottleneck(32, 8)), 1, 32, 14, 14)
    compiled = autofusion.compile(model, level=2, backend="torch")
    assert len(compiled.graph) == 6
    x = torch.randn(1, 32, 14, 14).contiguous(memory_format=torch.channels_last)
    compiled(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        out = compiled(x)
    relayouts = [e for e in prof.events() if e.name == "aten::copy_"
                 and len(e.input_shapes[0]) == 4 and e.input_shapes[0] == e.input_shapes[1]]
    assert relayouts == [] and out.is_contiguous(memory_format=torch.channels_last)


def test_small_dense_convs_run_on_pytorch_and_the_rest_on_onednn():
    assert not fused.conv_onednn_pays((16, 64, 1, 1), 1, [1, 1])        # squeeze-excite conv
    assert not fused.conv_onednn_pays((16, 16, 3, 3), 1, [8, 8])        # short 3x3 reduction, small
    assert fused.conv_onednn_pays((64, 64, 3, 3), 1, [8, 8])            # long 3x3 reduction
    assert fused.conv_onednn_pays((64, 1, 3, 3), 64, [4, 4])            # depthwise
    assert fused.conv_onednn_pays((64, 256, 1, 1), 1, [56, 56])         # ResNet-50 1x1


# ---- Pad + Conv: a framework's explicit zero padding (tf2onnx, Keras's ZeroPadding2D) ---------

def padded_conv(pads: list[int], mode: str = "constant", value: float | None = None, conv_pads=(0, 0, 0, 0),
                stride: int = 2) -> "onnx.ModelProto":
    w = np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32)
    inits = {"w": w, "pads": np.array(pads, np.int64)}
    pad_inputs = ["x", "pads"]
    if value is not None:
        inits["value"] = np.array(value, np.float32)
        pad_inputs.append("value")
    nodes = [helper.make_node("Pad", pad_inputs, ["p"], name="pad", mode=mode),
             helper.make_node("Conv", ["p", "w"], ["y"], name="conv", strides=[stride, stride], pads=list(conv_pads))]
    return onnx_model(nodes, {"x": (1, 4, 9, 10)}, ["y"], inits)


@pytest.mark.parametrize("pads, conv_pads", [([0, 0, 0, 0, 0, 0, 1, 1], (0, 0, 0, 0)),     # Keras's 'valid' after padding
                                             ([0, 0, 1, 2, 0, 0, 2, 1], (1, 1, 1, 1))])
def test_a_zero_pad_becomes_the_convolutions_own(pads, conv_pads):
    model = padded_conv(pads, conv_pads=conv_pads)
    graph, report = fuse(model, level=1)
    assert matched(report, "PadConvFusionOp") == 1
    assert [n.op_type for n in graph.nodes] == ["FusedConv"]
    rank = len(pads) // 2
    assert graph.nodes[0].attr("pads") == [c + p for c, p in zip(conv_pads, pads[2:rank] + pads[rank + 2:])]
    assert_same_outputs(model, level=1)


@pytest.mark.parametrize("pads, mode, value, reason", [
    ([0, 0, 1, 1, 0, 0, 1, 1], "reflect", None, "mode 'reflect', not zeros"),
    ([0, 0, 1, 1, 0, 0, 1, 1], "constant", 0.5, "a value that is not a constant 0"),
    ([1, 0, 0, 0, 0, 0, 0, 0], "constant", None, "pads the batch or channel axis"),
    ([0, 0, -1, 0, 0, 0, 1, 1], "constant", None, "crops"),
])
def test_a_pad_the_convolution_cannot_take_stays(pads, mode, value, reason):
    model = padded_conv(pads, mode, value)
    graph, report = fuse(model, level=1)
    assert matched(report, "PadConvFusionOp") == 0
    assert reason in near_miss(report, "PadConvFusionOp")
    assert_same_outputs(model, level=1)
