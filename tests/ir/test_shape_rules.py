"""The op table's shape/dtype rules, checked against what ONNX Runtime produces.

Each test builds a small ONNX model, imports it, and asks every node's rule for its outputs.
A rule may leave a dim (or the whole shape) unknown, but what it states must hold: run in ONNX
Runtime with the symbolic dims bound to sizes (twice, with different sizes), every output has
the rank, the sizes, the sizes the symbols stand for, and the dtype the rule says. Where ONNX's
own shape inference gives a dim too, the two agree. Each test also pins what the rule is
expected to know, so that a rule that gave up everywhere would not pass.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autofusion.frontend import import_onnx
from autofusion.ir import DType, lookup
from autofusion.ir.symbolic import SizeExpr, add, ceildiv, evaluate, floordiv, maximum, mul, sub
from autofusion.passes import fold_constants, fold_static_shapes
from autofusion.passes import cleanup
from autofusion.backend import evaluate_node

BINDINGS = ({"b": 2, "s": 3, "h": 5, "w": 7, "c": 4}, {"b": 3, "s": 6, "h": 8, "w": 4, "c": 2})
INT_MAX, INT_MIN = 2**63 - 1, -2**63


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=outs[0], **attrs)


def model(nodes, inputs: dict, consts: dict | None = None, opset: int = 17) -> onnx.ModelProto:
    """inputs: name -> shape (float32, dims may be symbols) or an array (fed as given);
    consts: initializers. Every node output is a graph output, so ORT returns them all."""
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) if not isinstance(s, np.ndarray)
           else helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(s.dtype), list(s.shape))
           for n, s in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(o) for n in nodes for o in n.output if o]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()]
    g = helper.make_graph(nodes, "rules", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def rule_types(m: onnx.ModelProto):
    """{output name: (rule shape, rule dtype, ONNX-inferred shape)} for every node's outputs."""
    graph = import_onnx(m)
    types = {}
    for n in graph.nodes:
        opdef = lookup(n.domain, n.op_type)
        assert opdef.infer is not None, f"{n.op_type} has no shape rule"
        for v, (shape, dtype) in zip(n.outputs, opdef.infer(n)):
            types[v.name] = (shape, dtype, v.shape)
    return types


