"""ConvTranspose as oneDNN's deconvolution (impls.py emit_conv_transpose, the runtime's deconv
step): the weight read as ONNX holds it ([C_in, C_out/groups, k...]), strides, pads (explicit or
SAME), dilations, groups (depthwise included), output_padding as the end padding's shortfall, 1-D
to 3-D, symbolic sizes, bf16; equal to ONNX Runtime. What it refuses, it names."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import autofusion
from autofusion.backend.native import unavailable
from tests.helpers import one_native_node_like_onnxruntime
from autofusion.backend.precision import has_bf16

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(0)


def conv_transpose(cin: int, cout: int, kernel: tuple, spatial: tuple, bias: bool = True,
                   weight_input: bool = False, **attrs) -> onnx.ModelProto:
    """x [1, cin, *spatial] (symbolic where spatial holds names) through one ConvTranspose."""
    group = attrs.get("group", 1)
    w = RNG.standard_normal((cin, cout // group, *kernel)).astype(np.float32)
    inits = [] if weight_input else [onnx.numpy_helper.from_array(w, "w")]
    if bias:
        inits.append(onnx.numpy_helper.from_array(RNG.standard_normal(cout).astype(np.float32), "b"))
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], name="deconv", **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, *spatial])]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    g = helper.make_graph([node], "deconv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def check(model: onnx.ModelProto, *sizes: tuple) -> autofusion.CompiledModel:
    return one_native_node_like_onnxruntime(model, *sizes, tolerance=1e-4)


@pytest.mark.parametrize("cin, cout, kernel, attrs", [
    (8, 4, (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),   # a decoder's 2x up
    (8, 4, (4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    (8, 8, (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], group=2)),
    (6, 6, (2, 2), dict(strides=[2, 2], group=6)),                                     # depthwise
    (4, 4, (3, 3), dict(dilations=[2, 2])),
    (4, 5, (3, 2), dict(strides=[1, 3], pads=[0, 1, 2, 0])),
])
def test_a_2d_conv_transpose_equals_onnx_runtime(cin, cout, kernel, attrs):
    check(conv_transpose(cin, cout, kernel, (7, 9), **attrs), (1, cin, 7, 9))


@pytest.mark.parametrize("cin, cout, spatial", [(512, 17, (14, 14)), (256, 128, (16, 16))])
def test_a_wide_upsampling_avoids_onednn_s_faulty_brgemm_deconvolution(cin, cout, spatial):
    """Keypoint R-CNN's heatmap head (512 -> 17, 4x4, stride 2): oneDNN 3.2's brgemm
    deconvolution with a bias is off by ~5 there; the runtime finds so (it runs it once against
    the next implementation), takes the next one and says so."""
    model = conv_transpose(cin, cout, (4, 4), spatial, strides=[2, 2], pads=[1, 1, 1, 1])
    compiled = check(model, (1, cin, *spatial))
    (part,) = compiled.program.native.values()
    assert "brg_conv:" not in part.last.kernels[0]
    assert any("not oneDNN's brgemm deconvolution" in c for c in part.last.choices[0]), part.last.choices


def test_the_brgemm_deconvolution_stays_where_it_is_right():
    compiled = check(conv_transpose(512, 16, (4, 4), (14, 14), strides=[2, 2], pads=[1, 1, 1, 1]), (1, 512, 14, 14))
    (part,) = compiled.program.native.values()
    assert part.last.kernels[0].count("brg_conv:") == 1 and not part.last.choices[0]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("kernel, stride", [(3, 2), (4, 2), (5, 3), (2, 2)])
def test_same_padding_makes_the_input_times_the_stride(auto_pad, kernel, stride):
    check(conv_transpose(4, 4, (kernel, kernel), (5, 6), auto_pad=auto_pad, strides=[stride, stride]), (1, 4, 5, 6))


def test_without_bias_in_1d_and_3d():
    check(conv_transpose(4, 6, (5,), (11,), bias=False, strides=[4], pads=[2, 1]), (1, 4, 11))   # a vocoder's up
    check(conv_transpose(4, 2, (2, 2, 2), (3, 4, 5), strides=[2, 2, 2]), (1, 4, 3, 4, 5))


def test_symbolic_sizes_run_natively_at_each_size():
    model = conv_transpose(8, 4, (4, 4), ("h", "w"), strides=[2, 2], pads=[1, 1, 1, 1])
    compiled = check(model, (1, 8, 5, 6), (1, 8, 12, 3), (1, 8, 1, 1))
    assert "h=1, w=1" in str(compiled.plan)


@pytest.mark.parametrize("attrs, weight_input, reason", [
    (dict(strides=[2, 2], auto_pad="SAME_UPPER", output_padding=[1, 1]), False, "ONNX Runtime disagree on the size"),
    (dict(strides=[2, 2], output_shape=[14, 18]), False, "output_shape given: explicit pads only"),
    (dict(strides=[2, 2], output_padding=[1, 1]), False, "output_padding beyond the end padding"),
    (dict(strides=[2, 2]), True, "the weight is computed at run time"),
])
def test_what_it_refuses_it_names_and_runs_on_pytorch(attrs, weight_input, reason):
    model = conv_transpose(4, 4, (3, 3), (7, 9), weight_input=weight_input, **attrs)
    compiled = autofusion.compile(model, level=0, backend="native")
    (node,) = compiled.graph.nodes
    decision = compiled.plan.decisions[node]
    assert decision.impl.target == "torch"
    assert any(reason in why for _, why in decision.refused), decision.refused
    feeds = {"x": RNG.standard_normal((1, 4, 7, 9)).astype(np.float32)}
    if weight_input:
        feeds["w"] = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not has_bf16(), reason="no bf16 dot products on this CPU")
def test_in_bf16_within_the_precision_of_bf16():
    model = conv_transpose(32, 16, (4, 4), (16, 16), strides=[2, 2], pads=[1, 1, 1, 1])
    compiled = autofusion.compile(model, level=0, backend="native", precision="bf16")
    (node,) = compiled.graph.nodes
    assert compiled.plan.decisions[node].precision == "bf16"
    x = RNG.standard_normal((1, 32, 16, 16)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.abs(compiled(x) - want).max() <= 2e-2 * np.abs(want).max()
