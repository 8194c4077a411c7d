"""Vision, signal and text kernels against ONNX Runtime on cases the node suite leaves out: even
LRN windows, every GridSample mode and padding, RoiAlign's modes and coordinate conventions,
NMS on random boxes, DFT lengths and STFT windows, Col2Im with pads and strides, TfIdfVectorizer
with skips."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import native
from autofusion.backend.torch_cpu import cpp_kernels
from autofusion.backend.torch_cpu.vision import _overlaps

RNG = np.random.default_rng(0)
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}


def one_node(op: str, feeds: dict, consts: dict, opset: int, out=TensorProto.FLOAT, **attrs):
    """feeds are graph inputs, consts initializers, in input order (feeds first); "" omits one."""
    names = list(feeds) + list(consts)
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], op,
        [helper.make_tensor_value_info(n, ELEM[v.dtype], v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items() if n])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(model, feeds, rtol=1e-5, atol=1e-5, kernel=None):
    """Equal to ONNX Runtime; where `kernel` is given, the node ran on that implementation."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    compiled = autofusion.compile(model, level=0)
    outs = compiled.run(feeds)
    for got, w in zip([outs[n] for n in compiled.output_names], want, strict=True):
        np.testing.assert_allclose(got, w, rtol=rtol, atol=atol)
    if kernel is not None:
        assert [d.impl.name for d in compiled.plan.decisions.values()] == [kernel]


@pytest.fixture(params=["C++ kernel", "torch"])
def cpp_kernel(request, monkeypatch):
    """RoiAlign's and NonMaxSuppression's implementations: C++ where there is a compiler,
    PyTorch's everywhere."""
    if request.param == "torch":
        monkeypatch.setattr(cpp_kernels, "unavailable", lambda: "no C++ compiler (this test)")
    elif native.unavailable() is not None:
        pytest.skip(f"no native code: {native.unavailable()}")
    return request.param


