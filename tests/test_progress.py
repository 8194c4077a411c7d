"""The progress line: off by default off a terminal, one line per step in a log when asked,
a line rewritten in place and erased on a real terminal (a pseudo-terminal here)."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from autofusion import progress
from autofusion.cli import main

EXAMPLE = "examples/tiny_resnet.onnx"


@pytest.fixture(autouse=True)
def as_configured():
    yield
    progress.configure(None)


def test_off_a_terminal_nothing_is_written_unless_asked(capsys, monkeypatch):
    monkeypatch.delenv("AUTOFUSION_PROGRESS", raising=False)
    with progress.step("fusing"):
        pass
    assert progress.mode() == "off" and capsys.readouterr().err == ""


def test_asked_for_in_a_log_each_step_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("AUTOFUSION_PROGRESS", "1")
    with progress.step("compiling m.onnx"), progress.step("fusing"):
        pass
    assert progress.mode() == "log"
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit(":", 1)[0] for line in lines] == ["autofusion: fusing", "autofusion: compiling m.onnx"]
    assert all(line.endswith(" s") for line in lines)


def test_told_not_to_it_stays_off_even_when_asked_by_the_environment(monkeypatch):
    monkeypatch.setenv("AUTOFUSION_PROGRESS", "1")
    progress.configure(False)
    assert progress.mode() == "off"


def test_the_line_names_the_nested_steps_and_the_time():
    assert progress.line_text([("compiling m.onnx", 10.0), ("fusing", 11.0)], 13.25) == \
        "autofusion: compiling m.onnx › fusing … 3.2 s"


def test_the_cli_reports_compile_and_measure_steps(capsys):
    assert main(["compile", EXAMPLE, "--backend", "torch", "--measure", "--progress"]) == 0
    err = capsys.readouterr().err
    for step in ("importing", "fusing", "lowering and building native code",
                 "compiling tiny_resnet.onnx", "compiling tiny_resnet.onnx at level 0",
                 "measuring fused against level 0"):
        assert f"autofusion: {step}: " in err


def test_on_a_terminal_the_line_appears_after_a_while_and_is_erased():
    script = ("import time\nfrom autofusion import progress\nprogress.SHOW_AFTER_S = 0.3\n"
              "with progress.step('building native code'):\n    time.sleep(1.2)\n"
              "print('done', flush=True)\n")
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, env={**os.environ, "AUTOFUSION_PROGRESS": ""})
    os.close(follower)
    seen, deadline = b"", time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:   # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    text = seen.decode()
    assert "\r\x1b[Kautofusion: building native code … " in text
    assert text.rstrip().endswith("\r\x1b[Kdone")   # the line was erased before the output
