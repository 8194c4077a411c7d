"""Run a graph: generated straight-line Python over bound kernels and constants.

Each node becomes one line `v7 = k3(v2, c1)` of a generated function; kernels are built once per
node at compile time (attributes parsed, constant inputs read) and constants are converted to
torch tensors once. Values are dropped (`del`) right after their last use so memory follows the
live set. No per-op lookup happens at call time. When a kernel raises, the traceback's line in
the generated code tells which node failed, and the error names it.
"""
from __future__ import annotations

import linecache
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..errors import InputError, KernelBuildError, NodeExecutionError, UnsupportedOpError
from ..ir import Graph, Node, Value
from .torch_cpu import KERNELS, TORCH_DTYPES, to_torch

Array = np.ndarray | torch.Tensor


def check_supported(graph: Graph) -> None:
    """Raise one UnsupportedOpError listing every node without a kernel."""
    missing = [(n.op, n.name) for n in graph.nodes if n.op not in KERNELS]
    if missing:
        raise UnsupportedOpError(missing)


class Program:
    """The generated function for one graph, with its source and line → node map."""

    def __init__(self, graph: Graph):
        check_supported(graph)
        self.graph = graph
        self.source, namespace, self.line_nodes = self._generate(graph)
        filename = f"<autofusion:{graph.name}:{id(self)}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True), filename)
        exec(compile(self.source, filename, "exec"), namespace)
        self.constant_storages = {_storage(t) for t in namespace.values() if isinstance(t, torch.Tensor)}
        self.fn: Callable[..., tuple] = namespace["run"]
        self.filename = filename

    @staticmethod
    def _generate(graph: Graph):
        names: dict[int, str] = {}
        namespace: dict[str, Any] = {}
        for i, v in enumerate(graph.inputs):
            names[id(v)] = f"in{i}"
        for i, v in enumerate(graph.constants.values()):
            names[id(v)] = f"c{i}"
        nodes = graph.nodes
        last_use: dict[int, int] = {}
        for j, n in enumerate(nodes):
            for v in n.inputs:
                if v is not None:
                    last_use[id(v)] = j
        keep = {id(v) for v in graph.outputs}
        used_consts = set()

        lines = [f"def run({', '.join(names[id(v)] for v in graph.inputs)}):"]
        line_nodes: dict[int, Node] = {}
        counter = 0
        for j, n in enumerate(nodes):
            try:
                fn = namespace[f"k{j}"] = KERNELS[n.op](n)
            except (KernelBuildError, NotImplementedError) as e:
                raise KernelBuildError(f"cannot build a kernel for {n.describe()}: {e}") from None
            skip = getattr(fn, "baked_inputs", ())   # constants the kernel captured itself
            outs = []
            for v in n.outputs:
                if v.uses or id(v) in keep:
                    names[id(v)] = f"v{counter}"
                    counter += 1
                    outs.append(names[id(v)])
                else:
                    outs.append("_")
            args = []
            for i, v in enumerate(n.inputs):
                if i in skip:
                    continue
                if v is None:
                    args.append("None")
                    continue
                if v.const is not None:
                    used_consts.add(id(v))
                args.append(names[id(v)])
            # a multi-output kernel returns a tuple; unpacking checks its length
            lhs = outs[0] if len(outs) == 1 else ", ".join(outs)
            lines.append(f"    {lhs} = k{j}({', '.join(args)})")
            line_nodes[len(lines)] = n
            dead = sorted({names[id(v)] for v in n.inputs if v is not None and v.const is None
                           and last_use.get(id(v)) == j and id(v) not in keep
                           and v.producer is not None})
            if dead:
                lines.append(f"    del {', '.join(dead)}")
        # an output that is an input or a constant is copied, so callers never alias them
        results = []
        for v in graph.outputs:
            if v.const is not None:
                used_consts.add(id(v))
            results.append(names[id(v)] + (".clone()" if v.producer is None else ""))
        lines.append(f"    return ({''.join(r + ', ' for r in results)})")
        for v in graph.constants.values():
            if id(v) in used_consts:
                namespace[names[id(v)]] = to_torch(v.const, v.dtype, v.name)
        return "\n".join(lines) + "\n", namespace, line_nodes

    def __call__(self, *args: torch.Tensor) -> tuple:
        try:
            return self.fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised with the node named
            node = self._failing_node(e)
            if node is None:
                raise
            raise NodeExecutionError(node.describe(), e) from e

    def _failing_node(self, e: BaseException) -> Node | None:
        tb = e.__traceback__
        node = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                node = self.line_nodes.get(tb.tb_lineno)
            tb = tb.tb_next
        return node


