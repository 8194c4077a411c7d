"""The Python API: compile a model into a CompiledModel."""
from __future__ import annotations

import os

import onnx

from .backend import CompiledModel, check_supported
from .frontend import import_onnx
from .ir import Graph

LEVELS = (0,)  # fusion levels available; fusion (levels 1 and 2) plugs in here


def load(model: str | os.PathLike | onnx.ModelProto | Graph) -> Graph:
    """Read a model (path, ModelProto or IR Graph) into an IR Graph, checking every op is supported."""
    graph = model if isinstance(model, Graph) else import_onnx(model)
    check_supported(graph)
    return graph


def compile(model: str | os.PathLike | onnx.ModelProto | Graph, level: int = 0) -> CompiledModel:  # noqa: A001
    """Compile an ONNX model (a path or a ModelProto) into a callable CompiledModel.

    `level` selects fusion: 0 runs every operator as imported.
    """
    if level not in LEVELS:
        raise ValueError(f"fusion level {level} is not available; choose one of {list(LEVELS)}")
    return CompiledModel(load(model))
