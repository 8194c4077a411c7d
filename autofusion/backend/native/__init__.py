"""The native backend: plan partitions → programs (data) the prebuilt runtime over oneDNN
builds and runs, and generated C++ loop nests for what oneDNN lacks.

    impls.py    which ops run natively, their checks and emitters (registered on import)
    kernels.py  automatic fusion regions → generated C++ loop nests
    rows.py     generated row kernels (RMS normalization)
    program.py  a partition's program: its runtime calls as data, encoded for the runtime
    emit.py     a plan's native partitions → programs, and its kernels' C++ source
    build.py    toolchain, flags, the on-disk cache of built libraries
    library.py  loading the runtime and a model's kernels, building and calling partitions
    affinity.py pinning the OpenMP pool's workers, one CPU each
    runtime/    the hand-written C++: native.h (what a program calls), partition.h (the inside,
                its rooms: values.cpp, steps.cpp, attention.cpp, own_loops.cpp, arena.cpp,
                c_api.cpp), program.cpp (reading programs), kernel.h (what a generated kernel is)
"""
from __future__ import annotations

from typing import Callable

from ..lower import Plan
from . import impls, kernels, rows  # noqa: F401 - register the native implementations
from .build import NativeBuildError, Toolchain, toolchain, unavailable
from .emit import NativeCode, emit_model
from .library import SIZE_CACHE, KernelTable, NativePartition, runtime


def build_partitions(plan: Plan, model: str, size_cache: int = SIZE_CACHE,
                     built: Callable | None = None) -> tuple[dict[int, NativePartition], NativeCode]:
    """Every native partition of the plan, loaded, and built now where its sizes are static (for
    each set of sizes on first use where not); and its native code. `built`: see NativePartition."""
    code = emit_model(plan, model)
    if not code.programs:
        return {}, code
    tc = toolchain()
    assert isinstance(tc, Toolchain), tc
    table = KernelTable(tc, code.kernels, len(code.kernel_names)) if code.kernel_names else None
    parts = {p.index: p for p in plan.partitions}
    return {k: NativePartition(runtime(tc), program, table, parts[k].nodes, size_cache, built)
            for k, program in code.programs.items()}, code


__all__ = ["NativeBuildError", "NativePartition", "build_partitions", "unavailable"]
