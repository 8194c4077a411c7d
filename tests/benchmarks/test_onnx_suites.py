"""autofusion/benchmarks/onnx_suites.py on a few cases: scope, both systems through ONNX's runner in worker
processes, a case past its time bound recorded without ending the run, and the tally."""
from __future__ import annotations

import onnx
from onnx import helper

from autofusion.benchmarks.onnx_suites import Worker, discover, in_scope, run_cases, tally


def test_scope_reads_every_tensor_type_in_the_model():
    seq_of_strings = helper.make_tensor_sequence_value_info("s", onnx.TensorProto.STRING, [2])
    relu = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                             [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                             [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    assert in_scope(helper.make_model(relu))
    relu.input.append(seq_of_strings)
    assert not in_scope(helper.make_model(relu))


def test_a_few_cases_run_on_both_systems_and_tally():
    cases, totals = discover(("node", "simple"), "^test_(relu|abs|single_relu_model)$")
    assert [(c.suite, c.name) for c in cases] == [("node", "test_abs"), ("node", "test_relu"),
                                                  ("simple", "test_single_relu_model")]
    outcomes = run_cases(cases, ["ort", "autofusion-L0"])
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
    text = tally(outcomes, cases, totals, ["ort", "autofusion-L0"], "cmd")
    assert f"| node | {totals['node']} | 2 | 2 | 2 |" in text
    assert "## autofusion-L0: 0 failure(s)" in text


def test_a_case_past_its_time_bound_is_recorded_and_the_worker_replaced():
    [relu] = discover(("node",), "^test_relu$")[0]
    worker = Worker("autofusion-L0")
    try:
        late = worker.run(relu, timeout=1e-4)
        assert not late.passed and late.message.startswith("timeout") and worker.proc is None
        again = worker.run(relu, timeout=120)
        assert again.passed and worker.proc.is_alive()
    finally:
        worker.stop()
