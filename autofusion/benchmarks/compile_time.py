"""`python -m autofusion.benchmarks.compile_time`: how long autofusion takes to compile a long chain of
elementwise ops (Add and Mul of scalar constants and Relu, in turn) at level 2, cold (an empty
kernel cache) and warm, and into how many kernels automatic fusion made it.

    python -m autofusion.benchmarks.compile_time                  # 30,000 ops on [1, 64, 56, 56]
    python -m autofusion.benchmarks.compile_time --ops 3000

Timed in this process: the first compile builds the runtime library into a fresh cache (as on a
new machine), the second finds everything cached.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def chain(ops: int, shape=(1, 64, 56, 56)) -> onnx.ModelProto:
    nodes, constants, value = [], [], "x"
    for i in range(ops):
        out = "y" if i == ops - 1 else f"t{i}"
        kind = ("Add", "Mul", "Relu")[i % 3]
        if kind == "Relu":
            nodes.append(helper.make_node("Relu", [value], [out], name=f"Relu_{i}"))
        else:
            c = 0.01 * (i % 5 - 2) if kind == "Add" else 1.0 + 0.001 * (i % 7)
            constants.append(numpy_helper.from_array(np.array(c, np.float32), f"c{i}"))
            nodes.append(helper.make_node(kind, [value, f"c{i}"], [out], name=f"{kind}_{i}"))
        value = out
    graph = helper.make_graph(nodes, f"chain{ops}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                              constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.compile_time", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, default=30_000)
    args = p.parse_args(argv)
    model = chain(args.ops)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["AUTOFUSION_CACHE_DIR"] = cache
        import autofusion
        for label in ("cold", "warm"):
            start = time.perf_counter()
            compiled = autofusion.compile(model, level=2)
            seconds = time.perf_counter() - start
            kernels = compiled.graph.op_histogram().get("autofusion::Region", 0)
            print(f"{args.ops} ops, {label} cache: {seconds:.2f} s; {len(compiled.graph)} node(s), "
                  f"{kernels} generated kernel(s); {compiled.report.backend}")
        x = np.random.default_rng(0).standard_normal((1, 64, 56, 56)).astype(np.float32)
        start = time.perf_counter()
        compiled(x)
        print(f"first run: {(time.perf_counter() - start) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
