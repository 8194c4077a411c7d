"""Generated kernels: an automatic fusion region → one C++ loop nest over its iteration space.

    shape     the region's iteration space S (every value of the body broadcasts to it); each
              operand, input or output, gets strides over S (0 along the axes it broadcasts)
    collapse  adjacent axes every operand walks contiguously merge into one, and unit axes go,
              so [1,64,112,112] with a [1,64,1,1] scale is two loops: 64 × 12544
    loops     the outer axes in one OpenMP loop where the space is large enough to pay for
              waking the threads; the innermost axis a `#pragma omp simd` loop of one scalar
              expression per op (ir/scalar.py), which the compiler vectorises
    outputs   an output smaller than S (a value that also leaves the region before a broadcast)
              is stored where the axes it broadcasts along are at 0: each element once; one
              constant along the innermost axis after the vector loop, from its first element

All arithmetic is float32. Sizes are static (native partitions are specialised per shape).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir import DType, Graph, Node
from ...ir.builder import fused
from ...ir.dims import broadcast_shapes
from ...ir.fused_ops import typed_body
from ...ir.scalar import c_float, expression
from .emit import PartitionSource
from .impls import native

PARALLEL_ELEMENTS = 1 << 15   # below this, one thread is faster than waking the others


@dataclass
class Operand:
    name: str                 # in0 / out1
    strides: list[int]        # over the iteration space, 0 along broadcast axes


def iteration_space(body: Graph) -> tuple[int, ...]:
    return tuple(broadcast_shapes(*(v.shape for n in body.nodes for v in n.outputs)))


def strides_over(shape: tuple, space: tuple) -> list[int]:
    """The strides of a dense row-major `shape` broadcast to `space` (right-aligned)."""
    shape = (1,) * (len(space) - len(shape)) + tuple(shape)
    out, step = [0] * len(space), 1
    for d in range(len(space) - 1, -1, -1):
        out[d] = step if shape[d] != 1 else 0
        step *= shape[d]
    return out


def collapse(space: list[int], operands: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge axis d into d+1 where every operand steps over d as one run of d+1; drop unit axes."""
    keep = [d for d, n in enumerate(space) if n != 1]
    sizes = [space[d] for d in keep]
    strides = [[s[d] for d in keep] for s in operands]
    d = len(sizes) - 2
    while d >= 0:
        if all(s[d] == s[d + 1] * sizes[d + 1] for s in strides):
            sizes[d + 1] *= sizes[d]
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
    for v in [*body.inputs, *(o for n in body.nodes for o in n.outputs)]:
        if v.dtype != DType.FLOAT:
            return f"{v.name!r} is not float32"
        if not v.is_static:
            return f"{v.name!r} has shape {v.type_str()}: generated kernels need static shapes"
    for v in body.constants.values():
        if v.const.size != 1:
            return f"its constant {v.name!r} is not a scalar"
    for n in body.nodes:
        if expression(n) is None:
            return f"{n.op} has no scalar expression"
    try:
        iteration_space(body)
    except ValueError as e:
        return str(e)
    return None


def kernel_source(node: Node, fn: str) -> str:
    """The C++ function `fn(in, out)` computing the region node."""
    body = typed_body(node)
    space = list(iteration_space(body))
    names: dict[int, str] = {}
    for v in body.constants.values():
        names[id(v)] = c_float(v.const.reshape(-1)[0])
    ops = [Operand(f"in{i}", strides_over(v.shape, space)) for i, v in enumerate(body.inputs)]
    outs = [Operand(f"out{j}", strides_over(v.shape, space)) for j, v in enumerate(body.outputs)]
    sizes, strides = collapse(space, [o.strides for o in ops + outs])
    for o, s in zip(ops + outs, strides):
        o.strides = s
    rank, inner = len(sizes), len(sizes) - 1
    idx = [f"i{d}" for d in range(rank)]

    def at(o: Operand, index: dict[str, str]) -> str:
        terms = [f"{i} * {s}" if s != 1 else i for i, s in zip(idx, o.strides)
                 if s and index.get(i) != "0"]
        return f"{o.name}[{' + '.join(terms) or '0'}]"

    def compute(index: dict[str, str]) -> list[str]:
        lines = [f"const float x{i} = {at(o, index)};" for i, o in enumerate(ops)]
        for k, n in enumerate(body.nodes):
            args = [None if v is None else names[id(v)] for v in n.inputs]
            lines.append(f"const float t{k} = {expression(n)(n, *args)};   // {n.op_type}")
        return lines

    def store(v, o: Operand, index: dict[str, str]) -> str:
        line = f"{at(o, index)} = {names[id(v)]};"
        once = [f"{i} == 0" for i, s, n in zip(idx, o.strides, sizes) if s == 0 and n > 1 and i not in index]
        return f"if ({' && '.join(once)}) {line}" if once else line

    for i, v in enumerate(body.inputs):
        names[id(v)] = f"x{i}"
    for k, n in enumerate(body.nodes):
        names[id(n.outputs[0])] = f"t{k}"
    # outputs constant along the inner axis are stored after the vector loop, from its first
    # element recomputed, so no store in the vector loop is conditional on the inner index
    inner_const = [o.strides[inner] == 0 and sizes[inner] > 1 for o in outs]
    body_lines = compute({}) + [store(v, o, {}) for v, o, c in zip(body.outputs, outs, inner_const) if not c]
    tail_lines = []
    if any(inner_const):
        first = {idx[inner]: "0"}
        tail_lines = ["{"] + ["  " + line for line in compute(first)] + \
            ["  " + store(v, o, first) for v, o, c in zip(body.outputs, outs, inner_const) if c] + ["}"]

    numel = math.prod(sizes)
    lines = [f"// {node.attrs['kernel']}: {len(body.nodes)} op(s) over {list(space)}",
             f"static void {fn}(const float* const* in, float* const* out) {{"]
    lines += [f"  const float* in{i} = in[{i}];" for i in range(len(ops))]
    lines += [f"  float* out{j} = out[{j}];" for j in range(len(outs))]
    pad = "  "
    if numel >= PARALLEL_ELEMENTS:
        lines.append(pad + (f"#pragma omp parallel for collapse({inner}) schedule(static)" if inner > 1
                            else "#pragma omp parallel for schedule(static)" if inner == 1
                            else "#pragma omp parallel for simd schedule(static)"))
    for d in range(rank):
        if d == inner and not (rank == 1 and numel >= PARALLEL_ELEMENTS):
            lines.append(pad + "#pragma omp simd")
        lines.append(f"{pad}for (int64_t i{d} = 0; i{d} < {sizes[d]}; ++i{d}) {{")
        pad += "  "
    lines += [pad + line for line in body_lines]
    pad = pad[:-2]
    lines.append(pad + "}")
    lines += [pad + line for line in tail_lines]
    for d in range(rank - 1, 0, -1):
        pad = pad[:-2]
        lines.append(pad + "}")
    lines.append("}")
    return "\n".join(lines)


@native(fused("Region"), check=refusal, plain="all", name="generated")
def emit_region(node: Node, p: PartitionSource) -> str:
    """A generated C++ loop nest over the region's iteration space (kernels.py)."""
    fn = p.define(lambda name: kernel_source(node, name))
    outs = "{" + ", ".join(str(p.out(node, j)) for j in range(len(node.outputs))) + "}"
    ins = "{" + ", ".join(str(p.ref(v)) for v in node.inputs) + "}"
    return p.call("kernel", fn, outs, ins)