def _feeds(m: onnx.ModelProto, inputs: dict, binding: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {n: s if isinstance(s, np.ndarray) else
            rng.standard_normal([binding[d] if isinstance(d, str) else d for d in s]).astype(np.float32)
            for n, s in inputs.items()}


def _holds(rule, actual: tuple, binding: dict) -> bool:
    if rule is None:
        return True
    return len(rule) == len(actual) and all(r is None or evaluate(r, binding) == a for r, a in zip(rule, actual))


def _agrees_with_onnx(rule, onnx_shape) -> bool:
    """Where both know a dim, they say the same (ONNX's made-up unk__ symbols aside)."""
    if rule is None or onnx_shape is None:
        return True
    if len(rule) != len(onnx_shape):
        return False
    for r, o in zip(rule, onnx_shape):
        if r is None or o is None or (isinstance(o, str) and o.startswith("unk__")) or isinstance(r, SizeExpr):
            continue   # ONNX names a computed size with a symbol of its own where the rules compute it
        if r != o:
            return False
    return True


def check(nodes, inputs: dict, consts: dict | None = None, opset: int = 17, expect: dict | None = None,
          bindings=BINDINGS):
    """The rules' shapes hold in ORT under every binding, agree with ONNX inference, and are
    `expect` (output name -> shape) where given. Returns {name: rule shape}."""
    m = model(nodes, inputs, consts, opset)
    types = rule_types(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for seed, binding in enumerate(bindings):
        got = dict(zip(names, sess.run(None, _feeds(m, inputs, binding, seed))))
        for name, (shape, dtype, _) in types.items():
            if name not in got:
                continue
            actual = got[name]
            assert _holds(shape, actual.shape, binding), \
                f"{name}: rule says {shape}, ORT gives {actual.shape} with {binding}"
            assert dtype is None or dtype.numpy == actual.dtype, f"{name}: rule {dtype}, ORT {actual.dtype}"
    for name, (shape, _, inferred) in types.items():
        assert _agrees_with_onnx(shape, inferred), f"{name}: rule says {shape}, ONNX infers {inferred}"
    shapes = {name: t[0] for name, t in types.items()}
    for name, want in (expect or {}).items():
        assert shapes[name] == want, f"{name}: rule says {shapes[name]}, expected {want}"
    return shapes


def i64(*values):
    return np.array(values, np.int64)


# ---- same as the input ---------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset, axis", [(11, 1), (13, -1), (13, 0)])
def test_softmax_family_keeps_the_shape(op, opset, axis):
    check([node(op, ["x"], ["y"], axis=axis)], {"x": ("b", "s", 8)}, opset=opset,
          expect={"y": ("b", "s", 8)})


@pytest.mark.parametrize("op, attrs, opset", [
    ("CumSum", {}, 14), ("Trilu", {"upper": 0}, 14), ("LpNormalization", {"axis": 1}, 17),
    ("MeanVarianceNormalization", {"axes": [0, 2]}, 17), ("ReverseSequence", {}, 17)])
def test_ops_that_keep_the_shape(op, attrs, opset):
    extra = {"CumSum": (["axis"], {"axis": np.array(1, np.int64)}),
             "ReverseSequence": (["lens"], {"lens": np.array([1, 3], np.int64)})}.get(op, ([], {}))
    x = ("s", 2, 4) if op == "ReverseSequence" else ("b", "s", 4)
    check([node(op, ["x", *extra[0]], ["y"], **attrs)], {"x": x}, extra[1], opset,
          expect={"y": x})


def test_normalizations_keep_the_shape():
    c = 4
    rng = np.random.default_rng(0)
    consts = {"g": rng.random(c, np.float32), "beta": rng.random(c, np.float32),
              "mean": rng.random(c, np.float32), "var": rng.random(c, np.float32) + 1}
    check([node("BatchNormalization", ["x", "g", "beta", "mean", "var"], ["bn"]),
           node("InstanceNormalization", ["x", "g", "beta"], ["inorm"]),
           node("GroupNormalization", ["x", "g2", "b2"], ["gn"], num_groups=2)],
          {"x": ("b", c, "h", "w")}, {**consts, "g2": consts["g"][:2], "b2": consts["beta"][:2]},
          opset=18, expect={"bn": ("b", c, "h", "w"), "inorm": ("b", c, "h", "w"),
                            "gn": ("b", c, "h", "w")})


@pytest.mark.parametrize("opset, mask", [(7, DType.FLOAT), (13, DType.BOOL)])
def test_dropout_gives_a_mask_of_the_same_shape(opset, mask):
    """The mask is bool from opset 10, of the input's type before."""
    nodes = [node("Dropout", ["x"], ["y", "mask"])]
    assert check(nodes, {"x": ("b", 4)}, opset=opset) == {"y": ("b", 4), "mask": ("b", 4)}
    dtypes = [t[1] for t in rule_types(model(nodes, {"x": ("b", 4)}, opset=opset)).values()]
    assert dtypes == [DType.FLOAT, mask]


# ---- norms and reductions -------------------------------------------------------------------

@pytest.mark.parametrize("axis, x, stats", [   # the scale covers the normalized axes: sizes there
    (-1, ("b", "s", 8), ("b", "s", 1)), (-2, ("b", 3, 8), ("b", 1, 1)), (1, ("b", 3, 8), ("b", 1, 1)),
    (0, (2, 3, 8), (1, 1, 1))])
def test_layer_norm_statistics_are_one_over_the_normalized_axes(axis, x, stats):
    rng = np.random.default_rng(0)
    scale = rng.random(x[axis:], np.float32)
    shapes = check([node("LayerNormalization", ["x", "g", "beta"], ["y", "mean", "inv"], axis=axis)],
                   {"x": x}, {"g": scale, "beta": scale})
    assert shapes == {"y": x, "mean": stats, "inv": stats}


def test_layer_norm_statistics_are_in_the_stash_type():
    m = model([node("LayerNormalization", ["x", "g"], ["y", "mean", "inv"], stash_type=1)],
              {"x": ("b", 8)}, {"g": np.ones(8, np.float32)})
    assert [t[1] for t in rule_types(m).values()] == [DType.FLOAT] * 3


REDUCE_OPS = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _reduce(op, axes, keepdims, noop, as_input):
    attrs = {} if keepdims is None else {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    consts, ins = {}, ["x"]
    if axes is not None:
        if as_input:
            consts["axes"], ins = i64(*axes), ["x", "axes"]
        else:
            attrs["axes"] = axes
    return node(op, ins, ["y"], **attrs), consts


def _reduced(shape, axes, keepdims, noop):
    if not axes:
        if noop:
            return shape
        axes = range(len(shape))
    axes = {a % len(shape) for a in axes}
    if keepdims in (None, 1):
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [None, [1], [-1, 0], [0, 1, 2]])
@pytest.mark.parametrize("keepdims", [None, 0, 1])
def test_reduce_with_axes_attribute_before_opset_18(op, axes, keepdims):
    opset = 11 if op == "ReduceSum" else 13
    n, consts = _reduce(op, axes, keepdims, None, as_input=False)
    x = ("b", 3, "s")
    check([n], {"x": x}, consts, opset, expect={"y": _reduced(x, axes, keepdims, 0)})


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [None, [], [1], [-1, 0], [0, 1, 2]])
@pytest.mark.parametrize("keepdims", [None, 0])
@pytest.mark.parametrize("noop", [None, 0, 1])
def test_reduce_with_axes_input_from_opset_18(op, axes, keepdims, noop):
    opset = 13 if op == "ReduceSum" and axes != [1] else 18   # ReduceSum took the input at 13
    n, consts = _reduce(op, axes, keepdims, noop, as_input=True)
    x = ("b", 3, "s")
    check([n], {"x": x}, consts, opset, expect={"y": _reduced(x, axes, keepdims, noop)})


@pytest.mark.parametrize("keepdims, want", [(1, (None, None, None)), (0, None)])
def test_reduce_over_axes_known_only_at_run_time(keepdims, want):
    check([node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)],
          {"x": ("b", 3, "s"), "axes": i64(1)}, opset=18, expect={"y": want})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims, want", [
    (None, None, (1, 3, "s")), (-1, 1, ("b", 3, 1)), (1, 0, ("b", "s")), (-3, 0, (3, "s"))])
