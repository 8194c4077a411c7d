"""What the block-alternating timer's samples say (the timer: autofusion/measure.py,
time_in_blocks): each system's median and spread, its median per round, and the ratio of two
systems taken round by round."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


def against_faster(rounds: dict[str, list[float]], ours: str, peers: tuple[str, ...]) -> float | None:
    """`ours` against the faster of `peers` round by round (paired_ratio over each round's
    fastest peer; > 1: ours faster), None where ours or every peer has no rounds."""
    present = [np.asarray(rounds[p]) for p in peers if p in rounds]
    if ours not in rounds or not present:
        return None
    return paired_ratio(list(np.minimum.reduce(present)), rounds[ours])


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median over rounds of numerator / denominator, round by round: two systems' blocks of
    one round run seconds apart, in the same phase of the host, so a phase that slows both
    cancels (pooled medians mix phases, whose times differ up to 2x on some hosts)."""
    return float(np.median(np.asarray(numerator) / np.asarray(denominator)))
