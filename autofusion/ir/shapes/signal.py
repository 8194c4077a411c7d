"""Signal processing (windows, mel filters, DFT, STFT) and text features (TF-IDF)."""
from __future__ import annotations

from ..attributes import const_ints, normalize_axis, opset_of
from ..dtypes import DType
from ..graph import Node
from ..ops import OpClass, OpDef, register
from ..symbolic import add, floordiv, mul

O = OpClass.OPAQUE


def _window(node: Node):
    """[size] in output_datatype (float by default)."""
    n = const_ints(node.inputs[0])
    return [((n[0] if n else None,), DType(node.attr("output_datatype", 1)))]


for _name in ["HannWindow", "HammingWindow", "BlackmanWindow"]:
    register(OpDef(_name, O, _window))
del _name


def _mel_weight_matrix(node: Node):
    bins, n_fft = const_ints(node.inputs[0]), const_ints(node.inputs[1])
    return [((n_fft[0] // 2 + 1 if n_fft else None, bins[0] if bins else None),
             DType(node.attr("output_datatype", 1)))]


register(OpDef("MelWeightMatrix", O, _mel_weight_matrix))


def _dft(node: Node):
    """The input with the transformed axis dft_length long (n/2 + 1 onesided) and a last axis
    of 2, or 1 for the inverse of a onesided transform."""
    x = node.inputs[0]
    if x.shape is None:
        return [(None, x.dtype)]
    rank = len(x.shape)
    if opset_of(node) < 20:
        axis: int | None = node.attr("axis", 1)
    else:
        given = const_ints(node.input(2)) if node.input(2) is not None else [-2]
        axis = given[0] if given else None
    if axis is None:
        return [((None,) * rank, x.dtype)]
    a = normalize_axis(axis, rank)
    inverse, onesided = node.attr("inverse", 0), node.attr("onesided", 0)
    length = const_ints(node.input(1)) if node.input(1) is not None else None
    d = x.shape[a]
    n = length[0] if length else (None if node.input(1) is not None else
                                  (mul(add(d, -1), 2) if inverse and onesided else d))
    if onesided and not inverse:
        n = add(floordiv(n, 2), 1)
    out = list(x.shape)
    out[a], out[-1] = n, 1 if inverse and onesided else 2
    return [(tuple(out), x.dtype)]


register(OpDef("DFT", O, _dft))


def _stft(node: Node):
    """[batch, frames, bins, 2]."""
    x = node.inputs[0]
    batch = x.shape[0] if x.shape is not None else None
    return [((batch, None, None, 2), x.dtype)]


register(OpDef("STFT", O, _stft))


def _tfidf_vectorizer(node: Node):
    """[B, max(ngram_indexes) + 1] float for input [B, C]; [max + 1] for input [C]."""
    x, width = node.inputs[0], max(node.attrs["ngram_indexes"]) + 1
    if x.shape is None:
        return [(None, DType.FLOAT)]
    return [((x.shape[0], width) if len(x.shape) == 2 else (width,), DType.FLOAT)]


register(OpDef("TfIdfVectorizer", O, _tfidf_vectorizer))
