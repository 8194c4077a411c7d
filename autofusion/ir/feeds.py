"""Random inputs for a graph: what `autofusion run`, `autofusion profile`, the precision guard's
calibration and the benchmarks feed a model when the user gives none."""
from __future__ import annotations

import numpy as np

from ..errors import AutofusionError
from .dtypes import DType
from .graph import Graph


def random_feeds(graph: Graph, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs matching the graph's inputs; symbolic dims from `dims` (default 1).

    Floats are standard normal; integers are 0 or 1 and booleans random, so index-like inputs
    (token ids, type ids, masks) stay in range for any embedding table.
    """
    rng = np.random.default_rng(seed)
    dims = dims or {}
    feeds = {}
    for v in graph.inputs:
        if v.shape is None:
            raise AutofusionError(f"input {v.name!r} has unknown rank: give real inputs (--inputs)")
        shape = tuple(d if isinstance(d, int) else dims.get(str(d), 1) for d in v.shape)
        dt = v.dtype or DType.FLOAT
        if dt.is_float:
            feeds[v.name] = rng.standard_normal(shape).astype(dt.numpy)
        elif dt == DType.BOOL:
            feeds[v.name] = rng.random(shape) < 0.5
        else:
            feeds[v.name] = rng.integers(0, 2, shape).astype(dt.numpy)
    return feeds
