"""Ifs the inputs decide (backend/branches.py): a condition computed from the inputs' sizes or a
small integer input's value picks, per call, a model compiled with that branch inlined. Every
result is checked against ONNX Runtime running the original model, calls alternating between
branches (the memo must never hand one call another's model)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import native
from autofusion.backend.branches import decidable
from autofusion.errors import InputError
from autofusion.ir import verify

F, I64 = TensorProto.FLOAT, TensorProto.INT64
BACKENDS = ["auto", "torch"]


def vi(name, t=F, shape=None):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def branch(name, nodes, outputs, inits=()):
    return helper.make_graph(nodes, name, [], outputs, list(inits))


def batch_one_squeezed() -> onnx.ModelProto:
    """y = relu(x·w) then, where the batch is 1, the batch axis squeezed away (as exporters
    write `if x.shape[0] == 1: x = x.squeeze(0)`), and a product after the If: the two branches
    give different ranks, so nothing after the If has a known shape until a branch is taken."""
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    then = branch("then", [helper.make_node("Squeeze", ["h", "zero"], ["t"])], [vi("t")],
                  [const("zero", [0])])
    other = branch("else", [helper.make_node("Identity", ["h"], ["e"])], [vi("e")])
    return model([
        helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Relu", ["p"], ["h"]),
        helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Equal", ["b", "one"], ["is_one"]),
        helper.make_node("Squeeze", ["is_one"], ["cond"]),
        helper.make_node("If", ["cond"], ["f"], then_branch=then, else_branch=other),
        helper.make_node("Mul", ["f", "two"], ["y"])],
        [vi("x", F, ["batch", 8])], [vi("y")],
        [numpy_helper.from_array(w, "w"), const("zero", [0]), const("one", [1]), const("two", 2.0, np.float32)])


def on_a_flag(nested: bool = False) -> onnx.ModelProto:
    """The whole graph one If on a scalar integer input (Silero VAD's sample rate): the then
    branch a 1-D convolution and sigmoid, the else branch another; nested: the then branch
    holds an If on the batch being 1 (decided only once the outer one is)."""
    rng = np.random.default_rng(1)
    k16 = rng.standard_normal((4, 1, 3)).astype(np.float32)
    k8 = rng.standard_normal((4, 1, 5)).astype(np.float32)
    inner = [helper.make_node("Shape", ["c16"], ["s16"]),
             helper.make_node("Gather", ["s16", "zero_s"], ["b16"], axis=0),
             helper.make_node("Equal", ["b16", "one_s"], ["one16"]),
             helper.make_node("If", ["one16"], ["r16"],
                              then_branch=branch("t2", [helper.make_node("Squeeze", ["c16", "zero1"], ["q"]),
                                                        helper.make_node("Unsqueeze", ["q", "zero1"], ["u"])],
                                                 [vi("u")], [const("zero1", [0])]),
                              else_branch=branch("e2", [helper.make_node("Neg", ["c16"], ["n"])], [vi("n")])),
             helper.make_node("Sigmoid", ["r16"], ["o16"])] if nested else \
        [helper.make_node("Sigmoid", ["c16"], ["o16"])]
    then = branch("sr16k", [helper.make_node("Unsqueeze", ["x", "one1"], ["x3"]),
                            helper.make_node("Conv", ["x3", "k16"], ["c16"], pads=[1, 1]), *inner],
                  [vi("o16")], [const("one1", [1]), const("zero_s", 0), const("one_s", 1), numpy_helper.from_array(k16, "k16")])
    other = branch("sr8k", [helper.make_node("Unsqueeze", ["x", "one2"], ["x3b"]),
                            helper.make_node("Conv", ["x3b", "k8"], ["c8"], pads=[2, 2]),
                            helper.make_node("Tanh", ["c8"], ["o8"])],
                   [vi("o8")], [const("one2", [1]), numpy_helper.from_array(k8, "k8")])
    return model([helper.make_node("Equal", ["sr", "sixteen"], ["is16"]),
                  helper.make_node("If", ["is16"], ["y"], then_branch=then, else_branch=other)],
                 [vi("x", F, ["batch", "samples"]), vi("sr", I64, [])], [vi("y")], [const("sixteen", 16000)])


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check(compiled, m, feed_sets):
    for feeds in feed_sets:
        (got,) = compiled.run(feeds).values()
        (want,) = ort_run(m, feeds)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def leaf(compiled, feeds):
    """The plan a call with these inputs runs."""
    return compiled.program_for_inputs(feeds).plan


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_if_on_the_batch_size_runs_the_branch_it_takes_inlined(backend):
    m = batch_one_squeezed()
    compiled = autofusion.compile(m, backend=backend)
    assert compiled.branches is not None and "decided by the inputs' sizes" in compiled.report.backend
    rng = np.random.default_rng(2)
    one, three = ({"x": rng.standard_normal((b, 8)).astype(np.float32)} for b in (1, 3))
    check(compiled, m, [one, three, one, three])
    assert len(compiled.branches.versions) == 2
    for feeds in (one, three):
        plan = leaf(compiled, feeds)
        assert not any(n.op_type == "If" for n in plan.decisions)
        verify(compiled.program_for_inputs(feeds).graph)
        if backend == "auto" and native.unavailable() is None:
            assert all(p.target == "native" for p in plan.partitions), plan   # all of it, one call


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_if_on_a_scalar_input_takes_each_value_s_branch(backend):
    m = on_a_flag()
    compiled = autofusion.compile(m, backend=backend)
    assert {v.name for v in compiled.branches.decision.by_value} == {"sr"}
    x = np.random.default_rng(3).standard_normal((1, 40)).astype(np.float32)
    feeds = [{"x": x, "sr": np.array(sr)} for sr in (16000, 8000, 16000, 8000, 44100)]
    check(compiled, m, feeds)
    assert set(compiled.branches.versions) == {(True,), (False,)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_if_inside_a_taken_branch_is_decided_in_its_version(backend):
    m = on_a_flag(nested=True)
    compiled = autofusion.compile(m, backend=backend)
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal((b, 24)).astype(np.float32), "sr": np.array(sr)}
             for b, sr in ((1, 16000), (2, 16000), (1, 8000), (1, 16000), (2, 16000))]
    check(compiled, m, feeds)
    version = compiled.branches.versions[(True,)]
    assert version.branches is not None and set(version.branches.versions) == {(True,), (False,)}
    assert not any(n.op_type == "If" for n in leaf(compiled, feeds[0]).decisions)


def test_a_condition_on_tensor_values_is_not_decided_by_the_inputs():
    """If (sum(x) > 0): the data decide, so the If stays (and runs its bodies per call)."""
    then = branch("t", [helper.make_node("Relu", ["x"], ["a"])], [vi("a")])
    other = branch("e", [helper.make_node("Neg", ["x"], ["b"])], [vi("b")])
    m = model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
               helper.make_node("Greater", ["s", "zero"], ["c"]),
               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [vi("x", F, ["n"])], [vi("y")], [const("zero", 0.0, np.float32)])
    compiled = autofusion.compile(m)
    assert compiled.branches is None
    check(compiled, m, [{"x": np.array([1.0, -0.5], np.float32)}, {"x": np.array([-1.0, 0.5], np.float32)}])


def test_an_integer_input_of_many_values_is_not_read_by_value():
    """A condition on a large integer tensor (token ids) is data, not a flag."""
    m = model([helper.make_node("ReduceMax", ["ids"], ["top"], keepdims=0),
               helper.make_node("Equal", ["top", "zero"], ["c"]),
               helper.make_node("If", ["c"], ["y"],
                                then_branch=branch("t", [helper.make_node("Identity", ["x"], ["a"])], [vi("a")]),
                                else_branch=branch("e", [helper.make_node("Neg", ["x"], ["b"])], [vi("b")]))],
              [vi("x", F, [4]), vi("ids", I64, [128])], [vi("y")], [const("zero", 0)])
    compiled = autofusion.compile(m)
    assert compiled.branches is None


def test_level_0_keeps_the_if():
    assert autofusion.compile(batch_one_squeezed(), level=0).branches is None


def test_a_wrong_input_to_a_model_with_branches_is_named():
    compiled = autofusion.compile(on_a_flag())
    with pytest.raises(InputError, match="'sr'"):
        compiled(np.zeros((1, 8), np.float32), np.array(1.5))
    with pytest.raises(InputError, match="'x'"):
        compiled(np.zeros((1, 8, 2), np.float32), np.array(16000))


def test_decidable_reads_shapes_not_data():
    from autofusion.api import load
    from autofusion.backend.executor import evaluate_node
    from autofusion.fusion.pipeline import cleanup
    g = load(batch_one_squeezed())
    cleanup(g, evaluate_node, {})
    decision = decidable(g)
    assert [n.op_type for n in decision.ifs] == ["If"] and not decision.by_value
    import torch
    assert decision([torch.zeros(1, 8)]) == (True,) and decision([torch.zeros(5, 8)]) == (False,)
