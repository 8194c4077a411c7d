"""The package's imports point down DESIGN.md's data flow and never go round in a circle, read
from the source by tools/import_graph.py (every import counts, one inside a function too)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_TOOL = Path(__file__).resolve().parents[1] / "tools" / "import_graph.py"
_spec = importlib.util.spec_from_file_location("import_graph", _TOOL)
import_graph = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_graph)

# the layers, bottom first: a module imports from its own layer and those below, never above
LAYERS = [{"errors"}, {"ir"}, {"frontend", "passes"}, {"fusion"}, {"backend"}, {"export"}]
# on top of them all: the package's face and what drives it (they may import each other, not
# in a circle)
TOP = {"", "__main__", "api", "cli", "controls", "custom", "debug", "dynamo", "measure", "pipeline",
       "profiling", "progress", "benchmarks"}

GRAPH = import_graph.import_graph()


def layer(module: str) -> int:
    """The layer of `autofusion.<part>…`; a new top-level module or package must be placed."""
    part = module.split(".")[1] if "." in module else ""
    for k, names in enumerate(LAYERS):
        if part in names:
            return k
    assert part in TOP, f"{module}: place {part!r} in a layer of tests/test_imports.py"
    return len(LAYERS)


def _circles(graph: dict[str, set[str]]) -> str:
    """For the failure message: each circle's members, and a shortest way round through each."""
    lines = []
    for members in import_graph.cycles(graph):
        lines.append(f"{len(members)} import each other: {', '.join(members)}")
        for path in dict.fromkeys(_way_round(graph, m, set(members)) for m in members):
            lines.append("  " + " -> ".join(path))
    return "\n".join(lines)


def _way_round(graph: dict[str, set[str]], start: str, members: set[str]) -> tuple[str, ...]:
    """A shortest path from start back to itself inside the circle (breadth first), rotated to
    begin at its smallest name so one circle reads the same from each of its modules."""
    paths, seen = [(start,)], {start}
    while paths:
        path = paths.pop(0)
        for b in sorted(graph[path[-1]] & members):
            if b == start:
                k = path.index(min(path))
                return path[k:] + path[:k] + (path[k],)
            if b not in seen:
                seen.add(b)
                paths.append(path + (b,))
    raise AssertionError(f"{start} is not on a circle")


def test_the_graph_is_read():
    assert {"autofusion.ir.graph", "autofusion.ir.ops"} <= GRAPH["autofusion.ir.verify"]
    assert "autofusion.backend.executor" in GRAPH["autofusion.backend.control_flow"]


def test_no_modules_import_each_other_in_a_circle():
    assert not import_graph.cycles(GRAPH), f"import circles:\n{_circles(GRAPH)}"


def test_no_packages_import_each_other_in_a_circle():
    packages = {p: set(t) for p, t in import_graph.package_graph(GRAPH).items()}
    assert not import_graph.cycles(packages), f"package circles:\n{_circles(packages)}"


def test_no_layer_imports_a_higher_one():
    up = [f"{a} -> {b}" for a in sorted(GRAPH) for b in sorted(GRAPH[a]) if layer(b) > layer(a)]
    assert not up, "imports pointing up the layers:\n" + "\n".join(up)


def test_the_reader_counts_every_import(tmp_path):
    """A deferred import, `from . import sibling` (which imports the package) and a relative
    import two levels up are all edges: each circle below is found."""
    pkg = tmp_path / "autofusion"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import a\n")
    graph = import_graph.import_graph(pkg)
    assert graph["autofusion.sub.b"] == {"autofusion", "autofusion.a"}
    assert import_graph.cycles(graph) == [["autofusion", "autofusion.a", "autofusion.sub.b"]]
