"""Property: on random graphs built from what the rules look for, fusion at any level keeps the
graph valid (verify()) and the outputs equal to the unfused graph's on random inputs."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

import autofusion
from autofusion.ir import verify

from .rules.harness import onnx_model

D = 8   # every value is [2, D, D], so any op can follow any other and transposes keep the shape


class Builder:
    def __init__(self, rng: np.random.Generator):
        self.nodes, self.inits, self.values, self.rng = [], {}, ["x"], rng

    def const(self, array) -> str:
        name = f"c{len(self.inits)}"
        self.inits[name] = np.asarray(array, np.float32)
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = f"v{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{len(self.nodes)}", **attrs))
        return out

    def weight(self, *shape) -> str:
        return self.const(self.rng.standard_normal(shape) / math.sqrt(shape[0]))


def unary(kind):
    return lambda b, v, w: b.op(kind, [v])


STEPS = {
    "relu": unary("Relu"), "sigmoid": unary("Sigmoid"), "tanh": unary("Tanh"),
    "identity": unary("Identity"),
    "silu": lambda b, v, w: b.op("Mul", [v, b.op("Sigmoid", [v])]),
    "gelu": lambda b, v, w: b.op("Mul", [b.op("Mul", [v, b.op("Add", [
        b.op("Erf", [b.op("Div", [v, b.const(math.sqrt(2))])]), b.const(1.0)])]), b.const(0.5)]),
    "linear": lambda b, v, w: b.op("MatMul", [v, b.weight(D, D)]),
    "linear_bias": lambda b, v, w: b.op("Add", [b.op("MatMul", [v, b.weight(D, D)]), b.weight(D)]),
    "scale": lambda b, v, w: b.op("Mul", [v, b.const(0.125)]),
    "residual": lambda b, v, w: b.op("Add", [v, w]),
    "product": lambda b, v, w: b.op("MatMul", [v, w]),
    "transpose": lambda b, v, w: b.op("Transpose", [v], perm=[0, 2, 1]),
    "softmax": lambda b, v, w: b.op("Softmax", [v], axis=-1),
    "layernorm": lambda b, v, w: b.op("LayerNormalization", [v, b.weight(D), b.weight(D)], axis=-1),
    "cast_same": lambda b, v, w: b.op("Cast", [v], to=1),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(sorted(STEPS)), st.integers(0, 1000)), min_size=1,
                      max_size=10),
       extra_output=st.integers(0, 1000), level=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_fusion_keeps_graphs_valid_and_results_equal(steps, extra_output, level, seed):
    b = Builder(np.random.default_rng(seed))
    for kind, pick in steps:
        v, w = b.values[-1], b.values[pick % len(b.values)]
        b.values.append(STEPS[kind](b, v, w))
    outputs = list(dict.fromkeys([b.values[-1], b.values[extra_output % len(b.values)]]))
    outputs = [o for o in outputs if o != "x"] or [b.op("Identity", ["x"])]
    model = onnx_model(b.nodes, {"x": (2, D, D)}, outputs, b.inits, opset=17)

    unfused = autofusion.compile(model, level=0)
    fused = autofusion.compile(model, level=level)
    verify(fused.graph)
    assert fused.output_names == unfused.output_names
    x = np.random.default_rng(seed + 1).standard_normal((2, D, D)).astype(np.float32)
    want, got = unfused.run({"x": x}), fused.run({"x": x})
    for name in want:
        scale = max(float(np.abs(want[name]).max()), 1.0)
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4 * scale, err_msg=name)
