"""runtime/eltwise.h is generated from ir/activations.py's ELTWISE: the file in the tree is what
the generator writes (run `python -m autofusion.backend.native.eltwise` after editing the table)."""
from __future__ import annotations

from autofusion.backend.native.eltwise import HEADER, eltwise_header
from autofusion.ir.activations import ELTWISE


def test_the_header_is_the_table():
    assert HEADER.read_text() == eltwise_header(), "run python -m autofusion.backend.native.eltwise"


def test_the_header_lists_every_function_in_the_tables_order():
    rows = [line.strip() for line in eltwise_header().splitlines() if line.startswith("  X(")]
    assert [r[2:].split(",")[0] for r in rows] == list(ELTWISE)
    assert "X(SiLU, eltwise_swish, 1)" in eltwise_header()
