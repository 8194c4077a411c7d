"""Native code for every input size: models exported with dynamic axes run every node natively,
compiled once, at several sizes each equal to ONNX Runtime; a new size builds primitives and no
C++; each partition keeps a bounded number of sizes set up.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import autofusion
from autofusion.backend.native import build, library, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

RNG = np.random.default_rng(0)


class Cnn(nn.Module):
    """A MobileNetV3-style block stack: a strided stem, a depthwise conv, a squeeze-excitation
    gate (a global mean, two linear layers, a hard sigmoid scaling the channels), a residual add,
    a pooled head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.ReLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1), nn.ReLU(),
                                nn.Conv2d(8, 16, 1), nn.Hardsigmoid())
        self.pw = nn.Sequential(nn.Conv2d(16, 16, 1), nn.BatchNorm2d(16))
        self.down = nn.Sequential(nn.Conv2d(16, 24, 3, 2, 1), nn.Hardswish(), nn.MaxPool2d(3, 2, 1))
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x)
        x = x + self.pw(y * self.se(y))
        x = self.down(x)
        return self.head(x.mean((2, 3)))


class Encoder(nn.Module):
    """A BERT-style encoder layer written out: q/k/v, scaled scores plus the padding mask,
    softmax, the heads merged back, GELU MLP, post-norms."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.h, self.d = heads, d
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = (y.view(b, t, self.h, -1).transpose(1, 2) for y in self.qkv(x).split(self.d, -1))
        scores = q @ k.transpose(-1, -2) / (self.d // self.h) ** 0.5 + (1.0 - mask[:, None, None, :]) * -10000.0
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, self.d)
        x = self.n1(x + self.o(y))
        return self.n2(x + self.f2(nn.functional.gelu(self.f1(x))))


class Detector(nn.Module):
    """A YOLO-style neck and head: strided convolutions, an upsample concatenated with the finer
    map, a head split into boxes and scores, flattened and joined (sizes derived throughout)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 16, 3, 2, 1), nn.Conv2d(16, 32, 3, 2, 1)
        self.c3, self.head = nn.Conv2d(48, 16, 1), nn.Conv2d(16, 7, 1)

    def forward(self, x):
        a = nn.functional.silu(self.c1(x))
        b = nn.functional.silu(self.c2(a))
        u = nn.functional.interpolate(b, scale_factor=2.0, mode="nearest")
        y = self.head(nn.functional.silu(self.c3(torch.cat([a, u], 1))))
        box, cls = y.split([4, 3], 1)
        return torch.cat([box.flatten(2), cls.sigmoid().flatten(2)], 1)


def exported(module: nn.Module, args: tuple, names: list[str], axes: dict, path) -> str:
    torch.manual_seed(0)
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=17,
                          input_names=names, output_names=["y"], dynamic_axes=axes)
    return str(path)


def paddle_style() -> onnx.ModelProto:
    """As paddle2onnx writes a classifier: inputs and outputs dimmed '?', value_info dims named
    unk__N (what ONNX's inference made up), a reshape target computed from Shape."""
    w = numpy_helper.from_array(RNG.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(RNG.standard_normal((8, 4)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Shape", ["p"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one", "zero"], ["n"]),
             helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["p", "target"], ["flat"]),
             helper.make_node("MatMul", ["flat", "fc"], ["y"])]
    ints = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)   # noqa: E731
    g = helper.make_graph(nodes, "paddle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", 4])],
                          [w, fc, ints("zero", [0]), ints("one", [1]), ints("minus_one", [-1])],
                          value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, ["unk__0", 8, "unk__1", "unk__2"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def image(n, h, w):
    return {"x": RNG.standard_normal((n, 3, h, w)).astype(np.float32)}


def tokens(n, t):
    mask = np.ones((n, t), np.float32)
    mask[:, t - 1:] = 0   # the last token is padding
    return {"x": RNG.standard_normal((n, t, 32)).astype(np.float32), "mask": mask}


CASES = {
    "cnn": (lambda p: exported(Cnn(), (torch.randn(1, 3, 32, 32),), ["x"], {"x": {0: "b", 2: "h", 3: "w"}}, p),
            [image(1, 32, 32), image(2, 48, 40), image(1, 65, 33)]),
    "encoder": (lambda p: exported(Encoder(), (torch.randn(2, 7, 32), torch.ones(2, 7)), ["x", "mask"],
                                   {"x": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}}, p),
                [tokens(1, 5), tokens(2, 9), tokens(3, 16)]),
    "detector": (lambda p: exported(Detector(), (torch.randn(1, 3, 64, 64),), ["x"], {"x": {0: "b", 2: "h", 3: "w"}}, p),
                 [image(1, 64, 64), image(2, 96, 128), image(1, 32, 160)]),
    "paddle": (lambda p: onnx.save(paddle_style(), str(p)) or str(p),
               [image(1, 48, 192), image(3, 32, 100), image(1, 48, 320)]),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    make, feeds = CASES[request.param]
    path = make(tmp_path_factory.mktemp("models") / f"{request.param}.onnx")
    return request.param, path, feeds


def test_every_node_runs_natively_at_every_size_equal_to_onnx_runtime(case):
    name, path, feeds = case
    model = autofusion.compile(path, backend="native")
    assert all(p.target == "native" for p in model.plan.partitions), str(model.plan)
    (part,) = model.program.native.values()
    assert part.symbols, "the partition's sizes are symbolic"
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for feed in feeds:
        want = session.run(None, feed)[0]
        got = model.run(feed)["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {feed['x'].shape}")
    assert len(part.built) == len(feeds)


def test_a_new_size_compiles_nothing(case, monkeypatch):
    name, path, feeds = case
    model = autofusion.compile(path, backend="native")
    model.run(feeds[0])

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"a C++ compiler ran at a new size: {args}")
    monkeypatch.setattr(build.subprocess, "run", no_compiler)
    for feed in feeds[1:]:
        model.run(feed)


