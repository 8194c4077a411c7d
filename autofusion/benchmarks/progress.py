"""A one-line progress display on stderr (no dependency).

On a terminal the line is rewritten in place; elsewhere (CI logs, pipes) only the coarse steps
are printed, one per line, so a log does not fill with hundreds of block updates.
"""
from __future__ import annotations

import shutil
import sys
import time


class Progress:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self.start = time.monotonic()
        self.width = 0

    def step(self, message: str) -> None:
        """A coarse step (export, compile, timing start): shown everywhere."""
        self._show(message, always=True)

    def detail(self, message: str) -> None:
        """A fine step (one timing block): shown on a terminal only."""
        self._show(message, always=False)

    def note(self, message: str) -> None:
        """A message that must stay visible (a skipped model, a failed system)."""
        self.clear()
        print(message, file=self.stream, flush=True)

    def clear(self) -> None:
        if self.interactive and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def _show(self, message: str, always: bool) -> None:
        line = f"[{time.monotonic() - self.start:6.0f}s] {message}"
        if self.interactive:
            line = line[:shutil.get_terminal_size().columns - 1]   # a wrapped line cannot be redrawn
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
            self.stream.flush()
        elif always:
            print(line, file=self.stream, flush=True)
