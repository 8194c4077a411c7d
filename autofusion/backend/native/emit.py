"""The emitter: a plan's native partitions → one Program each (program.py), and the C++ of the
generated kernels they call.

Each partition's program first declares its values (inputs and outputs by slot, constants by
slot, intermediates with the plan's layout and lifetime), then has one `node` call per node, in
plan order, followed by the calls its implementation's emitter makes (impls.py) — what the
runtime's Partition methods take (runtime/native.h). Everything a call needs that is not in the
IR (a weight transposed and scaled, a temporary) is declared here. Generated kernels, from every
partition of a model, go into one C++ source (its only C++) and one shared library.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir import DType, Node, Value
from ...ir.scalar import c_float
from ..lower import Partition, Plan
from .program import VALUE_TYPES, Acts, Call, Dims, Ids, Kernel, Name, Program

__all__ = ["NativeCode", "PartitionSource", "c_float", "dims", "emit_model"]


def dims(xs) -> Dims:
    """Sizes for a call: ints, or symbolic dims the program evaluates per set of sizes."""
    if any(x is None for x in xs):
        raise AssertionError(f"dims {list(xs)}: an unknown dim cannot go into a native program")
    return Dims(int(x) if isinstance(x, (int, np.integer)) else x for x in xs)


@dataclass
class NativeCode:
    """A plan's native code: a program per native partition (by the partition's index) and the
    C++ source of the generated kernels they call ("" when there are none)."""
    programs: dict[int, Program]
    kernels: str
    kernel_names: list[str]

    def text(self) -> str:
        """Every program as the calls it makes, then the kernels' C++: what `native_source` shows."""
        return "\n\n".join([*(p.text() for p in self.programs.values()), *([self.kernels] if self.kernels else [])])


