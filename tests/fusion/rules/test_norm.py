"""Normalization rules: LayerNorm and RMSNorm from primitives, their scale and bias, and the
residual Add in front of a LayerNorm."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import helper

from .harness import assert_same_outputs, fuse, matched, near_miss, onnx_model, ops, torch_model




# ---- modules written the ways code bases write them ----------------------------------------

class HandLayerNorm(torch.nn.Module):   # the BERT/ConvNeXt "LayerNorm by hand"
    def __init__(self, d=16, rsqrt=False, square_by_mul=False):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(torch.randn(d)), torch.nn.Parameter(torch.randn(d))
        self.rsqrt, self.square_by_mul = rsqrt, square_by_mul

    def forward(self, x):
        c = x - x.mean(-1, keepdim=True)
        var = (c * c if self.square_by_mul else c.pow(2)).mean(-1, keepdim=True)
        y = c * torch.rsqrt(var + 1e-6) if self.rsqrt else c / torch.sqrt(var + 1e-6)
        return self.weight * y + self.bias


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


class DivRMSNorm(torch.nn.Module):   # x / sqrt(mean(x²) + eps), no scale
    def forward(self, x):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)


def ln(d=16, affine=True):
    torch.manual_seed(1)
    m = torch.nn.LayerNorm(d, elementwise_affine=affine)
    if affine:   # not the identity affine the module starts with
        torch.nn.init.normal_(m.weight)
        torch.nn.init.normal_(m.bias)
    return m


NORMS = [
    ("LayerNormFusionOp", ln(), 13, ["autofusion::LayerNorm"]),
    ("LayerNormFusionOp", ln(affine=False), 13, ["autofusion::LayerNorm"]),
    ("LayerNormFusionOp", HandLayerNorm(), 18, ["autofusion::LayerNorm"]),   # ReduceMean axes input
    ("LayerNormFusionOp", HandLayerNorm(rsqrt=True, square_by_mul=True), 13, ["autofusion::LayerNorm"]),
    ("RMSNormFusionOp", LlamaRMSNorm(), 13, ["autofusion::RMSNorm"]),
    ("RMSNormFusionOp", LlamaRMSNorm(), 18, ["autofusion::RMSNorm"]),
    ("RMSNormFusionOp", DivRMSNorm(), 13, ["autofusion::RMSNorm"]),
]
NORM_IDS = ["torch_ln", "torch_ln_no_affine", "hand_ln_opset18", "hand_ln_rsqrt_mul", "llama_rms",
            "llama_rms_opset18", "div_rms"]


@pytest.mark.parametrize("rule, module, opset, fused", NORMS, ids=NORM_IDS)
def test_norm_chain_becomes_one_node(rule, module, opset, fused):
    graph, report = fuse(torch_model(module, (2, 5, 16), opset=opset), level=1)
    assert matched(report, rule) == 1
    assert ops(graph) == fused
    assert not report.near_misses


@pytest.mark.parametrize("rule, module, opset, fused", NORMS, ids=NORM_IDS)
def test_norm_fused_equals_unfused_on_random_inputs(rule, module, opset, fused):
    # F.layer_norm/rms_norm accumulate differently from the two-pass chain: ~1e-7 relative
    assert_same_outputs(torch_model(module, (2, 5, 16), opset=opset), level=1, rtol=1e-5)


def layer_norm_nodes(axes=(-1,), var_axes=None, eps="eps"):
    return [helper.make_node("ReduceMean", ["x"], ["mean"], axes=list(axes), name="mean"),
            helper.make_node("Sub", ["x", "mean"], ["c"], name="sub"),
            helper.make_node("Pow", ["c", "two"], ["sq"], name="pow"),
            helper.make_node("ReduceMean", ["sq"], ["var"], axes=list(var_axes or axes), name="var"),
            helper.make_node("Add", ["var", eps], ["ve"], name="add_eps"),
            helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
            helper.make_node("Div", ["c", "std"], ["n"], name="div")]


LN_CONSTS = {"two": np.float32(2), "eps": np.float32(1e-5),
             "s": np.linspace(0.5, 2, 8).astype(np.float32), "b": np.linspace(-1, 1, 8).astype(np.float32)}


def test_layer_norm_golden_before_after():
    nodes = layer_norm_nodes() + [helper.make_node("Mul", ["s", "n"], ["m"], name="mul"),   # commuted
                                  helper.make_node("Add", ["m", "b"], ["y"], name="shift")]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 3, 8)}, ["y"], LN_CONSTS, opset=13), level=1)
    assert (matched(report, "LayerNormFusionOp"), matched(report, "NormScaleBiasFusionOp")) == (1, 2)
    assert str(graph) == (
        "graph test(x: float[2,3,8]) -> (y: float[2,3,8])\n"
        "  const scale: float[8]\n"
        "  const bias: float[8]\n"
        "  y: float[2,3,8] = autofusion::LayerNorm[axis=-1, epsilon=9.999999747378752e-06](x, scale, bias)")


def test_layer_norm_over_two_trailing_axes():
    nodes = layer_norm_nodes(axes=(1, 2)) + [helper.make_node("Mul", ["n", "s2"], ["y"])]
    s2 = np.random.default_rng(0).standard_normal((1, 4, 1)).astype(np.float32)   # broadcast along axis 2
    model = onnx_model(nodes, {"x": (2, 4, 8)}, ["y"], {**LN_CONSTS, "s2": s2}, opset=13)
    graph, _ = fuse(model, level=1)
    [node] = graph.nodes
    assert node.attrs == {"axis": -2, "epsilon": pytest.approx(1e-5)}
    assert node.inputs[1].shape == (4, 8)   # the scale, expanded to the normalized shape
    assert_same_outputs(model, level=1)


@pytest.mark.parametrize("module", [ln(affine=False), DivRMSNorm()], ids=["layer_norm", "rms_norm"])
def test_norm_over_a_symbolic_width(module):
    """The kernels read the normalized dims per call (and a missing scale is built per call)."""
    model = torch_model(module, (3, 16), opset=13)
    for vi in [*model.graph.input, *model.graph.output]:
        vi.type.tensor_type.shape.dim[1].dim_param = "width"
    graph, _ = fuse(model, level=1)
    assert len(graph) == 1 and graph.nodes[0].inputs[0].shape == (3, "width")
    assert_same_outputs(model, level=1)


def test_layer_norm_not_over_trailing_axes_is_a_near_miss():
    nodes = layer_norm_nodes(axes=(1,))
    graph, report = fuse(onnx_model(nodes, {"x": (2, 3, 8)}, ["n"], LN_CONSTS, opset=13), level=1)
    assert matched(report, "LayerNormFusionOp") == 0 and len(graph) == 7
    [miss] = [m for m in report.near_misses if m.rule == "LayerNormFusionOp"]
    assert miss.reason == "ReduceMean 'mean': reduces axes [1], not the trailing axes a norm normalizes"


def test_layer_norm_with_different_mean_and_variance_axes_is_a_near_miss():
    model = onnx_model(layer_norm_nodes(axes=(2,), var_axes=(1, 2)), {"x": (2, 3, 8)}, ["n"], LN_CONSTS, opset=13)
    _, report = fuse(model, level=1, disable=["RMSNormFusionOp"])
    [miss] = [m for m in report.near_misses if m.rule == "LayerNormFusionOp"]
    assert miss.reason == "ReduceMean 'mean' reduces axes [2] but ReduceMean 'var' reduces [1, 2]"
    # what is left is an RMSNorm of the centered x over axes 1 and 2, and is fused as one
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["ReduceMean", "Sub", "autofusion::RMSNorm"]
    assert_same_outputs(model, level=1)


def test_layer_norm_with_a_computed_epsilon_is_a_near_miss():
    nodes = layer_norm_nodes(eps="e")
    _, report = fuse(onnx_model(nodes, {"x": (2, 3, 8), "e": ()}, ["n"], LN_CONSTS, opset=13), level=1)
    [miss] = [m for m in report.near_misses if m.rule == "LayerNormFusionOp"]
    assert miss.reason == "Div 'div': epsilon 'e' is not a constant scalar"


def test_rms_norm_golden_before_after():
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="sq"),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean"),
             helper.make_node("Add", ["ms", "eps"], ["mse"], name="add_eps"),
             helper.make_node("Sqrt", ["mse"], ["rms"], name="sqrt"),
             helper.make_node("Reciprocal", ["rms"], ["inv"], name="inv"),
             helper.make_node("Mul", ["x", "inv"], ["n"], name="norm"),
             helper.make_node("Mul", ["n", "s"], ["y"], name="mul")]
    consts = {"axes": np.array([-1]), "eps": np.float32(1e-6), "s": LN_CONSTS["s"]}
    model = onnx_model(nodes, {"x": (2, 3, 8)}, ["y"], consts, opset=18)
    graph, report = fuse(model, level=1)
    assert (matched(report, "RMSNormFusionOp"), matched(report, "NormScaleBiasFusionOp")) == (1, 1)
    assert str(graph) == (
        "graph test(x: float[2,3,8]) -> (y: float[2,3,8])\n"
        "  const scale: float[8]\n"
        "  y: float[2,3,8] = autofusion::RMSNorm[axis=-1, epsilon=9.999999974752427e-07](x, scale)")
    assert_same_outputs(model, level=1)


def test_rms_norm_over_a_leading_axis_is_a_near_miss():
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[0], name="mean"),
             helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Div", ["x", "rms"], ["y"], name="div")]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 8)}, ["y"], LN_CONSTS, opset=13), level=1)
    assert matched(report, "RMSNormFusionOp") == 0 and len(graph) == 5
    [miss] = [m for m in report.near_misses if m.rule == "RMSNormFusionOp"]
    assert miss.reason == "ReduceMean 'mean': reduces axes [0], not the trailing axes a norm normalizes"


# ---- NormScaleBiasFusionOp -----------------------------------------------------------------

def test_scale_and_bias_fold_through_several_ops():
    """(LN(x)·s + b)·2 + 1: every per-feature constant ends up in the LayerNorm's scale/bias."""
    nodes = layer_norm_nodes() + [helper.make_node("Mul", ["n", "s"], ["m"]),
                                  helper.make_node("Add", ["m", "b"], ["a"]),
                                  helper.make_node("Mul", ["a", "k"], ["m2"]),
                                  helper.make_node("Add", ["m2", "one"], ["y"])]
    consts = {**LN_CONSTS, "k": np.float32(2), "one": np.ones((1, 1, 8), np.float32)}
    model = onnx_model(nodes, {"x": (2, 3, 8)}, ["y"], consts, opset=13)
    graph, report = fuse(model, level=1)
    assert matched(report, "NormScaleBiasFusionOp") == 4
    assert ops(graph) == ["autofusion::LayerNorm"]
    assert_same_outputs(model, level=1)


