"""If, Loop and Scan run as autofusion's own ops (torch kernels running each compiled body; torch
steps between native partitions on the native backend), their bodies cleaned and fused at the
node's level, and export back to ONNX control flow. Every result is checked against ONNX Runtime
running the original model (tolerance 1e-5 relative, 1e-5 absolute: float32 products reordered)."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend import native
from autofusion.errors import NodeExecutionError
from autofusion.ir import Graph, verify
from autofusion.ir.onnx_runtime_call import ORT_KEY

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
LEVELS_BACKENDS = [(level, backend) for level in (0, 2) for backend in ("auto", "torch")]


def vi(name, t=F, shape=None):
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def ort_run(m: onnx.ModelProto, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check(m: onnx.ModelProto, feed_sets, level, backend):
    """The compiled model gives ONNX Runtime's outputs (values and shapes) on every feed set,
    every graph verifies, and no control-flow node was left to ONNX Runtime."""
    compiled = autofusion.compile(m, level=level, backend=backend)
    for feeds in feed_sets:
        got = compiled.run(feeds)
        for o, want in zip(m.graph.output, ort_run(m, feeds)):
            assert got[o.name].shape == want.shape, o.name
            np.testing.assert_allclose(got[o.name], want, rtol=1e-5, atol=1e-5, err_msg=o.name)
    verify_all(compiled.graph)
    assert not any(n.op == ORT_KEY for n in compiled.graph.nodes)
    return compiled


def verify_all(graph: Graph) -> None:
    verify(graph)   # each body's too


def check_export(compiled, m: onnx.ModelProto, feed_sets):
    """The fused graph exports as ONNX control flow that ONNX Runtime runs with the same results,
    and reads back into autofusion."""
    exported = autofusion.export_onnx(compiled.graph)
    onnx.checker.check_model(exported)
    again = autofusion.compile(exported, level=0)
    for feeds in feed_sets:
        for want, got, back in zip(ort_run(m, feeds), ort_run(exported, feeds), again.run(feeds).values()):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(back, want, rtol=1e-5, atol=1e-5)
    return exported


# ---- a torch-exported model with If and Loop ---------------------------------------------

class IfLoop(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, n: int):
        if bool(x.sum() > 0):
            y = x * 2
        else:
            y = x - 1
        for _ in range(n):
            y = torch.relu(self.lin(y)) + x
        return y


@pytest.fixture(scope="module")
def torch_if_loop():
    f = io.BytesIO()
    torch.onnx.export(torch.jit.script(IfLoop().eval()), (torch.randn(2, 4), 3), f, dynamo=False,
                      opset_version=17, input_names=["x", "n"], output_names=["y"])
    return onnx.load_from_string(f.getvalue())


def if_loop_feeds():
    rng = np.random.default_rng(0)
    x = np.abs(rng.standard_normal((2, 4))).astype(np.float32)
    return [{"x": s * x, "n": np.array(n, np.int64)} for s in (1, -1) for n in (0, 1, 3)]


@pytest.mark.parametrize("level,backend", LEVELS_BACKENDS)
def test_a_torch_exported_if_and_loop_equal_onnx_runtime(torch_if_loop, level, backend):
    ops = {n.op_type for n in torch_if_loop.graph.node}
    assert {"If", "Loop"} <= ops
    compiled = check(torch_if_loop, if_loop_feeds(), level, backend)
    assert {"If", "Loop"} <= set(compiled.graph.op_histogram())
    if level == 2:   # the Linear+ReLU inside the loop body fused there
        loop, = [n for n in compiled.graph.nodes if n.op_type == "Loop"]
        assert "autofusion::FusedMatMul" in loop.attrs["body"].op_histogram()
        assert f"in Loop {loop.name!r} body" in compiled.report.text()


def test_the_torch_exported_model_exports_back_and_onnx_runtime_runs_it(torch_if_loop):
    compiled = autofusion.compile(torch_if_loop, level=2)
    exported = check_export(compiled, torch_if_loop, if_loop_feeds())
    loop, = [n for n in exported.graph.node if n.op_type == "Loop"]
    assert len(loop.input) == 3           # M, cond, v_initial: x is read by name again
    body = loop.attribute[0].g
    assert "x" in {i for n in body.node for i in n.input}
    assert any(n.domain == "autofusion" for n in body.node)   # the fused op, as a function call


# ---- a Loop with a fusable chain in its body -----------------------------------------------

def fusable_loop():
    """Loop(n): h = Relu(h @ W + b) + h; scan output Sigmoid(h)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("MatMul", ["h_in", "w"], ["mm"], name="matmul"),
         helper.make_node("Add", ["mm", "b"], ["biased"], name="add"),
         helper.make_node("Relu", ["biased"], ["act"], name="relu"),
         helper.make_node("Add", ["act", "h_in"], ["h_out"], name="residual"),
         helper.make_node("Sigmoid", ["h_out"], ["gate"], name="sigmoid")], "body",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("h_in", F, [2, 8])],
        [vi("cond_out", BOOL, []), vi("h_out", F, [2, 8]), vi("gate", F, [2, 8])])
    return model([helper.make_node("Loop", ["n", "", "x"], ["h", "gates"], name="loop", body=body)],
                 [vi("x", F, [2, 8]), vi("n", I64, [])], [vi("h"), vi("gates")], [w, b])


