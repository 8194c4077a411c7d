"""The FX/ATen importer behind torch.compile(backend="autofusion"), on real torch graphs.

ResNet-, MobileNet- and BERT-style modules (tests/models/architectures.py) go through
torch.compile at levels 0, 1 and 2 and must equal eager, and fuse exactly as the ONNX path does
for the same module; dynamic batch and sequence compile once; an op without a mapping runs as a
call of itself, and only that op.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autofusion
from autofusion.dynamo import AutofusionFallbackWarning, autofusion_backend
from autofusion.frontend.fx_import import import_fx
from autofusion.frontend.fx_trace import trace_module
from tests.models.architectures import BertLayer, MobileNetBlock, ResNetStack, export


def resnet():
    return ResNetStack(), (torch.randn(2, 3, 64, 64),)


def mobilenet():
    return MobileNetBlock(), (torch.randn(1, 3, 32, 32),)


def bert():
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 10:] = 0
    return BertLayer(), (ids, mask)


MODELS = {"resnet": resnet, "mobilenet": mobilenet, "bert": bert}


@pytest.fixture(scope="module")
def built():
    """Each module in eval mode with non-trivial BatchNorm statistics, its inputs, and its ONNX
    export (TorchScript exporter, static shapes) for the ONNX path."""
    out = {}
    for name, make in MODELS.items():
        torch.manual_seed(0)
        module, args = make()
        onnx_model = export(module, args, [f"input_{i}" for i in range(len(args))])  # sets BN stats
        out[name] = module.eval(), args, onnx_model
    return out


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_graph(module, args, **options):
    compiled = torch.compile(module, backend="autofusion", options=options)
    with torch.no_grad():
        out = compiled(*args)
    return compiled, out


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("name", list(MODELS))
def test_torch_compile_equals_eager(built, name, level):
    module, args, _ = built[name]
    compiled, out = compiled_graph(module, args, level=level)
    with torch.no_grad():
        want = module(*args)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    view = autofusion.debug_view(compiled)
    assert len(view) == 1 and view[0].report.level == level and not view[0].fallbacks


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("name", list(MODELS))
def test_same_fusions_as_the_onnx_path(built, name, level):
    """The fused graph has the same operators, fused and not, as the ONNX export of the module."""
    module, args, onnx_model = built[name]
    compiled, _ = compiled_graph(module, args, level=level)
    ours = autofusion.debug_view(compiled)[0].report
    theirs = autofusion.compile(onnx_model, level=level).report
    # the rules that ran may differ (an exporter's GELU arrives spelled out, ATen's whole), what
    # they made may not: the same fused ops, as many, and the same unfused ones
    assert ours.histogram_after == theirs.histogram_after
    assert any(op.startswith("autofusion::") for op in ours.histogram_after)


def counting_backend(calls: list):
    def backend(gm, example_inputs, **kwargs):
        calls.append(gm)
        return autofusion_backend(gm, example_inputs, **kwargs)
    return backend


def test_dynamic_batch_and_sequence_compile_once(built):
    """Dynamo compiles the first sizes statically, then once with symbolic batch and sequence;
    every later size reuses that graph (its inputs have symbolic dims)."""
    module = built["bert"][0]
    calls: list = []
    compiled = torch.compile(module, backend=counting_backend(calls))
    with torch.no_grad():
        for batch, seq in [(2, 16), (3, 12), (4, 20), (5, 9), (3, 7)]:
            ids = torch.randint(0, 100, (batch, seq))
            mask = torch.ones(batch, seq, dtype=torch.int64)
            mask[0, seq // 2:] = 0
            np.testing.assert_allclose(compiled(ids, mask).numpy(), module(ids, mask).numpy(),
                                       rtol=1e-4, atol=1e-5)
    assert len(calls) == 2
    graph = autofusion.debug_view(compiled)[-1].model.graph
    assert all(isinstance(d, str) for v in graph.inputs for d in v.shape)
    assert graph.op_histogram().get("autofusion::Attention") == 1


def test_dynamic_batch_of_a_convnet(built):
    module = built["resnet"][0]
    calls: list = []
    compiled = torch.compile(module, backend=counting_backend(calls))
    with torch.no_grad():
        for batch in (2, 3, 5, 4):
            x = torch.randn(batch, 3, 64, 64)
            np.testing.assert_allclose(compiled(x).numpy(), module(x).numpy(), rtol=1e-4, atol=1e-5)
    assert len(calls) == 2
    (graph_input,) = autofusion.debug_view(compiled)[-1].model.graph.inputs
    assert isinstance(graph_input.shape[0], str) and graph_input.shape[1:] == (3, 64, 64)


class WithUnmappedOp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(torch.special.erfinv(torch.tanh(x)) * 0.5))


def test_an_unmapped_op_falls_back_for_that_op_only():
    module = WithUnmappedOp().eval()
    x = torch.randn(4, 8)
    compiled, out = compiled_graph(module, (x,))
    with torch.no_grad():
        np.testing.assert_allclose(out.numpy(), module(x).numpy(), rtol=1e-5, atol=1e-6)
    view = autofusion.debug_view(compiled)[0]
    assert view.fallbacks == ["Fallback aten.erfinv.default: no mapping to the op table (node 'erfinv')"]
    assert "Fallback aten.erfinv.default: no mapping to the op table" in view.report.text()
    hist = view.report.histogram_after
    assert hist["autofusion.torch::TorchCall"] == 1 and hist["autofusion::FusedMatMul"] == 1


def test_a_mapping_that_refuses_gives_its_reason():
    """max_pool2d's indices have no ONNX MaxPool meaning here: the op runs as itself."""
    class PoolWithIndices(nn.Module):
        def forward(self, x):
            y, idx = F.max_pool2d(x, 2, return_indices=True)
            return y + idx.float()
    x = torch.randn(1, 2, 8, 8)
    compiled, out = compiled_graph(PoolWithIndices(), (x,))
    np.testing.assert_allclose(out.numpy(), PoolWithIndices()(x).numpy())
    (fallback,) = autofusion.debug_view(compiled)[0].fallbacks
    assert fallback.startswith("Fallback aten.max_pool2d_with_indices.default: its indices output is used")