def test_the_plan_says_the_sizes_it_was_last_set_up_for():
    model = autofusion.compile(paddle_style(), backend="native")
    assert "float[x_dim0,8,(x_dim2 + 1) // 2,(x_dim3 + 1) // 2]" in str(model.plan)
    model.run(image(2, 20, 30))
    assert "last set up for x_dim0=2, x_dim2=20, x_dim3=30" in str(model.plan)


def test_two_question_mark_dims_are_not_one_size():
    """paddle2onnx's '?' means any size, each its own: a 48x192 image is a valid input."""
    model = autofusion.compile(paddle_style(), backend="native")
    assert model.graph.inputs[0].shape == ("x_dim0", 3, "x_dim2", "x_dim3")
    model.run(image(1, 48, 192))


def test_the_size_cache_keeps_the_most_recent_sets(tmp_path):
    path = CASES["detector"][0](tmp_path / "detector.onnx")
    model = autofusion.compile(path, backend="native", size_cache=2)
    (part,) = model.program.native.values()
    sizes = [(1, 32, 32), (1, 64, 64), (2, 32, 32), (1, 64, 64)]
    for n, h, w in sizes:
        model.run(image(n, h, w))
    assert list(part.built) == [(2, 32, 32), (1, 64, 64)]   # (1, 32, 32) evicted, (1, 64, 64) used last
    model.run(image(1, 32, 32))   # set up again, as good as new
    assert list(part.built) == [(1, 64, 64), (1, 32, 32)]
    with pytest.raises(autofusion.AutofusionError, match="size_cache=0"):
        autofusion.compile(path, backend="native", size_cache=0)


def test_every_set_of_sizes_runs_in_one_arena_that_grows(tmp_path, monkeypatch):
    """A partition's builds in one execution context share one arena, as large as the largest: a
    larger size moves it, and a build set up before finds it where it is now (equal to ONNX
    Runtime at each size, twice). Every build here is one for any size (a long call would give
    a size its own code at its second call, whose arena is not comparable: a busy host did)."""
    monkeypatch.setattr(library, "LONG_CALL", float("inf"))
    path = CASES["cnn"][0](tmp_path / "cnn.onnx")
    model = autofusion.compile(path, backend="native")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (part,) = model.program.native.values()
    for n, h, w in [(1, 32, 32), (2, 96, 64), (1, 32, 32), (1, 48, 40), (2, 96, 64)]:
        feeds = image(n, h, w)
        (want,) = session.run(None, feeds)
        np.testing.assert_allclose(model.run(feeds)[session.get_outputs()[0].name], want, rtol=1e-4, atol=1e-5)
    assert len(part.arenas) == 1   # one caller: one context
    arenas = {key: next(iter(builds.values())).arena_bytes for key, builds in part.built.items()}
    assert arenas[(2, 96, 64)] > arenas[(1, 32, 32)]


