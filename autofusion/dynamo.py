"""The PyTorch entry point: `torch.compile(model, backend="autofusion")`, and
`autofusion.compile(module, example_inputs)` without dynamo.

Dynamo hands over one FX graph per region between graph breaks. Each is traced to functional
core ATen on dynamo's fake tensors (frontend/fx_trace.py), imported into the IR with its
parameters and buffers frozen as constants (frontend/fx_import.py), then compiled as an ONNX model
is, by the compile's steps (pipeline.py), into a CompiledModel, which runs it on the caller's
tensors. Dynamo's symbolic sizes are the graph's symbolic dims, so a new batch or sequence length
reuses the graph (native code is specialised per set of sizes, as for dynamic ONNX models).

Inference is the product: a graph that needs gradients (grad mode on and an input or parameter
that requires them) runs as PyTorch, with one warning; so does a graph the IR cannot hold (one
that mutates its inputs, or returns sizes computed at run time). An ATen op without a mapping
runs inside the compiled graph as a call of the op itself, and the report lists it.

Frozen means frozen: later writes to the parameters are not seen (recompile, or
torch._dynamo.reset(), after changing weights), as with Inductor's freezing.
"""
from __future__ import annotations

import itertools
import warnings
import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Sequence

import torch
from torch import fx

from .backend import CompiledModel
from .controls import resolve_backend, resolve_controls, resolve_precision
from .errors import AutofusionError
from .frontend.fx_import import Fallback, FxImport, import_fx
from .frontend.fx_trace import UnsupportedGraphError, fakify_dynamo_inputs, trace_aten, trace_module
from .fusion.report import FusionReport
from .pipeline import BuildOptions, FusionOptions, compile_graph

OPTIONS = ("level", "disable", "backend", "threads", "precision", "calibration", "tolerance", "calibration_method")


class AutofusionFallbackWarning(UserWarning):
    """A graph handed to autofusion runs as plain PyTorch instead (the message says why)."""


@dataclass
class TorchReport(FusionReport):
    """The fusion report of a graph imported from PyTorch, with the ops that run as PyTorch calls."""
    fallbacks: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, report: FusionReport, fallbacks: Sequence[Fallback]) -> "TorchReport":
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)},
                   fallbacks=[str(f) for f in fallbacks])

    def text(self) -> str:
        lines = [super().text()]
        if self.fallbacks:
            lines += ["", f"Run as PyTorch calls ({len(self.fallbacks)}):"] + [f"  {f}" for f in self.fallbacks]
        return "\n".join(lines)


@dataclass(frozen=True)
class Controls:
    level: int
    disable: tuple[str, ...]
    backend: str
    threads: int | None
    precision: str = "fp32"
    calibration: Any = None
    tolerance: float | None = None
    calibration_method: str | None = None

    @classmethod
    def resolve(cls, level=None, disable: Iterable[str] | str | None = None, backend=None,
                threads=None, precision=None, calibration=None, tolerance=None,
                calibration_method=None) -> "Controls":
        level, disable = resolve_controls(level, disable)
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise AutofusionError(f"threads={threads!r}: must be a positive int")
        return cls(level, tuple(disable), resolve_backend(backend), threads,
                   resolve_precision(precision), calibration, tolerance, calibration_method)

    @classmethod
    def from_options(cls, options: dict | None) -> "Controls":
        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise AutofusionError(f"unknown autofusion option(s) {', '.join(map(repr, unknown))}; "
                                  f"valid options: {', '.join(OPTIONS)}")
        return cls.resolve(**options)


def compile_imported(imported: FxImport, controls: Controls, name: str) -> CompiledModel:
    """The pipeline ONNX models go through, on an imported graph."""
    return compile_graph(imported.graph, name, FusionOptions(controls.level, controls.disable),
                         BuildOptions(controls.backend, controls.threads, controls.precision, controls.calibration,
                                      controls.tolerance, calibration_method=controls.calibration_method),
                         lambda report: TorchReport.of(report, imported.fallbacks))


# ---- torch.compile ------------------------------------------------------------------------

class CompiledGraph:
    """One graph dynamo handed over, compiled: called with dynamo's arguments (sizes, frozen
    weights and all), it passes the graph's inputs on and returns what the FX graph returns."""

    def __init__(self, model: CompiledModel, imported: FxImport, name: str, code, weights: set[int]):
        self.model, self.name, self.code, self.weights = model, name, code, weights
        self.input_positions = imported.input_positions
        self.output_slots = imported.output_slots
        self.fallbacks = imported.fallbacks

    def __call__(self, *args):
        outs = self.model(*(args[i] for i in self.input_positions))
        outs = outs if isinstance(outs, tuple) else (outs,)
        if not torch.is_inference_mode_enabled():   # inference tensors refuse in-place writes later
            outs = tuple(o.clone() for o in outs)
        return tuple(outs[v] if kind == "tensor" else v for kind, v in self.output_slots)


COMPILED: list[weakref.ref] = []   # every CompiledGraph alive, for debug_view
_graph_ids = itertools.count()


