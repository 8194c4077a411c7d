"""Run a graph: generated straight-line Python over bound kernels, native partitions and constants.

Each torch step of the plan becomes one line `v7 = k3(v2, c1)` of a generated function, each
native partition one line `v8, v9, = p4(_sizes, v7, in0)` (one C call for all its nodes, set up
for the call's symbolic sizes, `_sizes`: a dict, None for a static model). Kernels are
built once per node at compile time (attributes parsed, constant inputs read) and constants are
converted to torch tensors once. Values are dropped (`del`) right after their last use so memory follows the
live set. No per-op lookup happens at call time. When a kernel raises, the traceback's line in
the generated code tells which node failed, and the error names it.

A size the inputs do not give but a PyTorch step's result shows (a Resize to computed sizes) is
added to `_sizes` on the line after that step, for the native partitions after it
(lower.run_time_sizes). A native partition whose sizes make an empty tensor runs its nodes on
PyTorch's kernels for that call (_or_on_pytorch). A kernel that can write into its first input
(`into_input`: ScatterElements) does so where that input is a tensor a kernel made afresh
(`fresh`: ConstantOfShape, a scatter) that nothing else reads, returns or memoizes.

Profiling (profiling.py) asks for a second function from the same lines, made only then, with a
clock read around each step; the plain function stays as it is, so a call that is not profiled
costs one attribute test more.
"""
from __future__ import annotations

import linecache
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch

from ..errors import KernelBuildError, NodeExecutionError, UnsupportedOpError
from ..ir import Graph, Node
from ..ir.dtypes import tensor_to_numpy
from ..ir.dims import shape_value
from ..ir.symbolic import evaluate, symbols
from .impl import torch_impl
from .lower import Plan, run_time_sizes, sizes_derived
from .native.library import SizesOutOfReach
from .torch_cpu import KERNELS, to_torch


def check_supported(graph: Graph) -> None:
    """Raise one UnsupportedOpError listing every node without a kernel."""
    missing = [(n.op, n.name) for n in graph.nodes if n.op not in KERNELS]
    if missing:
        raise UnsupportedOpError(missing)


@dataclass
class Step:
    """One step of the generated function: the line that calls it and what it is the last to read
    (deleted after it)."""
    call: str
    dead: list[str]
    node: Node | None    # the node a failure on the line names (None for a native partition)
    sizes_only: bool = False   # its results depend on the call's sizes alone (memoized per set)
    learns: str = ""     # a line after it adding to _sizes what its results show (lower.run_time_sizes)


class SizesMemo:
    """The values a program computes from its inputs' sizes alone (a detector's anchor grid, a
    causal mask, the shape arithmetic of a dynamic-axes export), kept for the most recent sets
    of sizes: a call with sizes seen before skips those steps. A set whose values exceed
    MAX_BYTES is not kept."""
    MAX_BYTES = 64 << 20

    def __init__(self, keep: int):
        self.keep = keep
        self.kept: OrderedDict[tuple, tuple] = OrderedDict()

    def get(self, sizes: Mapping[str, int] | None) -> tuple | None:
        key = tuple(sizes.items()) if sizes else ()
        found = self.kept.get(key)
        if found is not None:
            try:
                self.kept.move_to_end(key)
            except KeyError:   # another thread's call let it go meanwhile
                pass
        return found

    def put(self, sizes: Mapping[str, int] | None, values: tuple) -> tuple:
        if sum(t.nbytes for t in tensors_of(list(values)) if isinstance(t, torch.Tensor)) <= self.MAX_BYTES:
            self.kept[tuple(sizes.items()) if sizes else ()] = values
            while len(self.kept) > self.keep:
                try:
                    self.kept.popitem(last=False)
                except KeyError:
                    break
        return values


@dataclass
class StepTimes:
    """What a profiled Program counted since start_profile: per step (plan.partitions' order),
    the seconds its line took in all calls; per native partition (by index), the seconds of
    each of its steps (its nodes in order) inside the C call."""
    calls: int
    steps: list[float]
    native: dict[int, list[float]]


def _same(values: list, others: list) -> bool:
    return len(values) == len(others) and all(a is b for a, b in zip(values, others))


def tensors_of(values: list) -> list[torch.Tensor]:
    """The tensors among run-time values, each sequence's elements included."""
    return [t for x in values for t in (x if isinstance(x, list) else [x])]


