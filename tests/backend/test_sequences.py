"""Tensor sequences run here (ir/sequences.py, backend/torch_cpu/sequence.py): each sequence op
against ONNX Runtime on both backends at levels 0 and 2 (strict, so nothing falls back),
sequences in and out of model.run as lists, a Loop carrying a sequence, a TorchScript export that
builds a list in a loop, the fused file run by ONNX Runtime, and ONNX's own sequence models."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.errors import GraphError, InputError, NodeExecutionError
from autofusion.ir import Graph, verify
from autofusion.ir.graph import SequenceType

F, I64 = TensorProto.FLOAT, TensorProto.INT64
MODES = [(backend, level) for backend in ("auto", "torch") for level in (0, 2)]
RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    """inputs/outputs: (name, elem type, shape, is a sequence)."""
    def info(name, t, shape, seq):
        return (helper.make_tensor_sequence_value_info if seq else helper.make_tensor_value_info)(name, t, shape)
    g = helper.make_graph(nodes, "g", [info(*i) for i in inputs], [info(*o) for o in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))


def _assert_same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    assert got.shape == np.shape(want) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _check(model, feeds, want=None):
    """The model on both backends at levels 0 and 2, strict, against ONNX Runtime (or `want`)."""
    want = _ort(model, feeds) if want is None else want
    for backend, level in MODES:
        compiled = autofusion.compile(model, level=level, backend=backend, strict=True)
        verify(compiled.graph)
        got = compiled.run(feeds)
        for name, w in want.items():
            _assert_same(got[name], w)
    return compiled


def _position(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


A, B, C = (RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
ABC = [("a", F, [2, 3], False), ("b", F, [2, 3], False), ("c", F, [2, 3], False)]
FEEDS = {"a": A, "b": B, "c": C}


@pytest.mark.parametrize("position", [0, 2, -1, -3])
def test_sequence_at_a_run_time_position(position):
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]
    model = _model(nodes, [*ABC, ("p", I64, [], False)], [("y", F, None, False)])
    _check(model, {**FEEDS, "p": np.array(position, np.int64)})


def test_sequence_at_out_of_range_names_the_node():
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["y"], name="at")]
    model = _model(nodes, [*ABC[:2], ("p", I64, [], False)], [("y", F, None, False)])
    compiled = autofusion.compile(model, strict=True)
    with pytest.raises(NodeExecutionError, match=r"'at'.*position 2 is out of range \[-2, 1\]"):
        compiled.run({"a": A, "b": B, "p": np.array(2, np.int64)})


@pytest.mark.parametrize("position", [None, 0, 2, -1, 1])
def test_sequence_insert_at_a_position_or_the_end(position):
    inputs = ["s0", "c"] + (["p"] if position is not None else [])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
             helper.make_node("SequenceInsert", inputs, ["s"]),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    inits = [_position("p", position)] if position is not None else []
    model = _model(nodes, ABC, [("s", F, [2, 3], True), ("n", I64, [], False)], inits)
    _check(model, FEEDS)


@pytest.mark.parametrize("position", [None, 0, -2])
def test_sequence_erase_at_a_position_or_the_last(position):
    inputs = ["s0"] + (["p"] if position is not None else [])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s0"]),
             helper.make_node("SequenceErase", inputs, ["s"])]
    inits = [_position("p", position)] if position is not None else []
    model = _model(nodes, ABC, [("s", F, [2, 3], True)], inits)
    _check(model, FEEDS)


@pytest.mark.parametrize("split, keepdims, axis", [
    (None, 1, 1), (None, 0, 1), (None, 0, -1),     # one piece per element, kept or squeezed
    (np.array(2, np.int64), 1, 1),                 # a scalar: pieces of 2, the last of 1
    (np.array([1, 4], np.int64), 1, -1),           # listed sizes (keepdims does not apply)
    (np.array(2, np.int64), 0, 0),                 # keepdims ignored with a split
])
def test_split_to_sequence(split, keepdims, axis):
    from onnx.reference import ReferenceEvaluator
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    inputs = ["x"] + (["split"] if split is not None else [])
    nodes = [helper.make_node("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims)]
    inits = [numpy_helper.from_array(split, "split")] if split is not None else []
    model = _model(nodes, [("x", F, [3, 5], False)], [("s", F, None, True)], inits)
    # ONNX Runtime squeezes with keepdims=0 and a split (and fails), which the spec ignores there
    want = {"s": ReferenceEvaluator(model).run(None, {"x": x})[0]} if split is not None and not keepdims else None
    _check(model, {"x": x}, want)


@pytest.mark.parametrize("axis, new_axis", [(0, 0), (-1, 0), (0, 1), (2, 1), (-1, 1)])
def test_concat_from_sequence(axis, new_axis):
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)]
    _check(_model(nodes, ABC, [("y", F, None, False)]), FEEDS)


def test_sequence_empty_then_inserts_keep_the_element_type():
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=TensorProto.DOUBLE),
             helper.make_node("SequenceInsert", ["e", "x"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "x"], ["t"]),
             helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=0)]
    model = _model(nodes, [("x", TensorProto.DOUBLE, [2], False)], [("y", TensorProto.DOUBLE, None, False)])
    _check(model, {"x": np.array([1.5, -2.0])})


def _sequence_map_model():
    """SequenceMap: each element of x (lengths differ) plus the tensor b, and its length."""
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "bias"], ["sum"]), helper.make_node("Shape", ["e"], ["shape"])],
        "map_body", [helper.make_tensor_value_info("e", F, ["N"]), helper.make_tensor_value_info("bias", F, [1])],
        [helper.make_tensor_value_info("sum", F, ["N"]), helper.make_tensor_value_info("shape", I64, [1])])
    nodes = [helper.make_node("SequenceMap", ["x", "b"], ["sums", "shapes"], body=body)]
    return _model(nodes, [("x", F, ["N"], True), ("b", F, [1], False)],
                  [("sums", F, ["N"], True), ("shapes", I64, [1], True)], opset=18)


def test_sequence_map_runs_its_body_per_element():
    from onnx.reference import ReferenceEvaluator
    model = _sequence_map_model()
    x = [RNG.standard_normal(n).astype(np.float32) for n in (3, 1, 4)]
    feeds = {"x": x, "b": np.array([0.5], np.float32)}
    sums, shapes = ReferenceEvaluator(model).run(None, feeds)   # ONNX Runtime has no SequenceMap kernel
    _check(model, feeds, {"sums": sums, "shapes": shapes})


def test_sequence_inputs_and_outputs_through_run_and_call():
    nodes = [helper.make_node("SequenceInsert", ["s", "x"], ["t"]),
             helper.make_node("SequenceLength", ["t"], ["n"])]
    model = _model(nodes, [("s", F, [2], True), ("x", F, [2], False)], [("t", F, [2], True), ("n", I64, [], False)])
    seq = [np.array([1, 2], np.float32), np.array([3, 4], np.float32)]
    x = np.array([5, 6], np.float32)
    want = _ort(model, {"s": seq, "x": x})
    for backend in ("auto", "torch"):
        compiled = autofusion.compile(model, backend=backend, strict=True)
        got = compiled.run({"s": seq, "x": x})
        _assert_same(got["t"], want["t"])
        assert all(isinstance(e, np.ndarray) for e in got["t"])
        t, n = compiled([torch.from_numpy(e) for e in seq], torch.from_numpy(x))   # torch in, torch out
        assert all(isinstance(e, torch.Tensor) for e in t) and int(n) == 3
        got["t"][0][0] = 99   # an output never shares memory with an input
        assert seq[0][0] == 1
        assert compiled.run({"s": [], "x": x})["n"] == 1   # an empty sequence


def test_a_sequence_input_that_is_not_a_list_is_an_input_error():
    nodes = [helper.make_node("SequenceLength", ["s"], ["n"])]
    compiled = autofusion.compile(_model(nodes, [("s", F, [2], True)], [("n", I64, [], False)]), strict=True)
    with pytest.raises(InputError, match=r"input 's': expected a sequence \(a list of arrays, seq\(float\[2\]\)\), got ndarray"):
        compiled.run({"s": np.zeros((3, 2), np.float32)})
    with pytest.raises(InputError, match=r"input 's\[1\]': expected dtype float, got int64"):
        compiled.run({"s": [np.zeros(2, np.float32), np.zeros(2, np.int64)]})
    with pytest.raises(InputError, match=r"input 's\[0\]': dimension 0 must be 2"):
        compiled.run({"s": [np.zeros(3, np.float32)]})
    with pytest.raises(InputError, match=r"input 'x': expected a tensor \(float\[2\]\), got a list"):
        autofusion.compile(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2], False)],
                                  [("y", F, [2], False)])).run({"x": [np.zeros(2, np.float32)]})


def _loop_model():
    """A Loop appending x * i to a sequence per iteration, then ConcatFromSequence stacking them."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Relu", ["xi"], ["r"]),
         helper.make_node("SequenceInsert", ["s_in", "r"], ["s_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                 helper.make_tensor_sequence_value_info("s_in", F, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_out", F, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=1)]
    return _model(nodes, [("x", F, [2, 3], False), ("M", I64, [], False)], [("y", F, None, False)])


