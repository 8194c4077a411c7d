"""Bad files and hostile inputs: never a crash, a hang or a stack trace from deep inside.

The seed corpus (fuzz_corpus/, written by its make_corpus.py) is mutated by hypothesis, over
the protobuf fields (dimensions, element types, initializer data, attribute values and types,
node inputs and outputs, op types, domains, opsets, graph inputs and outputs, node order) and
over the bytes (truncated, bit-flipped, overwritten, inserted, deleted). Each case runs in a
worker process (fuzz_cases.py) so that a native crash or a hang fails the case instead of the
test run: it must end in an AutofusionError that names the file, a node, an input or an
output, or compile and give ONNX Runtime's outputs (within 1e-4 of their largest magnitude)
wherever ONNX Runtime runs the model too.

Valid models get hostile inputs in this process: NaN and infinities, empty symbolic dims, a
view that would need terabytes, wrong dtypes, non-contiguous and zero-stride tensors, read-only
arrays.

CI runs a fixed, derandomized set of cases; a longer fuzz raises the count and draws new cases:

    AUTOFUSION_FUZZ_EXAMPLES=2000 AUTOFUSION_FUZZ_RANDOM=1 python -m pytest tests/frontend/test_fuzz.py
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

import autofusion
from autofusion import AutofusionError, InputError, ModelLoadError

from . import fuzz_cases
from .fuzz_cases import FIELD_MUTATIONS, FLOATS, INTS

ROOT = Path(__file__).parents[2]
CORPUS = sorted((Path(__file__).parent / "fuzz_corpus").glob("*.onnx"))
EXAMPLES = int(os.environ.get("AUTOFUSION_FUZZ_EXAMPLES", "0"))
CASE_SECONDS = 60       # a case running longer hangs (a first native build takes ~5 s)
START_SECONDS = 120     # the worker importing torch, ONNX Runtime and autofusion


def fuzz_settings(examples: int):
    return settings(max_examples=EXAMPLES or examples, deadline=None, database=None,
                    derandomize=not os.environ.get("AUTOFUSION_FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---- the worker process --------------------------------------------------------------------

class Worker:
    """fuzz_cases.serve in a process of its own, restarted after it dies or hangs."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()   # noqa: SIM115 - the worker's stderr, while it lives
        self.buffer = b""
        self.dir = Path(tempfile.mkdtemp(prefix="autofusion-fuzz-"))

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.frontend.fuzz_cases"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.buffer = b""
        assert "ready" in self._message(time.monotonic() + START_SECONDS), "the fuzz worker did not start"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def _message(self, deadline: float) -> dict:
        """The next JSON line from the worker; {"died": rc} or {"hung": True} instead."""
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return {"hung": True}
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return {"died": self.proc.wait()}
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def check(self, data: bytes, name: str, timeout: float = CASE_SECONDS, **hooks) -> str:
        """One case's verdict (fuzz_cases.check), or why the process gave none."""
        if self.proc is None:
            self.start()
        case = {"data": base64.b64encode(data).decode(), "path": str(self.dir / name), **hooks}
        self.proc.stdin.write(json.dumps(case).encode() + b"\n")
        self.proc.stdin.flush()
        stage, deadline = "reading the case", time.monotonic() + timeout
        while True:
            msg = self._message(deadline)
            if "stage" in msg:
                stage = msg["stage"]
            elif "verdict" in msg:
                return msg["verdict"]
            else:
                break
        self.stop()
        if "hung" in msg:
            return f"bug: hung for over {timeout:.0f} s in {stage}"
        rc = msg["died"]
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        self.log.seek(0)
        tail = self.log.read()[-2000:].decode(errors="replace")
        self.log.seek(0)
        self.log.truncate()
        if stage == "ONNX Runtime":
            return f"ok: ONNX Runtime itself died ({how})"
        return f"bug: the process died ({how}) in {stage}\n{tail}"


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.stop()
    w.log.close()
    shutil.rmtree(w.dir, ignore_errors=True)


def assert_ok(verdict: str, what) -> None:
    """A case's verdict is ok; its kind counts in --hypothesis-show-statistics."""
    event(verdict.split("\n")[0].split(":")[1].split(";")[0].split(" (")[0].strip())
    assert verdict.startswith("ok"), f"{what}:\n{verdict}"


