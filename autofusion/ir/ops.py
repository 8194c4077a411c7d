"""The op table: one entry per operator, its fusion class and its shape/dtype rule. Each entry
is registered beside its rule (shapes/ for the ONNX operators; fused_ops.py, control_flow.py,
sequences.py, torch_call.py and onnx_runtime_call.py for the IR's own), and custom operators
register the same way (custom.py).

Kernels live in per-backend tables (backend/torch_cpu/) keyed by the same names, so a new
backend adds a table and touches no op definition. Derived sets (e.g. all elementwise ops) are
computed from this table, never kept by hand.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from .dtypes import DType
from .graph import Node, Shape, op_key


class OpClass(enum.IntEnum):
    """Fusion class, ordered as in TVM: the class of a fused group is the max of its members."""
    ELEMWISE = 0     # same-shape, one output element from the same input element
    BROADCAST = 1    # elementwise with numpy broadcasting
    INJECTIVE = 2    # each output element reads one input element (reshape, transpose, gather…)
    REDUCTION = 3    # reduces along axes (softmax, reduce*, norms)
    COMPLEX = 4      # heavy op with a fusable elementwise epilogue (conv, matmul, gemm)
    OPAQUE = 5       # cannot join a fused region (shape ops, control, data-dependent shapes)


TypeRule = Callable[[Node], "list[tuple[Shape, DType | None]] | None"]


@dataclass(frozen=True)
class OpDef:
    name: str
    op_class: OpClass
    infer: TypeRule | None = None
    domain: str = ""
    commutative: bool = False
    doc: str = field(default="", compare=False)


OPS: dict[str, OpDef] = {}


def register(opdef: OpDef, *, replace: bool = False) -> OpDef:
    key = op_key(opdef.domain, opdef.name)
    if key in OPS and not replace:
        raise ValueError(f"operator {key} is already in the op table")
    OPS[key] = opdef
    return opdef


def lookup(domain: str, op_type: str) -> OpDef | None:
    return OPS.get(op_key(domain, op_type))


def ops_of_class(cls: OpClass) -> frozenset[str]:
    return frozenset(k for k, d in OPS.items() if d.op_class == cls)
