"""Turns: at most n calls of a model at once, the waiting served in the order they came.

threading.Semaphore lets a thread that has just given its turn back take it again before the
waiter it woke runs: four callers of a model with two streams saw 6 ms at the median and 47 ms at
the 99th percentile. Here a turn given back passes straight to the longest-waiting caller.
"""
from __future__ import annotations

import threading
from collections import deque


class Turns:
    def __init__(self, n: int):
        if n < 1:
            raise ValueError(f"turns for {n} callers at once: at least 1")
        self.n = n
        self._free = n
        self._lock = threading.Lock()
        self._waiting: deque[threading.Lock] = deque()   # each a held lock its waiter blocks on

    def take(self) -> None:
        """A turn, waiting in line for one where all are taken."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return
            mine = threading.Lock()
            mine.acquire()
            self._waiting.append(mine)
        mine.acquire()   # released by the caller whose turn passes to this one

    def give_back(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._free += 1
