"""MatMul rules: bias, activation epilogues (ReLU, GELU erf/tanh, SiLU; MatMul and Gemm),
transposes folded into trans_a/trans_b, MatMul→Transpose→MatMul, scalar factors into alpha;
and the FusedMatMul kernel's linear-layer paths (F.linear and packed oneDNN)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import autofusion
from autofusion.backend.torch_cpu import KERNELS, fused as fused_kernels
from autofusion.ir import DType, Graph
from autofusion.ir.builder import GraphBuilder
from autofusion.ir.activations import activation_attrs
from autofusion.ir.fused_ops import decompose

from .harness import assert_same_outputs, fuse, matched, near_miss, node, onnx_model, ops, torch_model








def rng_array(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


class Mlp(torch.nn.Module):   # a transformer feed-forward block: linear, activation, linear
    def __init__(self, act, d=16, hidden=32):
        super().__init__()
        self.up, self.act, self.down = torch.nn.Linear(d, hidden), act, torch.nn.Linear(hidden, d)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class GeluTanh(torch.nn.Module):   # GPT-2's "new GELU", as the activation rules recognise it
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


# ---- MatMul + bias --------------------------------------------------------------------------

def test_linear_on_a_sequence_becomes_one_fused_matmul():
    model = torch_model(torch.nn.Linear(16, 8), (2, 5, 16))    # MatMul + Add (3-D input)
    graph, report = fuse(model, level=1)
    assert matched(report, "MatMulBiasFusionOp") == 1
    assert ops(graph) == ["autofusion::FusedMatMul"]
    assert [v.name for v in graph.nodes[0].inputs] == ["x0", "/Transpose_output_0_folded", "bias"]


def test_bias_golden_before_after():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Add", ["c", "y"], ["z"])]   # bias first
    model = onnx_model(nodes, {"x": (2, 3, 4)}, ["z"], {"w": rng_array(4, 5), "c": rng_array(1, 5)})
    graph, _ = fuse(model, level=1)
    assert str(graph) == (
        "graph test(x: float[2,3,4]) -> (z: float[2,3,5])\n"
        "  const w: float[4,5]\n"
        "  const c: float[1,5]\n"
        "  z: float[2,3,5] = autofusion::FusedMatMul(x, w, c)")
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_linear_fused_equals_unfused():
    assert_same_outputs(torch_model(torch.nn.Linear(16, 8), (2, 5, 16)), level=1, rtol=1e-5)


def test_bias_after_a_gemm_keeps_its_alpha_not_its_unused_beta():
    nodes = [node("Gemm", ["x", "w"], ["y"], alpha=2.0, beta=0.5), node("Add", ["y", "c"], ["z"])]
    model = onnx_model(nodes, {"x": (3, 4)}, ["z"], {"w": rng_array(4, 5), "c": rng_array(5)})
    graph, report = fuse(model, level=1)
    assert matched(report, "MatMulBiasFusionOp") == 1
    assert str(graph).splitlines()[-1] == "  z: float[3,5] = autofusion::FusedMatMul[alpha=2.0](x, w, c)"
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_bias_along_another_axis_is_refused():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Add", ["y", "c"], ["z"])]
    model = onnx_model(nodes, {"x": (2, 3, 4)}, ["z"], {"w": rng_array(4, 5), "c": rng_array(3, 1)})
    graph, report = fuse(model, level=2)
    assert ops(graph) == ["autofusion::FusedMatMul", "Add"]   # the product alone, the Add kept
    assert near_miss(report, "MatMulBiasFusionOp") == (
        "Add 'z': 'c' [3,1] is not a bias along the last axis of the product [2,3,5]")


def test_a_residual_is_not_a_bias():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Add", ["y", "r"], ["z"])]
    model = onnx_model(nodes, {"x": (2, 4), "r": (2, 4)}, ["z"], {"w": rng_array(4, 4)})
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["autofusion::FusedMatMul", "Add"]
    assert near_miss(report, "MatMulBiasFusionOp") == (
        "Add 'z': 'r' [2,4] is not a bias along the last axis of the product [2,4]")


# ---- a residual (level 2) -------------------------------------------------------------------

def test_residual_golden_before_after():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Add", ["c", "y"], ["b"]), node("Add", ["r", "b"], ["z"])]
    model = onnx_model(nodes, {"x": (2, 3, 4), "r": (2, 3, 5)}, ["z"], {"w": rng_array(4, 5), "c": rng_array(5)})
    graph, report = fuse(model, level=2)
    assert matched(report, "MatMulResidualFusionOp") == 1
    assert str(graph).splitlines()[-1] == "  z: float[2,3,5] = autofusion::FusedMatMul(x, w, c, r)"
    assert_same_outputs(model, level=2, rtol=1e-5)


def test_residual_is_cross_operator_so_level_1_leaves_it():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Add", ["y", "r"], ["z"])]
    graph, _ = fuse(onnx_model(nodes, {"x": (2, 4), "r": (2, 4)}, ["z"], {"w": rng_array(4, 4)}), level=1)
    assert ops(graph) == ["autofusion::FusedMatMul", "Add"]


class PreNormBlockTail(torch.nn.Module):   # x + attention-or-MLP output, as GPT-2 and LLaMA add it
    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def test_residual_after_a_linear_layer_without_bias():
    model = torch_model(PreNormBlockTail(), (2, 5, 16))
    graph, report = fuse(model)
    assert matched(report, "MatMulResidualFusionOp") == 1
    assert ops(graph) == ["autofusion::FusedMatMul", "autofusion::FusedMatMul"]
    assert graph.nodes[-1].inputs[3] is graph.inputs[0]
    assert_same_outputs(model, rtol=1e-5)


def test_residual_joins_through_a_reshape_of_the_rows():
    """GPT-2's Conv1D: [seq, d] product, Reshape back to [1, seq, d], then the residual Add: the
    residual is seen in the product's shape, the sum reshaped back."""
    nodes = [node("Gemm", ["x", "w", "c"], ["y"]), node("Reshape", ["y", "s"], ["p"]),
             node("Add", ["r", "p"], ["z"])]
    model = onnx_model(nodes, {"x": (3, 4), "r": (1, 3, 5)}, ["z"], {
        "w": rng_array(4, 5), "c": rng_array(5), "s": np.array([1, 3, 5])})
    graph, report = fuse(model)
    assert matched(report, "MatMulResidualFusionOp") == 1
    assert ops(graph) == ["Reshape", "autofusion::FusedMatMul", "Reshape"]
    assert graph.nodes[0].outputs[0].shape == (3, 5) and graph.nodes[0].inputs[0].name == "r"
    assert_same_outputs(model, rtol=1e-5)


