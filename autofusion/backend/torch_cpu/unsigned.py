"""Unsigned integers wider than 8 bits (uint16, uint32, uint64) on PyTorch CPU.

PyTorch has the dtypes but few CPU kernels for them ("add_stub" not implemented for 'UInt32').
Each is computed exactly on the signed integer of the same width, viewing the same bits:

    wrapping   add, sub, mul, bitwise ops, left shift: two's complement arithmetic gives the
               same bits as unsigned arithmetic modulo 2^w, so they run on the view unchanged
    ordering   comparisons, min, max: flipping the sign bit maps unsigned order onto signed
               order (0 -> the signed minimum, 2^w - 1 -> the signed maximum)
    dividing   division and remainder: long division by halves (Hacker's Delight, divlu), a
               divisor of 2^(w-1) or more giving a quotient of 0 or 1
    shifting   right shift: arithmetic on the view, then the copied sign bits masked off

Each function takes and returns tensors of the unsigned dtype (comparisons return bool).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def is_wide_unsigned(dtype: torch.dtype | None) -> bool:
    return dtype in SIGNED


def _signed(x: torch.Tensor) -> torch.Tensor:
    return x.view(SIGNED[x.dtype])


def _ordered(s: torch.Tensor) -> torch.Tensor:
    """Signed bits whose signed order is the unsigned order of the same bits."""
    return s ^ torch.iinfo(s.dtype).min


def wrapping(fn: Callable) -> Callable:
    """fn on the signed views of same-typed operands, its result seen as the unsigned type."""
    def run(*xs: torch.Tensor) -> torch.Tensor:
        return fn(*(_signed(x) for x in xs)).view(xs[0].dtype)
    return run


def comparing(fn: Callable) -> Callable:
    """An unsigned comparison (a < b, ...) as the signed comparison of the order-mapped bits."""
    return lambda a, b: fn(_ordered(_signed(a)), _ordered(_signed(b)))


def extreme(fn: Callable) -> Callable:
    """An unsigned min or max (torch.minimum, torch.maximum) through the order-mapped bits."""
    return lambda a, b: _ordered(fn(_ordered(_signed(a)), _ordered(_signed(b)))).view(a.dtype)


def unsigned_where(cond: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(cond, _signed(a), _signed(b)).view(a.dtype)


def divmod_(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unsigned quotient and remainder (a division by zero raises, as for signed integers)."""
    dtype = a.dtype
    x, y = torch.broadcast_tensors(_signed(a), _signed(b))
    top = torch.iinfo(x.dtype).max
    big = y < 0                                # divisor >= 2^(w-1): the quotient is 0 or 1
    q_big = (_ordered(x) >= _ordered(y)).to(x.dtype)
    # else: halve the dividend (a logical shift keeps it non-negative), divide as signed, double;
    # the remainder left is under twice the divisor, so at most one more subtraction
    q = torch.div((x >> 1) & top, torch.where(big, 1, y), rounding_mode="trunc") << 1
    r = x - q * y
    more = _ordered(r) >= _ordered(y)
    q = torch.where(big, q_big, q + more.to(x.dtype))
    r = x - q * y
    return q.view(dtype), r.view(dtype)


def unsigned_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return divmod_(a, b)[0]


def unsigned_mod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return divmod_(a, b)[1]   # fmod and Python's mod agree where nothing is negative


def unsigned_shift(x: torch.Tensor, n: torch.Tensor, left: bool) -> torch.Tensor:
    """x << n or x >> n (logical); a count of the bit width or more gives 0, as ONNX says."""
    s, count = _signed(x), _signed(n)          # a count of 2^(w-1) or more reads negative
    w = torch.iinfo(s.dtype).bits
    out = (count < 0) | (count >= w)
    count = count.clamp(0, w - 1)
    if left:
        y = s << count
    else:   # arithmetic shift, then keep the low w - count bits: ((1 << (w-1-n)) << 1) - 1
        y = (s >> count) & (((torch.ones_like(count) << (w - 1 - count)) << 1) - 1)
    return torch.where(out, 0, y).view(x.dtype)
