"""Calling a native partition from Python: the outputs each call hands back."""
from __future__ import annotations

import pytest
import torch

import autofusion
from autofusion.backend.native import library, unavailable

from ...helpers import conv_relu_model

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")


def _static_conv_relu():
    model = conv_relu_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    return autofusion.compile(model, level=2, backend="native")


@pytest.mark.parametrize("batch_bytes", [library.OUTPUT_BATCH_BYTES, 1])
def test_every_call_gets_outputs_of_its_own(monkeypatch, batch_bytes):
    """Outputs are made several calls' worth at a time (or one at a time, where they are big):
    none is handed out twice, so a result a caller keeps never changes."""
    monkeypatch.setattr(library, "OUTPUT_BATCH_BYTES", batch_bytes)
    model = _static_conv_relu()
    [part] = model.program.native.values()
    assert part.last._batch == (1 if batch_bytes == 1 else library.OUTPUT_BATCH)
    xs = [torch.randn(1, 3, 8, 8) for _ in range(2 * library.OUTPUT_BATCH + 1)]
    kept = [model(x) for x in xs]
    assert len({y.data_ptr() for y in kept}) == len(kept)
    for x, y in zip(xs, kept):
        torch.testing.assert_close(y, model(x))