# ---- the corpus and the worker themselves ---------------------------------------------------

@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_seed_gives_onnx_runtimes_answer(worker, path):
    assert path.stat().st_size < 8192
    assert worker.check(path.read_bytes(), path.name) == "ok: same as ONNX Runtime"


def test_a_crash_or_a_hang_in_the_worker_fails_the_case(worker):
    data = CORPUS[0].read_bytes()
    died = worker.check(data, "abort.onnx", abort_in="autofusion.compile")
    assert died.startswith("bug: the process died (signal SIGABRT) in autofusion.compile"), died
    hung = worker.check(data, "hang.onnx", timeout=2, sleep_in="autofusion.compile")
    assert hung.startswith("bug: hung for over 2 s in autofusion.compile"), hung


def test_a_batch_norm_of_negative_variance_is_run_but_not_compared(worker):
    """var + epsilon < 0: NaN from the start, kept or dropped by the ReLU after it depending on
    the runtime (a known difference, fuzz_cases._negative_variance)."""
    model = onnx.load(Path(__file__).parent / "fuzz_corpus" / "conv_bn_pool.onnx")
    [bn] = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    [eps] = [a for a in bn.attribute if a.name == "epsilon"]
    eps.f = -1.5
    verdict = worker.check(model.SerializeToString(), "negative_variance.onnx")
    assert verdict.startswith("ok: ran, as ONNX Runtime did") and "not compared" in verdict, verdict


# ---- mutated files ---------------------------------------------------------------------------

mutation = st.tuples(st.sampled_from(sorted(FIELD_MUTATIONS)), st.integers(0, 999),
                     st.sampled_from(INTS), st.sampled_from(FLOATS))


@fuzz_settings(1000)
@given(seed=st.sampled_from(CORPUS), mutations=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_fields_give_a_clear_error_or_onnx_runtimes_answer(worker, seed, mutations):
    model = onnx.load(seed)
    done = fuzz_cases.mutate(model, mutations)
    assert_ok(worker.check(model.SerializeToString(), seed.name), f"{seed.name}: {done}")


edit = st.tuples(st.sampled_from(["truncate", "flip", "overwrite", "insert", "delete"]),
                 st.integers(0, 1 << 20), st.integers(0, 255))


@fuzz_settings(300)
@given(seed=st.sampled_from(CORPUS), edits=st.lists(edit, min_size=1, max_size=4))
def test_damaged_bytes_give_a_clear_error_or_onnx_runtimes_answer(worker, seed, edits):
    data, done = fuzz_cases.mutate_bytes(seed.read_bytes(), edits)
    assert_ok(worker.check(data, seed.name), f"{seed.name}: {done}")


# ---- hostile inputs to valid models -----------------------------------------------------------

def _seed(name: str) -> Path:
    return next(p for p in CORPUS if p.stem == name)


@pytest.fixture(scope="module")
def models():
    return {p.stem: autofusion.compile(p) for p in CORPUS if p.stem in
            ("mlp_gelu", "conv_bn_pool", "attention", "elementwise")}


def _onnx_runtime(name: str, feeds: dict) -> dict:
    session = ort.InferenceSession(str(_seed(name)), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def _same_as_onnx_runtime(model, name: str, feeds: dict) -> None:
    got = model.run(feeds)
    for k, want in _onnx_runtime(name, {k: np.asarray(v) for k, v in feeds.items()}).items():
        diff = fuzz_cases.differs(np.asarray(got[k]), want)
        assert diff is None, f"{name} output {k!r}: {diff}"


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name,shape", [("mlp_gelu", (2, 8)), ("conv_bn_pool", (1, 3, 8, 8)),
                                        ("attention", (1, 3, 8)), ("elementwise", (2, 3, 4))])
