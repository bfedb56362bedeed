"""The fault campaign's checker over made-up histories: it passes a safe one and fails each kind of violation."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

from verify import checker as cc

T0 = 1_800_000_000.5  # the made-up job observes on its intervals' starts (T0 + t - 0.5, t even)
HARD = 1000
META = cc.Meta(interval_s=2.0, validity_s=10.0, hard_limit_bytes=HARD, fallback=1.0, stop_limit_bytes_per_s=1000.0,
               producers=2, brokers=3, request_bytes=1000, seed=7, start=T0, end=T0 + 100)


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def record(t: float, factor: float, source: str = "OBSERVATION", delay: float = 0.5, validity: float = 10.0) -> dict:
    observed = t - delay
    return {"cluster_id": "c", "observed_at": iso(observed), "throttle_factor": factor, "source": source,
            "valid_until": None if source == "FALLBACK" else iso(observed + validity), "status": "SUCCESS"}


def published(factors: dict[float, float] | list[tuple[float, float]]) -> list[cc.Published]:
    items = factors.items() if isinstance(factors, dict) else factors
    return [cc.Published(T0 + t, 0, i, "c", json.dumps(record(T0 + t, f))) for i, (t, f) in enumerate(items)]


def every(start: float, end: float, factor_of) -> dict[float, float]:
    """A decision every interval from `start` to `end` (seconds after T0), factor by time."""
    out, t = {}, start
    while t < end:
        out[t] = factor_of(t)
        t += META.interval_s
    return out


def disks(low_from: float, low_to: float, node: int = 1) -> list[cc.DiskSample]:
    """Node `node`'s tmpfs sampled every 0.5 s, at or below HARD in [low_from, low_to)."""
    return [cc.DiskSample(T0 + t / 2, node, "/d", 10 if low_from <= t / 2 < low_to else 50_000)
            for t in range(0, 200)]


def history(pub, disk, faults=(), producers=(), log=(), runs=None, replayed=None, meta=META) -> cc.History:
    runs = [cc.JobRun(T0, None, None, "campaign")] if runs is None else runs
    return cc.History(meta, disk, pub, list(faults), list(producers), runs, list(log), replayed)


def safe_factor(t: float) -> float:
    return 0.0 if 22 <= t < 52 else 1.0  # low from 20 to 50: throttled at 22, released at 52


def props(report: cc.Report) -> list[str]:
    return [v.prop for v in report.violations]


def test_a_safe_history_has_no_violation_and_states_its_allowances():
    report = cc.check(history(published(every(0, 100, safe_factor)), disks(20, 50)), "c")
    assert report.violations == [] and report.explained == []
    assert report.decisions == 50
    assert abs(report.p99_delay_s - 0.5) < 1e-6 and abs(report.detection_allowance_s - 2.5) < 1e-6
    assert max(report.detection_delays) == 2.0 and max(report.release_delays) == 2.0
    text = cc.render(report, META)
    assert "0 violations" in text and "interval 2 s + p99 delay 0.5 s" in text
    assert "p99 spacing of the job's observations 2.0 s" in text


def test_an_early_release_while_the_log_dir_is_still_low_is_a_violation():
    early = every(0, 100, lambda t: 0.0 if 22 <= t < 40 else 1.0)  # released at 40, still low until 50
    report = cc.check(history(published(early), disks(20, 50)), "c")
    assert props(report) == ["unsafe-release"]
    v = report.violations[0]
    assert v.start == T0 + 40 and v.end == T0 + 50 and not v.explained
    assert "node 1 /d at or below the hard limit" in cc.line(v, T0)


def test_a_detection_slower_than_the_interval_plus_p99_delay_is_a_violation():
    slow = every(0, 100, lambda t: 0.0 if 28 <= t < 52 else 1.0)
    report = cc.check(history(published(slow), disks(20, 50)), "c")
    assert props(report) == ["unsafe-release"]
    assert report.violations[0].start == T0 + 22.5  # 20 + interval 2 + p99 delay 0.5