@pytest.mark.parametrize("streams", [1, 4])
@pytest.mark.parametrize("specialise_at", [1, 1000], ids=["own code", "for any size"])
def test_calls_from_threads_with_other_sizes_give_the_single_threaded_answers(tmp_path, streams, specialise_at,
                                                                              monkeypatch):
    """One call at a time (streams=1) or four at once, each in an execution context of its own
    with its own builds of each set of sizes: the answers of calls made one by one (builds of
    one kind: one for any size and one for the sizes' own differ in the last bits)."""
    from concurrent.futures import ThreadPoolExecutor
    monkeypatch.setattr(library, "SPECIALISE_AT", specialise_at)
    path = CASES["cnn"][0](tmp_path / "cnn.onnx")
    model = autofusion.compile(path, backend="native", streams=streams)
    sizes = [(1, 32, 32), (2, 64, 48), (1, 80, 40), (1, 32, 48)] * 3
    feeds = [image(*s) for s in sizes]
    want = [model.run(f) for f in feeds]   # one at a time
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(model.run, feeds))
    for g, w in zip(got, want):
        for k in w:
            np.testing.assert_array_equal(g[k], w[k])
    (part,) = model.program.native.values()
    assert 1 <= len(part.arenas) <= streams   # a context per call running at once, no more


