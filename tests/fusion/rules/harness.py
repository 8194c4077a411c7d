"""What every rule test needs: build a model, fuse it, compare with the unfused graph."""
from __future__ import annotations

import io

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

import autofusion
from autofusion.fusion import optimize
from autofusion.backend import evaluate_node
from autofusion.frontend import import_onnx
from autofusion.ir import Graph, verify


def onnx_model(nodes, inputs: dict[str, tuple], outputs: list[str], initializers=(),
               opset: int = 17) -> onnx.ModelProto:
    """A model from onnx.helper nodes; inputs as name -> shape (float32)."""
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in dict(initializers).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def torch_model(module: torch.nn.Module, *shapes: tuple, opset: int = 17) -> onnx.ModelProto:
    """Export a module the way a framework does (TorchScript exporter, no constant folding)."""
    torch.manual_seed(0)
    f = io.BytesIO()
    args = tuple(torch.randn(*s) for s in shapes)
    torch.onnx.export(module.eval(), args, f, dynamo=False, do_constant_folding=False,
                      opset_version=opset, input_names=[f"x{i}" for i in range(len(shapes))])
    return onnx.load_from_string(f.getvalue())


def fuse(model: onnx.ModelProto, level: int = 2, disable=(), regions: bool = False) -> tuple[Graph, object]:
    """The fused graph (verified) and its report: the rules' work alone, unless `regions` asks
    for automatic fusion after them too (tests/fusion/test_regions.py tests it)."""
    graph = import_onnx(model)
    disable = list(disable) + ([] if regions or "AutoFusion" in disable else ["AutoFusion"])
    report = optimize(graph, level, disable, evaluate_node)
    verify(graph)
    return graph, report


def matched(report, rule: str) -> int:
    return next(r.matched for r in report.rules if r.name == rule)


def assert_same_outputs(model: onnx.ModelProto, level: int = 2, rtol: float = 1e-5,
                        seeds=(0, 1, 2), disable=()) -> None:
    """Fused and unfused graphs agree on fresh random inputs: max|a-b| <= rtol·max|b| + 1e-6."""
    unfused = autofusion.compile(model, level=0)
    fused = autofusion.compile(model, level=level, disable=disable)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        feeds = {v.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in v.shape])
                 .astype(v.dtype.numpy) for v in unfused.graph.inputs}
        want, got = unfused.run(feeds), fused.run(feeds)
        for name in want:
            w, g = want[name].astype(np.float64), got[name].astype(np.float64)
            err = np.abs(w - g).max()
            assert err <= rtol * np.abs(w).max() + 1e-6, f"{name}: max abs diff {err:.3g}"


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def node(op: str, ins: list[str], outs: list[str], **attrs) -> onnx.NodeProto:
    """An onnx.helper node named after its first output."""
    return helper.make_node(op, ins, outs, name=outs[0], **attrs)


def near_miss(report, rule: str) -> str:
    """The reason of the rule's one near-miss."""
    [miss] = [m for m in report.near_misses if m.rule == rule]
    return miss.reason

