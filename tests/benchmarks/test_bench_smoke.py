"""`autofusion bench --quick` end to end, as CI's smoke test of the benchmark suite.

Runs in a subprocess (torch.compile and thread settings stay out of the test process) with the
fewest runs the suite accepts. It checks what the run writes, never how fast anything was.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autofusion.benchmarks.systems import PRECISION_TOLERANCE, SYSTEM_NAMES, all_systems

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {s.name: s.package for s in all_systems()}    # the optional package each one needs

pytest.importorskip("matplotlib")


def test_bench_quick_writes_json_table_and_chart_with_every_system(tmp_path):
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "autofusion", "bench", "--quick", "--rounds", "1", "--block", "1",
           "--warmup", "0", "--pause", "0", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    [json_path] = out.glob("bench-*.json")
    [md_path] = out.glob("bench-*.md")
    [png_path] = out.glob("bench-*.png")
    assert png_path.read_bytes().startswith(b"\x89PNG")

    results = json.loads(json_path.read_text())
    assert {"cpu", "cores", "python", "versions", "date", "command"} <= results["machine"].keys()
    assert results["machine"]["command"].startswith("autofusion bench --quick")
    model = results["models"]["tiny_resnet"]
    assert model["status"] == "ok"
    assert set(model["systems"]) == set(SYSTEM_NAMES)
    for name, r in model["systems"].items():
        if r["status"] == "skipped":      # fine only when its optional package is not installed
            assert PACKAGES[name] and importlib.util.find_spec(PACKAGES[name]) is None, name
            continue
        assert r["status"] == "ok", f"{name}: {r['error']}"
        assert r["runs"] == 1 and r["median_ms"] > 0 and r["compile_s"] is not None
        assert r["max_rel_diff"] <= max(1e-3, PRECISION_TOLERANCE.get(r["precision"], 0.0))

    table = md_path.read_text()
    assert "| tiny_resnet |" in table and "L2 vs L0" in table and "L2 vs best peer" in table
    assert table in done.stdout     # the table is also printed
