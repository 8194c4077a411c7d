"""ATen FX graph → IR: the importer behind torch.compile(backend="autofusion").

Reads a functional core-ATen graph (fx_trace.py makes one) and writes the IR graph ONNX import
would: ONNX operators with ONNX attribute meaning, so the same rules fuse it.

    placeholders   a frozen tensor (parameter, buffer) becomes a graph constant; another tensor
                   a graph input, its symbolic sizes (dynamo's s0, s1, …) symbolic dims; a SymInt
                   placeholder no input at all (it is read off an input's shape where needed)
    the nodes      only those the outputs need, in graph order; each through its lowering in
                   aten_ops.py, or, before that, a pattern there that reassembles what the
                   decompositions took apart (a linear layer, a batched matmul)
    unmapped ops   an op without a lowering, or whose lowering refuses, becomes a TorchCall of
                   the op itself (ir/torch_call.py), listed in `fallbacks` with the reason
    sizes          a SymInt an op needs is computed in the graph from the Shape of an input that
                   has it (the way exporters build reshape targets), so shapes stay symbolic

Each IR node is named after its FX node; the types the IR's shape rules give are checked
against those the trace recorded, and filled in from them where the rules cannot tell.
"""
from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import fx

from ..errors import GraphError
from ..ir import Graph, GraphBuilder, Value, symbolic, verify
from ..ir.torch_call import TORCH_DOMAIN
from .aten_ops import LOWERINGS, PATTERNS
from .fx_trace import UnsupportedGraphError
from .fx_values import Unmapped, constant_array, dtype_of, ir_dim, is_tensor, meta_of, sym_expr
from .fx_writer import FxWriter







@dataclass
class Fallback:
    op: str        # "aten.erfinv.default"
    node: str      # the FX node
    reason: str

    def __str__(self) -> str:
        return f"Fallback {self.op}: {self.reason} (node {self.node!r})"


@dataclass
class FxImport:
    graph: Graph
    input_positions: list[int]     # the placeholder behind each graph input, in order
    output_slots: list[tuple[str, Any]]   # per FX output: ("tensor", graph output index) or ("value", v)
    fallbacks: list[Fallback] = field(default_factory=list)


