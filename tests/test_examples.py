"""The examples run as written."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ray_processes() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "raylet" in cmd or "gcs_server" in cmd:
            found.append(cmd[:120])
    return found


def test_the_ray_serve_example_starts_answers_and_stops(tmp_path):
    pytest.importorskip("ray.serve", reason="the serve extra: pip install -e '.[serve]'")
    assert not _ray_processes(), "a Ray cluster is already running here"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "serve_with_ray.py"), "--requests", "40",
                           "--clients", "4", "--replicas", "2", "--port", "8131"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "2 replica(s)" in done.stdout and "answered 40 of 40 requests" in done.stdout
    assert not _ray_processes()   # it stopped what it started
