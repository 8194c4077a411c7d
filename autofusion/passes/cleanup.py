"""Graph clean-up passes: dead code, common subexpressions, constant folding.

Each pass takes a graph, mutates it through the IR's methods, and returns how many nodes (or
constants) it changed, so the pipeline can report and iterate to a fixed point.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..ir import DType, Graph, GraphBuilder, Node, OpClass, Value, lookup, shape_value
from ..ir.symbolic import is_size, symbols

# Evaluates one node on constant inputs: (node, input arrays, None for omitted) -> output arrays.
Evaluator = Callable[[Node, Sequence["np.ndarray | None"]], Sequence[np.ndarray]]


def eliminate_dead_code(graph: Graph) -> int:
    """Remove nodes none of whose outputs reach a graph output, and constants nobody reads."""
    live: set[int] = {id(v) for v in graph.outputs}
    removed = 0
    for node in reversed(graph.nodes):
        if any(id(v) in live for v in node.outputs):
            live.update(id(v) for v in node.inputs if v is not None)
        else:   # consumers come later in the order, so dead ones are already gone
            graph.remove(node)
            removed += 1
    for name, v in list(graph.constants.items()):
        if not v.uses and id(v) not in live:
            del graph.constants[name]
            removed += 1
    return removed


def _attr_key(value) -> object:
    if isinstance(value, np.ndarray):
        return ("tensor", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list):
        return tuple(_attr_key(v) for v in value)
    return value


def eliminate_common_subexpressions(graph: Graph) -> int:
    """Merge nodes with the same op, attributes and inputs (ops without side effects only)."""
    seen: dict[tuple, Node] = {}
    outputs = set(map(id, graph.outputs))
    merged = 0
    for node in graph.nodes:
        key = (node.domain, node.op_type, tuple(id(v) if v is not None else None for v in node.inputs),
               tuple(sorted((k, _attr_key(a)) for k, a in node.attrs.items())), len(node.outputs))
        twin = seen.get(key)
        if twin is None:
            seen[key] = node
            continue
        if any(id(v) in outputs for v in node.outputs):
            continue   # graph outputs keep their own names
        for old, new in zip(node.outputs, twin.outputs):
            graph.replace_all_uses(old, new)
        graph.remove(node)
        merged += 1
    return merged


MAX_FOLDED_BYTES = 64 << 20   # a folded constant larger than this would bloat the model


def computable_ahead(node: Node) -> bool:
    """Whether the node's outputs are a function of its inputs' values alone, so they may be
    computed before a run (folded) or once for many runs: a standard op that is not opaque
    (no randomness, no subgraph), or one of the shape ops."""
    opdef = lookup(node.domain, node.op_type)
    return opdef is not None and not node.domain and bool(node.outputs) and \
        (opdef.op_class != OpClass.OPAQUE or node.op_type in ("Shape", "Size", "ConstantOfShape", "Range"))


def fold_constants(graph: Graph, evaluate: Evaluator, keep: Callable[[Node], bool] | None = None) -> int:
    """Evaluate nodes whose inputs are all constants and replace them by their results; `keep`:
    nodes to leave as they are (for now)."""
    folded = 0
    outputs = set(map(id, graph.outputs))
    for node in graph.nodes:
        if not computable_ahead(node) or not all(v is None or v.const is not None for v in node.inputs):
            continue
        if keep is not None and keep(node):
            continue
        if any(id(v) in outputs for v in node.outputs) or _static_bytes(node) > MAX_FOLDED_BYTES:
            continue
        try:
            results = evaluate(node, [None if v is None else v.const for v in node.inputs])
        except Exception:  # noqa: BLE001, S112 - its kernel refuses these inputs: left to fail at run
            continue       # time, where the error names the node (or to a pass that removes it)
        if sum(np.asarray(r).nbytes for r in results) > MAX_FOLDED_BYTES:
            continue
        for v, data in zip(node.outputs, results):
            c = graph.add_constant(graph.fresh_name(v.name + "_folded"), np.asarray(data), v.dtype)
            graph.replace_all_uses(v, c)
        graph.remove(node)
        folded += 1
    return folded


def _static_bytes(node: Node) -> int:
    """What the node's outputs take where their shapes are static: a ConstantOfShape or an
    Expand to a huge shape is not evaluated just to be found too big to fold."""
    return sum(math.prod(v.shape) * _itemsize(v.dtype) for v in node.outputs
               if v.is_static and v.dtype is not None)


def _itemsize(dtype) -> int:
    try:
        return dtype.numpy.itemsize
    except TypeError:   # bfloat16, float8, int4: no numpy type, a byte or two
        return 1


def _static_dims(node: Node) -> np.ndarray | None:
    """What a Shape, Size, or a Gather/Slice of a Shape yields, when those dims are static."""
    x = node.inputs[0]
    if node.op_type == "Size":
        return np.array(int(np.prod(x.shape)), np.int64) if x.is_static else None
    dims = shape_value(node.outputs[0])
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    if node.op_type == "Gather":   # a scalar index picks a scalar
        return np.array(dims, np.int64).reshape(node.inputs[1].const.shape)
    return np.array(dims, np.int64)


def fold_static_shapes(graph: Graph) -> int:
    """Shape and Size of static values, and Gather/Slice picking static dims out of a Shape,
    become constants (exporters compute reshape targets and scales this way)."""
    folded = 0
    outputs = set(map(id, graph.outputs))
    for node in graph.nodes:
        if node.domain or node.op_type not in ("Shape", "Size", "Gather", "Slice") or \
                id(node.outputs[0]) in outputs:
            continue
        data = _static_dims(node)
        if data is None:
            continue
        c = graph.add_constant(graph.fresh_name(node.outputs[0].name + "_folded"), data)
        graph.replace_all_uses(node.outputs[0], c)
        graph.remove(node)
        folded += 1
    return folded


def read_shapes_upstream(graph: Graph) -> int:
    """Shape(y) reads only y's dims. Where y provably has the shape of its producer's first
    input (the same dims, symbolic names included), Shape reads that input instead, as far up as
    the shape stays the same. y then has one user fewer, and a fusion that would remove y is not
    blocked by a Shape: dynamic-axes exports take the Shape of a LayerNorm's output to build the
    Reshape that follows it."""
    origin: dict[int, Value] = {}   # value -> the furthest value upstream with its shape

    def furthest(v: Value) -> Value:
        path = []
        while id(v) not in origin:
            p = v.producer
            up = p.inputs[0] if p is not None and p.inputs else None
            if up is None or v.shape is None or None in v.shape or up.shape != v.shape:
                origin[id(v)] = v
                break
            path.append(v)
            v = up
        for w in path:
            origin[id(w)] = origin[id(v)]
        return origin[id(v)]

    moved = 0
    for node in graph.nodes:
        if node.domain or node.op_type != "Shape":
            continue
        source = furthest(node.inputs[0])
        if source is not node.inputs[0]:
            graph.set_input(node, 0, source)
            moved += 1
    return moved


def shapes_from_inputs(graph: Graph) -> int:
    """Shape(y) of an intermediate y whose dims are all known from the graph inputs' symbols
    becomes those dims computed from the inputs' Shapes (`(h + 1) // 2` as Div(Add(h, 1), 2)
    over Shape(x)[2]), so y keeps only the users that read its values: a fusion that removes y
    (a reshape pair around a product, a GELU after it) is not blocked by the Shape a dynamic-axes
    export reads of it. Dims already an input's are read off that input; none where y is an input."""
    sources: dict[str, tuple[Value, int]] = {}
    for v in graph.inputs:
        for axis, d in enumerate(v.shape or ()):
            if isinstance(d, str):
                sources.setdefault(d, (v, axis))
    inputs = set(map(id, graph.inputs))
    rewritten = 0
    for node in graph.nodes:
        if node.domain or node.op_type != "Shape":
            continue
        y = node.inputs[0]
        if id(y) in inputs or y.shape is None:
            continue
        start, end = node.attr("start", 0), node.attr("end")
        dims = list(y.shape[start:end])
        if not all(is_size(d) and symbols(d) <= sources.keys() for d in dims):
            continue
        if not dims:
            continue   # an empty Shape folds as a static one
        op = GraphBuilder(graph, node.name)
        parts = [_dim_value(op, graph, d, sources) for d in dims]
        made = parts[0] if len(parts) == 1 else op.Concat(*parts, axis=0)
        made.shape, made.dtype = (len(dims),), DType.INT64
        graph.replace_all_uses(node.outputs[0], made)
        graph.remove(node)
        rewritten += 1
    return rewritten