def test_a_graph_that_mutates_its_input_runs_as_pytorch():
    class Mutates(nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2
    x = torch.zeros(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, out = compiled_graph(Mutates(), (x,))
    assert torch.equal(out, torch.full((3,), 2.0)) and torch.equal(x, torch.ones(3))
    messages = [str(w.message) for w in caught if issubclass(w.category, AutofusionFallbackWarning)]
    assert len(messages) == 1 and "mutates its inputs" in messages[0]


def test_linear_layers_import_as_the_exporters_write_them():
    """nn.Linear on a rank-3 input (view → addmm → view after decomposition) is MatMul + Add;
    on a rank-2 input one Gemm with transB; the weights are graph constants."""
    class TwoLinears(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 5), nn.Linear(5, 3)

        def forward(self, x):
            return self.b(self.a(x).sum(1))
    module = TwoLinears().eval()
    gm, weights, names = trace_module(module, [torch.randn(2, 4, 6)])
    imported = import_fx(gm, dict(enumerate(weights)), names, "two_linears")
    graph = imported.graph
    assert graph.op_histogram() == {"Add": 1, "Gemm": 1, "MatMul": 1, "ReduceSum": 1, "Transpose": 2}
    assert [v.name for v in graph.inputs] == ["input_0"]
    assert set(graph.constants) >= {"a_weight", "a_bias", "b_weight", "b_bias"}
    gemm = next(n for n in graph.nodes if n.op_type == "Gemm")
    assert gemm.attrs["transB"] == 1 and gemm.inputs[1].name == "b_weight"
    assert imported.input_positions == [4] and imported.output_slots == [("tensor", 0)]


def test_sdpa_becomes_the_attention_the_rule_fuses():
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.o = nn.Linear(32, 96), nn.Linear(32, 32)

        def forward(self, x, keep):
            b, n, _ = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, 4, 8).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
            return self.o(y.transpose(1, 2).reshape(b, n, 32))
    module = Attention().eval()
    x, keep = torch.randn(2, 10, 32), torch.ones(2, 10, dtype=torch.bool)
    keep[1, 6:] = False
    for level, fused in ((0, None), (2, 1)):
        torch._dynamo.reset()
        compiled, out = compiled_graph(module, (x, keep), level=level)
        with torch.no_grad():
            np.testing.assert_allclose(out.numpy(), module(x, keep).numpy(), rtol=1e-4, atol=1e-6)
        assert autofusion.debug_view(compiled)[0].report.histogram_after.get("autofusion::Attention") == fused


def test_symbolic_sizes_are_read_off_the_input_shapes():
    """A size dynamo keeps symbolic is computed in the graph from an input's Shape."""
    class Positions(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Embedding(32, 4)

        def forward(self, ids):
            return self.pos(torch.arange(ids.shape[1])) + ids[..., None].float()
    module = Positions().eval()
    compiled = torch.compile(module, backend="autofusion", dynamic=True)
    with torch.no_grad():
        for seq in (5, 9):
            ids = torch.randint(0, 5, (2, seq))
            np.testing.assert_allclose(compiled(ids).numpy(), module(ids).numpy(), rtol=1e-6)
    graph = autofusion.debug_view(compiled)[0].model.graph
    assert graph.op_histogram().get("Range") == 1 and graph.op_histogram().get("Shape") == 1


def test_in_place_ops_and_bool_masks_are_functional_ops():
    """torchvision's in-place activations and transformers' bool mask arithmetic import as plain
    ONNX ops, no fallback."""
    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.act, self.relu = nn.Hardswish(inplace=True), nn.ReLU(inplace=True)

        def forward(self, x, keep):
            y = self.relu(self.act(self.conv(x)))
            both = (keep > 0) & (keep < 3)
            return torch.where(both[:, None, :, None], y, 0.0)
    module = InPlace().eval()
    x, keep = torch.randn(2, 3, 5, 5), torch.randint(0, 4, (2, 5))
    compiled, out = compiled_graph(module, (x, keep))
    with torch.no_grad():
        np.testing.assert_allclose(out.numpy(), module(x, keep).numpy(), rtol=1e-5, atol=1e-6)
    assert autofusion.debug_view(compiled)[0].fallbacks == []