class Program:
    """The generated function for one graph and its plan: one line per torch node, one per
    native partition; with its source and the line → node map for errors."""

    def __init__(self, graph: Graph, plan: Plan, native: Mapping[int, Callable] = {},
                 native_source: str = "", sizes_memo: int = 0):
        """sizes_memo: the sets of sizes to keep the values computed from sizes alone for (0:
        none; a call must then give `sizes` for every symbolic dim of the graph's inputs). Every
        node has a kernel (check_supported: the compile's check step)."""
        self.graph, self.plan, self.native_source = graph, plan, native_source
        self.native = dict(native)
        self.args, self.steps, self.results, self.namespace, self.memoized = \
            self._generate(graph, plan, native, sizes_memo)
        self.constant_storages = {storage(t) for t in self.namespace.values()
                                  if isinstance(t, torch.Tensor)}
        self._line_nodes: dict[str, dict[int, Node | None]] = {}   # per generated function
        self.source, self.fn = self._define("run", profiled=False)
        self.profiled_fn: Callable[..., tuple] | None = None   # made by the first start_profile
        self.step_times: list[float] | None = None             # counting while not None
        self.profiled_calls = 0
        self.exact: Program | None = None   # on PyTorch alone, for NaN inputs (model.py)
        # no torch kernel among the steps: a call needs no inference-mode guard (model.py)
        self.torch_free = all(part.target == "native" for part in plan.partitions)
        # every output written by a native partition, into a tensor the call made: none can share
        # memory with an input or a constant, so a call needs no check (model.py)
        made = {id(v) for part in plan.partitions if part.target == "native" for v in part.outputs}
        self.outputs_fresh = all(id(v) in made for v in graph.outputs)
        # whose runtime checks inputs for NaN (all_finite) and pins the OpenMP workers (model.py):
        # any partition's library holds it
        self.runtime = next(iter(self.native.values())).library if self.native else None
        # the one native partition that is the whole program, reading graph inputs (all, or
        # those a branch taken left) and writing each graph output once: a call runs it alone
        # (model.py), or None. whole_inputs / whole_outputs: where its inputs are among the
        # graph's, and the graph's outputs among its (None: the same order)
        parts = plan.partitions
        inputs = {id(v): k for k, v in enumerate(graph.inputs)}
        outputs = {id(v): k for k, v in enumerate(parts[0].outputs)} if parts else {}
        self.whole = (self.native[parts[0].index] if len(parts) == 1 and parts[0].target == "native"
                      and all(id(v) in inputs for v in parts[0].inputs)
                      and len(outputs) == len(graph.outputs) and all(id(v) in outputs for v in graph.outputs)
                      else None)
        self.whole_inputs = (None if self.whole is None or _same(parts[0].inputs, graph.inputs) else
                             [inputs[id(v)] for v in parts[0].inputs])
        self.whole_outputs = (None if self.whole is None or _same(parts[0].outputs, graph.outputs) else
                              [outputs[id(v)] for v in graph.outputs])

    def _filename(self, name: str) -> str:
        model = "".join(c if c.isprintable() else "?" for c in self.graph.name)   # no NUL for compile()
        return f"<autofusion:{model}:{id(self)}:{name}>"

    def _define(self, name: str, profiled: bool) -> tuple[str, Callable[..., tuple]]:
        """The function's source from the steps, compiled into the namespace; a profiled one
        takes the list of step times first and adds each step's perf_counter time to it."""
        params = ", ".join((["_times"] if profiled else []) + ["_sizes"] + self.args)
        if profiled:
            self.namespace["_clock"] = time.perf_counter
        lines = [f"def {name}({params}):"]
        line_nodes: dict[int, Node | None] = {}

        def emit(j: int, step: Step, indent: str = "", keep: frozenset = frozenset()) -> None:
            if profiled:
                lines.append(indent + "    _t = _clock()")
            lines.append(indent + step.call)
            line_nodes[len(lines)] = step.node
            if step.learns:
                lines.append(indent + step.learns)
            if profiled:
                lines.append(indent + f"    _times[{j}] += _clock() - _t")
            dead = [name for name in step.dead if name not in keep]
            if dead:
                lines.append(indent + f"    del {', '.join(dead)}")
        if any(step.sizes_only for step in self.steps):
            # the steps computed from sizes alone first, once per set of sizes (their inputs are
            # graph inputs' shapes, constants and each other)
            kept = "".join(k + ", " for k in self.memoized)
            lines += ["    _m = _memo.get(_sizes)", "    if _m is None:"]
            for j, step in enumerate(self.steps):
                if step.sizes_only:   # (what later steps read is kept, not deleted)
                    emit(j, step, "    ", frozenset(self.memoized))
            lines.append(f"        _m = _memo.put(_sizes, ({kept}))")
            if kept:
                lines.append(f"    {kept}= _m")
        for j, step in enumerate(self.steps):
            if not step.sizes_only:
                emit(j, step)
        lines.append(self.results)
        source = "\n".join(lines) + "\n"
        filename = self._filename(name)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), self.namespace)
        self._line_nodes[filename] = line_nodes
        return source, self.namespace[name]

    @staticmethod
    def _generate(graph: Graph, plan: Plan, native: Mapping[int, Callable], sizes_memo: int):
        """The function's parameters, its steps, its return line, the namespace it runs in
        (kernels, native partitions, constants), and the names of the values computed from sizes
        alone that other steps or the results read."""
        sized = sizes_only(graph, plan) if sizes_memo else set()
        learned = _learned_sizes(graph, plan, sized)
        names: dict[int, str] = {}
        namespace: dict[str, Any] = {}
        for i, v in enumerate(graph.inputs):
            names[id(v)] = f"in{i}"
        for i, v in enumerate(graph.constants.values()):
            names[id(v)] = f"c{i}"
        # a step: (its nodes, the values it reads, the values it writes, a callable's name)
        steps = []
        for part in plan.partitions:
            if part.target == "native":
                namespace[f"p{part.index}"] = _or_on_pytorch(native[part.index], part)
                steps.append((part.nodes, part.inputs, part.outputs, f"p{part.index}", None))
            else:
                n = part.nodes[0]
                steps.append(([n], n.inputs, n.outputs, f"k{part.index}", plan.decisions[n].impl))
        last_use: dict[int, int] = {}
        for j, (_, reads, _, _, _) in enumerate(steps):
            for v in reads:
                if v is not None:
                    last_use[id(v)] = j
        keep = {id(v) for v in graph.outputs}
        used_consts = set()

        params = [names[id(v)] for v in graph.inputs]
        body: list[Step] = []
        counter = 0
        failed: list[str] = []   # every node whose kernel cannot be built, named at once
        owned = _owned_values(graph, keep)   # a kernel may write into these once they are made fresh
        fresh: set[int] = set()
        for j, (nodes, reads, writes, fn_name, impl) in enumerate(steps):
            skip = ()
            if impl is None:
                args = ["_sizes"]
            else:
                args = []
                n = nodes[0]
                try:
                    fn = namespace[fn_name] = impl.build(n)
                    skip = getattr(fn, "baked_inputs", ())   # constants the kernel captured itself
                    into = getattr(fn, "into_input", None)
                    if into is not None and reads and reads[0] is not None and id(reads[0]) in fresh:
                        namespace[fn_name] = into   # its first input is a fresh tensor that dies here
                    if getattr(fn, "fresh", False) and id(n) not in sized:   # (a memoized result lives on)
                        fresh |= {id(v) for v in writes} & owned
                except (KernelBuildError, NotImplementedError) as e:
                    failed.append(f"cannot build a kernel for {n.describe()}: {e}")
                except Exception as e:  # noqa: BLE001 - a library refusing the node's attributes
                    failed.append(f"cannot build a kernel for {n.describe()}: {type(e).__name__}: {e}")
            outs = []
            for v in writes:
                if v.uses or id(v) in keep or id(v) in learned:
                    names[id(v)] = f"v{counter}"
                    counter += 1
                    outs.append(names[id(v)])
                else:
                    outs.append("_")
            for i, v in enumerate(reads):
                if i in skip:
                    continue
                if v is None:
                    args.append("None")
                    continue
                if v.const is not None:
                    used_consts.add(id(v))
                args.append(names[id(v)])
            # a multi-output step returns a tuple; unpacking checks its length
            lhs = outs[0] if len(outs) == 1 and impl is not None else "".join(o + ", " for o in outs)
            dead = sorted({names[id(v)] for v in reads if v is not None and v.const is None
                           and last_use.get(id(v)) == j and id(v) not in keep
                           and v.producer is not None})
            learns = ", ".join(f"{symbol!r}: {names[id(v)]}.shape[{axis}]" for v in writes if id(v) in learned
                               for symbol, axis in learned[id(v)])
            body.append(Step(f"    {lhs} = {fn_name}({', '.join(args)})", dead,
                             nodes[0] if len(nodes) == 1 else None, id(nodes[0]) in sized,
                             f"    _sizes = {{**(_sizes or {{}}), {learns}}}" if learns else ""))
        if failed:
            raise KernelBuildError(failed[0] if len(failed) == 1 else
                                   f"{len(failed)} nodes have no kernel here:\n" + "\n".join(f"  {f}" for f in failed))
        # an output that is an input, a constant or a kept value is copied, so callers never
        # alias them
        made_from_sizes = {id(v) for n in graph.nodes if id(n) in sized for v in n.outputs}
        memoized = sorted({names[id(v)] for nodes, reads, *_ in steps if id(nodes[0]) not in sized for v in reads
                           if v is not None and id(v) in made_from_sizes} |
                          {names[id(v)] for v in graph.outputs if id(v) in made_from_sizes}, key=_number)
        results = []
        for v in graph.outputs:
            if v.const is not None:
                used_consts.add(id(v))
            name = names[id(v)]
            if v.producer is not None and id(v) not in made_from_sizes:
                results.append(name)
            else:   # a sequence is a list: each element copied
                results.append(f"[t.clone() for t in {name}]" if v.sequence is not None else name + ".clone()")
        for v in graph.constants.values():
            if id(v) in used_consts:
                namespace[names[id(v)]] = to_torch(v.const, v.dtype, v.name)
        if sized:
            namespace["_memo"] = SizesMemo(sizes_memo)
        return params, body, f"    return ({''.join(r + ', ' for r in results)})", namespace, memoized

    def all_finite(self, values: list) -> bool:
        """Whether every float input is free of NaN and infinity. A dense float32 one is checked
        by the native runtime's loop where the program has a native partition: a torch op's
        code is out of cache after a model's kernels ran, and two of them cost ~0.25 ms a call
        (MobileNetV3). Others by a sum, one pass with no temporary; a finite sum that overflows
        reads as non-finite, which costs only speed."""
        for t in tensors_of(values):
            if not t.is_floating_point() or not t.numel():
                continue
            if self.runtime is not None and t.dtype == torch.float32 and t.is_contiguous():
                finite = self.runtime.all_finite(t)
            else:
                finite = bool(torch.isfinite(t.sum()))
            if not finite:
                return False
        return True

    def start_profile(self) -> None:
        """Count the time of every step of the calls from now on (and of every native step)."""
        if self.profiled_fn is None:
            _, self.profiled_fn = self._define("run_profiled", profiled=True)
        for part in self.native.values():
            part.profile(True)
        self.step_times, self.profiled_calls = [0.0] * len(self.steps), 0

    def stop_profile(self) -> StepTimes:
        """Stop counting; what was counted since start_profile."""
        if self.step_times is None:
            raise RuntimeError("stop_profile without start_profile")
        native = {k: part.step_seconds() for k, part in self.native.items()}
        for part in self.native.values():
            part.profile(False)
        times, self.step_times = StepTimes(self.profiled_calls, self.step_times, native), None
        return times

    def __call__(self, *args: torch.Tensor, sizes: Mapping[str, int] | None = None) -> tuple:
        """Run on the graph's inputs; `sizes`: the call's symbolic dims (model.py), for the native
        partitions of a graph that has any."""
        try:
            if self.step_times is None:
                return self.fn(sizes, *args)
            self.profiled_calls += 1
            return self.profiled_fn(self.step_times, sizes, *args)
        except NodeExecutionError:
            raise   # a native partition names its node itself
        except Exception as e:  # noqa: BLE001 - re-raised with the node named
            node = self._failing_node(e)
            if node is None:
                raise
            raise NodeExecutionError(node.describe(), e) from e

    def _failing_node(self, e: BaseException) -> Node | None:
        tb = e.__traceback__
        node = None
        while tb is not None:
            lines = self._line_nodes.get(tb.tb_frame.f_code.co_filename)
            if lines is not None:
                node = lines.get(tb.tb_lineno)
            tb = tb.tb_next
        return node


