"""What a result was measured on: CPU, cores, package versions, date, command line."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

PACKAGES = ("torch", "onnxruntime", "onnx", "numpy", "autofusion", "openvino", "torchvision",
            "transformers")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), which is what threads should match."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not on Linux
        return os.cpu_count() or 1


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    """The autofusion checkout's commit, when it is one (read-only git call)."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def machine_info(command: str) -> dict:
    return {
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {p: _version(p) for p in PACKAGES},
        "autofusion_commit": _git_commit(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
    }
