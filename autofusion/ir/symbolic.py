"""Sizes computed from symbolic ones: the dims a graph derives from its inputs' symbolic dims.

A dim is an int (a size), a str (a symbol: a size known when a call gives it, as a model input
declares "batch" or "height"), a SizeExpr (a size computed from symbols: a strided convolution's
`(height + 1) // 2`, a Concat's `s + 1`), or None (unknown). The functions here compute with the
first three and give None where an operand is None:

    add, sub, mul       integer polynomials over symbols
    floordiv, ceildiv   by a positive int
    maximum, minimum

Every result is in one canonical form, so two spellings of one size are one value and compare
equal: a polynomial (monomials of atoms, each with an int coefficient; the constant's monomial
is empty) whose atoms are symbols and the floor divisions, maxima and minima nothing simplified
further. Results that are an int or a lone symbol come back as those, never as a SizeExpr. The
rules are exact for every integer value of the symbols:

    floor((k·q + r) / k) = q + floor(r / k)           (q, r polynomials, k > 0)
    floor((floor(x / m) + c) / n) = floor((x + c·m) / (m·n))      (m, n > 0)
    max(a, b) = a where a - b ≥ 0 for every value of the symbols, which are sizes of at least 1
                (a lower bound of a - b shows it: a sum of atoms with coefficients ≥ 0, each
                atom bounded below, plus a constant)

so a ResNet's `floor((h + 2 - 3) / 2) + 1` after its stem is `(h + 1) // 2`, the same as its
strided 1x1 shortcut's `floor((h - 1) / 2) + 1`, and five stride-2 steps on are `(h + 31) // 32`.
What is not proven equal stays apart (the rules never guess): a shape check then refuses, which
costs a fusion, never a wrong answer.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping

Atom = "str | tuple"        # a symbol, or (op, args...): ("//", SizeExpr | str, k), ("max", ...), ("min", ...)
Poly = dict                 # monomial (a sorted tuple of atoms) -> int coefficient; () is the constant


class SizeExpr:
    """A size computed from symbols, in canonical form (see the module's docstring). Immutable
    and hashable; equal when the canonical forms are."""
    __slots__ = ("terms", "_hash")

    def __init__(self, terms: tuple):
        self.terms = terms   # ((monomial, coefficient), ...) sorted by monomial, no zero coefficient
        self._hash = hash(terms)

    def __eq__(self, other) -> bool:
        return isinstance(other, SizeExpr) and self._hash == other._hash and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        text = python(self)   # a lone floor division without its outer parentheses
        return text[1:-1] if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1 \
            and not isinstance(self.terms[0][0][0], str) and self.terms[0][0][0][0] == "//" else text

    __str__ = __repr__

    # the arithmetic operators, so rules can write `d + 1` and `2 * d` for any dim but None
    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        return sub(self, other)

    def __rsub__(self, other):
        return sub(other, self)

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, k):
        return floordiv(self, k)


Dim = "int | str | SizeExpr | None"


def is_size(d) -> bool:
    """Whether d is a size the graph can tell at run time: an int, a symbol or a SizeExpr."""
    return isinstance(d, (int, str, SizeExpr))


def names_and_sizes(shape):
    """The shape with each computed size unknown (None): what a format that holds only sizes and
    symbols' names (ONNX's dim_value and dim_param) can say of it."""
    return None if shape is None else tuple(None if isinstance(d, SizeExpr) else d for d in shape)


def is_symbolic(d) -> bool:
    return isinstance(d, (str, SizeExpr))


def symbols(d) -> set[str]:
    """The symbols a dim is computed from."""
    if isinstance(d, str):
        return {d}
    if not isinstance(d, SizeExpr):
        return set()
    out: set[str] = set()
    for monomial, _ in d.terms:
        for atom in monomial:
            out |= _atom_symbols(atom)
    return out


def _atom_symbols(atom) -> set[str]:
    if isinstance(atom, str):
        return {atom}
    return set().union(*(symbols(a) for a in atom[1:] if not isinstance(a, int)))


# ---- canonical polynomials -----------------------------------------------------------------

def _key(atom) -> tuple:
    """A total order on atoms: symbols first, by name; then operations, by their arguments."""
    if isinstance(atom, str):
        return (0, atom)
    return (1, atom[0], tuple(_dim_key(a) for a in atom[1:]))


def _dim_key(d) -> tuple:
    if isinstance(d, int):
        return (0, d)
    if isinstance(d, str):
        return (1, d)
    return (2, tuple((tuple(_key(a) for a in m), c) for m, c in d.terms))


def _poly(d) -> Poly:
    if isinstance(d, bool):
        raise TypeError("a bool is not a dim")
    if isinstance(d, int):
        return {(): d} if d else {}
    if isinstance(d, str):
        return {(d,): 1}
    if isinstance(d, SizeExpr):
        return dict(d.terms)
    raise TypeError(f"{d!r} is not a dim")


def _dim(p: Poly):
    """The canonical dim of a polynomial: an int, a lone symbol, or a SizeExpr."""
    p = {m: c for m, c in p.items() if c}
    if not p:
        return 0
    if len(p) == 1:
        ((m, c),) = p.items()
        if not m:
            return c
        if c == 1 and len(m) == 1 and isinstance(m[0], str):
            return m[0]
    return SizeExpr(tuple(sorted(p.items(), key=lambda t: tuple(_key(a) for a in t[0]))))


def _monomial(*atoms) -> tuple:
    return tuple(sorted(atoms, key=_key))


def add(*dims):
    if any(d is None for d in dims):
        return None
    out: Poly = {}
    for d in dims:
        for m, c in _poly(d).items():
            out[m] = out.get(m, 0) + c
    return _dim(out)


def neg(d):
    return None if d is None else _dim({m: -c for m, c in _poly(d).items()})


def sub(a, b):
    return None if a is None or b is None else add(a, neg(b))


def mul(a, b):
    if a is None or b is None:
        return None
    out: Poly = {}
    for ma, ca in _poly(a).items():
        for mb, cb in _poly(b).items():
            m = _monomial(*ma, *mb)
            out[m] = out.get(m, 0) + ca * cb
    return _dim(out)


def product(dims: Iterable):
    out = 1
    for d in dims:
        out = mul(out, d)
    return out


def floordiv(a, k: int):
    """floor(a / k) for an int k > 0."""
    if a is None:
        return None
    if not isinstance(k, int) or k <= 0:
        raise ValueError(f"a dim divided by {k!r}: only positive ints divide dims")
    if isinstance(a, int):
        return a // k
    p = _poly(a)
    quotient = {m: c // k for m, c in p.items()}
    rest = {m: c % k for m, c in p.items() if c % k}
    if all(not m for m in rest):   # the rest is a constant in [0, k)
        return _dim(quotient)
    inner = [(m, c) for m, c in rest.items() if m]
    if len(inner) == 1 and inner[0][1] == 1 and len(inner[0][0]) == 1 and \
            not isinstance(inner[0][0][0], str) and inner[0][0][0][0] == "//":
        _, x, m = inner[0][0][0]   # floor((floor(x / m) + c) / k) = floor((x + c·m) / (m·k))
        return add(_dim(quotient), floordiv(add(x, rest.get((), 0) * m), m * k))
    return add(_dim(quotient), _dim({(("//", _dim(rest), k),): 1}))


def ceildiv(a, k: int):
    """ceil(a / k) for an int k > 0."""
    return None if a is None else floordiv(add(a, k - 1), k)


def maximum(*dims):
    return _extreme("max", dims)


def minimum(*dims):
    return _extreme("min", dims)


def _extreme(op: str, dims) -> object:
    if any(d is None for d in dims):
        return None
    args: list = []
    for d in dims:   # max(max(a, b), c) is max(a, b, c)
        p = _poly(d)
        if len(p) == 1 and (m := next(iter(p))) and len(m) == 1 and p[m] == 1 and \
                not isinstance(m[0], str) and m[0][0] == op:
            args.extend(m[0][1:])
        else:
            args.append(d)
    kept: list = []
    for d in args:   # drop what another argument bounds: for max, what is ≤ another
        if any(_dominates(e, d, op) for e in kept):
            continue
        kept = [e for e in kept if not _dominates(d, e, op)] + [d]
    if len(kept) == 1:
        return kept[0]
    return _dim({(((op,) + tuple(sorted(kept, key=_dim_key))),): 1})


def _dominates(a, b, op: str) -> bool:
    """Whether a ≥ b (op "max") or a ≤ b (op "min") for every value of the symbols: shown by a
    lower bound of their difference, or b is the other extreme of terms that include a
    (max(a, min(a, c)) = a)."""
    if isinstance(b, SizeExpr) and len(b.terms) == 1 and b.terms[0][1] == 1 and len(b.terms[0][0]) == 1:
        atom = b.terms[0][0][0]
        if not isinstance(atom, str) and atom[0] == ("min" if op == "max" else "max") and a in atom[1:]:
            return True
    diff = sub(a, b) if op == "max" else sub(b, a)
    return nonnegative(diff)


def where_nonempty(d):
    """d where it is at least 1: max(0, e, ...) is max(e, ...) there. A native partition is set up
    only for sizes that make every dim at least 1 (program.py out_of_reach), so its steps may compare
    dims this way: a Slice's `max(0, t - 1)` is its neighbour's `t - 1`."""
    if isinstance(d, SizeExpr) and len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1:
        atom = d.terms[0][0][0]
        if not isinstance(atom, str) and atom[0] == "max" and 0 in atom[1:]:
            return maximum(*(a for a in atom[1:] if a != 0))
    return d


def same_where_nonempty(a: tuple | None, b: tuple | None) -> bool:
    """Whether two shapes are one wherever every dim is at least 1 (where_nonempty)."""
    return a is not None and b is not None and len(a) == len(b) and \
        all(x == y or (x is not None and where_nonempty(x) == where_nonempty(y)) for x, y in zip(a, b))


def nonnegative(d) -> bool:
    """Whether d ≥ 0 for every value of its symbols (each a size of at least 1) — as far as a
    lower bound shows."""
    low = lower_bound(d)
    return low is not None and low >= 0


def lower_bound(d) -> int | None:
    """A bound d never goes below, symbols being sizes of at least 1; None where none is shown.
    (A model call whose sizes include a 0 runs on PyTorch's kernels, which need no bound.)"""
    if isinstance(d, int):
        return d
    total = 0
    for m, c in _poly(d).items():
        if not m:
            total += c
            continue
        lows = [_atom_lower_bound(a) for a in m]
        if c < 0 or any(low is None or low < 0 for low in lows):
            return None   # a bound from below needs each term to grow with its atoms
        total += c * math.prod(lows)
    return total


def _atom_lower_bound(atom) -> int | None:
    if isinstance(atom, str):
        return 1
    op, *args = atom
    if op == "//":
        low = lower_bound(args[0])
        return None if low is None else low // args[1]
    lows = [lower_bound(a) for a in args]
    if op == "max":
        known = [low for low in lows if low is not None]
        return max(known) if known else None
    return None if None in lows else min(lows)


def exact_quotient(a, b):
    """a / b where b divides a for every value of the symbols (b a monomial times an int that
    divides every coefficient of a: [b, s, 768] over [b, 12, 64] is s); None where not shown."""
    if a is None or b is None:
        return None
    pb = _poly(b)
    if len(pb) != 1:
        return None
    ((mb, cb),) = pb.items()
    if cb == 0:
        return None
    out: Poly = {}
    for m, c in _poly(a).items():
        rest = list(m)
        for atom in mb:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % cb:
            return None
        out[tuple(rest)] = c // cb
    return _dim(out)


# ---- values ----------------------------------------------------------------------------------

def evaluate(d, sizes: Mapping[str, int]) -> int:
    """The size d stands for, given each symbol's; KeyError for a symbol sizes lacks."""
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        return sizes[d]
    if d is None:
        raise ValueError("an unknown dim has no size")
    total = 0
    for m, c in d.terms:
        term = c
        for atom in m:
            term *= _evaluate_atom(atom, sizes)
        total += term
    return total


def _evaluate_atom(atom, sizes: Mapping[str, int]) -> int:
    if isinstance(atom, str):
        return sizes[atom]
    op, *args = atom
    if op == "//":
        return evaluate(args[0], sizes) // args[1]
    values = [evaluate(a, sizes) for a in args]
    return max(values) if op == "max" else min(values)


def python(d, name: Callable[[str], str] = str) -> str:
    """d as a Python expression over the symbols, each written `name(symbol)`."""
    if isinstance(d, int):
        return str(d)
    if isinstance(d, str):
        return name(d)
    return _render(_poly(d), lambda atom: _python_atom(atom, name))


def c_expr(d) -> str:
    """d as a C expression over its symbols (their names as they are: `d[0]`), for sizes, which
    are never negative: a floor division is C's `/`."""
    return python(d).replace("//", "/")


def _python_atom(atom, name: Callable[[str], str] = str) -> str:
    if isinstance(atom, str):
        return name(atom)
    op, *args = atom
    if op == "//":
        x = args[0]
        return f"({python(x, name) if isinstance(x, str) else '(' + python(x, name) + ')'} // {args[1]})"
    return f"{op}({', '.join(python(a, name) for a in args)})"


def _render(p: Poly, atom: Callable) -> str:
    parts = []
    for m, c in sorted(p.items(), key=lambda t: (not t[0], tuple(_key(a) for a in t[0]))):
        if not m:
            parts.append(str(c))
            continue
        factors = " * ".join(atom(a) for a in m)
        parts.append(factors if c == 1 else f"-{factors}" if c == -1 else f"{c} * {factors}")
    text = " + ".join(parts)
    return text.replace("+ -", "- ")


def compile_sizes(dims: list, symbols_in: list[str]) -> Callable[..., tuple]:
    """One Python function computing every dim of `dims` from the symbols' sizes, given in the
    order of `symbols_in`: what a new set of input sizes costs to evaluate (no interpretation)."""
    index = {s: i for i, s in enumerate(symbols_in)}
    body = ", ".join(python(d, lambda s: f"s[{index[s]}]") for d in dims)
    return eval(f"lambda s: ({body}{',' if len(dims) == 1 else ''})", {"max": max, "min": min})
