"""Decision stalls: the bound and the validity warning (pure), the seconds-since-acknowledged metric, the publisher's one
log line, and `validate` against an output cluster it cannot reach."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import ManualClock
from harness.ports import free_port
from quota_pipeline.kafka.publisher import DeliveryFailed, Publisher
from quota_pipeline.kafka.stall import StallCheck, longest_stall, request_timeout_ms, warning_for
from quota_pipeline.streaming.metrics import Metrics

# (request.timeout.ms, replica.lag.time.max.ms, longest wait measured in s): bench/RESULTS.md, Kafka 4.1
MEASURED = [(10000, 3000, 10.0), (30000, 3000, 30.0), (30000, 30000, 30.0), (60000, 30000, 60.0),
            (9000, 10000, 18.0), (4000, 10000, 12.1)]


@pytest.mark.parametrize("request_ms, lag_ms, measured", MEASURED)
def test_the_bound_covers_every_measured_stall(request_ms, lag_ms, measured):
    bound = longest_stall(request_ms / 1000, lag_ms / 1000)
    assert measured <= bound
    if request_ms >= 1.5 * lag_ms:  # the controller dropped the follower: the request timeout is the stall
        assert bound <= measured + 2.5


def test_a_retry_within_the_lag_waits_a_whole_request_timeout_again():
    # The failed follower still counts as caught up for one lag after its last fetch (measured: 9 s timeouts
    # against a 10 s lag stalled 18 s, past the 1.5-lag bound of 17 s).
    assert longest_stall(9, 10) == 20.0
    assert longest_stall(4, 10) == 17.0  # three timeouts (12 s) stay under 1.5 lags
    assert longest_stall(25, 30) == 52.0
    text = StallCheck("a", 1, 5, 9000, 10000).warning()
    assert text is not None and "max(2 x request.timeout.ms 9000, 1.5 x replica.lag.time.max.ms 10000)" in text


def test_a_follower_the_leader_drops_itself_is_bounded_by_one_and_a_half_lags():
    assert longest_stall(5, 30) == 47.0  # out of sync for 30 s, noticed within 15 s more


def test_the_defaults_are_covered_without_a_warning():
    # Strimzi's defaults: a 60 s interval and PT5M validity against 30 s timeouts.
    assert StallCheck("a.properties", 60, 300, 30000, 30000).warning() is None


def test_a_validity_shorter_than_interval_plus_stall_warns_with_the_numbers_and_the_fix():
    text = StallCheck("east.properties", 1, 5, 6000, 3000).warning()
    assert text is not None and text.startswith("east.properties: ")
    assert "max(request.timeout.ms 6000, 1.5 x replica.lag.time.max.ms 3000) + 2 s" in text
    assert f"set {cfg.VALIDITY} to at least PT9S" in text
    assert "lower" not in text  # 2 s of room: no timeout that short is sensible


def test_the_advice_lowers_what_bounds_the_stall():
    only_timeout = StallCheck("a", 60, 120, 60000, 10000).warning()
    assert only_timeout is not None and "request.timeout.ms to 58000" in only_timeout
    assert "replica.lag.time.max.ms on the output" not in only_timeout
    both = StallCheck("a", 60, 90, 30000, 30000).warning()
    assert both is not None and "PT107S" in both
    assert "request.timeout.ms to 28000" in both and "replica.lag.time.max.ms on the output cluster's brokers to 18666" \
        in both


def config(tmp_path: Path, name: str, validity: str, **extra: str) -> cfg.Config:
    return cfg.parse({cfg.HARD_BYTES: "1", cfg.BOOTSTRAP: "127.0.0.1:9092", cfg.CHECK_INTERVAL_SECONDS: "1",
                      cfg.VALIDITY: validity, **extra}, str(tmp_path / name))


def test_one_warning_for_all_configs_naming_the_worst_in_full(tmp_path):
    confs = [config(tmp_path, "a.properties", "PT30S"), config(tmp_path, "b.properties", "PT10S"),
             config(tmp_path, "c.properties", "PT20S")]
    text = warning_for(confs, 3000)
    assert text is not None and text.startswith(f"{tmp_path / 'b.properties'}: ")
    assert text.endswith(f"likewise 2 other config(s): {tmp_path / 'c.properties'}, {tmp_path / 'a.properties'}")
    # PT30S does not cover 1 s + the default 30 s request timeout + 2 s; with a 10 s timeout it does.
    assert warning_for(confs[:1], 3000) is not None
    assert warning_for([config(tmp_path, "a.properties", "PT30S",
                               **{cfg.OUTPUT_KAFKA_PREFIX + "request.timeout.ms": "10000",
                                  cfg.OUTPUT_KAFKA_PREFIX + "bootstrap.servers": "x:1"})], 3000) is None


def test_request_timeout_comes_from_the_output_settings():
    assert request_timeout_ms({}) == 30000
    assert request_timeout_ms({"request.timeout.ms": "6000"}) == 6000


def scrape(metrics: Metrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(("quota_pipeline_last_acknowledged_decision_age_seconds{",
                            "quota_pipeline_seconds_since_last_acknowledged_decision{",
                            "quota_pipeline_last_acknowledged_decision_timestamp_seconds{")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_seconds_since_the_last_acknowledged_decision_grows_during_a_stall_and_resets():
    clock = ManualClock()
    metrics = Metrics(clock=clock)
    since = 'quota_pipeline_last_acknowledged_decision_age_seconds{cluster="east"}'
    assert since not in scrape(metrics)
    clock.advance(4)
    metrics.awaiting(["east"])  # never acknowledged: counts from the job's start
    assert scrape(metrics)[since] == 4.0
    metrics.acknowledged("east")
    clock.advance(31)  # a stall: nothing acknowledged, and the scrape still sees it grow
    assert scrape(metrics)[since] == 31.0
    metrics.acknowledged("east")
    seen = scrape(metrics)
    assert seen[since] == 0.0
    assert seen['quota_pipeline_last_acknowledged_decision_timestamp_seconds{cluster="east"}'] == \
        clock.now().timestamp()
    clock.advance(5)  # the name before metric names ended in their unit is still served, for one release
    seen = scrape(metrics)
    assert seen['quota_pipeline_seconds_since_last_acknowledged_decision{cluster="east"}'] == seen[since] == 5.0


def test_a_stall_is_logged_once_with_what_the_publisher_waits_for(caplog):
    # Nothing listens: no acknowledgement ever comes, as in a stall, until the flush timeout fails the batch.
    publisher = Publisher({"bootstrap.servers": f"127.0.0.1:{free_port()}", "request.timeout.ms": "6000"},
                          "decisions", flush_timeout=5.0)
    acknowledged = []
    publisher.on_acknowledged = acknowledged.append
    with caplog.at_level(logging.WARNING, logger="quota_pipeline.kafka.publisher"):
        with pytest.raises(DeliveryFailed):
            publisher.publish([("east", "{}"), ("west", "{}")])
    publisher.abandon()
    lines = [r.getMessage() for r in caplog.records if "not acknowledged for" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("publisher: 2 decision(s) for east, west not acknowledged for 3.")
    assert "topic decisions" in lines[0] and "acks=all waits until every in-sync replica" in lines[0]
    assert "request.timeout.ms 6000" in lines[0]
    assert acknowledged == []


def test_validate_says_it_could_not_check_an_unreachable_output_cluster(tmp_path, capsys):
    from quota_pipeline.cli import main

    path = tmp_path / "a.properties"
    path.write_text(f"{cfg.HARD_BYTES}=1\n{cfg.BOOTSTRAP}=127.0.0.1:{free_port()}\n{cfg.VALIDITY}=PT5S\n")
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "note: could not read replica.lag.time.max.ms from the output cluster" in err
    assert "warning" not in err and "error" not in err.split("(")[0]
