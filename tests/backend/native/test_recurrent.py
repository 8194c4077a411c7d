"""ONNX's LSTM and GRU as oneDNN's (impls.py emit_recurrent, runtime/recurrent.cpp): forward,
reverse and bidirectional, with and without bias and initial states, any of their outputs read (Y a
view of oneDNN's [T, N, D·H] result), a GRU with and without linear_before_reset, a symbolic
sequence length; equal to ONNX Runtime. What they
refuses (peepholes, sequence_lens, other activations, a clip, coupled gates, batch-first), it
names."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import autofusion
from autofusion.backend.native import unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(0)


def recurrent_model(steps, batch: int, size: int, hidden: int, direction: str = "forward", bias: bool = True,
                    initial: bool = False, outputs=("y", "y_h", "y_c"), peepholes: bool = False,
                    lengths: bool = False, op: str = "LSTM", **attrs) -> onnx.ModelProto:
    d = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    weights = {"W": (d, gates * hidden, size), "R": (d, gates * hidden, hidden)}
    if bias:
        weights["B"] = (d, 2 * gates * hidden)
    if peepholes:
        weights["P"] = (d, 3 * hidden)
    inits = [onnx.numpy_helper.from_array((RNG.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in weights.items()]
    if lengths:
        inits.append(onnx.numpy_helper.from_array(np.full(batch, steps, np.int32), "lens"))
    states = ("h0", "c0") if op == "LSTM" else ("h0",)   # a GRU has no cell state
    names = ["x", "W", "R", "B" if bias else "", "lens" if lengths else "",
             *(n if initial else "" for n in states), "P" if peepholes else ""]
    while names[-1] == "":
        names.pop()
    outputs = outputs if op == "LSTM" else outputs[:2]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, size])]
    if initial:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, batch, hidden]) for n in states]
    node = helper.make_node(op, names, list(outputs), name="rnn", hidden_size=hidden, direction=direction, **attrs)
    g = helper.make_graph([node], "rnn", inputs,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(model: onnx.ModelProto, steps: int) -> dict[str, np.ndarray]:
    out = {}
    for i in model.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "x":
            dims[0] = steps
        out[i.name] = RNG.standard_normal(dims).astype(np.float32)
    return out


def check(model: onnx.ModelProto, *steps: int, threads: int | None = None):
    compiled = autofusion.compile(model, level=0, backend="native", threads=threads)
    (node,) = compiled.graph.nodes
    assert compiled.plan.decisions[node].impl.target == "native", compiled.plan.decisions[node].refused
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for t in steps:
        feeds = feeds_for(model, t)
        want = session.run(None, feeds)
        got = compiled.run(feeds)
        for o, w in zip(model.graph.output, want):
            assert got[o.name].shape == w.shape
            np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5, err_msg=o.name)
    return compiled


# a GRU as PyTorch exports it (linear_before_reset=1: oneDNN's lbr_gru) and as ONNX defaults it
CELLS = [dict(op="LSTM"), dict(op="GRU", linear_before_reset=1), dict(op="GRU")]


@pytest.mark.parametrize("cell", CELLS, ids=["lstm", "gru-lbr", "gru"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("bias, initial", [(True, False), (False, True)])
def test_a_recurrent_op_equals_onnx_runtime(cell, direction, bias, initial):
    check(recurrent_model(7, 3, 6, 16, direction, bias, initial, **cell), 7)


@pytest.mark.parametrize("outputs", [("", "y_h"), ("y",), ("", "", "y_c")])
def test_any_of_its_outputs_alone(outputs):
    check(recurrent_model(5, 2, 4, 8, "bidirectional", outputs=outputs), 5)


@pytest.mark.parametrize("cell", CELLS, ids=["lstm", "gru-lbr", "gru"])
def test_a_symbolic_sequence_length(cell):
    check(recurrent_model("steps", 1, 8, 12, "bidirectional", initial=True, **cell), 3, 11, 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("cell", CELLS, ids=["lstm", "gru-lbr", "gru"])
def test_a_bidirectional_one_runs_its_directions_at_once_on_two_threads(cell, threads, initial):
    """Two one-direction primitives side by side, each writing its half of Y and its direction's
    state (recurrent.cpp): every output equal to ORT's; one primitive on one thread."""
    compiled = check(recurrent_model("steps", 3, 6, 16, "bidirectional", initial=initial, **cell), 9, 2,
                     threads=threads)
    (kernel,) = compiled.plan.kernels.values()
    assert ("two directions at once" in kernel) == (threads == 2), kernel


@pytest.mark.parametrize("cell, one_thread", [(CELLS[0], False), (CELLS[1], True), (CELLS[2], True)],
                         ids=["lstm", "gru-lbr", "gru"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_a_one_direction_gru_of_tiny_steps_runs_on_one_thread(cell, one_thread, direction):
    """oneDNN's GRU over gemm (not its brgemm LSTM) shares a tiny time step between threads at a
    loss: on one thread of the two (recurrent.cpp); equal to ORT either way."""
    compiled = check(recurrent_model("steps", 2, 6, 16, direction, initial=True, **cell), 9, 2, threads=2)
    (kernel,) = compiled.plan.kernels.values()
    assert kernel.startswith("on one thread: ") == one_thread, kernel


@pytest.mark.parametrize("kw, reason", [
    (dict(peepholes=True), "peephole weights"),
    (dict(lengths=True), "sequence_lens given"),
    (dict(activations=["Relu", "Tanh", "Tanh"]), "sigmoid, tanh, tanh only"),
    (dict(clip=2.0), "a cell clip"),
    (dict(input_forget=1), "input_forget"),
    (dict(op="GRU", activations=["Sigmoid", "Relu"]), "sigmoid, tanh only"),
    (dict(op="GRU", clip=1.0), "a cell clip"),
])
def test_what_it_refuses_it_names(kw, reason):
    model = recurrent_model(4, 2, 4, 8, **kw)
    compiled = autofusion.compile(model, level=0, backend="native")
    (node,) = compiled.graph.nodes
    decision = compiled.plan.decisions[node]
    assert decision.impl.target == "torch"
    assert any(reason in why for _, why in decision.refused), decision.refused