def _dim_value(op: GraphBuilder, graph: Graph, d, sources: dict[str, tuple[Value, int]]) -> Value:
    """A [1] int64 value holding the size d: an int, a graph input's dim, or computed from those."""
    def typed(v: Value) -> Value:
        v.shape, v.dtype = (1,), DType.INT64
        return v
    if isinstance(d, int):
        return graph.add_constant(graph.fresh_name("dim"), np.array([d], np.int64))
    if isinstance(d, str):
        v, axis = sources[d]
        return typed(op.Shape(v, start=axis, end=axis + 1))
    total = None
    for monomial, coefficient in d.terms:
        term = None
        for atom in monomial:
            factor = _atom_value(op, graph, atom, sources)
            term = factor if term is None else typed(op.Mul(term, factor))
        c = graph.add_constant(graph.fresh_name("dim"), np.array([coefficient], np.int64))
        term = c if term is None else (term if coefficient == 1 else typed(op.Mul(term, c)))
        total = term if total is None else typed(op.Add(total, term))
    return total


def _atom_value(op: GraphBuilder, graph: Graph, atom, sources) -> Value:
    if isinstance(atom, str):
        return _dim_value(op, graph, atom, sources)
    kind, *args = atom
    if kind == "//":
        k = graph.add_constant(graph.fresh_name("dim"), np.array([args[1]], np.int64))
        out = op.Div(_dim_value(op, graph, args[0], sources), k)   # sizes: truncation is the floor
    else:
        out = getattr(op, "Max" if kind == "max" else "Min")(*(_dim_value(op, graph, a, sources) for a in args))
    out.shape, out.dtype = (1,), DType.INT64
    return out