def test_computed_scale_of_the_normalized_shape_becomes_the_scale():
    nodes = layer_norm_nodes() + [helper.make_node("Mul", ["n", "g"], ["y"])]
    model = onnx_model(nodes, {"x": (2, 3, 8), "g": (8,)}, ["y"], LN_CONSTS, opset=13)
    graph, _ = fuse(model, level=1)
    assert [v.name for v in graph.nodes[0].inputs] == ["x", "g"]
    assert_same_outputs(model, level=1)


def test_full_shape_gate_after_a_layer_norm_is_a_near_miss():
    nodes = layer_norm_nodes() + [helper.make_node("Mul", ["n", "g"], ["y"], name="gate")]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 3, 8), "g": (2, 3, 8)}, ["y"], LN_CONSTS, opset=13), level=1)
    assert ops(graph) == ["autofusion::LayerNorm", "Mul"]
    [miss] = [m for m in report.near_misses if m.rule == "NormScaleBiasFusionOp"]
    assert miss.reason == ("Mul 'gate': 'g' (shape [2,3,8]) is neither a constant nor of the "
                           "normalized shape [8]")


# ---- AddLayerNormFusionOp ------------------------------------------------------------------

class PostLN(torch.nn.Module):   # BERT: LayerNorm(x + sublayer(x))
    def __init__(self, d=16):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(d, d), ln(d)

    def forward(self, x):
        return self.norm(x + self.fc(x))


