import pytest

from autofusion.backend.native import build, kernels, unavailable


@pytest.fixture(params=[1, 16], ids=["scalar-loop", "16-lanes"])
def lanes(request, monkeypatch):
    """Generated elementwise loops in both forms: one float at a time (the compiler vectorises)
    and 16 (runtime/lanes.h), where this machine has the second."""
    if request.param > 1 and (unavailable() is not None or build.vector_lanes() < request.param):
        pytest.skip("16-lane kernels need AVX-512 and GCC")
    monkeypatch.setattr(kernels, "vector_lanes", lambda: request.param)
    return request.param
