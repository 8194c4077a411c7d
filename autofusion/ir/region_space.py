"""The iteration space of an automatic fusion region: how each value of the region maps onto
one space of loops. The planner (fusion/regions.py) grows it op by op to decide what may join a
region; the kernel generator (backend/native/kernels.py) lays out a region's body with it.

    space   S, a tuple of sizes; every value of the region is computed at points of S
    frame   per numpy axis of a value, the run of S axes it spans: a value [B·T, D] over
            S = [B, T, D] has frame ((0, 1), (2,)), its transpose [D, B·T] ((2,), (0, 1)); an
            axis of size 1 is broadcast along its run, and S axes in no run of a value are
            broadcast too
    lift    the value's shape over S (S[s] where it varies along s, else 1); a dense tensor is
            read or written at the strides its shape and frame give (out of order: transposed)
    rows    where the region reduces, the S axes from `rows` on are the columns of one row: every
            reduction in the region reduces exactly those (at most one row structure per region;
            a softmax's max and sum, a norm's mean and variance are several passes over it)

How each kind of op maps its inputs' frames to its output's:

    elementwise / broadcast   numpy broadcasting, right-aligned: an output axis takes the frame
                              of the inputs that vary along it (they must agree). Until a
                              reduction or a reshape joins, every frame is right-aligned and S
                              grows by broadcasting, as a plain elementwise region's space does;
                              from then on S is fixed
    row reduction             ReduceSum/Mean/Max/Min/SumSquare/L1/L2/LogSum/LogSumExp,
                              Global{Average,Max}Pool, Softmax/LogSoftmax: the reduced axes
                              must span exactly an innermost run of S (the columns); keepdims
                              keeps their frames, size 1
    reshape-like              Reshape/Flatten/Squeeze/Unsqueeze of a dense value keep element
                              order: input and output axes group into blocks of equal products,
                              and the output's axes split each block's S axes; an axis boundary
                              inside an S axis splits that S axis in two where it divides (a
                              finer space means the same loops), else the reshape cannot be
                              indexed ("view")
    Transpose                 the output's frames are the input's, permuted: nothing moves
                              until a region input or output is read or written at its strides

Each check is a few comparisons per axis; a split rewrites the region's frames (at most once per
factor of the space's size), so growing a region stays near-linear in its size.
"""
from __future__ import annotations

from collections.abc import Sequence

from .attributes import int_arg, normalize_axis
from .dims import broadcast_shapes
from .graph import Node, Value
from .scalar import ROW_OPS, expression
from .symbolic import mul, product

Frame = tuple[tuple[int, ...], ...]
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})   # views: free one by one
VIEWS = RESHAPES | {"Transpose"}   # ops that only rename elements: a kernel reads them in place


class LayoutError(ValueError):
    """A node that cannot join the space; `code` is its reason code (fusion/regions.py REASONS)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def is_row_op(node: Node) -> bool:
    return node.op in ROW_OPS


def data_inputs(node: Node) -> list[Value | None]:
    """The tensors an op computes on; a reshape's target shape and a reduction's axes (inputs
    from 1 on) are constants written into the region's body."""
    return node.inputs[:1] if node.op in VIEWS or node.op in ROW_OPS else list(node.inputs)


def reduced_axes(node: Node) -> list[int]:
    """The input axes a row op reduces (sorted); LayoutError("axes") when they are not known at
    compile time or the op is the identity (noop_with_empty_axes)."""
    rank = len(node.inputs[0].shape)
    op = node.op_type
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return list(range(2, rank))
    opset = node.graph.opset.get("", 21) if node.graph is not None else 21
    try:
        if op in ("Softmax", "LogSoftmax"):   # before opset 13: the axes from `axis` on
            if opset < 13:
                return list(range(normalize_axis(node.attr("axis", 1), rank), rank)) if rank else []
            return [normalize_axis(node.attr("axis", -1), rank)]
        axes = int_arg(node, "axes", 1, 13 if op == "ReduceSum" else 18)
        if axes is None:
            raise LayoutError("axes", f"{node.describe()}: its axes are computed at run time")
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                raise LayoutError("axes", f"{node.describe()}: no axes with noop_with_empty_axes")
            return list(range(rank))
        return sorted({normalize_axis(a, rank) for a in axes})
    except ValueError as e:
        if isinstance(e, LayoutError):
            raise
        raise LayoutError("axes", f"{node.describe()}: {e}") from None


