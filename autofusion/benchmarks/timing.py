"""The block-alternating timer: every system timed in the same rounds, a block of runs at a time.

Why blocks, not single runs: a runtime's thread pool keeps spinning for a while after each run
and steals the cores of whatever runs next. Interleaving single runs made ONNX Runtime look 1.8x
slower on these machines. So each system runs `block` consecutive timed runs, then the timer
sleeps `pause_s` (long enough for the spinning threads to park) before the next system's block.

Why rounds: the host has slow and fast phases of a few seconds. Spreading each system's samples
over `rounds` rounds, all systems in every round, exposes them all to the same phases; the
samples of all rounds are pooled per system, and a ratio of two systems is taken round by round
(paired_ratio). The order of systems rotates by one each round, so no system always follows the
same neighbour or always goes first after the warm-up.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Timings:
    """Seconds per timed run for each system, and the error of each system that failed mid-way."""
    samples: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Summary:
    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int


def summarize(seconds: list[float]) -> Summary:
    ms = np.asarray(seconds) * 1e3
    p10, median, p90 = np.percentile(ms, [10, 50, 90])
    return Summary(float(median), float(p10), float(p90), len(ms))


def round_medians(seconds: list[float], block: int) -> list[float]:
    """The median of each block of `block` consecutive runs, in ms: one per round."""
    ms = np.asarray(seconds) * 1e3
    return [float(np.median(ms[i:i + block])) for i in range(0, len(ms) - block + 1, block)]


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median over rounds of numerator / denominator, round by round: two systems' blocks of
    one round run seconds apart, in the same phase of the host, so a phase that slows both
    cancels (pooled medians mix phases, whose times differ up to 2x on some hosts)."""
    return float(np.median(np.asarray(numerator) / np.asarray(denominator)))


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