def test_a_job_that_skipped_intervals_is_held_to_its_first_observation_after_the_crossing():
    """On a starved machine Spark skips intervals while a batch runs long: observations 8 s apart at a 2-s interval.
    The first observation that started with the dir low decides; whether it stops is the job's logic, how late it
    came is its speed (the spacing, reported)."""
    def late(factor_of) -> list[tuple[float, float]]:
        return [(t, factor_of(t)) for t in range(2, 100, 8)]  # observed 0.5 s before
    stops = cc.check(history(published(late(lambda t: 0.0 if 20 <= t < 52 else 1.0)), disks(20, 50)), "c")
    assert stops.violations == [] and stops.detection_delays == [6.0]
    assert "p99 spacing of the job's observations 8.0 s" in cc.render(stops, META)
    misses = cc.check(history(published(late(lambda t: 0.0 if 30 <= t < 52 else 1.0)), disks(20, 50)), "c")
    assert props(misses) == ["unsafe-release"]
    assert misses.violations[0].start == T0 + 26  # the first observation after 20 (its interval) + the p99 delay


def test_the_delay_runs_from_the_start_of_the_observations_interval():
    """The seed 11 enforce run: a poll that starts late in its interval (Spark still busy with the batch before) is
    part of the job's delay. There a dir crossed the limit just after one poll and the next, late, was published 3.3 s
    after the crossing; the former checker measured the delay from the poll and allowed 3.2 s."""
    base = T0 - 0.5  # an interval starts here
    def decision(start: float, lag: float, factor: float) -> cc.Published:  # polled `lag` into its interval
        rec = {**record(base + start + lag + 0.5, factor), "observed_at": iso(base + start + lag)}
        return cc.Published(base + start + lag + 0.5, 0, int(start), "c", json.dumps(rec))
    pub = [decision(s, 1.0 if s == 22 else 0.2, 0.0 if 22 <= s < 50 else 1.0) for s in range(0, 100, 2)]
    low = [cc.DiskSample(base + t / 2, 1, "/d", 10 if 20.3 <= t / 2 < 50 else 50_000) for t in range(0, 200)]
    report = cc.check(history(pub, low), "c")
    assert report.detection_delays == [3.0]  # low from 20.5 (the first sample), 0.0 arrived at 23.5
    assert abs(report.p99_delay_s - 1.5) < 1e-6 and report.violations == []  # the former: 0.5 s, unsafe-release
    assert abs(report.detection_allowance_s - 3.5) < 1e-6


def test_a_low_log_dir_on_a_stopped_broker_is_only_due_once_the_broker_has_been_up():
    late = every(0, 100, lambda t: 0.0 if 42 <= t < 52 else 1.0)
    stopped = [cc.Fault("kill9", "node1", T0 + 10, T0 + 40)]
    assert cc.check(history(published(late), disks(20, 50), stopped), "c").violations == []
    elsewhere = [cc.Fault("kill9", "node2", T0 + 10, T0 + 40)]
    assert "unsafe-release" in props(cc.check(history(published(late), disks(20, 50), elsewhere), "c"))


def test_a_release_later_than_the_bound_is_a_violation():
    sticky = every(0, 100, lambda t: 0.0 if 22 <= t < 70 else 1.0)
    report = cc.check(history(published(sticky), disks(20, 50)), "c")
    assert props(report) == ["release"]
    assert "(1.0 after 20.0 s)" in report.violations[0].what


def test_a_log_dir_that_ran_out_of_space_stays_low_until_its_broker_restarts():
    """Kafka takes a dir offline at ENOSPC until its broker restarts, and the default offline policy holds its last
    reading: the throttle held after the dir was freed is no late release, a release before the restart is unsafe,
    and after the restart the release is due again."""
    enospc = [cc.DiskSample(T0 + t / 2, 1, "/d", 0 if 20 <= t / 2 < 30 else (10 if 30 <= t / 2 < 50 else 50_000))
              for t in range(0, 200)]  # full to the last byte in [20, 30), low until 50, then freed
    restart = [cc.Fault("stop", "node1", T0 + 60, T0 + 66)]
    held = every(0, 100, lambda t: 0.0 if 22 <= t < 68 else 1.0)  # released 2 s after the restart
    assert cc.check(history(published(held), enospc, restart), "c").violations == []
    early = every(0, 100, lambda t: 0.0 if 22 <= t < 54 else 1.0)  # released once freed, before the restart
    assert props(cc.check(history(published(early), enospc, restart), "c")) == ["unsafe-release"]
    sticky = every(0, 100, lambda t: 0.0 if 22 <= t < 90 else 1.0)  # still throttled long after the restart
    assert props(cc.check(history(published(sticky), enospc, restart), "c")) == ["release"]


