"""The native backend: plan partitions → generated C++ over oneDNN → one shared library.

    impls.py    which ops run natively, their checks and C++ emitters (registered on import)
    kernels.py  automatic fusion regions → generated C++ loop nests
    rows.py     generated row kernels (RMS normalization)
    emit.py     a plan's native partitions → one C++ source
    build.py    toolchain, flags, the on-disk cache of built libraries
    library.py  loading a library and calling its partitions
    affinity.py pinning the OpenMP pool's workers, one CPU each
    runtime/    the hand-written C++ the generated code calls (native.h, runtime.cpp)
"""
from __future__ import annotations

from ..lower import Plan
from . import impls, kernels, rows  # noqa: F401 - register the native implementations
from .build import NativeBuildError, Toolchain, toolchain
from .emit import emit_model
from .library import NativeLibrary, NativePartition


def unavailable() -> str | None:
    """Why native code cannot run on this machine (one line), or None."""
    tc = toolchain()
    return tc if isinstance(tc, str) else None


def build_partitions(plan: Plan, model: str) -> tuple[dict[int, NativePartition], str]:
    """Every native partition of the plan, built and loaded; and the generated source."""
    source, bound = emit_model(plan, model)
    if not bound:
        return {}, source
    tc = toolchain()
    assert isinstance(tc, Toolchain), tc
    library = NativeLibrary.build(tc, source)
    parts = {p.index: p for p in plan.partitions}
    built = {k: NativePartition(library, b, parts[k].nodes) for k, b in bound.items()}
    for k, part in built.items():
        plan.kernels.update(zip(parts[k].nodes, part.kernels))
    return built, source


__all__ = ["NativeBuildError", "NativePartition", "build_partitions", "unavailable"]
