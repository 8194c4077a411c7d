"""The HTML report: one self-contained page with the fusion report and the graph before and after.

    autofusion.export_html(model, "report.html", original="model.onnx")
    autofusion compile model.onnx --html report.html

The page holds the summary tables of the text report (what fused, how often, into what, the
estimates, what did not fuse and why), then the graph before fusion and after, side by side
(or one at a time), laid out by Graphviz's `dot` and inlined as SVG. The ONNX nodes of one
fused group are drawn as a cluster in the colour of the rule that made it; near-misses carry a
red border and their reasons. Everything the page shows is in the file: the SVG, the details of
every node as JSON, the style sheet and a small script (html_assets.py) for search, zoom, pan
and the details panel. Nothing is fetched when it is viewed.

With a profile (`autofusion profile MODEL --html FILE`, or `profile=` here) the page also has
a table of the slowest nodes and the fused graph is filled by time on a heat scale, each node's
time in its details.

The page is written only when all of it could be made: `dot` is looked for before anything
else, and the file is written whole or not at all.
"""
from __future__ import annotations

import html
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ..errors import AutofusionError
from ..fusion.report import FusionReport
from ..ir import Graph
from .dot import dot_source
from .graph_views import PARTITION, REMOVED, STUB, View, graph_views, heat
from .graphviz import find_dot, render_svg
from .html_assets import CSS, JS


def export_html(model: Any, path: str | os.PathLike, *, original: Any, profile: Any = None) -> Path:
    """Write the HTML report of a CompiledModel to `path` and return the path.

    original: the model as it was before compile — the path or ModelProto given to
    `autofusion.compile` (it is read again here), or an imported Graph that was not compiled in
    place. profile: an `autofusion.profile` of the model, to colour the fused graph by time.
    Raises GraphvizUnavailable (with how to install it) where `dot` is missing.
    """
    before = _original_graph(original, model.graph)   # the caller's mistake first, then the machine's
    dot = find_dot()
    page = html_page(model.report, before, model.graph, getattr(model, "plan", None), dot=dot,
                     profile=profile)
    return write_whole(path, page)


def _original_graph(original: Any, fused: Graph) -> Graph:
    if original is fused:
        raise AutofusionError("the HTML report needs the graph before fusion, but `original` is "
                              "the compiled graph itself (compile fuses a Graph in place): pass "
                              "the model file or ModelProto that was compiled")
    if isinstance(original, Graph):
        return original
    from ..frontend import import_onnx  # the same import compile made, made again
    return import_onnx(original)


def write_whole(path: str | os.PathLike, text: str) -> Path:
    """Write text to path through a temporary file beside it: the file is whole or absent."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # as open() would make it, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def html_page(report: FusionReport, before: Graph, after: Graph, plan: Any | None = None,
              dot: str | None = None, profile: Any | None = None) -> str:
    """The whole page as text."""
    before_view, after_view, colours = graph_views(before, after, report, plan, profile)
    svgs = {v.drawing.id: inline_svg(render_svg(dot_source(v.drawing), len(v.drawing.boxes), dot))
            for v in (before_view, after_view)}
    title = f"{'Profile' if profile is not None else 'Fusion report'} — {report.model}"
    after_title = f"After fusion — {len(after)} nodes" + (", filled by time" if profile else "")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{_e(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>",
        _header(report, title),
        '<section id="af-summary">', _profile_table(profile) if profile is not None else "",
        _fusions_table(report, colours), _totals_table(report),
        _near_miss_table(report), "</section>",
        '<section id="af-graphs">', _toolbar(colours, plan is not None, profile),
        '<div class="af-main">',
        _pane("before", f"Before fusion — {len(before)} nodes", svgs["before"]),
        _pane("after", after_title, svgs["after"]),
        ('<aside id="af-details">Click a node for its op, shapes, attributes, the rule that made '
         "it and the ONNX nodes it stands for. Drag to pan, wheel to zoom.</aside>"),
        "</div>", "</section>", '<div id="af-tip"></div>',
        f'<script type="application/json" id="af-data">{_json_for_script(before_view, after_view)}</script>',
        f"<script>{JS}</script>", "</body>", "</html>", ""])


def inline_svg(svg: str) -> str:
    """dot's SVG document as an element for the page: no XML prolog, doctype or comments; the
    page's script sizes it (the viewBox stays)."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<!--.*?-->\n?", "", svg, flags=re.DOTALL)
    return re.sub(r'<svg width="[^"]*" height="[^"]*"', "<svg", svg, count=1)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _json_for_script(before: View, after: View) -> str:
    text = json.dumps({"before": before.details, "after": after.details}, separators=(",", ":"))
    return text.replace("</", "<\\/")   # never closes the script element


