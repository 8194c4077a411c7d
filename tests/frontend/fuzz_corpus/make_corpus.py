"""Write the fuzz seed corpus: a handful of small valid ONNX models, each a few KB, that between
them use the constructs the importer, the shape rules, the passes and the backends read (convs
and norms, products, attention, broadcasting chains, shape arithmetic on symbolic dims, integer
and boolean ops). test_fuzz.py mutates them; rerun this script after changing one:

    python tests/frontend/fuzz_corpus/make_corpus.py
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).parent
F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(name: str, nodes, inputs, outputs, weights: dict, opset: int = 17) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(a), k) for k, a in weights.items()]
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="autofusion-fuzz-corpus")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _w(rng, *shape) -> np.ndarray:
    return (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32)


def conv_bn_pool(rng) -> onnx.ModelProto:
    """Conv → BatchNorm → Relu → MaxPool → GlobalAveragePool → Flatten → Gemm → Softmax."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
             n("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn", epsilon=1e-5),
             n("Relu", ["bn"], ["r"], name="relu"),
             n("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             n("GlobalAveragePool", ["p"], ["g"], name="gap"),
             n("Flatten", ["g"], ["f"], name="flatten", axis=1),
             n("Gemm", ["f", "Wfc", "Bfc"], ["logits"], name="fc", transB=1),
             n("Softmax", ["logits"], ["y"], name="softmax", axis=-1)]
    weights = {"W": _w(rng, 4, 3, 3, 3), "B": _w(rng, 4), "s": 1 + 0.1 * _w(rng, 4),
               "b": _w(rng, 4), "m": _w(rng, 4), "v": np.abs(_w(rng, 4)) + 0.5,
               "Wfc": _w(rng, 5, 4), "Bfc": _w(rng, 5)}
    return _model("conv_bn_pool", nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("y", F, ["N", 5])], weights)


def mlp_gelu(rng) -> onnx.ModelProto:
    """MatMul + bias → GELU spelled with Erf → MatMul + bias → LayerNormalization."""
    n = helper.make_node
    nodes = [n("MatMul", ["x", "W1"], ["h"], name="fc1"), n("Add", ["h", "b1"], ["hb"], name="bias1"),
             n("Div", ["hb", "sqrt2"], ["d"], name="div"), n("Erf", ["d"], ["e"], name="erf"),
             n("Add", ["e", "one"], ["e1"], name="add1"), n("Mul", ["hb", "e1"], ["m"], name="mul"),
             n("Mul", ["m", "half"], ["gelu"], name="half"),
             n("MatMul", ["gelu", "W2"], ["o"], name="fc2"), n("Add", ["o", "b2"], ["ob"], name="bias2"),
             n("LayerNormalization", ["ob", "gamma", "beta"], ["y"], name="ln", axis=-1, epsilon=1e-5)]
    weights = {"W1": _w(rng, 8, 16), "b1": _w(rng, 16), "sqrt2": np.float32(math.sqrt(2)),
               "one": np.float32(1), "half": np.float32(0.5), "W2": _w(rng, 16, 4), "b2": _w(rng, 4),
               "gamma": 1 + 0.1 * _w(rng, 4), "beta": _w(rng, 4)}
    return _model("mlp_gelu", nodes, [helper.make_tensor_value_info("x", F, ["batch", 8])],
                  [helper.make_tensor_value_info("y", F, ["batch", 4])], weights)


