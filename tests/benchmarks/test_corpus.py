"""The real-model corpus's CI-sized entries (benchmarks/corpus.py: built from torch alone) as
their exporter writes them, at each of their sizes: equal to ONNX Runtime at levels 0 and 2, and
no node on PyTorch that the corpus benchmark does not expect. The whole corpus, with the peers'
times, is `python -m autofusion.benchmarks.realworld`."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import autofusion
from autofusion.backend.native import unavailable
from autofusion.benchmarks.corpus import ci_entries

ENTRIES = {e.name: e for e in ci_entries()}
# what still runs on PyTorch at level 2 (the corpus benchmark's table says why): op -> nodes
EXPECTED_ON_TORCH: dict[str, dict[str, int]] = {}


@pytest.fixture(scope="module", params=sorted(ENTRIES))
def exported(request, tmp_path_factory):
    entry = ENTRIES[request.param]
    path = tmp_path_factory.mktemp("corpus") / f"{entry.name}.onnx"
    entry.export(path)
    return entry, str(path)


@pytest.mark.parametrize("level", [0, 2])
def test_equal_to_onnx_runtime_at_every_size(exported, level):
    entry, path = exported
    model = autofusion.compile(path, level=level)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for size, feeds_of in entry.sizes.items():
        feeds = feeds_of()
        want = session.run(None, feeds)
        got = [model.run(feeds)[o.name] for o in session.get_outputs()]
        for g, w in zip(got, want):
            assert g.shape == w.shape, size
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(float(np.abs(w).max()), 1.0),
                                       err_msg=f"{entry.name} at {size}")


def test_what_runs_on_pytorch_is_what_the_corpus_expects(exported):
    if unavailable() is not None:
        pytest.skip(f"native backend: {unavailable()}")
    entry, path = exported
    model = autofusion.compile(path, backend="native")
    on_torch: dict[str, int] = {}
    for step in model.program.steps:   # PyTorch steps; those that read only sizes run once per size set
        if step.node is not None and not step.sizes_only:
            on_torch[step.node.op] = on_torch.get(step.node.op, 0) + 1
    assert on_torch == EXPECTED_ON_TORCH.get(entry.name, {})
