"""Levels, the disable list and its environment variables, and the report."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import autofusion
from autofusion.controls import resolve_controls
from autofusion.errors import AutofusionError
from autofusion.fusion import rule_names

from .rules.harness import torch_model


def silu_model():
    return torch_model(torch.nn.SiLU(), (2, 4), opset=13)


def test_level_0_changes_nothing_and_level_1_fuses():
    model = silu_model()
    assert [n.op_type for n in autofusion.compile(model, level=0).graph.nodes] == ["Sigmoid", "Mul"]
    fused = autofusion.compile(model, level=1)
    assert "Sigmoid" not in fused.graph.op_histogram()


def test_default_level_is_2(monkeypatch):
    for var in ("AUTOFUSION_LEVEL", "CANN_GRAPH_FUSION", "AUTOFUSION_DISABLE", "GE_FUSION_DISABLE_LIST"):
        monkeypatch.delenv(var, raising=False)
    assert resolve_controls(None, None) == (2, [])


@pytest.mark.parametrize("var", ["AUTOFUSION_LEVEL", "CANN_GRAPH_FUSION"])
def test_level_from_the_environment(monkeypatch, var):
    monkeypatch.delenv("AUTOFUSION_LEVEL", raising=False)
    monkeypatch.setenv(var, "0")
    assert autofusion.compile(silu_model()).report.level == 0
    assert resolve_controls(1, None)[0] == 1   # an explicit argument wins


@pytest.mark.parametrize("var", ["AUTOFUSION_DISABLE", "GE_FUSION_DISABLE_LIST"])
def test_disable_list_from_the_environment(monkeypatch, var):
    monkeypatch.delenv("AUTOFUSION_DISABLE", raising=False)
    monkeypatch.setenv(var, "SiLUFusionOp")
    compiled = autofusion.compile(silu_model(), level=2)
    assert compiled.report.disabled == ["SiLUFusionOp"]
    assert "autofusion::Activation" not in compiled.graph.op_histogram()


def test_unknown_disable_name_lists_the_valid_ones():
    with pytest.raises(AutofusionError, match="unknown fused-op name.*NoSuchFusionOp.*valid names:.*SiLUFusionOp"):
        autofusion.compile(silu_model(), disable="NoSuchFusionOp")


def test_bad_level_is_an_error(monkeypatch):
    with pytest.raises(AutofusionError, match="level 7 does not exist"):
        autofusion.compile(silu_model(), level=7)
    monkeypatch.setenv("AUTOFUSION_LEVEL", "high")
    with pytest.raises(AutofusionError, match="AUTOFUSION_LEVEL='high'"):
        autofusion.compile(silu_model())


def test_every_rule_has_a_unique_public_name_a_level_and_a_description():
    from autofusion.fusion import RULES
    names = rule_names()
    assert len(set(names)) == len(names) == len(RULES) + 1 and names[-1] == "AutoFusion"
    for r in RULES:
        assert r.name.endswith("FusionOp") and r.level in (1, 2) and r.description


def test_report_text_and_json():
    compiled = autofusion.compile(silu_model(), level=1)
    text = compiled.report.text()
    assert "Pattern: Sigmoid+Mul\n  Matched: 1 time\n  Fused into: SiLUFusionOp (autofusion::Activation)" in text
    assert "Total operators before fusion: 2\nTotal operators after fusion: 1" in text
    data = json.loads(compiled.report.dumps())
    silu = next(r for r in data["rules"] if r["name"] == "SiLUFusionOp")
    assert silu["matched"] == 1 and silu["est_speedup"] > 1
    assert data["ops_before"] == 2 and data["ops_after"] == 1


def test_fused_model_runs_like_the_original():
    model = silu_model()
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(autofusion.compile(model, level=2)(x), autofusion.compile(model, level=0)(x),
                               rtol=1e-6, atol=1e-7)


def test_report_text_shows_a_few_near_misses_per_rule_and_counts_the_rest():
    """Six SiLU-like chains whose sigmoid is also an output: six near-misses of one rule."""
    nodes = [n for i in range(6) for n in (helper.make_node("Sigmoid", [f"x{i}"], [f"s{i}"], name=f"sig{i}"),
                                           helper.make_node("Mul", [f"x{i}", f"s{i}"], [f"y{i}"], name=f"mul{i}"))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [4]) for i in range(6)],
                          [helper.make_tensor_value_info(f"{v}{i}", TensorProto.FLOAT, [4]) for i in range(6) for v in "ys"])
    report = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), level=1).report
    text = report.text()
    assert len(report.near_misses) == 6 and text.count("SiLUFusionOp: '") == 3
    assert "SiLUFusionOp: … and 3 more like these (every one is in the JSON report)" in text
    assert len(json.loads(report.dumps())["near_misses"]) == 6