def test_residual_joins_through_a_transpose_of_a_unit_axis():
    """torchvision's attention: out_proj over [S, d] rows, Reshape to [S, 1, d], Transpose to
    [1, S, d] (only the unit batch axis moves), then the residual Add."""
    nodes = [node("Gemm", ["x", "w", "c"], ["y"], transB=1), node("Reshape", ["y", "s"], ["p"]),
             node("Transpose", ["p"], ["t"], perm=[1, 0, 2]), node("Add", ["t", "r"], ["z"])]
    model = onnx_model(nodes, {"x": (3, 4), "r": (1, 3, 5)}, ["z"], {
        "w": rng_array(5, 4), "c": rng_array(5), "s": np.array([3, 1, 5])})
    graph, report = fuse(model)
    assert matched(report, "MatMulResidualFusionOp") == 1
    assert ops(graph) == ["Reshape", "autofusion::FusedMatMul", "Reshape"]
    assert_same_outputs(model, rtol=1e-5)


def test_residual_after_a_transpose_of_the_rows_is_refused():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Transpose", ["y"], ["t"], perm=[1, 0, 2]),
             node("Add", ["t", "r"], ["z"])]
    model = onnx_model(nodes, {"x": (2, 3, 4), "r": (3, 2, 5)}, ["z"], {"w": rng_array(4, 5)})
    graph, report = fuse(model)
    assert ops(graph) == ["autofusion::FusedMatMul", "Transpose", "Add"]
    assert near_miss(report, "MatMulResidualFusionOp") == (
        "Add 'z': Transpose 't' moves the product's rows, not only unit axes")
    assert_same_outputs(model, rtol=1e-5)


