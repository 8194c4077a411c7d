"""TorchCall: an operator the importer could not map onto the op table, kept as a call of its
original PyTorch target (domain "autofusion.torch").

The FX importer writes one for each ATen op that has no mapping, so the rest of the graph still
compiles and fuses around it. The node carries everything the call needs as plain attributes:

    target   the op's qualified name, "aten.erfinv.default" (resolved through torch.ops)
    args     the call's arguments as JSON: tensors as {"input": i} (the node's i-th input), a
             symbolic integer as {"int_input": i} (a 0-d int64 input read with int()), dtypes,
             devices, layouts and memory formats by name, everything else as JSON values
    reason   why it is not mapped (for the report and error messages)

Its output types are written by the importer (what the trace saw); it has no shape rule of its
own and no ONNX meaning, so it never joins a fusion, and the exported file names it in its own
domain for a reader to see.
"""
from __future__ import annotations

from .ops import OpClass, OpDef, register

TORCH_DOMAIN = "autofusion.torch"
TORCH_CALL = "TorchCall"

register(OpDef(TORCH_CALL, OpClass.OPAQUE, None, domain=TORCH_DOMAIN,
               doc="a PyTorch operator called as it is (no mapping to the op table)"))