def sizes_only(graph: Graph, plan: Plan) -> set[int]:
    """The ids of the PyTorch-run nodes whose results depend on the graph inputs' sizes alone
    (lower.sizes_derived: lowering leaves every such node to PyTorch; a Shape of an intermediate
    the cleanup could compute from the inputs reads their Shapes already: passes.cleanup
    shapes_from_inputs). Their steps run first, before the steps they do not read."""
    return {id(n) for n in sizes_derived(graph) if plan.decisions[n].impl.target == "torch"}


def _owned_values(graph: Graph, keep: set[int]) -> set[int]:
    """The values one node reads and the call does not return: where a kernel made one fresh (a
    tensor of its own, no view: `fresh` on the kernel), that reader may write into it
    (`into_input`) — no one else sees it."""
    return {id(v) for n in graph.nodes for v in n.outputs if len(v.uses) == 1 and id(v) not in keep}


def _or_on_pytorch(native: Callable, part) -> Callable:
    """The native partition's call, or, where the call's sizes are out of its reach (a count a
    NonZero made is 0: oneDNN takes no empty tensor), its nodes run on PyTorch's kernels for
    that call alone — the rest of the program stays native (a detector's FPN level with no box
    over the threshold, RetinaNet's every call with random weights)."""
    on_pytorch: list[Callable] = []

    def call(sizes, *xs):
        try:
            return native(sizes, *xs)
        except SizesOutOfReach:
            if not on_pytorch:
                on_pytorch.append(_nodes_on_pytorch(part))
            if on_pytorch[0] is None:
                raise   # the model runs the call on PyTorch's kernels (model.py)
            known = {**(sizes or {}), **dict(zip(native.symbols, native.sizes_of(sizes, xs)))}
            with torch.inference_mode():
                return on_pytorch[0](known, *xs)
    return call


