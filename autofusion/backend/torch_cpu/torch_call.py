"""The kernel of TorchCall (ir/torch_call.py): the stored PyTorch target, called on the node's
inputs with its other arguments rebuilt from the JSON the importer wrote."""
from __future__ import annotations

import json
from typing import Any

import torch

from ...errors import KernelBuildError
from ...ir import Node
from ...ir.torch_call import TORCH_CALL, TORCH_DOMAIN
from ...ir.graph import op_key
from .common import Kernel, kernel

MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format, "channels_last": torch.channels_last,
                  "channels_last_3d": torch.channels_last_3d, "preserve_format": torch.preserve_format}
LAYOUTS = {"strided": torch.strided, "sparse_coo": torch.sparse_coo}


def resolve_target(name: str):
    """torch.ops.<namespace>.<op>.<overload> from "namespace.op.overload"."""
    parts = name.split(".")
    if len(parts) != 3:
        raise KernelBuildError(f"TorchCall target {name!r} is not 'namespace.op.overload'")
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError) as e:
        raise KernelBuildError(f"TorchCall target {name!r} does not exist in this torch: {e}") from None


def rebuild(value: Any, tensors: tuple) -> Any:
    """An argument from its JSON form, with the run's tensors put back in."""
    if isinstance(value, list):
        return [rebuild(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    (kind, item), = value.items()
    if kind == "input":
        return tensors[item]
    if kind == "int_input":
        return int(tensors[item])
    if kind == "dtype":
        return getattr(torch, item)
    if kind == "device":
        return torch.device(item)
    if kind == "layout":
        return LAYOUTS[item]
    if kind == "memory_format":
        return MEMORY_FORMATS[item]
    if kind == "tuple":
        return tuple(rebuild(v, tensors) for v in item)
    raise KernelBuildError(f"TorchCall argument of unknown kind {kind!r}")


@kernel(op_key(TORCH_DOMAIN, TORCH_CALL))
def _torch_call(node: Node) -> Kernel:
    """The original PyTorch operator, called as it is."""
    target = resolve_target(node.attr("target", ""))
    call = json.loads(node.attr("args", '{"args": [], "kwargs": {}}'))
    args, kwargs = call["args"], call["kwargs"]
    many = len(node.outputs) > 1 or node.attr("tuple_output", 0)

    def run(*tensors):
        out = target(*rebuild(args, tensors), **{k: rebuild(v, tensors) for k, v in kwargs.items()})
        return tuple(out) if many else out
    return run
