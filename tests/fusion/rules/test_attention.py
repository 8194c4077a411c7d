"""Attention rules: softmax(q·kᵀ·scale + mask)·v as BERT (and the scale-by-Mul / unscaled forms)
and GPT-2's causal Where form write it, into one scaled_dot_product_attention."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import autofusion
from tests.models.architectures import BertLayer, bert_layer, export

from .harness import assert_same_outputs, fuse, matched, near_miss, node, onnx_model, ops, torch_model

LOWEST = np.finfo(np.float32).min








class ScaledDotProduct(torch.nn.Module):   # q, k, v, mask: [B, H, S, D] and [B, 1, 1, S]
    def forward(self, q, k, v, mask):
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask, -1) @ v


class CausalSelfAttention(torch.nn.Module):
    """GPT-2's eager attention, nn.MultiheadAttention-free: fused QKV projection, heads split by
    permute, k transposed for the product, Where(causal, scores, lowest) before the softmax."""

    def __init__(self, hidden=32, heads=4, max_pos=16, padding_mask=False, fill=None):
        super().__init__()
        self.heads, self.dh, self.padding_mask, self.fill = heads, hidden // heads, padding_mask, fill
        self.qkv, self.proj = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)
        self.register_buffer("causal", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool))
                             .view(1, 1, max_pos, max_pos))

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.dh).permute(0, 2, 1, 3)

    def forward(self, x, mask=None):
        q, k, v = map(self._split, self.qkv(x).split(self.heads * self.dh, dim=2))
        w = q @ k.transpose(-1, -2) / torch.full([], v.size(-1) ** 0.5)
        ql, kl = q.size(-2), k.size(-2)
        fill = torch.finfo(w.dtype).min if self.fill is None else self.fill
        w = torch.where(self.causal[:, :, kl - ql:kl, :kl], w, torch.full([], fill))
        if self.padding_mask:
            w = w + mask
        ctx = (torch.softmax(w, -1) @ v).permute(0, 2, 1, 3)
        return self.proj(ctx.reshape(x.shape))


QKV = [(2, 4, 8, 16)] * 3


# ---- BERT: softmax(q·kᵀ / √d + mask)·v -------------------------------------------------------

def test_scaled_dot_product_golden():
    model = torch_model(ScaledDotProduct(), *QKV, (2, 1, 1, 8))
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert str(graph).splitlines()[-1].endswith(
        " = autofusion::Attention[scale=0.25](x0, x1, x2, x3)")   # k itself: its Transpose undone
    assert len(graph) == 1


def test_scaled_dot_product_fused_equals_unfused():
    """rtol 1e-5: SDPA computes the softmax blockwise, in another order than Softmax does."""
    assert_same_outputs(torch_model(ScaledDotProduct(), *QKV, (2, 1, 1, 8)), rtol=1e-5)


def test_bert_layer_attention_fuses_and_matches_the_unfused_graph():
    model, feeds = bert_layer()
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert "Softmax" not in ops(graph) and ops(graph).count("autofusion::Attention") == 1
    [attn] = [n for n in graph.nodes if n.op_type == "Attention"]
    # k arrives as [B,S,H,D] transposed by [0,2,3,1]; the op takes [B,H,S,D]: one [0,2,1,3] view
    k = attn.inputs[1].producer
    assert k.op_type == "Transpose" and k.attrs["perm"] == [0, 2, 1, 3]
    assert attn.inputs[3].shape == ("batch", 1, 1, "seq") and attn.attrs["scale"] == 0.25
    want = autofusion.compile(model, level=0).run(feeds)["output"]
    got = autofusion.compile(model, level=2).run(feeds)["output"]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_bert_layer_at_base_width_matches_too():
    """BERT-Base's head size (64) and 12 heads, a padded second sequence."""
    ids = torch.randint(0, 100, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.int64)
    mask[1, 15:] = 0
    model = export(BertLayer(hidden=768, heads=12, ffn=3072), (ids, mask),
                   ["input_ids", "attention_mask"])
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    compiled = autofusion.compile(model, level=2)
    assert compiled.graph.op_histogram()["autofusion::Attention"] == 1
    want = autofusion.compile(model, level=0).run(feeds)["output"]
    got = compiled.run(feeds)["output"]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def attention_graph(scale_op: str | None, softmax_axis: int = -1, mask=("B", 1, 1, "S"),
                    q=(2, 4, 8, 16), scale=0.125):
    """q·kᵀ (kᵀ given), scaled by scale_op (or not), plus mask, softmax, ·v."""
    nodes = [node("MatMul", ["q", "kt"], ["s"])]
    last = "s"
    if scale_op:
        nodes.append(node(scale_op, ["s", "c"], ["scaled"]))
        last = "scaled"
    nodes += [node("Add", [last, "mask"], ["masked"]),
              node("Softmax", ["masked"], ["p"], axis=softmax_axis), node("MatMul", ["p", "v"], ["y"])]
    b, h, s, d = q
    inputs = {"q": q, "kt": (b, h, d, s), "v": (b, h, s, d),
              "mask": tuple(b if x == "B" else s if x == "S" else x for x in mask)}
    consts = {"c": np.float32(scale if scale_op == "Mul" else 1 / scale)} if scale_op else {}
    return onnx_model(nodes, inputs, ["y"], consts)


