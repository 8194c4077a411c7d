import threading
import time

import pytest

from autofusion.backend.turns import Turns


def _queued(turns: Turns, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(turns._waiting) < count:
        assert time.monotonic() < deadline, "a caller never queued"
        time.sleep(0.001)


def test_the_waiting_go_in_the_order_they_came():
    turns = Turns(1)
    order: list[int] = []
    turns.take()   # as by a call running
    callers = []
    for k in range(4):   # each queued before the next comes
        def call(k=k):
            turns.take()
            order.append(k)
            turns.give_back()
        callers.append(threading.Thread(target=call))
        callers[-1].start()
        _queued(turns, k + 1)
    turns.give_back()
    for t in callers:
        t.join(10)
    assert order == [0, 1, 2, 3]


def test_n_callers_hold_a_turn_at_once_and_the_next_waits():
    turns = Turns(2)
    both_in = threading.Barrier(3, timeout=10)   # the two holders and this test
    go = threading.Event()

    def hold():
        turns.take()
        both_in.wait()   # passes only while both hold a turn
        go.wait(10)
        turns.give_back()

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for t in holders:
        t.start()
    both_in.wait()
    third = threading.Thread(target=turns.take)
    third.start()
    _queued(turns, 1)   # the third waits
    go.set()
    for t in holders + [third]:
        t.join(10)
    assert not third.is_alive() and turns._free == 1   # two given back, one taken by the third


def test_a_turn_is_for_one_caller_at_least():
    with pytest.raises(ValueError):
        Turns(0)