def test_arg_reduce_gives_int64_indices(op, axis, keepdims, want):
    attrs = {k: v for k, v in (("axis", axis), ("keepdims", keepdims)) if v is not None}
    check([node(op, ["x"], ["y"], **attrs)], {"x": ("b", 3, "s")}, opset=13, expect={"y": want})


# ---- joining, splitting, slicing -------------------------------------------------------------

@pytest.mark.parametrize("inputs, axis, want", [
    ({"x": ("b", 2, 4), "y": ("b", 3, 4)}, 1, ("b", 5, 4)),
    ({"x": ("b", "s", 4), "y": ("b", 3, 4)}, 1, ("b", add("s", 3), 4)),
    ({"x": ("b", "s", 4), "y": ("b", "s", 3)}, -1, ("b", "s", 7)),
    ({"x": ("b", "s", 4), "y": (2, "s", 4)}, 0, (add("b", 2), "s", 4)),
    ({"x": ("b", "s", 4), "y": ("b", 0, 4)}, 1, ("b", "s", 4)),     # an empty part adds nothing
    ({"x": ("b", 4), "y": (2, 4), "z": (1, 4)}, 0, (add("b", 3), 4))])
def test_concat_adds_up_the_axis(inputs, axis, want):
    check([node("Concat", list(inputs), ["out"], axis=axis)], inputs, expect={"out": want})


def test_concat_takes_a_size_any_input_has():
    check([node("Concat", ["x", "y"], ["out"], axis=1)], {"x": ("b", 2), "y": (2, 3)},
          bindings=({"b": 2},), expect={"out": (2, 5)})


@pytest.mark.parametrize("opset, split, attrs, n, x, want", [
    (11, None, {"split": [2, 6], "axis": 1}, 2, ("b", 8), [("b", 2), ("b", 6)]),
    (11, None, {"axis": 1}, 2, ("b", 8), [("b", 4), ("b", 4)]),
    (13, [1, 2, 5], {"axis": -1}, 3, ("b", 8), [("b", 1), ("b", 2), ("b", 5)]),
    (13, [1, 2], {}, 2, ("s", 8), [(1, 8), (2, 8)]),     # sizes given: s must be 3
    (13, None, {}, 2, ("s", 8), [(floordiv("s", 2), 8), (floordiv("s", 2), 8)]),
    (13, None, {}, 1, ("s", 8), [("s", 8)]),
    (18, None, {"axis": 1, "num_outputs": 3}, 3, ("b", 7), [("b", 3), ("b", 3), ("b", 1)]),
    (18, None, {"axis": 1, "num_outputs": 3}, 3, ("b", 9), [("b", 3)] * 3),
    (18, None, {"axis": 1, "num_outputs": 2}, 2, ("b", 5), [("b", 3), ("b", 2)])])
def test_split_sizes(opset, split, attrs, n, x, want):
    outs = [f"y{i}" for i in range(n)]
    ins, consts = (["x", "split"], {"split": i64(*split)}) if split is not None else (["x"], {})
    bindings = ({"b": 2, "s": 3},) if split == [1, 2] else ({"b": 2, "s": 4}, {"b": 3, "s": 6})
    shapes = check([node("Split", ins, outs, **attrs)], {"x": x}, consts, opset, bindings=bindings)
    assert [shapes[o] for o in outs] == want


def test_an_uneven_split_is_left_unknown_where_the_parts_are_not_defined():
    """num_outputs=3 of 4: ceil gives 2, 2 and an empty part; the rule says nothing."""
    m = model([node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)], {"x": (2, 4)}, opset=18)
    assert [t[0] for t in rule_types(m).values()] == [(2, None)] * 3