@pytest.mark.parametrize("scale_op, scale", [("Div", 0.125), ("Mul", 0.125), (None, 1.0)])
def test_scale_by_div_mul_or_none(scale_op, scale):
    model = attention_graph(scale_op)
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert str(graph).splitlines()[-2:] == [
        "  s_1_out0: float[2,4,8,16] = Transpose[perm=[0, 1, 3, 2]](kt)",   # a view
        f"  y: float[2,4,8,16] = autofusion::Attention[scale={scale}](q, s_1_out0, v, mask)"]
    assert_same_outputs(model, rtol=1e-5)


def test_full_mask_per_head_is_taken():
    model = attention_graph("Div", mask=("B", 4, 8, 8))
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert_same_outputs(model, rtol=1e-5)


def test_mask_that_would_grow_the_scores_is_refused():
    model = attention_graph("Div", mask=(3, 2, 4, 8, 8))
    graph, report = fuse(model)
    assert "autofusion::Attention" not in ops(graph)
    assert near_miss(report, "AttentionFusionOp") == (
        "Add 'masked': the mask 'mask' [3,2,4,8,8] does not broadcast to the scores [2,4,8,8] "
        "without growing them")


def test_keys_shared_across_batch_are_refused():
    """Keys broadcast over the batch ([1,H,D,S] against [B,H,S,D] queries) are fine for MatMul,
    not for SDPA."""
    nodes = [node("MatMul", ["q", "kt"], ["s"]), node("Softmax", ["s"], ["p"], axis=-1),
             node("MatMul", ["p", "v"], ["y"])]
    model = onnx_model(nodes, {"q": (2, 4, 8, 16), "kt": (1, 4, 16, 8), "v": (1, 4, 8, 16)}, ["y"])
    graph, report = fuse(model)
    assert "autofusion::Attention" not in ops(graph)
    assert near_miss(report, "AttentionFusionOp") == (
        "MatMul 's': q [2,4,8,16], kᵀ [1,4,16,8], v [1,4,8,16] do not share their batch and head "
        "dims (SDPA broadcasts only a single key/value head)")


def test_softmax_over_another_axis_is_refused():
    graph, report = fuse(attention_graph("Div", softmax_axis=2))
    assert "autofusion::Attention" not in ops(graph)
    assert near_miss(report, "AttentionFusionOp") == "Softmax 'p': axis=2, rule needs the last axis"


def test_attention_is_level_2():
    graph, report = fuse(attention_graph("Div"), level=1)
    assert "autofusion::Attention" not in ops(graph)
    assert "AttentionFusionOp" not in [r.name for r in report.rules]


# ---- GPT-2: softmax(where(causal, q·kᵀ / √d, lowest) + mask)·v ------------------------------

