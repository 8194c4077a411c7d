"""A progress line on stderr for long work (import, fusion, native builds, measuring).

    with progress.step("fusing"):
        ...

Shown only where stderr is a terminal, or when asked for (`--progress`, AUTOFUSION_PROGRESS=1);
never when told not to (`--no-progress`, AUTOFUSION_PROGRESS=0). On a terminal it is one line,
rewritten in place, that appears once the work has taken SHOW_AFTER_S and is erased when the
work ends: `autofusion: compile model.onnx › building native code … 6.1 s`. Asked for where
stderr is not a terminal (a log file, CI), each step writes one line when it ends instead:
`autofusion: building native code: 6.1 s`. Steps nest; the line names them all.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

SHOW_AFTER_S = 1.0   # work that takes longer shows its line
TICK_S = 0.25

_wanted: bool | None = None          # None: as the environment says, else where stderr is a tty
_lock = threading.Lock()
_steps: list[tuple[str, float]] = []  # (what, started), outermost first
_shown = False
_ticker: threading.Thread | None = None


def configure(wanted: bool | None) -> None:
    """True: always show progress; False: never; None: AUTOFUSION_PROGRESS, else a terminal."""
    global _wanted
    _wanted = wanted


def _stream() -> TextIO:
    return sys.stderr


def mode() -> str:
    """"line" (a terminal), "log" (asked for, not a terminal) or "off"."""
    wanted = _wanted
    if wanted is None:
        env = os.environ.get("AUTOFUSION_PROGRESS", "").strip().lower()
        wanted = True if env in ("1", "true", "yes", "on") else False if env in ("0", "false", "no", "off") else None
    tty = _stream().isatty()
    if wanted is False or (wanted is None and not tty):
        return "off"
    return "line" if tty else "log"


def line_text(steps: list[tuple[str, float]], now: float) -> str:
    """The progress line for these nested steps at time `now`."""
    return f"autofusion: {' › '.join(what for what, _ in steps)} … {now - steps[0][1]:.1f} s"


def _draw() -> None:
    global _shown
    with _lock:
        if _steps and time.perf_counter() - _steps[0][1] >= SHOW_AFTER_S:
            _stream().write("\r\x1b[K" + line_text(_steps, time.perf_counter()))
            _stream().flush()
            _shown = True


def _tick() -> None:
    while True:
        time.sleep(TICK_S)
        with _lock:
            if not _steps:
                return
        _draw()


@contextmanager
def step(what: str) -> Iterator[None]:
    """Name the work in progress for as long as the block runs."""
    global _shown, _ticker
    how = mode()
    if how == "off":
        yield
        return
    started = time.perf_counter()
    with _lock:
        _steps.append((what, started))
        if how == "line" and (_ticker is None or not _ticker.is_alive()):
            _ticker = threading.Thread(target=_tick, name="autofusion-progress", daemon=True)
            _ticker.start()
    try:
        yield
    finally:
        with _lock:
            _steps.remove((what, started))
            if how == "log":
                _stream().write(f"autofusion: {what}: {time.perf_counter() - started:.1f} s\n")
                _stream().flush()
            elif not _steps and _shown:
                _stream().write("\r\x1b[K")
                _stream().flush()
                _shown = False