class PreLN(torch.nn.Module):    # GPT-2/ViT: the sum is the residual stream, used again
    def __init__(self, d=16):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(d, d), ln(d)

    def forward(self, x, r):
        h = x + r
        return h + self.fc(self.norm(h))


@pytest.mark.parametrize("opset", [13, 17])   # LayerNorm spelled out, and LayerNormalization
def test_residual_add_joins_the_layer_norm(opset):
    model = torch_model(PostLN(), (2, 5, 16), opset=opset)
    graph, report = fuse(model, level=1)
    assert matched(report, "AddLayerNormFusionOp") == 1
    norm = graph.nodes[-1]
    assert norm.op == "autofusion::LayerNorm" and len(norm.inputs) == 4
    assert "Add" not in [n.op for n in graph.nodes[:-1] if n.outputs[0] is norm.inputs[0]]
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_pre_layer_norm_residual_is_a_near_miss():
    graph, report = fuse(torch_model(PreLN(), (2, 5, 16), (2, 5, 16), opset=17), level=1)
    assert matched(report, "AddLayerNormFusionOp") == 0
    assert "LayerNormalization" in [n.op for n in graph.nodes]
    [miss] = [m for m in report.near_misses if m.rule == "AddLayerNormFusionOp"]
    assert miss.reason == "'/Add_output_0' is also used by Add '/Add_1', so it must stay in memory"


