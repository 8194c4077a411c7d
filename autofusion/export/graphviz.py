"""Graphviz's `dot`, run as a program: DOT source in, SVG out.

The HTML report lays its graphs out with `dot` (a real layered-layout engine) rather than by hand.
`dot` is a system program (Debian: `apt-get install graphviz`), so it is found on PATH when it is
needed, and its absence is an error that says how to install it.

Layout cost grows with the arrows that span many ranks (dot routes each through a chain of
virtual nodes): a fused BERT graph whose one `Shape` feeds 128 readers took 24 s, almost all of
it placing 15,000 virtual nodes. The views therefore draw a box read by many boxes as a stub
beside each reader (graph_views.READERS_DRAWN_AS_STUBS), and dot lays out a 1,300-node graph
in about a second with its default effort.
"""
from __future__ import annotations

import shutil
import subprocess

from ..errors import AutofusionError

DOT_TIMEOUT_S = 600


class GraphvizUnavailable(AutofusionError):
    """Graphviz's `dot` is not installed, so the HTML report cannot be drawn."""


def find_dot() -> str:
    """The path of `dot`, or GraphvizUnavailable saying how to install it."""
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizUnavailable(
            "the HTML report lays out its graphs with Graphviz's `dot`, which is not on PATH; "
            "install Graphviz (Debian/Ubuntu: apt-get install graphviz; Fedora: dnf install "
            "graphviz; macOS: brew install graphviz) and run again")
    return dot


def render_svg(dot_source: str, node_count: int = 0, dot: str | None = None,
               timeout_s: float = DOT_TIMEOUT_S) -> str:
    """Lay out `dot_source` with `dot` and return the SVG text."""
    cmd = [dot or find_dot(), "-Tsvg"]
    try:
        done = subprocess.run(cmd, input=dot_source.encode(), capture_output=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise AutofusionError(f"Graphviz's dot took over {timeout_s:.0f} s to lay out a graph of "
                              f"{node_count} nodes; no HTML report was written") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise AutofusionError(f"Graphviz's dot failed (exit {done.returncode}): {message}")
    return done.stdout.decode()
