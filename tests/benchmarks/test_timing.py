"""The block-alternating timer's schedule (which system runs when), with stand-in systems."""
from benchmarks.timing import summarize, time_in_blocks


def _recording(calls, name, fail_on_call=None):
    def run():
        calls.append(name)
        if fail_on_call is not None and calls.count(name) == fail_on_call:
            raise ValueError("boom")
    return run


def test_systems_alternate_in_blocks_and_rotate_each_round():
    calls = []
    runs = {n: _recording(calls, n) for n in "abc"}
    t = time_in_blocks(runs, rounds=3, block=2, warmup=1, pause_s=0)
    assert "".join(calls) == "abc" + "aabbcc" + "bbccaa" + "ccaabb"
    assert {n: len(s) for n, s in t.samples.items()} == {"a": 6, "b": 6, "c": 6}
    assert not t.errors


def test_a_failing_system_is_dropped_and_the_others_go_on():
    calls = []
    runs = {"a": _recording(calls, "a"), "b": _recording(calls, "b", fail_on_call=2)}
    t = time_in_blocks(runs, rounds=3, block=2, warmup=0, pause_s=0, describe_error=str)
    assert t.errors == {"b": "boom"}
    assert len(t.samples["a"]) == 6
    assert "".join(calls) == "aabb" + "aa" + "aa"   # b fails on its 2nd run, then never runs again


def test_summary_is_median_and_percentiles_in_ms():
    s = summarize([0.001 * i for i in range(1, 12)])
    assert (s.median_ms, s.runs) == (6.0, 11)
    assert s.p10_ms == 2.0 and s.p90_ms == 10.0