def test_two_broadcast_operands_are_a_near_miss():
    nodes = [helper.make_node("Add", ["a", "r"], ["h"], name="add"),
             helper.make_node("LayerNormalization", ["h", "s", "b"], ["y"], name="ln")]
    model = onnx_model(nodes, {"a": (2, 1, 8), "r": (1, 3, 8)}, ["y"], LN_CONSTS)
    _, report = fuse(model, level=1)
    [miss] = [m for m in report.near_misses if m.rule == "AddLayerNormFusionOp"]
    assert miss.reason == ("Add 'add': 'r' (shape [1,3,8]) is broadcast to [2,3,8]; the fused kernel "
                           "needs a full-shape input")


# ---- LayerNormMatMulFusionOp ---------------------------------------------------------------

class PreLNMLP(torch.nn.Module):   # GPT-2/ViT: x + fc2(act(fc1(norm(x))))
    def __init__(self, norm, d=16, act=torch.nn.GELU()):
        super().__init__()
        self.norm, self.act = norm, act
        self.fc1, self.fc2 = torch.nn.Linear(d, 3 * d), torch.nn.Linear(3 * d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class Conv1D(torch.nn.Module):    # GPT-2's linear layer: rows flattened, addmm, shape restored
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(torch.randn(d_in, d_out)), torch.nn.Parameter(torch.randn(d_out))

    def forward(self, x):
        y = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return y.view(x.size()[:-1] + (y.size(-1),))


class Permuted(torch.nn.Module):   # (0, 1): MultiheadAttention's [batch, seq, d] → [seq, batch, d]
    def __init__(self, d, perm=(1, 0, 2)):
        super().__init__()
        self.fc, self.perm = torch.nn.Linear(d, d), perm

    def forward(self, x):
        return self.fc(x.permute(*self.perm))


class GPT2MLP(PreLNMLP):
    def __init__(self, d=16):
        super().__init__(ln(d), d, torch.nn.GELU(approximate="tanh"))
        self.fc1, self.fc2 = Conv1D(d, 3 * d), Conv1D(3 * d, d)


# the nodes left: the NormMatMul and the second layer with the residual in it (+ the reshapes)
NORM_MATMULS = [(PreLNMLP(ln()), (2, 5, 16), 17, 2),                     # LayerNormalization, MatMul+Add
                (PreLNMLP(ln()), (2, 5, 16), 13, 2),                     # spelled out (LayerNorm)
                (PreLNMLP(ln(affine=False)), (3, 16), 17, 2),            # Gemm(transB=1), no affine
                (PreLNMLP(LlamaRMSNorm(), act=torch.nn.SiLU()), (2, 5, 16), 13, 2),
                (GPT2MLP(), (1, 5, 16), 17, 5),                          # through a Reshape
                (torch.nn.Sequential(ln(), Permuted(16)), (2, 5, 16), 17, 2)]   # a Transpose
NORM_MATMUL_IDS = ["layer_normalization", "spelled_layer_norm", "gemm_no_affine", "rms_norm_silu",
                   "gpt2_conv1d", "sequence_first"]


@pytest.mark.parametrize("module, shape, opset, nodes", NORM_MATMULS, ids=NORM_MATMUL_IDS)
def test_norm_joins_the_linear_layer_it_feeds(module, shape, opset, nodes):
    graph, report = fuse(torch_model(module, shape, opset=opset))
    assert matched(report, "LayerNormMatMulFusionOp") == 1
    assert "autofusion::NormMatMul" in ops(graph) and len(graph) == nodes
    assert not [m for m in report.near_misses if m.rule == "LayerNormMatMulFusionOp"]


@pytest.mark.parametrize("module, shape, opset", [m[:3] for m in NORM_MATMULS[:4]], ids=NORM_MATMUL_IDS[:4])
def test_norm_matmul_keeps_the_layer_epilogue(module, shape, opset):
    graph, report = fuse(torch_model(module, shape, opset=opset))
    assert ops(graph) == ["autofusion::NormMatMul", "autofusion::FusedMatMul"]   # the residual in the second
    first = graph.nodes[0]
    assert first.attrs["norm"] == ("RMSNorm" if isinstance(module.norm, LlamaRMSNorm) else "LayerNorm")
    assert first.attrs["activation"] == ("SiLU" if isinstance(module.act, torch.nn.SiLU) else "Gelu")


@pytest.mark.parametrize("module, shape, opset", [m[:3] for m in NORM_MATMULS], ids=NORM_MATMUL_IDS)
def test_norm_matmul_equals_unfused_on_random_inputs(module, shape, opset):
    # γ and β folded into the weights round differently: ~1e-7 relative
    assert_same_outputs(torch_model(module, shape, opset=opset), rtol=1e-5)


def norm_matmul_nodes(ln_out="n"):
    return [helper.make_node("LayerNormalization", ["x", "s", "b"], [ln_out], name="ln"),
            helper.make_node("MatMul", ["n", "w"], ["p"], name="matmul"),
            helper.make_node("Add", ["p", "c"], ["y"], name="bias")]


NORM_MATMUL_CONSTS = {"s": LN_CONSTS["s"], "b": LN_CONSTS["b"],
                      "w": np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32),
                      "c": np.arange(4, dtype=np.float32)}


