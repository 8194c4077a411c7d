"""`python -m autofusion.benchmarks.sweep`, the architecture sweep, on the one architecture that needs no
torchvision or transformers (tiny_resnet), so the command cannot rot in the test venv.

The sweep runs as a subprocess, as a user runs it; it checks what the run records, never how long
anything took.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autofusion

from autofusion.backend import native
from autofusion.backend import precision as P
from autofusion.benchmarks import sweep

ROOT = Path(__file__).resolve().parents[2]


def _sweep(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "autofusion.benchmarks.sweep", "--models", "^tiny_resnet$", "--out", str(out),
           *extra]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_tiny_resnet_static_and_dynamic_exports_equal_onnx_runtime_on_both_backends(tmp_path):
    out = tmp_path / "sweep"
    done = _sweep(out, "--variants", "ts17,ts17-dyn", "--levels", "0,2", "--backends", "native,torch",
                  "--time", "2")
    result = json.loads((out / "sweep.json").read_text())
    assert result["totals"] == {"architectures": 1, "variants": 2, "variants_tried": 2,
                                "runs": 8, "passed": 8}
    static, dynamic = sorted(result["variants"], key=lambda r: r["variant"])
    assert static["inputs"] == [{"pixel_values": [1, 3, 64, 64]}]
    # the dynamic export runs at its export size and at a second batch and image size
    assert dynamic["inputs"] == [{"pixel_values": [2, 3, 64, 64]}, {"pixel_values": [3, 3, 96, 96]}]
    for run in static["runs"] + dynamic["runs"]:
        assert run["status"] == "pass" and run["max_rel"] <= sweep.TOLERANCE["fp32"]
        assert run["reference_kernels"] == {}
        # timed against ONNX Runtime (--time): what was measured, never how fast
        assert run["ms"] > 0 and run["ort_ms"] > 0 and run["vs_ort"] == pytest.approx(run["ort_ms"] / run["ms"], rel=1e-2)
    assert "## Speed against ONNX Runtime (8 runs timed" in (out / "sweep.md").read_text()
    assert {(r["level"], r["backend"]) for r in dynamic["runs"]} == {
        (0, "native"), (0, "torch"), (2, "native"), (2, "torch")}
    line = "1 architectures, 2 variants, 8 of 8 level×variant runs equal to ONNX Runtime"
    assert line in (out / "sweep.md").read_text() and line in done.stdout
    assert not list((out / "onnx").iterdir())          # exports are removed unless --keep-onnx

    again = _sweep(out, "--variants", "ts17,ts17-dyn", "--levels", "0,2", "--backends", "native,torch")
    assert "skipping 2 variants finished" in again.stderr
    assert json.loads((out / "sweep.json").read_text())["variants"] == result["variants"]


@pytest.mark.skipif(native.unavailable() is not None or not P.has_bf16(),
                    reason="needs the native backend on a CPU with bf16 dot products")
def test_a_bf16_sweep_compiles_at_bf16_and_compares_within_its_tolerance(tmp_path):
    out = tmp_path / "sweep"
    _sweep(out, "--variants", "ts17", "--levels", "2", "--precision", "bf16", "--keep-onnx")
    result = json.loads((out / "sweep.json").read_text())
    assert result["precision"] == "bf16" and result["tolerance"] == sweep.TOLERANCE["bf16"]
    [run] = result["variants"][0]["runs"]
    # off fp32 by bf16's rounding: more than fp32's tolerance allows, within bf16's
    assert run["status"] == "pass" and sweep.TOLERANCE["fp32"] < run["max_rel"] <= sweep.TOLERANCE["bf16"]
    assert "autofusion in bf16" in (out / "sweep.md").read_text()
    assert [f.name for f in (out / "onnx").iterdir()] == ["tiny_resnet.ts17.onnx"]   # --keep-onnx


def test_a_variant_past_its_time_limit_is_recorded_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "sweep"
    _sweep(out, "--variants", "ts17,ts13", "--levels", "0", "--timeout", "1")
    records = json.loads((out / "sweep.json").read_text())["variants"]
    assert sorted(r["variant"] for r in records) == ["ts13", "ts17"]
    for r in records:    # killed before its export finished: no run of ours to blame
        assert r["status"] == "export timeout" and "within 1.0 s" in r["error"]


def test_runs_a_killed_worker_did_not_finish_are_closed_as_timeouts(tmp_path):
    arch, variant = sweep.ARCHITECTURES["tiny_resnet"], sweep.parse_variant("ts17")
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"architecture": arch.name, "variant": variant.name,
                                "status": "running", "export_s": 1.0, "planned": [[0, "native"], [2, "native"]],
                                "runs": [{"level": 0, "backend": "native", "status": "pass"}]}))
    sweep._close_unfinished(path, arch, variant, "timeout", "no result within 5 s")
    record = json.loads(path.read_text())
    assert record["status"] == "done"
    assert [(r["level"], r["status"]) for r in record["runs"]] == [(0, "pass"), (2, "timeout")]


def test_outputs_compare_relative_to_their_magnitude_and_exactly_when_not_float():
    ref = np.array([100.0, -50.0, 1.0], np.float32)
    assert sweep.compare_output(ref + np.float32(0.05), ref)["ok"]              # 5e-4 of 100
    off = sweep.compare_output(ref + np.array([0, 0, 0.2], np.float32), ref)   # 2e-3 of 100
    assert not off["ok"] and off["max_rel"] == pytest.approx(2e-3, rel=1e-3)
    assert not sweep.compare_output(ref[:2], ref)["ok"]                         # shape differs
    assert not sweep.compare_output(np.array([np.nan, -50, 1], np.float32), ref)["ok"]
    labels = np.array([3, 1, 2])
    assert sweep.compare_output(labels.copy(), labels)["ok"]
    assert not sweep.compare_output(np.array([3, 2, 1]), labels)["ok"]


def test_summary_lists_every_failure_with_its_error():
    records = [{"architecture": "a", "family": "f", "config": "full", "variant": "ts17", "status": "done",
                "runs": [{"level": 0, "backend": "native", "status": "pass"},
                         {"level": 2, "backend": "native", "status": "compile error",
                          "error": "GraphError: node 'x' (Add): bad"}]},
               {"architecture": "a", "family": "f", "config": "full", "variant": "dynamo18",
                "status": "export error", "error": "TorchExportError: no"}]
    text = sweep.summary_markdown(records, "python -m autofusion.benchmarks.sweep", [0, 2], ["native"])
    assert "1 architectures, 1 variants, 1 of 2 level×variant runs equal to ONNX Runtime" in text
    assert "| a | ts17 | 2 | native | compile error | GraphError: node 'x' (Add): bad |" in text
    assert "| a | dynamo18 | export error | TorchExportError: no |" in text
    assert "| a | f | full | 1/2: ts17 | 1/1 | 0/1 |" in text


def test_variant_names_say_exporter_opset_and_axes():
    assert sweep.parse_variant("ts13") == sweep.Variant("ts13", "torchscript", 13, False)
    assert sweep.parse_variant("dynamo18-dyn") == sweep.Variant("dynamo18-dyn", "dynamo", 18, True)
    with pytest.raises(ValueError, match="ts<opset>"):
        sweep.parse_variant("torchscript17")


def test_a_dynamic_run_changes_only_the_kinds_of_axes_the_export_left_symbolic(tmp_path):
    from onnx import TensorProto, helper, save
    path = str(tmp_path / "m.onnx")

    def write(shape):
        x = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, shape)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
        save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["pixel_values"], ["y"])],
                                                 "g", [x], [y])), path)

    dyn = sweep.parse_variant("ts17-dyn")
    fixed_size = sweep.ARCHITECTURES["hf-vit"]             # batch only: a ViT takes one image size
    write(["batch", 3, 64, 64])
    assert sweep.run_sizes(fixed_size, dyn, path) == ([(2, 64), (3, 64)], "")
    any_size = sweep.ARCHITECTURES["tiny_resnet"]
    write(["batch", 3, "h", "w"])
    assert sweep.run_sizes(any_size, dyn, path) == ([(2, 64), (3, 96)], "")
    write(["batch", 3, 64, 64])                            # the exporter fixed height and width
    assert sweep.run_sizes(any_size, dyn, path) == (
        [(2, 64), (3, 64)], "the exporter kept pixel_values[2], pixel_values[3] static")
    assert sweep.run_sizes(any_size, sweep.parse_variant("ts17"), path) == ([(1, 64)], "")


@pytest.mark.skipif(native.unavailable() is not None, reason=f"native backend: {native.unavailable()}")
def test_a_node_on_a_onednn_reference_kernel_is_named():
    """oneDNN runs a dilated max pool only by its reference implementation (the sweep lists such
    nodes: one in a model's hot path costs hundreds of times its fast kernel's time)."""
    from autofusion.ir import DType, Graph, GraphBuilder
    g = Graph("pool", {"": 21})
    x = g.add_input("x", (1, 8, 12, 12), DType.FLOAT)
    y = GraphBuilder(g).MaxPool(x, kernel_shape=[3, 3], dilations=[2, 2])
    y.shape, y.dtype = (1, 8, 8, 8), DType.FLOAT
    g.outputs = [y]
    model = autofusion.compile(g, level=0, backend="native")
    (node,) = model.graph.nodes
    assert sweep.reference_kernels(model) == {node.name: model.plan.kernels[node]}
    assert "ref" in model.plan.kernels[node]
