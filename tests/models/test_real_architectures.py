"""Real architectures exported from PyTorch give ONNX Runtime's outputs (1e-4 rel) at every level."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import autofusion
from autofusion.backend.native import unavailable
from autofusion.backend.precision import has_bf16
from autofusion.ir import verify

from .architectures import ARCHITECTURES

RTOL = 1e-4


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_close(got, want, rtol=RTOL):
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= rtol * scale, f"max abs diff {err:.3g} exceeds {rtol} x max|ref| ({scale:.3g})"


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def arch(request):
    model, feeds = ARCHITECTURES[request.param]()
    return request.param, model, feeds


@pytest.mark.parametrize("level", [0, 1, 2])
def test_matches_onnxruntime(arch, level):
    name, model, feeds = arch
    compiled = autofusion.compile(model, level=level)
    verify(compiled.graph)
    got = compiled.run(feeds)["output"]
    assert_close(got, ort_run(model, feeds)[0])


def test_torch_tensors_in_torch_tensors_out(arch):
    name, model, feeds = arch
    compiled = autofusion.compile(model)
    out = compiled(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    assert isinstance(out, torch.Tensor)
    assert_close(out.numpy(), compiled(**feeds))


def test_positional_and_named_calls_agree(arch):
    name, model, feeds = arch
    compiled = autofusion.compile(model)
    by_position = compiled(*[feeds[n] for n in compiled.input_names])
    np.testing.assert_array_equal(by_position, compiled(**feeds))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_no_step_runs_on_a_reference_kernel(arch, precision):
    """oneDNN's reference kernels (`ref:`) are what it picks where no fast kernel takes a problem,
    often hundreds of times slower: a plan of these architectures has none, in fp32 or bf16."""
    if unavailable() is not None:
        pytest.skip(f"native backend: {unavailable()}")
    if precision == "bf16" and not has_bf16():
        pytest.skip("no bf16 on this CPU")
    name, model, feeds = arch
    compiled = autofusion.compile(model, backend="native", precision=precision)
    compiled.run(feeds)   # symbolic sizes: set up on the first call
    slow = {n.name: k for n, k in compiled.plan.kernels.items()
            if any(part.removeprefix("reorder ").startswith("ref") for part in k.split(" + "))}
    assert not slow, slow


def test_resnet_keeps_its_batchnorms():
    model, _ = ARCHITECTURES["resnet_stack"]()
    graph = autofusion.load(model)
    assert graph.op_histogram()["BatchNormalization"] == 12  # stem 1 + blocks 3 x 3 + 2 downsamples


@pytest.mark.parametrize("name, feeds", [
    ("bert_layer", {"input_ids": np.arange(21).reshape(3, 7) % 100, "attention_mask": np.ones((3, 7), np.int64)}),
    ("gpt_block", {"input_ids": np.arange(15).reshape(1, 15) % 100}),
    ("llama_block", {"input_ids": np.arange(21).reshape(3, 7) % 100})])
def test_symbolic_batch_and_sequence_run_at_other_sizes(name, feeds):
    model, _ = ARCHITECTURES[name]()
    assert_close(autofusion.compile(model)(**feeds), ort_run(model, feeds)[0])


def test_symbolic_batch_runs_at_another_size():
    model, feeds = ARCHITECTURES["resnet_stack"]()
    compiled = autofusion.compile(model)
    x = np.random.default_rng(1).standard_normal((3, 3, 64, 64)).astype(np.float32)
    assert_close(compiled(x), ort_run(model, {"image": x})[0])


EXPECTED_FUSIONS = {   # what level 2 must find in each CI-sized architecture
    "resnet_stack": {"ConvBNReluFusionOp": 7, "ConvAddReluFusionOp": 3, "ConvBNFusionOp": 2,
                     "PoolGemmFusionOp": 1},
    "mobilenet_block": {"ConvBNFusionOp": 4, "ConvFusionOp": 2, "ConvActivationFusionOp": 5,
                        "ConvAddFusionOp": 1, "PoolGemmFusionOp": 1},   # 6 convs, 5 activated
    "bert_layer": {"AttentionFusionOp": 1, "AddLayerNormFusionOp": 2, "MatMulBiasFusionOp": 6,
                   "MatMulGeluFusionOp": 1},
    # ln_1 → c_attn, ln_2 → c_fc, ln_f → LM head; the GELU joins c_fc through its Reshape
    "gpt_block": {"CausalAttentionFusionOp": 1, "LayerNormMatMulFusionOp": 3, "GeluTanhFusionOp": 1,
                  "MatMulGeluFusionOp": 1, "AddLayerNormFusionOp": 1},
    # attention through rotary and repeat_kv with symbolic batch and sequence; the final norm
    # folds into the head (the others feed q/k/v and gate/up)
    "llama_block": {"AttentionFusionOp": 1, "RMSNormFusionOp": 3, "MatMulSiLUFusionOp": 1,
                    "LayerNormMatMulFusionOp": 1},
}


def test_expected_fusions_appear_in_the_report(arch):
    name, model, feeds = arch
    report = autofusion.compile(model, level=2).report
    counts = {r.name: r.matched for r in report.rules}
    assert {k: counts.get(k, 0) for k in EXPECTED_FUSIONS[name]} == EXPECTED_FUSIONS[name]
    assert report.ops_after < report.ops_before