def test_a_dir_that_touched_0_bytes_is_offline_only_if_kafka_said_so():
    """A history that records Kafka's own offline events (the brokers' `Stopping serving logs in dir`): a dir filled
    to 0 bytes that Kafka kept online is usable again once freed (a release then is due, not unsafe); one Kafka took
    offline stays low until its broker restarts, whatever the disk shows."""
    enospc = [cc.DiskSample(T0 + t / 2, 1, "/d", 0 if 20 <= t / 2 < 30 else (10 if 30 <= t / 2 < 50 else 50_000))
              for t in range(0, 200)]  # full to the last byte in [20, 30), low until 50, then freed
    restart = [cc.Fault("stop", "node1", T0 + 60, T0 + 66)]
    released_when_freed = every(0, 100, lambda t: 0.0 if 22 <= t < 54 else 1.0)
    online = dataclasses.replace(history(published(released_when_freed), enospc, restart), offline=[])
    assert cc.check(online, "c").violations == []
    went = [(T0 + 20.5, 1, "/d/")]  # Kafka's path may end in a slash
    offline = dataclasses.replace(history(published(released_when_freed), enospc, restart), offline=went)
    assert props(cc.check(offline, "c")) == ["unsafe-release"]
    held = every(0, 100, lambda t: 0.0 if 22 <= t < 68 else 1.0)  # released 2 s after the restart
    assert cc.check(dataclasses.replace(history(published(held), enospc, restart), offline=went), "c").violations == []


def test_a_dir_kafka_took_offline_during_its_brokers_restart_stays_low_until_the_next_restart():
    """The campaign's seed 11 (enforce): node 2 killed -9 while its dir was filled; starting again, Kafka took the dir
    offline before the restart was over (the fault's end), and it stayed offline when the ballast was freed. The
    former checker ended the offline span at that same restart and called the job's factor 0 a late release."""
    filled = [cc.DiskSample(T0 + t / 2, 1, "/d", 0 if 20 <= t / 2 < 40 else 50_000) for t in range(0, 200)]
    faults = [cc.Fault("kill9", "node1", T0 + 10, T0 + 24), cc.Fault("stop", "node1", T0 + 70, T0 + 76)]
    went = [(T0 + 23.5, 1, "/d")]  # logged while node 1 was starting, before the kill9 fault's end
    held = every(0, 100, lambda t: 0.0 if 26 <= t < 78 else 1.0)  # held while offline, released after the restart
    assert cc.check(dataclasses.replace(history(published(held), filled, faults), offline=went), "c").violations == []
    freed = every(0, 100, lambda t: 0.0 if 26 <= t < 42 else 1.0)  # released when the disk was freed: unsafe
    report = cc.check(dataclasses.replace(history(published(freed), filled, faults), offline=went), "c")
    assert props(report) == ["unsafe-release"] and report.violations[0].start == T0 + 42
    # A fill to ENOSPC restarts its node at its end: the line came from the process that restart replaces.
    enospc = [cc.Fault("fill_enospc", "node1", T0 + 15, T0 + 40)]
    released = every(0, 100, lambda t: 0.0 if 22 <= t < 42 else 1.0)
    assert cc.check(dataclasses.replace(history(published(released), filled, enospc), offline=went), "c"
                    ).violations == []


def test_a_gap_longer_than_the_validity_is_a_violation_unless_a_fault_stopped_publication():
    gappy = {t: f for t, f in every(0, 100, lambda t: 1.0).items() if not 30 < t < 50}
    report = cc.check(history(published(gappy), disks(200, 200)), "c")
    assert props(report) == ["gap"] and "no decision for 20.0 s" in report.violations[0].what
    stopped = [cc.Fault("output_stop", "output", T0 + 31, T0 + 45)]
    report = cc.check(history(published(gappy), disks(200, 200), stopped), "c")
    assert report.violations == [] and [v.prop for v in report.explained] == ["gap"]
    assert report.explained[0].faults == ("output_stop@output",)
    later = [cc.Fault("output_stop", "output", T0 + 51, T0 + 60)]  # starts after the gap: explains none of it
    assert props(cc.check(history(published(gappy), disks(200, 200), later), "c")) == ["gap"]
    paused = [cc.Fault("pause", "node2", T0 + 31, T0 + 45)]  # the topic is elsewhere: no excuse
    assert props(cc.check(history(published(gappy), disks(200, 200), paused), "c")) == ["gap"]