FUSABLE_FEEDS = [{"x": np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32),
                  "n": np.array(n, np.int64)} for n in (0, 1, 5)]


@pytest.mark.parametrize("level,backend", LEVELS_BACKENDS)
def test_fusion_fires_inside_a_loop_body_and_the_report_says_where(level, backend):
    compiled = check(fusable_loop(), FUSABLE_FEEDS, level, backend)
    body = compiled.graph.nodes[0].attrs["body"]
    report = compiled.report
    fired = {r.name: r.inside for r in report.rules if r.matched}
    if level == 0:
        assert body.op_histogram()["MatMul"] == 1 and not fired and not report.regions
        return
    assert "MatMul" not in body.op_histogram()
    assert body.op_histogram()["autofusion::FusedMatMul"] == 1   # MatMul+Add+Relu
    assert fired == {"MatMulBiasFusionOp": {"Loop 'loop' body": 1}, "MatMulReluFusionOp": {"Loop 'loop' body": 1}}
    assert "Matched: 1 time (1 in Loop 'loop' body)" in report.text()
    region, = report.regions   # the residual Add and the Sigmoid: one generated kernel
    assert region.ops == ["Add", "Sigmoid"] and region.where == "Loop 'loop' body"
    assert "(in Loop 'loop' body)" in report.text()
    assert report.to_json()["regions"][0]["where"] == "Loop 'loop' body"


def test_the_fused_loop_exports_with_its_fused_body_and_onnx_runtime_runs_it():
    m = fusable_loop()
    check_export(autofusion.compile(m, level=2), m, FUSABLE_FEEDS)


