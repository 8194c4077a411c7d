"""The compile controls: the fusion level, the list of rules to leave off, the region size limits,
the backend and the precision, taken from the arguments, else the environment (our variables, or
the original's as aliases), else the defaults.
What each level does is fusion/pipeline.py's business; this file only decides which one runs.
"""
from __future__ import annotations

import os
from typing import Iterable

from .backend.lower import BACKENDS
from .backend.precision import PRECISIONS
from .backend.native.library import SIZE_CACHE
from .errors import AutofusionError
from .fusion import rule_names
from .fusion.regions import MAX_INPUTS, MAX_NODES

LEVELS = (0, 1, 2)
DEFAULT_LEVEL = 2

# Our own variable names first; the original's names are honoured as aliases.
LEVEL_VARS = ("AUTOFUSION_LEVEL", "CANN_GRAPH_FUSION")
DISABLE_VARS = ("AUTOFUSION_DISABLE", "GE_FUSION_DISABLE_LIST")
BACKEND_VAR = "AUTOFUSION_BACKEND"
PRECISION_VAR = "AUTOFUSION_PRECISION"
REGION_VARS = {"max_region_nodes": ("AUTOFUSION_MAX_REGION_NODES", MAX_NODES),
               "max_region_inputs": ("AUTOFUSION_MAX_REGION_INPUTS", MAX_INPUTS)}


def resolve_controls(level: int | None, disable: Iterable[str] | str | None) -> tuple[int, list[str]]:
    """Level and disable list from the arguments, else the environment, else the defaults."""
    if level is None:
        for var in LEVEL_VARS:
            if os.environ.get(var, "").strip():
                raw = os.environ[var].strip()
                if not raw.isdigit():
                    raise AutofusionError(f"{var}={raw!r}: the fusion level must be 0, 1 or 2")
                level = int(raw)
                break
        else:
            level = DEFAULT_LEVEL
    if level not in LEVELS:
        raise AutofusionError(f"fusion level {level} does not exist; choose 0, 1 or 2")
    if disable is None:
        disable = next((os.environ[v] for v in DISABLE_VARS if os.environ.get(v, "").strip()), "")
    if isinstance(disable, str):
        disable = [d for d in (x.strip() for x in disable.replace(";", ",").split(",")) if d]
    disable = list(dict.fromkeys(disable))
    unknown = [d for d in disable if d not in rule_names()]
    if unknown:
        raise AutofusionError(f"unknown fused-op name(s) in the disable list: {', '.join(unknown)}; "
                              f"valid names: {', '.join(sorted(rule_names()))}")
    return level, disable


def resolve_backend(backend: str | None) -> str:
    """The backend from the argument, else AUTOFUSION_BACKEND, else auto."""
    return _choice(backend, BACKEND_VAR, "auto", BACKENDS, "backend")


def resolve_precision(precision: str | None) -> str:
    """The precision from the argument, else AUTOFUSION_PRECISION, else fp32."""
    return _choice(precision, PRECISION_VAR, "fp32", PRECISIONS, "precision")


def _choice(given: str | None, var: str, default: str, choices, what: str) -> str:
    chosen = given or os.environ.get(var, "").strip() or default
    if chosen not in choices:
        where = "" if given else f"{var}="
        raise AutofusionError(f"{where}{chosen!r}: the {what} must be one of {', '.join(choices)}")
    return chosen


SIZE_CACHE_VAR = "AUTOFUSION_SIZE_CACHE"
STREAMS_VAR = "AUTOFUSION_STREAMS"


def resolve_streams(given: int | None) -> int:
    """How many calls of a model run at once (the threads split among them): the argument,
    else AUTOFUSION_STREAMS, else 1 (latency: one call at a time on every thread)."""
    raw = given if given is not None else os.environ.get(STREAMS_VAR, "").strip() or 1
    if isinstance(raw, bool) or not str(raw).isdigit() or int(raw) < 1:
        where = f"{STREAMS_VAR}=" if given is None else "streams="
        raise AutofusionError(f"{where}{raw!r}: streams is a whole number >= 1 of calls run at once")
    return int(raw)


def threads_per_stream(threads: int | None, streams: int, available: int) -> int | None:
    """Each stream's threads: the model's (None: as torch has it, `available`) split evenly among
    the streams, at least one each."""
    if streams == 1:
        return threads
    return max(1, (threads if threads is not None else available) // streams)


def resolve_size_cache(given: int | None) -> int:
    """How many sets of input sizes each native partition keeps set up (primitives, arena),
    the least recently used dropped first: the argument, else AUTOFUSION_SIZE_CACHE, else 8."""
    raw = given if given is not None else os.environ.get(SIZE_CACHE_VAR, "").strip() or SIZE_CACHE
    if not str(raw).isdigit() or int(raw) < 1:
        where = f"{SIZE_CACHE_VAR}=" if given is None else "size_cache="
        raise AutofusionError(f"{where}{raw!r}: the size cache holds a whole number >= 1 of sets of sizes")
    return int(raw)


def resolve_region_limits(max_nodes: int | None, max_inputs: int | None) -> dict[str, int]:
    """Automatic fusion's region size limits: the arguments, else the environment, else the
    defaults (fusion/regions.py)."""
    limits = {}
    for key, given in (("max_region_nodes", max_nodes), ("max_region_inputs", max_inputs)):
        var, default = REGION_VARS[key]
        raw = given if given is not None else os.environ.get(var, "").strip() or default
        if not str(raw).isdigit() or int(raw) < 1:
            where = f"{var}=" if given is None else f"{key}="
            raise AutofusionError(f"{where}{raw!r}: a region limit must be a whole number >= 1")
        limits[key] = int(raw)
    return limits