class PartitionSource:
    """One native partition being written: its value ids, declarations and steps."""

    def __init__(self, part: Partition, plan: Plan, kernels: list[tuple[str, str]]):
        self.part, self.plan = part, plan
        self.kernels = kernels                # (name, source) of the model's generated kernels
        self.ids: dict[int, int] = {}         # id(Value) → value id in the program
        self.decls: list[Call] = []
        self.steps: list[Call] = []
        self.program = Program(part.index, "", inputs=list(part.inputs), outputs=list(part.outputs))
        self.step, self.count, self.defined = -1, 0, 0
        for slot, v in enumerate(part.inputs):
            self.decls.append(Call("input", (self._new(v), slot, dims(v.shape)), v.name))
            self._typed(v)
        for slot, v in enumerate(part.outputs):
            self.decls.append(Call("output", (self._new(v), slot, dims(v.shape)), v.name))
            self._typed(v)
        for v, vp in part.values.items():
            layout = Name("Layout::Plain" if vp.layout == "plain" else "Layout::Any")
            extra = (vp.bf16, dims(vp.order)) if vp.order else (True,) if vp.bf16 else ()
            self.decls.append(Call("value", (self._new(v), dims(v.shape), vp.first, vp.last, layout, *extra),
                                   v.name))
            self._typed(v)

    def _typed(self, v: Value) -> None:
        """A value of integers is declared so (the runtime's values are f32 unless told)."""
        if v.dtype in VALUE_TYPES:
            self.decls.append(Call("typed", (self.ids[id(v)], Name(f"Type::{VALUE_TYPES[v.dtype]}"))))

    def _new(self, v: Value | None) -> int:
        k, self.count = self.count, self.count + 1
        if v is not None:
            self.ids[id(v)] = k
        return k

    # ---- what emitters call ------------------------------------------------------------------
    def ref(self, v: Value | None) -> int:
        """The id of a value a step reads (-1 for an omitted input); a constant is declared on
        first use."""
        if v is None:
            return -1
        if id(v) in self.ids:
            return self.ids[id(v)]
        if v.const is None:
            raise AssertionError(f"value {v.name!r} is read before the partition declares it")
        return self.const(v.const, v.name, key=v)

    def order(self, v: Value | None) -> tuple[int, ...] | None:
        """The axis order the plan stores an inside value in (None: as it is)."""
        vp = self.part.values.get(v) if v is not None else None
        return vp.order if vp is not None else None

    def assume_equal(self, a, b) -> None:
        """Two symbolic dims the step takes to be one size: a set of sizes where they differ is not
        built, and the call runs on PyTorch's kernels (program.py out_of_reach)."""
        self.program.equal_dims.append((a, b))

    def out(self, node: Node, j: int = 0) -> int:
        """The id of output j; one nobody reads gets a temporary of this step to be written to."""
        v = node.outputs[j]
        if id(v) not in self.ids:
            k = self.temp(list(v.shape), plain=True)
            self.ids[id(v)] = k
        return self.ids[id(v)]

    def const(self, data: np.ndarray, name: str, key: Value | None = None) -> int:
        """A constant the partition reads where the program holds it: a model constant or one
        prepared here. A 2-D one given transposed (a linear layer's weight) is held as it is
        stored, its axes' order declared (the runtime's reorder transposes it, once)."""
        slot = len(self.program.constants)
        order = ()
        if data.ndim == 2 and not data.flags.c_contiguous and data.T.flags.c_contiguous and data.dtype == np.float32:
            held, order = data.T, (1, 0)
        else:
            held = np.ascontiguousarray(data, dtype=np.float32)
        self.program.constants.append(held)
        k = self._new(key)
        self.decls.append(Call("constant", (k, slot, dims(data.shape or (1,)), *((dims(order),) if order else ())),
                               name))
        return k

    def temp(self, shape: list, plain: bool = False, bf16: bool = False, dtype: DType | None = None) -> int:
        """A value that lives within the current step only: dense or in the layout its writer
        picks; `bf16`: only a product in bf16 reads it; `dtype`: integers (VALUE_TYPES)."""
        k = self._new(None)
        layout = Name("Layout::Plain" if plain else "Layout::Any")
        self.decls.append(Call("value", (k, dims(shape), self.step, self.step, layout, *((True,) if bf16 else ())),
                               f"temporary of step {self.step}"))
        if dtype is not None:
            self.decls.append(Call("typed", (k, Name(f"Type::{VALUE_TYPES[dtype]}"))))
        return k

    def define(self, write) -> Kernel:
        """A generated kernel for the steps to call: `write(name)` gives its C++ source."""
        name = f"kernel_{self.part.index}_{self.defined}"
        self.defined += 1
        self.kernels.append((name, write(name)))
        return Kernel(len(self.kernels) - 1, name)

    def in_place(self, node: Node, src: Value | None = None) -> bool:
        vp = self.part.values.get(node.outputs[0])
        return vp is not None and vp.in_place_of is not None and (src is None or vp.in_place_of is src)

    @staticmethod
    def acts(acts: list[tuple[str, float, float]]) -> Acts:
        return Acts((a, float(x), float(y)) for a, x, y in acts)

    @staticmethod
    def ids_of(ids) -> Ids:
        return Ids(int(i) for i in ids)

    @staticmethod
    def float(x: float) -> float:
        return float(x)

    @staticmethod
    def bool(x: bool) -> bool:
        return bool(x)

    @staticmethod
    def name(text: str) -> Name:
        return Name(text)

    def call(self, method: str, *args) -> None:
        self.steps.append(Call(method, tuple(args)))

    # ---- the whole program ---------------------------------------------------------------------
    def emit(self) -> Program:
        for step, n in enumerate(self.part.nodes):
            self.step = step
            precision = (Name("Precision::BF16"),) if self.plan.decisions[n].precision == "bf16" else ()
            self.steps.append(Call("node", (Name(n.name), *precision), f"step {step}: {n.op}"))
            self.plan.decisions[n].impl.emit(n, self)
        part, program = self.part, self.program
        program.head = (f"partition {part.index}: {len(part.nodes)} node(s); inputs "
                        f"{', '.join(v.name for v in part.inputs) or '-'}; outputs "
                        f"{', '.join(v.name for v in part.outputs)}")
        program.calls = self.decls + self.steps
        program.steps = len(part.nodes)
        return program


KERNEL_HEADER = ["// autofusion: generated kernels", "#include <cstdint>", '#include "kernel.h"',
                 '#include "scalar.h"', "", "using namespace af;", ""]


def kernels_source(kernels: list[tuple[str, str]], title: str) -> str:
    """One C++ source of generated kernels and their table, `af_kernels` (runtime/kernel.h)."""
    if not kernels:
        return ""
    return "\n".join([f"// autofusion: generated kernels of {title}", *KERNEL_HEADER[1:],
                      "\n\n".join(src for _, src in kernels), "",
                      f"AF_KERNELS({', '.join(n for n, _ in kernels)})", ""])


def emit_model(plan: Plan, model: str) -> NativeCode:
    """Every native partition of a plan as a program, and its generated kernels' C++."""
    kernels: list[tuple[str, str]] = []
    programs = {part.index: PartitionSource(part, plan, kernels).emit()
                for part in plan.partitions if part.target == "native"}
    return NativeCode(programs, kernels_source(kernels, model), [n for n, _ in kernels])
