"""A task's clusters polled in threads: a few at a time while they keep this process busy, more while they wait.

Each poll waits on its cluster's brokers, so each gets a thread: a cluster that does not answer must delay no other.
But an answered poll is CPU in this process (kafka-python decoding, the journal, the packing) under one GIL, and
tens of them at once only traded the GIL between their threads: a quarter more CPU for the same polls. So at most
`in_flight` polls run at once while the process is busy; a poll running for `slow_after` seconds (a broker that
does not answer) no longer holds a place, and while the process is mostly idle (polls waiting on far brokers) one
more place opens every CHECK_S, so clusters far away are still polled side by side; busy again, the places are
`in_flight` again.
"""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

IN_FLIGHT = 4          # quick polls at once per task while the process is busy
SLOW_AFTER_S = 0.05    # a poll still running after this no longer holds a place
CHECK_S = 0.01
IDLE_SHARE = 0.5
MAX_THREADS = 64       # per task; each slow poll keeps its thread until its timeout


def poll_all(items: Sequence[T], poll: Callable[[T], R], in_flight: int = IN_FLIGHT,
             slow_after: float = SLOW_AFTER_S, max_threads: int = MAX_THREADS,
             monotonic: Callable[[], float] = time.monotonic,
             cpu: Callable[[], float] = time.process_time) -> list[R]:
    """poll(item) of every item, in the items' order; the first exception raised by a poll is raised."""
    if len(items) <= 1:
        return [poll(item) for item in items]  # no thread for one cluster (or none)
    results: list = [None] * len(items)
    running: dict[Future, tuple[int, float]] = {}  # the poll -> (its item, when it started)
    following, places = 0, in_flight
    checked, used = monotonic(), cpu()
    with ThreadPoolExecutor(min(len(items), max_threads), thread_name_prefix="poll") as pool:
        while following < len(items) or running:
            now = monotonic()
            if now - checked >= CHECK_S:
                idle = (cpu() - used) / (now - checked) < IDLE_SHARE
                places = min(max_threads, places + 1) if idle else in_flight
                checked, used = now, cpu()
            quick = [started for _, started in running.values() if now - started < slow_after]
            while following < len(items) and len(quick) < places:
                running[pool.submit(poll, items[following])] = (following, now)
                quick.append(now)
                following += 1
            # Wake when a poll ends, when the oldest quick one turns slow, or to follow the CPU use again.
            timeout = None
            if following < len(items):
                timeout = min(CHECK_S, max(0.0, min(quick) + slow_after - now)) if quick else CHECK_S
            done, _ = wait(list(running), timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                index, _ = running.pop(future)
                results[index] = future.result()
    return results