def _header(report: FusionReport, title: str) -> str:
    facts = [f"level {report.level}"]
    if report.disabled:
        facts.append("disabled: " + ", ".join(report.disabled))
    facts.append(f"{report.ops_before} operators before fusion, {report.ops_after} after")
    facts.append(f"{report.est_speedup:.2f}x estimated by the cost model")
    if report.measured:
        facts.append(f"{report.measured['speedup']:.2f}x measured")
    return (f"<header><h1>{_e(title)}</h1>"
            f'<div class="af-sub">{_e(" · ".join(facts))}</div></header>')


def _swatch(fill: str, border: str, dashed: bool = False) -> str:
    cls = "af-swatch af-dashed" if dashed else "af-swatch"
    return f'<span class="{cls}" style="background:{fill};border-color:{border}"></span>'


def _fusions_table(report: FusionReport, colours: dict[str, tuple[str, str]]) -> str:
    rows = []
    for r in sorted(report.rules, key=lambda r: -r.matched):
        if not r.matched:
            continue
        fill, border = colours.get(r.name, ("#fff", "#555"))
        speed = f"{r.est_speedup:.2f}x" if r.est_speedup is not None else "—"
        rows.append(f"<tr><td>{_swatch(fill, border)}{_e(r.name)}</td><td>{_e(r.pattern)}</td>"
                    f'<td class="num">{r.matched}</td><td>{_e(", ".join(r.fused_into) or "removed")}</td>'
                    f'<td class="num">{speed}</td></tr>')
    body = ("".join(rows) if rows else '<tr><td colspan="5">No fusion rule matched.</td></tr>')
    return ('<div><h2>Fused</h2><table><tr><th>Fused op (rule)</th><th>Pattern</th><th>Matched</th>'
            f"<th>Fused into</th><th>Estimated speedup</th></tr>{body}</table></div>")


def _totals_table(report: FusionReport) -> str:
    rows = [("Total operators before fusion", report.ops_before),
            ("Total operators after fusion", report.ops_after),
            ("Overall speedup", f"{report.est_speedup:.2f}x (estimated by the cost model)")]
    if report.measured:
        m = report.measured
        rows.append(("Measured speedup", (f"{m['speedup']:.2f}x ({m['level0_ms']:.2f} ms -> "
                                          f"{m['fused_ms']:.2f} ms, median of {m['runs']} runs)")))
    done = {k: v for k, v in report.passes.items() if v}
    if done:
        rows.append(("Clean-up", ", ".join(f"{k} {v}" for k, v in done.items())))
    if report.backend:
        rows.append(("Backend", report.backend.removeprefix("Backend: ")))
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<div><h2>Totals</h2><table>{body}</table></div>"


def _near_miss_table(report: FusionReport) -> str:
    if not report.near_misses:
        return "<div><h2>Not fused</h2><p>No near-miss: every rule that matched fused.</p></div>"
    rows = "".join(
        f"<tr><td>{_e(nm.rule)}</td><td>"
        + ", ".join(f'<a class="af-find" href="#" data-find="{_e(n)}">{_e(n)}</a>' for n in nm.nodes)
        + f"</td><td>{_e(nm.reason)}</td></tr>" for nm in report.near_misses)
    return (f"<div><h2>Not fused ({len(report.near_misses)})</h2><div class=\"af-misses\"><table>"
            f"<tr><th>Rule</th><th>Nodes</th><th>Reason</th></tr>{rows}</table></div></div>")