@pytest.mark.skipif(native.unavailable() is not None, reason="no native backend on this machine")
def test_on_the_native_backend_a_loop_is_a_torch_step_between_native_partitions():
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((2, 8)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")
    inner = fusable_loop()
    nodes = [helper.make_node("MatMul", ["x0", "w1"], ["m1"], name="mm1"),
             helper.make_node("Relu", ["m1"], ["x"], name="relu1"),
             *inner.graph.node,
             helper.make_node("MatMul", ["h", "w2"], ["m2"], name="mm2"),
             helper.make_node("Relu", ["m2"], ["y"], name="relu2")]
    m = model(nodes, [vi("x0", F, [2, 2]), vi("n", I64, [])], [vi("y"), vi("gates")],
              [w1, w2, *inner.graph.initializer])
    feeds = [{"x0": rng.standard_normal((2, 2)).astype(np.float32), "n": np.array(n, np.int64)} for n in (0, 3)]
    compiled = check(m, feeds, 2, "native")
    assert [(p.target, [n.op_type for n in p.nodes]) for p in compiled.plan.partitions] == [
        ("native", ["FusedMatMul"]), ("torch", ["Loop"]), ("native", ["FusedMatMul"])]
    assert "loop (Loop) via torch\n            not native: control flow: which branch runs" in str(compiled.plan)


# ---- a Loop whose trip count and condition are run-time inputs --------------------------------

def conditional_loop():
    """Loop(M, cond, acc): acc = acc * 1.5 + 1 while i < M and sum(acc) < limit; scan output acc."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    k = numpy_helper.from_array(np.array(1.5, np.float32), "k")
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "k"], ["scaled"]),
         helper.make_node("Add", ["scaled", "one"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["i_float"], to=F),
         helper.make_node("Mul", ["acc_out", "i_float"], ["trace"])], "body",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F, [3])],
        [vi("cond_out", BOOL, []), vi("acc_out", F, [3]), vi("trace", F, [3])])
    return model([helper.make_node("Loop", ["M", "go", "acc0"], ["acc", "traces"], name="loop", body=body)],
                 [vi("M", I64, []), vi("go", BOOL, []), vi("acc0", F, [3]), vi("limit", F, [])],
                 [vi("acc"), vi("traces")], [one, k])


@pytest.mark.parametrize("level,backend", LEVELS_BACKENDS)
def test_a_loop_with_run_time_trip_count_and_condition_equals_onnx_runtime(level, backend):
    acc0 = np.array([0.5, -1.0, 2.0], np.float32)
    feeds = [{"M": np.array(m, np.int64), "go": np.array(go), "acc0": acc0, "limit": np.array(limit, np.float32)}
             for m, go, limit in [(10, True, 40.0), (3, True, 1e9), (10, False, 40.0), (0, True, 40.0),
                                  (10, True, -5.0)]]
    compiled = check(conditional_loop(), feeds, level, backend)
    lengths = [compiled.run(f)["traces"].shape[0] for f in feeds]
    assert lengths[1] == 3 and lengths[2] == 0 and lengths[3] == 0 and lengths[4] == 1 and 3 < lengths[0] < 10


def test_a_loop_without_a_trip_count_runs_until_its_condition_fails():
    m = conditional_loop()
    loop = m.graph.node[0]
    loop.input[0] = ""
    feeds = [{"go": np.array(True), "acc0": np.array([0.5, -1.0, 2.0], np.float32), "limit": np.array(50.0, np.float32)}]
    del m.graph.input[0]
    check(m, feeds, 2, "torch")


# ---- Scan: both directions, other axes ---------------------------------------------------------

def scan_model():
    """A running sum over xa's rows forward and xb's columns backward; two scan outputs, one
    stacked on axis 1 forward, one on axis 0 in reverse."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a"], ["s1"]),
         helper.make_node("Mul", ["b", "w"], ["bw"]),
         helper.make_node("Add", ["s1", "bw"], ["s_out"]),
         helper.make_node("Tanh", ["s_out"], ["o1"]),
         helper.make_node("Sub", ["a", "b"], ["o2"])], "body",
        [vi("s_in", F, [4]), vi("a", F, [4]), vi("b", F, [4])], [vi("s_out", F, [4]), vi("o1", F, [4]), vi("o2", F, [4])])
    w = numpy_helper.from_array(np.linspace(-1, 1, 4).astype(np.float32), "w")
    return model([helper.make_node("Relu", ["xb0"], ["xb"], name="relu"),
                  helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "y1", "y2"], name="scan", body=body,
                                   num_scan_inputs=2, scan_input_axes=[0, 1], scan_input_directions=[0, 1],
                                   scan_output_axes=[1, 0], scan_output_directions=[0, 1])],
                 [vi("s0", F, [4]), vi("xa", F, [5, 4]), vi("xb0", F, [4, 5])], [vi("s"), vi("y1"), vi("y2")], [w])


def scan_feeds():
    rng = np.random.default_rng(4)
    return [{"s0": rng.standard_normal(4).astype(np.float32), "xa": rng.standard_normal((5, 4)).astype(np.float32),
             "xb0": rng.standard_normal((4, 5)).astype(np.float32)}]


@pytest.mark.parametrize("level,backend", LEVELS_BACKENDS)
def test_scan_in_both_directions_and_on_other_axes_equals_onnx_runtime(level, backend):
    compiled = check(scan_model(), scan_feeds(), level, backend)
    assert compiled.run(scan_feeds()[0])["y1"].shape == (4, 5)


def test_scan_exports_back_and_onnx_runtime_runs_it():
    m = scan_model()
    check_export(autofusion.compile(m, level=2), m, scan_feeds())


