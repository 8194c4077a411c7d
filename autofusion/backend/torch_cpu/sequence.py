"""Kernels of the tensor-sequence ops (ir/sequences.py). A sequence is a Python list of tensors at
run time; no kernel changes a list it is given (SequenceInsert and SequenceErase make new ones),
so one list may have several readers.

Positions follow ONNX: negative counts from the back, SequenceInsert appends and SequenceErase
drops the last element where no position is given; a position out of range is an error naming
the range. SequenceMap, which runs a body, is with the other ops that do (backend/control_flow.py).
"""
from __future__ import annotations

import torch

from ...ir import Node
from .common import Kernel, kernel


def _position(p: torch.Tensor | None, length: int, default: int, allowed_end: bool) -> int:
    """A run-time position as an index into a list of `length`; insertion may name the end."""
    if p is None:
        return default
    if p.numel() != 1:
        raise ValueError(f"a sequence position must be a scalar, got shape {tuple(p.shape)}")
    k = int(p.reshape(()))
    top = length if allowed_end else length - 1
    if not -length <= k <= top:
        raise IndexError(f"sequence position {k} is out of range [{-length}, {top}] "
                         f"for a sequence of {length}")
    return k + length if k < 0 else k


@kernel("SequenceEmpty")
def _sequence_empty(node: Node) -> Kernel:
    """An empty sequence (a new list each call)."""
    return list


@kernel("SequenceConstruct")
def _sequence_construct(node: Node) -> Kernel:
    """The inputs, in order, as a sequence."""
    return lambda *tensors: list(tensors)


@kernel("SequenceInsert")
def _sequence_insert(node: Node) -> Kernel:
    """A new sequence with the tensor at the position (at the end when none is given)."""
    def run(seq, t, position=None):
        k = _position(position, len(seq), len(seq), allowed_end=True)
        return [*seq[:k], t, *seq[k:]]
    return run


@kernel("SequenceErase")
def _sequence_erase(node: Node) -> Kernel:
    """A new sequence without the element at the position (the last when none is given)."""
    def run(seq, position=None):
        if not seq:
            raise IndexError("SequenceErase on an empty sequence")
        k = _position(position, len(seq), len(seq) - 1, allowed_end=False)
        return seq[:k] + seq[k + 1:]
    return run


@kernel("SequenceAt")
def _sequence_at(node: Node) -> Kernel:
    """The element at the position."""
    return lambda seq, position: seq[_position(position, len(seq), 0, allowed_end=False)]


@kernel("SequenceLength")
def _sequence_length(node: Node) -> Kernel:
    """How many elements, as an int64 scalar."""
    return lambda seq: torch.tensor(len(seq), dtype=torch.int64)


@kernel("SplitToSequence")
def _split_to_sequence(node: Node) -> Kernel:
    """The input split along axis: into pieces of 1 (squeezed unless keepdims) without `split`,
    of `split` each (the last smaller) for a scalar, of the listed sizes for a 1-D `split`."""
    axis, keepdims = node.attr("axis", 0), node.attr("keepdims", 1)

    def run(x, split=None):
        a = axis % max(x.dim(), 1)
        if split is None:
            pieces = list(torch.split(x, 1, a))
            return pieces if keepdims else [p.squeeze(a) for p in pieces]
        if split.dim() == 0:
            size = int(split)
            if size <= 0:
                raise ValueError(f"SplitToSequence: split {size} must be positive")
            return list(torch.split(x, size, a))
        sizes = [int(s) for s in split.tolist()]
        if sum(sizes) != x.shape[a] or any(s < 0 for s in sizes):
            raise ValueError(f"SplitToSequence: split {sizes} does not add up to dimension {a} "
                             f"of the input ({x.shape[a]})")
        return list(torch.split(x, sizes, a))
    return run


@kernel("ConcatFromSequence")
def _concat_from_sequence(node: Node) -> Kernel:
    """The elements joined along axis, or stacked on a new axis there (new_axis=1)."""
    axis, new_axis = node.attr("axis"), node.attr("new_axis", 0)

    def run(seq):
        if not seq:
            raise ValueError("ConcatFromSequence on an empty sequence (its shape is undefined)")
        return torch.stack(seq, axis) if new_axis else torch.cat(seq, axis)
    return run