def test_gpt2_causal_block_fuses_into_one_attention():
    model = torch_model(CausalSelfAttention(), (2, 16, 32))
    graph, report = fuse(model)
    assert matched(report, "CausalAttentionFusionOp") == 1
    assert not {"Where", "Softmax", "MatMul"} & set(ops(graph))
    [attn] = [n for n in graph.nodes if n.op_type == "Attention"]
    mask = attn.inputs[3]   # the causal keep mask, folded into a constant additive mask
    assert mask.const is not None and mask.const.dtype == np.float32
    np.testing.assert_array_equal(mask.const[0, 0], np.where(np.tri(16, dtype=bool), 0, LOWEST))


def test_gpt2_causal_block_fused_equals_unfused():
    assert_same_outputs(torch_model(CausalSelfAttention(), (2, 16, 32)), rtol=1e-5)


def test_gpt2_causal_block_with_a_padding_mask():
    model = torch_model(CausalSelfAttention(padding_mask=True), (2, 16, 32), (2, 1, 1, 16))
    graph, report = fuse(model)
    assert matched(report, "CausalAttentionFusionOp") == 1
    [attn] = [n for n in graph.nodes if n.op_type == "Attention"]
    assert attn.inputs[3].producer.op_type == "Add"   # keep (constant) + the padding mask
    assert_same_outputs(model, rtol=1e-5)


def test_causal_fill_other_than_lowest_is_refused():
    """Where(keep, s, -1e4) is not s + where(keep, 0, -1e4): old GPT-2 exports are left alone."""
    graph, report = fuse(torch_model(CausalSelfAttention(fill=-1e4), (2, 16, 32)))
    assert "Where" in ops(graph)
    assert near_miss(report, "CausalAttentionFusionOp") == (
        "Where '/Where': masked scores are set to -10000; the rule needs the lowest float32 "
        "(-3.4028235e+38), for which adding equals replacing")


def test_gpt2_with_dynamic_shapes_fuses_and_checks_its_mask_per_call():
    """With a symbolic sequence the causal keep mask is a Slice of a buffer by run-time lengths:
    its shape is unknown here, so the kernel checks it per call."""
    model = export(CausalSelfAttention(), (torch.randn(2, 16, 32),), ["x"], {"x": {0: "b", 1: "s"}})
    graph, report = fuse(model)
    assert matched(report, "CausalAttentionFusionOp") == 1 and "Softmax" not in ops(graph)
    unfused, fused = autofusion.compile(model, level=0), autofusion.compile(model)
    for shape in [(2, 16, 32), (1, 5, 32), (3, 12, 32)]:   # up to the 16 positions it has
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        want = unfused(x)
        assert np.abs(fused(x) - want).max() <= 1e-5 * np.abs(want).max()


def test_mask_of_unknown_shape_that_grows_the_scores_runs_as_the_decomposition():
    """A mask whose dims are known only at run time may still grow the scores ([3,…] against
    batch 1): then the kernel broadcasts as the op's decomposition does, not as SDPA would."""
    model = attention_graph("Div", q=(1, 2, 4, 8), mask=("m0", "m1", "m2", "m3"))
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in
             [("q", (1, 2, 4, 8)), ("kt", (1, 2, 8, 4)), ("v", (1, 2, 4, 8)), ("mask", (3, 2, 4, 4))]}
    want = autofusion.compile(model, level=0).run(feeds)["y"]
    got = autofusion.compile(model).run(feeds)["y"]
    assert got.shape == want.shape == (3, 2, 4, 8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---- torch's scaled_dot_product_attention as its exporter writes it ---------------------------

class TorchSDPA(torch.nn.Module):
    def forward(self, q, k, v, keep):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def sdpa_export(keep: torch.Tensor):
    args = (torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), keep)
    return export(TorchSDPA(), args, ["q", "k", "v", "keep"]), args