def test_a_scan_whose_inputs_differ_in_length_is_an_error_naming_it():
    m = scan_model()
    m.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "rows"      # xa [rows, 4]
    m.graph.input[2].type.tensor_type.shape.dim[1].dim_param = "columns"   # xb0 [4, columns]
    compiled = autofusion.compile(m, level=0, backend="torch")
    feeds = dict(scan_feeds()[0], xa=np.zeros((3, 4), np.float32))
    with pytest.raises(NodeExecutionError, match=r"node 'scan' \(Scan\).*different lengths"):
        compiled.run(feeds)


# ---- If with branches of different shapes; a Loop nested in an If ---------------------------

def different_shapes_if():
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", F, [2, 3])])
    other = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=1)], "else", [],
                              [vi("e", F, [2, 6])])
    return model([helper.make_node("If", ["c"], ["y0"], name="if", then_branch=then, else_branch=other),
                  helper.make_node("Sigmoid", ["y0"], ["y"], name="sigmoid")],
                 [vi("x", F, [2, 3]), vi("c", BOOL, [])], [vi("y")])


@pytest.mark.parametrize("level,backend", LEVELS_BACKENDS)
def test_an_if_whose_branches_have_different_shapes_equals_onnx_runtime(level, backend):
    x = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    compiled = check(different_shapes_if(), [{"x": x, "c": np.array(c)} for c in (True, False)], level, backend)
    node, = [n for n in compiled.graph.nodes if n.op_type == "If"]
    assert node.outputs[0].shape is None or node.outputs[0].shape[1] is None or \
        isinstance(node.outputs[0].shape[1], str)


def nested_loop_in_if():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["s"]),
         helper.make_node("Mul", ["s", "k"], ["acc_out"]),
         helper.make_node("Relu", ["acc_out"], ["step"])], "inner",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F, [2])],
        [vi("cond_out", BOOL, []), vi("acc_out", F, [2]), vi("step", F, [2])])
    then = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["k"]),
                              helper.make_node("Loop", ["n", "", "x"], ["t", "steps"], name="loop", body=body),
                              helper.make_node("ReduceSum", ["steps"], ["u"], keepdims=0,
                                               noop_with_empty_axes=0)],
                             "then", [], [vi("t", F, [2]), vi("u", F, [])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"]),
                               helper.make_node("ReduceMax", ["x"], ["f"], keepdims=0)], "else", [],
                              [vi("e", F, [2]), vi("f", F, [])])
    return model([helper.make_node("If", ["c"], ["y", "z"], name="if", then_branch=then, else_branch=other)],
                 [vi("x", F, [2]), vi("c", BOOL, []), vi("n", I64, [])], [vi("y"), vi("z")])


def nested_feeds():
    x = np.array([0.3, -0.7], np.float32)
    return [{"x": x, "c": np.array(c), "n": np.array(n, np.int64)} for c in (True, False) for n in (0, 4)]


@pytest.mark.parametrize("level,backend", LEVELS_BACKENDS)
def test_a_loop_nested_in_an_if_equals_onnx_runtime(level, backend):
    compiled = check(nested_loop_in_if(), nested_feeds(), level, backend)
    if level == 2:   # the Loop's body, inside the If's then_branch, fused there
        where = {r.kernel: r.where for r in compiled.report.regions}
        assert where["fused_add_mul_relu"] == "If 'if' then_branch > Loop 'loop' body"
        assert "(in If 'if' then_branch > Loop 'loop' body)" in compiled.report.text()


def test_the_nested_model_exports_back_and_onnx_runtime_runs_it():
    m = nested_loop_in_if()
    exported = check_export(autofusion.compile(m, level=2), m, nested_feeds())
    if_node, = exported.graph.node
    assert len(if_node.input) == 1   # cond only: x and n are read by name in the branches


# ---- the enclosing graph sees exactly what a body reads -----------------------------------------

