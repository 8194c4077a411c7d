import threading
import time

import pytest

from autofusion.backend.turns import Turns


def _queued(turns: Turns, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(turns._waiting) < count:
        assert time.monotonic() < deadline, "a caller never queued"
        time.sleep(0.001)


def test_the_waiting_go_in_the_order_they_came_and_get_the_slot_given_back():
    turns = Turns(1)
    order: list[tuple[int, int]] = []
    held = turns.take()   # as by a call running
    callers = []
    for k in range(4):   # each queued before the next comes
        def call(k=k):
            slot = turns.take()
            order.append((k, slot))
            turns.give_back(slot)
        callers.append(threading.Thread(target=call))
        callers[-1].start()
        _queued(turns, k + 1)
    turns.give_back(held)
    for t in callers:
        t.join(10)
    assert order == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_n_callers_hold_a_slot_each_at_once_and_the_next_waits():
    turns = Turns(2)
    both_in = threading.Barrier(3, timeout=10)   # the two holders and this test
    go = threading.Event()
    slots: list[int] = []

    def hold():
        slot = turns.take()
        slots.append(slot)
        both_in.wait()   # passes only while both hold a slot
        go.wait(10)
        turns.give_back(slot)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for t in holders:
        t.start()
    both_in.wait()
    assert sorted(slots) == [0, 1]
    third = threading.Thread(target=lambda: slots.append(turns.take()))
    third.start()
    _queued(turns, 1)   # the third waits
    go.set()
    for t in holders + [third]:
        t.join(10)
    assert not third.is_alive() and len(turns._free) == 1 and slots[2] in (0, 1)


def test_a_turn_is_for_one_caller_at_least():
    with pytest.raises(ValueError):
        Turns(0)