def test_a_loop_carrying_a_sequence_runs_here():
    model = _loop_model()
    for trips in (1, 4):
        compiled = _check(model, {"x": A, "M": np.array(trips, np.int64)})
    assert {n.op_type for n in compiled.graph.nodes} == {"SequenceEmpty", "Loop", "ConcatFromSequence"}
    assert "OnnxRuntimeCall" not in str(compiled.graph)


def test_sequence_steps_are_torch_steps_between_native_partitions():
    nodes = [helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("SequenceConstruct", ["r", "b"], ["s"]),
             helper.make_node("Identity", ["s"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0),
             helper.make_node("Sigmoid", ["c"], ["y"])]
    model = _model(nodes, ABC[:2], [("y", F, None, False)])
    _check(model, {"a": A, "b": B})
    plan = autofusion.compile(model, level=0, backend="auto").plan
    for part in plan.partitions:
        if part.target == "native":
            assert not any(v.sequence is not None for v in [*part.inputs, *part.outputs])
    if plan.native is None:
        assert "not onednn: a tensor sequence" in str(plan)   # the Identity of a sequence


def test_a_torchscript_list_built_in_a_loop_exports_and_runs_here():
    class Rows(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            rows: list[torch.Tensor] = []
            for i in range(x.shape[0]):
                rows.append(torch.relu(x[i]) * 2.0)
            return torch.stack(rows, 0) + 1.0

    x = torch.randn(4, 3)
    f = io.BytesIO()
    torch.onnx.export(torch.jit.script(Rows()), (x,), f, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}})
    model = onnx.load_from_string(f.getvalue())
    ops = {n.op_type for n in model.graph.node}
    assert "Loop" in ops and ops & {"SequenceEmpty", "SequenceConstruct", "ConcatFromSequence"}
    for n in (4, 1):
        xn = torch.randn(n, 3).numpy()
        _check(model, {"x": xn}, {"y": (np.maximum(xn, 0) * 2 + 1).astype(np.float32)})