SLICE_BOUNDS = st.one_of(st.integers(-8, 8), st.sampled_from([INT_MAX, INT_MIN, 2**31 - 1, -2**31]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dims=st.lists(st.one_of(st.integers(0, 6), st.sampled_from(["s", "h"])), min_size=1, max_size=3),
       data=st.data())
def test_slice_matches_onnx_runtime(dims, data):
    rank = len(dims)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                              unique_by=lambda a: a % rank))
    k = len(axes)
    starts, ends = (data.draw(st.lists(SLICE_BOUNDS, min_size=k, max_size=k)) for _ in range(2))
    steps = data.draw(st.lists(st.sampled_from([1, 2, 3, -1, -2, -3]), min_size=k, max_size=k))
    check([node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])], {"x": tuple(dims)},
          {"starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes), "steps": i64(*steps)}, 13)


@pytest.mark.parametrize("starts, ends, steps, want", [
    ([0], [INT_MAX], [1], ("s", 6)), ([0], [2**31 - 1], None, ("s", 6)),
    ([-1], [INT_MIN], [-1], ("s", 6)), ([INT_MAX], [-2**31], [-1], ("s", 6)),
    ([1], [INT_MAX], [1], (sub("s", 1), 6)), ([0], [-1], [1], (sub("s", 1), 6)),
    ([0], [INT_MAX], [2], (ceildiv("s", 2), 6)), ([0, 1], [INT_MAX, -1], [1, 1], ("s", 4)),
    # going back from before the front: stepping back, a symbolic length is not derived
    ([-10, -10], [INT_MAX, -10], [1, -1], (maximum(sub("s", maximum(sub("s", 10), 0)), 0), None)),
    ([-1, 3], [INT_MIN, INT_MAX], [-1, -1], ("s", None))])  # going back to INT_MAX: runtimes differ
def test_slice_of_a_symbolic_dim(starts, ends, steps, want):
    k = len(starts)
    consts = {"starts": i64(*starts), "ends": i64(*ends), "axes": i64(*range(k))}
    ins = ["x", "starts", "ends", "axes"]
    if steps is not None:
        consts["steps"], ins = i64(*steps), ins + ["steps"]
    check([node("Slice", ins, ["y"])], {"x": ("s", 6)}, consts, 13, expect={"y": want})


def test_slice_attributes_before_opset_10():
    check([node("Slice", ["x"], ["y"], starts=[1, 0], ends=[-1, 2**31 - 1], axes=[1, 0])], {"x": ("s", 6)},
          opset=9, expect={"y": ("s", 4)})
    check([node("Slice", ["x"], ["y"], starts=[0, 1], ends=[2, 3])], {"x": (5, 6)}, opset=9,
          expect={"y": (2, 2)})


def test_slice_with_bounds_known_only_at_run_time():
    check([node("Slice", ["x", "starts", "ends", "axes"], ["y"])],
          {"x": ("b", 6, 4), "starts": i64(1), "ends": i64(3)}, {"axes": i64(1)}, 13,
          expect={"y": ("b", None, 4)})
    check([node("Slice", ["x", "starts", "ends"], ["y"])],
          {"x": ("b", 6, 4), "starts": i64(1), "ends": i64(3)}, opset=13, expect={"y": (None, 6, 4)})
    check([node("Slice", ["x", "starts", "ends", "axes"], ["y"])],
          {"x": ("b", 6, 4), "axes": i64(1)}, {"starts": i64(1), "ends": i64(3)}, 13,
          expect={"y": (None, None, None)})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes, x, want", [
    ([1], ("b", 1, 4), ("b", 4)), ([-1, 0], (1, "s", 1), ("s",)), (None, (1, 3, 1, 4), (3, 4)),
    (None, ("b", 1, 4), None)])     # b might be 1: which dims go is not known
def test_squeeze(opset, axes, x, want):
    if axes is None:
        n, consts = node("Squeeze", ["x"], ["y"]), {}
    elif opset < 13:
        n, consts = node("Squeeze", ["x"], ["y"], axes=axes), {}
    else:
        n, consts = node("Squeeze", ["x", "axes"], ["y"]), {"axes": i64(*axes)}
    check([n], {"x": x}, consts, opset, expect={"y": want})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes, want", [([0], (1, "b", 4)), ([-1], ("b", 4, 1)),
                                        ([3, 1], ("b", 1, 4, 1)), ([0, -1, 2], (1, "b", 1, 4, 1))])
def test_unsqueeze(opset, axes, want):
    if opset < 13:
        n, consts = node("Unsqueeze", ["x"], ["y"], axes=axes), {}
    else:
        n, consts = node("Unsqueeze", ["x", "axes"], ["y"]), {"axes": i64(*axes)}
    check([n], {"x": ("b", 4)}, consts, opset, expect={"y": want})


@pytest.mark.parametrize("axis, x, want", [
    (None, ("b", 3, 4), ("b", 12)), (0, ("b", 3, 4), (1, mul(12, "b"))), (2, ("b", 3, 4), (mul(3, "b"), 4)),
    (-1, (2, 3, 4), (6, 4)), (3, (2, 3, "s"), (mul(6, "s"), 1)), (1, ("b", "s"), ("b", "s")),
    (2, (1, "s", 4), ("s", 4)), (0, (), (1, 1))])
