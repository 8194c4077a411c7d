"""Measured speedup of a fused model over the same model at level 0, in one process.

The two run in alternating blocks of runs (never run by run: a runtime's idle threads keep
spinning after a run and would steal the next one's cores), after a warm-up, and the medians
are compared. This is what the report labels "measured", as opposed to the cost model's estimate.
"""
from __future__ import annotations

import statistics
import time
from typing import Mapping

import numpy as np

from .backend import CompiledModel


def time_blocks(models: list[CompiledModel], feeds: Mapping[str, np.ndarray], rounds: int = 5,
                block: int = 5, warmup: int = 3) -> list[list[float]]:
    """Per model, the wall times (seconds) of rounds x block runs, models alternating by block."""
    for m in models:
        for _ in range(warmup):
            m.run(feeds)
    samples: list[list[float]] = [[] for _ in models]
    for _ in range(rounds):
        for m, out in zip(models, samples):
            for _ in range(block):
                t = time.perf_counter()
                m.run(feeds)
                out.append(time.perf_counter() - t)
    return samples


def measure_speedup(unfused: CompiledModel, fused: CompiledModel, feeds: Mapping[str, np.ndarray],
                    rounds: int = 5, block: int = 5) -> dict:
    base, new = time_blocks([unfused, fused], feeds, rounds, block)
    level0_ms, fused_ms = statistics.median(base) * 1e3, statistics.median(new) * 1e3
    return {"level0_ms": level0_ms, "fused_ms": fused_ms, "speedup": level0_ms / fused_ms,
            "runs": len(new)}