def floats(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def lrn_by_the_spec(x, size, alpha, beta, bias):
    """LRN as the spec writes it, channel by channel (ONNX's reference loops over the batch)."""
    y, c = np.empty_like(x), x.shape[1]
    for ch in range(c):
        window = x[:, max(0, ch - (size - 1) // 2):min(c, ch + size // 2 + 1)]
        y[:, ch] = x[:, ch] / (bias + alpha / size * (window ** 2).sum(1)) ** beta
    return y


@pytest.mark.parametrize("size", [2, 3, 4, 5])
def test_lrn_windows(size):
    """An even window has one more channel after c than before (ONNX Runtime refuses it)."""
    x = floats(2, 7, 4, 5)
    model = one_node("LRN", {"x": x}, {}, 13, size=size, alpha=0.3, beta=0.6, bias=2.0)
    y = autofusion.compile(model, level=0)(x)
    np.testing.assert_allclose(y, lrn_by_the_spec(x, size, 0.3, 0.6, 2.0), rtol=1e-5, atol=1e-6)
    if size % 2:
        check(model, {"x": x})


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("corners", [0, 1])
def test_grid_sample(mode, padding, corners):
    x, grid = floats(2, 3, 6, 7), RNG.uniform(-1.3, 1.3, (2, 4, 5, 2)).astype(np.float32)
    model = one_node("GridSample", {"x": x, "grid": grid}, {}, 20, mode=mode, padding_mode=padding,
                     align_corners=corners)
    check(model, {"x": x, "grid": grid}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(mode, transform, ratio, cpp_kernel):
    x = floats(2, 3, 10, 12)
    rois = np.array([[0, 0, 9, 9], [1.5, 2.2, 7.1, 6.3], [4, 4, 4.5, 4.2], [-2, -1, 20, 15]], np.float32)
    batch = np.array([0, 1, 1, 0], np.int64)
    model = one_node("RoiAlign", {"x": x}, {"rois": rois, "batch": batch}, 16, mode=mode,
                     coordinate_transformation_mode=transform, sampling_ratio=ratio,
                     output_height=3, output_width=4, spatial_scale=0.9)
    check(model, {"x": x}, rtol=1e-4, atol=1e-5, kernel=cpp_kernel)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("channels", [5, 24])
def test_roi_align_of_many_regions(mode, channels, cpp_kernel):
    """Many regions over two images, of every size (sampling grids from none to 9 × 6, some
    partly or wholly outside the image, some empty); 24 channels: the C++ kernel reads the image
    channels last."""
    x = floats(2, channels, 23, 17)
    corner = RNG.uniform(-10, 25, (60, 2))
    rois = np.concatenate([corner, corner + RNG.uniform(0, 30, (60, 2)) * (RNG.random((60, 1)) > 0.1)], 1)
    batch = RNG.integers(0, 2, 60)
    model = one_node("RoiAlign", {"x": x}, {"rois": rois.astype(np.float32), "batch": batch}, 16,
                     mode=mode, output_height=3, output_width=5, spatial_scale=0.7)
    check(model, {"x": x}, rtol=1e-4, atol=1e-5, kernel=cpp_kernel)


@pytest.mark.skipif(native.unavailable() is not None, reason="no C++ compiler")
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_channels_last_gives_each_channel_what_it_gets_alone(mode):
    """The C++ kernel reads an image of 16 channels or more channels last, summing each bin over
    all channels at once: every channel gets what it gets alone (one channel: read as a plane;
    the vectorised sum may round its last bit otherwise)."""
    import torch
    x = torch.from_numpy(floats(2, 20, 15, 11))
    corner = RNG.uniform(-4, 12, (30, 2))
    rois = torch.from_numpy(np.concatenate([corner, corner + RNG.uniform(0, 9, (30, 2))], 1).astype(np.float32))
    batch = torch.from_numpy(RNG.integers(0, 2, 30))
    model = one_node("RoiAlign", {"x": x.numpy()}, {"rois": rois.numpy(), "batch": batch.numpy()}, 16,
                     mode=mode, output_height=4, output_width=3, spatial_scale=0.8, sampling_ratio=0)
    (node,) = autofusion.api.load(model).nodes
    run = cpp_kernels.roi_align(node)
    whole = run(x, rois, batch)
    for c in range(x.shape[1]):
        torch.testing.assert_close(whole[:, c:c + 1], run(x[:, c:c + 1], rois, batch), rtol=1e-6, atol=1e-6)


def test_roi_align_of_no_regions_and_a_batch_index_outside_the_batch(cpp_kernel):
    x = floats(2, 3, 8, 8)
    rois = np.array([[0, 0, 4, 4]], np.float32)
    feeds = {"x": x, "rois": rois[:0], "batch": np.zeros(0, np.int64)}
    check(one_node("RoiAlign", feeds, {}, 16), feeds, kernel=cpp_kernel)
    for outside in (2, -1):
        model = one_node("RoiAlign", {"x": x}, {"rois": rois, "batch": np.array([outside], np.int64)}, 16)
        with pytest.raises(autofusion.NodeExecutionError, match="RoiAlign_0.*batch index is outside"):
            autofusion.compile(model, level=0)(x)


@pytest.mark.parametrize("center_point", [0, 1])
@pytest.mark.parametrize("iou, score", [(0.5, None), (0.3, 0.2), (0.0, 0.5)])
def test_non_max_suppression(center_point, iou, score, cpp_kernel):
    corner = RNG.uniform(0, 10, (2, 40, 2))
    size = RNG.uniform(0.5, 4, (2, 40, 2))
    boxes = np.concatenate([corner, corner + size] if not center_point else [corner, size], -1)
    boxes, scores = boxes.astype(np.float32), RNG.random((2, 3, 40)).astype(np.float32)
    consts = {"k": np.array([7], np.int64), "iou": np.array([iou], np.float32)}
    if score is not None:
        consts["score"] = np.array([score], np.float32)
    model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, consts, 11,
                     out=TensorProto.INT64, center_point_box=center_point)
    check(model, {"boxes": boxes, "scores": scores}, kernel=cpp_kernel)


def test_non_max_suppression_of_a_batched_nms(cpp_kernel):
    """torchvision's batched NMS: one class of thousands of boxes, each class's boxes moved apart
    by an offset; clusters of near-copies, tied scores, degenerate boxes; no limit that binds."""
    classes, per_class = 40, 60
    centre = RNG.uniform(20, 280, (classes * per_class // 4, 1, 2)).repeat(4, 1).reshape(-1, 2)
    centre += RNG.normal(0, 3, centre.shape)
    half = RNG.uniform(2, 40, centre.shape)
    half[::17] = 0
    offset = (np.arange(classes).repeat(per_class) * 400.0)[:, None]
    boxes = np.concatenate([centre - half, centre + half], -1) + offset
    scores = RNG.random(classes * per_class).round(2)
    feeds = {"boxes": boxes[None].astype(np.float32), "scores": scores[None, None].astype(np.float32)}
    consts = {"k": np.array([10_000], np.int64), "iou": np.array([0.45], np.float32),
              "score": np.array([0.05], np.float32)}
    check(one_node("NonMaxSuppression", feeds, consts, 11, out=TensorProto.INT64), feeds, kernel=cpp_kernel)


@pytest.mark.skipif(native.unavailable() is not None, reason="no C++ compiler")
@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2), st.integers(0, 80), st.integers(0, 4), st.integers(0, 2**32 - 1), st.booleans())
def test_the_cpp_selection_is_the_pytorch_kernel_s(batches, n, classes, seed, center_point):
    """On boxes in clusters and apart, tied and NaN scores, degenerate, inverted and infinite
    boxes, any limit and floor: the C++ kernel keeps exactly the boxes the PyTorch one keeps."""
    from autofusion.backend.torch_cpu.vision import _non_max_suppression
    import torch
    rng = np.random.default_rng(seed)
    centre = rng.choice([rng.uniform(0, 30, (batches, n, 2)), rng.integers(0, 4, (batches, n, 2)) * 3.0])
    size = rng.uniform(-1, 8, (batches, n, 2)).round(1)
    boxes = np.concatenate([centre, size] if center_point else [centre, centre + size], -1).astype(np.float32)
    if n:
        boxes[..., rng.integers(0, n), rng.integers(0, 4)] = rng.choice([np.inf, -np.inf, 5.0])
    scores = rng.random((batches, classes, n)).round(1).astype(np.float32)
    if n:
        scores[..., rng.integers(0, n)] = np.nan
    args = [torch.from_numpy(boxes), torch.from_numpy(scores), torch.tensor([int(rng.integers(0, 12))]),
            torch.tensor([np.float32(rng.choice([0.0, 0.3, 0.5]))])]
    if rng.random() < 0.5:
        args.append(torch.tensor([np.float32(rng.choice([0.0, 0.4]))]))
    node = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, {}, 11, out=TensorProto.INT64,
                    center_point_box=int(center_point))
    (ir_node,) = autofusion.api.load(node).nodes
    want = _non_max_suppression(ir_node)(*args)
    got = cpp_kernels.non_max_suppression(ir_node)(*args)
    assert got.tolist() == want.tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 60), st.integers(1, 50), st.integers(0, 2**32 - 1))