def autofusion_backend(gm: fx.GraphModule, example_inputs: list, *, options: dict | None = None,
                       mode: str | None = None):
    """The dynamo backend (registered as "autofusion" through the torch_dynamo_backends entry point)."""
    if mode not in (None, "default"):
        raise AutofusionError(f"mode={mode!r}: autofusion has no modes; choose with "
                              f"options={{'level': 0|1|2, 'disable': [...], 'backend': ..., 'threads': N}}")
    controls = Controls.from_options(options)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    name = f"{_frame_name()}_graph{next(_graph_ids)}"
    if torch.is_grad_enabled() and any(_requires_grad(x) for x in [*example_inputs, *_attributes(gm)]):
        return _eager(gm, f"{name} needs gradients (grad mode is on and an input or parameter "
                          "requires grad); autofusion compiles inference: it runs as PyTorch. "
                          "Call under torch.no_grad()/torch.inference_mode(), or requires_grad_(False).")
    try:
        lifted, attributes = _lift_attributes(gm)
        fakes, fake_mode = fakify_dynamo_inputs(example_inputs)
        fakes += [fake_mode.from_tensor(t, static_shapes=True) for t in attributes]
        aten_graph = trace_aten(lifted, fakes, fake_mode)
        frozen = {i: x for i, (node, x) in enumerate(zip(placeholders, example_inputs)) if _is_weight(node, x)}
        frozen.update((len(placeholders) + k, t) for k, t in enumerate(attributes))
        names = [n.name for n in placeholders] + [f"attr_{k}" for k in range(len(attributes))]
        imported = import_fx(aten_graph, frozen, names, name)
    except UnsupportedGraphError as e:
        return _eager(gm, f"{name} runs as PyTorch: {e}")
    model = compile_imported(imported, controls, name)
    weights = {id(x) for x in frozen.values()}
    compiled = CompiledGraph(model, imported, name, _frame_code(), weights)
    COMPILED.append(weakref.ref(compiled))
    COMPILED[:] = [r for r in COMPILED if r() is not None]
    return compiled


def _eager(gm: fx.GraphModule, why: str):
    warnings.warn(f"autofusion: {why}", AutofusionFallbackWarning, stacklevel=2)
    return gm.forward


def _requires_grad(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def _attributes(gm: fx.GraphModule) -> list[torch.Tensor]:
    return [_attribute(gm, n.target) for n in gm.graph.nodes
            if n.op == "get_attr" and isinstance(_attribute(gm, n.target), torch.Tensor)]


def _attribute(gm: fx.GraphModule, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _lift_attributes(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """A copy of the graph whose tensor attributes are trailing placeholders (to be frozen), so
    the trace sees only fake tensors; the graph dynamo runs is left alone."""
    graph = fx.Graph()
    mapping: dict[fx.Node, fx.Node] = {}
    output = graph.graph_copy(gm.graph, mapping)
    attrs = [n for n in graph.nodes if n.op == "get_attr" and isinstance(_attribute(gm, n.target), torch.Tensor)]
    tensors = []
    if attrs:
        last = [n for n in graph.nodes if n.op == "placeholder"][-1:] or [None]
        for node in attrs:
            where = graph.inserting_after(last[0]) if last[0] is not None else graph.inserting_before(next(iter(graph.nodes)))
            with where:
                ph = graph.placeholder(f"attr_{len(tensors)}")
            last[0] = ph
            ph.meta = dict(node.meta)
            tensors.append(_attribute(gm, node.target))
            node.replace_all_uses_with(ph)
            graph.erase_node(node)
    graph.output(output)
    return fx.GraphModule(gm, graph), tensors


def _is_weight(node: fx.Node, x: Any) -> bool:
    """A parameter or buffer of a module (frozen); anything else is an input."""
    if isinstance(x, torch.nn.Parameter):
        return True
    if not isinstance(x, torch.Tensor):
        return False
    from torch._dynamo import source as sources
    kinds = tuple(getattr(sources, k) for k in ("ParamBufferSource", "UnspecializedParamBufferSource")
                  if hasattr(sources, k))
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None) or getattr(node, "_dynamo_source", None)
    while source is not None:
        if isinstance(source, kinds):
            return True
        source = getattr(source, "base", None)
    return False


def _frame_code():
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        return InstructionTranslator.current_tx().f_code
    except (ImportError, AttributeError, AssertionError, IndexError):
        return None


def _frame_name() -> str:
    code = _frame_code()
    return code.co_name if code is not None else "graph"


def compiled_graphs() -> list[CompiledGraph]:
    return [g for g in (r() for r in COMPILED) if g is not None]


# ---- a module without dynamo ----------------------------------------------------------------

def compile_module(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor] | torch.Tensor,
                   level=None, disable=None, backend=None, threads=None,
                   precision=None, calibration=None, tolerance=None, calibration_method=None) -> CompiledModel:
    """Compile an nn.Module for inputs shaped like `example_inputs` (static sizes), tracing it to
    ATen with make_fx, no dynamo. The CompiledModel returns the module's tensors, flattened."""
    controls = Controls.resolve(level, disable, backend, threads, precision, calibration, tolerance,
                                calibration_method)
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(module, torch.nn.Module):
        raise AutofusionError(f"expected an nn.Module, got {type(module).__name__}")
    gm, weights, names = trace_module(module, list(example_inputs))
    imported = import_fx(gm, dict(enumerate(weights)), names, type(module).__name__)
    if any(kind != "tensor" for kind, _ in imported.output_slots):
        raise AutofusionError(f"{type(module).__name__} returns non-tensor values; "
                              "autofusion.compile(module) needs tensor outputs")
    return compile_imported(imported, controls, type(module).__name__)
