"""The kernel of OnnxRuntimeCall (ir/onnx_runtime_call.py): a group of ONNX nodes autofusion has
no kernel for, run as one ONNX Runtime InferenceSession from the generated Python.

It is a torch-target implementation like any other: lowering makes it a step of its own (between
native partitions on the native backend), called with torch tensors and returning torch tensors.
The node holds a partial model (the group's nodes, opset imports, functions); the builder
completes it — a graph input for each tensor input, typed as the IR types it, an initializer
for each constant input, the outputs the node returns — and opens the session at compile time.
Shapes are left to ONNX Runtime, so a group whose output shapes ONNX's inference could not give
runs all the same. Where an input's element type is unknown until run time (it comes after an
op ONNX cannot type), a session is made on the first call for the types the tensors have.

Tensors cross as numpy arrays sharing memory (no copies on the way out), a sequence as a list
of them (its graph input declared a sequence of its elements' type). ONNX Runtime keeps
its own thread pool: it takes as many threads as PyTorch and does not spin between calls, so
it leaves the cores to PyTorch's and oneDNN's pool.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper, numpy_helper

from ..errors import KernelBuildError
from ..ir import DType, Node, Value
from ..ir.dtypes import dtypes_of_torch
from ..ir.onnx_runtime_call import ORT_KEY
from .impl import Impl, register
from .torch_cpu import KERNELS


def _initializer(name: str, v: Value) -> onnx.TensorProto:
    t = numpy_helper.from_array(np.asarray(v.const), name)
    if v.dtype is not None and t.data_type != int(v.dtype):   # bfloat16 kept as float32 data
        t = helper.make_tensor(name, int(v.dtype), v.const.shape, np.asarray(v.const).flatten().tolist())
    return t


def complete_model(node: Node, input_types: list[DType]) -> onnx.ModelProto:
    """The node's partial model made whole: its run-time inputs (of these types), its constant
    inputs as initializers, its outputs typed where the IR knows them."""
    model = onnx.ModelProto.FromString(node.attr("model"))
    g = model.graph
    names, runtime = node.attr("input_names"), _runtime_inputs(node)
    for i, dtype in zip(runtime, input_types):
        g.input.append(helper.make_tensor_sequence_value_info(names[i], int(dtype), None)
                       if node.inputs[i].sequence is not None
                       else helper.make_tensor_value_info(names[i], int(dtype), None))
    g.initializer.extend(_initializer(names[i], v) for i, v in enumerate(node.inputs)
                         if i not in runtime)
    for name, v in zip(node.attr("output_names"), node.outputs):
        g.output.append(helper.make_tensor_value_info(name, int(v.dtype), None) if v.dtype
                        else onnx.ValueInfoProto(name=name))   # ONNX Runtime infers the type
    return model


def _runtime_inputs(node: Node) -> list[int]:
    return [i for i, v in enumerate(node.inputs) if v.const is None]


def open_session(node: Node, input_types: list[DType]) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(complete_model(node, input_types).SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ONNX Runtime raises its own, untyped, errors
        raise KernelBuildError(f"ONNX Runtime cannot run ops {', '.join(node.attr('ops', []))} "
                               f"of ONNX node(s) {', '.join(map(repr, node.origin))}: {e}") from None


def _as_numpy(t: torch.Tensor | list) -> np.ndarray | list:
    if isinstance(t, list):   # a sequence
        return [_as_numpy(e) for e in t]
    if t.dtype == torch.bfloat16:
        raise NotImplementedError("a bfloat16 tensor cannot cross into ONNX Runtime (numpy has no bfloat16)")
    return t.detach().contiguous().numpy()


def _as_torch(a: np.ndarray | list) -> torch.Tensor | list:
    if isinstance(a, list):   # a sequence
        return [_as_torch(e) for e in a]
    if a.dtype == np.object_:
        raise NotImplementedError("ONNX Runtime returned strings, which a torch tensor cannot hold")
    return torch.from_numpy(a) if a.flags.writeable else torch.from_numpy(a.copy())


def _element_type(v: Value) -> DType | None:
    """A tensor's dtype, a sequence's elements'."""
    return v.dtype if v.sequence is None else v.sequence.dtype


def _run_time_type(t: torch.Tensor | list) -> DType:
    if isinstance(t, list):   # a sequence: its elements' type (float for an empty one)
        return dtypes_of_torch()[t[0].dtype] if t else DType.FLOAT
    return dtypes_of_torch()[t.dtype]


def _onnx_runtime_call(node: Node) -> Callable:
    """The group's ONNX nodes, run by one ONNX Runtime session."""
    runtime = _runtime_inputs(node)
    names = [node.attr("input_names")[i] for i in runtime]
    outputs = node.attr("output_names")
    known = [_element_type(node.inputs[i]) for i in runtime]
    sessions: dict[tuple, ort.InferenceSession] = {}
    if all(known):
        sessions[tuple(known)] = open_session(node, known)

    def run(*tensors: torch.Tensor):
        key = tuple(known) if all(known) else tuple(map(_run_time_type, tensors))
        session = sessions.get(key)
        if session is None:
            session = sessions[key] = open_session(node, list(key))
        outs = session.run(outputs, {n: _as_numpy(t) for n, t in zip(names, tensors)})
        results = [_as_torch(a) for a in outs]
        return tuple(results) if len(results) > 1 else results[0]

    run.baked_inputs = frozenset(i for i in range(len(node.inputs)) if i not in runtime)
    return run


KERNELS[ORT_KEY] = _onnx_runtime_call
register(ORT_KEY, Impl("onnxruntime", "torch", build=_onnx_runtime_call,
                       doc="the group's ONNX nodes, run by one ONNX Runtime session"))
