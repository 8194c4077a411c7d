"""The block-alternating timer, and the measured speedup of a fused model over the same model at
level 0 in one process (what the report labels "measured", as opposed to the cost model's
estimate). Every system is timed in the same rounds, a block of runs at a time.

Why blocks, not single runs: a runtime's thread pool keeps spinning for a while after each run
and steals the cores of whatever runs next. Interleaving single runs made ONNX Runtime look 1.8x
slower on these machines. So each system runs `block` consecutive timed runs, then the timer
sleeps `pause_s` (long enough for the spinning threads to park) before the next system's block.

Why rounds: the host has slow and fast phases of a few seconds. Spreading each system's samples
over `rounds` rounds, all systems in every round, exposes them all to the same phases; the
samples of all rounds are pooled per system, and a ratio of two systems is taken round by round
(benchmarks/timing.py paired_ratio). The order of systems rotates by one each round, so no
system always follows the same neighbour or always goes first after the warm-up.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .backend import CompiledModel


@dataclass
class Timings:
    """Seconds per timed run for each system, and the error of each system that failed mid-way."""
    samples: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def time_in_blocks(runs: dict[str, Callable[[], object]], *, rounds: int, block: int,
                   warmup: int, pause_s: float,
                   on_block: Callable[[int, str], None] | None = None,
                   describe_error: Callable[[BaseException], str] = repr) -> Timings:
    """Time each callable in `runs` (name -> one inference), alternating in blocks.

    First `warmup` untimed runs of each system (also one system at a time), then `rounds`
    rounds of one `block` of timed runs per system. `on_block(round, name)` is called before
    each block (round -1 for warm-up), for progress display. A system that raises is dropped from
    the remaining rounds and its error recorded; the others go on.
    """
    result = Timings(samples={name: [] for name in runs})
    active = list(runs)

    def run_block(name: str, count: int, timed: bool) -> None:
        fn = runs[name]
        try:
            for _ in range(count):
                start = time.perf_counter()
                fn()
                if timed:
                    result.samples[name].append(time.perf_counter() - start)
        except Exception as e:  # noqa: BLE001 - a failing system must not stop the others
            result.errors[name] = describe_error(e)
            active.remove(name)
        time.sleep(pause_s)

    for name in list(active):
        if on_block:
            on_block(-1, name)
        run_block(name, warmup, timed=False)
    for r in range(rounds):
        shift = r % len(active) if active else 0
        for name in active[shift:] + active[:shift]:
            if name in active:
                if on_block:
                    on_block(r, name)
                run_block(name, block, timed=True)
    return result


def measure_speedup(unfused: CompiledModel, fused: CompiledModel, feeds: Mapping[str, np.ndarray],
                    rounds: int = 5, block: int = 5) -> dict:
    timed = time_in_blocks({"level0": lambda: unfused.run(feeds), "fused": lambda: fused.run(feeds)},
                           rounds=rounds, block=block, warmup=3, pause_s=0.0)
    if timed.errors:
        raise RuntimeError("; ".join(f"{k}: {v}" for k, v in timed.errors.items()))
    level0_ms, fused_ms = (statistics.median(timed.samples[k]) * 1e3 for k in ("level0", "fused"))
    return {"level0_ms": level0_ms, "fused_ms": fused_ms, "speedup": level0_ms / fused_ms,
            "runs": len(timed.samples["fused"])}
