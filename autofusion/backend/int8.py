"""precision="int8": the calibration ranges and the guard that decides which products are int8,
and the step that does it all before the rules (quantize_int8).

    fold     each BatchNormalization folded into the Conv before it (the convolution made int8 is
             the folded one, as a quantizer's pre-processing writes it)
    ranges   each tensor's range over the calibration inputs, propagated in fp32: "minmax" (the
             smallest and largest value) or "percentile" (the 0.01st and 99.99th percentiles of
             each input set, the widest over the sets: a few outliers no longer stretch the scale
             every other value is rounded to)
    guard    each candidate product (passes/int8.py) on its fp32 calibration values: its input and
             weight rounded as the int8 op reads them, its output as it writes them, against its
             fp32 output. A product whose error exceeds the tolerance is not quantized; it stays
             in float (bf16 or fp32, as the bf16 guard decides after). Error: the relative RMS,
             ‖y − ref‖ / ‖ref‖ — rounding to 256 steps errs on every element (a step/√12 each), so
             the largest single difference, the bf16 guard's measure, would judge an int8 result
             by its worst rounding rather than by how much of the signal survives.

The guard checks each product alone, on exact inputs; the end-to-end error the report gives is
measured on the compiled model.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import AutofusionError
from ..fusion.rule import apply_rules
from ..fusion.rules.conv import FOLD_BATCH_NORM
from ..ir import Graph, Node, Value
from ..passes.int8 import Quantization, int8_weight, products, quantize, tensors, weight_axis
from .executor import evaluate_node
from .model import specialised_to
from .precision import propagate

METHODS = ("minmax", "percentile")
TOLERANCE = 5e-2       # a product's relative RMS error, int8 against fp32
PERCENTILES = (0.01, 99.99)


def resolve_method(method: str | None) -> str:
    method = method or "minmax"
    if method not in METHODS:
        raise AutofusionError(f"calibration_method {method!r}: choose one of {', '.join(METHODS)}")
    return method


def widen(found: dict[str, tuple[float, float]], values: dict[str, np.ndarray], names: set[str],
          method: str) -> None:
    """Widen found[name] = (low, high) by the named tensors' values of one calibration input set."""
    for name in names:
        a = np.asarray(values[name], np.float32)
        low, high = (float(a.min()), float(a.max())) if a.size and method == "minmax" else (np.nan, np.nan)
        if not (np.isfinite(low) and np.isfinite(high)):   # percentiles, or NaN or infinities to leave out
            a = a[np.isfinite(a)]
            if not a.size:
                continue
            low, high = ((float(a.min()), float(a.max())) if method == "minmax"
                         else tuple(float(p) for p in np.percentile(a, PERCENTILES)))
        seen = found.get(name)
        found[name] = (low, high) if seen is None else (min(seen[0], low), max(seen[1], high))


def relative_rms(y: np.ndarray, ref: np.ndarray) -> float:
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    norm = float(np.sqrt(np.mean(ref * ref))) if ref.size else 0.0
    error = float(np.sqrt(np.mean((y - ref) ** 2))) if ref.size else 0.0
    return error / (norm if norm > 0 else 1.0)


def int8_error(node: Node, values: dict[str, np.ndarray], x: Quantization, y: Quantization | None) -> float:
    """The product's relative RMS error with its input and weight quantized (and its output, y,
    where the int8 op requantizes it before anything else reads it)."""
    axis = weight_axis(node)
    w = node.inputs[1].const
    q, scale = int8_weight(w, axis)
    shape = [1] * w.ndim
    shape[axis] = -1
    arrays = [x.round_trip(values[node.inputs[0].name]), q.astype(np.float32) * scale.reshape(shape),
              *(None if v is None else v.const for v in node.inputs[2:])]
    out = evaluate_node(node, arrays)[0]
    return relative_rms(out if y is None else y.round_trip(out), values[node.outputs[0].name])


@dataclass
class Int8Check:
    node: str
    op: str
    error: float        # relative RMS, int8 against fp32
    kept_float: bool    # over the tolerance: not quantized


@dataclass
class Int8Report:
    method: str
    tolerance: float
    calibration: str                    # "random" | "given"
    sets: int                           # calibration input sets the ranges are over
    checked: list[Int8Check] = field(default_factory=list)
    tensors: int = 0                    # activations quantized
    folded: int = 0                     # BatchNormalizations folded into their convolutions first


def guard(products: list[Node], scaled_by: dict[Value, Value], quantizations: dict[str, Quantization],
          values: dict[str, np.ndarray], tolerance: float) -> list[Int8Check]:
    """Each product checked alone: int8 where its error is within the tolerance."""
    checks = []
    for n in products:
        x, y = n.inputs[0], n.outputs[0]
        qy = quantizations.get(scaled_by[y].name) if y in scaled_by else None
        error = int8_error(n, values, quantizations[scaled_by[x].name], qy)
        checks.append(Int8Check(n.name, n.op_type, error, error > tolerance))
    return checks


@dataclass
class Quantized:
    """The int8 step's findings, with the first calibration set and the fp32 model's outputs there."""
    report: Int8Report
    feeds: dict
    reference: dict


def quantize_int8(graph: Graph, sets: list[dict[str, np.ndarray]], calibration: str, method: str | None,
                  tolerance: float | None) -> Quantized:
    """Fold, calibrate on every input set, check each product alone on the first, and rewrite the
    graph (in place) with the products within the tolerance in int8 (passes/int8.py);
    calibration: "random" or "given", as the report says."""
    method = resolve_method(method)
    tolerance = TOLERANCE if tolerance is None else tolerance
    folded = apply_rules(graph, [FOLD_BATCH_NORM]).counts[FOLD_BATCH_NORM.name]
    candidates = products(graph)
    scaled_by = tensors(graph, set(candidates))
    names = {v.name for v in scaled_by.values()}
    found: dict[str, tuple[float, float]] = {}
    first: dict[str, np.ndarray] = {}
    held: dict[str, np.ndarray] = {}
    for feeds in sets:
        values = {v.name: a for v, a in propagate(specialised_to(graph, feeds), feeds, held).items()}
        widen(found, values, names, method)
        first = first or values
    quantizations = {name: Quantization.of_range(*found.get(name, (0.0, 0.0))) for name in names}
    report = Int8Report(method, tolerance, calibration, len(sets),
                        guard(candidates, scaled_by, quantizations, first, tolerance))
    chosen = [n for n, c in zip(candidates, report.checked) if not c.kept_float]
    quantized = {v: quantizations[s.name] for v, s in tensors(graph, set(chosen)).items()}
    quantize(graph, chosen, quantized)
    report.tensors, report.folded = len(quantized), folded
    return Quantized(report, sets[0], {v.name: first[v.name] for v in graph.outputs})