def test_an_unexplained_exception_in_the_job_log_and_an_exit_are_violations():
    pub = published(every(0, 100, lambda t: 1.0))
    log = [(T0 + 10, "INFO all fine"), (T0 + 30, "Traceback (most recent call last):"),
           (T0 + 61, "ERROR publishing failed: broker down"),
           (T0 + 70, "ERROR Encountered metadata publishing fault: KAFKA-20746"),
           (T0 + 101, "java.lang.InterruptedException")]  # after the end: the campaign stopping the job
    faults = [cc.Fault("output_stop", "output", T0 + 50, T0 + 58)]
    runs = [cc.JobRun(T0, T0 + 99, 1, "exited")]
    report = cc.check(history(pub, disks(200, 200), faults, log=log, runs=runs), "c")
    assert [(v.prop, v.start - T0) for v in report.violations] == [("job-log", 30.0), ("job-exit", 99.0)]
    assert [(v.prop, v.start - T0) for v in report.explained] == [("job-log", 61.0)]


def test_more_than_the_stop_limit_admitted_at_factor_0_is_a_violation():
    pub = published(every(0, 100, safe_factor))

    def samples(rate: float) -> list[cc.ProducerSample]:
        return [cc.ProducerSample(T0 + t, c, int(rate * t), 0) for c in ("a", "b") for t in range(0, 100)]
    ok = cc.check(history(pub, disks(20, 50), producers=samples(2000)), "c")  # 2 x 2000 < 3 x 2 x 1000
    assert ok.violations == []
    bad = cc.check(history(pub, disks(20, 50), producers=samples(5000)), "c")
    assert props(bad) == ["admitted"] and "10000 B/s acknowledged at factor 0" in bad.violations[0].what


def test_where_writes_are_refused_nothing_but_the_requests_in_flight_may_be_acknowledged_at_factor_0():
    """The refusing stop's variant: the stop limit is 0, so a producer still acknowledged at a trickle after the grace
    is a violation, while the requests in flight when the stop arrived (one per client and broker) are not."""
    pub = published(every(0, 100, safe_factor))
    refuse = dataclasses.replace(META, stop_limit_bytes_per_s=0.0, enforcer="refuse")
    stop_from, stop_to = T0 + 22.5 + META.grace_s, T0 + 52.5

    def samples(trickle: float, in_flight: int) -> list[cc.ProducerSample]:
        def acked(t: float) -> int:  # 1000 B/s until the stop, then what was in flight, then the trickle
            during = max(0.0, min(t, stop_to) - stop_from)
            return int(1000 * min(t - T0, 22.0) + (in_flight if t > stop_from + 0.5 else 0) + trickle * during)
        return [cc.ProducerSample(T0 + t / 4, c, acked(T0 + t / 4), 0) for c in ("a", "b") for t in range(0, 400)]
    ok = cc.check(history(pub, disks(20, 50), producers=samples(0.0, 2000), meta=refuse), "c")
    assert "admitted" not in props(ok)
    bad = cc.check(history(pub, disks(20, 50), producers=samples(200.0, 0), meta=refuse), "c")
    assert "admitted" in props(bad)


def backlog_at(burst_at: float) -> list[cc.ProducerSample]:
    """Two clients at 500 B/s whose 1 MB backlog each goes through at `burst_at` seconds."""
    return [cc.ProducerSample(T0 + t / 4, c, int(500 * t / 4) + (1_000_000 if t / 4 >= burst_at else 0), 0)
            for c in ("a", "b") for t in range(0, 400)]


def test_a_stop_ending_by_expiry_is_judged_until_one_interval_before_it():
    """The output cluster stops at 39 s: the last record (observed 37.5 s) expires at 47.5 s. A broker that missed
    it falls back at 45.5 s, and the clients' backlog (1 MB) goes through then: not the stop's. The same backlog
    through at 43 s is."""
    pub = published(every(0, 40, safe_factor))
    stop = [cc.Fault("output_stop", "output", T0 + 39, T0 + 70, {})]
    late = cc.check(history(pub, disks(20, 50), stop, producers=backlog_at(46.0)), "c")
    assert "admitted" not in props(late)
    early = cc.check(history(pub, disks(20, 50), stop, producers=backlog_at(43.0)), "c")
    assert "admitted" in props(early)