def test_overlapping_pairs_are_those_of_all_pairs(n, chunk, seed):
    """The sweep along x, in chunks of any size, finds exactly the pairs the all-pairs IoU does."""
    rng = np.random.default_rng(seed)
    low = rng.uniform(0, 20, (n, 2)).round(1)
    x_min, y_min = low.T.astype(np.float32)
    x_max, y_max = (low + rng.uniform(-1, 8, (n, 2)).round(1)).T.astype(np.float32)
    threshold = np.float32(rng.choice([0.0, 0.3, 0.7]))
    earlier, later = _overlaps(x_min, x_max, y_min, y_max, threshold, chunk)
    area = (x_max - x_min) * (y_max - y_min)
    want = {(i, j) for i in range(n) for j in range(i + 1, n)
            if min(area[i], area[j]) > 0 and _iou(x_min, x_max, y_min, y_max, i, j) > threshold}
    assert sorted(zip(earlier.tolist(), later.tolist())) == sorted(want)


def _iou(x_min, x_max, y_min, y_max, i, j) -> np.float32:
    inter_w = min(x_max[i], x_max[j]) - max(x_min[i], x_min[j])
    inter_h = min(y_max[i], y_max[j]) - max(y_min[i], y_min[j])
    if inter_w <= 0 or inter_h <= 0:
        return np.float32(0)
    inter = inter_w * inter_h
    return inter / ((x_max[i] - x_min[i]) * (y_max[i] - y_min[i]) + (x_max[j] - x_min[j]) * (y_max[j] - y_min[j]) - inter)


