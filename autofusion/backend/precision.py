"""Reduced precision: what this CPU can compute in, and the guard that keeps each fused op within
tolerance of fp32.

    resolve  the precision asked for → what convolutions and products compute in here, and why
             (bf16 needs avx512_bf16 or AMX; no fp16 arithmetic here means fp16 runs as bf16;
             int8 needs VNNI, and what its guard keeps in float runs as bf16 would)
    guard    every node the plan runs in bf16, on calibration values propagated in fp32 from the
             model's inputs: its output with its operands rounded to bf16 (what oneDNN's bf16
             kernels read; products accumulate in fp32, and a result kept in bf16 is rounded
             too) against its unfused fp32 form (the fused op's decomposition into standard
             ops). A node whose error exceeds the tolerance stays fp32. Error: the largest
             absolute difference over the reference's largest magnitude.

The guard emulates the bf16 kernels on PyTorch (rounding is exact; summation order differs by
fp32 rounding only); the end-to-end error it reports is measured on the real compiled model.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import AutofusionError
from ..ir import FUSED_DOMAIN, DType, Graph, Node, Value
from ..ir.feeds import random_feeds
from ..ir.fused_ops import decompose
from .executor import evaluate_node
from .lower import Plan, bf16_operands
from .native.build import has_vnni

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
TOLERANCE = 2e-2   # per fused op, relative to its output's largest magnitude


@functools.cache
def cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def has_bf16() -> bool:
    """Native bf16 dot products: AVX-512 BF16 (Zen 4, Cooper Lake) or AMX (Sapphire Rapids)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def has_fp16() -> bool:
    return bool({"avx512_fp16", "amx_fp16"} & cpu_flags())


@dataclass(frozen=True)
class Precision:
    requested: str
    compute: str           # what native convolutions and products not in int8 compute in: fp32 | bf16
    note: str = ""         # why compute differs from what was asked, if it does
    int8: bool = False     # products quantized to int8 where the int8 guard allows (backend/int8.py)


def resolve(requested: str, native: bool = True) -> Precision:
    """What `requested` computes in on this machine; native: whether native code runs."""
    if requested not in PRECISIONS:
        raise AutofusionError(f"precision {requested!r}: choose one of {', '.join(PRECISIONS)}")
    if requested == "fp32":
        return Precision("fp32", "fp32")
    if not native:
        return Precision(requested, "fp32", f"{requested} needs the native backend; running fp32")
    if requested == "int8":
        rest = resolve("bf16")
        if not has_vnni():
            return Precision("int8", rest.compute, "this CPU has no VNNI (avx512_vnni, avx_vnni or amx_int8), "
                             f"so oneDNN's int8 products would not sum exactly: nothing in int8, running {rest.compute}")
        return Precision("int8", rest.compute, "" if rest.compute == "bf16" else
                         "products the int8 guard keeps in float run in fp32 (this CPU has no native bf16)", int8=True)
    if not has_bf16():
        return Precision(requested, "fp32", "this CPU has no native bf16 (avx512_bf16 or amx_bf16): "
                         "running fp32")
    if requested == "fp16":
        why = ("the native runtime has no fp16 kernels yet" if has_fp16() else
               "this CPU has no fp16 arithmetic (avx512_fp16 or amx_fp16)")
        return Precision("fp16", "bf16", f"{why}: convolutions and products run in bf16, the "
                         "fastest reduced format here, under the same guard")
    return Precision("bf16", "bf16")


# ---- calibration -----------------------------------------------------------------------------

def calibration_feeds(graph: Graph, calibration) -> dict[str, np.ndarray]:
    """The calibration inputs: random (None), a dict by input name, or an .npz file."""
    if calibration is None:
        return random_feeds(graph)
    if isinstance(calibration, (str, Path)):
        try:
            with np.load(calibration) as data:
                calibration = {k: data[k] for k in data.files}
        except (OSError, ValueError) as e:
            raise AutofusionError(f"{calibration}: cannot read calibration inputs (an .npz file "
                                  f"with one array per model input): {e}") from None
    feeds = {k: np.asarray(v.detach().numpy() if isinstance(v, torch.Tensor) else v)
             for k, v in dict(calibration).items()}
    missing = [v.name for v in graph.inputs if v.name not in feeds]
    if missing:
        raise AutofusionError(f"calibration inputs lack {missing}; the model's inputs are "
                              f"{[v.name for v in graph.inputs]}")
    return feeds


def calibration_sets(graph: Graph, calibration) -> list[dict[str, np.ndarray]]:
    """The calibration inputs as a list of input sets: a list or tuple gives several (int8's
    ranges are over all of them; the bf16 guard checks on the first), anything else one."""
    if isinstance(calibration, (list, tuple)):
        if not calibration:
            raise AutofusionError("calibration: an empty list of input sets")
        return [calibration_feeds(graph, c) for c in calibration]
    return [calibration_feeds(graph, calibration)]