class CompiledModel:
    """A compiled graph, callable with numpy arrays or torch tensors, by position or by name.

    Returns the same kind it was given: one array for a one-output model, else a tuple in the
    graph's output order. `run(dict)` returns a dict by output name.
    """

    def __init__(self, graph: Graph, report: Any = None):
        self.graph = graph
        self.report = report
        self.program = Program(graph)
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]

    @property
    def source(self) -> str:
        """The generated Python that runs the graph."""
        return self.program.source

    def __call__(self, *args: Array, **kwargs: Array):
        outs, as_numpy = self._execute(self._bind(args, kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        outs, _ = self._execute(self._bind((), dict(inputs)))
        return dict(zip(self.output_names, outs))

    def _bind(self, args: Sequence[Array], kwargs: Mapping[str, Array]) -> list[Array]:
        names = self.input_names
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
        as_numpy = not any(isinstance(a, torch.Tensor) for a in arrays)
        tensors = [self._check_input(v, a) for v, a in zip(self.graph.inputs, arrays)]
        self._check_symbolic_dims(tensors)
        with torch.inference_mode():
            outs = self.program(*tensors)
        # an output sharing memory with a caller's input or a constant (Identity, a reshape or
        # slice view) is returned as a copy, so writing to it cannot change either
        shared = self.program.constant_storages | {_storage(t) for t in tensors}
        outs = [o.clone() if _storage(o) in shared else o for o in outs]
        if as_numpy:
            return [_to_numpy(t) for t in outs], True
        return list(outs), False

    def _check_input(self, v: Value, a: Array) -> torch.Tensor:
        if isinstance(a, torch.Tensor):
            t = a
        else:
            a = np.asarray(a)
            if a.dtype == np.object_:
                raise InputError(f"input {v.name!r}: object/string arrays are not supported")
            t = torch.from_numpy(np.ascontiguousarray(a)) if a.ndim else torch.tensor(a)
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

    def _check_symbolic_dims(self, tensors: list[torch.Tensor]) -> None:
        seen: dict[str, tuple[int, str]] = {}
        for v, t in zip(self.graph.inputs, tensors):
            for axis, d in enumerate(v.shape or ()):
                if isinstance(d, str):
                    size = t.shape[axis]
                    if d in seen and seen[d][0] != size:
                        raise InputError(f"input {v.name!r}: dimension {axis} ({d!r}) is {size}, "
                                         f"but {seen[d][1]} gave {d!r} = {seen[d][0]}")
                    seen.setdefault(d, (size, repr(v.name)))


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.detach().resolve_conj().resolve_neg().numpy()


def evaluate_node(node: Node, arrays) -> list[np.ndarray]:
    """Run one node on numpy inputs with its PyTorch kernel (used for constant folding)."""
    fn = KERNELS[node.op](node)
    skip = getattr(fn, "baked_inputs", ())
    args = [None if a is None else to_torch(np.asarray(a), v.dtype if v is not None else None)
            for i, (a, v) in enumerate(zip(arrays, node.inputs)) if i not in skip]
    with torch.inference_mode():
        out = fn(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [_to_numpy(t) for t in outs]
