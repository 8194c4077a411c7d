"""Generated row kernels: RMS normalization, which oneDNN 3.2 lacks, as one C++ pass per row.

    x [rows, cols] (the axes before `axis` are the rows)  →  y = (x + r) · scale / √(mean((x + r)²) + ε)

Each row is read twice from cache: a vectorised sum of squares, then the scaled store. Rows go
to OpenMP threads where the tensor is large enough to pay for waking them. The row count may be
symbolic (a batch, a sequence): the kernel then reads it as d[0]; a row's length is static. As the RMSNorm node
of LLaMA-style blocks, and as the normalizing half of NormMatMul (the rule folded the scale into
the GEMM's weight), whose linear layer then runs on oneDNN.
"""
from __future__ import annotations

from ...ir import Node
from ...ir.builder import fused
from ...ir.scalar import c_float
from ...ir.symbolic import is_symbolic, product
from .emit import PartitionSource, dims
from .impls import _is_linear, _linear_weights, constant, dense, first, native, node_acts
from .kernels import PARALLEL_ELEMENTS


def rms_norm_source(fn: str, rows, cols: int, epsilon: float, scale: bool,
                    residual: bool) -> str:
    """`fn(in, out, d)`: in = x, then the residual and the scale where present; a symbolic row
    count is d[0]."""
    slot = {name: i for i, name in enumerate(["x"] + ["r"] * residual + ["w"] * scale)}
    value = "(x[c] + r[c])" if residual else "x[c]"
    n = "d[0]" if is_symbolic(rows) else rows
    parallel = ("#pragma omp parallel for schedule(static)" +
                (f" if (d[0] * {cols} >= {PARALLEL_ELEMENTS})" if is_symbolic(rows) else "")
                if is_symbolic(rows) or (rows > 1 and rows * cols >= PARALLEL_ELEMENTS) else "")
    return "\n".join(filter(None, [
        f"// RMS normalization of {rows} row(s) of {cols}",
        f"static void {fn}(const float* const* in, float* const* out, const int64_t* d) {{",
        f"  {parallel}" if parallel else None,
        f"  for (int64_t i = 0; i < {n}; ++i) {{",
        f"    const float* x = in[{slot['x']}] + i * {cols};",
        f"    const float* r = in[{slot['r']}] + i * {cols};" if residual else None,
        f"    const float* w = in[{slot['w']}];" if scale else None,
        f"    float* y = out[0] + i * {cols};",
        "    float sum = 0.f;",
        "    #pragma omp simd reduction(+ : sum)",
        f"    for (int64_t c = 0; c < {cols}; ++c) sum += {value} * {value};",
        f"    const float inv = 1.f / sqrtf(sum * {c_float(1 / cols)} + {c_float(epsilon)});",
        "    #pragma omp simd",
        f"    for (int64_t c = 0; c < {cols}; ++c) y[c] = {value} * inv" + (" * w[c];" if scale else ";"),
        "  }",
        "}"]))


def _rows(node: Node, axis: int) -> tuple:
    shape = node.inputs[0].shape
    return product(shape[:axis]), product(shape[axis:])


def _row_sizes(rows) -> list:
    """The kernel's d: the row count where it is symbolic."""
    return [rows] if is_symbolic(rows) else []


def check_rms_norm(node: Node) -> str | None:
    why = first(dense(node, (0,)), constant(node, 1, "scale"))
    if why:
        return why
    scale = node.input(1)
    cols = _rows(node, node.attr("axis", -1) % node.inputs[0].rank)[1]
    if is_symbolic(cols):
        return "its rows' length is symbolic: the generated pass reads a static one"
    return None if scale is None or scale.const.size == cols else \
        "the scale broadcasts over the normalized axes"


@native(fused("RMSNorm"), check=check_rms_norm, plain="all", name="generated")
def emit_rms_norm(node: Node, p: PartitionSource) -> None:
    """A generated pass per row (rows.py)."""
    axis = node.attr("axis", -1) % node.inputs[0].rank
    rows, cols = _rows(node, axis)
    scale = node.input(1)
    fn = p.define(lambda name: rms_norm_source(name, rows, cols, node.attr("epsilon", 1e-6),
                                               scale is not None, False))
    ins = [p.ref(node.inputs[0])] + ([p.const(scale.const.reshape(-1), scale.name)] if scale is not None else [])
    p.call("kernel", fn, p.ids_of([p.out(node)]), p.ids_of(ins), dims(_row_sizes(rows)))


def check_rms_norm_matmul(node: Node) -> str | None:
    if node.attr("norm") != "RMSNorm":
        return "a LayerNorm: the runtime's layer norm runs it"
    return first(dense(node), None if _is_linear(node) else "not a linear layer",
                 None if node.input(3) is None or node.input(3).shape == node.inputs[0].shape else
                 "the residual broadcasts",
                 "its rows' length is symbolic: the generated pass reads a static one"
                 if is_symbolic(node.inputs[0].shape[-1]) else None)


@native(fused("NormMatMul"), check=check_rms_norm_matmul, plain=(0, 3), name="generated",
        reduced=True)
def emit_rms_norm_matmul(node: Node, p: PartitionSource) -> None:
    """RMS normalization of (x + residual) into a dense temporary (a generated pass per row),
    then oneDNN's linear layer on the weight the rule folded the scale into."""
    x, residual = node.inputs[0], node.input(3)
    rows, cols = _rows(node, x.rank - 1)
    w, bias = _linear_weights(node)
    normed = p.temp(list(x.shape), plain=True)
    fn = p.define(lambda name: rms_norm_source(name, rows, cols, node.attr("epsilon", 1e-6), False,
                                               residual is not None))
    ins = [p.ref(x)] + ([p.ref(residual)] if residual is not None else [])
    p.call("kernel", fn, p.ids_of([normed]), p.ids_of(ins), dims(_row_sizes(rows)))
    p.call("linear", p.out(node), normed, p.const(w, node.inputs[1].name),
           -1 if bias is None else p.const(bias, f"{node.name}_bias"), p.acts(node_acts(node)))