class FxImporter(FxWriter):
    """One import: walks the FX graph, lowering each node into the graph being written."""

    def __init__(self, gm: fx.GraphModule, constants: dict[int, torch.Tensor],
                 names: Sequence[str] | None, graph_name: str):
        super().__init__(graph_name)
        self.gm, self.constants = gm, constants
        self.names = list(names) if names is not None else None
        self.fallbacks: list[Fallback] = []
        self.input_positions: list[int] = []

    # ---- the driver ----------------------------------------------------------------------
    def run(self) -> FxImport:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for i, node in enumerate(placeholders):
            self._placeholder(i, node)
        output = next(n for n in self.gm.graph.nodes if n.op == "output")
        plan = self._plan(output)
        for node in self.gm.graph.nodes:
            if node in plan and node.op == "call_function":
                self._lower(node, plan[node])
            elif node.op == "get_attr" and node in plan:
                self._get_attr(node)
            elif node.op not in ("placeholder", "output", "call_function", "get_attr"):
                raise UnsupportedGraphError(f"node {node.name!r}: FX {node.op} nodes are not read")
        slots = self._outputs(output)
        return FxImport(self.graph, self.input_positions, slots, self.fallbacks)

    def _plan(self, output: fx.Node) -> dict[fx.Node, Any]:
        """The nodes the outputs need, each with the pattern that lowers it (None: its own
        lowering); a pattern reads its own inputs, so what it absorbs is never lowered."""
        plan: dict[fx.Node, Any] = {}
        stack = list(output.all_input_nodes)
        while stack:
            node = stack.pop()
            if node in plan:
                continue
            match = None
            for pattern in PATTERNS.get(node.target, ()) if node.op == "call_function" else ():
                match = pattern(self, node)
                if match is not None:
                    break
            plan[node] = match
            stack.extend(match.reads if match is not None else node.all_input_nodes)
        return plan

    def _placeholder(self, i: int, node: fx.Node) -> None:
        name = self._fresh(self.names[i] if self.names and i < len(self.names) else node.name)
        if i in self.constants:
            data, dtype = constant_array(self.constants[i])
            self.values[node] = self.graph.add_constant(name, data, dtype)
            return
        val = meta_of(node)
        if not is_tensor(val):
            self.values[node] = val   # a SymInt or a Python scalar: no graph input
            return
        shape = tuple(ir_dim(d) for d in val.shape)
        value = self.graph.add_input(name, shape, dtype_of(val.dtype, f"input {name!r}"))
        self.input_positions.append(i)
        self.values[node] = value
        for axis, d in enumerate(val.shape):
            if not isinstance(d, int) and sym_expr(d).is_Symbol:
                self.symbol_sources.setdefault(str(sym_expr(d)), (value, axis))

    def _get_attr(self, node: fx.Node) -> None:
        attr = self.gm
        for part in str(node.target).split("."):
            attr = getattr(attr, part)
        if not is_tensor(attr):
            raise UnsupportedGraphError(f"node {node.name!r} reads {node.target!r}, which is not a tensor")
        data, dtype = constant_array(attr)
        self.values[node] = self.graph.add_constant(self._fresh(node.name), data, dtype)

    def _lower(self, node: fx.Node, match) -> None:
        val = meta_of(node)
        if node.target is operator.getitem:
            self.values[node] = self._getitem(node)
            return
        if not is_tensor(val) and not (isinstance(val, (tuple, list)) and any(map(is_tensor, val))):
            self.values[node] = val   # size arithmetic: kept symbolic, computed where used
            return
        self.node, self.op = node, GraphBuilder(self.graph, node.name, (node.name,))
        try:
            if match is not None:
                result = match.lower(self)
            elif node.target in LOWERINGS:
                result = LOWERINGS[node.target](self, node)
            else:
                raise Unmapped("no mapping to the op table")
        except Unmapped as e:
            self.op = GraphBuilder(self.graph, node.name, (node.name,))
            result = self._torch_call(node, str(e))
        self.values[node] = self._typed(node, result)

    def _getitem(self, node: fx.Node):
        parent, index = node.args
        outs = self.values[parent]
        if not isinstance(outs, (tuple, list)):
            raise GraphError(f"node {node.name!r} indexes {parent.name!r}, which has one output")
        out = outs[index]
        if out is None and is_tensor(meta_of(node)):
            raise GraphError(f"node {node.name!r}: output {index} of {parent.name!r} was not lowered")
        return out

    def _typed(self, node: fx.Node, result):
        """Check the IR's types against the trace's; fill in what the shape rules left open."""
        vals = meta_of(node)
        results = result if isinstance(result, tuple) else (result,)
        vals = vals if isinstance(vals, (tuple, list)) else (vals,)
        for value, val in zip(results, vals):
            if value is None or not is_tensor(val):
                continue
            want = tuple(ir_dim(d) for d in val.shape)
            dtype = dtype_of(val.dtype, f"node {node.name!r}")
            if value.dtype is not None and value.dtype != dtype:
                raise GraphError(f"node {node.name!r} ({node.target}): lowered to {value.type_str()}, "
                                 f"but PyTorch computes {dtype.name.lower()}")
            if value.shape is not None and len(value.shape) != len(want):
                raise GraphError(f"node {node.name!r} ({node.target}): lowered to rank "
                                 f"{len(value.shape)}, but PyTorch computes shape {list(want)}")
            have = value.shape or (None,) * len(want)
            for h, w in zip(have, want):
                if isinstance(h, int) and isinstance(w, int) and h != w:
                    raise GraphError(f"node {node.name!r} ({node.target}): lowered to shape "
                                     f"{list(have)}, but PyTorch computes {list(want)}")
            if value.producer is not None:   # never retype an input or a constant
                value.shape = tuple(h if h is not None else (w if self._known(w) else None)
                                    for h, w in zip(have, want))
                value.dtype = dtype
        return result

    def _known(self, d) -> bool:
        """Whether a dim is one a call can tell: a size, or computed from inputs' symbols."""
        return symbolic.is_size(d) and symbolic.symbols(d) <= self.symbol_sources.keys()

    def _outputs(self, output: fx.Node) -> list[tuple[str, Any]]:
        slots = []
        items = output.args[0]
        for item in items if isinstance(items, (tuple, list)) else [items]:
            if isinstance(item, fx.Node) and is_tensor(meta_of(item)):
                self.graph.outputs.append(self.values[item])
                slots.append(("tensor", len(self.graph.outputs) - 1))
            elif item is None or isinstance(item, (int, float, bool)):
                slots.append(("value", item))
            else:
                raise UnsupportedGraphError(f"output {item} is a {type(meta_of(item)).__name__} "
                                            "computed at run time, not a tensor")
        return slots

    # ---- the fallback ----------------------------------------------------------------------
    def _torch_call(self, node: fx.Node, reason: str):
        """The node as a call of its own target; its tensors and sizes become inputs."""
        target = node.target
        name = str(target)
        if not isinstance(target, torch._ops.OpOverload):
            raise UnsupportedGraphError(f"node {node.name!r} calls {name}, which is not an ATen "
                                        f"operator and has no mapping ({reason})")
        inputs: list[Value] = []

        def encode(a):
            if isinstance(a, (list, tuple)):
                items = [encode(x) for x in a]
                return items if isinstance(a, list) else {"tuple": items}
            if isinstance(a, fx.Node):
                val = meta_of(a)
                if is_tensor(val):
                    inputs.append(self.value(a))
                    return {"input": len(inputs) - 1}
                a = val
            if isinstance(a, torch.SymInt):
                inputs.append(self.index(a))
                return {"int_input": len(inputs) - 1}
            if isinstance(a, torch.dtype):
                return {"dtype": str(a).removeprefix("torch.")}
            if isinstance(a, torch.device):
                return {"device": str(a)}
            if isinstance(a, torch.layout):
                return {"layout": str(a).removeprefix("torch.")}
            if isinstance(a, torch.memory_format):
                return {"memory_format": str(a).removeprefix("torch.")}
            if a is None or isinstance(a, (bool, int, float, str)):
                return a
            raise UnsupportedGraphError(f"node {node.name!r} ({name}) has an argument of type "
                                        f"{type(a).__name__}, which a TorchCall cannot carry")

        call = {"args": encode(list(node.args)), "kwargs": {k: encode(v) for k, v in node.kwargs.items()}}
        val = meta_of(node)
        many = isinstance(val, (tuple, list))
        vals = list(val) if many else [val]
        if not all(is_tensor(v) for v in vals):
            raise UnsupportedGraphError(f"node {node.name!r} ({name}) returns non-tensors and has "
                                        f"no mapping ({reason})")
        outs = self.op.TorchCall(*inputs, _domain=TORCH_DOMAIN, _outputs=len(vals), target=name,
                                 args=json.dumps(call), reason=reason, tuple_output=int(many))
        outs = outs if isinstance(outs, tuple) else (outs,)
        for v, t in zip(outs, vals):
            v.shape = tuple(ir_dim(d) if self._known(ir_dim(d)) else None for d in t.shape)
            v.dtype = dtype_of(t.dtype, f"node {node.name!r}")
        self.graph.opset.setdefault(TORCH_DOMAIN, 1)
        self.fallbacks.append(Fallback(name, node.name, reason))
        return outs if many else outs[0]


def import_fx(gm: fx.GraphModule, constants: dict[int, torch.Tensor] | None = None,
              names: Sequence[str] | None = None, graph_name: str = "torch_graph") -> FxImport:
    """An ATen FX graph as an IR graph. `constants`: placeholder index → the tensor to freeze
    there (parameters and buffers); `names`: a name per placeholder."""
    result = FxImporter(gm, constants or {}, names, graph_name).run()
    verify(result.graph)
    return result
