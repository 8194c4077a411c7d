"""runtime/eltwise.h, the runtime's list of its elementwise functions (native.h's `Alg`),
generated from ir/activations.py's ELTWISE: `python -m autofusion.backend.native.eltwise` writes
it, and a test checks the file is what this module writes."""
from __future__ import annotations

from pathlib import Path

from ...ir.activations import ELTWISE

HEADER = Path(__file__).parent / "runtime" / "eltwise.h"


def eltwise_header() -> str:
    rows = "".join(f"  X({name}, {e.onednn}, {int(e.gate)}) \\\n" for name, e in ELTWISE.items())
    return f"""// Generated from autofusion/ir/activations.py (ELTWISE) by `python -m autofusion.backend.native.eltwise`:
// edit the table there, not this file (tests/backend/native/test_eltwise.py checks the two agree).
//
// The runtime's elementwise functions, each X(name, oneDNN's algorithm, gate): a gate, last in a
// step, is computed by the runtime's own loop after the step's primitive (gated.h).
#pragma once

#define AF_ALGS(X) \\
{rows}
"""


if __name__ == "__main__":
    HEADER.write_text(eltwise_header())
    print(f"wrote {HEADER}")
