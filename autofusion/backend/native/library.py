"""Loading the runtime and a model's kernels, building partitions from their programs, and
calling them from Python.

The runtime library (runtime/*.cpp) is loaded once per process; a model's generated kernels, if
it has any, are one more library whose table `af_kernels` the partitions' programs index. A
NativePartition is a partition of the plan for every set of sizes: its program encoded once;
for each set of sizes a call brings, a BuiltPartition (the program's dims evaluated for them,
the oneDNN primitives created, weights reordered, the arena allocated; no compiler runs), the
most recent ones kept. A BuiltPartition is called with torch tensors: it allocates the outputs,
passes the data pointers of inputs and outputs, and runs every step of the partition in one C
call.
"""
from __future__ import annotations

import ctypes
import functools
import math
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Mapping

import torch

from ...errors import KernelBuildError, NodeExecutionError
from ...ir import Node, Value
from ...ir.symbolic import evaluate
from .build import Toolchain, kernel_library, runtime_library
from .program import VALUE_TYPES, Program

_c = ctypes.c_void_p
OUTPUT_BATCH, OUTPUT_BATCH_BYTES = 8, 1 << 20   # outputs made ahead: at most 8 calls', 1 MiB
NOT_FINITE = 2   # af_run's answer where an input it was to check holds NaN or an infinity


class NativeLibrary:
    """The runtime library: builds partitions from programs and runs them."""

    def __init__(self, path: Path):
        lib = self.lib = ctypes.CDLL(str(path))
        lib.af_build.restype = _c
        lib.af_build.argtypes = [_c, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p), _c, _c, _c, _c, ctypes.c_int]
        lib.af_shared.restype, lib.af_shared.argtypes = _c, []
        lib.af_shared_free.restype, lib.af_shared_free.argtypes = None, [_c]
        lib.af_arena.restype, lib.af_arena.argtypes = _c, []
        lib.af_arena_free.restype, lib.af_arena_free.argtypes = None, [_c]
        lib.af_run.restype = ctypes.c_int
        lib.af_run.argtypes = [_c, ctypes.POINTER(_c), ctypes.POINTER(_c), ctypes.c_int, ctypes.c_int]
        lib.af_free.restype, lib.af_free.argtypes = None, [_c]
        lib.af_error.restype = ctypes.c_char_p
        lib.af_arena_bytes.restype, lib.af_arena_bytes.argtypes = ctypes.c_size_t, [_c]
        lib.af_profile.restype, lib.af_profile.argtypes = None, [_c, ctypes.c_int]
        lib.af_step_times.restype = ctypes.c_int
        lib.af_step_times.argtypes = [_c, ctypes.POINTER(ctypes.c_double), ctypes.c_int]
        lib.af_step_kernels.restype = ctypes.c_int
        lib.af_step_kernels.argtypes = [_c, ctypes.c_char_p, ctypes.c_int]
        lib.af_all_finite.restype, lib.af_all_finite.argtypes = ctypes.c_int, [_c, ctypes.c_int64]
        lib.af_pin_workers.restype = ctypes.c_int
        lib.af_pin_workers.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.af_streams.restype = _c
        lib.af_streams.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        lib.af_streams_free.restype, lib.af_streams_free.argtypes = None, [_c]
        lib.af_build_on.restype = _c
        lib.af_build_on.argtypes = [_c, ctypes.c_int, _c, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p), _c, _c, _c,
                                    _c, ctypes.c_int]
        lib.af_run_on.restype = ctypes.c_int
        lib.af_run_on.argtypes = [_c, ctypes.c_int, _c, ctypes.POINTER(_c), ctypes.POINTER(_c), ctypes.c_int]
        self.path = path

    def error(self) -> str:
        return self.lib.af_error().decode(errors="replace")

    def all_finite(self, t: torch.Tensor) -> bool:
        """Whether a dense float32 tensor holds no NaN or infinity (the runtime's loop)."""
        return bool(self.lib.af_all_finite(t.data_ptr(), t.numel()))

    def pin_workers(self, cpus: list[int]) -> int:
        """Pin thread k >= 1 of an OpenMP team of len(cpus) to cpus[k]; how many it pinned."""
        return self.lib.af_pin_workers((ctypes.c_int * len(cpus))(*cpus), len(cpus))