@pytest.mark.parametrize("attrs, length", [({}, None), ({"onesided": 1}, None), ({"inverse": 1}, None),
                                           ({}, 12), ({"onesided": 1}, 6), ({"inverse": 1}, 10)])
@pytest.mark.parametrize("complex_input", [False, True])
def test_dft(attrs, length, complex_input):
    if complex_input and attrs.get("onesided"):
        pytest.skip("a onesided transform takes a real signal")
    x = floats(2, 8, 3, 2 if complex_input else 1)
    consts = {"length": np.array(length, np.int64)} if length else {"": None}
    consts["axis"] = np.array(1, np.int64)
    model = one_node("DFT", {"x": x}, consts, 20, **attrs)
    check(model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_with_a_window(onesided):
    x = floats(2, 64, 1)
    consts = {"step": np.array(6, np.int64), "window": np.hanning(16).astype(np.float32)}
    check(one_node("STFT", {"x": x}, consts, 17, onesided=onesided), {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1]}, {"pads": [1, 0, 1, 2], "dilations": [1, 2]}])
def test_col2im(attrs):
    image, block = [6, 7], [2, 3]
    nd = 2
    s, d = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    p = attrs.get("pads", [0] * 4)
    blocks = [(n + p[i] + p[i + nd] - (dd * (k - 1) + 1)) // ss + 1
              for i, (n, k, ss, dd) in enumerate(zip(image, block, s, d))]
    x = floats(2, 3 * 6, blocks[0] * blocks[1])
    consts = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    check(one_node("Col2Im", {"x": x}, consts, 18, **attrs), {"x": x})


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams, skip", [((1, 1), 0), ((1, 3), 0), ((2, 3), 2), ((1, 2), 3)])
def test_tfidf_vectorizer(mode, grams, skip):
    """N-gram counts of token ids; 1-grams [0..5], 2-grams and 3-grams of the pool."""
    tokens = RNG.integers(0, 6, (3, 20)).astype(np.int64)
    pool = [0, 1, 2, 3, 4, 5, 0, 1, 2, 2, 3, 3, 5, 4, 1, 2, 3, 0, 0, 0]   # 6 unigrams, 4 bigrams, 2 trigrams
    attrs = {"mode": mode, "min_gram_length": grams[0], "max_gram_length": grams[1], "max_skip_count": skip,
             "ngram_counts": [0, 6, 14], "ngram_indexes": list(range(12))[::-1], "pool_int64s": pool}
    if mode != "TF":
        attrs["weights"] = RNG.uniform(0.5, 2, 12).astype(np.float32).tolist()
    check(one_node("TfIdfVectorizer", {"x": tokens}, {}, 9, **attrs), {"x": tokens})


def test_the_cpp_roi_align_refuses_a_double_image_and_the_plan_says_why():
    x = RNG.standard_normal((1, 2, 6, 6))
    rois = np.array([[0, 0, 4, 4]], np.float64)
    feeds = {"x": x}
    graph = helper.make_graph(
        [helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [numpy_helper.from_array(rois, "rois"), numpy_helper.from_array(np.zeros(1, np.int64), "batch")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    compiled = autofusion.compile(model, level=0)
    assert [d.impl.name for d in compiled.plan.decisions.values()] == ["torch"]
    if native.unavailable() is None:
        assert "its image and regions are not float32" in str(compiled.plan)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-6)
