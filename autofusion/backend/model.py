"""CompiledModel: a compiled graph as a callable — inputs bound and checked, outputs returned in
the caller's array type — over the plan's Program (torch kernels and native partitions), which
the compile's steps made (pipeline.py)."""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..ir import Graph, Value
from .branches import Branches
from .executor import Program, storage, tensors_of, to_numpy
from .lower import lower
from .native import affinity, load
from .native.library import SIZE_CACHE, SizesOutOfReach, Streams, shared_streams
from .precision import GuardReport
from .sizes import SizesCheck
from .specialise import specialise, symbolic_dims
from .torch_cpu import TORCH_DTYPES
from .turns import Turns

Array = np.ndarray | torch.Tensor


class CompiledModel:
    """A compiled graph, callable with numpy arrays or torch tensors, by position or by name.

    Returns the same kind it was given: one array for a one-output model, else a tuple in the
    graph's output order. `run(dict)` returns a dict by output name; `submit(...)` a Future.

    Safe to call from many threads at once: up to `streams` calls run at the same time, each in
    its own execution context (arenas) over the shared weights, each on `threads` threads; more
    callers wait their turn. streams=1 (latency): one call at a time on every thread.
    """

    def __init__(self, graph: Graph, program: Program, report: Any = None, threads: int | None = None,
                 size_cache: int = SIZE_CACHE, guard: GuardReport | None = None, streams: int = 1):
        """The compiled graph's program (pipeline.py builds it); the fusion report and the
        precision guard's findings are kept for the caller to read. threads: each stream's."""
        self.graph, self.program, self.plan = graph, program, program.plan
        self.report, self.guard = report, guard
        self.backend, self.threads, self.size_cache = self.plan.backend, threads, size_cache
        self.streams = streams
        # at most `streams` calls at once. A program that is one native partition runs its calls
        # on the runtime's streams (runner.cpp), which queue them: one more may wait there per
        # stream (a stream that finishes a call takes the next at once), the rest wait here
        # (_queued). Other programs run on the caller's thread, `streams` at a time (_turns).
        self._turns = Turns(streams)
        self._queued = Turns(2 * streams)
        self._streams: dict[int, Streams] = {}   # per team size (load.py: fewer on a busy machine)
        self._streams_lock = threading.Lock()
        self._submitted: ThreadPoolExecutor | None = None
        self._submit_lock = threading.Lock()
        self.symbols = symbolic_dims(graph)
        # Ifs the inputs decide, each set of branches taken a model of its own (branches.py)
        self.branches: Branches | None = None
        self._check_sizes = SizesCheck(self.plan, self.size_cache)
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]
        # per input, the (dtype, shape) a tensor that needs no further check has — a symbol in
        # the shape: any size, the same wherever the symbol is — where every input is a tensor of
        # a known shape and dtype (a call's Python runs with its code out of cache after the
        # kernels, ~20 µs for the full check of one input; MobileNetV3-L's call is ~4 ms)
        plain = all(v.sequence is None and TORCH_DTYPES.get(v.dtype) is not None and v.shape is not None
                    and all(isinstance(d, (int, str)) for d in v.shape) for v in graph.inputs)
        self._plain_inputs = ([(TORCH_DTYPES[v.dtype], tuple(v.shape)) for v in graph.inputs]
                              if plain else None)

    @property
    def execution(self) -> str:
        """How calls from several threads run, in words."""
        each = f"{self.threads} thread(s)" if self.threads is not None else "torch's threads"
        if self.streams == 1:
            return f"calls one at a time on {each} (latency mode; streams=N runs N at once)"
        return f"up to {self.streams} calls at once on {each} each (throughput mode, streams={self.streams})"

    def _use_threads(self) -> None:
        if self.threads is not None and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)   # one OpenMP pool: torch's and oneDNN's

    def _exact(self, program: Program) -> Program:
        """The program's graph on PyTorch kernels alone (made on first use): what a call whose
        inputs hold NaN or an infinity runs where oneDNN's ReLU or Clip would turn NaN into 0."""
        if program.exact is None:
            program.exact = Program(program.graph, lower(program.graph, "torch"))
        return program.exact

    def program_for_inputs(self, inputs: Mapping[str, Array]) -> Program:
        """The program a call with these inputs runs (checked as a call checks them): the model's,
        or its PyTorch-only form where the inputs need it (NaN and infinities where oneDNN would
        clamp them; sizes that make an empty tensor); where Ifs are decided by the inputs, that
        of the version these inputs take."""
        arrays = self._bind((), dict(inputs))
        if self.branches is not None:
            return self._version(arrays).program_for_inputs(inputs)
        tensors = [check_input(v, a) for v, a in zip(self.graph.inputs, arrays)]
        sizes = input_sizes(self.graph, tensors)
        program = self.program
        if program.plan.nan_clamping and not program.all_finite(tensors):
            return self._exact(program)
        return self._exact(program) if not self._fits(program, sizes) else program

    def _fits(self, program: Program, sizes: dict[str, int]) -> bool:
        """Whether the native partitions can be set up for these sizes (no dim below 1)."""
        return all(s >= 1 for s in sizes.values()) or not any(p.target == "native" for p in program.plan.partitions)

    @property
    def native_source(self) -> str:
        """The native partitions' programs (each the runtime calls it makes, written as C++
        calls) and the generated kernels' C++."""
        return self.program.native_source

    @property
    def source(self) -> str:
        """The generated Python that runs the graph (native partitions: see native_source)."""
        return self.program.source

    def __call__(self, *args: Array, **kwargs: Array):
        outs, as_numpy = self._execute(self._bind(args, kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        outs, _ = self._execute(self._bind((), dict(inputs)))
        return dict(zip(self.output_names, outs))

    def submit(self, *args: Array, **kwargs: Array) -> Future:
        """The call, run on one of the model's `streams` threads: a Future of what the call
        returns (its error, raised by .result()). The inputs are read when the call runs: leave
        them unchanged until it is done."""
        if self._submitted is None:
            with self._submit_lock:
                if self._submitted is None:
                    self._submitted = ThreadPoolExecutor(self.streams, thread_name_prefix="autofusion-stream")
        return self._submitted.submit(self.__call__, *args, **kwargs)

    def close(self) -> None:
        """Stop the threads submit() started, once their calls are done (also at exit)."""
        if self._submitted is not None:
            self._submitted.shutdown(wait=True)
            self._submitted = None

    def _bind(self, args: Sequence[Array], kwargs: Mapping[str, Array]) -> list[Array]:
        names = self.input_names
        if not kwargs and len(args) == len(names):
            return list(args)
        if len(args) > len(names):
            raise InputError(f"model takes {len(names)} input(s) {names}, got {len(args)} positional")
        bound: dict[str, Array] = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise InputError(f"unknown input {k!r}; the model's inputs are {names}")
            if k in bound:
                raise InputError(f"input {k!r} given both by position and by name")
            bound[k] = v
        missing = [n for n in names if n not in bound]
        if missing:
            raise InputError(f"missing input(s) {missing}; the model's inputs are {names}")
        return [bound[n] for n in names]

    def _version(self, arrays: list[Array]) -> CompiledModel:
        """The model compiled for the branches these inputs take (branches.py)."""
        return self.branches.model_for(arrays, lambda given: [check_input(v, a) for v, a in
                                                              zip(self.graph.inputs, given)])

    def _execute(self, arrays: list[Array]) -> tuple[list[Array], bool]:
        if self.branches is not None:
            return self._version(arrays)._execute(arrays)
        sizes = self._plain_sizes(arrays)
        if sizes is not None:
            outs = self._one_call(arrays, sizes)
            if outs is not None:
                return list(outs), False
            tensors, as_numpy, program = arrays, False, self.program
        else:
            as_numpy = not any(isinstance(a, torch.Tensor) for x in arrays
                               for a in (x if isinstance(x, (list, tuple)) else [x]))
            tensors = [check_input(v, a) for v, a in zip(self.graph.inputs, arrays)]
            program = self.program
            sizes = input_sizes(self.graph, tensors)
        sizes = sizes or None
        if sizes:
            self._check_sizes(sizes)
        if (program.plan.nan_clamping and not program.all_finite(tensors)) or \
                (sizes and not self._fits(program, sizes)):
            program = self._exact(program)
        self._turns.take()
        try:
            self._use_threads()
            held = (contextlib.nullcontext() if program.runtime is None else
                    affinity.caller_held(program.runtime, torch.get_num_threads()))
            with held:
                try:
                    outs = self._run(program, tensors, sizes)
                except SizesOutOfReach:   # a size only the run knows (a count NonZero made) is 0
                    program = self._exact(program)
                    outs = self._run(program, tensors, sizes)
        finally:
            self._turns.give_back()
        # an output sharing memory with a caller's input or a constant (Identity, a reshape or
        # slice view) is returned as a copy, so writing to it cannot change either
        if not program.outputs_fresh:
            shared = program.constant_storages | {storage(t) for t in tensors_of(tensors)}
            outs = [_unshared(o, shared) for o in outs]
        if as_numpy:
            return [_each(to_numpy, t) for t in outs], True
        return list(outs), False

    @staticmethod
    def _run(program: Program, tensors: list, sizes: dict[str, int] | None):
        if program.torch_free:   # the guard costs ~0.06 ms a call (its code out of cache after the kernels)
            return program(*tensors, sizes=sizes)
        with torch.inference_mode():
            return program(*tensors, sizes=sizes)

    def _one_call(self, tensors: list[torch.Tensor], sizes: dict[str, int]) -> tuple[torch.Tensor, ...] | None:
        """Plain inputs to a program that is one native partition: one C call, run on one of the
        model's streams, that also checks the inputs for NaN (the same work from Python cost
        ~70 µs, its code out of cache after the kernels); None where the program is not such a one, is
        being profiled, an input holds NaN or an infinity, or a size is below 1 (the general path
        takes those)."""
        program = self.program
        whole = program.whole
        if whole is None or program.step_times is not None or (sizes and min(sizes.values()) < 1):
            return None
        if sizes:
            self._check_sizes(sizes)
        if program.whole_inputs is not None:
            tensors = [tensors[k] for k in program.whole_inputs]
        self._queued.take()
        self._use_threads()
        threads = load.threads_for(torch.get_num_threads())   # one fewer for each core others keep busy
        context = whole.take(threads)
        try:
            key = tuple(sizes[s] for s in whole.symbols) if whole.symbols else ()
            check = bool(program.plan.nan_clamping)
            try:
                if not self._on_streams():
                    outs = _on_caller(whole, key, context, threads, tensors, check)
                else:
                    streams = self._streams.get(threads) or self._start_streams(whole.library, threads)
                    built = whole.for_sizes(key, context, streams, threads)   # built there: no pool left here
                    outs = built.run_checked(tensors, check, threads=threads, streams=streams)
            except SizesOutOfReach:
                return None   # the general path runs it on PyTorch's kernels
            if outs is None or program.whole_outputs is None:
                return outs
            return tuple(outs[k] for k in program.whole_outputs)
        finally:
            whole.give_back(context, threads)
            self._queued.give_back()

    def _on_streams(self) -> bool:
        """Whether a call runs on the streams: always with several (throughput mode); in latency
        mode, unless it comes from the main thread. Why: libgomp keeps an OpenMP pool for each
        thread that ran a parallel region and, once their threads outnumber the CPUs, has every
        team sleep between regions. Calls from several threads each make a pool, which the
        streams avoid (a server's worker threads); but the main thread of a script, a notebook,
        a benchmark or a torch.compile'd program runs torch's own parallel work too, and there
        the streams' pool is the second one (MobileNetV3-L 5.0 ms against 1.6 once a torch
        product ran on the main thread; a CRNN's LSTM 12.4 against 1.7): its calls share the
        main thread's pool instead."""
        return self.streams > 1 or threading.current_thread() is not threading.main_thread()

    def _start_streams(self, library, threads: int) -> Streams:
        """The model's streams for teams of `threads`, taken on the first call with that count: a
        thread each, its team on its share of the CPUs where that pays (affinity.stream_cpus), the
        same threads as every model's in this process with the same count (shared_streams)."""
        with self._streams_lock:
            if threads not in self._streams:
                self._streams[threads] = shared_streams(library, self.streams, threads, affinity.stream_cpus(
                    self.streams, threads, os.sched_getaffinity(0)))
            return self._streams[threads]

    def _plain_sizes(self, arrays: list[Array]) -> dict[str, int] | None:
        """Where there are inputs and every one is a dense torch tensor of its dtype and shape
        (each symbol one size throughout): the sizes of the symbols ({} for a static model), with
        nothing more to check (no inputs: numpy out); else None."""
        if self._plain_inputs is None or not arrays:
            return None
        sizes: dict[str, int] = {}
        for a, (dtype, shape) in zip(arrays, self._plain_inputs):
            if type(a) is not torch.Tensor or a.dtype != dtype or a.dim() != len(shape) or not a.is_contiguous():
                return None
            for want, got in zip(shape, a.shape):
                if want != got and (type(want) is not str or sizes.setdefault(want, got) != got):
                    return None
        return sizes


def _on_caller(part, key: tuple, context: int, threads: int, tensors: list[torch.Tensor], check: bool):
    """The call on the calling thread: the partition built for these sizes (its primitives made
    for `threads`: oneDNN splits a primitive's work for the count current when it makes it), run
    with the workers pinned and the caller held on the CPU they leave (affinity.py)."""
    own = torch.get_num_threads()
    if threads != own:
        torch.set_num_threads(threads)
    try:
        built = part.for_sizes(key, context)
        cpus = affinity.pin_workers(part.library, threads)
        return built.run_checked(tensors, check, hold_cpu=cpus[0] if cpus else -1)
    finally:
        if threads != own:
            torch.set_num_threads(own)


def check_input(v: Value, a: Array) -> torch.Tensor | list[torch.Tensor]:
    """The array given for input v as a tensor (sharing its memory where it can), or an
    InputError naming v."""
    if v.sequence is not None:   # a list of arrays, each checked as its elements are typed
        if not isinstance(a, (list, tuple)):
            raise InputError(f"input {v.name!r}: expected a sequence (a list of arrays, "
                             f"{v.type_str()}), got {type(a).__name__}")
        element = v.sequence
        return [check_input(Value(f"{v.name}[{k}]", element.shape, element.dtype), e)
                for k, e in enumerate(a)]
    if isinstance(a, (list, tuple)):
        raise InputError(f"input {v.name!r}: expected a tensor ({v.type_str()}), got a "
                         f"{type(a).__name__}")
    if a is None:   # an empty optional: the IR holds an optional input as its tensor
        raise InputError(f"input {v.name!r}: got None; autofusion needs a tensor for every "
                         "input (an optional one included)")
    if isinstance(a, torch.Tensor):
        t = a
        _check_size(v, tuple(t.shape), t.numel() * t.element_size())
    else:
        a = np.asarray(a)
        if a.dtype == np.object_ or a.dtype.kind in "SU":
            raise InputError(f"input {v.name!r}: object/string arrays are not supported")
        _check_size(v, a.shape, a.size * a.itemsize)
        t = _from_numpy(np.ascontiguousarray(a)) if a.ndim else torch.tensor(a)
    if v.dtype is not None and TORCH_DTYPES.get(v.dtype) is not None and t.dtype != TORCH_DTYPES[v.dtype]:
        raise InputError(f"input {v.name!r}: expected dtype {v.dtype.name.lower()}, "
                         f"got {str(t.dtype).removeprefix('torch.')}")
    if v.shape is not None:
        if t.dim() != len(v.shape):
            raise InputError(f"input {v.name!r}: expected rank {len(v.shape)} "
                             f"(shape {v.type_str()}), got shape {tuple(t.shape)}")
        for axis, (want, got) in enumerate(zip(v.shape, t.shape)):
            if isinstance(want, int) and want != got:
                raise InputError(f"input {v.name!r}: dimension {axis} must be {want} "
                                 f"(shape {v.type_str()}), got shape {tuple(t.shape)}")
    return t


def input_sizes(graph: Graph, tensors: list) -> dict[str, int]:
    """The size of each symbolic dim; an error where two inputs disagree on one."""
    seen: dict[str, tuple[int, str]] = {}
    for v, t in zip(graph.inputs, tensors):
        for axis, d in enumerate(v.shape or ()):
            if isinstance(d, str):
                size = t.shape[axis]
                if d in seen and seen[d][0] != size:
                    raise InputError(f"input {v.name!r}: dimension {axis} ({d!r}) is {size}, "
                                     f"but {seen[d][1]} gave {d!r} = {seen[d][0]}")
                seen.setdefault(d, (size, repr(v.name)))
    return {d: size for d, (size, _) in seen.items()}


def specialised_to(graph: Graph, feeds: Mapping[str, Array]) -> Graph:
    """The graph specialised to the sizes of these inputs, where it has symbolic dims (the
    guards propagate values through it)."""
    if not symbolic_dims(graph):
        return graph
    return specialise(graph, input_sizes(graph, [check_input(v, feeds[v.name]) for v in graph.inputs]))


def _each(fn, x):
    """fn of a tensor, or of each element of a sequence (a list)."""
    return [fn(e) for e in x] if isinstance(x, list) else fn(x)


def _unshared(t, shared: set[int]):
    return _each(lambda e: e.clone() if storage(e) in shared else e, t)


def _check_size(v: Value, shape: tuple, nbytes: int) -> None:
    """An input larger as a dense array than this machine's memory (a broadcast or expanded view
    of a few bytes, say) is refused before anything is copied or allocated for it."""
    if nbytes > MEMORY:
        raise InputError(f"input {v.name!r}: shape {shape} is {_size(nbytes)} as a dense array, "
                         f"more than this machine's memory ({_size(MEMORY)})")


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    """The array as a tensor sharing its memory; a read-only one too (no kernel writes to a
    graph input, so torch's warning about writing to it does not apply)."""
    if a.flags.writeable:
        return torch.from_numpy(a)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        return torch.from_numpy(a)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


MEMORY = _physical_memory()