class Streams:
    """Streams in the runtime (runner.cpp): `count` threads of its own, each with a team of
    `threads`, pinned to `cpus` (count·threads of them; None: not pinned); a native call handed
    to them runs on the first that is free, the callers in the order they came. Made by
    shared_streams."""

    def __init__(self, library: NativeLibrary, count: int, threads: int, cpus: list[int] | None):
        self.count, self.threads, self.cpus = count, threads, cpus
        pinned = (ctypes.c_int * len(cpus))(*cpus) if cpus else None
        self.handle = library.lib.af_streams(count, threads, pinned)
        weakref.finalize(self, library.lib.af_streams_free, self.handle)


_streams: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_streams_lock = threading.Lock()


def shared_streams(library: NativeLibrary, count: int, threads: int, cpus: list[int] | None) -> Streams:
    """The process's streams of this shape, made on first use and shared by every model that
    asks for the same: libgomp keeps an OpenMP pool per thread that ran a parallel region, so
    streams of each model's own would put two models' pools on the same CPUs, and libgomp then
    has every team sleep between regions (MobileNetV3-L 7.2 ms a call, against 2.4, once a second
    model had run in the process). Shared, the models' calls queue for the same threads."""
    key = (id(library), count, threads, tuple(cpus or ()))
    with _streams_lock:
        found = _streams.get(key)
        if found is None:
            found = _streams[key] = Streams(library, count, threads, cpus)
        return found


def runtime(tc: Toolchain) -> NativeLibrary:
    """The runtime, built on this machine's first use (in the cache directory in use) and loaded
    once per process."""
    return _loaded(runtime_library(tc))


@functools.lru_cache(maxsize=None)
def _loaded(path: Path) -> NativeLibrary:
    return NativeLibrary(path)


class KernelTable:
    """A model's generated kernels: their library, built unless cached, and their addresses."""

    def __init__(self, tc: Toolchain, source: str, count: int):
        self.path = kernel_library(tc, source)
        self.lib = ctypes.CDLL(str(self.path))
        self.pointers = (_c * count).in_dll(self.lib, "af_kernels")


class SizesOutOfReach(Exception):
    """A call's sizes a native partition cannot be set up for (a dim below 1: an empty tensor;
    operands it takes as equal in size that are not): the model runs that call on PyTorch's
    kernels (model.py)."""


SIZE_CACHE = 8   # sets of sizes a native partition keeps built, by default (controls.py)
# A set of sizes' first calls run a build made for any size (runtime/any_size.cpp: products that
# take their rows at run time, convolutions as products over im2col tiles: nothing generated for
# these sizes, ~0.5 ms to set up a small recognizer against ~7), and its call number
# SPECIALISE_AT one made for its own sizes (oneDNN's code for them: CNNs 1.2-1.4x faster a call,
# transformers as fast). Sizes that recur are worth their own code; a stream of new ones (a text
# recognizer's line widths) never waits for it (docs/runtime.md, "What a new size costs"). Sizes
# whose call for any size took LONG_CALL seconds or more get theirs at their second call: their
# code (~0.3 ms a convolution or product) is then a small part of the call it speeds up.
SPECIALISE_AT = 3
LONG_CALL = 0.005


