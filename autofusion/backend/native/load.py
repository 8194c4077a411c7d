"""How many of this process's cores other processes keep busy, from /proc, and the thread count a
call should use for it.

Why: a team of OpenMP threads, one per core, waits at every barrier for its slowest thread, and a
thread that shares its core with another process's runs half the time: MobileNetV3-L on 2
threads took 6.3 ms a call (p99 11.3) with a Python loop spinning on the other core, against
2.1 idle; on one thread, 3.1 (p99 5.2). So a model whose team would cover every core runs its
calls on one thread fewer for each core others keep busy (model.py; builds for that count are
made on first use and kept beside the others). Idle, it costs a clock read a call and two small
/proc reads every INTERVAL_S.

`AUTOFUSION_ADAPT_THREADS=0` keeps the thread count as given whatever the load.
"""
from __future__ import annotations

import math
import os
import threading
import time

ADAPT_VAR = "AUTOFUSION_ADAPT_THREADS"
INTERVAL_S = 0.1   # how often the load is read again
HEADROOM = 0.3     # a core counts as free while others use less than 0.7 of it
_TICK = os.sysconf("SC_CLK_TCK")


def adapting() -> bool:
    return os.environ.get(ADAPT_VAR, "1") != "0"


def _busy_ticks(cpus: frozenset[int]) -> int | None:
    """The ticks these CPUs spent not idle (nor waiting on I/O), from /proc/stat."""
    total = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                if not line.startswith("cpu") or line[3] == " ":
                    continue
                name, *fields = line.split()
                if int(name[3:]) in cpus:
                    ticks = [int(x) for x in fields[:8]]   # user nice system idle iowait irq softirq steal
                    total += sum(ticks) - ticks[3] - ticks[4]
    except (OSError, ValueError, IndexError):
        return None
    return total


def _own_ticks() -> int | None:
    """The ticks this process ran (all its threads), from /proc/self/stat."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])   # utime, stime
    except (OSError, ValueError, IndexError):
        return None


class OtherLoad:
    """The cores of `cpus` other processes kept busy over the last interval, read at most every
    INTERVAL_S (0 where /proc cannot be read)."""

    def __init__(self, cpus: frozenset[int]):
        self.cpus = cpus
        self.cores = 0.0
        self._lock = threading.Lock()
        self._last: tuple[float, int, int] | None = None
        self._due = 0.0

    def taken(self) -> float:
        now = time.monotonic()
        if now < self._due or not self._lock.acquire(blocking=False):
            return self.cores
        try:
            busy, own = _busy_ticks(self.cpus), _own_ticks()
            if busy is not None and own is not None:
                if self._last is not None and now > self._last[0]:
                    seconds = now - self._last[0]
                    others = ((busy - self._last[1]) - (own - self._last[2])) / _TICK
                    self.cores = max(0.0, min(float(len(self.cpus)), others / seconds))
                self._last = (now, busy, own)
            self._due = now + INTERVAL_S
        finally:
            self._lock.release()
        return self.cores


_monitors: dict[frozenset[int], OtherLoad] = {}


def threads_for(threads: int) -> int:
    """The threads a call should use: `threads`, less one for each core of the process's that
    other processes keep busy, where the team would cover every core; at least one."""
    cpus = frozenset(os.sched_getaffinity(0))
    if not adapting() or threads < len(cpus) or threads < 2:
        return threads
    monitor = _monitors.get(cpus)
    if monitor is None:
        monitor = _monitors.setdefault(cpus, OtherLoad(cpus))
    free = len(cpus) - monitor.taken()
    return max(1, min(threads, math.floor(free + HEADROOM)))