@pytest.mark.parametrize("r_shape", [(3, 1), (2, 3, 5)], ids=["broadcast", "widening"])
def test_residual_that_broadcasts_is_refused(r_shape):
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Add", ["y", "r"], ["z"])]
    model = onnx_model(nodes, {"x": (3, 4), "r": r_shape}, ["z"], {"w": rng_array(4, 5)})
    graph, report = fuse(model)
    assert ops(graph) == ["autofusion::FusedMatMul", "Add"]
    shape = "[" + ",".join(map(str, r_shape)) + "]"
    assert near_miss(report, "MatMulResidualFusionOp") == (
        f"Add 'z': 'r' {shape} is not of the product's shape [3,5]; the residual is added without broadcasting")


def test_residual_after_an_activation_is_left_alone():
    """act(A·B) + r: the fused op adds its residual before the activation."""
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Relu", ["y"], ["a"]), node("Add", ["a", "r"], ["z"])]
    graph, report = fuse(onnx_model(nodes, {"x": (3, 4), "r": (3, 5)}, ["z"], {"w": rng_array(4, 5)}))
    assert ops(graph) == ["autofusion::FusedMatMul", "Add"]
    assert graph.nodes[0].attrs["activation"] == "Relu"


def test_residual_of_the_products_own_output_is_refused():
    """y + relu(y): the residual is computed from the product, which must stay in memory."""
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Relu", ["y"], ["a"]), node("Add", ["y", "a"], ["z"])]
    model = onnx_model(nodes, {"x": (3, 4)}, ["z"], {"w": rng_array(4, 5)})
    graph, report = fuse(model, disable=["MatMulReluFusionOp"])
    assert ops(graph) == ["autofusion::FusedMatMul", "Relu", "Add"]
    assert_same_outputs(model, rtol=1e-5)


def test_float64_is_refused():
    g = helper.make_graph(
        [node("MatMul", ["x", "w"], ["y"]), node("Add", ["y", "c"], ["z"])], "f64",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 4])],
        [helper.make_tensor_value_info("z", TensorProto.DOUBLE, None)],
        [onnx.numpy_helper.from_array(np.ones((4, 3)), "w"),
         onnx.numpy_helper.from_array(np.ones(3), "c")])
    graph, report = fuse(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert ops(graph) == ["MatMul", "Add"]
    assert near_miss(report, "MatMulBiasFusionOp") == (
        "MatMul 'y': 'x' is double, the fused kernels are float32")


# ---- activation epilogues -------------------------------------------------------------------

EPILOGUES = [
    ("MatMulReluFusionOp", torch.nn.ReLU(), "activation='Relu'"),
    ("MatMulGeluFusionOp", torch.nn.GELU(), "activation='Gelu'"),
    ("MatMulGeluFusionOp", GeluTanh(), "activation='GeluTanh'"),
    ("MatMulSiLUFusionOp", torch.nn.SiLU(), "activation='SiLU'"),
]
IDS = ["relu", "gelu", "gelu_tanh", "silu"]


@pytest.mark.parametrize("rule, act, attr", EPILOGUES, ids=IDS)
@pytest.mark.parametrize("shape", [(2, 5, 16), (4, 16)], ids=["matmul", "gemm"])
def test_activation_joins_the_product(rule, act, attr, shape):
    """3-D input: MatMul+Add+act; 2-D input: Gemm+act (the second Gemm is a plain linear)."""
    graph, report = fuse(torch_model(Mlp(act), shape), level=1)
    assert matched(report, rule) == 1
    assert ops(graph) == ["autofusion::FusedMatMul", "autofusion::FusedMatMul"]
    assert attr in str(graph).splitlines()[-2] and "activation" not in str(graph).splitlines()[-1]


@pytest.mark.parametrize("rule, act, attr", EPILOGUES, ids=IDS)
@pytest.mark.parametrize("shape", [(2, 5, 16), (4, 16)], ids=["matmul", "gemm"])
def test_activation_epilogue_fused_equals_unfused(rule, act, attr, shape):
    assert_same_outputs(torch_model(Mlp(act), shape), level=1, rtol=1e-5)


def test_gemm_relu_golden():
    nodes = [node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0),
             node("Relu", ["y"], ["z"])]
    model = onnx_model(nodes, {"x": (3, 4)}, ["z"], {"w": rng_array(5, 4), "c": rng_array(5)})
    graph, report = fuse(model, level=1)
    assert matched(report, "MatMulReluFusionOp") == 1
    assert str(graph).splitlines()[-1] == (
        "  z: float[3,5] = autofusion::FusedMatMul[activation='Relu', activation_params=[], "
        "alpha=0.5, beta=2.0, trans_b=1](x, w, c)")
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_activation_joins_through_a_reshape_of_the_rows():
    """GPT-2's Conv1D: [seq, d] product, Reshape back to [1, seq, d], then the GELU."""
    nodes = [node("Gemm", ["x", "w", "c"], ["y"]), node("Reshape", ["y", "s"], ["r"]),
             node("Relu", ["r"], ["z"])]
    model = onnx_model(nodes, {"x": (3, 4)}, ["z"], {"w": rng_array(4, 5), "c": rng_array(5),
                                                     "s": np.array([1, 3, 5])})
    graph, report = fuse(model, level=1)
    assert matched(report, "MatMulReluFusionOp") == 1
    assert ops(graph) == ["autofusion::FusedMatMul", "Reshape"]
    assert graph.nodes[0].outputs[0].shape == (3, 5)   # the new product's shape is inferred
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_activation_after_a_shared_product_is_left_alone():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Relu", ["y"], ["z"]), node("Neg", ["y"], ["n"])]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 4)}, ["z", "n"], {"w": rng_array(4, 4)}))
    assert ops(graph) == ["autofusion::FusedMatMul", "Relu", "Neg"]
    assert near_miss(report, "MatMulReluFusionOp") == "'y' is also used by Neg 'n', so it must stay in memory"


