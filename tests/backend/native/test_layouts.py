"""The layouts the runtime's convolutions write (runtime.cpp Partition::conv): a network's first
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