def propagate(graph: Graph, feeds: dict[str, np.ndarray],
              held: dict[str, np.ndarray] | None = None) -> dict[Value, np.ndarray]:
    """Every value of the graph on these inputs, in fp32, node by node on PyTorch. held: the
    constants stored strided (a linear layer's weight held transposed) made dense once, by name,
    for several calls (each would copy them again: BERT-Base's 73 weights, 1.8 s over 8 sets)."""
    values: dict[Value, np.ndarray] = {v: feeds[v.name] for v in graph.inputs}

    def constant(v: Value) -> np.ndarray:
        if held is None or v.const.flags.c_contiguous:
            return v.const
        if v.name not in held:
            held[v.name] = np.ascontiguousarray(v.const)
        return held[v.name]

    for n in graph.nodes:
        outs = evaluate_node(n, [None if v is None else constant(v) if v.const is not None else values[v]
                                 for v in n.inputs])
        values.update(zip(n.outputs, outs))
    return values


# ---- the guard -------------------------------------------------------------------------------

def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if not ref.size:
        return 0.0
    scale = float(np.abs(ref).max())
    return float(np.abs(y - ref).max()) / (scale if scale > 0 else 1.0)


def output_error(y: np.ndarray, ref: np.ndarray) -> float | str:
    """A model output's relative_error against fp32, or why there is none: an output whose size
    depends on its values (the boxes a detector keeps) may have another shape at another
    precision."""
    y, ref = np.asarray(y), np.asarray(ref)
    if y.shape != ref.shape:
        return f"shape {list(y.shape)}, fp32's {list(ref.shape)}"
    return relative_error(y, ref)


def to_bf16(a: np.ndarray) -> np.ndarray:
    """a rounded to the nearest bf16 (ties to even), as fp32."""
    return torch.from_numpy(np.array(a, np.float32)).to(torch.bfloat16).float().numpy()


def unfused(node: Node, arrays: list) -> list[np.ndarray]:
    """The node's fp32 outputs through its decomposition into standard ops (itself if standard)."""
    if node.domain != FUSED_DOMAIN:
        return evaluate_node(node, arrays)
    body = decompose(node)   # its inputs are in0, in1, … by the node's input positions
    values = propagate(body, {f"in{i}": a for i, (v, a) in enumerate(zip(node.inputs, arrays))
                              if v is not None})
    return [values[v] for v in body.outputs]


def as_bf16(node: Node, arrays: list, bf16_output: bool) -> list[np.ndarray]:
    """The node's outputs with its product operands (activations and weights) in bf16."""
    picked = bf16_operands(node)
    g = Graph("guard", dict(node.graph.opset) if node.graph else None)
    ins: list[Value | None] = []
    args: list = []
    for i, (v, a) in enumerate(zip(node.inputs, arrays)):
        if v is not None and i in picked and v.dtype == DType.FLOAT:
            a = to_bf16(a)
        name = f"in{i}"
        ins.append(None if v is None else g.add_constant(name, a, v.dtype) if v.const is not None
                   else g.add_input(name, v.shape, v.dtype))
        args.append(a)
    copy = g.add_node(node.op_type, ins, [o.name for o in node.outputs], dict(node.attrs),
                      domain=node.domain, name=node.name)
    for o, c in zip(node.outputs, copy.outputs):
        c.shape, c.dtype = o.shape, o.dtype
    outs = evaluate_node(copy, args)
    return [to_bf16(y) for y in outs] if bf16_output else outs


@dataclass
class GuardedNode:
    node: str
    op: str
    error_reduced: float      # bf16 against the unfused fp32 form
    error_fp32: float         # the fused op in fp32 against the same
    kept_fp32: bool


@dataclass
class GuardReport:
    tolerance: float
    calibration: str                                  # "random" | "given"
    planned: dict[str, str]                           # node → its precision before the guard
    checked: list[GuardedNode] = field(default_factory=list)

    @property
    def kept(self) -> frozenset[str]:
        return frozenset(g.node for g in self.checked if g.kept_fp32)

    def precisions(self) -> dict[str, str]:
        """Every node's precision after the guard."""
        kept = self.kept
        return {n: "fp32" if n in kept else p for n, p in self.planned.items()}


def guard(graph: Graph, plan: Plan, values: dict[Value, np.ndarray], tolerance: float,
          calibration: str) -> GuardReport:
    """Check every node the plan runs in bf16 against its unfused fp32 form, on the fp32 values
    of the calibration inputs (propagate())."""
    reduced = [n for n in graph.nodes if plan.decisions[n].precision == "bf16"]
    report = GuardReport(tolerance, calibration, {n.name: d.precision for n, d in plan.decisions.items()})
    stored = {v for part in plan.partitions for v, vp in part.values.items() if vp.layout == "any" or vp.bf16}
    for n in reduced:
        arrays = [None if v is None else v.const if v.const is not None else values[v]
                  for v in n.inputs]
        ref = unfused(n, arrays)
        low = as_bf16(n, arrays, n.outputs[0] in stored)
        high = [values[v] for v in n.outputs]
        error = max(relative_error(y, r) for y, r in zip(low, ref))
        report.checked.append(GuardedNode(n.name, n.op_type, error,
                                          max(relative_error(y, r) for y, r in zip(high, ref)),
                                          error > tolerance))
    return report
