"""torch.compile(model, backend="autofusion"): registration, options, grad modes, and
autofusion.compile(nn.Module) without dynamo."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import autofusion
from autofusion.backend.native import unavailable as native_unavailable
from autofusion.dynamo import AutofusionFallbackWarning


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def small():
    torch.manual_seed(0)
    module = Small().eval()
    with torch.no_grad():
        module.bn.running_mean.uniform_(-0.5, 0.5)
        module.bn.running_var.uniform_(0.5, 1.5)
    return module, torch.randn(2, 3, 8, 8)


def fallback_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, AutofusionFallbackWarning)]


def test_the_backend_is_registered_by_entry_point():
    assert "autofusion" in torch._dynamo.list_backends()


@pytest.mark.parametrize("backend", ["torch", "native"])
def test_options_mean_what_they_mean_for_onnx(small, backend, request):
    """threads=1 under a two-thread pool: the native partitions are built with one thread while
    dynamo traces, which must leave the process's count as it was (the run then sets it)."""
    if backend == "native" and native_unavailable() is not None:
        pytest.skip(f"native backend: {native_unavailable()}")
    module, x = small
    request.addfinalizer(lambda before=torch.get_num_threads(): torch.set_num_threads(before))
    torch.set_num_threads(2)
    compiled = torch.compile(module, backend="autofusion",
                             options={"level": 1, "disable": ["ConvBNReluFusionOp"], "backend": backend,
                                      "threads": 1})
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), module(x).numpy(), rtol=1e-5, atol=1e-6)
    (view,) = autofusion.debug_view(compiled)
    assert view.report.level == 1 and view.report.disabled == ["ConvBNReluFusionOp"]
    assert "ConvBNReluFusionOp" not in [r.name for r in view.report.rules if r.matched]
    assert view.model.backend == backend and view.model.threads == 1


def test_unknown_options_are_an_error_naming_the_valid_ones(small):
    module, x = small
    compiled = torch.compile(module, backend="autofusion", options={"levle": 1})
    with pytest.raises(Exception, match="unknown autofusion option.*'levle'.*valid options: level, disable"):
        with torch.no_grad():
            compiled(x)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "plain"])
def test_calls_in_every_grad_mode_run_compiled(small, mode):
    module, x = small
    module.requires_grad_(False)
    compiled = torch.compile(module, backend="autofusion")
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
               "plain": torch.enable_grad}[mode]
    with warnings.catch_warnings(record=True) as caught, context():
        warnings.simplefilter("always")
        out = compiled(x)
    assert fallback_warnings(caught) == []
    with torch.no_grad():
        np.testing.assert_allclose(out.numpy(), module(x).numpy(), rtol=1e-5, atol=1e-6)
    assert len(autofusion.debug_view(compiled)) == 1
    if mode != "inference_mode":
        out.add_(1)   # an ordinary tensor outside inference mode, writable


def test_a_call_that_needs_gradients_runs_eagerly_with_one_warning(small):
    module, x = small   # parameters require grad, grad mode on
    compiled = torch.compile(module, backend="autofusion")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x)
        out2 = compiled(x)
    (message,) = fallback_warnings(caught)
    assert "needs gradients" in message
    assert out.requires_grad and torch.equal(out, module(x)) and torch.equal(out2, out)
    out.sum().backward()
    assert module.fc.weight.grad is not None


def test_weights_are_frozen_constants(small):
    module, x = small
    compiled = torch.compile(module, backend="autofusion", options={"level": 0})
    with torch.no_grad():
        compiled(x)
    graph = autofusion.debug_view(compiled)[0].model.graph
    assert [v.name for v in graph.inputs] == ["l_x_"]
    assert len(graph.constants) >= 7   # conv weight, BN's four, fc weight and bias


def test_compile_a_module_without_dynamo(small):
    module, x = small
    model = autofusion.compile(module, example_inputs=(x,))
    assert isinstance(model, autofusion.CompiledModel)
    with torch.no_grad():
        np.testing.assert_allclose(model(x).numpy(), module(x).numpy(), rtol=1e-5, atol=1e-6)
    assert "autofusion::FusedConv" in model.report.histogram_after
    with pytest.raises(autofusion.AutofusionError, match="needs example_inputs"):
        autofusion.compile(module)
    with pytest.raises(autofusion.AutofusionError, match="training mode"):
        autofusion.compile(Small().train(), example_inputs=(x,))


def test_the_readme_example_runs_as_written():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    (example,) = [b for b in blocks if 'backend="autofusion"' in b]
    exec(compile(example, "README.md", "exec"), {})
