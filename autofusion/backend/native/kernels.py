"""Generated kernels: an automatic fusion region → one C++ loop nest over its iteration space.

    space     the region's iteration space S and how each value of the body maps onto it
              (ir/region_space.py): each operand, input or output, gets strides over S (0 along
              the axes it is broadcast along, out of order where it is transposed); a reshape or
              transpose in the body is only a new name for the same element
    collapse  adjacent axes every operand walks contiguously merge into one, and unit axes go,
              so [1,64,112,112] with a [1,64,1,1] scale is two loops: 64 × 12544
    loops     the outer axes in one OpenMP loop where the space is large enough to pay for
              waking the threads; the innermost axis a loop of one scalar expression per op
              (ir/scalar.py): 16 elements at a time where the CPU has AVX-512 (build.py
              vector_lanes), the same expressions over runtime/lanes.h's 16-float vectors, the
              loop's last lanes masked; elsewhere a `#pragma omp simd` loop of floats, which the
              compiler vectorises. An operand broadcast along the inner axis is one float for
              all lanes, one transposed onto it is read and written lane by lane
    unrolled  a 16-lane loop goes up to 8 vectors a step (fewer for a body of over 32 ops), each
              statement over all of them in turn (AF_EACH), then 16 at a time to the end: a
              sigmoid or tanh is a chain of ~20 dependent operations, and only independent
              chains side by side keep the out-of-order core busy (elementwise-8's kernel,
              0.32 → 0.24 ms)
    outputs   an output smaller than S (a value that also leaves the region before a broadcast)
              is stored where the axes it broadcasts along are at 0: each element once; one
              constant along the innermost axis after the vector loop, from its first element

A region with reductions (softmax, a norm written out, a mean) is a row kernel: the axes before
the region's `rows` are rows, those after are one row's columns (each collapsed apart). Per row,
in an outer loop (OpenMP over rows where the space is large enough):

    passes    one vectorised pass over the row per level of reductions (`omp simd reduction`):
              a reduction goes in the first pass after the ones its input depends on, so a
              softmax is three passes (max, sum of exp, store), a LayerNorm written out three
              (mean, variance, store), mean and mean of squares one; then a last pass computes
              and stores what varies along the row
    prologue  what a pass needs of the ops before it is recomputed in that pass from the
              region's inputs, not kept in a row buffer: it is a few flops per element against a
              row that is still in cache, and a buffer would be memory traffic the fusion exists
              to save (a softmax computes exp twice per element for it)
    per row   values constant along the row (the reductions' results, what is computed from
              them) are computed once per row between the passes, and stored once per row

All arithmetic is float32, reductions accumulate in float32; max and min propagate NaN.

Sizes: an elementwise region's space may be symbolic (a model with dynamic axes). Its kernel is
then made once for every size: each symbolic size of the space is `d[k]`, an argument the
runtime fills for the call's sizes (the kernel's `sizes`, evaluated per set of input sizes), and
its loop bounds, strides and thresholds are products of them; the vector loop is always there,
its tail masked. Static sizes are literals, as the compiler then unrolls and folds best. A row
kernel's space is static (region_space.py).
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

from ...ir import DType, Graph, Node
from ...ir.builder import fused
from ...ir.fused_ops import typed_body
from ...ir.region_space import VIEWS, LayoutError, Space, data_inputs
from ...ir.scalar import ROW_OPS, c_float, expression
from ...ir.symbolic import c_expr, evaluate, floordiv, is_size, is_symbolic, mul, product, symbols
from .build import vector_lanes
from .emit import PartitionSource, dims
from .impls import native

PARALLEL_ELEMENTS = 1 << 15   # below this, one thread is faster than waking the others
UNROLL = 8                    # vectors a step of an unrolled 16-lane loop, at most,
UNROLLED_OPS = 256            # and ops × vectors at most: GCC's time grows faster than the code
INIT = {"sum": "0.f", "max": "(-af::inf)", "min": "af::inf"}
COMBINE = {"sum": "{acc} += {x};", "max": "{acc} = af_max({acc}, {x});",
           "min": "{acc} = af_min({acc}, {x});"}
CLAUSE = {"sum": "+", "max": "af_max", "min": "af_min"}   # the omp reductions (scalar.h)


# per input and per output of a region node, the axis order it is stored in (None: row-major)
Orders = tuple[list[tuple[int, ...] | None], list[tuple[int, ...] | None]]


@dataclass
class Operand:
    name: str                 # in0 / out1
    strides: list[int]        # over the iteration space, 0 along broadcast axes
    value: str = ""           # the C variable an input's element is loaded into (x0, x0_1)


def collapse(space: list, operands: list[list]) -> tuple[list, list[list]]:
    """Merge axis d into d+1 where every operand steps over d as one run of d+1; drop unit axes."""
    keep = [d for d, n in enumerate(space) if n != 1]
    sizes = [space[d] for d in keep]
    strides = [[s[d] for d in keep] for s in operands]
    d = len(sizes) - 2
    while d >= 0:
        if all(s[d] == mul(s[d + 1], sizes[d + 1]) for s in strides):
            sizes[d + 1] = mul(sizes[d + 1], sizes[d])
            del sizes[d]
            for s in strides:
                del s[d]
        d -= 1
    return sizes or [1], [s or [0] for s in strides]


def refusal(node: Node) -> str | None:
    """Why the region cannot be one generated kernel here, or None."""
    try:
        body = typed_body(node)
    except (ValueError, KeyError, TypeError) as e:
        return f"its body cannot be typed for these inputs: {e}"
    return _laid_out(body)[1]


# per typed body (fused_ops.typed_body makes one per body and input types): its iteration space
# and why it cannot be one kernel. The native and torch plans both ask, and the emitter lays it
# out: laying out a region of 1000 ops three times took 2 s of the 30,000-op chain's compile
_LAID_OUT: weakref.WeakKeyDictionary[Graph, tuple[Space | None, str | None]] = weakref.WeakKeyDictionary()


def space_of(node: Node) -> Space:
    """A region's iteration space, in the graph's dims (its check accepted it)."""
    space, why = _laid_out(typed_body(node))
    if space is None:
        raise ValueError(f"region {node.name!r}: {why}")
    return space


def _laid_out(body: Graph) -> tuple[Space | None, str | None]:
    if body not in _LAID_OUT:
        _LAID_OUT[body] = _lay_out(body)
    return _LAID_OUT[body]


def _lay_out(body: Graph) -> tuple[Space | None, str | None]:
    for v in [*body.inputs, *(v for n in body.nodes for v in [*data_inputs(n), n.outputs[0]])]:
        if v is None:
            continue
        if v.dtype != DType.FLOAT:
            return None, f"{v.name!r} is not float32"
        if v.shape is None or not all(is_size(d) for d in v.shape):
            return None, f"{v.name!r} has shape {v.type_str()}: a generated kernel needs every dim known"
    for v in body.constants.values():
        if v.const.size != 1 and v.dtype == DType.FLOAT:
            return None, f"its constant {v.name!r} is not a scalar"
    for n in body.nodes:
        if expression(n) is None and n.op not in ROW_OPS and n.op not in VIEWS:
            return None, f"{n.op} has no scalar expression"
    try:
        return Space.of(body.nodes), None
    except LayoutError as e:
        return None, f"its body is not one iteration space: {e}"


class _Body:
    """A typed body laid out over its space: the operands, and a C name per value."""

    def __init__(self, node: Node, orders: Orders | None = None):
        in_orders, out_orders = orders or ([None] * len(node.inputs), [None] * len(node.outputs))
        self.ordered = any(o is not None for o in [*in_orders, *out_orders])
        self.body = body = typed_body(node)
        space, why = _laid_out(body)
        if space is None:
            raise ValueError(f"region {node.name!r}: {why}")
        # each symbolic size of the space is d[k] in the kernel: its `sizes` list, the k-th entry
        # what the caller evaluates for the call
        self.sizes_in: list = list(dict.fromkeys(s for s in space.sizes if is_symbolic(s)))
        names = {s: f"d[{k}]" for k, s in enumerate(self.sizes_in)}
        self.space = space = space.renamed([names.get(s, s) if is_symbolic(s) else s for s in space.sizes])
        self.sizes = space.sizes
        self.names: dict[int, str] = {id(v): c_float(v.const.reshape(-1)[0]) for v in body.constants.values()
                                      if v.const.size == 1 and v.dtype == DType.FLOAT}
        index = {id(v): i for i, v in enumerate(body.inputs)}
        loads: dict[tuple[int, tuple], Operand] = {}
        self.reads: dict[tuple[int, int], str] = {}   # (node position, input) → its load
        for k, n in enumerate(body.nodes):
            for i, v in enumerate(data_inputs(n)):
                if v is None or id(v) not in index:
                    continue
                key = (index[id(v)], space.operand_strides(n, i, in_orders[index[id(v)]]))
                if key not in loads:   # one load per input and alignment (x0, x0_1 transposed)
                    same = sum(1 for j, _ in loads if j == key[0])
                    name = f"x{key[0]}" + (f"_{same}" if same else "")
                    loads[key] = Operand(f"in{key[0]}", list(key[1]), name)
                self.reads[(k, i)] = loads[key].value
        self.ins = sorted(loads.values(), key=lambda o: (int(o.name[2:]), o.value))
        self.outs = [Operand(f"out{j}", list(space.value_strides(v, out_orders[j])))
                     for j, v in enumerate(body.outputs)]

    def operand(self, k: int, i: int, v) -> str | None:
        return None if v is None else self.reads.get((k, i)) or self.names[id(v)]


@dataclass
class GeneratedKernel:
    source: str     # the C++ function
    sizes: list     # what its d[k] are: symbolic dims of the region's space (empty: all static)


def generated_kernel(node: Node, fn: str, lanes: int | None = None,
                     orders: Orders | None = None) -> GeneratedKernel:
    """The C++ function `fn(in, out, d)` computing the region node; an elementwise one `lanes`
    elements at a time (lanes.h; default: what this CPU and compiler have, build.py). `orders`:
    the axis order each input and output is stored in (None: row-major), as the plan lays them
    out (lower.py channels_last); only an elementwise region takes them."""
    lanes = vector_lanes() if lanes is None else lanes
    if lanes not in (1, 16):
        raise ValueError(f"lanes={lanes}: a generated loop is 1 or 16 floats wide (lanes.h)")
    b = _Body(node, orders)
    if b.space.rows is not None:
        if b.ordered:
            raise ValueError(f"region {node.name!r}: a row kernel reads its operands row-major")
        return GeneratedKernel(_row_source(node, b, fn), b.sizes_in)
    return GeneratedKernel(_loop_nest_source(node, b, fn, lanes), b.sizes_in)


def kernel_source(node: Node, fn: str, lanes: int | None = None, orders: Orders | None = None) -> str:
    return generated_kernel(node, fn, lanes, orders).source


def _c(x) -> str:
    """A size in C: a literal, d[k], or a product of them in parentheses."""
    text = c_expr(x)
    return text if isinstance(x, int) or (isinstance(x, str) and x.startswith("d[")) else f"({text})"


def _ordering(stride) -> int:
    """A stride's rank among a dense layout's: its value with every size large (the order of a
    layout's strides is that of its axes, whatever the sizes)."""
    return evaluate(stride, {s: 1 << 20 for s in symbols(stride)})


def _loop_nest_source(node: Node, b: _Body, fn: str, lanes: int) -> str:
    body, space = b.body, list(b.sizes)
    ops, outs = b.ins, b.outs
    if b.ordered:   # the loops in the order the first output is stored in: channels innermost
        perm = sorted(range(len(space)), key=lambda d: -_ordering(outs[0].strides[d]))
        space = [space[d] for d in perm]
        for o in ops + outs:
            o.strides = [o.strides[d] for d in perm]
    sizes, strides = collapse(space, [o.strides for o in ops + outs])
    for o, s in zip(ops + outs, strides):
        o.strides = s
    rank, inner = len(sizes), len(sizes) - 1
    idx = [f"i{d}" for d in range(rank)]
    n_inner = sizes[inner]
    vector = lanes > 1 and (is_symbolic(n_inner) or n_inner >= lanes)
    unroll = _unroll(UNROLL if is_symbolic(n_inner) else n_inner // lanes, len(body.nodes)) if vector else 1
    unrolled_end = mul(floordiv(n_inner, lanes * unroll), lanes * unroll) if unroll > 1 else 0

    def at(o: Operand, index: dict[str, str], nth: bool = False) -> str:
        """o's element at the loop indices, `index` fixing some; `nth`: of the u-th vector of an
        unrolled step."""
        terms = [f"{i} * {_c(s)}" if s != 1 else i for i, s in zip(idx, o.strides)
                 if s != 0 and index.get(i) != "0"]
        if nth and o.strides[inner] != 0:
            terms.append(f"{_c(mul(lanes, o.strides[inner]))} * u")
        return f"{o.name}[{' + '.join(terms) or '0'}]"

    def lanes_of(o: Operand, index: dict[str, str], nth: bool = False) -> str | None:
        """Where a vector loop's lanes of o start, and their stride unless 1; None where o is
        one float for all the lanes."""
        step = o.strides[inner]
        if not vector or idx[inner] in index or step == 0:
            return None
        return f"&{at(o, index, nth)}" + (f", {_c(step)}" if step != 1 else "")

    def compute(index: dict[str, str]) -> list[str]:
        lines = [f"const vec16 {o.value} = load16({where}, live);" if (where := lanes_of(o, index))
                 else f"const float {o.value} = {at(o, index)};" for o in ops]
        kind = "auto" if vector and idx[inner] not in index else "float"   # float or vec16
        for k, n in enumerate(body.nodes):
            if n.op in VIEWS:
                continue
            args = [b.operand(k, i, v) for i, v in enumerate(n.inputs)]
            lines.append(f"const {kind} t{k} = {expression(n)(n, *args)};   // {n.op_type}")
        return lines

    def once(o: Operand, index: dict[str, str]) -> str:
        zero = [f"{i} == 0" for i, s, n in zip(idx, o.strides, sizes)
                if s == 0 and (is_symbolic(n) or n > 1) and i not in index]
        return f"if ({' && '.join(zero)}) " if zero else ""

    def store(v, o: Operand, index: dict[str, str]) -> str:
        where = lanes_of(o, index)
        line = f"store16({where}, {b.names[id(v)]}, live);" if where else f"{at(o, index)} = {b.names[id(v)]};"
        return once(o, index) + line

    def compute_unrolled() -> list[str]:
        """The body over `unroll` vectors: each value varying along the lanes an array of them,
        each statement over all of them in turn (AF_EACH); values the same in every lane once."""
        each, arrays, lines = f"AF_EACH({unroll}) ", [], []

        def of_u(name):
            return f"{name}[u]" if name in arrays else name
        for o in ops:
            if where := lanes_of(o, {}, nth=True):
                arrays.append(o.value)
                lines.append(f"{each}{o.value}[u] = load16({where}, ALL_LANES);")
            else:
                lines.append(f"const float {o.value} = {at(o, {})};")
        for k, n in enumerate(body.nodes):
            if n.op in VIEWS:
                continue
            args = [b.operand(k, i, v) for i, v in enumerate(n.inputs)]
            if any(a in arrays for a in args):
                arrays.append(f"t{k}")
                lines.append(f"{each}t{k}[u] = {expression(n)(n, *map(of_u, args))};   // {n.op_type}")
            else:
                lines.append(f"const float t{k} = {expression(n)(n, *args)};   // {n.op_type}")
        for v, o, c in zip(body.outputs, outs, inner_const):
            if not c:
                lines.append(f"{once(o, {})}{each}store16({lanes_of(o, {}, nth=True)}, "
                             f"{of_u(b.names[id(v)])}, ALL_LANES);")
        return ["vec16 " + ", ".join(f"{a}[{unroll}]" for a in arrays) + ";"] + lines

    _name_values(b)
    # outputs constant along the inner axis are stored after the inner loop, from its first
    # element recomputed, so no store in the inner loop is conditional on the inner index
    inner_const = [o.strides[inner] == 0 and (is_symbolic(n_inner) or n_inner > 1) for o in outs]
    body_lines = compute({}) + [store(v, o, {}) for v, o, c in zip(body.outputs, outs, inner_const) if not c]
    if vector:
        body_lines.insert(0, f"const __mmask16 live = lanes_from({_c(n_inner)} - {idx[inner]});")
    tail_lines = []
    if any(inner_const):
        first = {idx[inner]: "0"}
        tail_lines = ["{"] + ["  " + line for line in compute(first)] + \
            ["  " + store(v, o, first) for v, o, c in zip(body.outputs, outs, inner_const) if c] + ["}"]

    numel = product(sizes)
    lines = _header(node, b, fn)
    if vector:
        lines[0] += f", {lanes} elements at a time" + (f", up to {unroll} vectors a step" if unroll > 1 else "")
    pad = "  "
    # a symbolic space: the threads woken where this call's is large enough
    parallel = is_symbolic(numel) or numel >= PARALLEL_ELEMENTS
    when = f" if ({_c(numel)} >= {PARALLEL_ELEMENTS})" if is_symbolic(numel) else ""
    if parallel:
        lines.append(pad + (f"#pragma omp parallel for collapse({inner}) schedule(static)" if inner > 1
                            else "#pragma omp parallel for schedule(static)" if inner == 1 or vector
                            else "#pragma omp parallel for simd schedule(static)") + when)
    for d in range(inner):
        lines.append(f"{pad}for (int64_t {idx[d]} = 0; {idx[d]} < {_c(sizes[d])}; ++{idx[d]}) {{")
        pad += "  "

    def inner_loop(begin: int, end: int, step: int, body_lines: list[str]) -> list[str]:
        i = idx[inner]
        advance = f"{i} += {step}" if step > 1 else f"++{i}"
        return [f"{pad}for (int64_t {i} = {begin}; {i} < {end}; {advance}) {{",
                *[pad + "  " + line for line in body_lines], pad + "}"]
    if not vector:
        if not (rank == 1 and parallel):
            lines.append(pad + "#pragma omp simd")
        lines += inner_loop(0, _c(n_inner), 1, body_lines)
    else:
        if unroll > 1:
            lines += inner_loop(0, _c(unrolled_end), lanes * unroll, compute_unrolled())
        if is_symbolic(n_inner) or unrolled_end < n_inner:
            lines += inner_loop(_c(unrolled_end), _c(n_inner), lanes, body_lines)
    lines += [pad + line for line in tail_lines]
    for d in range(inner - 1, -1, -1):
        pad = pad[:-2]
        lines.append(pad + "}")
    lines.append("}")
    return "\n".join(lines)


def _unroll(vectors: int, ops: int) -> int:
    """Vectors a step of a 16-lane loop over `vectors` of them, for a body of `ops`: the largest
    power of two within UNROLL and UNROLLED_OPS that fits, so the 16-at-a-time loop after it has
    fewer than that many to go. (A 1,000-op region of the 30,000-op chain stays one vector a
    step: unrolled, GCC took minutes over it.)"""
    most = min(UNROLL, max(vectors, 1), max(UNROLLED_OPS // max(ops, 1), 1))
    return 1 << (most.bit_length() - 1)


def _name_values(b: _Body) -> None:
    """t<k> for node k's output; a reshape's output is its input's name."""
    for k, n in enumerate(b.body.nodes):
        b.names[id(n.outputs[0])] = b.operand(k, 0, n.inputs[0]) if n.op in VIEWS else f"t{k}"


def _header(node: Node, b: _Body, fn: str) -> list[str]:
    over = [str(s) for s in b.sizes] + ([f"d = {[str(s) for s in b.sizes_in]}"] if b.sizes_in else [])
    lines = [f"// {node.attrs['kernel']}: {len(b.body.nodes)} op(s) over [{', '.join(over[:len(b.sizes)])}]"
             + (f"; {over[-1]}" if b.sizes_in else ""),
             f"static void {fn}(const float* const* in, float* const* out, const int64_t* d) {{"]
    lines += [f"  const float* in{i} = in[{i}];" for i in range(len(b.body.inputs))]
    lines += [f"  float* out{j} = out[{j}];" for j in range(len(b.outs))]
    return lines


# ---- row kernels ------------------------------------------------------------------------------

@dataclass
class _Step:
    """One value a row kernel computes: per element of the row (`col`) or once per row."""
    name: str
    line: str                       # its C definition
    col: bool
    ready: int                      # the first pass that can compute it (after its reductions)
    deps: list[str] = field(default_factory=list)


@dataclass
class _Reduction:
    acc: str
    combine: str
    term: str                        # the step whose value is combined
    pass_: int


def _row_steps(b: _Body, varies) -> tuple[dict[str, _Step], list[_Reduction]]:
    """The body as steps and reductions, in order; `varies(lift)` says if a value varies along
    the row."""
    steps: dict[str, _Step] = {}
    reductions: list[_Reduction] = []

    def add(name, line, col, deps):
        known = [d for d in deps if d in steps]
        ready = max([steps[d].ready for d in known], default=0)
        steps[name] = _Step(name, line, col, ready, known)
        return name

    for o in b.ins:
        add(o.value, None, varies(tuple(n if s else 1 for n, s in zip(b.sizes, o.strides))), [])
    n_cols = math.prod(b.sizes[s] for s in b.space.columns())
    for k, n in enumerate(b.body.nodes):
        out = n.outputs[0]
        if n.op in VIEWS:
            b.names[id(out)] = b.operand(k, 0, n.inputs[0])
            continue
        col = varies(b.space.lift_of(out))
        args = [b.operand(k, i, v) for i, v in enumerate(data_inputs(n))]
        if n.op not in ROW_OPS:
            b.names[id(out)] = add(f"t{k}", f"{expression(n)(n, *args)};   // {n.op_type}", col,
                                   [a for a in args if a])
            continue
        row_op, x, results = ROW_OPS[n.op], args[0], {}
        for j, (combine, term) in enumerate(row_op.reductions):
            text = term.format(x=x, **results)
            if text != x:
                add(f"t{k}_{j}", f"{text};", True, [x, *results.values()])
                text = f"t{k}_{j}"
            deps = [text]
            p = steps[text].ready if text in steps else 0
            acc = f"a{k}_{j}"
            reductions.append(_Reduction(acc, combine, text, p))
            steps[acc] = _Step(acc, None, False, p + 1, deps)
            results[f"r{j}"] = acc
        line = row_op.result.format(x=x, n=c_float(n_cols), **results)
        b.names[id(out)] = add(f"t{k}", f"{line};   // {n.op_type}", col, [x, *results.values()])
    return steps, reductions


def _row_source(node: Node, b: _Body, fn: str) -> str:
    body, k = b.body, b.space.rows
    ops, outs = b.ins, b.outs
    row_sizes, row_strides = collapse(b.sizes[:k], [o.strides[:k] for o in ops + outs])
    col_sizes, col_strides = collapse(b.sizes[k:], [o.strides[k:] for o in ops + outs])
    ridx = [f"r{d}" for d in range(len(row_sizes))]
    cidx = [f"c{d}" for d in range(len(col_sizes))]
    pos = {id(o): j for j, o in enumerate(ops + outs)}

    def at(o: Operand) -> str:
        j = pos[id(o)]
        terms = [f"{i} * {s}" if s != 1 else i
                 for i, s in [*zip(ridx, row_strides[j]), *zip(cidx, col_strides[j])] if s]
        return f"{o.name}[{' + '.join(terms) or '0'}]"

    def varies_on_row(lift) -> bool:
        return any(lift[s] != 1 and b.sizes[s] != 1 for s in range(k, len(b.sizes)))

    steps, reductions = _row_steps(b, varies_on_row)
    loads = {o.value: o for o in ops}

    def define(name: str) -> str:
        s = steps[name]
        return f"const float {name} = {at(loads[name]) + ';' if name in loads else s.line}"

    def closure(targets: list[str]) -> list[str]:
        """The per-element steps targets need, in order."""
        need, todo = set(), [t for t in targets if t in steps and steps[t].col]
        while todo:
            t = todo.pop()
            if t not in need:
                need.add(t)
                todo += [d for d in steps[t].deps if steps[d].col]
        return [n for n in steps if n in need]

    def once(o: Operand, inner: bool) -> str:
        j = pos[id(o)]
        zero = [i for i, s, n in zip(ridx, row_strides[j], row_sizes) if s == 0 and n > 1]
        if inner:
            zero += [i for i, s, n in zip(cidx, col_strides[j], col_sizes) if s == 0 and n > 1]
        return f"if ({' && '.join(f'{i} == 0' for i in zero)}) " if zero else ""

    def col_loops(pad: str, lines_inner: list[str], clause: str) -> list[str]:
        out, p = [], pad
        for d, n in enumerate(col_sizes):
            if d == len(col_sizes) - 1:
                out.append(p + "#pragma omp simd" + clause)
            out.append(f"{p}for (int64_t {cidx[d]} = 0; {cidx[d]} < {n}; ++{cidx[d]}) {{")
            p += "  "
        out += [p + line for line in lines_inner]
        for _ in col_sizes:
            p = p[:-2]
            out.append(p + "}")
        return out

    col_outs = [(v, o) for v, o in zip(body.outputs, outs) if steps[b.names[id(v)]].col]
    row_outs = [(v, o) for v, o in zip(body.outputs, outs) if not steps[b.names[id(v)]].col]
    passes = max([r.pass_ for r in reductions], default=-1) + 1
    rows, cols = math.prod(row_sizes), math.prod(col_sizes)

    lines = _header(node, b, fn)
    lines[0] += f", {rows} row(s) of {cols}"
    pad = "  "
    if rows > 1 and rows * cols >= PARALLEL_ELEMENTS:
        lines.append(pad + "#pragma omp parallel for" + (f" collapse({len(ridx)})" if len(ridx) > 1 else "")
                     + " schedule(static)")
    for d, n in enumerate(row_sizes):
        lines.append(f"{pad}for (int64_t {ridx[d]} = 0; {ridx[d]} < {n}; ++{ridx[d]}) {{")
        pad += "  "
    done: set[str] = set()

    def per_row(ready: int) -> list[str]:
        made = [n for n, s in steps.items() if not s.col and n not in done and s.ready <= ready
                and not n.startswith("a")]
        done.update(made)
        return [define(n) for n in made]

    for p in range(passes):
        lines += [pad + line for line in per_row(p)]
        mine = [r for r in reductions if r.pass_ == p]
        lines += [f"{pad}float {r.acc} = {INIT[r.combine]};" for r in mine]
        inner = [define(n) for n in closure([r.term for r in mine])] + \
            [COMBINE[r.combine].format(acc=r.acc, x=r.term) for r in mine]
        clause = "".join(f" reduction({CLAUSE[c]} : {', '.join(r.acc for r in mine if r.combine == c)})"
                         for c in CLAUSE if any(r.combine == c for r in mine))
        lines += col_loops(pad, inner, clause)
    lines += [pad + line for line in per_row(passes)]
    if col_outs:
        inner = [define(n) for n in closure([b.names[id(v)] for v, _ in col_outs])] + \
            [f"{once(o, True)}{at(o)} = {b.names[id(v)]};" for v, o in col_outs]
        lines += col_loops(pad, inner, "")
    lines += [f"{pad}{once(o, False)}{at(o)} = {b.names[id(v)]};" for v, o in row_outs]
    for _ in row_sizes:
        pad = pad[:-2]
        lines.append(pad + "}")
    lines.append("}")
    return "\n".join(lines)


@native(fused("Region"), check=refusal, plain="all", name="generated")
def emit_region(node: Node, p: PartitionSource) -> None:
    """A generated C++ loop nest over the region's iteration space (kernels.py)."""
    orders = ([p.order(v) for v in node.inputs], [p.order(v) for v in node.outputs])
    made: list[GeneratedKernel] = []
    fn = p.define(lambda name: made.append(generated_kernel(node, name, orders=orders)) or made[0].source)
    p.call("kernel", fn, p.ids_of(p.out(node, j) for j in range(len(node.outputs))),
           p.ids_of(p.ref(v) for v in node.inputs), dims(made[0].sizes))
