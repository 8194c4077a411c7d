"""Automatic fusion regions: what the planner groups, what it refuses and why, and that a fused
region computes what its ops compute (max|fused - unfused| <= 1e-5·max|unfused| + 1e-6, and the
same against ONNX Runtime for the row-reduction regions), that the planner never forms a cycle,
on hand-made and random graphs."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import autofusion
from autofusion.export import export_onnx
from autofusion.frontend import import_onnx
from autofusion.fusion.regions import kernel_name, plan_regions
from autofusion.ir import verify

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
             helper.make_node("Hardmax", ["b"], ["y"], name="hardmax", axis=-1)]
    graph, report = fuse(onnx_model(nodes, {"x": (2, 5)}, ["y"]), regions=True)
    assert graph.op_histogram() == {"autofusion::Region": 1, "Hardmax": 1}
    assert codes(report) == {"hardmax": "opaque"}


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
    verify(graph)   # no cycle: relu-neg-exp-add in one region would need transpose inside it
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    for backend in ("native", "torch"):
        _, a, b = run_both(model, {"x": x}, backend)
        assert_close(a["y"], b["y"])


def test_two_chains_that_meet_are_one_region():
    """|a|² + |b|² of two slices (an STFT's magnitude): each square starts a region, the Add joins
    the later one, and the earlier one merges into it (it read nothing started after it)."""
    nodes = [helper.make_node("Slice", ["z", "s0", "e0", "ax"], ["a"], name="real"),
             helper.make_node("Slice", ["z", "s1", "e1", "ax"], ["b"], name="imag"),
             helper.make_node("Pow", ["a", "two"], ["a2"], name="pow_a"),
             helper.make_node("Pow", ["b", "exponent"], ["b2"], name="pow_b"),
             helper.make_node("Add", ["a2", "b2"], ["s"], name="add"),
             helper.make_node("Sqrt", ["s"], ["y"], name="sqrt")]
    # two exponents (an exporter's two constants): the squares share no input, so no sibling join
    consts = {"two": np.array(2.0, np.float32), "exponent": np.array(2.0, np.float32), "ax": np.array([1]), "s0": np.array([0]), "e0": np.array([5]),
              "s1": np.array([5]), "e1": np.array([10])}
    model = onnx_model(nodes, {"z": (2, 10, 7)}, ["y"], consts)
    graph, report = fuse(model, regions=True)
    (region,) = [n for n in graph.nodes if n.op == "autofusion::Region"]
    assert sorted(n.name for n in region.attrs["body"].nodes) == ["add", "pow_a", "pow_b", "sqrt"]
    assert not [m for m in report.not_auto_fused if m.code == "alone"]
    verify(graph)
    z = np.random.default_rng(5).standard_normal((2, 10, 7)).astype(np.float32)
    for backend in ("native", "torch"):
        _, a, b = run_both(model, {"z": z}, backend)
        assert_close(a["y"], b["y"])


def test_a_merge_that_could_make_a_cycle_is_refused():
    """exp(x) starts a region; relu(x) another; t = transpose(exp) is a group started between
    them that reads the first, and relu's region reads it: merging the two around add(e, r)
    would put the transpose both before and after the region."""
    nodes = [helper.make_node("Exp", ["x"], ["e"], name="exp"),
             helper.make_node("Neg", ["e"], ["n"], name="neg"),
             helper.make_node("Transpose", ["n"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Relu", ["t"], ["r"], name="relu"),
             helper.make_node("Tanh", ["r"], ["q"], name="tanh"),
             helper.make_node("Add", ["n", "q"], ["y"], name="add")]
    model = onnx_model(nodes, {"x": (4, 4)}, ["y"])
    graph, _ = fuse(model, regions=True)
    verify(graph)   # a cycle fails the topological check
    x = np.random.default_rng(6).standard_normal((4, 4)).astype(np.float32)
    for backend in ("native", "torch"):
        _, a, b = run_both(model, {"x": x}, backend)
        assert_close(a["y"], b["y"])


def test_disable_list_turns_automatic_fusion_off():
    compiled = autofusion.compile(chain_model(), disable="AutoFusion")
    assert "autofusion::Region" not in compiled.graph.op_histogram() and not compiled.report.regions


# ---- row reductions and reshapes -----------------------------------------------------------
# Each model is a pattern no fusion rule names (the rules are checked to leave it alone): the
# rules catch softmax inside attention and LayerNorm/RMSNorm in their exporters' spellings.

N = helper.make_node
RNG = np.random.default_rng(7)


def ints(*v) -> np.ndarray:
    return np.array(v, np.int64)


def softmax_model(shape=(2, 4, 8, 16)) -> onnx.ModelProto:
    """softmax(x·0.125 + mask) over the last axis, written out (no MatMul: no attention rule)."""
    nodes = [N("Mul", ["x", "scale"], ["a"], name="scale"), N("Add", ["a", "mask"], ["b"], name="mask"),
             N("ReduceMax", ["b", "last"], ["m"], name="max", keepdims=1),
             N("Sub", ["b", "m"], ["c"], name="sub"), N("Exp", ["c"], ["e"], name="exp"),
             N("ReduceSum", ["e", "last"], ["s"], name="sum", keepdims=1),
             N("Div", ["e", "s"], ["y"], name="div")]
    return onnx_model(nodes, {"x": shape, "mask": (shape[0], 1, 1, shape[-1])}, ["y"],
                      {"scale": np.array(0.125, np.float32), "last": ints(-1)}, opset=18)


def rms_norm_model(shape=(2, 5, 64)) -> onnx.ModelProto:
    """x·(mean(x·x) + ε)^-½·w: a Pow(-0.5) the RMSNorm rule's spellings do not include."""
    nodes = [N("Mul", ["x", "x"], ["sq"], name="square"),
             N("ReduceMean", ["sq", "last"], ["ms"], name="mean"),
             N("Add", ["ms", "eps"], ["v"], name="eps"), N("Pow", ["v", "mhalf"], ["inv"], name="rsqrt"),
             N("Mul", ["x", "inv"], ["n"], name="norm"), N("Mul", ["n", "w"], ["y"], name="weight")]
    return onnx_model(nodes, {"x": shape}, ["y"],
                      {"last": ints(-1), "eps": np.array(1e-6, np.float32),
                       "mhalf": np.array(-0.5, np.float32),
                       "w": RNG.standard_normal(shape[-1:]).astype(np.float32)}, opset=18)


def layer_norm_model(shape=(4, 3, 64)) -> onnx.ModelProto:
    """(x − E[x]) / √(E[x²] − E[x]² + ε)·γ + β: the variance as the LayerNorm rule does not
    spell it; E[x] and E[x²] are siblings (both read x) and one pass per row."""
    nodes = [N("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1]),
             N("Mul", ["x", "x"], ["sq"], name="square"),
             N("ReduceMean", ["sq"], ["ms"], name="mean_sq", axes=[-1]),
             N("Mul", ["mu", "mu"], ["mu2"], name="mu2"),
             N("Sub", ["ms", "mu2"], ["var"], name="var"), N("Add", ["var", "eps"], ["ve"], name="eps"),
             N("Sqrt", ["ve"], ["sd"], name="sd"), N("Sub", ["x", "mu"], ["c"], name="center"),
             N("Div", ["c", "sd"], ["n"], name="div"), N("Mul", ["n", "g"], ["ng"], name="gamma"),
             N("Add", ["ng", "b"], ["y"], name="beta")]
    return onnx_model(nodes, {"x": shape}, ["y"],
                      {"eps": np.array(1e-5, np.float32),
                       "g": RNG.standard_normal(shape[-1:]).astype(np.float32),
                       "b": RNG.standard_normal(shape[-1:]).astype(np.float32)})


def squeeze_excite_model(shape=(2, 8, 7, 7)) -> onnx.ModelProto:
    """a = SiLU(x); a·sigmoid(GlobalAveragePool(a)), the pooled value an output too (the gate of a
    squeeze-excitation block without its two convolutions)."""
    nodes = [N("Sigmoid", ["x"], ["s"], name="sig"), N("Mul", ["x", "s"], ["a"], name="silu"),
             N("GlobalAveragePool", ["a"], ["p"], name="pool"), N("Sigmoid", ["p"], ["g"], name="gate"),
             N("Mul", ["a", "g"], ["y"], name="excite")]
    return onnx_model(nodes, {"x": shape}, ["y", "p"])


def unsqueeze_model(shape=(3, 5, 16)) -> onnx.ModelProto:
    """x − Unsqueeze(ReduceMean(x, keepdims=0)), flattened, plus a bias: the reshapes relabel the
    iteration space; the mean without its axis is an output too."""
    nodes = [N("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1], keepdims=0),
             N("Unsqueeze", ["mu", "last"], ["mu1"], name="unsqueeze"),
             N("Sub", ["x", "mu1"], ["c"], name="center"),
             N("Flatten", ["c"], ["f"], name="flatten", axis=2), N("Add", ["f", "b"], ["y"], name="bias")]
    return onnx_model(nodes, {"x": shape}, ["y", "mu"],
                      {"last": ints(-1), "b": RNG.standard_normal(shape[-1:]).astype(np.float32)})


def reshape_model() -> onnx.ModelProto:
    """relu(x) [2,6,8] → [2,3,2,8]·w[2,8] → [12,8] → softmax: the reshapes split and merge axes."""
    nodes = [N("Relu", ["x"], ["r"], name="relu"), N("Reshape", ["r", "s1"], ["t"], name="split"),
             N("Mul", ["t", "w"], ["u"], name="scale"), N("Reshape", ["u", "s2"], ["v"], name="merge"),
             N("Softmax", ["v"], ["y"], name="softmax", axis=-1)]
    return onnx_model(nodes, {"x": (2, 6, 8)}, ["y"],
                      {"s1": ints(2, 3, 2, 8), "s2": ints(12, 8),
                       "w": RNG.standard_normal((2, 8)).astype(np.float32)})


def transpose_model() -> onnx.ModelProto:
    """Heads moved in front of the sequence ([b, s, h, d] → [b, h, s, d]) between a scale and a
    masked softmax: the transpose is strided reads of the one kernel, d stays contiguous."""
    nodes = [N("Mul", ["x", "gamma"], ["a"], name="scale"),
             N("Transpose", ["a"], ["t"], name="heads", perm=[0, 2, 1, 3]),
             N("Add", ["t", "mask"], ["m"], name="mask"), N("Softmax", ["m"], ["y"], name="softmax", axis=-1)]
    return onnx_model(nodes, {"x": (2, 6, 4, 16), "mask": (2, 1, 6, 16)}, ["y"],
                      {"gamma": RNG.standard_normal(16).astype(np.float32)})


ROW_MODELS = {
    "softmax": (softmax_model, ["Mul", "Add", "ReduceMax", "Sub", "Exp", "ReduceSum", "Div"]),
    "rms_norm": (rms_norm_model, ["Mul", "ReduceMean", "Add", "Pow", "Mul", "Mul"]),
    "layer_norm": (layer_norm_model, ["ReduceMean", "Mul", "ReduceMean", "Mul", "Sub", "Add", "Sqrt", "Sub",
                                      "Div", "Mul", "Add"]),
    "squeeze_excite": (squeeze_excite_model, ["Activation", "GlobalAveragePool", "Sigmoid", "Mul"]),
    "unsqueeze": (unsqueeze_model, ["ReduceMean", "Unsqueeze", "Sub", "Flatten", "Add"]),
    "reshape": (reshape_model, ["Relu", "Reshape", "Mul", "Reshape", "Softmax"]),
    "transpose": (transpose_model, ["Mul", "Transpose", "Add", "Softmax"]),
}


def random_feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


@pytest.mark.parametrize("name", ROW_MODELS)
def test_a_row_reduction_joins_its_prologue_and_epilogue_in_one_region(name):
    make, ops = ROW_MODELS[name]
    graph, report = fuse(make(), regions=True)
    fired = {r.name for r in report.rules if r.matched} - {"SiLUFusionOp"}   # x·sigmoid(x) is SiLU
    assert not fired, "a rule names this pattern: test another"
    (node,) = graph.nodes
    assert node.op == "autofusion::Region"
    assert [n.op_type for n in node.attrs["body"].nodes] == ops
    assert not report.not_auto_fused


@pytest.mark.parametrize("backend", ["native", "torch"])
@pytest.mark.parametrize("name", ROW_MODELS)
def test_a_row_region_equals_its_ops_and_onnxruntime(name, backend):
    model = ROW_MODELS[name][0]()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        fused, got, want = run_both(model, feeds, backend)
        assert fused.graph.op_histogram() == {"autofusion::Region": 1}
        if backend == "native":
            assert "generated" in str(fused.plan)
        for k, ref in zip([o.name for o in model.graph.output], session.run(None, feeds)):
            assert_close(got[k], want[k])
            assert_close(got[k], ref)


def nan_model() -> onnx.ModelProto:
    """Every row reduction of -x over the last axis, each an output."""
    reduce = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp"]
    nodes = [N("Neg", ["x"], ["n"], name="neg")] + \
        [N(op, ["n", "one"], [op], name=op, keepdims=k % 2) for k, op in enumerate(reduce)] + \
        [N(op, ["n"], [op], name=op, axis=-1) for op in ("Softmax", "LogSoftmax")]
    return onnx_model(nodes, {"x": (4, 8)}, reduce + ["Softmax", "LogSoftmax"], {"one": ints(1)}, opset=18)


@pytest.mark.parametrize("backend", ["native", "torch"])
def test_nan_and_infinity_in_a_row_go_where_the_onnx_reference_puts_them(backend):
    # max and min propagate NaN as numpy, PyTorch and onnx.reference do (ONNX Runtime's CPU
    # ReduceMax skips it: we follow the reference); an infinite max stays itself in log-sum-exp,
    # as in ONNX Runtime and PyTorch (the reference's plain max subtraction makes -inf rows NaN)
    x = RNG.uniform(0.5, 2, (4, 8)).astype(np.float32)
    x[0, 3], x[1, :], x[2, 2] = np.nan, np.inf, -np.inf
    model = nan_model()
    fused, got, want = run_both(model, {"x": x}, backend)
    assert fused.graph.op_histogram() == {"autofusion::Region": 1}
    names = [o.name for o in model.graph.output]
    ref = dict(zip(names, ReferenceEvaluator(model).run(None, {"x": x})))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref["ReduceLogSumExp"] = dict(zip(names, session.run(None, {"x": x})))["ReduceLogSumExp"]
    with np.errstate(invalid="ignore"):
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=k)   # NaN where NaN
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_a_reduction_over_outer_axes_stays_out_with_its_reason():
    nodes = [N("Relu", ["x"], ["r"], name="relu"),
             N("ReduceSum", ["r", "mid"], ["s"], name="sum", keepdims=1),
             N("Sub", ["r", "s"], ["y"], name="sub")]
    model = onnx_model(nodes, {"x": (3, 5, 16)}, ["y"], {"mid": ints(1)}, opset=18)
    graph, report = fuse(model, regions=True)
    assert "autofusion::Region" not in graph.op_histogram()
    assert codes(report)["sum"] == "inner"
    assert codes(report)["sub"] == "order"   # r → sum → sub: sub may not join relu's group


def test_a_second_row_structure_starts_a_region_of_its_own():
    # the sum is over the last axis, the max over the last two: one region each
    nodes = [N("Relu", ["x"], ["r"], name="relu"),
             N("ReduceSum", ["r", "last"], ["s"], name="sum", keepdims=1),
             N("Sub", ["r", "s"], ["d"], name="sub"),
             N("ReduceMax", ["d", "two"], ["m"], name="max", keepdims=1),
             N("Sub", ["d", "m"], ["y"], name="sub2")]
    model = onnx_model(nodes, {"x": (3, 5, 16)}, ["y"], {"last": ints(-1), "two": ints(-2, -1)}, opset=18)
    graph, report = fuse(model, regions=True)
    assert graph.op_histogram() == {"autofusion::Region": 2}
    assert codes(report) == {"max": "rows"}
    feeds = random_feeds(model, 0)
    for backend in ("native", "torch"):
        _, a, b = run_both(model, feeds, backend)
        assert_close(a["y"], b["y"])


def test_a_reshape_the_space_cannot_index_is_a_reason_not_a_wrong_answer():
    # [6,4] → [4,6] cuts the region's axis of 6: the reshape starts a region of its own, and the
    # bias that follows broadcasts along the new axis of 6
    nodes = [N("Relu", ["x"], ["r"], name="relu"), N("Exp", ["r"], ["e"], name="exp"),
             N("Reshape", ["e", "s"], ["t"], name="reshape"), N("Add", ["t", "b"], ["a"], name="bias"),
             N("Tanh", ["a"], ["y"], name="tanh")]
    bias = RNG.standard_normal(6).astype(np.float32)
    model = onnx_model(nodes, {"x": (6, 4)}, ["y"], {"s": ints(4, 6), "b": bias})
    graph, report = fuse(model, regions=True)
    assert graph.op_histogram() == {"autofusion::Region": 2}
    assert codes(report) == {"reshape": "view"}
    for backend in ("native", "torch"):
        _, a, b = run_both(model, random_feeds(model, 0), backend)
        assert_close(a["y"], b["y"])


def test_a_transpose_moving_the_innermost_axis_stays_out():
    # ConvNeXt's block end: NHWC layer scale, back to NCHW, residual; the kernel could index it,
    # but its inner loop would step across rows on one side
    nodes = [N("Mul", ["x", "gamma"], ["a"], name="scale"),
             N("Transpose", ["a"], ["t"], name="nchw", perm=[0, 3, 1, 2]),
             N("Add", ["t", "r"], ["b"], name="residual"), N("Relu", ["b"], ["y"], name="relu")]
    model = onnx_model(nodes, {"x": (1, 7, 7, 96), "r": (1, 96, 7, 7)}, ["y"],
                       {"gamma": RNG.standard_normal(96).astype(np.float32)})
    graph, report = fuse(model, regions=True)
    assert graph.op_histogram() == {"Mul": 1, "Transpose": 1, "autofusion::Region": 1}
    assert codes(report) == {"nchw": "stride", "scale": "alone"}


def test_axes_computed_at_run_time_keep_a_reduction_out():
    nodes = [N("Relu", ["x"], ["r"], name="relu"), N("Neg", ["r"], ["n"], name="neg"),
             N("ReduceSum", ["n", "axes"], ["y"], name="sum", keepdims=1)]
    model = helper.make_model(helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                     helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 18)])
    graph, report = fuse(model, regions=True)
    assert graph.op_histogram() == {"autofusion::Region": 1, "ReduceSum": 1}
    assert codes(report) == {"sum": "axes"}


