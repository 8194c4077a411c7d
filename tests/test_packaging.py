"""The wheel, as a user installs it (not editable): built from this checkout and installed into a
fresh virtual environment, it carries what the package reads at run time — the native runtime's
sources among it — and compiles and runs the bundled example natively; it installs nothing at
the top level but autofusion."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autofusion.backend.native import unavailable

ROOT = Path(__file__).resolve().parents[1]


def run(*cmd, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "AUTOFUSION_BACKEND"}   # the default: native here
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, ROOT, cwd=out)
    (path,) = out.glob("autofusion-*.whl")
    return path


def test_the_wheel_holds_the_runtime_sources_and_nothing_top_level_but_autofusion(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"autofusion", wheel.name.split("-py3")[0] + ".dist-info"}
    runtime = {n.rsplit("/", 1)[1] for n in names if n.startswith("autofusion/backend/native/runtime/")}
    on_disk = {p.name for p in (ROOT / "autofusion/backend/native/runtime").iterdir() if p.suffix in (".cpp", ".h")}
    assert runtime == on_disk and {"steps.cpp", "partition.h", "program.cpp"} <= runtime


@pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")
def test_the_installed_wheel_compiles_and_runs_the_example_natively(wheel, tmp_path):
    venv = tmp_path / "venv"
    # the system's packages (torch, onnx, oneDNN) beside the wheel's autofusion, found first
    run(sys.executable, "-m", "venv", "--system-site-packages", venv, cwd=tmp_path)
    bin_ = venv / "bin"
    run(bin_ / "python", "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    where = run(bin_ / "python", "-c", "import autofusion; print(autofusion.__file__)", cwd=tmp_path)
    assert where.startswith(str(venv)), where
    out = run(bin_ / "autofusion", "compile", ROOT / "examples/tiny_resnet.onnx", "-o", tmp_path / "fused.onnx",
              cwd=tmp_path)
    assert "Backend: native" in out and (tmp_path / "fused.onnx").exists()
    out = run(bin_ / "autofusion", "run", ROOT / "examples/tiny_resnet.onnx", cwd=tmp_path)
    assert "logits" in out
    missing = subprocess.run([bin_ / "python", "-c", "import benchmarks"], cwd=tmp_path, capture_output=True)
    assert missing.returncode != 0   # the benchmark code ships inside autofusion
