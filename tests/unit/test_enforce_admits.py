"""What `enforce` states at start about a stop at its setting, and where it warns that the total has no bound."""
from __future__ import annotations

from quota_pipeline.core.stop import StopLimit
from quota_pipeline.enforce import admits
from quota_pipeline.enforce.plan import throttle_floor


def test_the_default_mutes_a_1_mib_request_60_s_and_admits_about_17_6_kb_s_per_librdkafka_client():
    stop = StopLimit()
    floor = throttle_floor(stop)
    assert floor == 14979
    assert round(admits.throttle_mute_seconds(stop, floor)) == 60
    assert round(admits.per_client(stop, floor)) == 17_618
    lines = admits.describe(stop, floor, produce_base=None)
    assert "each client gets 14979 bytes/s per broker" in lines[0] and "back within about 60 s" in lines[0]
    assert "300: 5.29 MB/s" in lines[1] and "8: 140.9 kB/s" in lines[1]


def test_small_requests_are_held_to_the_floor_itself():
    stop = StopLimit(max_mute_seconds=32)
    floor = throttle_floor(stop)
    assert admits.per_client(stop, floor, request_bytes=16384) == floor


def test_a_shorter_max_mute_admits_more_and_returns_sooner():
    short, long_ = StopLimit(max_mute_seconds=32), StopLimit(max_mute_seconds=120)
    assert admits.per_client(short, throttle_floor(short)) > 3 * admits.per_client(long_, throttle_floor(long_))
    assert admits.throttle_mute_seconds(short, throttle_floor(short)) < 33


def test_it_warns_that_graded_factors_grow_with_the_clients_and_that_no_produce_base_leaves_them_unlimited():
    assert len(admits.warnings(1_000_000.0)) == 1 and "grows with the number of clients" in admits.warnings(1.0)[0]
    assert any("stay unlimited" in w for w in admits.warnings(None))
