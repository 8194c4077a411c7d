"""LSTM, GRU and RNN against ONNX Runtime: every direction, both layouts, sequence_lens, initial
states, peepholes, clip, linear_before_reset, input_forget, activations with alpha/beta, the
optional outputs; and a CNN+LSTM model exported from PyTorch at levels 0 and 2 on both backends.

ONNX Runtime refuses layout 1, so a batch-first model is checked against ONNX Runtime running
the same data time-first."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import autofusion

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def recurrent_model(op: str, direction: str = "forward", layout: int = 0, bias: bool = True,
                    lengths: bool = False, initial: bool = False, peepholes: bool = False,
                    outputs=("Y", "Y_h", "Y_c"), seed: int = 0, **attrs):
    """One recurrent node with constant weights; returns the model and its feeds (time-first
    data transposed to batch-first for layout 1, so both layouts see the same numbers)."""
    rng = np.random.default_rng(seed)
    dirs, g = 2 if direction == "bidirectional" else 1, GATES[op]
    data = {"X": rng.standard_normal((SEQ, BATCH, INPUT)),
            "B": rng.standard_normal((dirs, 2 * g * HIDDEN)),
            "L": rng.integers(1, SEQ + 1, BATCH).astype(np.int32),
            "H0": rng.standard_normal((dirs, BATCH, HIDDEN)),
            "C0": rng.standard_normal((dirs, BATCH, HIDDEN)),
            "P": rng.standard_normal((dirs, 3 * HIDDEN))}
    data = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in data.items()}
    if layout:
        data["X"] = data["X"].transpose(1, 0, 2)
        data["H0"], data["C0"] = data["H0"].transpose(1, 0, 2), data["C0"].transpose(1, 0, 2)
    use = {"X": True, "B": bias, "L": lengths, "H0": initial, "C0": initial and op == "LSTM",
           "P": peepholes and op == "LSTM"}
    names = ["X", "W", "R"] + [k if use[k] else "" for k in ["B", "L", "H0", "C0", "P"]
                               if op == "LSTM" or k not in ("C0", "P")]
    while names[-1] == "":
        names.pop()
    outputs = [o for o in outputs if op == "LSTM" or o != "Y_c"]
    while outputs[-1] == "":
        outputs.pop()
    weights = [helper.make_tensor(n, TensorProto.FLOAT, s, (rng.standard_normal(s) * 0.5).ravel())
               for n, s in [("W", (dirs, g * HIDDEN, INPUT)), ("R", (dirs, g * HIDDEN, HIDDEN))]]
    feeds = {k: v for k, v in data.items() if use[k]}
    node = helper.make_node(op, names, outputs, hidden_size=HIDDEN, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, elem[v.dtype], v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def ours(model: onnx.ModelProto, feeds: dict, level: int = 0) -> list[np.ndarray]:
    compiled = autofusion.compile(model, level=level)
    outs = compiled.run(feeds)
    return [outs[n] for n in compiled.output_names]


def assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lengths, initial", [(False, False), (True, False), (False, True), (True, True)])
def test_directions_lengths_and_initial_states(op, direction, lengths, initial):
    model, feeds = recurrent_model(op, direction, lengths=lengths, initial=initial, peepholes=initial)
    assert_close(ours(model, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_batch_first_layout(op, direction):
    model, feeds = recurrent_model(op, direction, layout=1, lengths=True, initial=True, peepholes=True)
    time_first, tf_feeds = recurrent_model(op, direction, layout=0, lengths=True, initial=True, peepholes=True)
    y, *states = ort_run(time_first, tf_feeds)
    want = [y.transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in states]
    assert_close(ours(model, feeds), want)


@pytest.mark.parametrize("op, attrs", [
    ("RNN", {"clip": 0.3}), ("GRU", {"clip": 0.3}), ("LSTM", {"clip": 0.5}),
    ("GRU", {"linear_before_reset": 1}), ("LSTM", {"input_forget": 1}),
    ("RNN", {"activations": ["Relu", "Affine"], "activation_alpha": [0.7], "activation_beta": [0.2]}),
    ("GRU", {"activations": ["HardSigmoid", "Affine", "Sigmoid", "LeakyRelu"],
             "activation_alpha": [0.3, 0.7, 0.1], "activation_beta": [0.4, 0.2]}),
    ("GRU", {"activations": ["Sigmoid", "ScaledTanh", "Sigmoid", "ThresholdedRelu"],
             "activation_alpha": [0.7, 0.1], "activation_beta": [0.2]}),
    ("GRU", {"activations": ["Sigmoid", "Elu", "HardSigmoid", "LeakyRelu"]}),   # their defaults
    ("LSTM", {"activations": ["Sigmoid", "Softsign", "Softplus", "HardSigmoid", "Relu", "Elu"],
              "activation_alpha": [0.3, 0.8], "activation_beta": [0.6]}),
])
def test_attributes(op, attrs):
    model, feeds = recurrent_model(op, "bidirectional", lengths=True, initial=True, peepholes=True, **attrs)
    assert_close(ours(model, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("outputs", [
    ("Y",), ("", "Y_h"), ("Y", "", "Y_c"), ("", "", "Y_c"),
])
def test_optional_outputs(outputs):
    model, feeds = recurrent_model("LSTM", "bidirectional", lengths=True, outputs=outputs)
    assert_close(ours(model, feeds), ort_run(model, feeds))


def test_default_alpha_is_the_operators():
    """An activation without its alpha/beta takes its ONNX operator's defaults (the spec's word;
    ONNX Runtime takes 0): Affine is then alpha 1, beta 0."""
    affine, feeds = recurrent_model("RNN", activations=["Affine"], bias=False)
    identity, _ = recurrent_model("RNN", activations=["Affine"], activation_alpha=[1.0],
                                  activation_beta=[0.0], bias=False)
    assert_close(ours(affine, feeds), ort_run(identity, feeds))


class CnnLstm(nn.Module):
    """A text-line reader: conv features of an image strip, read left to right by a 2-layer
    bidirectional LSTM, a linear head per column."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.lstm = nn.LSTM(8 * 4, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x):                      # [N, 3, 8, W]
        f = self.conv(x).flatten(1, 2).transpose(1, 2)   # [N, W/2, 32]
        return self.head(self.lstm(f)[0])


@pytest.fixture(scope="module")
def cnn_lstm():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 20)
    f = io.BytesIO()
    torch.onnx.export(CnnLstm().eval(), (x,), f, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"])
    model = onnx.load_from_string(f.getvalue())
    assert "LSTM" in {n.op_type for n in model.graph.node}
    return model, {"x": x.numpy()}


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("level", [0, 2])
def test_cnn_lstm_from_torch(cnn_lstm, level, backend):
    model, feeds = cnn_lstm
    compiled = autofusion.compile(model, level=level, backend=backend)
    np.testing.assert_allclose(compiled(feeds["x"]), ort_run(model, feeds)[0], rtol=1e-4, atol=1e-5)
