"""Window geometry of ONNX's conv and pool ops, shared by their kernels and the conv rules."""
from __future__ import annotations

from .symbolic import add, ceildiv, floordiv, is_size, maximum, mul, sub


def split_total(totals: list, upper: bool) -> list:
    """Total padding per axis → ONNX [begins..., ends...]; SAME_UPPER puts the odd unit at the end."""
    small = [floordiv(t, 2) for t in totals]
    big = [sub(t, s) for t, s in zip(totals, small)]
    return small + big if upper else big + small


def explicit_pads(auto_pad: str, pads: list[int] | None, sizes, kernel, strides,
                  dilations) -> list | None:
    """The pads [begins..., ends...] a conv/pool uses, auto_pad resolved; None when SAME_* needs
    spatial `sizes` that are not all known. SAME_* on symbolic sizes gives symbolic pads."""
    nd = len(strides)
    if auto_pad == "VALID":
        return [0] * (2 * nd)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):   # output ceil(n / s), window (k-1)·d+1
        if sizes is None or not all(is_size(n) for n in sizes):
            return None
        totals = [maximum(add(mul(add(ceildiv(n, s), -1), s), sub((k - 1) * d + 1, n)), 0)
                  for n, k, s, d in zip(sizes, kernel, strides, dilations)]
        return split_total(totals, auto_pad == "SAME_UPPER")
    return list(pads or [0] * (2 * nd))