def test_a_broker_stopped_during_an_outage_falls_back_when_its_own_last_record_expires():
    """Node 1 is stopped from 30 s to 60 s and the output cluster from 39 s: node 1 restarts with the record it
    read last (arrived 28 s, expires 37.5 s) and falls back then, while the others hold the stop until 47.5 s. Its
    clients' backlog through at 38 s is not the stop's; the same backlog through at 34 s is."""
    pub = published(every(0, 40, safe_factor))
    faults = [cc.Fault("output_stop", "output", T0 + 39, T0 + 70, {}), cc.Fault("stop", "node1", T0 + 30, T0 + 60, {})]
    late = cc.check(history(pub, disks(20, 50), faults, producers=backlog_at(38.0)), "c")
    assert "admitted" not in props(late)
    early = cc.check(history(pub, disks(20, 50), faults, producers=backlog_at(34.0)), "c")
    assert "admitted" in props(early)


def test_a_replay_that_differs_from_what_was_published_is_a_violation():
    pub = published(every(0, 100, safe_factor))
    replayed = [json.loads(p.value) for p in pub]
    assert cc.check(history(pub, disks(20, 50), replayed=replayed), "c").violations == []
    replayed[15] = {**replayed[15], "throttle_factor": 1.0}
    report = cc.check(history(pub, disks(20, 50), replayed=replayed[:-1]), "c")
    assert props(report) == ["replay", "replay"]


def test_forged_records_are_ignored_and_any_other_unreadable_record_is_a_violation():
    pub = published(every(0, 100, safe_factor))
    junk = cc.Published(T0 + 30, 0, 999, "c", "{not json")
    future = cc.Published(T0 + 31, 0, 1000, "c", json.dumps(record(T0 + 3600, 1.0)))
    forge = [cc.Fault("forge_malformed", "topic", T0 + 30, T0 + 30, {"offsets": [[0, 999]]}),
             cc.Fault("forge_future", "topic", T0 + 31, T0 + 31, {"offsets": [[0, 1000]]})]
    report = cc.check(history(pub + [junk, future], disks(20, 50), forge), "c")
    assert report.violations == [] and report.forged == 2
    report = cc.check(history(pub + [junk], disks(20, 50)), "c")
    assert props(report) == ["record"]


def test_a_future_dated_record_the_campaign_did_not_forge_is_refused_by_the_brokers_model():
    pub = published(every(0, 100, safe_factor)) + [
        cc.Published(T0 + 30, 0, 1000, "c", json.dumps(record(T0 + 3600, 1.0)))]
    assert cc.check(history(pub, disks(20, 50)), "c").violations == []


def test_the_fallback_applies_past_valid_until():
    pub = published({0.0: 1.0, 21.0: 0.0})  # nothing after 21: valid until 30.5, then fallback 1.0
    short = dataclasses.replace(META, end=T0 + 45)
    report = cc.check(history(pub, disks(20, 45), meta=short, runs=[]), "c")
    assert [(v.prop, v.start - T0) for v in report.violations] == [("unsafe-release", 30.5)]


def test_the_command_reads_a_history_directory_and_exits_1_on_a_violation(tmp_path: Path, capsys):
    early = published(every(0, 100, lambda t: 0.0 if 22 <= t < 40 else 1.0))
    (tmp_path / "meta.json").write_text(json.dumps({**dataclasses.asdict(META), "cluster": "c"}))
    (tmp_path / "published.jsonl").write_text("".join(json.dumps(dataclasses.asdict(p)) + "\n" for p in early))
    (tmp_path / "disks.jsonl").write_text("".join(json.dumps(dataclasses.asdict(d)) + "\n" for d in disks(20, 50)))
    (tmp_path / "job.tlog").write_text(f"{T0 + 5}\tstarted\n")
    assert cc.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION unsafe-release" in out and "seed 7:" in out
    assert cc.main([str(tmp_path / "nowhere")]) == 2


def test_the_checker_imports_nothing_of_the_pipeline():
    import ast
    tree = ast.parse(Path(cc.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported and not any(m.split(".")[0] in ("quota_pipeline", "tests") for m in imported), imported
