"""autofusion.debug_view: what autofusion made of a model, per compiled graph.

For a module or function returned by `torch.compile(..., backend="autofusion")` (after it has
run, since dynamo compiles on the first call), or for a CompiledModel: each graph's fused IR in
its text form, its fusion report (with the ops that run as PyTorch calls), the generated Python
and C++, and the fused graph as an ONNX model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import onnx

from .backend import CompiledModel
from .errors import AutofusionError
from .export import export_onnx


@dataclass
class GraphView:
    name: str
    model: CompiledModel

    @property
    def graph(self) -> str:
        """The fused graph's text form."""
        return str(self.model.graph)

    @property
    def report(self):
        return self.model.report

    @property
    def source(self) -> str:
        """The generated Python that runs the graph."""
        return self.model.source

    @property
    def native_source(self) -> str:
        """The native partitions' programs and their generated kernels' C++ ("" when none runs
        natively)."""
        return self.model.native_source

    @property
    def fallbacks(self) -> list[str]:
        return list(getattr(self.model.report, "fallbacks", []))

    def onnx(self, path=None) -> onnx.ModelProto:
        """The fused graph as ONNX (written to `path` if given); see autofusion.export_onnx."""
        return export_onnx(self.model.graph, path)

    def __str__(self) -> str:
        return f"== {self.name} ==\n{self.report}\n\n{self.graph}"


class DebugView:
    """The compiled graphs of one model, in the order they were compiled."""

    def __init__(self, graphs: list[GraphView]):
        self.graphs = graphs

    def __iter__(self) -> Iterator[GraphView]:
        return iter(self.graphs)

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, i: int) -> GraphView:
        return self.graphs[i]

    @property
    def graph(self) -> str:
        """The fused graph's text form, as the seed's `debug_view(model).graph` reads it (several
        graphs, where dynamo handed over several, joined in the order they were compiled)."""
        return "\n\n".join(g.graph for g in self.graphs)

    def __str__(self) -> str:
        return "\n\n".join(map(str, self.graphs))


def debug_view(compiled: Any) -> DebugView:
    """The compiled graphs behind `compiled`: a torch.compile'd module or function (backend
    "autofusion"), or a CompiledModel."""
    if isinstance(compiled, CompiledModel):
        return DebugView([GraphView(compiled.graph.name, compiled)])
    from .dynamo import compiled_graphs
    module = getattr(compiled, "_orig_mod", compiled)
    fn = getattr(compiled, "_torchdynamo_orig_callable", None) or module
    weights, codes = set(), set()
    try:
        import torch
        if isinstance(module, torch.nn.Module):
            weights = {id(t) for t in (*module.parameters(), *module.buffers())}
            fn = type(module).forward
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None:
        codes.add(code)
    graphs = [g for g in compiled_graphs()
              if (weights and g.weights & weights) or (not g.weights and g.code in codes)
              or (not weights and g.code in codes)]
    if not graphs:
        raise AutofusionError(f"no graph of {type(compiled).__name__} has been compiled by autofusion: "
                              "compile it with torch.compile(..., backend='autofusion') and call it once")
    return DebugView([GraphView(g.name, g.model) for g in graphs])
