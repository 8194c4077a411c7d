"""ONNX's LSTM as oneDNN's (impls.py emit_lstm, the runtime's lstm step): forward, reverse and
bidirectional, with and without bias and initial states, any of its three outputs read (Y a view
of oneDNN's [T, N, D·H] result), a symbolic sequence length; equal to ONNX Runtime. What it
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


def lstm_model(steps, batch: int, size: int, hidden: int, direction: str = "forward", bias: bool = True,
               initial: bool = False, outputs=("y", "y_h", "y_c"), peepholes: bool = False,
               lengths: bool = False, **attrs) -> onnx.ModelProto:
    d = 2 if direction == "bidirectional" else 1
    weights = {"W": (d, 4 * hidden, size), "R": (d, 4 * hidden, hidden)}
    if bias:
        weights["B"] = (d, 8 * hidden)
    if peepholes:
        weights["P"] = (d, 3 * hidden)
    inits = [onnx.numpy_helper.from_array((RNG.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in weights.items()]
    if lengths:
        inits.append(onnx.numpy_helper.from_array(np.full(batch, steps, np.int32), "lens"))
    names = ["x", "W", "R", "B" if bias else "", "lens" if lengths else "", "h0" if initial else "",
             "c0" if initial else "", "P" if peepholes else ""]
    while names[-1] == "":
        names.pop()
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, size])]
    if initial:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, batch, hidden]) for n in ("h0", "c0")]
    node = helper.make_node("LSTM", names, list(outputs), name="lstm", hidden_size=hidden, direction=direction,
                            **attrs)
    g = helper.make_graph([node], "lstm", inputs,
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


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("bias, initial", [(True, False), (False, True)])
def test_an_lstm_equals_onnx_runtime(direction, bias, initial):
    check(lstm_model(7, 3, 6, 16, direction, bias, initial), 7)


@pytest.mark.parametrize("outputs", [("", "y_h"), ("y",), ("", "", "y_c")])
def test_any_of_its_outputs_alone(outputs):
    check(lstm_model(5, 2, 4, 8, "bidirectional", outputs=outputs), 5)


def test_a_symbolic_sequence_length():
    check(lstm_model("steps", 1, 8, 12, "bidirectional", initial=True), 3, 11, 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("initial", [False, True])
def test_a_bidirectional_lstm_runs_its_directions_at_once_on_two_threads(threads, initial):
    """Two one-direction primitives side by side, each writing its half of Y and its direction's
    state (lstm.cpp): every output equal to ORT's; one primitive on one thread."""
    compiled = check(lstm_model("steps", 3, 6, 16, "bidirectional", initial=initial), 9, 2, threads=threads)
    (kernel,) = compiled.plan.kernels.values()
    assert ("two directions at once" in kernel) == (threads == 2), kernel


@pytest.mark.parametrize("kw, reason", [
    (dict(peepholes=True), "peephole weights"),
    (dict(lengths=True), "sequence_lens given"),
    (dict(activations=["Relu", "Tanh", "Tanh"]), "sigmoid, tanh, tanh only"),
    (dict(clip=2.0), "a cell clip"),
    (dict(input_forget=1), "input_forget"),
])
def test_what_it_refuses_it_names(kw, reason):
    model = lstm_model(4, 2, 4, 8, **kw)
    compiled = autofusion.compile(model, level=0, backend="native")
    (node,) = compiled.graph.nodes
    decision = compiled.plan.decisions[node]
    assert decision.impl.target == "torch"
    assert any(reason in why for _, why in decision.refused), decision.refused