def test_flatten(axis, x, want):
    attrs = {} if axis is None else {"axis": axis}
    check([node("Flatten", ["x"], ["y"], **attrs)], {"x": x}, opset=13, expect={"y": want})


@pytest.mark.parametrize("axis, idx, want", [
    (None, i64(0, 1), (2, "s", 4)), (1, np.array(2, np.int64), ("b", 4)),
    (-1, np.array([[0, 1, 2], [3, 2, 1]], np.int64), ("b", "s", 2, 3)),
    (0, np.array([[1]], np.int64), (1, 1, "s", 4))])
def test_gather(axis, idx, want):
    attrs = {} if axis is None else {"axis": axis}
    check([node("Gather", ["x", "idx"], ["y"], **attrs)], {"x": ("b", "s", 4), "idx": idx},
          opset=13, expect={"y": want})


def test_gather_elements_and_gather_nd():
    idx = np.array([[0, 1], [1, 0]], np.int64)
    check([node("GatherElements", ["x", "i"], ["y"], axis=1)], {"x": (2, "s"), "i": idx},
          opset=13, expect={"y": (2, 2)})
    check([node("GatherND", ["x", "i"], ["y"])], {"x": (2, 2, "s"), "i": idx}, opset=13,
          expect={"y": (2, "s")})
    check([node("GatherND", ["x", "i"], ["y"], batch_dims=1)],
          {"x": (2, 3, "s"), "i": i64(1, 2).reshape(2, 1)}, opset=13, expect={"y": (2, "s")})


# ---- repeating, padding, moving --------------------------------------------------------------

def test_tile_with_constant_repeats():
    check([node("Tile", ["x", "r"], ["y"])], {"x": ("b", 1, 3)}, {"r": i64(1, 4, 2)}, 13,
          expect={"y": ("b", 4, 6)})
    check([node("Tile", ["x", "r"], ["y"])], {"x": ("b", 2)}, {"r": i64(2, 1)}, 13,
          expect={"y": (mul(2, "b"), 2)})


def test_tile_by_a_dim_read_off_a_shape():
    """x.repeat(b, 1): the repeat count is y's batch size."""
    nodes = [node("Shape", ["y"], ["sy"], start=0, end=1), node("Concat", ["sy", "one"], ["r"], axis=0),
             node("Tile", ["x", "r"], ["t"])]
    shapes = check(nodes, {"x": (1, 4), "y": ("b", 3)}, {"one": i64(1)}, 15)
    assert shapes["t"] == ("b", 4)


@pytest.mark.parametrize("opset, pads, axes, want", [
    (11, [0, 1, 0, 2], None, ("b", 6)), (11, [0, 1, 0, -2], None, ("b", 2)),
    (11, [1, 0, 0, 0], None, (add("b", 1), 3)), (18, [2, 1], [-1], ("b", 6)), (18, [1, 0], [0], (add("b", 1), 3))])
def test_pad_with_constant_pads(opset, pads, axes, want):
    consts = {"pads": i64(*pads)}
    ins = ["x", "pads"]
    if axes is not None:
        consts["axes"], ins = i64(*axes), ["x", "pads", "", "axes"]
    check([node("Pad", ins, ["y"])], {"x": ("b", 3)}, consts, opset, expect={"y": want})


def test_pad_attribute_before_opset_11():
    check([node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2], mode="reflect")], {"x": ("b", 4)}, opset=10,
          expect={"y": ("b", 7)})


def test_pad_known_only_at_run_time_keeps_the_rank():
    check([node("Pad", ["x", "pads"], ["y"])], {"x": ("b", 3), "pads": i64(0, 1, 0, 2)}, opset=13,
          expect={"y": (None, None)})


def test_depth_to_space_and_back():
    for mode in ("DCR", "CRD"):
        check([node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode),
               node("SpaceToDepth", ["y"], ["z"], blocksize=2)], {"x": ("b", 8, 3, "w")}, opset=13,
              expect={"y": ("b", 2, 6, mul(2, "w")), "z": ("b", 8, 3, None)})   # z's rule reads ONNX's y


# ---- windows: conv and pool -------------------------------------------------------------------

CONV_CASES = [
    ({}, (1, 1), ("b", 3, "h", "w"), ("b", 5, "h", "w")),
    ({"pads": [1, 1, 1, 1]}, (3, 3), ("b", 3, "h", "w"), ("b", 5, "h", "w")),
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, (3, 3), ("b", 3, 9, 10), ("b", 5, 5, 5)),
    ({"strides": [2, 1], "dilations": [1, 2]}, (3, 3), ("b", 3, 11, 12), ("b", 5, 5, 8)),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (3, 3), ("b", 3, 9, "w"), ("b", 5, 5, ceildiv("w", 2))),
    ({"auto_pad": "SAME_LOWER"}, (2, 2), ("b", 3, "h", 7), ("b", 5, "h", 7)),
    ({"auto_pad": "VALID", "strides": [3, 3]}, (2, 2), ("b", 3, 10, 11), ("b", 5, 3, 4)),
    ({"group": 3}, (1, 1), ("b", 3, 4, 4), ("b", 6, 4, 4)),
    ({"pads": [0, 2, 0, 1]}, (3, 3), ("b", 3, 6, "w"), ("b", 5, 4, add("w", 1)))]