PROFILE_ROWS = 20   # the slowest nodes the page's table lists


def _profile_table(profile: Any) -> str:
    """The slowest nodes, what no node holds, and the whole-run times with profiling off and on."""
    def row(name: str, op: str, impl: str, where: str, seconds: float, find: bool = False) -> str:
        cell = (f'<a class="af-find" href="#" data-find="{_e(name)}">{_e(name)}</a>' if find
                else _e(name))
        return (f"<tr><td>{_swatch(heat(seconds / slowest), '#999')}{cell}</td><td>{_e(op)}</td>"
                f"<td>{_e(impl)}</td><td>{_e(where)}</td>"
                f'<td class="num">{seconds * 1e3:.3f}</td>'
                f'<td class="num">{seconds / profile.profiled:.1%}</td></tr>')

    slowest = max((n.seconds for n in profile.nodes), default=0.0) or 1.0
    shown, rest = profile.nodes[:PROFILE_ROWS], profile.nodes[PROFILE_ROWS:]
    rows = [row(n.node, n.op, n.impl, n.where, n.seconds, find=True) for n in shown]
    if rest:
        rows.append(row(f"the other {len(rest)} node(s)", "", "", "", sum(n.seconds for n in rest)))
    rows += [row(label, "", "", "", seconds) for label, seconds in profile.unattributed()]
    total = (f"Nodes in total {profile.node_total * 1e3:.3f} ms per run, "
             f"{profile.node_total / profile.profiled:.1%} of the profiled run "
             f"({profile.profiled * 1e3:.3f} ms, the mean). Whole run: median "
             f"{profile.median_off * 1e3:.3f} ms with profiling off, {profile.median_on * 1e3:.3f} ms "
             f"on ({profile.overhead:+.1%} for the counting), {profile.runs} runs each.")
    return ('<div><h2>Time per node</h2><table><tr><th>Node</th><th>Op</th><th>Implementation</th>'
            '<th>Runs on</th><th>ms per run</th><th>Share</th></tr>'
            f'{"".join(rows)}</table><p>{_e(total)}</p></div>')


def _toolbar(colours: dict[str, tuple[str, str]], with_plan: bool, profile: Any = None) -> str:
    legend = [f"<span>{_swatch(f, b)}{_e(rule)}</span>" for rule, (f, b) in colours.items()]
    if profile is not None:
        slowest = max((n.seconds for n in profile.nodes), default=0.0)
        scale = "".join(_swatch(heat(k / 4), "#999") for k in range(5))
        heat_legend = (f"<span>{scale}time per node, 0 to {slowest * 1e3:.3f} ms (fused graph; "
                       "border: the rule)</span>")
        legend = [heat_legend, *legend]
    legend.append(f"<span>{_swatch(*REMOVED, dashed=True)}removed by clean-up</span>")
    legend.append(f'<span>{_swatch("#fff", "#d00000")}not fused (near-miss)</span>')
    legend.append(f"<span>{_swatch(*STUB)}↑ a node read by many, named at each reader</span>")
    if with_plan:
        legend.append(f"<span>{_swatch(*PARTITION, dashed=True)}native partition</span>")
    return ('<div class="af-toolbar">'
            '<span><button data-layout="both">Side by side</button> '
            '<button data-layout="before">Before</button> '
            '<button data-layout="after">After</button></span>'
            '<input id="af-search" type="search" placeholder="Find a node by name (Enter: next)">'
            '<span id="af-found"></span>'
            '<span><button id="af-zoom-in" title="zoom in">+</button> '
            '<button id="af-zoom-out" title="zoom out">−</button> '
            '<button id="af-fit" title="show the whole graph">Fit</button></span>'
            f'<span class="af-legend">{"".join(legend)}</span></div>')


def _pane(view: str, title: str, svg: str) -> str:
    return (f'<div class="af-pane" id="af-pane-{view}"><div class="af-pane-title">{_e(title)}</div>'
            f'<div class="af-canvas">{svg}</div></div>')
