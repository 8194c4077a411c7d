"""ONNX node tests in scope that autofusion is known to fail, each with its reason."""

# Elementwise, broadcast, reduction, normalization, activation and cast ops.
_MATH: dict[str, str] = {
}

# Tensor (injective/shape) ops, conv/pool/matmul/gemm/einsum, and opaque ops.
_TENSOR: dict[str, str] = {
}

EXPECTED_FAILURES: dict[str, str] = {**_MATH, **_TENSOR}
