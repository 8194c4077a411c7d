"""The import graph of the `autofusion` package: its edges, its cycles, its lines per folder.

    python tools/import_graph.py [--modules] [PACKAGE_DIR]

Read with `ast` alone; nothing is imported. Every `import` and `from … import` counts wherever
it sits (in a function, under `if TYPE_CHECKING:`): an import deferred to call time is still a
dependency. `from pkg import name` is an edge to `pkg` (its `__init__` runs and is looked in)
and to `pkg.name` too where that is a module.

Packages: a module belongs to the package whose folder holds it; a top-level module
(`autofusion.api`) and a package `__init__` stand for themselves. Package edges leave out those
between a package and the packages it contains (a subpackage registering into its parent's
table is how the code is laid out); between other packages they must not form a circle.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "autofusion"

Graph = dict[str, set[str]]   # module -> the modules it imports


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> its file; a package is named by its `__init__.py`."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def import_graph(root: Path = ROOT) -> Graph:
    """Every module of the package -> the package's modules it imports."""
    files = module_files(root)
    graph = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:   # relative: `from ..x` climbs one package per dot after the first
                    up = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(up + [base] if base else up)
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:   # v is the root of a component: pop it
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def package_of(module: str, files: dict[str, Path]) -> str:
    """The package a module counts in: its own name for a package or a top-level module."""
    if files[module].name == "__init__.py" or module.count(".") == 1:
        return module
    return module.rpartition(".")[0]


def package_graph(graph: Graph, root: Path = ROOT) -> dict[str, dict[str, int]]:
    """Package -> package it imports -> how many module edges; none between a package and one
    inside it."""
    files = module_files(root)
    edges: dict[str, dict[str, int]] = {}
    for a, targets in graph.items():
        pa = package_of(a, files)
        counts = edges.setdefault(pa, {})
        for b in targets:
            pb = package_of(b, files)
            if pa != pb and not pb.startswith(pa + ".") and not pa.startswith(pb + "."):
                counts[pb] = counts.get(pb, 0) + 1
    return {p: dict(sorted(e.items())) for p, e in sorted(edges.items())}


def line_counts(root: Path = ROOT) -> dict[str, tuple[int, int]]:
    """Folder (relative to the repository) -> (modules, lines)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path in module_files(root).values():
        entry = counts[str(path.parent.relative_to(root.parent))]
        entry[0] += 1
        entry[1] += len(path.read_text().splitlines())
    return {k: (m, n) for k, (m, n) in sorted(counts.items())}


def short(name: str) -> str:
    return name.removeprefix("autofusion.")


def main(argv: list[str]) -> None:
    paths = [a for a in argv if not a.startswith("--")]
    root = Path(paths[0]).resolve() if paths else ROOT
    graph = import_graph(root)
    if "--modules" in argv:
        print("module edges:")
        for a in sorted(graph):
            if graph[a]:
                print(f"  {short(a)} -> {', '.join(short(b) for b in sorted(graph[a]))}")
    packages = package_graph(graph, root)
    print("package edges (module edges in brackets):")
    for a, targets in packages.items():
        if targets:
            print(f"  {short(a)} -> {', '.join(f'{short(b)} ({n})' for b, n in targets.items())}")
    found = cycles(graph)
    print(f"module cycles: {len(found)}")
    for component in found:
        print(f"  {len(component)} modules: {' '.join(short(m) for m in component)}")
    found = cycles({a: set(t) for a, t in packages.items()})
    print(f"package cycles: {len(found)}")
    for component in found:
        print(f"  {' '.join(short(p) for p in component)}")
    print("lines per folder:")
    counts = line_counts(root)
    for folder, (modules, lines) in counts.items():
        print(f"  {folder:28} {modules:4} modules {lines:7} lines")
    print(f"  {'total':28} {sum(m for m, _ in counts.values()):4} modules "
          f"{sum(n for _, n in counts.values()):7} lines")


if __name__ == "__main__":
    main(sys.argv[1:])