def _nodes_on_pytorch(part) -> Callable | None:
    """A function of the call's sizes and the partition's inputs computing its outputs with each
    node's PyTorch kernel. What the native steps took from the plan instead of reading it (a
    reshape's target computed from Shapes, lower.needed_at_run_time) is made from the sizes;
    None where such a value is not dims (ir.dims.shape_value)."""
    steps = []
    for n in part.nodes:
        fn = torch_impl(n).build(n)
        skip = getattr(fn, "baked_inputs", ())
        steps.append((fn, [v for i, v in enumerate(n.inputs) if i not in skip], n.outputs))
    constants = {id(v): to_torch(v.const, v.dtype, v.name) for n in part.nodes for v in n.inputs
                 if v is not None and v.const is not None}
    made = {id(v) for n in part.nodes for v in n.outputs} | set(map(id, part.inputs)) | set(constants)
    held = {id(v): v for _, reads, _ in steps for v in reads if v is not None and id(v) not in made}
    if any(shape_value(v) is None or v.rank not in (0, 1) for v in held.values()):
        return None

    def run(sizes, *xs):
        values = dict(constants)
        values.update(zip(map(id, part.inputs), xs))
        for key, v in held.items():
            dims = [evaluate(d, sizes) for d in shape_value(v)]
            values[key] = torch.tensor(dims if v.rank else dims[0], dtype=torch.int64)
        for fn, reads, writes in steps:
            out = fn(*(None if v is None else values[id(v)] for v in reads))
            values.update(zip(map(id, writes), out if len(writes) > 1 else (out,)))
        return tuple(values[id(v)] for v in part.outputs)
    return run



