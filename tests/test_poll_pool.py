"""streaming/poll_pool.py: a task's polls a few at a time while quick, and a cluster that does not answer delays none
of the others."""
from __future__ import annotations

import threading
import time

import pytest

from quota_pipeline.streaming.poll_pool import poll_all


def test_quick_polls_run_a_few_at_a_time_and_come_back_in_order():
    lock, now, most = threading.Lock(), [0], [0]

    def poll(i: int) -> int:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02)  # answered well within slow_after
        with lock:
            now[0] -= 1
        return i * 10

    assert poll_all(list(range(30)), poll, in_flight=4, slow_after=0.5, cpu=time.monotonic) == [i * 10 for i in range(30)]
    assert most[0] == 4  # a busy process (its CPU as busy as the clock)


def test_a_cluster_that_does_not_answer_delays_no_other():
    """Two polls among the first hang until every other cluster is polled: with their places held, that would never
    happen (they give up after 30 s and the test fails), however slow the machine."""
    hung, lock, finished = {0, 5}, threading.Lock(), set()
    others_done = threading.Event()

    def poll(i: int) -> int:
        if i in hung:
            if not others_done.wait(30):
                raise AssertionError("the other clusters waited on the ones that do not answer")
            return i
        time.sleep(0.01)
        with lock:
            finished.add(i)
            if len(finished) == 40 - len(hung):
                others_done.set()
        return i

    # The process counted busy (its CPU as the clock), so no place opens for idleness: only slowness frees them.
    assert poll_all(list(range(40)), poll, in_flight=2, slow_after=0.05, cpu=time.monotonic) == list(range(40))


def test_a_polls_error_is_raised():
    def poll(i: int) -> int:
        if i == 3:
            raise RuntimeError("boom")
        return i

    with pytest.raises(RuntimeError, match="boom"):
        poll_all(list(range(6)), poll)


def test_one_cluster_is_polled_without_a_thread():
    assert poll_all([7], lambda i: threading.current_thread() is threading.main_thread()) == [True]


def test_polls_waiting_on_far_brokers_are_polled_side_by_side():
    """Polls that only wait (the process idle) open more places: twelve wait together until all twelve run, which
    the four places of a busy process would never allow (their wait ends in 30 s and the test fails)."""
    together = threading.Barrier(12, timeout=30)

    def poll(i: int) -> int:
        together.wait()
        return i

    assert poll_all(list(range(12)), poll, in_flight=4, slow_after=60, cpu=lambda: 0.0) == list(range(12))
