"""PyTorch → a functional core-ATen FX graph, the form fx_import.py reads.

    dynamo's graph or a module ──functionalize──make_fx(core-ATen decompositions)──▶ ATen graph

Tracing runs on fake tensors: for dynamo's graphs, its own fake mode, so the symbolic sizes
(s0, s1, …) are the ones its guards speak of; for a module compiled without dynamo, a fresh fake
mode with the example inputs' static sizes. Mutations are functionalized away (an in-place ReLU
becomes a ReLU); a graph that still writes to one of its inputs (a buffer update, `x.add_(1)` on
an argument) cannot be a pure function and is refused. The ATen graph keeps the placeholder order
of the function traced, so placeholder i is argument i.

The decompositions are torch's core-ATen table minus the ops the op table has as one operator
(hard-swish, SiLU, SDPA, …): those are mapped whole, as the ONNX exporters write them.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import fx

from ..errors import AutofusionError


class UnsupportedGraphError(AutofusionError):
    """A PyTorch graph that cannot become one IR graph (it mutates an input, returns a
    non-tensor computed at run time, …): the caller runs it as PyTorch instead."""


aten = torch.ops.aten

# ops the importer maps as a whole: decomposing them would only make the rules rebuild them
KEPT_WHOLE = [aten.hardswish.default, aten.hardsigmoid.default, aten.silu.default,
              aten.mish.default, aten.softplus.default,
              aten._scaled_dot_product_flash_attention_for_cpu.default]


def decomposition_table() -> dict:
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    for op in KEPT_WHOLE:
        table.pop(op, None)
    return table


def trace_aten(fn: Callable, fake_args: Sequence, fake_mode) -> fx.GraphModule:
    """The functional core-ATen graph of `fn` on fake arguments (tensors and SymInts)."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch.fx.experimental.proxy_tensor import make_fx

    table = decomposition_table()
    with fake_mode, enable_python_dispatcher(), torch.inference_mode(False), torch.no_grad():
        # first to ATen (composite ops taken apart symbolically), then functionalized: the C++
        # functionalization would read composite ops' sizes as ints and pin dynamic sizes
        aten_graph = make_fx(fn, decomposition_table=table)(*fake_args)
        gm = make_fx(torch.func.functionalize(aten_graph, remove="mutations"),
                     decomposition_table=table)(*fake_args)
    check_functional(gm)
    return gm


def check_functional(gm: fx.GraphModule) -> None:
    """Refuse a graph that still mutates something (an input, after functionalization)."""
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and schema.is_mutable:
            written = node.args[0].name if node.args and isinstance(node.args[0], fx.Node) else "?"
            raise UnsupportedGraphError(f"node {node.name!r} ({node.target}) writes to {written!r}: "
                                        "a graph that mutates its inputs is not a pure function")


def fakify_dynamo_inputs(example_inputs: Sequence) -> tuple[list, object]:
    """Dynamo's example inputs as fake tensors of its own fake mode (the sizes its guards use)."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    if context is None or context.fake_mode is None:
        raise UnsupportedGraphError("called outside a dynamo compile (no tracing context)")
    fake_mode = context.fake_mode
    fakes = []
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            fakes.append(x)
            continue
        symbolic = context.tensor_to_context[x] if x in context.tensor_to_context else None
        fakes.append(fake_mode.from_tensor(x, symbolic_context=symbolic,
                                          source=symbolic.tensor_source if symbolic else None))
    return fakes, fake_mode


def trace_module(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor]
                 ) -> tuple[fx.GraphModule, list[torch.Tensor], list[str]]:
    """A module without dynamo: its ATen graph over (parameters, buffers, inputs) returning the
    tensors of its output flattened, the real parameters and buffers (to freeze), and the
    placeholder names."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise AutofusionError(f"example input {i} is a {type(x).__name__}; "
                                  "autofusion.compile(module, ...) takes tensors")
    state = dict(module.named_parameters(remove_duplicate=False))
    state.update(module.named_buffers(remove_duplicate=False))
    names = list(state)

    def call(*args):
        weights = dict(zip(names, args[:len(names)]))
        out = torch.func.functional_call(module, weights, tuple(args[len(names):]))
        return tuple(x for x in torch.utils._pytree.tree_leaves(out) if isinstance(x, torch.Tensor))

    fake_mode = FakeTensorMode()
    real = [t.detach() for t in state.values()]
    fakes = [fake_mode.from_tensor(t) for t in [*real, *example_inputs]]
    if module.training:
        raise AutofusionError(f"{type(module).__name__} is in training mode; call .eval() "
                              "first (autofusion compiles inference graphs)")
    gm = trace_aten(call, fakes, fake_mode)
    input_names = [f"input_{i}" for i in range(len(example_inputs))]
    return gm, real, [n.replace(".", "_") for n in names] + input_names