def test_a_call_takes_a_context_no_other_call_holds(tmp_path):
    """With one context held (as by a call running on another thread), a call sets up a second,
    with its own arena, and gives its answer; the context it took is free again after."""
    path = CASES["cnn"][0](tmp_path / "cnn.onnx")
    model = autofusion.compile(path, backend="native", streams=2)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (part,) = model.program.native.values()
    feeds = image(1, 32, 32)
    threads = torch.get_num_threads()   # the count the call runs on: its contexts' pool
    held = part.take(threads)
    try:
        (want,) = session.run(None, feeds)
        np.testing.assert_allclose(model.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    finally:
        part.give_back(held, threads)
    (used,) = part.built[(1, 32, 32)]   # the one context the call ran in
    assert used != held and sorted(part._idle[threads]) == sorted([held, used])


def test_an_empty_batch_runs_on_pytorch_kernels(tmp_path):
    path = CASES["cnn"][0](tmp_path / "cnn.onnx")
    model = autofusion.compile(path, backend="native")
    feed = image(0, 32, 32)
    assert model.run(feed)["y"].shape == (0, 10)
    (part,) = model.program.native.values()
    assert not part.built   # never set up for a batch of 0


def test_a_size_only_the_run_knows_is_read_off_the_next_partitions_input():
    """NonZero's count ends a partition (its sizes are data): the product and activations after
    the Gather it drives are a partition of their own, set up for the count each call finds, as
    many rows as the call picked."""
    weight = RNG.standard_normal((8, 16)).astype(np.float32)
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], axes=[1], keepdims=0),
             helper.make_node("Greater", ["m", "half"], ["picked_rows"]),
             helper.make_node("NonZero", ["picked_rows"], ["idx"]),
             helper.make_node("Squeeze", ["idx", "axis0"], ["rows"]),
             helper.make_node("Gather", ["x", "rows"], ["picked"], axis=0),
             helper.make_node("MatMul", ["picked", "w"], ["mm"]),
             helper.make_node("Relu", ["mm"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    g = helper.make_graph(nodes, "picked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array(0.5, np.float32), "half"),
                           numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model = autofusion.compile(m, backend="native")
    [last] = [p for p in model.plan.partitions if p.target == "native" and
              any(n.op_type == "Sigmoid" for n in p.nodes)]
    assert [n.op_type for n in last.nodes] == ["FusedMatMul", "Sigmoid"]
    part = model.program.native[last.index]
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    counts = set()
    for n in (5, 9, 30):
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)
        counts.add(want.shape[0])
    assert {key[0] for key in part.built} == counts


def picked_rows_model():
    weight = RNG.standard_normal((8, 16)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["rx"]),
             helper.make_node("ReduceMax", ["rx"], ["m"], axes=[1], keepdims=0),
             helper.make_node("Greater", ["m", "half"], ["picked_rows"]),
             helper.make_node("NonZero", ["picked_rows"], ["idx"]),
             helper.make_node("Squeeze", ["idx", "axis0"], ["rows"]),
             helper.make_node("Gather", ["rx", "rows"], ["picked"], axis=0),
             helper.make_node("MatMul", ["picked", "w"], ["mm"]),
             helper.make_node("Sigmoid", ["mm"], ["y"])]
    g = helper.make_graph(nodes, "picked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array(0.5, np.float32), "half"),
                           numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_a_count_of_0_runs_that_partition_alone_on_pytorch():
    """No row picked: the partition after the NonZero cannot be set up (oneDNN takes no empty
    tensor), so its nodes run on PyTorch for that call; the rest of the call stays native (the
    model's all-PyTorch program is never made)."""
    m = picked_rows_model()
    model = autofusion.compile(m, backend="native")
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in (-np.abs(RNG.standard_normal((6, 8))), RNG.standard_normal((6, 8)), np.zeros((3, 8))):
        x = x.astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = model(x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert model.program.exact is None


def test_a_size_a_pytorch_step_makes_is_handed_to_the_partitions_after_it():
    """A Resize to sizes an input gives makes dims ONNX names unk__N; the convolution after a
    PyTorch step sees them only through floor arithmetic (no input of its partition has them as
    dims), yet runs natively: the call reads them off the Resize's result and hands them on."""
    rng = np.random.default_rng(7)
    w1, w2 = (rng.standard_normal((4, 4, 3, 3)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Concat", ["lead", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="nearest"),
             helper.make_node("Conv", ["r", "w1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("CumSum", ["c1", "axis1"], ["s"]),
             helper.make_node("Conv", ["s", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"])]
    g = helper.make_graph(nodes, "resized",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
                           helper.make_tensor_value_info("hw", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(np.array([1, 4], np.int64), "lead"),
                           numpy_helper.from_array(np.array(1, np.int64), "axis1")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model = autofusion.compile(m, backend="native")
    (last,) = [n for n in model.plan.decisions if n.outputs[0].name == "y"]   # the conv and its ReLU
    assert model.plan.decisions[last].impl.target == "native", model.plan
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    for hw in ((10, 12), (7, 9), (10, 12)):
        feeds = {"x": x, "hw": np.array(hw, np.int64)}
        np.testing.assert_allclose(model.run(feeds)["y"], session.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_a_first_call_runs_steps_made_for_any_size_and_a_recurring_size_its_own(case, monkeypatch):
    """A set of sizes' first calls run a build whose products take their rows at run time (no
    code made for the sizes); its call number SPECIALISE_AT a build made for them. Both equal
    to ONNX Runtime."""
    monkeypatch.setattr(library, "LONG_CALL", float("inf"))
    name, path, feeds = case
    model = autofusion.compile(path, backend="native")
    (part,) = model.program.native.values()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for feed in feeds:
        want = session.run(None, feed)[0]
        for call in range(1, library.SPECIALISE_AT + 1):
            np.testing.assert_allclose(model.run(feed)["y"], want, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} at {feed['x'].shape}, call {call}")
            assert part.last.any_size == (call < library.SPECIALISE_AT)
            if call == 1:
                any_size_kernels = part.last.kernels
        assert part.last.kernels != any_size_kernels, "the build for the sizes' own is another"
    assert any("gemm:jit" in k or "in tiles of" in k for k in any_size_kernels), any_size_kernels
    if name in ("detector", "paddle"):   # plain convolutions only: each im2col and a product
        convs = [k for n, k in zip(part.node_list, any_size_kernels) if n.op == "autofusion::FusedConv" or n.op == "Conv"]
        assert convs and all(("im2col" in k or "gemm:jit" in k) and "conv" not in k for k in convs), convs


def test_sizes_whose_call_for_any_size_was_long_get_their_own_code_at_their_second_call(tmp_path, monkeypatch):
    path = CASES["cnn"][0](tmp_path / "cnn.onnx")
    model = autofusion.compile(path, backend="native")
    (part,) = model.program.native.values()
    feed = image(1, 40, 40)
    monkeypatch.setattr(library, "LONG_CALL", float("inf"))
    model.run(feed)
    model.run(feed)
    assert part.last.any_size and part.calls[(1, 40, 40)] == 2   # short calls: their own at the third
    monkeypatch.setattr(library, "LONG_CALL", 0.0)
    other = image(1, 48, 40)
    model.run(other)
    assert part.last.any_size
    model.run(other)
    assert not part.last.any_size   # a long call: its own at the second


@pytest.mark.parametrize("kernel, stride, pads, channels", [
    ((3, 3), (1, 1), (1, 1, 1, 1), (4, 8)),
    ((3, 3), (2, 1), (1, 1, 1, 1), (3, 16)),
    ((5, 3), (2, 2), (2, 0, 1, 2), (8, 5)),    # asymmetric pads, a kernel wider than its stride
    ((1, 1), (1, 1), (0, 0, 0, 0), (16, 24)),  # the pixels' own product
    ((1, 1), (2, 2), (0, 0, 0, 0), (8, 8)),
])
def test_a_convolution_for_any_size_is_products_of_patches_equal_to_onnx_runtime(tmp_path, kernel, stride, pads,
                                                                                    channels):
    cin, cout = channels
    w = numpy_helper.from_array(RNG.standard_normal((cout, cin, *kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(cout).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(kernel), strides=list(stride),
                              pads=list(pads)),
             helper.make_node("HardSwish", ["c"], ["y"])]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cin, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    path = str(tmp_path / "conv.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = autofusion.compile(path, backend="native")
    (part,) = model.program.native.values()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    pixels = kernel == (1, 1) and stride == (1, 1)
    for n, h, wd in [(1, 9, 13), (2, 16, 7), (1, 5, 40), (2, 40, 41)]:   # one tile, several, a last of fewer rows
        feed = {"x": RNG.standard_normal((n, cin, h, wd)).astype(np.float32)}
        np.testing.assert_allclose(model.run(feed)["y"], session.run(None, feed)[0], rtol=1e-4, atol=1e-4)
        (kernels,) = part.last.kernels
        assert part.last.any_size and "conv" not in kernels, kernels
        assert ("gemm:jit" in kernels) if pixels else ("im2col" in kernels and "in tiles of" in kernels), kernels


NEW_SIZES = """
import sys, numpy as np, autofusion
model = autofusion.compile(sys.argv[1], backend="native")
rng = np.random.default_rng(0)
model.run({"x": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)})
print("-- new sizes --", flush=True)
for h, w in ((64, 96), (96, 160), (32, 224)):
    model.run({"x": rng.standard_normal((1, 3, h, w)).astype(np.float32)})
"""


def test_a_new_size_makes_no_code_for_its_convolutions_and_products(tmp_path):
    """oneDNN says what it creates (ONEDNN_VERBOSE): after a first size, new sizes find every
    convolution's and product's primitive made (the primitive cache), so none is generated."""
    path = CASES["detector"][0](tmp_path / "detector.onnx")
    env = {**os.environ, "ONEDNN_VERBOSE": "profile_create"}
    out = subprocess.run([sys.executable, "-c", NEW_SIZES, path], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = out.stdout.split("-- new sizes --")
    assert "create:cache_miss" in before and ",matmul," in before   # the first size made them
    made = [line for line in after.splitlines() if "create:cache_miss" in line and
            (",convolution," in line or ",matmul," in line)]
    assert not made, "\n".join(made)


def test_the_size_check_probes_nodes_alike_once_and_still_refuses_sizes_that_do_not_fit():
    """Layers alike (the same op and shapes, weights of more than SMALL_CONSTANT values) are one
    probe; a call whose sizes contradict the graph is still an error naming a node."""
    from autofusion.backend import sizes
    ws = [numpy_helper.from_array(RNG.standard_normal((16, 16)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes, last = [], "x"
    for i in range(3):   # the first reads [n, k], the other two [n, 16]: those two alike
        nodes += [helper.make_node("MatMul", [last, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        last = f"r{i}"
    g = helper.make_graph(nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"])],
                          [helper.make_tensor_value_info("r2", TensorProto.FLOAT, None)], ws)
    onnx_model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model = autofusion.compile(onnx_model, backend="native")
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": x})["r2"], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    check = model._check_sizes
    assert len(check.nodes) == 3 and len(check._probes) == 2
    assert sizes.SMALL_CONSTANT < 16 * 16
    with pytest.raises(autofusion.AutofusionError, match="do not fit"):
        model.run({"x": RNG.standard_normal((3, 8)).astype(np.float32)})


def test_a_squeeze_of_a_symbolic_dim_is_a_view_and_a_size_other_than_1_is_named():
    """Squeeze(x, axes=[1]) of x [n, k, 4]: native with k symbolic (the output is the input's
    other dims: a view), equal to ONNX Runtime where k is 1; k = 3 is the InputError ONNX's
    Squeeze makes it, naming the node, never bytes read past the input."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Squeeze", ["r", "axes"], ["s"], name="squeeze"),
         helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    compiled = autofusion.compile(model, level=0, backend="native")
    assert all(p.target == "native" for p in compiled.plan.partitions), compiled.plan
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 5):
        x = RNG.standard_normal((n, 1, 4)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
    with pytest.raises(autofusion.InputError, match="squeeze.*axis 1 has size 3, not 1"):
        compiled(RNG.standard_normal((2, 3, 4)).astype(np.float32))
