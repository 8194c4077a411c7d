"""ONNX's own backend node tests, for every operator in the op table.

The onnx wheel ships the generators of its node tests (onnx.backend.test.case); the official
BackendTest runner builds them in memory. A case is in scope when every op of its graph (and of
its If, Loop and Scan bodies) is in our op table and every tensor it feeds or checks has a
standard dtype (no string, float8, int4, bfloat16 — PyTorch CPU kernels do not serve those). Cases we fail for a known reason are listed in
EXPECTED_FAILURES with that reason; `test_node_suite_pass_rate` holds the pass rate at >= 98%.

Reproduce the tally: pytest tests/backend/test_onnx_node_suite.py -q
"""
from __future__ import annotations

import re

import onnx
import onnx.backend.base
import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

from autofusion.ir import lookup
from autofusion.benchmarks.onnx_suites import autofusion_backend

from .node_suite_expected_failures import EXPECTED_FAILURES

STANDARD = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
            onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
            onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
            onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL}


AutofusionBackend = autofusion_backend(level=0, strict=False)   # as ONNX's runner calls it


def _types_in(graph: onnx.GraphProto):
    for vi in [*graph.input, *graph.output]:
        t = vi.type
        if t.HasField("sequence_type") and t.sequence_type.elem_type.HasField("tensor_type"):
            t = t.sequence_type.elem_type   # a sequence of tensors: its elements' type
        if not t.HasField("tensor_type"):
            yield -1  # maps, optionals, sequences of those
        else:
            yield t.tensor_type.elem_type
    for init in graph.initializer:
        yield init.data_type
    for n in graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t.data_type
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from _types_in(sub)   # If, Loop and Scan bodies


def _ops_in(graph: onnx.GraphProto):
    for n in graph.node:
        yield n
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from _ops_in(sub)


def in_scope(case) -> bool:
    model = case.model
    if model is None:
        return False
    g = model.graph
    if not g.node or any(lookup(n.domain, n.op_type) is None for n in _ops_in(g)):
        return False
    return all(t in STANDARD for t in _types_in(g))


SCOPE = sorted(c.name for c in load_model_tests(kind="node") if in_scope(c))

backend_test = onnx.backend.test.BackendTest(AutofusionBackend, __name__)
backend_test.include("^(" + "|".join(re.escape(n) for n in SCOPE) + ")_cpu$")
for name in EXPECTED_FAILURES:
    backend_test.xfail("^" + re.escape(name) + "_cpu$")
globals().update(backend_test.test_cases)


def test_expected_failures_are_in_scope():
    stale = sorted(set(EXPECTED_FAILURES) - set(SCOPE))
    assert not stale, f"expected failures that are not in scope: {stale}"


def test_node_suite_pass_rate():
    rate = 1 - len(EXPECTED_FAILURES) / len(SCOPE)
    print(f"\nONNX node tests in scope: {len(SCOPE)}, expected failures: {len(EXPECTED_FAILURES)}, "
          f"pass rate {rate:.1%}")
    assert rate >= 0.98, f"node-suite pass rate {rate:.1%} is under 98%"


# Ops ONNX ships no node test for; tests/backend/test_kernels.py checks them against ONNX Runtime
# (the sequence ops: tests/backend/test_sequences.py, and ONNX's "simple" test_sequence_model*).
NO_NODE_TEST = {"GlobalLpPool", "ConcatFromSequence", "SequenceAt", "SequenceConstruct", "SequenceErase"}


def test_every_table_op_has_node_tests():
    """Every op in the table is exercised by at least one in-scope node test."""
    from autofusion.ir import OPS
    covered = {n.op_type for c in load_model_tests(kind="node") if c.name in set(SCOPE)
               for n in c.model.graph.node}
    untested = sorted(k for k in OPS if k not in covered and "::" not in k and k not in NO_NODE_TEST)
    assert not untested, f"ops in the table without an in-scope node test: {untested}"


def test_every_table_op_has_a_kernel():
    """The op table lists what autofusion supports, so every entry runs on the backend.

    Constant is the exception: the importer turns Constant nodes into constant values."""
    from autofusion.backend import KERNELS
    from autofusion.ir import OPS
    missing = sorted(k for k in OPS if k not in KERNELS and k != "Constant")
    assert not missing, f"ops in the table without a PyTorch CPU kernel: {missing}"
