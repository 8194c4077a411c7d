"""The layouts the runtime's convolutions write (the runtime's steps.cpp, Partition::conv): a network's first
convolution, of three channels, writes channels-last as the convolutions after it read, where
oneDNN's own pick would be a blocked layout (nChw16c) that every later step reorders.

Seen through oneDNN's own record of what it ran (ONEDNN_VERBOSE=profile_exec, in a child process, as
oneDNN reads it once per process): no reorder between the first convolution and the last, in
fp32 and bf16; the model equals the torch backend.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import precision as P
from autofusion.backend.native import unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(3)


def stem_model() -> onnx.ModelProto:
    """A MobileNet's stem: a strided 3x3 convolution of an RGB image, then a depthwise 3x3 and a
    1x1 convolution with the stem's result added back."""
    def w(name, *shape):
        return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["d"], group=16, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["d"], ["e"]),
             helper.make_node("Conv", ["e", "w2"], ["p"]),
             helper.make_node("Add", ["p", "r"], ["y"])]
    g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
                          [w("w0", 16, 3, 3, 3), w("w1", 16, 1, 3, 3), w("w2", 16, 16, 1, 1)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


CHILD = """
import sys, numpy as np, autofusion
model = autofusion.compile(sys.argv[1], precision=sys.argv[2], backend="native")
x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
model(x)
print("RUN", flush=True)
model(x)
"""


def primitives_in_a_run(path, precision: str) -> list[str]:
    """The primitives oneDNN executes in the model's second run (weights are reordered once, at
    build), as its verbose lines give them."""
    env = dict(os.environ, ONEDNN_VERBOSE="profile_exec")
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), precision], env=env,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.split("RUN\n", 1)[1].splitlines() if ",exec," in line]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_first_convolution_writes_what_the_next_one_reads(tmp_path, precision):
    if precision == "bf16" and not P.has_bf16():
        pytest.skip("this CPU has no native bf16")
    path = tmp_path / "stem.onnx"
    onnx.save(stem_model(), path)
    ran = primitives_in_a_run(path, precision)
    convs = [i for i, line in enumerate(ran) if ",convolution," in line]
    assert len(convs) == 3, ran
    between = [line for line in ran[convs[0]:convs[-1]] if ",reorder," in line]
    assert not between, between   # the image's reorder comes before, the output's after


def test_the_stem_equals_the_torch_backend():
    model = stem_model()
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = autofusion.compile(model, backend="native")(x)
    want = autofusion.compile(model, backend="torch")(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def pre_activation_model(after_a_convolution: bool = True) -> onnx.ModelProto:
    """DenseNet's layer: Concat(a, conv(a)) → BatchNormalization → Relu → 1x1 convolution, where a
    is a convolution's result (or, with after_a_convolution off, the model's input itself)."""
    def w(name, *shape):
        return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name)
    stats = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in
             {"s": RNG.uniform(0.5, 2, 6), "b": RNG.normal(size=6), "m": RNG.normal(size=6),
              "v": RNG.uniform(0.5, 2, 6)}.items()]
    first = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1])] if after_a_convolution else []
    a = "a" if after_a_convolution else "x"
    nodes = first + [helper.make_node("Conv", [a, "w1"], ["c"], pads=[1, 1, 1, 1]),
                     helper.make_node("Concat", [a, "c"], ["cat"], axis=1),
                     helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["n"]),
                     helper.make_node("Relu", ["n"], ["r"]),
                     helper.make_node("Conv", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "pre_activation", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [w("w0", 3, 3, 3, 3), w("w1", 3, 3, 3, 3), w("w2", 8, 6, 1, 1), *stats])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def region_orders(model) -> list:
    """The planned storage order of each value a region reads or writes inside its partition."""
    part = next(p for p in model.plan.partitions if p.target == "native")
    region = next(n for n in part.nodes if n.op == "autofusion::Region")
    return [part.values[v].order if v in part.values else "outside"
            for v in (*region.inputs, *region.outputs) if v.const is None]


def test_a_region_between_convolutions_computes_channels_last(tmp_path):
    model = autofusion.compile(pre_activation_model(), backend="native")
    assert region_orders(model) == [(0, 2, 3, 1), (0, 2, 3, 1)]
    assert "order 0,2,3,1" in str(model.plan)
    path = tmp_path / "pre_activation.onnx"
    onnx.save(pre_activation_model(), path)
    ran = primitives_in_a_run(path, "fp32")
    convs = [i for i, line in enumerate(ran) if ",convolution," in line]
    assert len(convs) == 3, ran
    between = [line for line in ran[convs[0]:convs[-1]] if ",reorder," in line]
    assert not between, between


def test_a_region_reading_the_models_input_reads_it_row_major():
    """BatchNormalization+ReLU of the caller's NCHW image, then a convolution: the region's input
    is the caller's, so it runs row-major (a reorder before the convolution, none before it)."""
    stats = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in
             {"s": RNG.uniform(0.5, 2, 3), "b": RNG.normal(size=3), "m": RNG.normal(size=3),
              "v": RNG.uniform(0.5, 2, 3)}.items()]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["y"])]
    g = helper.make_graph(nodes, "bn_on_input", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [numpy_helper.from_array(RNG.standard_normal((4, 3, 1, 1)).astype(np.float32), "w"), *stats])
    model = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), backend="native")
    assert region_orders(model) == ["outside", None]
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = autofusion.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), backend="torch")(x)
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("after_a_convolution", [True, False])
def test_the_pre_activation_layer_equals_onnx_runtime(after_a_convolution):
    import onnxruntime as ort
    model = pre_activation_model(after_a_convolution)
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = autofusion.compile(model, backend="native")(x)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
