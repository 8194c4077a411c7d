"""The Python API: compile a model into a CompiledModel."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import onnx

from . import progress
from .backend import CompiledModel, check_supported, evaluate_node
from .controls import resolve_backend, resolve_controls, resolve_region_limits
from .errors import AutofusionError
from .frontend import import_onnx
from .fusion import optimize
from .ir import Graph

Model = str | os.PathLike | onnx.ModelProto | Graph


def load(model: Model) -> Graph:
    """Read a model (path, ModelProto or IR Graph) into an IR Graph, checking every op is supported."""
    graph = model if isinstance(model, Graph) else import_onnx(model)
    check_supported(graph)
    return graph


def compile(model: Model, level: int | None = None,  # noqa: A001 - mirrors torch.compile
            disable: Iterable[str] | str | None = None, backend: str | None = None,
            threads: int | None = None, max_region_nodes: int | None = None,
            max_region_inputs: int | None = None, example_inputs=None) -> CompiledModel:
    """Compile an ONNX model (a path, a ModelProto or an IR Graph) into a callable CompiledModel.

    level: 0 runs every operator as imported, 1 applies clean-up and the basic rules, 2 (the
    default) everything. disable: fused-op names to leave unfused. Both default to the
    environment (AUTOFUSION_LEVEL / AUTOFUSION_DISABLE, or the original's CANN_GRAPH_FUSION /
    GE_FUSION_DISABLE_LIST). backend: "auto" (the default; native code wherever this machine
    can build it), "native" (an error where it cannot) or "torch" (PyTorch kernels only), or
    AUTOFUSION_BACKEND. threads: the OpenMP threads every kernel uses (default: as torch has it).
    max_region_nodes / max_region_inputs: the most ops and input tensors one automatic fusion
    region may have (or AUTOFUSION_MAX_REGION_NODES / AUTOFUSION_MAX_REGION_INPUTS).
    An nn.Module compiles without dynamo for inputs shaped like `example_inputs` (see dynamo.py).
    """
    if _is_torch_module(model):
        from .dynamo import compile_module
        if example_inputs is None:
            raise AutofusionError("compiling an nn.Module needs example_inputs (tensors shaped like its inputs)")
        return compile_module(model, example_inputs, level, disable, backend, threads)
    level, disable = resolve_controls(level, disable)
    limits = resolve_region_limits(max_region_nodes, max_region_inputs)
    backend = resolve_backend(backend)
    with progress.step("importing"):
        graph = load(model)
    name = Path(model).name if isinstance(model, (str, os.PathLike)) else graph.name
    with progress.step("fusing"):
        report = optimize(graph, level, disable, evaluate_node, model_name=name, **limits)
    with progress.step("lowering and building native code"):
        return CompiledModel(graph, report, backend, threads)


def _is_torch_module(model) -> bool:
    import torch
    return isinstance(model, torch.nn.Module)
