"""Every error autofusion raises, in one place.

Each names the place it happened: the file, the graph input, or the node (with the
original ONNX node name), so a user never has to read a stack trace from deep inside.
"""
from __future__ import annotations


class AutofusionError(Exception):
    """Base class of every error autofusion raises on purpose."""


class ModelLoadError(AutofusionError):
    """The model file cannot be read: missing, corrupt, truncated, or missing external data."""


class UnsupportedOpError(AutofusionError):
    """The model uses operators autofusion has no kernel for; lists every one of them."""

    def __init__(self, unsupported: list[tuple[str, str]], what: str = "autofusion does not support"):
        # unsupported: (op name as "domain::Op" or "Op", node name)
        self.unsupported = unsupported
        by_op: dict[str, list[str]] = {}
        for op, node in unsupported:
            by_op.setdefault(op, []).append(node)
        lines = [f"{len(unsupported)} node(s) use operators {what}:"]
        for op, nodes in sorted(by_op.items()):
            shown = ", ".join(repr(n) for n in nodes[:8]) + (" ..." if len(nodes) > 8 else "")
            lines.append(f"  {op} ({len(nodes)}x): {shown}")
        super().__init__("\n".join(lines))


class GraphError(AutofusionError):
    """The graph breaks an IR invariant (raised by ir.verify and by the importer)."""


class InputError(AutofusionError, ValueError):
    """A call to a compiled model got a missing, unknown, or mismatched input."""


class NodeExecutionError(AutofusionError):
    """A kernel failed while executing a node; names the node, its op and its origin."""

    def __init__(self, node_desc: str, cause: BaseException):
        self.node_desc = node_desc
        self.cause = cause
        super().__init__(f"While executing {node_desc}: {type(cause).__name__}: {cause}")


class KernelBuildError(AutofusionError):
    """A node's attributes or constant inputs cannot be turned into a kernel."""