def attention(rng) -> onnx.ModelProto:
    """One attention head pair: Q, K, V projections, Reshape/Transpose to heads, scaled
    scores, Softmax, the weighted sum, back to [1, S, 8]."""
    n = helper.make_node
    nodes = [n("MatMul", ["x", "Wq"], ["q"], name="q"), n("MatMul", ["x", "Wk"], ["k"], name="k"),
             n("MatMul", ["x", "Wv"], ["v"], name="v")]
    for t in "qkv":
        nodes += [n("Reshape", [t, "heads"], [t + "h"], name=t + "_reshape"),
                  n("Transpose", [t + "h"], [t + "t"], name=t + "_transpose", perm=[0, 2, 1, 3])]
    nodes += [n("Transpose", ["kt"], ["ktt"], name="k_t", perm=[0, 1, 3, 2]),
              n("MatMul", ["qt", "ktt"], ["s"], name="scores"), n("Div", ["s", "scale"], ["ss"], name="scale"),
              n("Softmax", ["ss"], ["p"], name="softmax", axis=-1), n("MatMul", ["p", "vt"], ["a"], name="ctx"),
              n("Transpose", ["a"], ["at"], name="merge_t", perm=[0, 2, 1, 3]),
              n("Reshape", ["at", "merged"], ["y"], name="merge")]
    weights = {"Wq": _w(rng, 8, 8), "Wk": _w(rng, 8, 8), "Wv": _w(rng, 8, 8),
               "heads": np.array([1, -1, 2, 4], np.int64), "scale": np.float32(2.0),
               "merged": np.array([1, -1, 8], np.int64)}
    return _model("attention", nodes, [helper.make_tensor_value_info("x", F, [1, "S", 8])],
                  [helper.make_tensor_value_info("y", F, [1, "S", 8])], weights)


def elementwise(rng) -> onnx.ModelProto:
    """A broadcasting chain automatic fusion groups: SiLU, bias, Clip, Where, Pow, two outputs."""
    n = helper.make_node
    nodes = [n("Sigmoid", ["x"], ["sg"], name="sigmoid"), n("Mul", ["x", "sg"], ["silu"], name="silu"),
             n("Add", ["silu", "b"], ["a"], name="bias"),
             n("Clip", ["a", "lo", "hi"], ["c"], name="clip"),
             n("Greater", ["x", "zero"], ["pos"], name="greater"), n("Neg", ["x"], ["nx"], name="neg"),
             n("Where", ["pos", "c", "nx"], ["w"], name="where"),
             n("Pow", ["w", "two"], ["sq"], name="pow"), n("Sqrt", ["sq"], ["y"], name="sqrt"),
             n("Tanh", ["w"], ["t"], name="tanh"), n("Mul", ["t", "s"], ["z"], name="scale")]
    weights = {"b": _w(rng, 3, 1), "lo": np.float32(-1), "hi": np.float32(2), "zero": np.float32(0),
               "two": np.float32(2), "s": _w(rng, 4)}
    return _model("elementwise", nodes, [helper.make_tensor_value_info("x", F, [2, 3, 4])],
                  [helper.make_tensor_value_info("y", F, [2, 3, 4]),
                   helper.make_tensor_value_info("z", F, [2, 3, 4])], weights)


