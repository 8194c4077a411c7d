"""Implementations: every way an op can run, one registry for all targets.

An implementation has a name (shown in the plan), a target ("torch": a PyTorch kernel called
from the generated Python; "native": a step of a generated C++ partition over oneDNN), a check
that says why it cannot run a node (None when it can), and a cost in seconds. A torch
implementation carries a kernel builder; a native one carries a C++ emitter. Lowering
(lower.py) asks every implementation of a node's op, keeps the cheapest that accepts it, and
records the reasons of the others.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import KernelBuildError
from ..fusion.cost import node_roofline
from ..ir import Node, Value

Check = Callable[[Node], "str | None"]
TARGETS = ("torch", "native")

# What one call costs on top of its roofline time: a PyTorch op from Python (dispatch, output
# allocation) and a oneDNN primitive inside a native partition (measured on this project's hosts).
LAUNCH_S = {"torch": 12e-6, "native": 1e-6}


def accepts(node: Node) -> str | None:
    return None


@dataclass(frozen=True)
class Impl:
    name: str
    target: str
    check: Check = accepts
    build: Any = None           # torch: KernelBuilder (node → callable)
    emit: Any = None            # native: Emitter (see native/emit.py)
    plain_inputs: frozenset[int] | str = field(default_factory=frozenset)   # native: inputs read dense ("all")
    tensor_inputs: tuple[int, ...] | None = None   # the inputs read at run time (None: all)
    view: bool = False          # native: the outputs may be views of the input's bytes
    overwrites: Any = None      # native: node → the input it may write its output over, if any
    reduced: bool = False       # native: computes in bf16 where the plan says (convs, GEMMs)
    reorders_output: bool = False   # native: writes its output with its axes in the plan's order
    estimate: Any = None        # node → seconds, where it is not one call over the node's bytes
    doc: str = ""

    def cost(self, node: Node) -> float:
        if self.estimate is not None:
            return self.estimate(node)
        return LAUNCH_S[self.target] + node_roofline(node)

    def reads_plain(self, i: int) -> bool:
        return self.plain_inputs == "all" or i in self.plain_inputs

    def reads(self, node: Node) -> list[Value]:
        """The node's inputs this implementation reads at run time."""
        picked = range(len(node.inputs)) if self.tensor_inputs is None else self.tensor_inputs
        return [node.inputs[i] for i in picked if i < len(node.inputs) and node.inputs[i] is not None]


IMPLEMENTATIONS: dict[str, list[Impl]] = {}


def register(op: str, impl: Impl) -> Impl:
    if impl.target not in TARGETS:
        raise ValueError(f"{impl.name}: unknown target {impl.target!r}")
    impls = IMPLEMENTATIONS.setdefault(op, [])
    if any(i.name == impl.name for i in impls):
        raise ValueError(f"{op} already has an implementation named {impl.name!r}")
    impls.append(impl)
    return impl


def implementations(op: str, target: str | None = None) -> list[Impl]:
    return [i for i in IMPLEMENTATIONS.get(op, ()) if target is None or i.target == target]


def torch_impl(node: Node) -> Impl:
    """The first torch implementation that accepts the node (constant folding runs it)."""
    for impl in implementations(node.op, "torch"):
        if impl.check(node) is None:
            return impl
    raise KernelBuildError(f"no PyTorch kernel accepts {node.describe()}")