def test_nan_and_infinity_give_onnx_runtimes_answer(models, name, shape, value):
    """Where oneDNN's ReLU or Clip would turn NaN into 0 (conv_bn_pool; an infinity reaches the
    ReLU as NaN too, inf - inf in the convolution), the call runs on PyTorch kernels."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::3] = value
    _same_as_onnx_runtime(models[name], name, {"x": x})


@pytest.mark.parametrize("name,shape", [("mlp_gelu", (0, 8)), ("conv_bn_pool", (0, 3, 8, 8)),
                                        ("attention", (1, 0, 8))])
def test_an_empty_symbolic_dim_gives_an_empty_answer(models, name, shape):
    _same_as_onnx_runtime(models[name], name, {"x": np.zeros(shape, np.float32)})


def test_a_view_needing_terabytes_is_an_input_error_not_an_allocation(models):
    huge = torch.zeros(1, 8).expand(1 << 40, 8)   # 32 bytes of storage, 32 TiB as a dense array
    with pytest.raises(InputError, match=r"input 'x'.*TiB"):
        models["mlp_gelu"](huge)
    with pytest.raises(InputError, match=r"input 'x'.*TiB"):
        models["mlp_gelu"](np.broadcast_to(np.zeros((1, 8), np.float32), (1 << 40, 8)))


@pytest.mark.parametrize("bad,match", [
    (np.zeros((2, 8), np.float64), "expected dtype float, got float64"),
    (np.zeros((2, 8), np.int64), "expected dtype float, got int64"),
    (np.zeros((2, 8), np.bool_), "expected dtype float, got bool"),
    (np.zeros((2, 7), np.float32), "dimension 1 must be 8"),
    (np.zeros((8,), np.float32), "expected rank 2"),
    (np.array([["a"] * 8] * 2), "string"),
])
def test_wrong_dtypes_and_shapes_are_input_errors(models, bad, match):
    with pytest.raises(InputError, match=rf"input 'x'.*{match}"):
        models["mlp_gelu"](bad)


SHAPES = {"mlp_gelu": (2, 8), "elementwise": (2, 3, 4), "conv_bn_pool": (1, 3, 8, 8),
          "attention": (1, 3, 8)}


def _strided(kind: str, shape: tuple):
    """An input of this shape whose memory is not laid out densely."""
    def randn(*dims):
        return torch.from_numpy(np.random.default_rng(1).standard_normal(dims).astype(np.float32))
    rank = len(shape)
    if kind == "transposed":
        return randn(*shape[::-1]).permute(*range(rank - 1, -1, -1))
    if kind == "every other row":
        return randn(2 * shape[0], *shape[1:])[::2]
    if kind == "a slice of the last axis":
        return randn(*shape[:-1], shape[-1] + 4)[..., 2:2 + shape[-1]]
    if kind == "zero-stride rows":
        return randn(1, *shape[1:]).expand(*shape)
    if kind == "zero-stride everything":
        return torch.tensor(0.5).expand(*shape)
    return randn(*shape).numpy()[..., ::-1]   # a numpy array with a negative stride


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("kind", ["transposed", "every other row", "a slice of the last axis",
                                  "zero-stride rows", "zero-stride everything", "negative-stride numpy"])
def test_non_contiguous_and_zero_stride_inputs_give_the_dense_answer(models, name, kind):
    x = _strided(kind, SHAPES[name])
    got = models[name](x)
    want = _onnx_runtime(name, {"x": np.ascontiguousarray(np.asarray(x))})
    assert fuzz_cases.differs(np.asarray(got[0] if isinstance(got, tuple) else got),
                               next(iter(want.values()))) is None


def test_a_read_only_array_is_read_not_written(models):
    for name, shape in [("mlp_gelu", (2, 8)), ("elementwise", (2, 3, 4))]:
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        x.setflags(write=False)
        before = x.copy()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _same_as_onnx_runtime(models[name], name, {"x": x})
        assert not [w for w in seen if "not writable" in str(w.message)]
        np.testing.assert_array_equal(x, before)


# ---- what the fuzzer found, one test each -----------------------------------------------------

def _seed_model(name: str) -> onnx.ModelProto:
    return onnx.load(_seed(name))


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def _init(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def _attr(model: onnx.ModelProto, node: str, name: str) -> onnx.AttributeProto:
    return next(a for a in _node(model, node).attribute if a.name == name)


def _refused(model: onnx.ModelProto, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match):
        autofusion.load(model)


def _cut_raw_data(m):
    _init(m, "W2").raw_data = _init(m, "W2").raw_data[:10]


def _unknown_data_type(m):
    _init(m, "b1").data_type = 29


def _negative_dim(m):
    _init(m, "b1").dims[0] = -1


def _unknown_elem_type(m):
    m.graph.input[0].type.tensor_type.elem_type = 29


@pytest.mark.parametrize("damage,match", [
    (_cut_raw_data, r"initializer 'W2': its data does not fit its type float and dimensions \[16, 4\]"),
    (_unknown_data_type, r"initializer 'b1' has element type 29"),
    (_negative_dim, r"initializer 'b1' has a negative dimension"),
    (_unknown_elem_type, r"value 'x' has element type 29"),
])
def test_a_tensor_whose_type_dims_and_data_disagree_is_named(damage, match):
    m = _seed_model("mlp_gelu")
    damage(m)
    _refused(m, match)


def test_attributes_of_the_wrong_type_unknown_or_missing_are_refused_as_onnx_runtime_does():
    m = _seed_model("mlp_gelu")
    _attr(m, "ln", "axis").type = onnx.AttributeProto.INTS
    _refused(m, r"node 'ln' \(LayerNormalization\): .*attribute axis")
    m = _seed_model("mlp_gelu")
    _attr(m, "ln", "axis").type = onnx.AttributeProto.TYPE_PROTO
    _refused(m, r"node 'ln'")
    m = _seed_model("conv_bn_pool")
    _node(m, "relu").attribute.append(onnx.helper.make_attribute("bogus", 1))
    _refused(m, r"node 'relu' \(Relu\): Unrecognized attribute: bogus")
    m = _seed_model("conv_bn_pool")
    _node(m, "relu").input.append("x")
    _refused(m, r"node 'relu' \(Relu\): .*input size 2 not in range")


def test_flags_and_modes_take_only_their_values():
    m = _seed_model("int_ops")
    _attr(m, "max", "keepdims").i = 64   # ONNX Runtime reads it as 0 here, as 1 elsewhere
    _refused(m, r"node 'max' \(ReduceMax\): attribute 'keepdims' is a flag, 0 or 1, not 64")
    m = _seed_model("image_ops")
    _attr(m, "pad", "mode").s = b"bogus"   # a kernel would take it for its default
    _refused(m, r"node 'pad' \(Pad\): attribute 'mode' is one of \['constant', 'edge', 'reflect', 'wrap'\]")
    m = _seed_model("image_ops")
    _attr(m, "pad", "mode").s = b"\xff\xfe"
    _refused(m, r"node 'pad'")


def test_inputs_of_types_the_schema_does_not_allow_are_refused():
    m = _seed_model("mlp_gelu")
    w2 = _init(m, "W2")
    w2.data_type, w2.raw_data = TensorProto.INT32, np.zeros((16, 4), np.int32).tobytes()
    _refused(m, r"node 'fc2' \(MatMul\): inputs 'gelu' \(float\) and 'W2' \(int32\) must have one type \(T\)")
    m = _seed_model("int_ops")
    axis = _init(m, "axis0")
    axis.data_type, axis.raw_data = TensorProto.COMPLEX64, np.zeros((), np.complex64).tobytes()
    _refused(m, r"node 'cumsum' \(CumSum\): input 1 'axis0' is complex64, which its 'axis' \(T2\) does not take")


def test_what_onnx_inference_lets_through_the_shape_rules_refuse():
    m = _seed_model("mlp_gelu")
    _attr(m, "ln", "axis").i = 5
    _refused(m, r"node 'ln' \(LayerNormalization\): axis 5 is out of range for rank 2")
    m = _seed_model("mlp_gelu")
    _init(m, "gamma").dims.append(1)   # [4, 1]: would broadcast the output to [batch, 4, 4]
    _refused(m, r"node 'ln' \(LayerNormalization\): LayerNormalization scale or bias float\[4,1\]")
    m = _seed_model("shape_ops")
    del _init(m, "starts").dims[:]     # a scalar: the native slice read it as a list
    _refused(m, r"node 'slice' \(Slice\): Slice starts, ends, axes and steps must be 1-D")


def test_a_name_that_is_not_utf8_is_refused_with_its_place(tmp_path):
    m = _seed_model("mlp_gelu")
    _node(m, "fc1").input[0] = "Q"
    data = m.SerializeToString().replace(b"\n\x01Q", b"\n\x01\xff")
    path = tmp_path / "bad_name.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError, match=r"bad_name.onnx: graph.node\[0\].input\[0\] is not UTF-8"):
        autofusion.load(path)


def test_initializers_are_constants_whatever_the_ir_version():
    # before IR 4 ONNX's inference took initializers for inputs and sized the Slice wrongly
    m = _seed_model("shape_ops")
    m.ir_version = 3
    x = np.random.default_rng(3).standard_normal((2, 2, 6)).astype(np.float32)
    got = autofusion.compile(m)(x)[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert fuzz_cases.differs(got, want) is None


def test_a_long_1d_input_is_not_propagated_element_by_element():
    m = _seed_model("int_ops")   # ONNX's data propagation took 9 s and 5 GB at 2^26, bad_alloc at 2^62
    for vi in [*m.graph.input, *m.graph.output[:2]]:
        vi.type.tensor_type.shape.dim[0].dim_value = 1 << 26
    start = time.monotonic()
    graph = autofusion.load(m)
    assert time.monotonic() - start < 5
    assert graph.inputs[0].shape == (1 << 26,) and graph.outputs[0].shape == (1 << 26,)


def test_a_huge_static_batch_compiles_without_a_native_crash(worker):
    m = _seed_model("conv_bn_pool")   # 2^62 images: oneDNN's sizes overflowed (SIGFPE)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1 << 62
    verdict = worker.check(m.SerializeToString(), "huge_batch.onnx")
    assert verdict.startswith("ok: compiled"), verdict


def test_a_static_batch_of_2_31_is_refused_by_name_or_compiles(worker):
    m = _seed_model("mlp_gelu")   # the native partition failed to build naming no node
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2**31 - 1
    verdict = worker.check(m.SerializeToString(), "mlp_gelu_2_31.onnx")
    assert verdict.startswith("ok"), verdict


def test_a_kernel_failing_at_folding_is_left_to_fail_at_run_time_by_name():
    m = _seed_model("shape_ops")
    _node(m, "unsq").input[1] = "shp"   # unsqueeze at axes [B, S, 6]
    model = autofusion.compile(m)
    with pytest.raises(AutofusionError, match=r"'unsq'"):
        model(np.zeros((2, 2, 6), np.float32))


def test_a_library_refusing_a_kernel_is_a_kernel_build_error():
    m = _seed_model("image_ops")
    _attr(m, "gconv", "group").i = 3     # 3 groups of 2 channels: oneDNN refuses the weights
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.raises(AutofusionError, match=r"gconv"):   # at compile, or at the call (torch)
        autofusion.compile(m)(np.zeros((1, 2, 7, 7), np.float32))


def test_sizes_that_contradict_the_graph_are_an_input_error_before_native_code_reads_them():
    m = _seed_model("mlp_gelu")
    m.graph.input[0].type.tensor_type.shape.dim[1].Clear()   # x: [batch, ?] against W1 [8, 16]
    model = autofusion.compile(m)
    with pytest.raises(AutofusionError, match=r"'x'|x_dim1|fc1"):
        model(np.zeros((2, 2), np.float32))


def test_a_graph_output_nothing_computes_is_named_by_its_place():
    m = _seed_model("elementwise")
    m.graph.output[1].name = ""
    _refused(m, r"graph.output\[1\] \(''\) is never computed")


def test_a_graph_name_with_a_nul_byte_compiles():
    m = _seed_model("elementwise")
    m.graph.name = "ele\x00ment"   # the generated Python's file name carries it
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    _same_as_onnx_runtime(autofusion.compile(m), "elementwise", {"x": x})


def test_folding_neither_evaluates_a_huge_constant_nor_fails_on_a_kernel_error():
    from onnx import helper, numpy_helper

    from autofusion.frontend import import_onnx
    from autofusion.passes.cleanup import fold_constants
    shape = numpy_helper.from_array(np.array([1 << 16, 1 << 16], np.int64), "shape")   # 16 GiB
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="big"),
             helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])
    graph = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))

    evaluated = []

    def refuse(node, arrays):
        evaluated.append(node.name)
        raise RuntimeError("a kernel refusing its inputs")
    assert fold_constants(graph, refuse) == 0 and evaluated == []   # 16 GiB not made to be dropped
    shape = numpy_helper.from_array(np.array([2], np.int64), "shape")
    g.initializer[0].CopyFrom(shape)
    graph = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert fold_constants(graph, refuse) == 0 and evaluated == ["big"]   # left as it is
    assert [n.name for n in graph.nodes] == ["big", "add"]