def test_the_fused_model_exports_sequences_and_onnx_runtime_runs_it():
    model = _loop_model()
    feeds = {"x": A, "M": np.array(3, np.int64)}
    compiled = autofusion.compile(model, strict=True)
    exported = autofusion.export_onnx(compiled.graph)
    loop = next(n for n in exported.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    assert body.input[2].type.HasField("sequence_type") and body.output[1].type.HasField("sequence_type")
    assert {vi.name for vi in exported.graph.value_info if vi.type.HasField("sequence_type")} == {"s0", "s"}
    np.testing.assert_allclose(_ort(exported, feeds)["y"], _ort(model, feeds)["y"], rtol=1e-6)
    again = autofusion.compile(exported, strict=True)   # reads back
    np.testing.assert_allclose(again.run(feeds)["y"], _ort(model, feeds)["y"], rtol=1e-6)


def test_verify_refuses_a_sequence_read_as_a_tensor_and_a_tensor_as_a_sequence():
    g = Graph()
    x = g.add_input("x", (2,), None)
    s = g.add_input("s", None, None, SequenceType())
    relu = g.add_node("Relu", [s], ["y"], name="relu")
    g.outputs.append(relu.outputs[0])
    with pytest.raises(GraphError, match=r"'relu'.*input 0 \('s'\) is a sequence, which Relu cannot read"):
        verify(g)
    g = Graph()
    x = g.add_input("x", (2,), None)
    n = g.add_node("SequenceLength", [x], ["n"], name="len")
    g.outputs.append(n.outputs[0])
    with pytest.raises(GraphError, match=r"'len'.*input 0 \('x'\) must be a sequence"):
        verify(g)


def test_onnx_simple_sequence_models_pass_on_the_onnx_runner():
    """ONNX's own test_sequence_model1-8 (data/simple), through its backend runner, strict."""
    from autofusion.benchmarks.onnx_suites import (
        OneCaseRunner,
        backend_for,
        discover,
        run_in_runner,
    )
    cases, _ = discover(("simple",), "^test_sequence_model")
    assert len(cases) == 8
    for level in (0, 2):
        runner = OneCaseRunner(backend_for(f"autofusion-L{level}"))
        failed = [(c.name, why) for c in cases for ok, why in [run_in_runner(runner, "simple", c.test)] if not ok]
        assert not failed, failed


def test_an_fp16_model_with_sequences_is_not_widened():
    """Widening would type the tensors read from a sequence fp32 while its elements stay fp16."""
    H = TensorProto.FLOAT16
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, [("a", H, [2, 3], False), ("b", H, [2, 3], False)], [("y", H, None, False)],
                   [_position("p", 1)])
    compiled = _check(model, {"a": A.astype(np.float16), "b": B.astype(np.float16)})
    assert "Cast" not in compiled.graph.op_histogram()
    assert compiled.graph.nodes[-1].inputs[0].dtype == autofusion.ir.DType.FLOAT16


def test_a_sequence_input_given_back_as_an_output_is_a_copy():
    model = _model([], [("s", F, [2], True)], [("s", F, [2], True)])
    seq = [np.array([1, 2], np.float32)]
    for backend in ("auto", "torch"):
        got = autofusion.compile(model, backend=backend, strict=True).run({"s": seq})["s"]
        _assert_same(got, seq)
        got[0][0] = 7
        assert seq[0][0] == 1