def resolve_cast_like(graph: Graph) -> int:
    """CastLike(x, like) with `like`'s dtype known becomes Cast(x, to=dtype): it no longer reads
    an activation, so a constant x folds (dynamo exports build zero biases this way)."""
    resolved = 0
    for node in graph.nodes:
        if node.domain or node.op_type != "CastLike" or node.inputs[1].dtype is None:
            continue
        cast = graph.add_node("Cast", [node.inputs[0]], [graph.fresh_name(node.outputs[0].name)],
                              {"to": int(node.inputs[1].dtype)}, graph.fresh_name(node.name),
                              origin=node.origin)
        out = cast.outputs[0]
        out.shape, out.dtype = node.outputs[0].shape, node.inputs[1].dtype
        graph.replace_all_uses(node.outputs[0], out)
        node.outputs[0].name, out.name = out.name, node.outputs[0].name
        graph.remove(node)
        resolved += 1
    return resolved


def _merged(old: tuple, new: tuple, named: set[str]) -> tuple:
    """old with what new adds: a size where old has anything else, a dim where old has none, and
    the rules' own dim (a size computed from the inputs' symbols: `(h + 1) // 2`) where old has
    a symbol no graph input declares — one ONNX's inference made up ("unk__7") or an exporter
    wrote for a computed size ("floor(height/2 - 1/2) + 1"), which a call cannot give. Other
    dims of old stay, so the equalities their symbols state between values stay too."""
    if len(old) != len(new):
        return old
    def made_up(d) -> bool:
        return isinstance(d, str) and d not in named
    return tuple(n if n is not None and (isinstance(n, int) and not isinstance(o, int) or o is None or
                                         (made_up(o) and not made_up(n)))
                 else o for o, n in zip(old, new))


def refine_shapes(graph: Graph) -> int:
    """Re-derive output shapes with the op table's rules where folding made inputs constant or
    a reshape target is made of dims read off a Shape: an Expand to a shape computed from static
    dims then has a static shape too, a view as [b, s, -1, 64] gets its head count, and the rules
    that check shapes (broadcasts, biases, masks, attention heads) can tell."""
    refined = 0
    named = {d for v in graph.inputs for d in v.shape or () if isinstance(d, str)}
    for node in graph.nodes:
        opdef = lookup(node.domain, node.op_type)
        if opdef is None or opdef.infer is None:
            continue
        try:
            types = opdef.infer(node) or ()
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            continue
        for v, (shape, _) in zip(node.outputs, types):
            if shape is None:
                continue
            merged = tuple(shape) if v.shape is None else _merged(v.shape, tuple(shape), named)
            if merged != v.shape:
                v.shape = merged
                refined += 1
    return refined