def computable(node: Node) -> bool:
    """The op has a meaning generated kernels compute: a scalar expression, a row reduction, or a
    view of its input."""
    return expression(node) is not None or node.op in ROW_OPS or node.op in VIEWS


class Space:
    """A region's iteration space, grown one member at a time (see the top of this file)."""

    def __init__(self, sizes):
        self.sizes: list = list(sizes)   # symbolic sizes only while every member is elementwise
        self.rows: int | None = None     # the columns are the S axes from here on
        self.fixed = False               # S no longer grows (a reduction or a view joined)
        # id(value) of members; (id(node), i) of operands read from outside, and ("in", id(value))
        # the frame an outside tensor was first read at (what a sibling reading it aligns to)
        self.frames: dict[object, Frame] = {}

    # ---- reading it -----------------------------------------------------------------------

    @classmethod
    def of(cls, nodes: list[Node]) -> "Space":
        """The space of a region made of these nodes (in order); LayoutError where one cannot join."""
        space = cls.start(nodes[0])
        for n in nodes[1:]:
            space.join(n)
        return space

    @classmethod
    def start(cls, node: Node) -> "Space":
        """The space of a region starting with this node."""
        x, y = node.inputs[0], node.outputs[0]
        space = cls(x.shape if node.op in ROW_OPS else y.shape)
        space.join(node)
        return space

    def is_member(self, v: Value | None) -> bool:
        return v is not None and id(v) in self.frames

    def known(self, v: Value) -> Frame | None:
        """A member's frame, or the frame an outside tensor is read at."""
        frame = self.frames.get(id(v))
        return frame if frame is not None else self.frames.get(("in", id(v)))

    def _read(self, key, v: Value, frame: Frame) -> None:
        self.frames[key] = frame
        self.frames.setdefault(("in", id(v)), frame)

    def lift(self, shape, frame: Frame) -> tuple[int, ...]:
        out = [1] * len(self.sizes)
        for d, run in zip(shape, frame):
            if d != 1:
                for s in run:
                    out[s] = self.sizes[s]
        return tuple(out)

    def lift_of(self, v: Value) -> tuple[int, ...]:
        return self.lift(v.shape, self.frames[id(v)])

    def strides(self, shape, frame: Frame, order: Sequence[int] | None = None) -> tuple[int, ...]:
        """A dense tensor's strides over S (0 where it is broadcast; a transposed frame gives
        strides out of order); row-major, or with its axes stored in `order`, outermost first
        (channels-last: 0, 2, 3, 1)."""
        out, step = [0] * len(self.sizes), 1
        for a in reversed(range(len(shape)) if order is None else order):
            if shape[a] != 1:
                for s in reversed(frame[a]):
                    out[s] = step
                    step = mul(step, self.sizes[s])
        return tuple(out)

    def value_strides(self, v: Value, order: Sequence[int] | None = None) -> tuple[int, ...]:
        """Where a member is stored, as a region output."""
        return self.strides(v.shape, self.frames[id(v)], order)

    def operand_strides(self, node: Node, i: int, order: Sequence[int] | None = None) -> tuple[int, ...]:
        """Where node reads its input i from outside the region, as the node aligns it."""
        v = node.inputs[i]
        if node.op in RESHAPES and (id(node), i) not in self.frames:
            return self.value_strides(node.outputs[0], order)   # the same elements in the same order
        return self.strides(v.shape, self.frames[(id(node), i)], order)

    def renamed(self, sizes: list) -> "Space":
        """The same space with its sizes given other names (a kernel's symbolic sizes as the
        `d[k]` its code reads): strides over it come out in those names."""
        other = Space(sizes)
        other.rows, other.fixed, other.frames = self.rows, self.fixed, self.frames
        return other

    def columns(self) -> list[int]:
        """The S axes of a row that are not of size 1."""
        if self.rows is None:
            return []
        return [s for s in range(self.rows, len(self.sizes)) if self.sizes[s] != 1]

    # ---- growing it -----------------------------------------------------------------------

    def join(self, node: Node) -> None:
        """Add the node (its inputs already members or read from outside); LayoutError with the
        reason code where it cannot join. A failed join leaves at most a finer space behind."""
        if (node.op in ROW_OPS or node.op in VIEWS) and not all(isinstance(d, int) for d in self.sizes):
            raise LayoutError("rank", f"{node.describe()}: the region's space {self.sizes} is not static")
        if node.op in ROW_OPS:
            self._row(node)
        elif node.op == "Transpose":
            self._transpose(node)
        elif node.op in RESHAPES:
            self._reshape(node)
        else:
            self._elementwise(node)

    def _natural(self, shape) -> Frame | None:
        r, q = len(self.sizes), len(shape)
        return None if q > r else tuple((r - q + j,) for j in range(q))

    def _fits(self, shape, frame: Frame) -> bool:
        """Each varying axis spans S axes of its size, no S axis twice."""
        seen = []
        for d, run in zip(shape, frame):
            if d != 1:
                if product(self.sizes[s] for s in run) != d:
                    return False
                seen += run
        return len(seen) == len(set(seen))

    def _elementwise(self, node: Node) -> None:
        out = node.outputs[0]
        shape, q = tuple(out.shape), len(out.shape)
        ins = [(i, v) for i, v in enumerate(node.inputs) if v is not None]
        if not self.fixed:   # every frame right-aligned: S grows by broadcasting
            try:
                grown = list(broadcast_shapes(tuple(self.sizes), shape))
            except ValueError:
                raise LayoutError("shape", f"{node.describe()}: {list(shape)} does not broadcast with the "
                                           f"region's {self.sizes}") from None
            self._grow(grown)
            frame = self._natural(shape)
        else:
            frame = tuple(self._output_run(node, ins, shape, j) for j in range(q))
            if not self._fits(shape, frame):
                raise LayoutError("view", f"{node.describe()}: its operands index the region's space "
                                          "in different orders")
        self.frames[id(out)] = frame
        for i, v in ins:
            if not self.is_member(v):
                self._read((id(node), i), v, frame[q - len(v.shape):])

    def _output_run(self, node: Node, ins, shape, j: int) -> tuple[int, ...]:
        """The S axes of output axis j: those of the inputs varying along it that the region
        knows (members, tensors it reads already)."""
        q, varying, unit = len(shape), [], []
        for _, v in ins:
            jj, frame = j - (q - len(v.shape)), self.known(v)
            if jj >= 0 and frame is not None:
                (varying if v.shape[jj] != 1 else unit).append(frame[jj])
        if varying:
            if any(run != varying[0] for run in varying):
                raise LayoutError("view", f"{node.describe()}: its operands index axis {j} differently")
            return varying[0]
        if shape[j] == 1:
            return unit[0] if unit else ()
        # only outside operands vary here: along the run of a member broadcast over it
        for run in unit:
            if product(self.sizes[s] for s in run) == shape[j]:
                return run
        raise LayoutError("shape", f"{node.describe()}: its axis {j} ({shape[j]}) is not an axis of "
                                   f"the region's space {self.sizes}")

    def _row(self, node: Node) -> None:
        x, out = node.inputs[0], node.outputs[0]
        shape = tuple(x.shape)
        frame = self.known(x)
        if frame is None:   # the region starts here, reading x
            frame = self._natural(shape)
            if frame is None or not self._fits(shape, frame) or \
                    any(self.sizes[f[0]] != d for f, d in zip(frame, shape) if d != 1):
                raise LayoutError("shape", f"{node.describe()}: {list(shape)} is not the region's space")
        axes = reduced_axes(node)
        reduced = sorted(s for j in axes if shape[j] != 1 for s in frame[j] if self.sizes[s] != 1)
        if not reduced:
            raise LayoutError("inner", f"{node.describe()}: reduces only axes of size 1")
        k = reduced[0]
        columns = [s for s in range(k, len(self.sizes)) if self.sizes[s] != 1]
        if reduced != columns:
            raise LayoutError("inner", f"{node.describe()}: reduces axes {axes} of {list(shape)}, not an "
                                       "innermost run of the region's space")
        if self.rows is not None and columns != self.columns():
            raise LayoutError("rows", f"{node.describe()}: reduces other axes than the region's "
                                      "reductions do")
        if self.rows is None:
            self.rows = k
        self.fixed = True
        if not self.is_member(x):
            self._read((id(node), 0), x, frame)
        # softmax and the global pools keep every axis; a reduction unless keepdims=0
        kept = frame if node.attr("keepdims", 1) else tuple(f for j, f in enumerate(frame) if j not in axes)
        self.frames[id(out)] = kept

    def _transpose(self, node: Node) -> None:
        x, out = node.inputs[0], node.outputs[0]
        perm = node.attr("perm") or list(range(len(x.shape)))[::-1]
        frame = self.known(x)
        if frame is None:   # the region starts here: its space is the output's
            if list(out.shape) != self.sizes:
                raise LayoutError("shape", f"{node.describe()}: {list(out.shape)} is not the region's space")
            moved = self._natural(out.shape)
            frame = [()] * len(perm)
            for j, p in enumerate(perm):
                frame[p] = moved[j]
            frame = tuple(frame)
        if not self.is_member(x):   # read at strides out of order
            self._read((id(node), 0), x, frame)
        self.frames[id(out)] = tuple(frame[p] for p in perm)
        self.fixed = True

    def _reshape(self, node: Node) -> None:
        x, out = node.inputs[0], node.outputs[0]
        src, dst = tuple(x.shape), tuple(out.shape)
        if not self.is_member(x):   # the region starts here: its space is the output's
            if list(dst) != self.sizes:
                raise LayoutError("shape", f"{node.describe()}: {list(dst)} is not the region's space")
            self.frames[id(out)] = self._natural(dst)
            self.fixed = True
            return
        blocks = _blocks(src, dst)
        if blocks is None:
            raise LayoutError("view", f"{node.describe()}: {list(src)} → {list(dst)} is not a view")
        while True:
            frame, split = self._reshaped(node, self.frames[id(x)], src, dst, blocks)
            if split is None:
                break
            self._split(*split)
        self.frames[id(out)] = frame
        self.fixed = True

    def _reshaped(self, node, frame: Frame, src, dst, blocks):
        """The output's frame, or the S axis to split first (axis, leading factor)."""
        out: list[tuple[int, ...]] = [()] * len(dst)
        for xs, ys in blocks:
            axes = [s for j in xs for s in frame[j]]
            pos = 0
            for y in ys:
                run, acc = [], 1
                while acc < dst[y]:
                    if pos == len(axes):
                        raise LayoutError("view", f"{node.describe()}: cannot index {list(dst)}")
                    s = axes[pos]
                    n = self.sizes[s]
                    if acc * n > dst[y]:   # the axis boundary falls inside S axis s
                        lead = dst[y] // acc
                        if dst[y] % acc or n % lead:
                            raise LayoutError("view", f"{node.describe()}: {list(src)} → {list(dst)} cuts "
                                                      f"an axis of the region's space {self.sizes}")
                        return None, (s, lead)
                    acc *= n
                    run.append(s)
                    pos += 1
                out[y] = tuple(run)
        return tuple(out), None

    def _split(self, s: int, lead: int) -> None:
        """S axis s becomes two, lead × rest: the same loops, finer."""
        n = self.sizes[s]
        self.sizes[s:s + 1] = [lead, n // lead]
        remap = lambda t: (t,) if t < s else (s, s + 1) if t == s else (t + 1,)   # noqa: E731
        self.frames = {k: tuple(tuple(u for t in run for u in remap(t)) for run in f)
                       for k, f in self.frames.items()}
        if self.rows is not None and self.rows > s:
            self.rows += 1

    def _grow(self, sizes: list[int]) -> None:
        d = len(sizes) - len(self.sizes)
        if d:
            self.frames = {k: tuple(tuple(t + d for t in run) for run in f) for k, f in self.frames.items()}
            if self.rows is not None:
                self.rows += d
        self.sizes = list(sizes)


def _blocks(src, dst) -> list[tuple[list[int], list[int]]] | None:
    """The axes of src and dst (those not of size 1) grouped into blocks of equal products."""
    xa = [j for j, d in enumerate(src) if d != 1]
    ya = [j for j, d in enumerate(dst) if d != 1]
    i = j = 0
    blocks = []
    while i < len(xa) and j < len(ya):
        bx, by = [xa[i]], [ya[j]]
        px, py = src[xa[i]], dst[ya[j]]
        i, j = i + 1, j + 1
        while px != py:
            if px < py:
                if i == len(xa):
                    return None
                bx.append(xa[i])
                px *= src[xa[i]]
                i += 1
            else:
                if j == len(ya):
                    return None
                by.append(ya[j])
                py *= dst[ya[j]]
                j += 1
        blocks.append((bx, by))
    return blocks if i == len(xa) and j == len(ya) else None