def _learned_sizes(graph: Graph, plan: Plan, sized: set[int]) -> dict[int, list[tuple[str, int]]]:
    """Per PyTorch step result (by id), the sizes a native partition after it needs that the
    call's inputs do not give, with their axes (lower.run_time_sizes)."""
    given = {d for v in graph.inputs for d in v.shape or () if isinstance(d, str)}
    wanted = {s for part in plan.partitions if part.target == "native" for n in part.nodes
              for v in (*n.inputs, *n.outputs) if v is not None for d in v.shape or () for s in symbols(d)}
    order = [n for part in plan.partitions for n in part.nodes]
    ahead = {n for n in order if id(n) in sized}
    out: dict[int, list[tuple[str, int]]] = {}
    for symbol, (v, axis) in run_time_sizes(order, plan.decisions, ahead).items():
        if symbol in wanted and symbol not in given:
            out.setdefault(id(v), []).append((symbol, axis))
    return out


def _number(name: str) -> int:
    return int(name[1:])


def storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return tensor_to_numpy(t) if isinstance(t, torch.Tensor) else np.asarray(t)


def evaluate_node(node: Node, arrays) -> list[np.ndarray]:
    """Run one node on numpy inputs with its PyTorch kernel (used for constant folding)."""
    fn = torch_impl(node).build(node)
    skip = getattr(fn, "baked_inputs", ())
    args = [None if a is None else to_torch(np.asarray(a), v.dtype if v is not None else None)
            for i, (a, v) in enumerate(zip(arrays, node.inputs)) if i not in skip]
    with torch.inference_mode():
        out = fn(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [to_numpy(t) for t in outs]
