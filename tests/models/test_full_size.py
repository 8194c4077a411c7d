"""Full-size models (ResNet-50, BERT-Base, random weights) exported the way a framework emits them:
the expected fusions all happen and the outputs agree with ONNX Runtime.

These need the benchmark extra (torchvision, transformers; see README) and are skipped without it.
Run them with the bench environment: python -m pytest tests/models/test_full_size.py
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import autofusion
from autofusion.benchmarks.models import ModelUnavailable, example_inputs, export_onnx


def exported(name: str, tmp_path_factory):
    path = tmp_path_factory.mktemp(name) / f"{name}.onnx"
    try:
        export_onnx(name, path)
    except ModelUnavailable as e:
        pytest.skip(str(e))
    feeds = {k: v.numpy() for k, v in example_inputs(name).items()}
    return path, feeds


def matched(report) -> dict[str, int]:
    return {r.name: r.matched for r in report.rules if r.matched}


def assert_matches_onnxruntime(path, compiled, feeds, rtol=1e-4):
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, ref in zip(compiled.run(feeds).values(), want):
        err = np.abs(got.astype(np.float64) - ref).max()
        assert err <= rtol * np.abs(ref).max(), f"max abs diff {err:.3g}"


def test_resnet50_folds_every_batchnorm(tmp_path_factory):
    path, feeds = exported("resnet50", tmp_path_factory)
    compiled = autofusion.compile(path, level=2)
    assert compiled.report.histogram_before["BatchNormalization"] == 53
    counts = matched(compiled.report)
    bn_folds = sum(counts.get(r, 0) for r in ("ConvBNReluFusionOp", "ConvAddReluFusionOp", "ConvBNFusionOp"))
    assert bn_folds == 53 and "BatchNormalization" not in compiled.graph.op_histogram()
    assert compiled.graph.op_histogram()["autofusion::FusedConv"] == 53
    assert_matches_onnxruntime(path, compiled, feeds)


def test_bert_base_layernorm_gelu_attention_each_one_kernel(tmp_path_factory):
    path, feeds = exported("bert-base", tmp_path_factory)
    compiled = autofusion.compile(path, level=2)
    hist, counts = compiled.graph.op_histogram(), matched(compiled.report)
    assert hist["autofusion::LayerNorm"] == 25 and "LayerNormalization" not in hist
    assert counts["AddLayerNormFusionOp"] == 24 + 1   # every residual Add joined its LayerNorm
    assert counts["MatMulGeluFusionOp"] == 12 and "Erf" not in hist   # GELU in the FFN's epilogue
    assert hist["autofusion::Attention"] == 12 and "Softmax" not in hist
    assert_matches_onnxruntime(path, compiled, feeds)
