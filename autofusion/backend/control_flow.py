"""The torch kernels of the ops with bodies, If, Loop, Scan (ir/control_flow.py) and SequenceMap
(ir/sequences.py): each body is compiled once, at build time, into a Program of its own (the
generated straight-line Python over PyTorch kernels that runs any graph, executor.py), and the
kernel calls it per branch taken, per iteration, per slice, per element. A failure inside a
body names the body's node.

On the native backend these nodes are torch steps between native partitions, like every op
with only a PyTorch implementation (lower.py); their bodies run on PyTorch. Output shapes come
at run time: a Loop's scan outputs are as long as the loop ran.
"""
from __future__ import annotations

import torch

from ..errors import NodeExecutionError
from ..ir import Graph, Node
from ..ir.control_flow import formal_count
from .executor import Program, check_supported
from .impl import Impl, register
from .lower import lower
from .torch_cpu.common import kernel, torch_dtype


def _program(body: Graph) -> Program:
    check_supported(body)
    return Program(body, lower(body, "torch"))


def _one_or_tuple(outs):
    return outs[0] if len(outs) == 1 else tuple(outs)


def _empty_scan(body_output, stacked_at: int) -> torch.Tensor:
    """A scan output of zero iterations: length 0 at its axis, the body's dims where they are static."""
    shape = list(body_output.shape) if body_output.is_static else []
    shape.insert(stacked_at % (len(shape) + 1), 0)
    return torch.empty(shape, dtype=torch_dtype(body_output.dtype) if body_output.dtype else torch.float32)


def _in_body(node: Node, key: str, run):
    """run, its failures named as in the node's body."""
    def call(*args):
        try:
            return run(*args)
        except NodeExecutionError as e:
            raise NodeExecutionError(f"{e.node_desc} in the {key} of {node.describe()}", e.cause) from e
    return call


@kernel("If")
def if_(node: Node):
    """The branch the condition picks, its outputs the node's."""
    then = _in_body(node, "then_branch", _program(node.attrs["then_branch"]))
    other = _in_body(node, "else_branch", _program(node.attrs["else_branch"]))

    def run(cond, *captured):
        return _one_or_tuple((then if bool(cond) else other)(*captured))
    return run


@kernel("Loop")
def loop(node: Node):
    """body(iter, cond, v...) while iter < M and cond: the last v, and each scan output stacked."""
    body: Graph = node.attrs["body"]
    step = _in_body(node, "body", _program(body))
    formal = formal_count(node)
    n_carried = max(formal - 2, 0)
    scan_outputs = body.outputs[1 + n_carried:]

    def run(*args):
        m = args[0] if formal > 0 else None
        cond = args[1] if formal > 1 else None
        carried, captured = list(args[2:formal]), args[formal:]
        trips = None if m is None else int(m.reshape(()))
        going = True if cond is None else bool(cond.reshape(()))
        scans: list[list[torch.Tensor]] = [[] for _ in scan_outputs]
        i = 0
        while going and (trips is None or i < trips):
            outs = step(torch.tensor(i, dtype=torch.int64), torch.tensor(going), *carried, *captured)
            going = bool(outs[0].reshape(()))
            carried = list(outs[1:1 + n_carried])
            for k, t in enumerate(outs[1 + n_carried:]):
                scans[k].append(t)
            i += 1
        stacked = [torch.stack(s) if s else _empty_scan(o, 0) for s, o in zip(scans, scan_outputs)]
        return _one_or_tuple(carried + stacked)
    return run


@kernel("Scan")
def scan(node: Node):
    """body(state..., slices...) for each position along the scan inputs' axes, in each one's
    direction: the last state, and each scan output stacked along its axis in its direction."""
    body: Graph = node.attrs["body"]
    step = _in_body(node, "body", _program(body))
    formal = formal_count(node)
    m = node.attr("num_scan_inputs")
    n_state = formal - m
    n_scan = len(node.outputs) - n_state
    in_axes = node.attr("scan_input_axes") or [0] * m
    in_reverse = node.attr("scan_input_directions") or [0] * m
    out_axes = node.attr("scan_output_axes") or [0] * n_scan
    out_reverse = node.attr("scan_output_directions") or [0] * n_scan
    scan_outputs = body.outputs[n_state:]

    def run(*args):
        state, xs, captured = list(args[:n_state]), args[n_state:formal], args[formal:]
        axes = [a % x.dim() for a, x in zip(in_axes, xs)]
        lengths = {x.shape[a] for x, a in zip(xs, axes)}
        if len(lengths) > 1:
            raise ValueError(f"the scan inputs have different lengths along their scan axes: {sorted(lengths)}")
        length = lengths.pop() if lengths else 0
        scans: list[list[torch.Tensor]] = [[] for _ in range(n_scan)]
        for t in range(length):
            slices = [x.select(a, length - 1 - t if r else t) for x, a, r in zip(xs, axes, in_reverse)]
            outs = step(*state, *slices, *captured)
            state = list(outs[:n_state])
            for k, y in enumerate(outs[n_state:]):
                scans[k].append(y)
        stacked = []
        for s, o, axis, r in zip(scans, scan_outputs, out_axes, out_reverse):
            if not s:
                stacked.append(_empty_scan(o, axis))
                continue
            stacked.append(torch.stack(s[::-1] if r else s, axis % (s[0].dim() + 1)))
        return _one_or_tuple(state + stacked)
    return run


@kernel("SequenceMap")
def sequence_map(node: Node):
    """The body once per position of the sequence inputs (each a tensor of its own), the tensor
    inputs given whole each time; each body output gathered into a sequence."""
    step = _in_body(node, "body", _program(node.attrs["body"]))
    n_out = len(node.outputs)
    # the ONNX inputs that are sequences run per element; tensors and captured values go whole
    is_seq = [v is not None and v.sequence is not None and i < formal_count(node)
              for i, v in enumerate(node.inputs)]

    def run(*args):
        lengths = {len(a) for a, s in zip(args, is_seq) if s}
        if len(lengths) > 1:
            raise ValueError(f"SequenceMap: the input sequences have different lengths {sorted(lengths)}")
        outs: list[list[torch.Tensor]] = [[] for _ in range(n_out)]
        for k in range(lengths.pop()):
            results = step(*(a[k] if s else a for a, s in zip(args, is_seq)))
            for acc, r in zip(outs, results):
                acc.append(r)
        return outs[0] if n_out == 1 else tuple(outs)
    return run


def _not_in_a_partition(node: Node) -> str:
    return ("control flow: which branch runs, or how often the body does, is known only at run time, "
            "so the node is a PyTorch step of its own, its body compiled to generated Python")


# the plan says why each of these runs on PyTorch ("not native: control flow ...")
for _op in ("If", "Loop", "Scan"):
    register(_op, Impl("native", "native", _not_in_a_partition, doc="never: see the check's reason"))
del _op
