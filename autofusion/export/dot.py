"""A drawing of a graph as data (boxes, arrows, clusters), and its text in Graphviz's DOT language.

A Drawing says what to draw and how it looks; `dot_source` writes it as DOT for `dot` to lay
out. Every box, arrow and cluster gets an SVG id of its own (prefixed by the drawing's id), so
two drawings can sit in one HTML page and the page's script can find each box by its id.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Box:
    id: str                       # SVG id, unique in the page
    name: str                     # the DOT node name: what the box stands for (its tooltip)
    label: list[str]              # lines of text
    fill: str = "#ffffff"
    border: str = "#555555"
    shape: str = "box"
    dashed: bool = False
    bold_border: bool = False
    classes: list[str] = field(default_factory=list)


@dataclass
class Cluster:
    id: str
    label: str
    box_ids: list[str]
    fill: str
    border: str
    dashed: bool = False
    classes: list[str] = field(default_factory=list)


@dataclass
class Drawing:
    id: str                                      # also the prefix of every id in it
    boxes: list[Box] = field(default_factory=list)
    arrows: list[tuple[str, str]] = field(default_factory=list)   # (from box id, to box id)
    clusters: list[Cluster] = field(default_factory=list)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def quote(text: str) -> str:
    """A DOT string literal (escString: backslashes and quotes escaped, one line)."""
    return '"' + _escape(text) + '"'


def _label(lines: list[str]) -> str:
    return '"' + "\\n".join(map(_escape, lines)) + '"'


def _attrs(kv: dict[str, str]) -> str:
    return "[" + ", ".join(f"{k}={v}" for k, v in kv.items()) + "]"


def _box_line(box: Box) -> str:
    style = ["filled", "rounded" if box.shape == "box" else "solid"]
    if box.dashed:
        style.append("dashed")
    attrs = {"id": quote(box.id), "label": _label(box.label), "shape": box.shape,
             "style": quote(",".join(style)), "fillcolor": quote(box.fill), "color": quote(box.border)}
    if box.bold_border:
        attrs["penwidth"] = "2.5"
    if box.classes:
        attrs["class"] = quote(" ".join(box.classes))
    return f"  {quote(box.name)} {_attrs(attrs)};"


def _cluster_lines(cluster: Cluster, names: dict[str, str]) -> list[str]:
    style = "filled,rounded" + (",dashed" if cluster.dashed else "")
    lines = [f"  subgraph {quote('cluster_' + cluster.id)} {{",
             f"    id={quote(cluster.id)}; label={quote(cluster.label)}; style={quote(style)};",
             f"    fillcolor={quote(cluster.fill)}; color={quote(cluster.border)};"]
    if cluster.classes:
        lines.append(f"    class={quote(' '.join(cluster.classes))};")
    lines += [f"    {quote(names[b])};" for b in cluster.box_ids]
    lines.append("  }")
    return lines


def dot_source(drawing: Drawing) -> str:
    """The drawing in DOT: top to bottom, boxes declared once, clusters listing their boxes."""
    names = {b.id: b.name for b in drawing.boxes}
    lines = [f"digraph {quote(drawing.id)} {{",
             (f"  id={quote(drawing.id)}; rankdir=TB; nodesep=0.25; ranksep=0.35;"
              ' fontname="Helvetica"; fontsize=11; labeljust=l;'),
             '  node [fontname="Helvetica", fontsize=10, height=0.3, margin="0.08,0.03"];',
             '  edge [color="#8a8a8a", arrowsize=0.5];']
    lines += [_box_line(b) for b in drawing.boxes]
    for c in drawing.clusters:
        lines += _cluster_lines(c, names)
    lines += [f"  {quote(names[a])} -> {quote(names[b])} [id={quote(f'{drawing.id}-e{i}')}];"
              for i, (a, b) in enumerate(drawing.arrows)]
    lines.append("}")
    return "\n".join(lines) + "\n"
