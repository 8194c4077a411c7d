"""Many threads calling one compiled model at once, with inputs of different sizes and contents:
each gets exactly the answer a call made alone gives, on either backend (the suite runs twice),
in latency mode (one call at a time) and with two streams (two at once), for a model that is one
native partition (its calls queue in the runtime's streams) and for one with PyTorch steps (its
calls take turns in Python)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import autofusion

RNG = np.random.default_rng(0)


def conv_model(extra: list | None = None):
    """Conv, ReLU, global pool, a product: batch, height and width symbolic; `extra` nodes (from
    "y") after."""
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    fc = RNG.standard_normal((8, 5)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y" if not extra else "m"])] + (extra or [])
    g = helper.make_graph(nodes, "threads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc"),
                           numpy_helper.from_array(np.array(1, np.int64), "axis")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


MODELS = {"one partition": lambda: conv_model(),
          "with a PyTorch step": lambda: conv_model([helper.make_node("CumSum", ["m", "axis"], ["y"])])}


@pytest.mark.parametrize("streams", [1, 2])
@pytest.mark.parametrize("kind", list(MODELS))
def test_many_threads_get_the_answers_of_calls_made_alone(kind, streams):
    model = autofusion.compile(MODELS[kind](), streams=streams)
    if any(p.target == "native" for p in model.plan.partitions):   # the backend asked for is "auto"
        assert (model.program.whole is not None) == (kind == "one partition")
    sizes = [(1, 16, 16), (2, 24, 20), (1, 9, 31), (3, 16, 16)]
    feeds = [RNG.standard_normal((n, 3, h, w)).astype(np.float32) for n, h, w in sizes * 6]
    alone = [model(x) for x in feeds]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            together = list(pool.map(model, feeds))
            for got, want in zip(together, alone):
                np.testing.assert_array_equal(got, want)
    futures = [model.submit(x) for x in feeds]
    for f, want in zip(futures, alone):
        np.testing.assert_array_equal(f.result(timeout=120), want)
    model.close()


def test_models_with_the_same_streams_share_their_threads():
    """Two models of one process, each called from several threads: the same stream threads run
    both (one OpenMP pool per stream, not one per model), and every answer is the one alone."""
    one, other = autofusion.compile(conv_model()), autofusion.compile(conv_model())
    if one.program.whole is None:
        pytest.skip("the torch backend runs calls on the caller's thread")
    feeds = [torch.from_numpy(RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)) for _ in range(8)]
    alone = [(one(x), other(x)) for x in feeds]   # torch tensors: the one-call path, on the streams
    with ThreadPoolExecutor(4) as pool:
        both = list(pool.map(lambda x: (one(x), other(x)), feeds))
    for got, want in zip(both, alone):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert one._streams and one._streams.keys() == other._streams.keys()
    assert all(one._streams[t] is other._streams[t] for t in one._streams)
    streams = autofusion.compile(conv_model(), streams=2)
    streams(feeds[0])
    assert all(s is not one._streams.get(t) for t, s in streams._streams.items())   # another shape: its own
