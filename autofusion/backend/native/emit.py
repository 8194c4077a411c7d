"""The C++ emitter: a plan's native partitions → one source file of straight-line calls.

Each partition becomes one function `partition_K(Partition& p)`: first its values (inputs and
outputs by slot, constants by slot, intermediates with the plan's layout and lifetime), then one
block per node, in plan order, naming the node and calling the runtime (runtime/native.h). What
each node's call says comes from its implementation's emitter (impls.py); everything a call
needs that is not in the IR (a weight transposed and scaled, a temporary) is declared here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ...ir import Node, Value
from ...ir.scalar import c_float
from ..lower import Partition, Plan


def dims(xs) -> str:
    return "{" + ", ".join(str(int(x)) for x in xs) + "}"


def c_string(s: str) -> str:
    return json.dumps(s)   # a JSON string literal is a valid C++ one for printable text


@dataclass
class NativeSource:
    """What the Python side binds to a built partition: its entry in the library's table,
    constant arrays by slot, inputs and outputs by slot."""
    entry: int = 0
    constants: list[np.ndarray] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)


class PartitionSource:
    """One native partition being written: its value ids, declarations and steps."""

    def __init__(self, part: Partition, plan: Plan):
        self.part, self.plan = part, plan
        self.ids: dict[int, int] = {}       # id(Value) → value id in the C++
        self.definitions: list[str] = []    # functions the steps call (generated kernels)
        self.decls: list[str] = []
        self.steps: list[str] = []
        self.bound = NativeSource(inputs=list(part.inputs), outputs=list(part.outputs))
        self.step, self.count = -1, 0
        for slot, v in enumerate(part.inputs):
            self.decls.append(f"  p.input({self._new(v)}, {slot}, {dims(v.shape)});   // {v.name}")
        for slot, v in enumerate(part.outputs):
            self.decls.append(f"  p.output({self._new(v)}, {slot}, {dims(v.shape)});   // {v.name}")
        for v, vp in part.values.items():
            layout = "Layout::Plain" if vp.layout == "plain" else "Layout::Any"
            extra = f", {self.bool(vp.bf16)}, {dims(vp.order)}" if vp.order else \
                (", true" if vp.bf16 else "")
            self.decls.append(f"  p.value({self._new(v)}, {dims(v.shape)}, {vp.first}, {vp.last}, "
                              f"{layout}{extra});   // {v.name}")

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

    def out(self, node: Node, j: int = 0) -> int:
        """The id of output j; one nobody reads gets a temporary of this step to be written to."""
        v = node.outputs[j]
        if id(v) not in self.ids:
            k = self.temp(list(v.shape), plain=True)
            self.ids[id(v)] = k
        return self.ids[id(v)]

    def const(self, data: np.ndarray, name: str, key: Value | None = None) -> int:
        """A constant copied into the partition at load: a model constant or one prepared here."""
        slot = len(self.bound.constants)
        self.bound.constants.append(np.ascontiguousarray(data, dtype=np.float32))
        k = self._new(key)
        shape = data.shape or (1,)
        self.decls.append(f"  p.constant({k}, {slot}, {dims(shape)});   // {name}")
        return k

    def temp(self, shape: list[int], plain: bool = False, bf16: bool = False) -> int:
        """A value that lives within the current step only: dense or in the layout its writer
        picks; `bf16`: only a product in bf16 reads it."""
        k = self._new(None)
        layout = "Layout::Plain" if plain else "Layout::Any"
        self.decls.append(f"  p.value({k}, {dims(shape)}, {self.step}, {self.step}, {layout}"
                          f"{', true' if bf16 else ''});   // temporary of step {self.step}")
        return k

    def define(self, write) -> str:
        """A function at file scope for the steps to call: `write(name)` gives its source."""
        name = f"kernel_{self.part.index}_{len(self.definitions)}"
        self.definitions.append(write(name))
        return name

    def in_place(self, node: Node, src: Value | None = None) -> str:
        vp = self.part.values.get(node.outputs[0])
        ok = vp is not None and vp.in_place_of is not None and (src is None or vp.in_place_of is src)
        return "true" if ok else "false"

    def acts(self, acts: list[tuple[str, float, float]]) -> str:
        return "{" + ", ".join(f"{{Alg::{a}, {c_float(x)}, {c_float(y)}}}" for a, x, y in acts) + "}"

    @staticmethod
    def float(x: float) -> str:
        return c_float(x)

    @staticmethod
    def bool(x: bool) -> str:
        return "true" if x else "false"

    @staticmethod
    def call(method: str, *args) -> str:
        return f"  p.{method}({', '.join(str(a) for a in args)});"

    # ---- the whole function --------------------------------------------------------------------
    def emit(self) -> str:
        for step, n in enumerate(self.part.nodes):
            self.step = step
            impl = self.plan.decisions[n].impl
            bf16 = ", Precision::BF16" if self.plan.decisions[n].precision == "bf16" else ""
            self.steps.append(f"  p.node({c_string(n.name)}{bf16});   // step {step}: {n.op}")
            self.steps.append(impl.emit(n, self))
        k = self.part.index
        head = (f"// partition {k}: {len(self.part.nodes)} node(s); inputs "
                f"{', '.join(v.name for v in self.part.inputs) or '-'}; outputs "
                f"{', '.join(v.name for v in self.part.outputs)}")
        return "\n\n".join([*self.definitions, "\n".join(
            [head, f"static void partition_{k}(Partition& p) {{", *self.decls, *self.steps, "}"])])


def emit_model(plan: Plan, model: str) -> tuple[str, dict[int, NativeSource]]:
    """The C++ source of every native partition of a plan, and what each binds by slot."""
    bodies, bound = [], {}
    for part in plan.partitions:
        if part.target != "native":
            continue
        src = PartitionSource(part, plan)
        bodies.append(src.emit())
        src.bound.entry = len(bound)
        bound[part.index] = src.bound
    names = ", ".join(f"partition_{k}" for k in bound)
    source = "\n".join([f"// autofusion: native partitions of {c_string(model)[1:-1]}, generated",
                        '#include "native.h"', '#include "scalar.h"', "", "using namespace af;", "",
                        "\n\n".join(bodies), "", f"AF_PARTITIONS({names})", ""])
    return source, bound