@pytest.mark.parametrize("attrs, k, x, want", CONV_CASES)
def test_conv(attrs, k, x, want):
    group = attrs.get("group", 1)
    w = np.random.default_rng(0).random((want[1], x[1] // group, *k), np.float32)
    check([node("Conv", ["x", "wt"], ["y"], **attrs)], {"x": x}, {"wt": w}, 13,
          bindings=({"b": 2, "h": 5, "w": 7}, {"b": 1, "h": 8, "w": 6}), expect={"y": want})


@pytest.mark.parametrize("attrs, x, want", [
    ({}, ("b", 4, 5, 6), ("b", 6, 7, 8)),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]}, ("b", 4, 5, 6), ("b", 6, 10, 11)),
    ({"pads": [1, 1, 1, 1]}, ("b", 4, "h", "w"), ("b", 6, "h", "w")),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, ("b", 4, 5, "w"), ("b", 6, 10, mul(2, "w"))),
    ({"output_shape": [11, 13], "strides": [2, 2]}, ("b", 4, 5, 6), ("b", 6, 11, 13)),
    ({"group": 2}, ("b", 4, 5, 6), ("b", 6, 7, 8))])
def test_conv_transpose(attrs, x, want):
    group = attrs.get("group", 1)
    w = np.random.default_rng(0).random((4, 6 // group, 3, 3), np.float32)
    check([node("ConvTranspose", ["x", "wt"], ["y"], **attrs)], {"x": x}, {"wt": w}, 13,
          bindings=({"b": 2, "h": 5, "w": 7}, {"b": 1, "h": 8, "w": 6}), expect={"y": want})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("attrs, x, want", [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, ("b", 3, 8, 9), ("b", 3, 4, 4)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, ("b", 3, "h", "w"), ("b", 3, "h", "w")),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, ("b", 3, 8, 9), ("b", 3, 4, 4)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [0, 0, 2, 2]},
     ("b", 3, 4, 5), ("b", 3, None, 3)),   # a last window starting in the padding: ORT drops it
    ({"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, ("b", 3, 7, 6), ("b", 3, 4, 3)),
    ({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, ("b", 3, 7, 8), ("b", 3, 4, 4)),
    ({"kernel_shape": [3, 1], "auto_pad": "VALID", "strides": [2, 1]}, ("b", 3, 7, "w"), ("b", 3, 3, "w"))])
def test_pool(op, attrs, x, want):
    if op == "LpPool" and attrs.get("ceil_mode"):
        pytest.skip("ONNX Runtime's LpPool has no ceil_mode")
    outs = ["y", "idx"] if op == "MaxPool" else ["y"]
    shapes = check([node(op, ["x"], outs, **attrs)], {"x": x}, opset=18, expect={"y": want})
    if op == "MaxPool":
        assert shapes["idx"] == want


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_with_same_padding_and_dilation_is_left_unknown(op):
    """ONNX says ceil(n / s); ONNX Runtime pads for the undilated kernel and gives less."""
    check([node(op, ["x"], ["y"], kernel_shape=[2, 3], dilations=[2, 2], auto_pad="SAME_UPPER")],
          {"x": ("b", 3, 9, 6)}, opset=19, expect={"y": ("b", 3, None, None)})
    # Conv pads for the dilated window, as the spec says (ONNX Runtime refuses to run it)
    conv = model([node("Conv", ["x", "wt"], ["y"], dilations=[2, 2], auto_pad="SAME_UPPER")],
                 {"x": ("b", 3, 9, 6)}, {"wt": np.ones((2, 3, 2, 3), np.float32)}, 19)
    assert rule_types(conv)["y"][0] == ("b", 2, 9, 6)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pool(op):
    check([node(op, ["x"], ["y"])], {"x": ("b", "c", "h", "w")}, opset=13, expect={"y": ("b", "c", 1, 1)})


@pytest.mark.parametrize("ta, tb, a, b, want", [
    (0, 0, ("b", 4), (4, 5), ("b", 5)), (1, 0, (4, "b"), (4, 5), ("b", 5)),
    (0, 1, ("b", 4), (5, 4), ("b", 5)), (1, 1, (4, "b"), (5, 4), ("b", 5))])
def test_gemm(ta, tb, a, b, want):
    rng = np.random.default_rng(0)
    check([node("Gemm", ["a", "w", "c"], ["y"], transA=ta, transB=tb)], {"a": a},
          {"w": rng.random(b, np.float32), "c": rng.random(5, np.float32)}, 13, expect={"y": want})


# ---- opaque ops --------------------------------------------------------------------------------

@pytest.mark.parametrize("axis, largest, want", [(None, 1, ("b", "s", 2)), (1, 0, ("b", 2, 5))])
def test_topk(axis, largest, want):
    attrs = {"largest": largest} | ({} if axis is None else {"axis": axis})
    shapes = check([node("TopK", ["x", "k"], ["v", "i"], **attrs)], {"x": ("b", "s", 5)},
                   {"k": i64(2)}, 13, bindings=({"b": 2, "s": 3}, {"b": 3, "s": 4}))
    assert shapes == {"v": want, "i": want}


def test_range_of_constants_and_of_a_sequence_length():
    check([node("Range", ["a", "l", "d"], ["y"])], {}, {"a": np.array(2, np.int64),
          "l": np.array(11, np.int64), "d": np.array(3, np.int64)}, 13, expect={"y": (3,)})
    check([node("Range", ["a", "l", "d"], ["y"])], {}, {"a": np.array(5, np.int64),
          "l": np.array(1, np.int64), "d": np.array(1, np.int64)}, 13, expect={"y": (0,)})
    nodes = [node("Shape", ["x"], ["sx"]), node("Gather", ["sx", "one"], ["n"], axis=0),
             node("Range", ["zero", "n", "one"], ["pos"])]
    scalars = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)}
    shapes = check(nodes, {"x": ("b", "s", 4)}, scalars, 13)
    assert shapes["pos"] == ("s",)