def test_norm_matmul_golden_before_after():
    model = onnx_model(norm_matmul_nodes(), {"x": (2, 3, 8)}, ["y"], NORM_MATMUL_CONSTS)
    graph, report = fuse(model)
    assert matched(report, "LayerNormMatMulFusionOp") == 1
    assert str(graph) == (
        "graph test(x: float[2,3,8]) -> (y: float[2,3,4])\n"
        "  const weight: float[8,4]\n"
        "  const bias_1: float[4]\n"   # the Add was named "bias"
        "  y: float[2,3,4] = autofusion::NormMatMul[epsilon=9.999999747378752e-06, norm='LayerNorm']"
        "(x, weight, bias_1)")
    s, b, w, c = (NORM_MATMUL_CONSTS[k].astype(np.float64) for k in "sbwc")
    np.testing.assert_allclose(graph.nodes[0].inputs[1].const, s[:, None] * w, rtol=1e-6)
    np.testing.assert_allclose(graph.nodes[0].inputs[2].const, b @ w + c, rtol=1e-6)
    assert_same_outputs(model)


def test_norm_matmul_is_level_2():
    _, report = fuse(onnx_model(norm_matmul_nodes(), {"x": (2, 3, 8)}, ["y"], NORM_MATMUL_CONSTS), level=1)
    assert "LayerNormMatMulFusionOp" not in [r.name for r in report.rules]


