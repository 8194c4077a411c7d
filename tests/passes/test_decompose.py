"""batch_norms_as_affine: a BatchNormalization no convolution absorbed becomes x·a + b, and at
level 2 joins its ReLU in one region (DenseNet's pre-activation)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.frontend import import_onnx
from autofusion.ir import verify
from autofusion.passes import batch_norms_as_affine

RNG = np.random.default_rng(7)


def pre_activation(shape=(1, 6, 5, 5), stats_as_inputs=(), **bn_attrs):
    """Concat(x, x²) → BatchNormalization → Relu: nothing a convolution could fold."""
    c = 2 * shape[1]
    stats = {"s": RNG.uniform(0.5, 2, c), "b": RNG.normal(size=c), "m": RNG.normal(size=c),
             "v": RNG.uniform(0.1, 3, c)}
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="sq"),
             helper.make_node("Concat", ["x", "sq"], ["cat"], axis=1, name="cat"),
             helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"],
                              ["n", "rm", "rv"] if bn_attrs.get("training_mode") else ["n"], name="bn", **bn_attrs),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    out_shape = [shape[0], c, *shape[2:]]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, [c]) for k in stats_as_inputs]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in stats.items() if k not in stats_as_inputs]
    g = helper.make_graph(nodes, "pre_activation", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)]), stats


def test_a_batch_norm_becomes_a_per_channel_scale_and_shift():
    model, stats = pre_activation()
    g = import_onnx(model)
    assert batch_norms_as_affine(g) == 1
    verify(g)
    assert g.op_histogram() == {"Mul": 2, "Concat": 1, "Add": 1, "Relu": 1}
    scale = next(n for n in g.nodes if n.op_type == "Mul" and n.name.startswith("bn")).inputs[1].const
    a = stats["s"] / np.sqrt(stats["v"] + 1e-5)
    np.testing.assert_allclose(scale.reshape(-1), a, rtol=1e-6)
    assert scale.shape == (12, 1, 1)


@pytest.mark.parametrize("backend", ["torch", "native"])
@pytest.mark.parametrize("shape", [(1, 6, 5, 5), (2, 6), (1, 6, 7)])
def test_it_fuses_with_its_relu_and_equals_onnx_runtime(backend, shape):
    from autofusion.backend.native import unavailable
    if backend == "native" and unavailable() is not None:
        pytest.skip(f"no native code: {unavailable()}")
    model, _ = pre_activation(shape)
    compiled = autofusion.compile(model, level=2, backend=backend)
    regions = [r for r in compiled.report.regions if "Relu" in r.ops]
    assert len(regions) == 1 and regions[0].ops == ["Mul", "Add", "Relu"]
    assert "BatchNormalization" not in compiled.graph.op_histogram()
    x = RNG.standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["training", "computed statistics", "negative epsilon"])
def test_what_is_not_an_affine_map_of_constants_stays_a_batch_norm(case):
    model, _ = {"training": lambda: pre_activation(training_mode=1),
                "computed statistics": lambda: pre_activation(stats_as_inputs=("m",)),
                "negative epsilon": lambda: pre_activation(epsilon=-5.0)}[case]()
    g = import_onnx(model)
    assert batch_norms_as_affine(g) == 0
    assert g.op_histogram()["BatchNormalization"] == 1


def test_a_batch_norm_after_a_convolution_is_folded_by_the_rule_first():
    w = numpy_helper.from_array(RNG.standard_normal((4, 4, 3, 3)).astype(np.float32), "w")
    model, _ = pre_activation((1, 2, 6, 6))
    g = model.graph
    g.initializer.append(w)
    g.node[1].input[:] = ["x", "sq"]
    g.node.insert(2, helper.make_node("Conv", ["cat", "w"], ["conv"], pads=[1, 1, 1, 1], name="conv"))
    g.node[3].input[0] = "conv"
    compiled = autofusion.compile(model, level=2)
    assert compiled.report.passes.get("BatchNormalization as Mul+Add") == 0
    assert "autofusion::FusedConv" in compiled.graph.op_histogram()
