"""The executor: generated straight-line code, memory safety of outputs, returned kinds."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import autofusion

from ..helpers import conv_relu_model


def test_generated_code_is_straight_line_with_early_frees():
    src = autofusion.compile(conv_relu_model(), level=0, backend="torch").source
    assert src.splitlines() == ["def run(_sizes, in0):", "    v0 = k0(in0, c0, c1)", "    v1 = k1(v0)",
                                "    v2 = k2(v1, v0)", "    del v0, v1", "    return (v2, )"]


def test_outputs_never_alias_inputs_or_constants():
    g = helper.make_graph(
        [helper.make_node("Reshape", ["c", "s"], ["y"]), helper.make_node("Reshape", ["x", "s"], ["z"]),
         helper.make_node("Identity", ["x"], ["w"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "yzw"],
        [numpy_helper.from_array(np.ones((2, 2), np.float32), "c"),
         numpy_helper.from_array(np.array([4], np.int64), "s")])
    model = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), level=0)
    x = np.zeros((2, 2), np.float32)
    for out in model(x):
        out[...] = 5
    np.testing.assert_array_equal(x, 0)
    np.testing.assert_array_equal(model(x)[0], 1)


def test_numpy_in_numpy_out_torch_in_torch_out():
    model = autofusion.compile(conv_relu_model(), level=0)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert isinstance(model(x), np.ndarray)
    out = model(torch.from_numpy(x))
    assert isinstance(out, torch.Tensor)
    np.testing.assert_array_equal(out.numpy(), model(x))


def test_a_model_without_inputs_answers_in_numpy():
    g = helper.make_graph([helper.make_node("Constant", [], ["y"], value_float=2.0)], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), level=2)
    assert isinstance(model(), np.ndarray) and model() == 2


def test_a_failing_fused_kernel_names_the_rule_and_the_original_nodes():
    g = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["s"], name="/act/Sigmoid"),
         helper.make_node("Mul", ["x", "s"], ["y"], name="/act/Mul")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), level=1,
                               backend="torch")
    [fused] = model.graph.nodes
    model.program.fn.__globals__["k0"] = lambda x: 1 / 0   # a kernel that breaks at run time
    with pytest.raises(autofusion.NodeExecutionError) as e:
        model(np.ones(3, np.float32))
    assert str(e.value).startswith(
        "While executing node '/act/Sigmoid_1' (autofusion::Activation) [made by SiLUFusionOp; "
        "from ONNX nodes '/act/Sigmoid', '/act/Mul']: ZeroDivisionError")


@pytest.mark.parametrize("bad,match", [
    (torch.zeros(1, 3, 8, 8, dtype=torch.float64), "expected dtype float, got float64"),
    (torch.zeros(1, 3, 8, 7), "dimension 3 must be 8"),
    (torch.zeros(3, 8, 8), "expected rank 4"),
])
def test_a_tensor_of_another_dtype_or_shape_is_an_input_error_on_a_static_model(bad, match):
    static = autofusion.compile(_static(conv_relu_model()), level=2)
    assert static(torch.zeros(1, 3, 8, 8)).shape == (1, 4, 8, 8)
    with pytest.raises(autofusion.InputError, match=rf"input 'x'.*{match}"):
        static(bad)


def test_a_native_programs_outputs_are_its_own():
    model = autofusion.compile(_static(conv_relu_model()), level=2)
    x = torch.randn(1, 3, 8, 8)
    y = model(x)
    assert model.program.outputs_fresh == (model.plan.partitions[0].target == "native")
    with torch.inference_mode():   # the torch backend's outputs are inference tensors
        y += 1
    torch.testing.assert_close(model(x) + 1, y)


def _static(model):
    """The model with its batch dim fixed to 1."""
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    return model


def _model(nodes, inputs, outputs, consts=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in consts])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def grid_model():
    """y = x + [0, 1, ..., w-1] along the last axis, the row made from x's width (a detector's
    anchor grid, in small): the Range and what leads to it depend on the sizes alone."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "three"], ["w"]),
             helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Range", ["zero", "wf", "one"], ["grid"]), helper.make_node("Add", ["x", "grid"], ["y"]),
             helper.make_node("Identity", ["grid"], ["row"])]
    return _model(nodes, [("x", ["n", 2, "h", "w"])], ["y", "row"],
                  [("three", np.array(3, np.int64)), ("zero", np.array(0, np.float32)), ("one", np.array(1, np.float32))])


