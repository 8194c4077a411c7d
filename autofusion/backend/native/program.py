"""A native partition's program: the runtime calls that build it, as data.

Lowering decides (lower.py), the emitters write each node's calls (impls.py, through emit.py),
and the runtime (runtime/program.cpp) reads them: declare the partition's values, then node by
node create the primitives, which oneDNN sizes for the dims the calls carry. Nothing about a
model is compiled but its generated loop nests (kernels.py), so a model with none builds no C++.

A dim a call carries may be symbolic (ir/symbolic.py): a program is made once per model and
set up for each new set of input sizes by evaluating its symbolic dims, all of them in one
compiled Python function, into the words the runtime reads. Encoded, each call is its method's
name, its argument count, then each argument with a tag:

    Int    [0, value]                           ids, counts, flags, enum-free ints
    Float  [1, float32 bits]
    List   [2, n, value × n]                    dims (symbolic ones filled per size set), ids
    Acts   [3, n, (name, alpha bits, beta bits) × n]   activations, by oneDNN-style name
    Name   [4, index]                           into the program's strings: a node's name, an
                                                enum value ("Pool::Max", "Layout::Plain")
    Kernel [5, index]                           into the model's generated kernels
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...ir import DType, Value
from ...ir.scalar import c_float
from ...ir.symbolic import compile_sizes, is_symbolic, symbols

INT, FLOAT, LIST, ACTS, NAME, KERNEL = range(6)
SHAPES = {"input": 2, "output": 2, "constant": 2, "value": 1}   # the calls declaring a value: its dims' argument
# the types a value holds other than f32, as runtime/native.h's Type names them (a `typed` call
# after its declaration says so)
VALUE_TYPES = {DType.UINT8: "U8", DType.INT8: "S8"}


class Dims(tuple):
    """A list of dims (ints, or symbolic: filled when the program is set up for sizes)."""


class Ids(tuple):
    """A list of value ids."""


class Acts(tuple):
    """Activations, each (name, alpha, beta) as runtime/native.h's Alg names them."""


@dataclass(frozen=True)
class Name:
    """An enum value or a node's name, passed as its text."""
    text: str


@dataclass(frozen=True)
class Kernel:
    """A generated kernel, by its index in the model's kernel library."""
    index: int
    name: str


@dataclass
class Call:
    method: str
    args: tuple
    comment: str = ""

    def text(self) -> str:
        """The call as the C++ it stands for: `p.conv(3, 0, 6, ...)`."""
        line = f"  p.{self.method}({', '.join(_text(a) for a in self.args)});"
        return line + (f"   // {self.comment}" if self.comment else "")


def _text(a) -> str:
    if isinstance(a, bool):
        return "true" if a else "false"
    if isinstance(a, (Dims, Ids)):
        return "{" + ", ".join(map(str, a)) + "}"
    if isinstance(a, Acts):
        return "{" + ", ".join(f"{{Alg::{n}, {c_float(x)}, {c_float(y)}}}" for n, x, y in a) + "}"
    if isinstance(a, Name):
        return a.text if "::" in a.text else f'"{a.text}"'
    if isinstance(a, Kernel):
        return a.name
    if isinstance(a, float):
        return c_float(a)
    return str(a)


@dataclass
class Program:
    """One native partition's calls in order, what it binds by slot, and its symbolic dims."""
    index: int
    head: str                                   # a comment line: nodes, inputs, outputs
    calls: list[Call] = field(default_factory=list)
    constants: list[np.ndarray] = field(default_factory=list)   # by slot
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    steps: int = 0                              # node() calls: one per node of the partition
    # pairs of symbolic dims a step takes to be equal (two operands of an Add whose sizes agree
    # only at run time): sizes where one pair differs are not built (Encoded.out_of_reach)
    equal_dims: list[tuple] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join([f"// {self.head}", *(c.text() for c in self.calls)])

    @property
    def symbols(self) -> list[str]:
        """The symbols its dims are computed from, sorted."""
        found: set[str] = set()
        for c in self.calls:
            for a in c.args:
                if isinstance(a, Dims):
                    for d in a:
                        found |= symbols(d)
        return sorted(found)

    def encode(self) -> "Encoded":
        return Encoded(self)


class Encoded:
    """A program as the runtime reads it: int64 words and a list of strings; for a program with
    symbolic dims, the positions they go to and the function that computes them."""

    def __init__(self, program: Program):
        words: list[int] = []
        self.strings: list[str] = []
        index: dict[str, int] = {}
        symbolic: list[tuple[int, object]] = []
        shapes: list[int] = []   # which of those are a value's dims (the others: pads, offsets)

        def name(text: str) -> int:
            if text not in index:
                index[text] = len(self.strings)
                self.strings.append(text)
            return index[text]

        for call in program.calls:
            words += [NAME, name(call.method), len(call.args)]
            for k, a in enumerate(call.args):
                if isinstance(a, Dims) and call.method in SHAPES and SHAPES[call.method] == k:
                    shapes.extend(range(len(symbolic), len(symbolic) + sum(map(is_symbolic, a))))
                if isinstance(a, bool) or isinstance(a, (int, np.integer)):
                    words += [INT, int(a)]
                elif isinstance(a, float):
                    words += [FLOAT, _bits(a)]
                elif isinstance(a, (Dims, Ids)):
                    words += [LIST, len(a)]
                    for d in a:
                        if is_symbolic(d):
                            symbolic.append((len(words), d))
                            words.append(0)
                        else:
                            words.append(int(d))
                elif isinstance(a, Acts):
                    words += [ACTS, len(a)]
                    for alg, alpha, beta in a:
                        words += [name(alg), _bits(alpha), _bits(beta)]
                elif isinstance(a, Name):
                    words += [NAME, name(a.text)]
                elif isinstance(a, Kernel):
                    words += [KERNEL, a.index]
                else:
                    raise TypeError(f"partition {program.index}: {call.method}'s argument {a!r} "
                                    "has no encoding")
        self.words = np.array(words, dtype=np.int64)
        self.symbols = program.symbols
        self.positions = np.array([p for p, _ in symbolic], dtype=np.int64)
        # the equal pairs' dims computed after the words' (positions cover only the words')
        self.equal = [(len(symbolic) + 2 * k, len(symbolic) + 2 * k + 1) for k in range(len(program.equal_dims))]
        dims_computed = [d for _, d in symbolic] + [d for pair in program.equal_dims for d in pair]
        self.sizes: Callable[[tuple], tuple] | None = \
            compile_sizes(dims_computed, self.symbols) if dims_computed else None
        self.shapes = shapes

    def out_of_reach(self, sizes: tuple[int, ...]) -> str | None:
        """Why the partition is not built for these sizes, or None: a value's dim below 1 (an
        empty tensor, or a size the model cannot have), or two dims a step takes to be equal
        that are not (a broadcast only PyTorch's kernels run)."""
        if self.sizes is None:
            return None
        values = self.sizes(sizes)
        if any(values[k] < 1 for k in self.shapes):
            return "make an empty tensor"
        if any(values[i] != values[j] for i, j in self.equal):
            return "make operands the native steps take as equal in size differ (a broadcast)"
        return None

    def words_for(self, sizes: tuple[int, ...] = ()) -> np.ndarray:
        """The words with every symbolic dim evaluated for these sizes of self.symbols."""
        if self.sizes is None:
            return self.words
        words = self.words.copy()
        words[self.positions] = self.sizes(sizes)[:len(self.positions)]
        return words


def _bits(x: float) -> int:
    """A float32's bits, as the runtime reads them back."""
    return struct.unpack("<i", struct.pack("<f", float(x)))[0]
