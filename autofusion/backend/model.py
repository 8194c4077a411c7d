"""CompiledModel: a compiled graph as a callable — inputs bound and checked, outputs returned in
the caller's array type — over the plan's Program (torch kernels and native partitions)."""
from __future__ import annotations

import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..errors import AutofusionError, InputError
from ..ir import Graph, Value
from ..ir.onnx_runtime_call import onnx_runtime_ops
from .native import affinity, build_partitions, unavailable
from .native.library import SIZE_CACHE, SizesOutOfReach
from .executor import Program, check_supported, storage, tensors_of, to_numpy
from .lower import lower
from .precision import (TOLERANCE, GuardReport, calibration_feeds, guard, output_error,
                        propagate, resolve)
from .sizes import SizesCheck
from .specialise import specialise, symbolic_dims
from .torch_cpu import TORCH_DTYPES

Array = np.ndarray | torch.Tensor


class CompiledModel:
    """A compiled graph, callable with numpy arrays or torch tensors, by position or by name.

    Returns the same kind it was given: one array for a one-output model, else a tuple in the
    graph's output order. `run(dict)` returns a dict by output name.
    """

    def __init__(self, graph: Graph, report: Any = None, backend: str = "auto",
                 threads: int | None = None, precision: str = "fp32", calibration: Any = None,
                 tolerance: float | None = None, size_cache: int | None = None):
        self.graph = graph
        self.report = report
        self.backend = backend
        self.threads = threads
        self.size_cache = size_cache or SIZE_CACHE
        self.symbols = symbolic_dims(graph)
        check_supported(graph)
        self.native_unavailable = unavailable() if self.backend != "torch" else None
        if self.backend == "native" and self.native_unavailable is not None:
            raise AutofusionError(f"backend 'native' cannot run here: {self.native_unavailable}")
        self.precision = resolve(precision, self.backend != "torch" and self.native_unavailable is None)
        self.guard: GuardReport | None = None
        feeds = reference = None
        if self.precision.compute != "fp32":
            feeds, reference = self._guard(calibration, TOLERANCE if tolerance is None else tolerance)
        self.program = self._program(graph)
        self.plan = self.program.plan
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
        native_symbolic = self.symbols and any(p.target == "native" for p in self.plan.partitions)
        if report is not None:
            report.backend = self.plan.summary() + (
                f"; native partitions are set up for each new set of input sizes on first use, "
                f"without compiling (the last {self.size_cache} kept)" if native_symbolic else "") + (
                f"; a call whose inputs hold NaN or an infinity runs on PyTorch kernels (oneDNN's "
                f"ReLU and Clip, here {len(self.plan.nan_clamping)} node(s), give 0 for NaN)"
                if self.plan.nan_clamping else "")
            report.precision = self._precision_report(feeds, reference)
            report.onnx_runtime = onnx_runtime_ops(graph)

    def _guard(self, calibration: Any, tolerance: float) -> tuple[dict, dict]:
        """Run the precision guard on the calibration inputs (of the graph specialised to their
        sizes); the inputs and the fp32 outputs on them."""
        feeds = calibration_feeds(self.graph, calibration)
        graph = self.graph
        if symbolic_dims(graph):
            graph = specialise(graph, self._check_symbolic_dims(
                [self._check_input(v, feeds[v.name]) for v in graph.inputs]))
        plan = lower(graph, self.backend, self.native_unavailable, self.precision.compute)
        values = propagate(graph, feeds)
        self.guard = guard(graph, plan, values, tolerance, "random" if calibration is None else "given")
        return feeds, {v.name: values[v] for v in graph.outputs}

    def _precision_report(self, feeds: dict | None, reference: dict | None) -> dict:
        """What computed in which precision, what the guard kept in fp32, the end-to-end error."""
        p = self.precision
        out = {"requested": p.requested, "compute": p.compute, "note": p.note,
               "nodes": {n.name: d.precision for n, d in self.plan.decisions.items()}}
        if self.guard is not None:
            g = self.guard
            outs = self.run(feeds)
            planned = g.precisions()   # of the graph specialised to the calibration sizes
            out.update(nodes={n: planned.get(n, "fp32") for n in out["nodes"]},
                       tolerance=g.tolerance, calibration=g.calibration,
                       checked=[vars(c) for c in g.checked],
                       end_to_end={k: output_error(outs[k], r) for k, r in reference.items()})
        return out

    def _program(self, graph: Graph) -> Program:
        kept = self.guard.kept if self.guard is not None else frozenset()
        plan = lower(graph, self.backend, self.native_unavailable, self.precision.compute, kept)
        if plan.native is not None:
            return Program(graph, plan, {}, "", self.size_cache)
        # oneDNN splits a primitive's work for the thread count current when it is created, and
        # runs it on that many threads whatever the count later: the partitions are built with
        # the model's count, and the process's is given back (torch.compile checks it is kept)
        before = torch.get_num_threads()
        self._use_threads()
        try:
            partitions, code = build_partitions(
                plan, graph.name, self.size_cache, lambda *built: self._built(plan, *built))
        finally:
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)
        return Program(graph, plan, partitions, code.text(), self.size_cache)

    @staticmethod
    def _built(plan, index: int, nodes, kernels, sizes: dict[str, int]) -> None:
        """A native partition was set up for a set of sizes: the plan shows what runs its nodes
        and for which sizes."""
        plan.kernels.update(zip(nodes, kernels))
        if sizes:
            plan.sizes[index] = sizes

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
        clamp them; sizes that make an empty tensor)."""
        tensors = [self._check_input(v, a) for v, a in zip(self.graph.inputs, self._bind((), dict(inputs)))]
        sizes = self._check_symbolic_dims(tensors)
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

    def _execute(self, arrays: list[Array]) -> tuple[list[Array], bool]:
        sizes = self._plain_sizes(arrays)
        if sizes is not None:
            outs = self._one_call(arrays, sizes)
            if outs is not None:
                return list(outs), False
            tensors, as_numpy, program = arrays, False, self.program
        else:
            as_numpy = not any(isinstance(a, torch.Tensor) for x in arrays
                               for a in (x if isinstance(x, (list, tuple)) else [x]))
            tensors = [self._check_input(v, a) for v, a in zip(self.graph.inputs, arrays)]
            program = self.program
            sizes = self._check_symbolic_dims(tensors)
        sizes = sizes or None
        if sizes:
            self._check_sizes(sizes)
        if (program.plan.nan_clamping and not program.all_finite(tensors)) or \
                (sizes and not self._fits(program, sizes)):
            program = self._exact(program)
        self._use_threads()
        own_cpus = None if program.runtime is None else affinity.hold_caller(
            affinity.pin_workers(program.runtime, torch.get_num_threads()))
        try:
            try:
                outs = self._run(program, tensors, sizes)
            except SizesOutOfReach:   # a size only the run knows (a count NonZero made) is 0
                program = self._exact(program)
                outs = self._run(program, tensors, sizes)
        finally:
            if own_cpus is not None:
                os.sched_setaffinity(0, own_cpus)
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
        """Plain inputs to a program that is one native partition: one C call that also checks
        the inputs for NaN and holds the caller's CPU (the same work from Python cost ~70 µs,
        its code out of cache after the kernels); None where the program is not such a one, is
        being profiled, an input holds NaN or an infinity, or a size is below 1 (the general path
        takes those)."""
        program = self.program
        whole = program.whole
        if whole is None or program.step_times is not None or (sizes and min(sizes.values()) < 1):
            return None
        if sizes:
            self._check_sizes(sizes)
        built = whole.for_sizes(tuple(sizes[s] for s in whole.symbols)) if whole.symbols else whole.last
        self._use_threads()
        cpus = affinity.pin_workers(whole.library, torch.get_num_threads())
        return built.run_checked(tensors, bool(program.plan.nan_clamping), -1 if cpus is None else cpus[0])

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

    def _check_input(self, v: Value, a: Array) -> torch.Tensor | list[torch.Tensor]:
        if v.sequence is not None:   # a list of arrays, each checked as its elements are typed
            if not isinstance(a, (list, tuple)):
                raise InputError(f"input {v.name!r}: expected a sequence (a list of arrays, "
                                 f"{v.type_str()}), got {type(a).__name__}")
            element = v.sequence
            return [self._check_input(Value(f"{v.name}[{k}]", element.shape, element.dtype), e)
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

    def _check_symbolic_dims(self, tensors: list[torch.Tensor]) -> dict[str, int]:
        """The size of each symbolic dim; an error where two inputs disagree on one."""
        seen: dict[str, tuple[int, str]] = {}
        for v, t in zip(self.graph.inputs, tensors):
            for axis, d in enumerate(v.shape or ()):
                if isinstance(d, str):
                    size = t.shape[axis]
                    if d in seen and seen[d][0] != size:
                        raise InputError(f"input {v.name!r}: dimension {axis} ({d!r}) is {size}, "
                                         f"but {seen[d][1]} gave {d!r} = {seen[d][0]}")
                    seen.setdefault(d, (size, repr(v.name)))
        return {d: size for d, (size, _) in seen.items()}


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