def test_a_float_range_over_a_size_cast_to_float():
    """torch.arange(w) of a float grid (a detector's anchors): Range(0., Cast(w), 1.)."""
    nodes = [node("Shape", ["x"], ["sx"]), node("Gather", ["sx", "three"], ["w"], axis=0),
             node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT), node("Range", ["zero", "wf", "one"], ["grid"])]
    scalars = {"three": np.array(3, np.int64), "zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32)}
    shapes = check(nodes, {"x": ("b", 3, "h", "w")}, scalars, 13)
    assert shapes["grid"] == ("w",)
    halves = {"three": np.array(3, np.int64), "zero": np.array(0.5, np.float32), "one": np.array(1.0, np.float32)}
    assert check(nodes, {"x": ("b", 3, "h", "w")}, halves, 13)["grid"] == (None,)   # not a whole number: unknown


def test_constant_of_shape_from_a_constant_and_from_a_shape():
    value = helper.make_tensor("v", TensorProto.INT64, [1], [7])
    check([node("ConstantOfShape", ["s"], ["y"], value=value)], {}, {"s": i64(2, 3)}, 13,
          expect={"y": (2, 3)})
    nodes = [node("Shape", ["x"], ["sx"]), node("ConstantOfShape", ["sx"], ["y"])]
    shapes = check(nodes, {"x": ("b", "s", 4)}, opset=13)
    assert shapes["y"] == ("b", "s", 4)
    assert rule_types(model(nodes, {"x": ("b", "s", 4)}, opset=13))["y"][1] == DType.FLOAT


@pytest.mark.parametrize("opset, ins, consts, attrs, want", [
    (13, ["x", "", "sc"], {"sc": np.array([1, 1, 2, 2], np.float32)}, {}, ("b", 3, 8, mul(2, "w"))),
    (13, ["x", "", "", "sz"], {"sz": i64(2, 3, 5, 9)}, {}, (2, 3, 5, 9)),
    (11, ["x", "roi", "sc"], {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 1.5, 0.5], np.float32)},
     {}, ("b", 3, 6, floordiv("w", 2))),
    (18, ["x", "", "sc"], {"sc": np.array([3, 0.5], np.float32)}, {"axes": [2, 3]}, ("b", 3, 12, floordiv("w", 2))),
    (18, ["x", "", "", "sz"], {"sz": i64(6, 6)}, {"axes": [-2, -1], "keep_aspect_ratio_policy": "not_larger"},
     (None,) * 4)])
def test_resize(opset, ins, consts, attrs, want):
    check([node("Resize", ins, ["y"], **attrs)], {"x": ("b", 3, 4, "w")}, consts, opset,
          bindings=({"b": 2, "w": 5}, {"b": 2, "w": 6}), expect={"y": want})


def test_upsample():
    check([node("Upsample", ["x", "sc"], ["y"])], {"x": ("b", 3, 4, 5)},
          {"sc": np.array([1, 1, 2, 3], np.float32)}, 9, expect={"y": ("b", 3, 8, 15)})