# ---- transposes -----------------------------------------------------------------------------

def test_transposed_operands_fold_into_the_flags():
    nodes = [node("Transpose", ["a"], ["at"], perm=[0, 2, 1]),
             node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]),
             node("MatMul", ["at", "bt"], ["y"])]
    model = onnx_model(nodes, {"a": (2, 4, 3), "b": (2, 5, 4)}, ["y"])
    graph, report = fuse(model, level=1)
    assert matched(report, "TransposeMatMulFusionOp") == 2
    assert str(graph) == (
        "graph test(a: float[2,4,3], b: float[2,5,4]) -> (y: float[2,3,5])\n"
        "  y: float[2,3,5] = autofusion::FusedMatMul[trans_a=1, trans_b=1](a, b)")
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_transpose_into_gemm_toggles_its_flag():
    nodes = [node("Transpose", ["w"], ["wt"]), node("Gemm", ["x", "wt"], ["y"], transB=1)]
    model = onnx_model(nodes, {"x": (3, 4), "w": (4, 5)}, ["y"])
    graph, _ = fuse(model, level=1)
    assert str(graph).splitlines()[-1] == "  y: float[3,5] = autofusion::FusedMatMul(x, w)"
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_transpose_of_other_axes_is_refused():
    nodes = [node("Transpose", ["a"], ["at"], perm=[1, 0, 2]), node("MatMul", ["at", "b"], ["y"])]
    graph, report = fuse(onnx_model(nodes, {"a": (2, 3, 4), "b": (4, 5)}, ["y"]), level=1)
    assert ops(graph) == ["Transpose", "MatMul"]
    assert near_miss(report, "TransposeMatMulFusionOp") == (
        "Transpose 'at': perm=[1, 0, 2] is not a swap of the last two axes")


CHAIN = [node("MatMul", ["a", "b"], ["ab"]), node("Transpose", ["ab"], ["abt"], perm=[0, 2, 1]),
         node("MatMul", ["abt", "c"], ["y"])]
CHAIN_INPUTS = {"a": (2, 3, 4), "b": (4, 5), "c": (3, 6)}


def test_matmul_transpose_matmul_absorbs_the_transpose_at_level_2():
    model = onnx_model(CHAIN, CHAIN_INPUTS, ["y"])
    graph, report = fuse(model, level=2)
    assert matched(report, "MatMulTransposeMatMulFusionOp") == 1
    assert str(graph) == (
        "graph test(a: float[2,3,4], b: float[4,5], c: float[3,6]) -> (y: float[2,5,6])\n"
        "  ab: float[2,3,5] = MatMul(a, b)\n"
        "  y: float[2,5,6] = autofusion::FusedMatMul[trans_a=1](ab, c)")
    assert_same_outputs(model, level=2, rtol=1e-5)


def test_matmul_transpose_matmul_is_cross_operator_so_level_1_leaves_it():
    graph, report = fuse(onnx_model(CHAIN, CHAIN_INPUTS, ["y"]), level=1)
    assert ops(graph) == ["MatMul", "Transpose", "MatMul"]
    assert near_miss(report, "TransposeMatMulFusionOp") == (
        "Transpose 'abt' transposes the result of MatMul 'ab': absorbing it is the "
        "cross-operator MatMulTransposeMatMulFusionOp (level 2)")


