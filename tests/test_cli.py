"""The command line: run (random or given inputs, --compare-ort) and info."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from autofusion.cli import main

from .helpers import conv_relu_model, flat_320_model

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_resnet.onnx"


def test_run_prints_outputs_and_checksums(capsys, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(conv_relu_model(), path)
    assert main(["run", str(path), "--dim", "N=2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"y: float32\[2, 4, 8, 8\]  sum=\S+ mean\|x\|=\S+", out)


def test_run_with_inputs_file_and_compare_ort(capsys, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(conv_relu_model(), path)
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.ones((1, 3, 8, 8), np.float32))
    assert main(["run", str(path), "--inputs", str(npz), "--compare-ort"]) == 0
    out = capsys.readouterr().out
    assert "y: float32[1, 4, 8, 8]" in out
    diff = float(re.search(r"y: max abs diff ([^,\s]+)", out).group(1))
    assert diff < 1e-4


def test_run_reports_bad_input_file_cleanly(capsys, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(conv_relu_model(), path)
    (tmp_path / "bad.npz").write_text("nope")
    assert main(["run", str(path), "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "bad.npz: cannot read inputs" in capsys.readouterr().err


def test_run_names_the_symbolic_sizes_it_defaulted_when_the_run_fails(capsys, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(flat_320_model(), path)
    assert main(["run", str(path), "--dim", "batch=1"]) == 2
    err = capsys.readouterr().err
    assert "'flat' (Reshape)" in err and "height=1" in err and "batch=1" not in err
    assert "--dim height=320" in err
    assert main(["run", str(path), "--dim", "batch=1", "--dim", "height=320"]) == 0


def test_info_lists_io_ops_and_those_onnx_runtime_runs(capsys, tmp_path):
    model = conv_relu_model()
    model.graph.node.append(onnx.helper.make_node("Fancy", ["y"], ["d"], name="fancy", domain="my.ops"))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "x: float[N,3,8,8]" in out and "1  Conv" in out
    assert "1  my.ops::Fancy   (ONNX Runtime)" in out
    assert "runs on ONNX Runtime (no kernel here; --strict refuses these):\n  my.ops::Fancy: fancy" in out


def test_errors_are_one_line_not_a_traceback(capsys, tmp_path):
    assert main(["run", str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autofusion: error:") and "Traceback" not in err


def test_console_script_runs_the_bundled_example():
    r = subprocess.run([sys.executable, "-m", "autofusion", "run", str(EXAMPLE), "--compare-ort"],
                       capture_output=True, text=True, check=True)
    assert "logits: float32[1, 10]" in r.stdout
    assert float(re.search(r"max rel diff (\S+)", r.stdout).group(1)) < 1e-4


def test_compile_prints_the_report_and_writes_the_fused_file_and_json(capsys, tmp_path):
    out, report = tmp_path / "fused.onnx", tmp_path / "report.json"
    assert main(["compile", str(EXAMPLE), "-o", str(out), "--report", str(report), "--level", "2"]) == 0
    text = capsys.readouterr().out
    assert "Graph Fusion Report" in text and "Total operators before fusion: 31" in text
    onnx.checker.check_model(onnx.load(out))
    import json
    assert json.loads(report.read_text())["level"] == 2


def test_compile_with_an_unknown_disable_name_fails_cleanly(capsys):
    assert main(["compile", str(EXAMPLE), "--disable", "Bogus"]) == 2
    assert "unknown fused-op name(s) in the disable list: Bogus" in capsys.readouterr().err


def test_rules_lists_name_level_description(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"SiLUFusionOp\s+1\s+x·sigmoid\(x\) → one SiLU kernel", out)


def test_compile_measure_adds_a_measured_line(capsys):
    assert main(["compile", str(EXAMPLE), "--measure"]) == 0
    assert re.search(r"Measured speedup: \S+x \(\S+ ms -> \S+ ms, median of \d+ runs\)",
                     capsys.readouterr().out)
