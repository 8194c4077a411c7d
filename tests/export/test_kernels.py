"""--dump-kernels: each region's body as ONNX (rerunnable) and its generated C++."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import autofusion
from autofusion.backend.native.build import vector_lanes
from autofusion.cli import main
from autofusion.export import dump_kernels


def silu_scale_model(batch="N"):
    """y = relu(x·sigmoid(x) + b): SiLU (a rule), then one region of three ops."""
    b = numpy_helper.from_array(np.linspace(-1, 1, 4).astype(np.float32).reshape(1, 4, 1, 1), "b")
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])], [b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_each_region_is_written_as_onnx_and_cpp(tmp_path):
    m = autofusion.compile(silu_scale_model(batch=2))
    written = dump_kernels(m.graph, tmp_path)
    assert sorted(p.name for p in written) == ["fused_silu_add_relu_0.cpp",
                                               "fused_silu_add_relu_0.onnx"]
    source = (tmp_path / "fused_silu_add_relu_0.cpp").read_text()
    assert "static void fused_silu_add_relu_0(const float* const* in, float* const* out, const int64_t* d)" in source
    assert "d[" not in source.split("{", 1)[1]   # static sizes are literals
    loop = "16 elements at a time" if vector_lanes() == 16 else "#pragma omp simd"   # lanes.h or not
    assert loop in source and '#include "scalar.h"' in source
    x = np.random.default_rng(0).standard_normal((2, 4, 8, 8)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "fused_silu_add_relu_0.onnx"),
                                   providers=["CPUExecutionProvider"])
    body_inputs = [i.name for i in session.get_inputs()]
    region = next(n for n in m.graph.nodes if n.op_type == "Region")
    feeds = {name: x if v.name == "x" else v.const for name, v in zip(body_inputs, region.inputs)}
    np.testing.assert_allclose(session.run(None, feeds)[0], m(x), rtol=1e-5, atol=1e-6)


def test_a_region_with_a_symbolic_size_reads_it_as_an_argument(tmp_path):
    m = autofusion.compile(silu_scale_model())
    dump_kernels(m.graph, tmp_path)
    source = (tmp_path / "fused_silu_add_relu_0.cpp").read_text()
    assert "; d = ['N']" in source and "i0 < d[0]" in source


def test_the_cli_dumps_kernels(tmp_path, capsys):
    path = tmp_path / "silu.onnx"
    path.write_bytes(silu_scale_model(batch=1).SerializeToString())
    assert main(["compile", str(path), "--dump-kernels", str(tmp_path / "k")]) == 0
    assert "wrote 1 region kernel(s)" in capsys.readouterr().out
    assert (tmp_path / "k" / "fused_silu_add_relu_0.cpp").exists()
