"""uint16/32/64 arithmetic, comparison and bitwise kernels (PyTorch CPU lacks most of their
kernels; backend/torch_cpu/unsigned.py computes them on signed views) against ONNX's reference
implementation, on every pair of values near the type's limits."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import autofusion
from autofusion.backend import KERNELS
from autofusion.ir import Node, Value

UNSIGNED = {np.uint16: TensorProto.UINT16, np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64}


def edge_values(dt) -> np.ndarray:
    top = int(np.iinfo(dt).max)
    return np.array([0, 1, 2, 3, 7, 12345 % top, top // 2 - 1, top // 2, top // 2 + 1, top // 3,
                     top - 2, top - 1, top], dt)


def _model(op: str, n_inputs: int, elem: int, out_elem: int, **attrs):
    names = [f"x{i}" for i in range(n_inputs)]
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, elem, None) for n in names],
                          [helper.make_tensor_value_info("y", out_elem, None)])
    for vi in g.input:   # rank 2, any sizes: the pairs broadcast (13, 1) against (1, 13)
        vi.type.tensor_type.shape.dim.add().dim_param = f"{vi.name}_a"
        vi.type.tensor_type.shape.dim.add().dim_param = f"{vi.name}_b"
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _check(op, inputs, out_elem=None, **attrs):
    elem = UNSIGNED[inputs[0].dtype.type]
    model = _model(op, len(inputs), elem, out_elem or elem, **attrs)
    want = ReferenceEvaluator(model).run(None, dict(zip([f"x{i}" for i in range(len(inputs))], inputs)))[0]
    for backend in ("auto", "torch"):
        got = autofusion.compile(model, level=0, backend=backend)(*inputs)
        assert got.dtype == want.dtype, (op, backend)
        np.testing.assert_array_equal(got, want, err_msg=f"{op} on {inputs[0].dtype} ({backend})")


def _pairs(dt, nonzero_b=False):
    a = edge_values(dt)
    b = a[a != 0] if nonzero_b else a
    return a[:, None], b[None, :]


@pytest.mark.parametrize("dt", list(UNSIGNED))
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Min", "Max", "BitwiseAnd",
                                "BitwiseOr", "BitwiseXor"])
def test_wrapping_and_extreme_ops(op, dt):
    _check(op, _pairs(dt))


@pytest.mark.parametrize("dt", list(UNSIGNED))
def test_variadic_min_max_of_three(dt):
    """(ONNX's Sum takes floats only: a uint Sum is refused at import, as ONNX Runtime does.)"""
    a, b = _pairs(dt)
    c = np.flip(edge_values(dt))[:, None]
    for op in ("Min", "Max"):
        _check(op, [a, b, c])


@pytest.mark.parametrize("dt", list(UNSIGNED))
@pytest.mark.parametrize("op", ["Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_are_unsigned(op, dt):
    _check(op, _pairs(dt), TensorProto.BOOL)


@pytest.mark.parametrize("dt", list(UNSIGNED))
@pytest.mark.parametrize("op, attrs", [("Div", {}), ("Mod", {}), ("Mod", {"fmod": 1})])
def test_division_and_remainder_are_unsigned(op, attrs, dt):
    _check(op, _pairs(dt, nonzero_b=True), **attrs)


@pytest.mark.parametrize("dt", list(UNSIGNED))
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shifts(direction, dt):
    x = edge_values(dt)[:, None]
    counts = np.arange(np.iinfo(dt).bits, dtype=dt)[None, :]
    _check("BitShift", [x, counts], direction=direction)


@pytest.mark.parametrize("dt", list(UNSIGNED))
def test_a_shift_by_the_bit_width_or_more_gives_zero(dt):
    bits = np.iinfo(dt).bits
    model = _model("BitShift", 2, UNSIGNED[dt], UNSIGNED[dt], direction="RIGHT")
    x = edge_values(dt)[:, None]
    counts = np.array([bits, bits + 1, np.iinfo(dt).max], dt)[None, :]
    assert not autofusion.compile(model, level=0)(x, counts).any()


@pytest.mark.parametrize("dt", list(UNSIGNED))
@pytest.mark.parametrize("op", ["BitwiseNot", "Abs", "Sign"])
def test_unary_ops(op, dt):
    _check(op, [edge_values(dt)[:, None]])


@pytest.mark.parametrize("dt", list(UNSIGNED))
def test_where_selects_unsigned_values(dt):
    a, b = _pairs(dt)
    cond = (np.arange(13)[:, None] + np.arange(13)[None, :]) % 2 == 0
    node = helper.make_node("Where", ["c", "a", "b"], ["y"])
    elem = UNSIGNED[dt]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [13, 13]),
                                        helper.make_tensor_value_info("a", elem, [13, 1]),
                                        helper.make_tensor_value_info("b", elem, [1, 13])],
                          [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    np.testing.assert_array_equal(autofusion.compile(model, level=0)(cond, a, b), np.where(cond, a, b))


@pytest.mark.parametrize("op, want", [("Less", lambda a, b: a < b), ("Div", lambda a, b: a // b)])
def test_the_unsigned_form_is_chosen_per_call_when_the_ir_does_not_know_the_dtype(op, want):
    node = Node(op, [Value("a"), Value("b")], [Value("y")])
    a, b = _pairs(np.uint64, nonzero_b=True)
    got = KERNELS[op](node)(torch.from_numpy(np.ascontiguousarray(np.broadcast_to(a, (13, 12)))),
                            torch.from_numpy(np.ascontiguousarray(np.broadcast_to(b, (13, 12)))))
    np.testing.assert_array_equal(got.numpy(), want(a, b))