def test_norm_also_used_elsewhere_is_a_near_miss():
    """Post-LN (BERT): the norm's output is also the next residual, so it must be written out."""
    model = onnx_model(norm_matmul_nodes() + [helper.make_node("Add", ["n", "n"], ["r"], name="residual")],
                       {"x": (2, 3, 8)}, ["y", "r"], NORM_MATMUL_CONSTS)
    graph, report = fuse(model)
    assert "autofusion::NormMatMul" not in ops(graph)
    assert near_miss(report, "LayerNormMatMulFusionOp") == \
        "'n' is also used by Add 'residual', so it must stay in memory"


def test_norm_into_a_computed_weight_is_a_near_miss():
    consts = {k: v for k, v in NORM_MATMUL_CONSTS.items() if k != "w"}
    model = onnx_model(norm_matmul_nodes(), {"x": (2, 3, 8), "w": (8, 4)}, ["y"], consts)
    graph, report = fuse(model)
    assert ops(graph) == ["LayerNormalization", "autofusion::FusedMatMul"]
    assert near_miss(report, "LayerNormMatMulFusionOp") == (
        "FusedMatMul 'matmul_1': 'w' is not a constant matrix, so LayerNormalization 'ln''s scale "
        "and bias cannot be folded into it")


def test_norm_over_two_axes_into_a_matmul_is_a_near_miss():
    nodes = [helper.make_node("LayerNormalization", ["x", "s2"], ["n"], axis=-2, name="ln"),
             helper.make_node("MatMul", ["n", "w"], ["y"], name="matmul")]
    consts = {"s2": np.ones((3, 8), np.float32), "w": NORM_MATMUL_CONSTS["w"]}
    graph, report = fuse(onnx_model(nodes, {"x": (2, 3, 8)}, ["y"], consts))
    assert ops(graph) == ["LayerNormalization", "autofusion::FusedMatMul"]
    assert near_miss(report, "LayerNormMatMulFusionOp") == (
        "LayerNormalization 'ln': normalizes from axis -2 on; only a norm over the last axis folds "
        "into FusedMatMul 'matmul_1'")


def test_transpose_that_moves_the_normalized_axis_is_a_near_miss():
    model = torch_model(torch.nn.Sequential(ln(), Permuted(2, perm=(2, 1, 0))), (2, 5, 16), opset=17)
    graph, report = fuse(model)
    assert "autofusion::NormMatMul" not in ops(graph)
    assert near_miss(report, "LayerNormMatMulFusionOp") == \
        "Transpose '/1/Transpose': [2,5,16] → [16,5,2] moves the normalized last axis"
    assert_same_outputs(model)


class BroadcastResidualRows(torch.nn.Module):   # x + pos[1, S, D], normalized, rows flattened
    def __init__(self, d=8, s=4):
        super().__init__()
        self.pos, self.norm, self.fc = torch.nn.Parameter(torch.randn(1, s, d)), ln(d), torch.nn.Linear(d, d)

    def forward(self, x):
        n = self.norm(x + self.pos)
        return self.fc(n.reshape(-1, n.shape[-1]))


def test_broadcast_residual_through_a_regroup_is_a_near_miss():
    model = torch_model(BroadcastResidualRows(), (2, 4, 8))
    graph, report = fuse(model)
    assert "autofusion::NormMatMul" not in ops(graph)
    assert near_miss(report, "LayerNormMatMulFusionOp").endswith(
        "[1,4,8] is broadcast to [2,4,8], so Reshape '/Reshape' cannot regroup it alike")
    assert_same_outputs(model)
