"""The micro benchmarks' synthetic models, at a tiny size: valid ONNX that ONNX Runtime runs,
with the right output shape (no timing)."""
import onnxruntime as ort
import pytest

from autofusion.benchmarks.micro import (REFERENCE, build_parser, conv_chain, elementwise_chain,
                              example_inputs, settings_from_args)


@pytest.mark.parametrize("model, nodes, shape", [
    (elementwise_chain(length=9, width=4), 9, (1, 4)),
    (conv_chain(blocks=2, channels=4, size=3), 6, (1, 4, 3, 3)),
])
def test_model_runs_in_onnx_runtime_with_the_right_output_shape(model, nodes, shape):
    assert len(model.graph.node) == nodes
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    [y] = session.run(None, example_inputs(model))
    assert y.shape == shape


def test_onnx_runtime_always_runs_as_the_reference():
    parser = build_parser()
    settings = settings_from_args(parser.parse_args(["--systems", "openvino-f32"]), parser)
    assert settings.systems == ["openvino-f32", REFERENCE]