@pytest.mark.parametrize("backend", ["torch", "native"])
def test_values_made_from_sizes_alone_are_computed_once_per_set_of_sizes(backend):
    if backend == "native" and autofusion.backend.native.unavailable():
        pytest.skip("no native backend here")
    model = autofusion.compile(grid_model(), backend=backend, size_cache=2)
    assert "_memo.get(_sizes)" in model.source
    memo = model.program.namespace["_memo"]
    rng = np.random.default_rng(0)
    for n, h, w in [(1, 3, 4), (2, 3, 6), (1, 3, 4), (1, 5, 4), (1, 3, 4)]:
        x = rng.standard_normal((n, 2, h, w)).astype(np.float32)
        y, row = model(x)
        np.testing.assert_array_equal(row, np.arange(w, dtype=np.float32))
        np.testing.assert_allclose(y, x + np.arange(w, dtype=np.float32), rtol=0, atol=0)
        row[...] = -1   # the caller's copy: the kept row is not changed
    assert [dict(key) for key in memo.kept] == [{"n": 1, "h": 5, "w": 4}, {"n": 1, "h": 3, "w": 4}]


def test_a_shape_the_data_decides_is_not_kept_per_set_of_sizes():
    """The count NonZero finds differs between two calls of one size: its Shape is computed each
    time."""
    nodes = [helper.make_node("NonZero", ["x"], ["idx"]), helper.make_node("Shape", ["idx"], ["s"]),
             helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)]
    model = autofusion.compile(_model(nodes, [("x", ["n"])], ["y"]))
    assert "_memo" not in model.source
    np.testing.assert_array_equal(model(np.array([1, 0, 1, 0], np.float32)), [1, 2])
    np.testing.assert_array_equal(model(np.array([1, 1, 1, 0], np.float32)), [1, 3])


def test_a_value_made_from_sizes_is_kept_for_the_steps_after_the_ones_moved_first():
    """s = Shape(x) is read by a Reshape of x's data and, later in the graph, by a Cast of sizes
    alone: the Cast runs first with the Shape, and s stays for the Reshape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"]),
             helper.make_node("Cast", ["s"], ["n"], to=TensorProto.FLOAT)]
    model = autofusion.compile(_model(nodes, [("x", ["a", 3])], ["y", "n"]), level=0, backend="torch")
    assert "_memo.get(_sizes)" in model.source
    for a in (2, 5, 2):
        x = np.arange(a * 3, dtype=np.float32).reshape(a, 3)
        y, n = model(x)
        np.testing.assert_array_equal(y, x)
        np.testing.assert_array_equal(n, [a, 3])


def scatters_model(shared: bool, from_input: bool):
    """zeros [6, 4] (or the input x), rows 1 and 4 scattered in, then rows 0 and 2 (torchvision's
    multi-scale RoIAlign merges its levels so); shared: the zeros also read by a second scatter."""
    start = "x" if from_input else "z"
    nodes = [] if from_input else [helper.make_node("ConstantOfShape", ["shape"], ["z"])]
    nodes += [helper.make_node("ScatterElements", [start, "i1", "u1"], ["s1"], axis=0),
              helper.make_node("ScatterElements", ["s1", "i2", "u2"], ["y"], axis=0)]
    outputs = ["y"]
    if shared:
        nodes.append(helper.make_node("ScatterElements", [start, "i2", "u2"], ["w"], axis=0))
        outputs.append("w")
    rows = lambda r: np.repeat(np.array(r, np.int64)[:, None], 4, 1)   # noqa: E731
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.array([6, 4], np.int64), "shape"),
                           numpy_helper.from_array(rows([1, 4]), "i1"), numpy_helper.from_array(rows([0, 2]), "i2"),
                           numpy_helper.from_array(np.ones((2, 4), np.float32), "u1"),
                           numpy_helper.from_array(np.full((2, 4), 2, np.float32), "u2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shared, from_input", [(False, False), (True, False), (False, True)])
def test_a_scatter_writes_into_a_fresh_tensor_only_where_no_one_else_reads_it(shared, from_input):
    """A chain of ScatterElements into a ConstantOfShape writes in place (each scatter's copy of
    the whole tensor saved); a tensor another node reads, or the caller's input, is copied."""
    import onnxruntime as ort
    m = scatters_model(shared, from_input)
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    kept = x.copy()
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})
    for level in (0, 2):
        got = autofusion.compile(m, level=level, backend="torch").run({"x": x})
        for w, g in zip(want, got.values()):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(x, kept)


@pytest.mark.parametrize("shared, in_place", [(False, [True, True]), (True, [False, True, False])])
def test_which_scatters_run_in_place(shared, in_place):
    """In place: each scatter whose first input is a fresh tensor only it reads (the zeros, or the
    scatter before); the zeros a second scatter also reads are copied by both."""
    compiled = autofusion.compile(scatters_model(shared, False), level=0, backend="torch")
    kernels = [compiled.program.namespace[f"k{p.index}"] for p in compiled.plan.partitions
               if p.nodes[0].op_type == "ScatterElements"]
    # the out-of-place kernel offers its in-place form; the in-place form offers nothing
    assert [getattr(k, "into_input", None) is None for k in kernels] == in_place
