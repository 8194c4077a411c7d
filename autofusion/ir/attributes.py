"""Reading a node's arguments as the shape rules and kernels do: the opset it is imported at
(which decides between an attribute and the input that replaced it), an axis in range, the
values of a constant integer input."""
from __future__ import annotations

from .graph import Node, Value


def opset_of(node: Node) -> int:
    """The opset the node's domain is imported at (what decides attribute-vs-input forms)."""
    return node.graph.opset.get(node.domain, 21) if node.graph is not None else 21


def normalize_axis(a: int, rank: int) -> int:
    """An axis in [-rank, rank) as an index in [0, rank); a ValueError outside."""
    if not -rank <= a < rank:
        raise ValueError(f"axis {a} is out of range for rank {rank}")
    return a % rank


def const_ints(v: Value | None) -> list[int] | None:
    """A constant integer input's values; None when it is not a constant."""
    if v is None or v.const is None or v.const.dtype.kind not in "iu":
        return None
    return [int(a) for a in v.const.reshape(-1)]


def int_arg(node: Node, name: str, index: int, since: int) -> list[int] | None:
    """An int list that is attribute `name` before opset `since` and input `index` from then on
    (axes, split): [] when absent, None when it is an input whose value is not known."""
    if opset_of(node) < since:
        return [int(a) for a in node.attrs.get(name) or ()]
    v = node.input(index)
    return [] if v is None else const_ints(v)
