"""ONNX's own transformer ops of opset 23 onto our fused ops: Attention → autofusion::Attention
(StandardAttentionFusionOp, attention.py) and RMSNormalization → autofusion::RMSNorm
(RMSNormalizationFusionOp, norm.py). Golden: the rule fires, and the fused model gives ONNX
Runtime's outputs on both backends (rtol 1e-5 of the largest output; SDPA and oneDNN sum in other
orders). Negative: each form our ops do not compute is a near-miss with its reason."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import autofusion

from .harness import fuse, matched, near_miss, ops

BACKENDS = ["auto", "torch"]
FLOAT, BOOL = TensorProto.FLOAT, TensorProto.BOOL


def model_of(op: str, inputs: dict[str, tuple], outputs: list[str], opset: int = 23,
             initializers: dict | None = None, **attrs) -> onnx.ModelProto:
    """One `op` node reading `inputs` (name -> (element type, shape); "" leaves an optional
    input out) or initializers, writing `outputs`."""
    initializers = initializers or {}
    names = list(inputs) + [n for n in initializers if n not in inputs]
    given = [n if n in initializers or inputs[n][0] is not None else "" for n in names]
    g = helper.make_graph(
        [helper.make_node(op, given, outputs, name="op", **attrs)],
        "test",
        [helper.make_tensor_value_info(n, t, list(s)) for n, (t, s) in inputs.items() if t is not None],
        [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value or 3 for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == BOOL:
            feeds[vi.name] = rng.random(shape) > 0.3
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def assert_equals_ort(model: onnx.ModelProto, backend: str, level: int = 1, rtol: float = 1e-5,
                      reference: bool = False):
    """The compiled model gives ONNX Runtime's outputs (the ONNX reference implementation's
    with `reference`, for what ONNX Runtime does not run)."""
    compiled = autofusion.compile(model, level=level, backend=backend)
    if reference:
        run = ReferenceEvaluator(model).run
    else:
        run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run
    names = [o.name for o in model.graph.output]
    for seed in (0, 1):
        feeds = feeds_for(model, seed)
        got = compiled.run(feeds)
        for name, want in zip(names, run(None, feeds)):
            assert got[name].shape == want.shape, name
            err = np.abs(got[name].astype(np.float64) - want).max()
            assert err <= rtol * np.abs(want).max() + 1e-6, f"{name}: max abs diff {err:.3g}"
    return compiled


def runs_natively(compiled, op: str) -> bool:
    [n] = [n for n in compiled.graph.nodes if n.op == op]
    return compiled.plan.decisions[n].impl.target == "native"


# ---- Attention --------------------------------------------------------------------------------

B, HQ, S, D = 2, 4, 6, 8


def attention(q, k, v, mask=None, mask_type=FLOAT, mask_const=None, outputs=("Y",), **attrs):
    """An Attention model: q, k, v shapes; mask a shape (an input) or mask_const (an initializer)."""
    inputs = {"Q": (FLOAT, q), "K": (FLOAT, k), "V": (FLOAT, v)}
    if mask is not None:
        inputs["attn_mask"] = (mask_type, mask)
    inits = {"attn_mask": mask_const} if mask_const is not None else {}
    return model_of("Attention", inputs, list(outputs), initializers=inits, **attrs)


def dead_row_mask() -> np.ndarray:
    """A boolean [S, S] mask that attends a random half, and nothing for query row 2 (→ 0)."""
    keep = np.random.default_rng(5).random((S, S)) > 0.5
    keep[:, 0] = True
    keep[2] = False
    return keep


GOLDEN = {
    "4d": attention((B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D)),
    "4d_float_mask_scale": attention((B, HQ, S, D), (B, HQ, 10, D), (B, HQ, 10, 5), (B, 1, S, 10),
                                     scale=0.3),
    "4d_causal_shorter_query": attention((B, HQ, 4, D), (B, HQ, S, D), (B, HQ, S, D), is_causal=1),
    "4d_causal_plus_mask": attention((B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D), (S, S), is_causal=1),
    "4d_bool_constant_mask_dead_row": attention((B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D),
                                                mask_const=dead_row_mask()),
    "4d_constant_mask_shorter_than_keys": attention(
        (B, HQ, S, D), (B, HQ, 9, D), (B, HQ, 9, D),
        mask_const=np.random.default_rng(1).standard_normal((1, S, 7)).astype(np.float32)),
    "4d_one_kv_head_bool_mask": attention((B, HQ, S, D), (B, 1, S, D), (B, 1, S, D), (B, 1, S, S),
                                          mask_type=BOOL),
    "4d_grouped_float_mask": attention((B, HQ, S, D), (B, 2, 7, D), (B, 2, 7, 4), (B, 1, S, 7)),
    "3d_bool_mask": attention((B, S, HQ * D), (B, 7, HQ * D), (B, 7, HQ * 5), (S, 7), mask_type=BOOL,
                              q_num_heads=HQ, kv_num_heads=HQ),
    "3d_grouped_causal": attention((B, S, HQ * D), (B, S, 2 * D), (B, S, 2 * D), q_num_heads=HQ,
                                   kv_num_heads=2, is_causal=1),
    "3d_present_key_value": attention((B, S, HQ * D), (B, S, HQ * D), (B, S, HQ * D),
                                      outputs=("Y", "present_key", "present_value"),
                                      q_num_heads=HQ, kv_num_heads=HQ),
}


# ONNX Runtime 1.32 refuses a mask shorter than the keys, which the spec pads with -inf
ORT_REFUSES = {"4d_constant_mask_shorter_than_keys"}


@pytest.mark.parametrize("case", list(GOLDEN))
def test_standard_attention_becomes_ours(case):
    graph, report = fuse(GOLDEN[case], level=1)
    assert matched(report, "StandardAttentionFusionOp") == 1
    assert "Attention" not in ops(graph) and ops(graph).count("autofusion::Attention") == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(GOLDEN))
def test_standard_attention_fused_equals_onnx_runtime(case, backend):
    assert_equals_ort(GOLDEN[case], backend, reference=case in ORT_REFUSES)


def test_standard_attention_golden_graph():
    """3-D grouped heads: split into heads (views), the 2 query heads of each key/value head
    folded into its rows, the causal frontier a constant mask tiled to them, then merged back."""
    graph, _ = fuse(GOLDEN["3d_grouped_causal"], level=1)
    assert ops(graph) == ["Reshape", "Transpose", "Reshape", "Transpose", "Reshape", "Transpose",
                          "Reshape", "autofusion::Attention", "Reshape", "Transpose", "Reshape"]
    [attn] = [n for n in graph.nodes if n.op == "autofusion::Attention"]
    assert attn.inputs[0].shape == (B, 2, 2 * S, D) and attn.inputs[1].shape == (B, 2, S, D)
    assert attn.attrs["scale"] == pytest.approx(D ** -0.5) and attn.attrs["nan_to_zero"] == 1
    mask = attn.inputs[3].const
    assert mask.shape == (2 * S, S) and np.array_equal(mask[S:], mask[:S])
    assert np.array_equal(np.isneginf(mask[:S]), ~np.tril(np.ones((S, S), bool)))


@pytest.mark.parametrize("case", ["4d", "4d_causal_shorter_query", "3d_grouped_causal"])
def test_standard_attention_runs_on_the_native_backend(case):
    compiled = autofusion.compile(GOLDEN[case], level=1, backend="auto")
    if compiled.plan.native is not None:
        pytest.skip(f"no native code here: {compiled.plan.native}")
    assert runs_natively(compiled, "autofusion::Attention")


Q4, K4 = (B, HQ, S, D), (B, HQ, S, D)
REFUSED = {
    "past_key": (model_of("Attention", {"Q": (FLOAT, Q4), "K": (FLOAT, K4), "V": (FLOAT, K4),
                                        "attn_mask": (None, ()), "past_key": (FLOAT, (B, HQ, 3, D)),
                                        "past_value": (FLOAT, (B, HQ, 3, D))}, ["Y"]),
                 ("Attention 'op': takes past_key/past_value (a key/value cache); our fused op "
                  "attends over k and v as given")),
    "softcap": (attention(Q4, K4, K4, softcap=2.0),
                "Attention 'op': softcap=2; our fused op has no softcap"),
    "qk_output": (attention(Q4, K4, K4, outputs=("Y", "pk", "pv", "qk"), qk_matmul_output_mode=1),
                  ("Attention 'op': its qk_matmul_output is asked for; our fused op gives only the "
                   "result")),
    "softmax_precision": (attention(Q4, K4, K4, softmax_precision=TensorProto.DOUBLE),
                          "Attention 'op': softmax_precision=DOUBLE; our fused op's softmax is float32"),
    "per_head_mask_grouped": (attention(Q4, (B, 2, S, D), (B, 2, S, D), (1, HQ, S, S)),
                              ("Attention 'op': the mask 'attn_mask' [1,4,6,6] varies per head, which "
                               "grouped-query attention (4 query heads on 2) cannot fold into rows")),
    "computed_short_mask": (attention(Q4, (B, HQ, 9, D), (B, HQ, 9, D), (S, 7)),
                            ("Attention 'op': the computed mask 'attn_mask' [6,7] is shorter than the 9 "
                             "keys (the spec pads it at run time)")),
    "causal_symbolic": (attention((B, HQ, "s", D), (B, HQ, "s", D), (B, HQ, "s", D), is_causal=1),
                        ("Attention 'op': is_causal with sequence lengths known only at run time "
                         "(q [2,4,s,8], k [2,4,s,8])")),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_standard_attention_outside_ours_is_a_near_miss(case):
    model, reason = REFUSED[case]
    graph, report = fuse(model, level=1)
    assert "Attention" in ops(graph) and "autofusion::Attention" not in ops(graph)
    assert near_miss(report, "StandardAttentionFusionOp") == reason


def test_standard_attention_with_nonpad_kv_seqlen_is_a_near_miss():
    model = model_of("Attention", {"Q": (FLOAT, Q4), "K": (FLOAT, K4), "V": (FLOAT, K4), "attn_mask": (None, ()),
                                   "past_key": (None, ()), "past_value": (None, ()),
                                   "nonpad_kv_seqlen": (TensorProto.INT64, (B,))}, ["Y"], opset=24)
    _, report = fuse(model, level=1)
    assert near_miss(report, "StandardAttentionFusionOp") == (
        "Attention 'op': takes nonpad_kv_seqlen (an external cache); our fused op attends over k "
        "and v as given")


# ---- RMSNormalization ------------------------------------------------------------------------

def rms_normalization(x, scale=None, scale_const=None, **attrs):
    inputs = {"X": (FLOAT, x)}
    if scale is not None:
        inputs["scale"] = (FLOAT, scale)
    inits = {"scale": scale_const} if scale_const is not None else {}
    return model_of("RMSNormalization", inputs, ["Y"], initializers=inits, **attrs)


RMS_GOLDEN = {
    "last_axis_computed_scale": rms_normalization((2, 5, 16), (16,)),
    "two_axes_epsilon": rms_normalization((2, 5, 16), (5, 16), axis=-2, epsilon=0.1),
    "broadcast_constant_scale": rms_normalization(
        (2, 5, 16), scale_const=np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32), axis=1),
    "constant_scale": rms_normalization(
        (3, 64), scale_const=np.random.default_rng(3).standard_normal(64).astype(np.float32)),
}


@pytest.mark.parametrize("case", list(RMS_GOLDEN))
def test_rms_normalization_becomes_ours(case):
    graph, report = fuse(RMS_GOLDEN[case], level=1)
    assert matched(report, "RMSNormalizationFusionOp") == 1
    assert ops(graph) == ["autofusion::RMSNorm"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(RMS_GOLDEN))
def test_rms_normalization_fused_equals_onnx_runtime(case, backend):
    assert_equals_ort(RMS_GOLDEN[case], backend)


def test_rms_normalization_golden_graph():
    """The schema's epsilon (1e-5, where ours defaults to 1e-6) and axis written out; a
    broadcast constant scale expanded to the normalized shape, which the native kernel takes."""
    graph, _ = fuse(RMS_GOLDEN["broadcast_constant_scale"], level=1)
    [norm] = graph.nodes
    assert norm.attrs == {"axis": 1, "epsilon": pytest.approx(1e-5)}
    assert norm.inputs[1].shape == (5, 16)
    compiled = autofusion.compile(RMS_GOLDEN["broadcast_constant_scale"], level=1, backend="auto")
    if compiled.plan.native is None:
        assert runs_natively(compiled, "autofusion::RMSNorm")


def test_rms_normalization_in_another_stash_type_is_a_near_miss():
    model = rms_normalization((2, 16), (16,), stash_type=TensorProto.DOUBLE)
    graph, report = fuse(model, level=1)
    assert ops(graph) == ["RMSNormalization"]
    assert near_miss(report, "RMSNormalizationFusionOp") == (
        "RMSNormalization 'op': stash_type=DOUBLE for a FLOAT input; the kernel computes in the "
        "input's type")


def test_rms_normalization_with_a_computed_broadcast_scale_is_a_near_miss():
    model = rms_normalization((2, 5, 16), (1, 16), axis=1)
    _, report = fuse(model, level=1)
    assert near_miss(report, "RMSNormalizationFusionOp") == (
        "RMSNormalization 'op': 'scale' is neither of the normalized shape nor a broadcast constant")


def test_standard_ops_run_unfused_at_level_0():
    graph, _ = fuse(GOLDEN["4d"], level=0)
    assert ops(graph) == ["Attention"]