def test_a_capture_that_folds_to_a_constant_moves_into_the_body_and_one_no_longer_read_is_dropped():
    """k = 2 + 1 folds outside, so the body gets it as a constant; the body's only read of r is
    dead code there, so r (and the Relu making it) go from the main graph."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_in", "k"], ["acc_out"]),
         helper.make_node("Neg", ["r"], ["unused"])], "body",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F, [3])],
        [vi("cond_out", BOOL, []), vi("acc_out", F, [3])])
    m = model([helper.make_node("Add", ["two", "one"], ["k"], name="add"),
               helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)],
              [vi("x", F, [3]), vi("n", I64, [])], [vi("y")], [two, one])
    feeds = [{"x": np.array([1, -2, 3], np.float32), "n": np.array(n, np.int64)} for n in (0, 2)]
    at0 = check(m, feeds, 0, "torch")
    loop0, = [n for n in at0.graph.nodes if n.op_type == "Loop"]
    assert [v.name for v in loop0.inputs[3:]] == ["k", "r"]
    compiled = check(m, feeds, 1, "torch")
    loop, = compiled.graph.nodes   # the Add folded, the Relu dead
    assert len(loop.inputs) == 3 and loop.attrs["captured"] == 0
    body = loop.attrs["body"]
    assert [v.name for v in body.inputs] == ["i", "cond_in", "acc_in"]
    assert body.op_histogram() == {"Identity": 1, "Mul": 1}
    assert compiled.report.passes["captured inputs moved into bodies or dropped"] == 2


def test_the_conditional_loop_and_the_if_of_two_shapes_export_back_and_onnx_runtime_runs_them():
    loop_feeds = [{"M": np.array(m, np.int64), "go": np.array(go), "acc0": np.ones(3, np.float32),
                   "limit": np.array(30.0, np.float32)} for m, go in ((5, True), (5, False))]
    check_export(autofusion.compile(conditional_loop(), level=2), conditional_loop(), loop_feeds)
    x = np.random.default_rng(6).standard_normal((2, 3)).astype(np.float32)
    check_export(autofusion.compile(different_shapes_if(), level=2), different_shapes_if(),
                 [{"x": x, "c": np.array(c)} for c in (True, False)])


def test_a_failure_inside_a_body_names_the_body_node_and_the_loop():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Reshape", ["acc_in", "target"], ["acc_out"], name="reshape")], "body",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F, None)],
        [vi("cond_out", BOOL, []), vi("acc_out", F, None)])
    m = model([helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)],
              [vi("x", F, [6]), vi("n", I64, []), vi("target", I64, [2])], [vi("y")])
    for backend in ("auto", "torch"):
        compiled = autofusion.compile(m, level=2, backend=backend)
        ok = {"x": np.arange(6, dtype=np.float32), "n": np.array(2, np.int64), "target": np.array([2, 3])}
        np.testing.assert_array_equal(compiled.run(ok)["y"], ort_run(m, ok)[0])
        with pytest.raises(NodeExecutionError, match=r"node 'reshape' \(Reshape\) in the body of node 'loop' \(Loop\)"):
            compiled.run(dict(ok, target=np.array([4, 4])))


def test_dump_kernels_writes_the_regions_inside_bodies_too(tmp_path):
    compiled = autofusion.compile(fusable_loop(), level=2)
    written = autofusion.export.dump_kernels(compiled.graph, tmp_path)
    assert sorted(p.name for p in written) == ["fused_add_sigmoid_0.cpp", "fused_add_sigmoid_0.onnx"]
    onnx.checker.check_model(onnx.load(written[0] if written[0].suffix == ".onnx" else written[1]))


@pytest.mark.parametrize("taken", [True, False])
def test_an_if_on_a_constant_condition_becomes_the_branch_it_takes(taken):
    """nested_loop_in_if with c a constant: from level 1 the If is gone, its branch's nodes (the
    Loop among them) in the main graph, where they fuse and run as before."""
    m = nested_loop_in_if()
    del m.graph.input[1]
    m.graph.initializer.append(numpy_helper.from_array(np.array(taken), "c"))
    feeds = [{k: v for k, v in f.items() if k != "c"} for f in nested_feeds()[:2]]
    assert "If" in check(m, feeds, 0, "torch").graph.op_histogram()
    for backend in ("auto", "torch"):
        compiled = check(m, feeds, 2, backend)
        ops = compiled.graph.op_histogram()
        assert "If" not in ops and ("Loop" in ops) == taken
        assert compiled.report.passes["If with a constant condition inlined"] == 1
    check_export(compiled, m, feeds)