def test_every_reason_code_has_its_text():
    from autofusion.fusion.regions import REASONS
    assert {"opaque", "dtype", "rank", "axes", "order", "shape", "inner", "rows", "view", "stride", "size",
            "inputs", "alone"} == set(REASONS)
    assert all(text and text == text.strip() for text in REASONS.values())


def test_a_row_region_exports_as_a_function_onnxruntime_runs(tmp_path):
    compiled = autofusion.compile(softmax_model())
    path = tmp_path / "fused.onnx"
    export_onnx(compiled.graph, path)
    feeds = random_feeds(softmax_model(), 3)
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert_close(got, compiled.run(feeds)["y"])
    back = import_onnx(path)
    assert back.op_histogram() == {"autofusion::Region": 1}
    assert_close(autofusion.compile(back).run(feeds)["y"], got)


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
OTHERS = ["Transpose", "CumSum"]       # a view regions index with strides; an op none takes
                                      # (continuous: Hardmax turned a region's last-ulp
                                      # difference in near-tied values into a different index)
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2",
          "ReduceLogSumExp"]
AXES = [[-1], [-2, -1], None]          # the last axis, the last two, all
SHAPES = [(2, 4, 4), (1, 4, 1), (4, 4), (4,), (2, 1, 4)]


def reduced(shape, axes) -> tuple:
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


