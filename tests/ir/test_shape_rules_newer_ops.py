"""The shape/dtype rules of the recurrent, attention, quantization, signal and vision ops,
checked against ONNX Runtime like the others (test_shape_rules.py): what a rule states holds
under two bindings of the symbolic dims, and agrees with ONNX's shape inference."""
from __future__ import annotations

import numpy as np
import pytest

from autofusion.ir.symbolic import add

from .test_shape_rules import check, i64, node

F32 = np.float32
RNG = np.random.default_rng(0)


def weights(*shape):
    return RNG.standard_normal(shape).astype(F32)


def u8(*shape):
    return RNG.integers(0, 255, shape).astype(np.uint8)


@pytest.mark.parametrize("op, gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent(op, gates, direction):
    dirs = 2 if direction == "bidirectional" else 1
    outs = ["y", "y_h", "y_c"][: 3 if op == "LSTM" else 2]
    want = {"y": ("s", dirs, "b", 5), "y_h": (dirs, "b", 5), "y_c": (dirs, "b", 5)}
    check([node(op, ["x", "w", "r"], outs, hidden_size=5, direction=direction)], {"x": ("s", "b", 3)},
          {"w": weights(dirs, gates * 5, 3), "r": weights(dirs, gates * 5, 5)}, 14,
          expect={o: want[o] for o in outs})


def test_attention_4d_with_cache_and_scores():
    check([node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "pk2", "pv2", "qk"])],
          {"q": ("b", 4, "s", 8), "k": ("b", 2, "s", 8), "v": ("b", 2, "s", 6),
           "pk": ("b", 2, 3, 8), "pv": ("b", 2, 3, 6)}, opset=23,
          expect={"y": ("b", 4, "s", 6), "pk2": ("b", 2, add("s", 3), 8), "pv2": ("b", 2, add("s", 3), 6),
                  "qk": ("b", 4, "s", add("s", 3))})


