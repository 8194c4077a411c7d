"""The block-alternating timer's schedule (which system runs when), with stand-in systems."""
from autofusion.benchmarks.timing import against_faster, paired_ratio, round_medians, summarize
from autofusion.measure import time_in_blocks


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


def test_round_medians_are_each_blocks_median_in_ms():
    assert round_medians([0.001, 0.003, 0.002, 0.010, 0.030, 0.020], block=3) == [2.0, 20.0]


def test_a_paired_ratio_cancels_the_hosts_phases():
    """b is 1.25x faster than a in every round; the host turns 2x slower from round 3 on, and
    in round 3 between a's block and b's. The pooled medians land in different phases (a's in
    the slow one, b's in the fast one: 2.5x); the rounds' ratios say 1.25x but for round 3."""
    a = [10.0, 10.0, 20.0, 20.0, 20.0]
    b = [8.0, 8.0, 8.0, 16.0, 16.0]
    assert summarize([x / 1e3 for x in a]).median_ms / summarize([x / 1e3 for x in b]).median_ms == 2.5
    assert paired_ratio(a, b) == 1.25


def test_against_the_faster_peer_round_by_round():
    rounds = {"ours": [2.0, 4.0, 3.0], "a": [4.0, 4.0, 9.0], "b": [3.0, 8.0, 3.0]}
    # the faster peer per round: 3, 4, 3 -> ratios 1.5, 1.0, 1.0
    assert against_faster(rounds, "ours", ("a", "b")) == 1.0
    assert against_faster(rounds, "ours", ("missing",)) is None
    assert against_faster({"a": [1.0]}, "ours", ("a",)) is None