@st.composite
def random_dags(draw):
    """A DAG over values whose shapes broadcast to [2,4,4]: elementwise and broadcast ops, row
    reductions (keeping their axes, or dropping and unsqueezing them back), softmax, reshapes
    there and back, int64 islands and ops no region takes; every value may be read by any later
    op."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = [("x", (2, 4, 4), "f"), ("y", (4,), "f")]
    nodes, inits = [], {}
    kinds = ["unary"] * 3 + ["binary"] * 3 + ["other", "const", "int", "reduce", "reduce", "softmax",
                                              "reshape"]
    for i in range(draw(st.integers(2, 14))):
        kind = draw(st.sampled_from(kinds))
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
        elif kind == "other":
            op = draw(st.sampled_from(OTHERS))
            perm = list(range(len(a[1])))
            perm[-2:] = perm[-2:][::-1]   # the last two axes swapped: still broadcasts to [2,4,4]
            if op == "Transpose":
                nodes.append(helper.make_node(op, [a[0]], [out], name=out, perm=perm))
            else:
                inits["last"] = np.array(-1, np.int64)
                nodes.append(helper.make_node(op, [a[0], "last"], [out], name=out))
            values.append((out, tuple(a[1][p] for p in perm) if op == "Transpose" else a[1], "f"))
        elif kind == "reduce":
            op, axes = draw(st.sampled_from(REDUCE)), draw(st.sampled_from(AXES))
            axes = None if axes is None or len(a[1]) < len(axes) else axes
            ins = [a[0]]
            if axes is not None:
                inits[f"axes{i}"] = np.array(axes, np.int64)
                ins.append(f"axes{i}")
            if axes == [-1] and draw(st.booleans()):   # keepdims=0, the axis unsqueezed back
                nodes += [helper.make_node(op, ins, [f"{out}r"], name=f"{out}r", keepdims=0),
                          helper.make_node("Unsqueeze", [f"{out}r", f"axes{i}"], [out], name=out)]
            else:
                nodes.append(helper.make_node(op, ins, [out], name=out, keepdims=1))
            values.append((out, reduced(a[1], axes), "f"))
        elif kind == "softmax":
            op = draw(st.sampled_from(["Softmax", "LogSoftmax"]))
            nodes.append(helper.make_node(op, [a[0]], [out], name=out, axis=-1))
            values.append((out, a[1], "f"))
        elif kind == "reshape":   # [2,4,4] → a view → an op → [2,4,4]
            a = values[0] if np.prod(a[1]) != 32 else a
            view = draw(st.sampled_from([(8, 4), (2, 16), (32,), (2, 2, 2, 4), (4, 2, 4), "transpose"]))
            op = draw(st.sampled_from(UNARY))
            if view == "transpose":   # the first two axes swapped and back: the last stays last
                a = values[0] if len(a[1]) != 3 else a
                nodes += [helper.make_node("Transpose", [a[0]], [f"{out}v"], name=f"{out}v", perm=[1, 0, 2]),
                          helper.make_node(op, [f"{out}v"], [f"{out}u"], name=f"{out}u"),
                          helper.make_node("Transpose", [f"{out}u"], [out], name=out, perm=[1, 0, 2])]
            else:
                inits[f"s{i}"], inits[f"b{i}"] = np.array(view, np.int64), np.array(a[1], np.int64)
                nodes += [helper.make_node("Reshape", [a[0], f"s{i}"], [f"{out}v"], name=f"{out}v"),
                          helper.make_node(op, [f"{out}v"], [f"{out}u"], name=f"{out}u"),
                          helper.make_node("Reshape", [f"{out}u", f"b{i}"], [out], name=out)]
            values.append((out, a[1], "f"))
        else:   # an int64 detour and back: never in a region, still correct. In steps of 2^-20,
            # so that an ulp of difference a fused region may make before it (a sum in another
            # order) moves the truncated result by 2^-20, not by a whole unit
            inits["fine"], inits["coarse"] = np.array(2.0 ** 20, np.float32), np.array(2.0 ** -20, np.float32)
            nodes += [helper.make_node("Mul", [a[0], "fine"], [f"{out}s"], name=f"{out}s"),
                      helper.make_node("Cast", [f"{out}s"], [f"{out}i"], name=f"{out}c", to=TensorProto.INT64),
                      helper.make_node("Add", [f"{out}i", f"{out}i"], [f"{out}j"], name=f"{out}a"),
                      helper.make_node("Cast", [f"{out}j"], [f"{out}f"], name=f"{out}f", to=TensorProto.FLOAT),
                      helper.make_node("Mul", [f"{out}f", "coarse"], [out], name=out)]
            values.append((out, a[1], "f"))
    outs = [v[0] for v in values[2:] if not any(v[0] in n.input for n in nodes)] or [values[-1][0]]
    return onnx_model(nodes, {"x": (2, 4, 4), "y": (4,)}, outs, inits, opset=18)


def assert_groups_acyclic(graph, plan) -> None:
    """The graph with each planned region contracted to one node is still a DAG (Kahn's sort)."""
    group = {n: ("region", k) for k, r in enumerate(plan.regions) for n in r.nodes}
    key = lambda n: group.get(n, n)   # noqa: E731
    edges = {(key(v.producer), key(n)) for n in graph.nodes for v in n.inputs
             if v is not None and v.producer is not None and key(v.producer) != key(n)}
    nodes = {key(n) for n in graph.nodes}
    indegree = {g: 0 for g in nodes}
    for _, b in edges:
        indegree[b] += 1
    ready, seen = [g for g in nodes if not indegree[g]], 0
    while ready:
        g = ready.pop()
        seen += 1
        for a, b in edges:
            if a == g:
                indegree[b] -= 1
                if not indegree[b]:
                    ready.append(b)
    assert seen == len(nodes), "the planned regions form a cycle"


def test_the_cycle_check_catches_a_cycle():
    # a → b → c with a and c planned into one region while b stays out is a cycle
    model = onnx_model([helper.make_node("Relu", ["x"], ["a"], name="a"),
                        helper.make_node("Transpose", ["a"], ["b"], name="b", perm=[1, 0]),
                        helper.make_node("Add", ["a", "b"], ["c"], name="c")], {"x": (3, 3)}, ["c"])
    graph = import_onnx(model)
    a, _, c = graph.nodes
    bad = type(plan_regions(graph))([type("R", (), {"nodes": [a, c]})()], [])
    with pytest.raises(AssertionError, match="cycle"):
        assert_groups_acyclic(graph, bad)
    assert_groups_acyclic(graph, plan_regions(graph))


def assert_near(got, want, rel: float) -> None:
    """NaN and infinities where the unfused graph has them; elsewhere max|Δ| <= rel·max|want| + rel."""
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    if finite.any():
        assert np.abs(got[finite] - want[finite]).max() <= rel * (np.abs(want[finite]).max() + 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.integers(1, 6))
def test_random_dags_fuse_without_cycles_and_keep_their_values(model, max_nodes):
    assert_groups_acyclic(import_onnx(model), plan_regions(import_onnx(model), max_nodes=max_nodes))
    graph, _ = fuse(model, regions=True)
    verify(graph)   # a cycle would fail the topological sort here
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 4, 4)).astype(np.float32),
             "y": rng.standard_normal(4).astype(np.float32)}
    fused = autofusion.compile(model, level=2, backend="torch", max_region_nodes=max_nodes)
    verify(fused.graph)
    want = autofusion.compile(model, level=0, backend="torch").run(feeds)
    got = fused.run(feeds)
    for k in want:   # a region may run as one generated kernel (other rounding: contracted
        assert_near(got[k], want[k], 1e-4)   # multiply-adds), which an exp chain amplifies


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_random_dags_through_generated_kernels(model):
    # the generated kernels sum in another order and call the vector math library: within
    # 1e-4 of each output's largest magnitude (a sum's rounding, amplified by what follows)
    rng = np.random.default_rng(6)
    feeds = {"x": rng.standard_normal((2, 4, 4)).astype(np.float32),
             "y": rng.standard_normal(4).astype(np.float32)}
    want = autofusion.compile(model, level=0, backend="torch").run(feeds)
    got = autofusion.compile(model, level=2, backend="native").run(feeds)
    for k in want:
        assert_near(got[k], want[k], 1e-4)