def test_attention_3d():
    check([node("Attention", ["q", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=2)],
          {"q": ("b", "s", 32), "k": ("b", 7, 16), "v": ("b", 7, 12)}, opset=23,
          expect={"y": ("b", "s", 24)})


def test_norm_and_rotary_keep_the_shape():
    check([node("RMSNormalization", ["x", "g"], ["y"])], {"x": ("b", "s", 8)}, {"g": weights(8)}, 23,
          expect={"y": ("b", "s", 8)})
    check([node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"])],
          {"x": (2, 3, "s", 8), "pos": np.zeros((2, 5), np.int64)},
          {"cos": weights(16, 4), "sin": weights(16, 4)}, 23, bindings=({"s": 5},),
          expect={"y": (2, 3, "s", 8)})


def test_quantization_types():
    shapes = check([node("QuantizeLinear", ["x", "sc", "zp"], ["q"]),
                    node("DequantizeLinear", ["q", "sc", "zp"], ["dq"]),
                    node("QuantizeLinear", ["x", "sc"], ["q8"]),
                    node("DynamicQuantizeLinear", ["x"], ["dy", "dsc", "dzp"])],
                   {"x": ("b", 4)}, {"sc": np.array(0.1, F32), "zp": np.array(3, np.int8)}, 21,
                   expect={"q": ("b", 4), "dq": ("b", 4), "dsc": (), "dzp": ()})
    assert shapes["q8"] == ("b", 4)


def test_integer_products():
    check([node("MatMulInteger", ["a", "b"], ["y"]),
           node("QLinearMatMul", ["a", "s", "z", "b", "s", "z", "s", "z"], ["q"])],
          {"a": u8(3, 4)}, {"b": u8(4, 5), "s": np.array(0.1, F32), "z": np.array(2, np.uint8)}, 21,
          expect={"y": (3, 5), "q": (3, 5)})
    check([node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
           node("QLinearConv", ["x", "s", "z", "w", "s", "z", "s", "z"], ["q"], strides=[2, 2])],
          {"x": u8(1, 2, 6, 6)}, {"w": u8(3, 2, 3, 3), "s": np.array(0.1, F32), "z": np.array(2, np.uint8)}, 21,
          expect={"y": (1, 3, 6, 6), "q": (1, 3, 2, 2)})


def test_numeric_and_indexing_ops():
    check([node("Det", ["x"], ["d"]),
           node("CenterCropPad", ["x", "shape"], ["c"], axes=[1, 2]),
           node("MaxUnpool", ["p", "i"], ["u"], kernel_shape=[2, 2], strides=[2, 2])],
          {"x": ("b", 3, 3), "p": (1, 1, 2, 2), "i": np.array([[[[0, 3], [9, 14]]]], np.int64)},
          {"shape": i64(2, 5)}, 22,
          expect={"d": ("b",), "c": ("b", 2, 5), "u": (1, 1, 4, 4)})


def test_signal_ops():
    check([node("HannWindow", ["n"], ["w"]), node("BlackmanWindow", ["n"], ["bw"], periodic=0),
           node("DFT", ["x", "", "axis"], ["f"], onesided=1),
           node("MelWeightMatrix", ["bins", "fft", "rate", "lo", "hi"], ["m"])],
          {"x": ("b", 8, 1)}, {"n": np.array(10, np.int64), "axis": np.array(1, np.int64),
                               "bins": np.array(4, np.int64), "fft": np.array(16, np.int64),
                               "rate": np.array(8000, np.int64), "lo": np.array(0, F32),
                               "hi": np.array(4000, F32)}, 20,
          expect={"w": (10,), "bw": (10,), "f": ("b", 5, 2), "m": (9, 4)})
    check([node("STFT", ["x", "step", "win"], ["s"])], {"x": ("b", 64, 1)},
          {"step": np.array(8, np.int64), "win": np.hanning(16).astype(F32)}, 17,
          expect={"s": ("b", None, None, 2)})


def test_vision_ops():
    check([node("GridSample", ["x", "g"], ["y"]), node("AffineGrid", ["t", "size"], ["ag"])],
          {"x": ("b", 3, 8, 8), "g": ("b", 5, 6, 2), "t": (2, 2, 3)}, {"size": i64(2, 3, 4, 5)}, 22,
          expect={"y": ("b", 3, 5, 6), "ag": (2, 4, 5, 2)})
    check([node("RoiAlign", ["x", "rois", "bi"], ["r"], output_height=3, output_width=2),   # ORT: 16
           node("NonMaxSuppression", ["boxes", "scores", "k"], ["sel"])],
          {"x": ("b", 3, 8, 8), "rois": np.array([[0, 0, 4, 4], [1, 1, 6, 5]], F32),
           "bi": np.array([0, 0], np.int64), "boxes": np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1]]], F32),
           "scores": np.array([[[0.9, 0.8]]], F32)}, {"k": i64(5)}, 16,
          expect={"r": (2, 3, 3, 2), "sel": (None, 3)})
    check([node("Col2Im", ["c", "img", "blk"], ["y"]), node("DeformConv", ["x", "w", "off"], ["d"])],
          {"c": ("b", 12, 16), "x": ("b", 2, 5, 5), "off": ("b", 18, 3, 3)},
          {"img": i64(5, 5), "blk": i64(2, 2), "w": weights(4, 2, 3, 3)}, 22,
          bindings=({"b": 2},), expect={"y": ("b", 3, 5, 5), "d": ("b", 4, 3, 3)})


def test_tfidf_vectorizer():
    attrs = {"mode": "TF", "min_gram_length": 1, "max_gram_length": 1, "max_skip_count": 0,
             "ngram_counts": [0], "ngram_indexes": [0, 1, 2], "pool_int64s": [4, 5, 6]}
    check([node("TfIdfVectorizer", ["x"], ["y"], **attrs), node("TfIdfVectorizer", ["row"], ["r"], **attrs)],
          {"x": np.array([[4, 5, 4], [6, 1, 2]], np.int64), "row": np.array([4, 4, 6], np.int64)}, opset=9,
          expect={"y": (2, 3), "r": (3,)})