def test_torch_sdpa_export_fuses_back_into_one_attention():
    """The export scales q and kᵀ by √scale each, makes the bool mask additive, and guards the
    softmax with Where(IsNaN(p), 0, p): one Attention, scale folded, rows masked out give 0."""
    keep = torch.ones(2, 1, 8, 8, dtype=torch.bool)
    keep[1, 0, 3, :] = False                    # a query row with nothing to attend to
    model, args = sdpa_export(keep)
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert ops(graph) == ["Where", "autofusion::Attention"]
    attn = graph.nodes[-1]
    assert attn.attrs == {"nan_to_zero": 1, "scale": pytest.approx(0.25)}
    feeds = dict(zip(["q", "k", "v", "keep"], (a.numpy() for a in args)))
    want = autofusion.compile(model, level=0).run(feeds)["output"]
    got = autofusion.compile(model).run(feeds)["output"]
    assert not np.isnan(want).any() and np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    np.testing.assert_array_equal(got[1, :, 3], 0)


def test_a_row_masked_out_everywhere_gives_nan_as_softmax_does():
    """Without the guard the op means softmax's NaN for such a row; SDPA would give 0, so the
    kernel sees the -inf row in the mask and runs the decomposition."""
    model = attention_graph("Div", q=(1, 2, 4, 8), mask=(1, 1, 4, 4))
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((1, 2, 4, 8)), "kt": rng.standard_normal((1, 2, 8, 4)),
             "v": rng.standard_normal((1, 2, 4, 8)), "mask": np.zeros((1, 1, 4, 4))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    feeds["mask"][0, 0, 2] = -np.inf
    want = autofusion.compile(model, level=0).run(feeds)["y"]
    got = autofusion.compile(model).run(feeds)["y"]
    assert np.isnan(want[:, :, 2]).all() and np.isnan(got[:, :, 2]).all()
    np.testing.assert_allclose(np.delete(got, 2, axis=2), np.delete(want, 2, axis=2), rtol=1e-5, atol=1e-6)


def test_t5_position_bias_and_padding_mask_join_one_attention():
    """T5: no scale, and two additive terms, softmax(q·kᵀ + position_bias + mask)·v."""
    nodes = [node("MatMul", ["q", "kt"], ["s"]), node("Add", ["s", "bias"], ["sb"]),
             node("Add", ["sb", "mask"], ["masked"]), node("Softmax", ["masked"], ["p"], axis=-1),
             node("MatMul", ["p", "v"], ["y"])]
    rng = np.random.default_rng(0)
    model = onnx_model(nodes, {"q": (2, 4, 8, 16), "kt": (2, 4, 16, 8), "v": (2, 4, 8, 16), "mask": (2, 1, 1, 8)},
                       ["y"], {"bias": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)})
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert ops(graph) == ["Add", "Transpose", "autofusion::Attention"]
    assert_same_outputs(model, rtol=1e-5)


def test_gpt_neo_causal_attention_without_a_scale():
    nodes = [node("MatMul", ["q", "kt"], ["s"]), node("Where", ["keep", "s", "lowest"], ["w"]),
             node("Softmax", ["w"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["y"])]
    model = onnx_model(nodes, {"q": (2, 4, 8, 16), "kt": (2, 4, 16, 8), "v": (2, 4, 8, 16)}, ["y"],
                       {"keep": np.tri(8, dtype=bool)[None, None], "lowest": np.float32(LOWEST)})
    graph, report = fuse(model)
    assert matched(report, "CausalAttentionFusionOp") == 1 and "Softmax" not in ops(graph)
    assert_same_outputs(model, rtol=1e-5)


def test_one_key_value_head_for_all_query_heads_is_multi_query_attention():
    """Falcon: k and v have one head that broadcasts over the query heads; SDPA's GQA takes it."""
    nodes = [node("MatMul", ["q", "kt"], ["s"]), node("Div", ["s", "c"], ["scaled"]),
             node("Softmax", ["scaled"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["y"])]
    model = onnx_model(nodes, {"q": (2, 4, 8, 16), "kt": (2, 1, 16, 8), "v": (2, 1, 8, 16)}, ["y"],
                       {"c": np.float32(4)})
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert_same_outputs(model, rtol=1e-5)


def test_a_scalar_mask_is_taken():
    """A 0-d additive mask (FlexAttention's expanded score_mod): SDPA wants rank ≥ 2, the kernel
    lifts it."""
    model = attention_graph("Div", mask=())
    graph, report = fuse(model)
    assert matched(report, "AttentionFusionOp") == 1
    assert_same_outputs(model, rtol=1e-5)
