"""What the FX importer (fx_import.py) and its lowering table (aten_ops.py) share: a traced
node's values and sizes as the IR sees them, the element types, a node's bound arguments, the
refusal a lowering raises."""
from __future__ import annotations

from typing import Any

import numpy as np
import sympy
import torch
from torch import fx

from .fx_trace import UnsupportedGraphError
from ..ir import DType, symbolic
from ..ir.dtypes import dtypes_of_torch, tensor_to_numpy

INT64_MAX = 2**63 - 1


class Unmapped(Exception):
    """A lowering refuses a node; it then runs as a TorchCall, and this is the reason given."""


def dtype_of(t: torch.dtype, where: str) -> DType:
    if t not in dtypes_of_torch():
        raise UnsupportedGraphError(f"{where}: element type {t} has no IR type")
    return dtypes_of_torch()[t]


def ir_dim(d):
    """A size as an IR dim: an int, a symbol ("s0"), a size computed from symbols (s0 + 1, 2·s1,
    s0 // 2: ir/symbolic.py), or the expression's text where it is none of those."""
    if isinstance(d, int):
        return d
    expr = sym_expr(d)
    if expr.is_number:
        return int(expr)
    dim = _dim_of(expr)
    return str(expr) if dim is None else dim


def _dim_of(expr: sympy.Expr):
    """A sympy size expression as an IR dim, or None where it is not one symbolic.py computes."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return str(expr)
    args = [_dim_of(a) for a in expr.args]
    if any(a is None for a in args):
        return None
    kind = type(expr).__name__
    if isinstance(expr, sympy.Add):
        return symbolic.add(*args)
    if isinstance(expr, sympy.Mul):
        return symbolic.product(args)
    if kind in ("FloorDiv", "CeilDiv") and isinstance(args[1], int) and args[1] > 0:
        return (symbolic.floordiv if kind == "FloorDiv" else symbolic.ceildiv)(args[0], args[1])
    if isinstance(expr, (sympy.Max, sympy.Min)) or kind in ("Max", "Min"):
        return (symbolic.maximum if kind == "Max" else symbolic.minimum)(*args)
    return None


def sym_expr(d) -> sympy.Expr:
    if isinstance(d, int):
        return sympy.Integer(d)
    node = d.node
    expr = node.expr
    shape_env = getattr(node, "shape_env", None)
    return shape_env.replace(expr) if shape_env is not None else expr


def is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def meta_of(x):
    """What the trace recorded for an FX node (a fake tensor, a SymInt, a tuple), else x itself."""
    return x.meta.get("val") if isinstance(x, fx.Node) else x


def constant_array(t: torch.Tensor) -> tuple[np.ndarray, DType]:
    """A frozen tensor's data, copied (later writes to the parameter do not reach it)."""
    dtype = dtype_of(t.dtype, "constant")
    return tensor_to_numpy(t.cpu().contiguous()).copy(), dtype


def bind(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    bound = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound
