"""`python -m autofusion.benchmarks.call_overhead` on a small one-partition model, and its refusal of another plan."""
import onnx
import pytest

from autofusion.backend.native import unavailable
from autofusion.benchmarks import call_overhead

from ..helpers import conv_relu_model

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")


def test_it_prints_the_three_differences_per_round(tmp_path, capsys):
    model = conv_relu_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(model, tmp_path / "m.onnx")
    call_overhead.main([str(tmp_path / "m.onnx"), "--pairs", "5", "--rounds", "2"])
    rows = capsys.readouterr().out.strip().splitlines()[2:]
    assert len(rows) == 2 and all(len(r.split(" | ")) == 4 for r in rows)


def test_a_model_with_symbolic_sizes_is_refused(tmp_path):
    model = conv_relu_model()   # a symbolic batch: one native partition, set up per batch size
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(SystemExit, match="symbolic"):
        call_overhead.main([str(tmp_path / "m.onnx"), "--pairs", "1", "--rounds", "1"])