def test_one_hot_eye_like_non_zero_and_size():
    check([node("OneHot", ["i", "depth", "vals"], ["y"], axis=1)], {"i": np.array([[0, 2, 1]], np.int64)},
          {"depth": np.array(4, np.int64), "vals": np.array([0, 1], np.float32)}, 13,
          expect={"y": (1, 4, 3)})
    check([node("EyeLike", ["x"], ["y"], k=1)], {"x": (3, "s")}, opset=13, expect={"y": (3, "s")})
    check([node("NonZero", ["x"], ["y"]), node("Size", ["x"], ["n"])], {"x": ("b", 4)}, opset=13,
          expect={"y": (2, None), "n": ()})


# ---- Expand through shape_value ---------------------------------------------------------------

def test_expand_to_a_shape_built_from_dims_keeps_the_symbols():
    """LLaMA's repeat_kv: x [b, kv, 1, s, d] expanded to [b, kv, n_rep, s, d] (b, s read off
    x's shape), then viewed as [b, kv·n_rep, s, d]."""
    nodes = [node("Shape", ["x"], ["sx"]),
             node("Gather", ["sx", "i0"], ["b"], axis=0), node("Gather", ["sx", "i3"], ["s"], axis=0),
             node("Unsqueeze", ["b", "ax0"], ["b1"]), node("Unsqueeze", ["s", "ax0"], ["s1"]),
             node("Concat", ["b1", "kv_rep", "s1", "d"], ["target"], axis=0),
             node("Expand", ["x", "target"], ["e"]),
             node("Concat", ["b1", "heads", "s1", "d"], ["view"], axis=0),
             node("Reshape", ["e", "view"], ["y"])]
    consts = {"i0": np.array(0, np.int64), "i3": np.array(3, np.int64), "ax0": i64(0),
              "kv_rep": i64(2, 3), "d": i64(4), "heads": i64(6)}
    check(nodes, {"x": ("b", 2, 1, "s", 4)}, consts, 13,
          expect={"e": ("b", 2, 3, "s", 4), "y": ("b", 6, "s", 4)})


@pytest.mark.parametrize("x, target, want", [
    (("b", 1, 4), i64(1, 3, 1), ("b", 3, 4)), ((1, 4), i64(2, 1, 1), (2, 1, 4)),
    (("b", 4), i64(1), ("b", 4))])
def test_expand_to_a_constant(x, target, want):
    check([node("Expand", ["x", "t"], ["y"])], {"x": x}, {"t": target}, 13, expect={"y": want})


def test_expand_to_a_shape_known_only_at_run_time_keeps_what_the_input_fixes():
    check([node("Expand", ["x", "t"], ["y"])], {"x": ("b", 1, 4), "t": i64(1, 3, 1)}, opset=13,
          expect={"y": (None, None, 4)})


# ---- the pass that uses them ------------------------------------------------------------------

def test_shapes_come_back_through_the_ops_after_a_folded_reshape():
    """The opset-13 export the sweep found: ONNX inference cannot see through the Reshape's
    run-time target, so nothing after it has a shape; once the target folds, refine_shapes
    carries the Reshape's shape through Softmax, the reductions and the rest."""
    nodes = [node("Shape", ["x"], ["sx"]), node("Slice", ["sx", "zero", "two"], ["bs"]),
             node("Concat", ["bs", "heads"], ["target"], axis=0), node("Reshape", ["x", "target"], ["h"]),
             node("Softmax", ["h"], ["p"], axis=-1),
             node("ReduceMean", ["p"], ["m"], axes=[-1]), node("Sub", ["p", "m"], ["c"]),
             node("Mul", ["c", "c"], ["c2"]), node("ReduceMean", ["c2"], ["v"], axes=[-1], keepdims=0),
             node("Unsqueeze", ["v", "last"], ["v1"]), node("Div", ["c", "v1"], ["n"]),
             node("Transpose", ["n"], ["t"], perm=[0, 2, 1, 3]), node("Flatten", ["t"], ["f"], axis=2),
             node("Concat", ["f", "f"], ["y"], axis=-1)]
    consts = {"zero": i64(0), "two": i64(2), "heads": i64(4, 16), "last": i64(-1)}
    graph = import_onnx(model(nodes, {"x": (2, 8, 64)}, consts, 13))
    after = {v.name: v for n in graph.nodes for v in n.outputs
             if n.op_type not in ("Shape", "Slice") and n.name != "target"}
    for v in after.values():
        v.shape = None   # what ONNX inference leaves (it does here too)
    while fold_static_shapes(graph) + fold_constants(graph, evaluate_node):
        pass
    cleanup.refine_shapes(graph)
    full, stats = (2, 8, 4, 16), (2, 8, 4, 1)
    assert {name: v.shape for name, v in after.items()} == {
        "h": full, "p": full, "m": stats, "c": full, "c2": full, "v": (2, 8, 4), "v1": stats,
        "n": full, "t": (2, 4, 8, 16), "f": (8, 128), "y": (8, 256)}
