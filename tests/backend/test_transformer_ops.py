"""Attention, RMSNormalization and RotaryEmbedding (opset 23) against ONNX Runtime: the
attention variants the node suite leaves out (cross-attention GQA with a cache, 3-D heads with
scale, masks of every rank, fully masked rows on the SDPA path), and the norms and rotations
on shapes and dtypes of real models."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import autofusion

FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
NP = {FLOAT: np.float32, BOOL: np.bool_, INT64: np.int64, TensorProto.FLOAT16: np.float16}


def one_node(op: str, inputs: dict, outputs: list[str], opset: int = 23, **attrs):
    """A model of one node; inputs maps name → (elem type, shape). The outputs have the first
    input's type."""
    names, elem = [n or "" for n in inputs], next(iter(inputs.values()))[0]
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items() if n],
        [helper.make_tensor_value_info(o, elem, None) for o in outputs if o])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def random_feeds(inputs: dict, seed: int = 0, positions: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for n, (t, s) in inputs.items():
        if not n:
            continue
        if t == BOOL:
            feeds[n] = rng.random(s) > 0.3
        elif t == INT64:
            feeds[n] = rng.integers(0, positions, s)
        else:
            feeds[n] = rng.standard_normal(s).astype(NP[t])
    return feeds


def check(model, feeds, rtol=1e-5, atol=1e-5, reference: bool = False):
    """Ours equal to ONNX Runtime's (or, where it refuses the case, ONNX's reference)."""
    if reference:
        want = ReferenceEvaluator(model).run(None, feeds)
    else:
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    compiled = autofusion.compile(model, level=0)
    outs = compiled.run(feeds)
    got = [outs[n] for n in compiled.output_names]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"scale": 0.3, "softcap": 2.0},
                                   {"qk_matmul_output_mode": 2}])
def test_attention_3d_gqa_with_cache(attrs):
    """Decoder step of a grouped-query layer: 3-D projections, 4 query heads over 2 kv heads,
    4 cached positions, a float mask over the total length."""
    inputs = {"Q": (FLOAT, [2, 3, 32]), "K": (FLOAT, [2, 3, 16]), "V": (FLOAT, [2, 3, 12]),
              "attn_mask": (FLOAT, [2, 1, 3, 7]), "past_key": (FLOAT, [2, 2, 4, 8]),
              "past_value": (FLOAT, [2, 2, 4, 6])}
    outputs = ["Y", "present_key", "present_value"] + (["qk"] if "qk_matmul_output_mode" in attrs else [])
    model = one_node("Attention", inputs, outputs, q_num_heads=4, kv_num_heads=2, **attrs)
    check(model, random_feeds(inputs))


@pytest.mark.parametrize("mask_shape", [[7], [5, 7], [4, 5, 7], [2, 4, 5, 7], [2, 1, 5, 4]])
@pytest.mark.parametrize("mask_type", [FLOAT, BOOL])
def test_attention_mask_ranks(mask_shape, mask_type):
    """A mask of any rank broadcasts to [batch, heads, q, total]; a short last axis is padded
    with -inf (False). ONNX Runtime refuses both of those: ONNX's reference checks them."""
    inputs = {"Q": (FLOAT, [2, 4, 5, 8]), "K": (FLOAT, [2, 4, 7, 8]), "V": (FLOAT, [2, 4, 7, 8]),
              "attn_mask": (mask_type, mask_shape)}
    check(one_node("Attention", inputs, ["Y"]), random_feeds(inputs, seed=len(mask_shape)),
          reference=len(mask_shape) == 1 or mask_shape[-1] < 7)


def test_attention_fully_masked_row_is_zero():
    """A query row whose boolean mask is all False gives 0 on the SDPA path too."""
    inputs = {"Q": (FLOAT, [1, 2, 3, 8]), "K": (FLOAT, [1, 2, 4, 8]), "V": (FLOAT, [1, 2, 4, 8]),
              "attn_mask": (BOOL, [3, 4])}
    feeds = random_feeds(inputs)
    feeds["attn_mask"][1] = False
    y = autofusion.compile(one_node("Attention", inputs, ["Y"]), level=0).run(feeds)["Y"]
    assert not np.isnan(y).any() and (y[:, :, 1] == 0).all()
    check(one_node("Attention", inputs, ["Y"]), feeds)


@pytest.mark.parametrize("shape, axis", [([2, 16, 64], -1), ([2, 3, 4, 5], 1), ([4, 6], 0)])
@pytest.mark.parametrize("dtype", [FLOAT, TensorProto.FLOAT16])
def test_rms_normalization(shape, axis, dtype):
    inputs = {"X": (dtype, shape), "scale": (dtype, shape[axis:])}
    model = one_node("RMSNormalization", inputs, ["Y"], axis=axis, epsilon=1e-5)
    tol = 1e-5 if dtype == FLOAT else 2e-3
    check(model, random_feeds(inputs), rtol=tol, atol=tol)


@pytest.mark.parametrize("attrs", [{}, {"interleaved": 1}, {"rotary_embedding_dim": 8},
                                   {"interleaved": 1, "rotary_embedding_dim": 8}])
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("with_positions", [True, False])
def test_rotary_embedding(attrs, rank, with_positions):
    """LLaMA-style (halves) and GPT-J-style (interleaved) rotation, full or partial, of 4-D
    [batch, heads, seq, 16] or 3-D [batch, seq, heads·16] input, caches gathered by position
    ids or given per token."""
    b, h, s, d = 2, 3, 5, 16
    half = attrs.get("rotary_embedding_dim", d) // 2
    x = (FLOAT, [b, h, s, d] if rank == 4 else [b, s, h * d])
    cache = [32, half] if with_positions else [b, s, half]
    inputs = {"X": x, "cos": (FLOAT, cache), "sin": (FLOAT, cache)}
    if with_positions:
        inputs["position_ids"] = (INT64, [b, s])
    model = one_node("RotaryEmbedding", inputs, ["Y"], **attrs, **({"num_heads": h} if rank == 3 else {}))
    check(model, random_feeds(inputs, positions=32))
