"""The Python API: compile a model into a CompiledModel."""
from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path
from typing import Iterable

import onnx

from .backend import CompiledModel, check_supported
from .controls import (resolve_backend, resolve_controls, resolve_precision, resolve_region_limits,
                       resolve_size_cache, resolve_streams)
from .errors import AutofusionError
from .frontend import import_onnx
from .ir import Graph
from .pipeline import BuildOptions, FusionOptions, compile_graph
from .progress import step

Model = str | os.PathLike | onnx.ModelProto | Graph


def load(model: Model, strict: bool = False) -> Graph:
    """Read a model (path, ModelProto or IR Graph) into an IR Graph, checking every op is supported
    (strict: by autofusion's own kernels, not ONNX Runtime's)."""
    graph = model if isinstance(model, Graph) else import_onnx(model, strict)
    check_supported(graph)
    return graph


def compile(model: Model, level: int | None = None,  # noqa: A001 - mirrors torch.compile
            disable: Iterable[str] | str | None = None, backend: str | None = None,
            threads: int | None = None, max_region_nodes: int | None = None,
            max_region_inputs: int | None = None, example_inputs=None, precision: str | None = None,
            calibration=None, tolerance: float | None = None, strict: bool = False,
            size_cache: int | None = None, streams: int | None = None,
            calibration_method: str | None = None) -> CompiledModel:
    """Compile an ONNX model (a path, a ModelProto or an IR Graph) into a callable CompiledModel.

    level: 0 runs every operator as imported, 1 applies clean-up and the basic rules, 2 (the
    default) everything. disable: fused-op names to leave unfused. Both default to the
    environment (AUTOFUSION_LEVEL / AUTOFUSION_DISABLE, or the original's CANN_GRAPH_FUSION /
    GE_FUSION_DISABLE_LIST). backend: "auto" (the default; native code wherever this machine
    can build it), "native" (an error where it cannot) or "torch" (PyTorch kernels only), or
    AUTOFUSION_BACKEND. threads: the OpenMP threads every kernel uses (default: as torch has it).
    max_region_nodes / max_region_inputs: the most ops and input tensors one automatic fusion
    region may have (or AUTOFUSION_MAX_REGION_NODES / AUTOFUSION_MAX_REGION_INPUTS).
    precision: "fp32" (the default), "bf16" (native convolutions and products in bf16 with fp32
    accumulation where this CPU has bf16 dot products; everything else fp32) or "fp16" (on a CPU
    without fp16 arithmetic, the same as bf16), or AUTOFUSION_PRECISION. The precision guard
    checks each reduced node on calibration inputs (`calibration`: a dict by input name or an
    .npz file, or a list of them; random by default) and keeps in fp32 each whose error exceeds
    `tolerance` (default 2e-2 of its output's largest magnitude); model.report says what it kept.
    "int8" (on a CPU with VNNI) quantizes the model as a static post-training quantizer would:
    activation ranges from the calibration inputs (all the sets given; `calibration_method`
    "minmax", the default, or "percentile"), weights int8 per output channel; a guard checks each
    convolution and product alone and keeps in float each whose relative RMS error exceeds
    `tolerance` (default 5e-2); the rest runs as bf16 would. Give real inputs: random ones
    calibrate random ranges.
    An nn.Module compiles without dynamo for inputs shaped like `example_inputs` (see dynamo.py).
    ONNX nodes autofusion has no kernel for run on ONNX Runtime, each connected group of them as
    one session (the report names them); strict=True refuses them instead (UnsupportedOpError).
    A model with symbolic input dims (dynamic axes) is compiled once: each new set of input sizes
    sets its native partitions up on first use, without compiling; `size_cache` (or
    AUTOFUSION_SIZE_CACHE, default 8) sets how many sets each keeps, the least recent dropped.
    streams (or AUTOFUSION_STREAMS, default 1): how many calls from different threads run at
    once, the threads split evenly among them (streams=2 on 2 cores: two calls at once, one thread
    each); 1 is latency mode, one call at a time on every thread. model.submit() runs a call on one
    of the model's stream threads and returns a Future.
    """
    if _is_torch_module(model):
        from .dynamo import compile_module
        if example_inputs is None:
            raise AutofusionError("compiling an nn.Module needs example_inputs (tensors shaped like its inputs)")
        return compile_module(model, example_inputs, level, disable, backend, threads, precision,
                              calibration, tolerance, calibration_method)
    level, disable = resolve_controls(level, disable)
    limits = resolve_region_limits(max_region_nodes, max_region_inputs)
    backend = resolve_backend(backend)
    precision = resolve_precision(precision)
    size_cache = resolve_size_cache(size_cache)
    streams = resolve_streams(streams)
    with _without_cycle_collection():
        with step("importing"):
            graph = model if isinstance(model, Graph) else import_onnx(model, strict)
        name = Path(model).name if isinstance(model, (str, os.PathLike)) else graph.name
        return compile_graph(graph, name, FusionOptions(level, tuple(disable), limits),
                             BuildOptions(backend, threads, precision, calibration, tolerance, size_cache,
                                          streams, calibration_method))


@contextlib.contextmanager
def _without_cycle_collection():
    """The IR's nodes and values point at each other, so a large graph is a million objects the
    cycle collector would re-scan again and again while the passes allocate (a fifth of a large
    compile). What becomes garbage meanwhile is collected after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _is_torch_module(model) -> bool:
    import torch
    return isinstance(model, torch.nn.Module)