class NativePartition:
    """One native partition of a plan, for every set of sizes and every execution context.
    Called with the call's symbolic sizes (a dict, None for a static model) and its input
    tensors; a size the call does not give (one known only at run time, as a count NonZero made)
    is read off an input that has it as a dim. `built(index, nodes, kernels, sizes)` hears of
    each set of sizes it is set up for (its plan's partition index, its nodes, what runs each,
    the sizes).

    Calls from several threads run at once: each takes an execution context (an arena, and the
    builds that run in it) no other call holds, made when none is free, so there are as many as
    callers ever ran at once. The weights as steps lay them out are shared by every build, and
    oneDNN's primitive cache gives the builds of one set of sizes one primitive between them."""

    def __init__(self, library: NativeLibrary, program: Program, kernels: KernelTable | None,
                 nodes: list[Node], cache: int = SIZE_CACHE, built: Callable | None = None):
        self.library, self.program, self.table, self.node_list = library, program, kernels, nodes
        self.nodes_by_name = {n.name: n for n in nodes}
        self.encoded = encoded = program.encode()
        self.symbols = encoded.symbols
        # what every build passes the runtime: the program's strings and its constants' addresses
        self.strings = (ctypes.c_char_p * max(len(encoded.strings), 1))(*[s.encode() for s in encoded.strings])
        self.constant_pointers = (_c * max(len(program.constants), 1))(*[a.ctypes.data for a in program.constants])
        self.from_inputs = {}
        for slot, v in enumerate(program.inputs):
            for axis, d in enumerate(v.shape):
                if isinstance(d, str):
                    self.from_inputs.setdefault(d, (slot, axis))
        self.cache, self.on_built = max(int(cache), 1), built
        # what every build shares: the constants as steps lay them out
        self.shared = library.lib.af_shared()
        weakref.finalize(self, library.lib.af_shared_free, self.shared)
        self.arenas: list[int] = []   # per execution context, its arena
        # per thread count, the contexts no call holds (a context's builds are made for its
        # count; list.pop/append: atomic)
        self._idle: dict[int, list[int]] = {}
        # per set of sizes (the most recent `cache`), its build in each context that ran it, and
        # how often it was called
        self.built: OrderedDict[tuple, dict[int, BuiltPartition]] = OrderedDict()
        self.calls: dict[tuple, int] = {}
        self._building = threading.Lock()   # the cache's order, and a new context
        self.last: BuiltPartition | None = None
        self.last_sizes: dict[str, int] = {}
        # profiling: whether builds count their steps' time, and what builds dropped while they
        # did counted (a build for any size replaced by the sizes' own, a size the cache let go)
        self.profiling = False
        self.dropped_seconds = [0.0] * program.steps
        self._last_key: tuple | None = None
        if not self.symbols:   # built at once, for the compile's thread count
            threads = torch.get_num_threads()
            context = self.take(threads)
            self.for_sizes((), context)
            self.give_back(context, threads)

    def new_context(self) -> int:
        with self._building:
            arena = self.library.lib.af_arena()
            weakref.finalize(self, self.library.lib.af_arena_free, arena)
            self.arenas.append(arena)
            return len(self.arenas) - 1

    def take(self, threads: int) -> int:
        """An execution context for one call on `threads` threads, held until give_back: a free
        one, else a new one."""
        try:
            return self._idle[threads].pop()
        except (IndexError, KeyError):
            return self.new_context()

    def give_back(self, context: int, threads: int) -> None:
        self._idle.setdefault(threads, []).append(context)

    def sizes_of(self, given: Mapping[str, int] | None, xs) -> tuple[int, ...]:
        """The values of self.symbols for a call: given, or read off the inputs."""
        out = []
        for s in self.symbols:
            if given is not None and s in given:
                out.append(given[s])
            elif s in self.from_inputs:
                slot, axis = self.from_inputs[s]
                out.append(int(xs[slot].shape[axis]))
            else:
                raise RuntimeError(f"{_partition(self.node_list)}: no input gives the size {s!r}")
        return tuple(out)

    def for_sizes(self, key: tuple[int, ...], context: int, streams: Streams | None = None,
                  threads: int = 0) -> "BuiltPartition":
        """The partition built for these values of self.symbols, in this execution context (which
        the caller holds): made on first use (no compiler runs; on one of `streams` where given,
        for teams of `threads`), for any size until the sizes' call number SPECIALISE_AT, then
        for them (at the second where a call for any size took LONG_CALL); the most recent
        `cache` sets of sizes kept."""
        with self._building:
            builds = self.built.get(key)
            if builds is None:
                why = self.encoded.out_of_reach(key)
                if why:
                    raise SizesOutOfReach(f"sizes {dict(zip(self.symbols, key))} {why}")
                builds = self.built[key] = {}
                if len(self.built) > self.cache:
                    old, dropped = self.built.popitem(last=False)
                    self.calls.pop(old, None)
                    for b in dropped.values():
                        self._drop(b)
            else:
                self.built.move_to_end(key)
            calls = self.calls[key] = self.calls.get(key, 0) + 1
            built = builds.get(context)
            long_call = built is not None and built.run_seconds >= LONG_CALL
            any_size = bool(self.symbols) and calls < SPECIALISE_AT and not (calls > 1 and long_call)
        if built is None or built.any_size != any_size:   # outside the lock: another context may build
            if built is not None:
                self._drop(built)
            built = builds[context] = BuiltPartition(self, key, self.arenas[context], streams, threads, any_size)
            if self.profiling:
                built.profile(True)
        self.last = built
        if (key, any_size) != self._last_key:   # a build in another context says nothing new
            self._last_key, self.last_sizes = (key, any_size), dict(zip(self.symbols, key))
            if self.on_built is not None:
                self.on_built(self.program.index, self.node_list, built.kernels, built.choices, self.last_sizes)
        return built

    def __call__(self, sizes: Mapping[str, int] | None, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        threads = torch.get_num_threads()
        context = self.take(threads)
        try:
            key = self.sizes_of(sizes, xs) if self.symbols else ()
            return self.for_sizes(key, context)(*xs)
        finally:
            self.give_back(context, threads)

    def builds(self) -> list["BuiltPartition"]:
        return [b for per_context in list(self.built.values()) for b in list(per_context.values())]

    def profile(self, on: bool) -> None:
        self.profiling = on
        if on:
            self.dropped_seconds = [0.0] * self.program.steps
        for built in self.builds():
            built.profile(on)

    def _drop(self, built: "BuiltPartition") -> None:
        """A build leaving the partition: what it counted while profiling stays counted."""
        if self.profiling:
            self.dropped_seconds = [a + b for a, b in zip(self.dropped_seconds, built.step_seconds())]

    def step_seconds(self) -> list[float]:
        """Per step, the seconds counted since profiling was turned on, over every set of sizes
        and context."""
        counts = [b.step_seconds() for b in self.builds()] + [self.dropped_seconds]
        return [sum(c) for c in zip(*counts)]


class BuiltPartition:
    """One native partition built for one set of sizes in one execution context (its arena),
    callable with its input tensors by the caller that holds the context; returns its output
    tensors."""

    def __init__(self, partition: NativePartition, sizes: tuple[int, ...], arena: int | None = None,
                 streams: Streams | None = None, threads: int = 0, any_size: bool = False):
        """streams: built on one of them, for teams of `threads` (its OpenMP work on the stream's
        pool, not the caller's: runner.cpp af_build_on); else on the calling thread. any_size:
        its steps take primitives made for any size where they have one (SPECIALISE_AT)."""
        library, program, nodes = partition.library, partition.program, partition.node_list
        self.library, self.nodes = library, partition.nodes_by_name
        lib = library.lib
        words = partition.encoded.words_for(sizes)
        self._constants = program.constants   # read where they are: they live as long as the build
        args = (words.ctypes.data, len(words), partition.strings, partition.constant_pointers, partition.shared, arena,
                partition.table.pointers if partition.table is not None else None, int(any_size))
        self.any_size = any_size
        self.run_seconds = 0.0   # the last run's, for a build for any size (SPECIALISE_AT)
        handle = lib.af_build(*args) if streams is None else lib.af_build_on(streams.handle, threads, *args)
        if not handle:
            node, message = self._node_of(library.error())
            raise KernelBuildError(f"{node.describe() if node else _partition(nodes)}: {message}")
        self.handle = handle
        self.arena_bytes = lib.af_arena_bytes(handle)
        weakref.finalize(self, lib.af_free, handle)
        self.steps = program.steps   # one per node, in the partition's order
        self.kernels, self.choices = self._kernels()
        values = dict(zip(partition.symbols, sizes))
        self.out_shapes = [tuple(evaluate(d, values) for d in v.shape) for v in program.outputs]
        self.out_dtypes = [held_type(v) for v in program.outputs]
        self.in_types = [(v.name, held_type(v), torch.Size(evaluate(d, values) for d in v.shape))
                         for v in program.inputs]
        self.n_in, self.n_out = len(program.inputs), len(program.outputs)
        self._run, self._run_on = lib.af_run, lib.af_run_on
        self._lock = threading.Lock()   # the run against profiling's counts (one caller runs it)
        self._in_ptrs, self._out_ptrs = (_c * max(self.n_in, 1))(), (_c * max(self.n_out, 1))()
        # outputs made several calls' worth at a time: after a model's kernels ran, the
        # allocator's code is out of cache and its first tensor costs ~50 µs (MobileNetV3-L),
        # the next ones a few
        out_bytes = sum(math.prod(s) * t.itemsize for s, t in zip(self.out_shapes, self.out_dtypes))
        self._batch = 1 if any_size else max(1, min(OUTPUT_BATCH, OUTPUT_BATCH_BYTES // max(out_bytes, 1)))
        self._made: list[list[torch.Tensor]] = []

    def _node_of(self, message: str) -> tuple[Node | None, str]:
        """The runtime says "node 'NAME': …": the node it names, and what it says of it."""
        name = message.split("'")[1] if message.startswith("node '") else None
        node = self.nodes.get(name)
        return (node, message.split(": ", 1)[1]) if node else (None, message)

    def __call__(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if len(xs) != self.n_in:
            raise RuntimeError(f"the native partition takes {self.n_in} input(s), got {len(xs)}")
        for x, (name, dtype, shape) in zip(xs, self.in_types):
            if x.dtype != dtype or x.shape != shape:   # the C++ trusts the plan's types
                raise RuntimeError(f"native partition input {name!r} is {x.dtype}{list(x.shape)}, "
                                   f"the plan says {str(dtype).removeprefix('torch.')}{list(shape)}")
        return self.run_checked([x.contiguous() for x in xs])

    def run_checked(self, xs: list[torch.Tensor], check_finite: bool = False,
                    streams: Streams | None = None, threads: int = 0,
                    hold_cpu: int = -1) -> tuple[torch.Tensor, ...] | None:
        """Run on inputs already known to be dense tensors of the plan's types and shapes, on one
        of the streams (None: the caller's thread; hold_cpu >= 0: that thread on that CPU alone
        for the call, affinity.hold_caller's work done in C, two syscalls less of Python a call).
        check_finite: None, running nothing, where one holds NaN or an infinity; threads: the
        team the streams run it on (0: as torch has it; the streams hold their own CPUs)."""
        with self._lock:
            if not self._made:
                self._made = [[torch.empty(s, dtype=t) for s, t in zip(self.out_shapes, self.out_dtypes)]
                              for _ in range(self._batch)]
            outs = self._made.pop()
            for k, x in enumerate(xs):
                self._in_ptrs[k] = x.data_ptr()
            for k, o in enumerate(outs):
                self._out_ptrs[k] = o.data_ptr()
            start = time.perf_counter()
            if streams is None:
                rc = self._run(self.handle, self._in_ptrs, self._out_ptrs, check_finite, hold_cpu)
            else:
                rc = self._run_on(streams.handle, threads or torch.get_num_threads(), self.handle, self._in_ptrs,
                                  self._out_ptrs, check_finite)
            if self.any_size:
                self.run_seconds = time.perf_counter() - start
            if rc == NOT_FINITE:
                self._made.append(outs)
                return None
        if rc:
            node, message = self._node_of(self.library.error())
            if node is not None:
                raise NodeExecutionError(node.describe(), RuntimeError(message))
            raise RuntimeError(message)
        return tuple(outs)

    def _kernels(self) -> tuple[list[str], list[list[str]]]:
        """Per step, what runs it: oneDNN's implementations, the runtime's own loops ("" for a
        step with no work of its own: a view, a mean its producer's gate sums); and per step, the
        choices its builder made, with their reasons."""
        lib = self.library.lib
        size = lib.af_step_kernels(self.handle, None, 0)
        text = ctypes.create_string_buffer(size)
        lib.af_step_kernels(self.handle, text, size)
        lines = text.value.decode().split("\n")[:-1]
        if len(lines) != self.steps:
            raise RuntimeError(f"the native partition named kernels for {len(lines)} steps, its "
                               f"plan has {self.steps}")
        fields = [line.split("\t") for line in lines]
        return [f[0] for f in fields], [f[1:] for f in fields]

    def profile(self, on: bool) -> None:
        """Turn step timing on (every count from zero) or off."""
        with self._lock:
            self.library.lib.af_profile(self.handle, int(on))

    def step_seconds(self) -> list[float]:
        """Per step (the partition's nodes in order), the seconds its primitives took in the runs
        since profiling was turned on."""
        out = (ctypes.c_double * max(self.steps, 1))()
        with self._lock:
            n = self.library.lib.af_step_times(self.handle, out, self.steps)
        if n != self.steps:
            raise RuntimeError(f"the native partition counted {n} steps, its plan has {self.steps}")
        return [t * 1e-9 for t in out[:n]]


def held_type(v: Value) -> torch.dtype:
    """The type a partition holds a value in: the integers it reads and writes as they are
    (program.VALUE_TYPES), everything else float32."""
    return getattr(torch, v.dtype.numpy.name) if v.dtype in VALUE_TYPES else torch.float32


def _partition(nodes: list[Node]) -> str:
    """For an error no one node of a partition owns: its nodes and the ONNX nodes they stand for."""
    origin = [o for n in nodes for o in (n.origin or (n.name,))]
    shown = ", ".join(map(repr, origin[:8])) + (", ..." if len(origin) > 8 else "")
    return f"the native partition of {len(nodes)} node(s) (from ONNX nodes {shown})"
