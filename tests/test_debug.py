"""autofusion.debug_view: per compiled graph, the fused graph, report, generated code and ONNX."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

import autofusion


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        h = nn.functional.gelu(self.a(x))
        return self.b(h) + x


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_debug_view_of_a_compiled_module():
    module = Block().eval()
    x = torch.randn(2, 5, 16)
    compiled = torch.compile(module, backend="autofusion")
    with torch.no_grad():
        out = compiled(x)
    (view,) = autofusion.debug_view(compiled)
    assert view.graph.startswith(f"graph {view.name}(l_x_: float[2,5,16])")
    assert "autofusion::FusedMatMul" in view.graph and "Graph Fusion Report" in view.report.text()
    assert view.source.startswith("def run(_sizes, in0):")
    assert isinstance(view.native_source, str)
    assert view.name in str(autofusion.debug_view(compiled))
    assert autofusion.debug_view(compiled).graph == view.graph   # the seed's spelling: the fused graph
    model = view.onnx()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"l_x_": x.numpy()})
    np.testing.assert_allclose(got, out.numpy(), rtol=1e-4, atol=1e-5)


def test_a_fallback_op_is_exported_in_its_own_domain(tmp_path):
    class Odd(nn.Module):
        def forward(self, x):
            return torch.special.erfinv(torch.tanh(x)) * 2
    compiled = torch.compile(Odd(), backend="autofusion")
    with torch.no_grad():
        compiled(torch.randn(3))
    (view,) = autofusion.debug_view(compiled)
    model = view.onnx(tmp_path / "odd.onnx")
    call = next(n for n in model.graph.node if n.op_type == "TorchCall")
    assert call.domain == "autofusion.torch" and (tmp_path / "odd.onnx").is_file()
    assert view.fallbacks == ["Fallback aten.erfinv.default: no mapping to the op table (node 'erfinv')"]


def test_debug_view_of_a_compiled_model():
    model = autofusion.compile("examples/tiny_resnet.onnx", level=1)
    (view,) = autofusion.debug_view(model)
    assert view.model is model and view.report is model.report and view.graph == str(model.graph)


def test_debug_view_before_any_call_says_what_to_do():
    compiled = torch.compile(Block().eval(), backend="autofusion")
    with pytest.raises(autofusion.AutofusionError, match="call it once"):
        autofusion.debug_view(compiled)
