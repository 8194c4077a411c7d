"""The README's commands and code, run as written (from the checkout's root, as a reader would):
the example command, the Python example, the torch.compile example (tests/test_dynamo.py), and
no command the README shows but nothing runs."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def commands() -> list[str]:
    """The shell commands the README shows: its indented lines that start with a program's name."""
    return [line.strip() for line in README.splitlines()
            if line.startswith("    ") and re.match(r"\s+(pip|autofusion|python|AUTOFUSION_)", line)]


def test_the_readme_shows_these_commands_and_no_others():
    """Each is run as written by CI (`.ci/run`: the install and the two test commands) or below."""
    assert commands() == ['pip install torch==2.13.0 -e ".[test]"',
                          "autofusion compile examples/tiny_resnet.onnx -o tiny_resnet.fused.onnx --measure",
                          "python -m pytest", "AUTOFUSION_BACKEND=torch python -m pytest"]
    ci = (ROOT / ".ci/run").read_text()
    assert all(c in ci for c in ('pip install torch==2.13.0 -e ".[test]"', "python -m pytest",
                                  "AUTOFUSION_BACKEND=torch python -m pytest"))


def test_the_example_command_runs_as_written():
    (cmd,) = [c for c in commands() if c.startswith("autofusion compile")]
    out = ROOT / "tiny_resnet.fused.onnx"
    try:
        done = subprocess.run([Path(sys.executable).parent / "autofusion", *shlex.split(cmd)[1:]], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert "Measured speedup" in done.stdout and out.exists()
    finally:
        out.unlink(missing_ok=True)


def test_the_python_example_runs_as_written(monkeypatch):
    (example,) = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "examples/tiny_resnet.onnx" in b]
    monkeypatch.chdir(ROOT)
    try:
        exec(compile(example, "README.md", "exec"), {})
    finally:
        (ROOT / "tiny_resnet.fused.onnx").unlink(missing_ok=True)
