"""Pinning the OpenMP pool's worker threads, one CPU each.

Why: after the process idles (a server between requests, a benchmark between blocks), the first
parallel region wakes a sleeping worker, and Linux may start it on the CPU the caller's thread is
running on; the two share that CPU until load balancing moves one, some scheduler ticks later.
On a 2-vCPU machine elementwise-8's 0.25 ms kernel took 5.4 and 4.2 ms on its first two calls
after a 0.2 s pause; with the worker pinned, 0.39 and 0.26 ms (BENCHMARKS.md, "2026-12-05-pinned-workers").

When: only where the team has a thread for every core the process may run on (it uses them all
anyway, so pinning takes nothing from anyone), or where a model's streams split them (each
stream's team on its own share), never where the user chose a binding
(OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY) or turned pinning off (AUTOFUSION_PIN_THREADS=0).
The thread that runs the call (a stream's, runner.cpp) is held on the one CPU of the team no
worker has for the length of a call only (hold_caller; inside the C call where the model's
whole program is one native partition): left free, it may wake on a worker's CPU, and a pinned
worker cannot move away.
torch's operators share the pool (one libgomp), and gain too.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator

USER_BINDING = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")
# per thread, {team size: its CPUs or None}: thread-local, as a finished thread's ident is reused
# by the next one, whose pool is new (keyed by ident, a server's client thread found its team
# "pinned", made its pool inside a held call and had both its team's threads on one CPU: bf16
# BERT-Base 1344 ms a call against 27)
_pinned = threading.local()


def core_of(cpu: int) -> tuple[int, int] | int:
    """The (package, core) a CPU belongs to, from sysfs; the CPU itself where sysfs says nothing."""
    topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
    try:
        with open(f"{topology}/physical_package_id") as package, open(f"{topology}/core_id") as core:
            return int(package.read()), int(core.read())
    except (OSError, ValueError):
        return cpu


def cpu_order(allowed: Iterable[int], core: Callable[[int], object] = core_of) -> list[int]:
    """The allowed CPUs, the first of each core before any core's second (SMT siblings last)."""
    firsts, siblings, seen = [], [], set()
    for cpu in sorted(allowed):
        key = core(cpu)
        (siblings if key in seen else firsts).append(cpu)
        seen.add(key)
    return firsts + siblings


def worker_cpus(threads: int, allowed: Iterable[int],
                core: Callable[[int], object] = core_of) -> list[int] | None:
    """The CPU of each thread of a team of `threads` (entry 0, the caller's, is not pinned), or
    None where pinning would not pay or would take CPUs others may need: one thread, fewer
    threads than the process has cores, or more threads than CPUs (two would share one)."""
    order = cpu_order(allowed, core)
    if threads < 2 or not len({core(cpu) for cpu in order}) <= threads <= len(order):
        return None
    return order[:threads]


def stream_cpus(streams: int, threads: int, allowed: Iterable[int],
                core: Callable[[int], object] = core_of) -> list[int] | None:
    """The CPUs of a model's streams' teams (runner.cpp), stream k's the k-th `threads` of them,
    the first of each core first; None where they would not pay (one stream whose team leaves a
    core free: worker_cpus), where they would not fit one thread a CPU, or where pinning is off
    or the user chose a binding."""
    if not pinning_allowed():
        return None
    if streams == 1:
        return worker_cpus(threads, allowed, core)
    order = cpu_order(allowed, core)
    return order[:streams * threads] if streams * threads <= len(order) else None


def pinning_allowed() -> bool:
    return os.environ.get("AUTOFUSION_PIN_THREADS", "1") != "0" and not any(os.environ.get(v) for v in USER_BINDING)


def pin_workers(library, threads: int) -> list[int] | None:
    """Pin the workers of the calling thread's team of `threads` (libgomp keeps a pool per
    calling thread), once per thread and count, through any model library's runtime (all run on
    the one libgomp); the CPUs, or None where not pinned."""
    teams = vars(_pinned).setdefault("teams", {})
    if threads in teams:
        return teams[threads]
    cpus = None
    if pinning_allowed():
        cpus = worker_cpus(threads, os.sched_getaffinity(0))
        if cpus is not None and library.pin_workers(cpus) != threads - 1:
            cpus = None   # the runtime could not pin them all (a cgroup's rules, say)
    teams[threads] = cpus
    return cpus


@contextlib.contextmanager
def caller_held(library, threads: int) -> Iterator[None]:
    """For the calls made inside: the calling thread's team of `threads` pinned (pin_workers)
    and the caller held on the CPU its workers leave (hold_caller); its own CPUs given back after."""
    own = hold_caller(pin_workers(library, threads))
    try:
        yield
    finally:
        if own is not None:
            os.sched_setaffinity(0, own)


def hold_caller(cpus: list[int] | None) -> set[int] | None:
    """Move the calling thread to cpus[0], the CPU no worker has, for one call; the CPUs it may
    run on, to give back after the call (os.sched_setaffinity), or None where it was not moved:
    no workers pinned, or the caller's own set is one CPU or leaves cpus[0] out."""
    if cpus is None:
        return None
    own = os.sched_getaffinity(0)
    if len(own) < 2 or cpus[0] not in own:
        return None
    os.sched_setaffinity(0, (cpus[0],))
    return own
