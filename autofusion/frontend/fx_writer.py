"""The IR graph an FX import writes, and what a lowering (aten_ops.py) calls on it: the IR value
of an FX node, constants, casts, ints and sizes as IR values. The importer (fx_import.py) is
an FxWriter that also walks the FX graph; a lowering sees only this part of it."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import sympy
import torch
from torch import fx

from ..ir import DType, Graph, GraphBuilder, Value
from ..ir.dtypes import numpy_dtype_of_torch
from .fx_values import Unmapped, dtype_of, ir_dim, is_tensor, meta_of, sym_expr


class FxWriter:
    """One import's IR graph and the value of each FX node in it. `op` builds nodes named after
    the FX node being lowered (`node`); `symbol_sources` says which input dim each size symbol
    is read off."""

    def __init__(self, graph_name: str):
        self.graph = Graph(graph_name)
        self.values: dict[fx.Node, Any] = {}
        self.symbol_sources: dict[str, tuple[Value, int]] = {}
        self.op: GraphBuilder = GraphBuilder(self.graph)
        self.node: fx.Node | None = None
        self._dim_cache: dict[str, Value] = {}

    def _fresh(self, hint: str) -> str:
        return self.graph.fresh_name(hint)

    def value(self, arg) -> Value:
        """The IR value of a tensor argument."""
        if not isinstance(arg, fx.Node):
            raise Unmapped(f"argument {arg!r} is not a tensor")
        v = self.values.get(arg)
        if not isinstance(v, Value):
            raise Unmapped(f"argument {arg.name!r} has no IR value")
        return v

    def const(self, data, dtype: DType | None = None, hint: str = "const") -> Value:
        return self.graph.add_constant(self._fresh(f"{self.node.name}_{hint}" if self.node else hint),
                                       np.array(data, order="C"), dtype)

    def scalar(self, x, dtype: torch.dtype) -> Value:
        """A Python number as a 0-d constant of `dtype`."""
        return self.const(np.array(x, dtype=numpy_dtype_of_torch(dtype)), dtype_of(dtype, "scalar"), "scalar")

    def operand(self, x, dtype: torch.dtype) -> Value:
        """A tensor or scalar argument of an elementwise op, as `dtype`."""
        if isinstance(x, fx.Node) and is_tensor(meta_of(x)):
            return self.cast(self.value(x), dtype)
        value = meta_of(x)
        if not isinstance(value, (int, float, bool)):
            return self.cast(self.index(x), dtype)
        return self.scalar(value, dtype)

    def cast(self, v: Value, dtype: torch.dtype) -> Value:
        to = dtype_of(dtype, "cast")
        return v if v.dtype == to else self.op.Cast(v, to=int(to))

    def index(self, x) -> Value:
        """An int or SymInt as a 0-d int64 value (computed from input shapes when symbolic)."""
        x = meta_of(x)
        if isinstance(x, (int, bool)):
            return self.const(np.array(int(x), np.int64), hint="int")
        return self.op.Squeeze(self._dim_vector(sym_expr(x)), self.const(np.array([0], np.int64), hint="axes"))

    def ints(self, items: Sequence) -> Value:
        """A 1-D int64 value of ints and SymInts: a constant, or a Concat of constants and sizes
        read off the inputs' shapes."""
        items = [meta_of(i) for i in items]
        if all(isinstance(i, int) for i in items):
            return self.const(np.array(items, np.int64).reshape(-1), hint="ints")
        pieces, run = [], []
        for item in items:
            if isinstance(item, int):
                run.append(item)
                continue
            if run:
                pieces.append(self.const(np.array(run, np.int64), hint="ints"))
                run = []
            pieces.append(self._dim_vector(sym_expr(item)))
        if run:
            pieces.append(self.const(np.array(run, np.int64), hint="ints"))
        return pieces[0] if len(pieces) == 1 else self.op.Concat(*pieces, axis=0)

    def _dim_vector(self, expr: sympy.Expr) -> Value:
        """A size expression as a [1] int64 value."""
        if expr.is_Integer:
            return self.const(np.array([int(expr)], np.int64), hint="ints")
        key = str(expr)
        if key in self._dim_cache:
            return self._dim_cache[key]
        if expr.is_Symbol:
            if key not in self.symbol_sources:
                raise Unmapped(f"the size {key} is no input's dimension, so the graph cannot compute it")
            source, axis = self.symbol_sources[key]
            out = GraphBuilder(self.graph, f"{source.name}_dim{axis}").Shape(source, start=axis, end=axis + 1)
        elif isinstance(expr, (sympy.Add, sympy.Mul)):
            terms = [self._dim_vector(a) for a in expr.args]
            out = terms[0]
            for t in terms[1:]:
                out = self.op.Add(out, t) if isinstance(expr, sympy.Add) else self.op.Mul(out, t)
        elif type(expr).__name__ == "FloorDiv":
            out = self.op.Div(self._dim_vector(expr.args[0]), self._dim_vector(expr.args[1]))
        else:
            raise Unmapped(f"the size {expr} is not computed in the graph (only +, ·, // of input dims)")
        self._dim_cache[key] = out
        return out

    def dims(self, x) -> list[int | str]:
        """The IR dims of a tensor argument, as the trace saw them."""
        return [ir_dim(d) for d in meta_of(x).shape]


# a lowering: (the graph being written, an FX node) -> its IR value(s)
Lowering = Callable[[FxWriter, fx.Node], Any]