def test_a_transposed_product_used_elsewhere_still_folds():
    """The chain cannot take the first product (it is needed twice); the adjacent rule can."""
    nodes = CHAIN + [node("Neg", ["ab"], ["n"])]
    graph, report = fuse(onnx_model(nodes, CHAIN_INPUTS, ["y", "n"]), level=2)
    assert sorted(ops(graph)) == ["MatMul", "Neg", "autofusion::FusedMatMul"]
    assert matched(report, "TransposeMatMulFusionOp") == 1


# ---- scalar factors -------------------------------------------------------------------------

@pytest.mark.parametrize("op, s, alpha", [("Div", 8.0, 0.125), ("Mul", 0.5, 0.5)])
def test_scalar_factor_becomes_alpha(op, s, alpha):
    nodes = [node("MatMul", ["a", "b"], ["ab"]), node(op, ["ab", "s"], ["y"])]
    model = onnx_model(nodes, {"a": (2, 3, 4), "b": (2, 4, 5)}, ["y"], {"s": np.float32(s)})
    graph, report = fuse(model, level=1)
    assert matched(report, "MatMulScaleFusionOp") == 1
    assert str(graph).splitlines()[-1] == (
        f"  y: float[2,3,5] = autofusion::FusedMatMul[alpha={alpha}](a, b)")
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_scale_after_bias_scales_both():
    nodes = [node("MatMul", ["x", "w"], ["y"]), node("Add", ["y", "c"], ["z"]),
             node("Mul", ["z", "s"], ["out"])]
    model = onnx_model(nodes, {"x": (3, 4)}, ["out"],
                       {"w": rng_array(4, 5), "c": rng_array(5), "s": np.float32(3.0)})
    graph, _ = fuse(model, level=1)
    assert str(graph).splitlines()[-1] == (
        "  out: float[3,5] = autofusion::FusedMatMul[alpha=3.0, beta=3.0](x, w, c)")
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_computed_factor_is_refused():
    nodes = [node("MatMul", ["a", "b"], ["ab"]), node("Mul", ["ab", "s"], ["y"])]
    graph, report = fuse(onnx_model(nodes, {"a": (3, 4), "b": (4, 5), "s": ()}, ["y"]), level=1)
    assert ops(graph) == ["MatMul", "Mul"]
    assert near_miss(report, "MatMulScaleFusionOp") == (
        "Mul 'y': 's' is not a nonzero float32 constant scalar, so it cannot be the product's alpha")


def test_factor_that_would_grow_the_product_is_refused():
    nodes = [node("MatMul", ["a", "b"], ["ab"]), node("Mul", ["ab", "s"], ["y"])]
    model = onnx_model(nodes, {"a": (3, 4), "b": (4, 5)}, ["y"], {"s": np.full((1, 1, 1), 2, np.float32)})
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["MatMul", "Mul"]
    assert near_miss(report, "MatMulScaleFusionOp") == "Mul 'y': 's' [1,1,1] would broadcast the product"


# ---- the kernel: linear layers on F.linear or packed oneDNN, both equal the decomposition -----

def fused_node(x_shape, w, c, residual: bool = False, **attrs) -> Graph:
    g = Graph("k", {"": 17})
    op = GraphBuilder(g)
    x = g.add_input("x", x_shape, DType.FLOAT)
    wv = g.add_constant("w", w)
    cv = None if c is None else g.add_constant("c", c)
    n = w.shape[0 if attrs.get("trans_b") else 1]
    r = g.add_input("r", (*x_shape[:-1], n), DType.FLOAT) if residual else None
    g.outputs = [op.FusedMatMul(x, wv, cv, r, **attrs)]
    g.outputs[0].shape, g.outputs[0].dtype = (*x_shape[:-1], n), DType.FLOAT
    return g


LINEAR_CASES = [
    dict(),
    dict(trans_b=1),
    dict(alpha=0.5, beta=2.0, **activation_attrs("Relu")),
    dict(**activation_attrs("Gelu")),
    dict(trans_b=1, **activation_attrs("GeluTanh")),
    dict(**activation_attrs("SiLU")),
    dict(**activation_attrs("HardSigmoid")),   # no oneDNN post-op: F.linear and the activation
]


@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "f_linear"])
@pytest.mark.parametrize("attrs", LINEAR_CASES, ids=lambda a: ",".join(map(str, a.values())) or "plain")
@pytest.mark.parametrize("bias_shape", [(24,), (1, 24), None], ids=["bias", "bias_1xN", "no_bias"])
def test_linear_kernel_equals_its_decomposition(monkeypatch, onednn, attrs, bias_shape):
    """rtol 1e-5: oneDNN blocks the K=64 reduction differently from the reference matmul."""
    monkeypatch.setattr(fused_kernels, "ONEDNN_MIN_MACS", 0 if onednn else 1 << 62)
    w = rng_array(24, 64, seed=1) if attrs.get("trans_b") else rng_array(64, 24, seed=1)
    c = None if bias_shape is None else rng_array(*bias_shape, seed=2)
    g = fused_node((2, 7, 64), w, c, **attrs)
    fn = KERNELS["autofusion::FusedMatMul"](g.nodes[0])
    assert fn.baked_inputs == {1, 2}
    captured = [cell.cell_contents for cell in fn.__closure__]
    packed = any(isinstance(t, torch.Tensor) and t.is_mkldnn for t in captured)
    assert packed == (onednn and attrs.get("activation") != "HardSigmoid")   # the path under test
    x = rng_array(2, 7, 64, seed=3)
    got = fn(torch.from_numpy(x)).numpy()
    want = autofusion.compile(decompose(g.nodes[0]), level=0)(x, w, *([] if c is None else [c]))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("attrs", LINEAR_CASES, ids=lambda a: ",".join(map(str, a.values())) or "plain")
def test_linear_kernel_with_a_residual_equals_its_decomposition(attrs):
    w = rng_array(24, 64, seed=1) if attrs.get("trans_b") else rng_array(64, 24, seed=1)
    c = rng_array(24, seed=2)
    g = fused_node((2, 7, 64), w, c, residual=True, **attrs)
    fn = KERNELS["autofusion::FusedMatMul"](g.nodes[0])
    assert fn.baked_inputs == {1, 2}
    x, r = rng_array(2, 7, 64, seed=3), rng_array(2, 7, 24, seed=4)
    got = fn(torch.from_numpy(x), torch.from_numpy(r)).numpy()
    want = autofusion.compile(decompose(g.nodes[0]), level=0)(x, w, c, r)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_batched_product_runs_generically_and_equals_its_decomposition():
    g = Graph("k", {"": 17})
    op = GraphBuilder(g)
    a, b = g.add_input("a", (2, 3, 5, 4), DType.FLOAT), g.add_input("b", (2, 3, 6, 5), DType.FLOAT)
    c = g.add_input("c", (6,), DType.FLOAT)
    g.outputs = [op.FusedMatMul(a, b, c, trans_a=1, trans_b=1, alpha=0.25, beta=-1.0,
                                **activation_attrs("Relu"))]
    fn = KERNELS["autofusion::FusedMatMul"](g.nodes[0])
    args = [rng_array(2, 3, 5, 4, seed=1), rng_array(2, 3, 6, 5, seed=2), rng_array(6, seed=3)]
    got = fn(*map(torch.from_numpy, args)).numpy()
    want = autofusion.compile(decompose(g.nodes[0]), level=0)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---- a linear layer on its own ----------------------------------------------------------------

def test_gemm_by_a_constant_matrix_becomes_a_linear_kernel():
    nodes = [node("Gemm", ["x", "w", "c"], ["y"], transB=1)]
    model = onnx_model(nodes, {"x": (3, 4)}, ["y"], {"w": rng_array(5, 4), "c": rng_array(5)})
    graph, report = fuse(model, level=1)
    assert matched(report, "LinearFusionOp") == 1
    assert str(graph).splitlines()[-1] == "  y: float[3,5] = autofusion::FusedMatMul[trans_b=1](x, w, c)"
    assert_same_outputs(model, level=1, rtol=1e-5)


def test_product_of_two_activations_is_not_a_linear_layer():
    nodes = [node("MatMul", ["x", "w"], ["y"])]
    graph, report = fuse(onnx_model(nodes, {"x": (3, 4), "w": (4, 5)}, ["y"]), level=1)
    assert ops(graph) == ["MatMul"] and not report.near_misses