def shape_ops(rng) -> onnx.ModelProto:
    """Shape arithmetic on symbolic dims: Shape/Gather/Concat into Reshape, Slice, Expand,
    Tile, Squeeze/Unsqueeze, a ReduceSum with axes as an input."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["shp"], name="shape"),
             n("Gather", ["shp", "i0"], ["b"], name="batch", axis=0),
             n("Unsqueeze", ["b", "ax0"], ["b1"], name="unsq"),
             n("Concat", ["b1", "rest"], ["target"], name="target", axis=0),
             n("Reshape", ["x", "target"], ["r"], name="reshape"),
             n("Transpose", ["r"], ["t"], name="transpose", perm=[0, 2, 1]),
             n("Slice", ["t", "starts", "ends", "axes"], ["sl"], name="slice"),
             n("Expand", ["sl", "ones"], ["ex"], name="expand"),
             n("Tile", ["ex", "reps"], ["ti"], name="tile"),
             n("ReduceSum", ["ti", "raxes"], ["y"], name="sum", keepdims=0),
             n("Squeeze", ["b1", "ax0"], ["bs"], name="squeeze"),
             n("Cast", ["bs"], ["z"], name="cast", to=F)]
    weights = {"i0": np.array(0, np.int64), "ax0": np.array([0], np.int64),
               "rest": np.array([-1, 3], np.int64), "starts": np.array([1], np.int64),
               "ends": np.array([3], np.int64), "axes": np.array([1], np.int64),
               "ones": np.array([1, 1, 1], np.int64), "reps": np.array([1, 2, 1], np.int64),
               "raxes": np.array([2], np.int64)}
    return _model("shape_ops", nodes, [helper.make_tensor_value_info("x", F, ["B", "S", 6])],
                  [helper.make_tensor_value_info("y", F, ["B", 4]), helper.make_tensor_value_info("z", F, [])],
                  weights)


def int_ops(rng) -> onnx.ModelProto:
    """Integer and boolean data: an embedding Gather by int64 ids, ArgMax, comparisons, logic,
    CumSum, Cast between kinds, TopK."""
    n = helper.make_node
    nodes = [n("Gather", ["table", "ids"], ["emb"], name="embed", axis=0),
             n("ReduceMax", ["emb"], ["mx"], name="max", axes=[-1], keepdims=0),
             n("ArgMax", ["emb"], ["am"], name="argmax", axis=-1, keepdims=0),
             n("Equal", ["am", "ids"], ["eq"], name="equal"), n("Not", ["eq"], ["ne"], name="not"),
             n("And", ["ne", "mask"], ["both"], name="and"),
             n("Cast", ["both"], ["bf"], name="cast", to=F), n("Mul", ["bf", "mx"], ["y"], name="mul"),
             n("CumSum", ["ids", "axis0"], ["cs"], name="cumsum"),
             n("TopK", ["mx", "k"], ["top", "topi"], name="topk", axis=-1)]
    weights = {"table": _w(rng, 5, 4), "axis0": np.array(0, np.int64), "k": np.array([2], np.int64)}
    return _model("int_ops", nodes, [helper.make_tensor_value_info("ids", I64, [6]),
                                     helper.make_tensor_value_info("mask", BOOL, [6])],
                  [helper.make_tensor_value_info("y", F, [6]), helper.make_tensor_value_info("cs", I64, [6]),
                   helper.make_tensor_value_info("topi", I64, [2])], weights)


def image_ops(rng) -> onnx.ModelProto:
    """Pad, a strided and grouped Conv, ConvTranspose, Resize, AveragePool, Concat."""
    n = helper.make_node
    nodes = [n("Pad", ["x", "pads"], ["p"], name="pad", mode="reflect"),
             n("Conv", ["p", "Wg"], ["c"], name="gconv", group=2, strides=[2, 2]),
             n("ConvTranspose", ["c", "Wt"], ["u"], name="deconv", strides=[2, 2]),
             n("Resize", ["c", "", "scales"], ["rs"], name="resize", mode="nearest"),
             n("Concat", ["u", "rs"], ["cat"], name="concat", axis=1),
             n("AveragePool", ["cat"], ["y"], name="avgpool", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
               count_include_pad=0)]
    weights = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "Wg": _w(rng, 4, 1, 3, 3),
               "Wt": _w(rng, 4, 2, 2, 2), "scales": np.array([1, 1, 2, 2], np.float32)}
    return _model("image_ops", nodes, [helper.make_tensor_value_info("x", F, [1, 2, 7, 7])],
                  [helper.make_tensor_value_info("y", F, [1, 6, 8, 8])], weights)


CORPUS = [conv_bn_pool, mlp_gelu, attention, elementwise, shape_ops, int_ops, image_ops]


def main() -> None:
    rng = np.random.default_rng(0)
    for make in CORPUS:
        model = make(rng)
        onnx.save_model(model, HERE / f"{make.__name__}.onnx")
        print(f"{make.__name__}.onnx: {model.ByteSize()} bytes")


if __name__ == "__main__":
    main()
