"""If inlining (passes/control_flow.py): an If whose condition folds to a constant becomes the
branch it takes, with that branch's values exactly as they were — a scalar body constant stays a
scalar (Silero VAD's decoder read a state row with a scalar Gather index inside an If nested in
another; inlined as [1], the row gained an axis and a Conv1d after it failed at levels 1 and 2).
Equal to ONNX Runtime and to level 0, nested inside an If on a run-time input, on random bodies too."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import autofusion
from autofusion.ir import verify

from ..fusion.test_random_graphs import D, STEPS, Builder

RNG = np.random.default_rng(0)


def constant(name: str, array) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(array), name))


def branch(name: str, nodes, outputs: list[str]) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                               for o in outputs])


def nested_model(inner_then: list, inner_out: str) -> onnx.ModelProto:
    """outer If on the bool input `go`: then, an If whose condition is state's first dim (static:
    2) as a bool — folded, so inlined — taking `inner_then`; else x itself."""
    inner = helper.make_node("If", ["known"], ["inner_out"], name="inner",
                             then_branch=branch("inner_then", inner_then, [inner_out]),
                             else_branch=branch("inner_else", [helper.make_node("Identity", ["x"], ["same"])],
                                                ["same"]))
    outer_then = branch("outer_then", [
        helper.make_node("Shape", ["state"], ["state_shape"]),
        constant("zero_index", np.array(0, np.int64)),
        helper.make_node("Gather", ["state_shape", "zero_index"], ["state_rows"]),
        helper.make_node("Cast", ["state_rows"], ["known"], to=TensorProto.BOOL),
        inner], ["inner_out"])
    outer = helper.make_node("If", ["go"], ["y"], name="outer", then_branch=outer_then,
                             else_branch=branch("outer_else", [helper.make_node("Identity", ["x"], ["x_same"])],
                                                ["x_same"]))
    g = helper.make_graph([outer], "nested",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D]),
                           helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", D]),
                           helper.make_tensor_value_info("go", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def state_row_model() -> onnx.ModelProto:
    """The inner branch reads state[0] (a scalar index: [batch, D]) into a fused product."""
    w = RNG.standard_normal((D, D)).astype(np.float32)
    return nested_model([
        constant("first", np.array(0, np.int64)),
        helper.make_node("Gather", ["state", "first"], ["row"]),
        constant("w", w), constant("b", RNG.standard_normal(D).astype(np.float32)),
        helper.make_node("MatMul", ["row", "w"], ["product"]),
        helper.make_node("Add", ["product", "b"], ["biased"]),
        helper.make_node("Relu", ["biased"], ["act"]),
        helper.make_node("Add", ["act", "x"], ["inner_y"])], "inner_y")


def feeds(batch: int, go: bool) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal((batch, D)).astype(np.float32),
            "state": RNG.standard_normal((2, batch, D)).astype(np.float32), "go": np.array(go)}


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("batch, go", [(1, True), (3, True), (2, False)])
def test_an_inlined_branch_keeps_a_scalar_index_a_scalar(level, batch, go):
    model = state_row_model()
    compiled = autofusion.compile(model, level=level)
    verify(compiled.graph)
    given_ = feeds(batch, go)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, given_)
    got = compiled.run(given_)["y"]
    assert got.shape == want.shape == (batch, D)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_inner_if_is_inlined_and_its_product_fused():
    compiled = autofusion.compile(state_row_model(), level=2)
    (outer,) = [n for n in compiled.graph.nodes if n.op_type == "If"]
    then = outer.attrs["then_branch"]
    assert not any(n.op_type == "If" for n in then.nodes)
    assert any(n.op_type == "FusedMatMul" for n in then.nodes)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(sorted(STEPS)), st.integers(0, 1000)), min_size=1, max_size=6),
       level=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_random_bodies_inlined_inside_nested_ifs_equal_level_0(steps, level, seed):
    """The random graphs of tests/fusion/test_random_graphs.py as the inlined branch (reading
    x reshaped to [2, D, D] and a scalar-indexed row of state), inside the outer If."""
    b = Builder(np.random.default_rng(seed))
    b.values = ["start"]
    for kind, pick in steps:
        v, w = b.values[-1], b.values[pick % len(b.values)]
        b.values.append(STEPS[kind](b, v, w))
    body = [constant("first", np.array(0, np.int64)),
            helper.make_node("Gather", ["state", "first"], ["row"]),
            helper.make_node("Add", ["x", "row"], ["summed"]),
            constant("cube", np.array([2, D, D], np.int64)),
            helper.make_node("Reshape", ["summed", "cube"], ["start"]),
            *(constant(name, array) for name, array in b.inits.items()), *b.nodes,
            constant("flat", np.array([-1, D], np.int64)),
            helper.make_node("Reshape", [b.values[-1], "flat"], ["inner_y"])]
    model = nested_model(body, "inner_y")
    given_ = {"x": np.random.default_rng(seed).standard_normal((2 * D, D)).astype(np.float32),
              "state": np.random.default_rng(seed + 1).standard_normal((2, 2 * D, D)).astype(np.float32),
              "go": np.array(True)}
    want = autofusion.compile(model, level=0).run(given_)["y"]
    fused = autofusion.compile(model, level=level)
    verify(fused.graph)
    got = fused.run(given_)["y"]
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
