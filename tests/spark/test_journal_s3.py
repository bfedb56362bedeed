"""The journal on an object store (s3://), against a real S3-compatible server (S3Proxy, harness/s3proxy.py):
first writer wins per tick, a compaction killed midway loses and duplicates nothing, two racing passes cannot both
write a period, retention deletes whole periods, the command works there, and replay of the s3:// journal decides
as replay of the same journal on a local disk."""
from __future__ import annotations

import datetime as dt
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.journal_fixtures import T0, cluster, fill, first_tick, snapshot, view
from tests.unit.test_journal_compaction import Killed, kill_at
from quota_pipeline.cli import main
from quota_pipeline.journal import layout, object_storage
from quota_pipeline.journal.layout import Period
from quota_pipeline.journal.maintenance import Options, run_pass
from quota_pipeline.journal.store import Journal
from tests.support.s3proxy_fixtures import s3proxy  # noqa: F401 - the session's S3Proxy

HOUR = dt.timedelta(hours=1)
IV = 60  # seconds between ticks: 60 tick objects an hour keep the tests quick
AFTER = T0 + 3 * HOUR + dt.timedelta(minutes=5)  # every one of the three hours closed


@pytest.fixture
def root(s3proxy) -> str:  # noqa: F811
    """A fresh journal root in the bucket for each test."""
    return s3proxy.uri(f"journal-{uuid.uuid4().hex[:12]}")


def keys(s3proxy, root: str, suffix: str = "") -> list[str]:  # noqa: F811
    prefix = root.split("/", 3)[3] + "/"
    pages = s3proxy.client().get_paginator("list_objects_v2").paginate(Bucket=s3proxy.bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix):] for p in pages for o in p.get("Contents", []) if o["Key"].endswith(suffix))


def seen(root: str, tmp_path: Path) -> list:
    """Every snapshot replay's reader sees in the s3:// journal (copied as replay copies it), each once."""
    local = tmp_path / f"copy-{uuid.uuid4().hex[:8]}"
    object_storage.download(root, local)
    return view(local) if local.exists() else []


def three_hours(root: str) -> dict:
    start = first_tick(IV)
    return fill(Journal(root), "a", range(start, start + 3 * 3600 // IV), IV)


def test_first_writer_wins_per_tick_also_when_attempts_race(root, s3proxy):  # noqa: F811
    journal, tick = Journal(root), first_tick(IV)
    at = layout.tick_start(tick, IV)
    first, other = snapshot(tick, IV), snapshot(tick + 1, IV)
    assert journal.write("a", tick, at, first) == first
    assert journal.write("a", tick, at, other) == first  # the second attempt gets what the journal holds
    racing = [snapshot(tick + 1 + i, IV) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        held = list(pool.map(lambda s: journal.write("a", tick + 1, at + dt.timedelta(seconds=IV), s), racing))
    assert len(set(held)) == 1 and held[0] in racing  # one of them won, and every attempt was told which
    assert journal.read("a", tick + 1, at + dt.timedelta(seconds=IV)) == held[0]
    assert keys(s3proxy, root, ".json") == [f"a/{layout.tick_file(t, at)}" for t in (tick, tick + 1)]


def test_compaction_makes_one_period_file_per_closed_period_and_loses_nothing(root, s3proxy, tmp_path):  # noqa: F811
    written = three_hours(root)
    before = seen(root, tmp_path)
    assert len(before) == 3 * 3600 // IV
    report = run_pass(cluster(root, interval_s=IV), T0 + 3 * HOUR - dt.timedelta(seconds=30))
    assert [r.period for r in report.rewritten] == [str(Period.containing(T0 + i * HOUR, HOUR)) for i in (0, 1)]
    assert seen(root, tmp_path) == before
    assert len(keys(s3proxy, root, ".parquet")) == 2 and len(keys(s3proxy, root, ".json")) == 3600 // IV
    journal = Journal(root)
    for tick, snap in written.items():  # a re-run of any tick gets its first snapshot, compacted or not
        assert journal.read("a", tick, layout.tick_start(tick, IV)) == snap
        assert journal.write("a", tick, layout.tick_start(tick, IV), snapshot(tick + 1, IV)) == snap
    assert len(keys(s3proxy, root, ".json")) == 3600 // IV  # re-runs of compacted ticks left no tick file
    assert report.usage.periods_compacted == 2 and report.usage.periods_open == 1
    assert (report.usage.oldest, report.usage.newest) == (before[0].observed_at, before[-1].observed_at)


@pytest.mark.parametrize("step", ("writing", "lengths-recorded", "uploaded", "deleted-first"))
def test_a_compaction_killed_midway_loses_and_duplicates_nothing(root, s3proxy, tmp_path, step):  # noqa: F811
    three_hours(root)
    before = seen(root, tmp_path)
    with pytest.raises(Killed):
        run_pass(cluster(root, interval_s=IV), AFTER, Options(step=kill_at(step)))
    assert seen(root, tmp_path) == before  # a reader after the crash sees each snapshot once
    run_pass(cluster(root, interval_s=IV), AFTER)  # recovery: the next pass
    assert seen(root, tmp_path) == before
    assert keys(s3proxy, root, ".json") == [] and len(keys(s3proxy, root, ".parquet")) == 3


def test_of_two_racing_passes_one_writes_each_period_and_the_other_deletes_nothing(root, s3proxy, tmp_path):  # noqa: F811
    three_hours(root)
    before = seen(root, tmp_path)
    raced = []

    def rival(name: str) -> None:
        if name == "lengths-recorded" and not raced:  # between this pass's listing and its first PUT
            raced.append(run_pass(cluster(root, interval_s=IV), AFTER))
    report = run_pass(cluster(root, interval_s=IV), AFTER, Options(step=rival))
    assert sum(r.added for r in raced[0].rewritten) == len(before)  # the rival compacted all three hours
    assert [p for p in report.problems if "changed by another pass" in p]  # this pass's PUT was refused ...
    assert sum(r.added for r in report.rewritten) == 0  # ... and it moved nothing else
    assert seen(root, tmp_path) == before and keys(s3proxy, root, ".json") == []
    assert len(keys(s3proxy, root, ".parquet")) == 3


def test_retention_deletes_whole_periods_in_either_form(root, s3proxy, tmp_path):  # noqa: F811
    three_hours(root)
    run_pass(cluster(root, interval_s=IV), T0 + HOUR + dt.timedelta(minutes=5))  # the first hour compacted
    before = seen(root, tmp_path)
    cj = cluster(root, interval_s=IV, retention=AFTER - (T0 + 2 * HOUR))  # the first two hours expired
    with pytest.raises(Killed):  # a prune killed half-way: the next pass finishes it
        run_pass(cj, AFTER, Options(compact=False, step=kill_at("prune-period-files")))
    report = run_pass(cj, AFTER, Options(compact=False))
    assert [str(p.period) for p in report.pruned] == [str(Period.containing(T0 + HOUR, HOUR))]
    assert seen(root, tmp_path) == [s for s in before if s.observed_at >= T0 + 2 * HOUR]
    assert keys(s3proxy, root, ".parquet") == [] and len(keys(s3proxy, root, ".json")) == 3600 // IV
    assert report.usage.oldest >= T0 + 2 * HOUR


def conf(tmp_path: Path, root: str, **extra: str) -> str:
    path = tmp_path / "a.properties"
    props = {"client.quota.callback.static.storage.per.volume.limit.min.available.bytes": "1000",
             "client.quota.callback.static.storage.check-interval": str(IV), "quota.pipeline.cluster.name": "a",
             "quota.pipeline.journal.path": root, **extra}
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def test_the_journal_command_compacts_prunes_and_reports_an_s3_journal(root, s3proxy, tmp_path, capsys):  # noqa: F811
    now = dt.datetime.now(layout.UTC)
    start, end = first_tick(IV, now - 4 * HOUR), first_tick(IV, now - 2 * HOUR)
    fill(Journal(root), "a", range(start, end), IV)
    path = conf(tmp_path, root, **{"quota.pipeline.journal.retention": "PT3H"})
    assert main(["journal", "compact", "--config", path]) == 0
    out = capsys.readouterr().out
    assert out.count("a: compacted ") >= 2 and keys(s3proxy, root, ".json") == []
    assert main(["journal", "prune", "--config", path]) == 0
    assert "past retention" in capsys.readouterr().out
    assert main(["journal", "stats", "--config", path, "--json"]) == 0
    [stats] = json.loads(capsys.readouterr().out)
    assert stats["path"] == f"{root}/a" and stats["periods_open"] == 0 and stats["periods_compacted"] >= 1
    assert stats["files"] == len(keys(s3proxy, root)) and stats["oldest"] < stats["newest"]


def test_an_unreachable_store_is_one_error_line_without_the_secret(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-never-shown")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    path = conf(tmp_path, "s3://nowhere/journal")
    with pytest.raises(SystemExit) as exit_:
        main(["journal", "stats", "--config", path])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.startswith("error: s3://nowhere/journal/a/") and len(err.splitlines()) == 1
    assert "s3cr3t" not in err
def test_replay_of_the_s3_journal_decides_as_replay_of_the_same_journal_on_disk(spark, root, tmp_path):
    local = tmp_path / "journal"
    for r in (root, str(local)):
        three_hours(r)
        run_pass(cluster(r, interval_s=IV), T0 + 2 * HOUR + dt.timedelta(minutes=5))  # two periods compacted
    example = Path(__file__).resolve().parents[2] / "conf" / "examples" / "example.properties"
    outs = []
    for source in (root, str(local)):
        out = tmp_path / f"decisions-{len(outs)}.jsonl"
        assert main(["replay", "--config", str(example), "--input", source, "--output", str(out)]) == 0
        outs.append([{k: v for k, v in json.loads(line).items() if k != "decided_at"}  # the wall clock's
                     for line in out.read_text().splitlines()])
    assert len(outs[0]) == 3 * 3600 // IV and outs[0] == outs[1]
    assert {d["source"] for d in outs[0]} >= {"OBSERVATION"}


def test_the_jobs_background_maintenance_compacts_an_s3_journal_and_reports_its_size(root, s3proxy):  # noqa: F811
    import time

    from quota_pipeline.journal.background import Maintenance
    from quota_pipeline.streaming.metrics import Metrics

    now = dt.datetime.now(layout.UTC)
    fill(Journal(root), "a", range(first_tick(IV, now - 3 * HOUR), first_tick(IV, now - 2 * HOUR)), IV)
    metrics, reports = Metrics(), []
    m = Maintenance([cluster(root, interval_s=IV)], lambda r: (reports.append(r), metrics.record_journal(r)))
    m.start()
    deadline = time.monotonic() + 60
    while not reports and time.monotonic() < deadline:
        time.sleep(0.1)
    m.stop()
    assert reports and reports[0]["compacted"] and keys(s3proxy, root, ".json") == []
    assert metrics.registry.get_sample_value("quota_pipeline_journal_files", {"cluster": "a"}) == \
        len(keys(s3proxy, root))


def test_the_polling_task_journals_on_s3_and_a_rerun_reads_it_instead_of_polling(root, s3proxy, monkeypatch):  # noqa: F811
    from tests.support.builders import GB, ok, vol
    from quota_pipeline.core import config as cfg
    from quota_pipeline.core.model import Status, VolumeSnapshot
    from quota_pipeline.streaming import source

    conf = cfg.parse({cfg.HARD_BYTES: "1000", cfg.CHECK_INTERVAL_SECONDS: "10", cfg.BOOTSTRAP: "127.0.0.1:1",
                      cfg.CLUSTER_NAME: "a", cfg.CHECKPOINT_PATH: "/nonexistent/ckpt", cfg.JOURNAL_PATH: root})
    polls = []

    class Observer:
        def __init__(self, _conf):
            pass

        def poll(self):
            polls.append(1)
            if len(polls) == 1:
                return ok(1, vol(1, 50 * GB), cluster="real-id")
            return VolumeSnapshot("127.0.0.1:1", ok(0).observed_at, Status.TIMEOUT, message="timed out")

    monkeypatch.setattr("quota_pipeline.kafka.observer.Observer", Observer)
    monkeypatch.setattr(source, "_observers", {})
    first = source.poll_or_replay("a", conf, 42, "token-42")
    assert source.poll_or_replay("a", conf, 42, "token-rerun", rerun=True) == first and polls == [1]  # no second poll
    assert source.poll_or_replay("a", conf, 43, "token-43").cluster_id == "real-id"  # a failed poll, filed under the id
    assert keys(s3proxy, root) == sorted(["a/_cluster_id", *(f"a/{layout.tick_file(t, source.tick_time(conf, t))}"
                                                             for t in (42, 43))])


def test_late_ticks_extend_a_period_file_under_if_match_and_a_raced_extension_is_refused(root, s3proxy, tmp_path):  # noqa: F811
    journal, start = Journal(root), first_tick(IV)
    late = (start + 7, start + 8)  # journaled after their hour was compacted (a re-run after a long outage)
    fill(journal, "a", [t for t in range(start, start + 3600 // IV) if t not in late], IV)
    run_pass(cluster(root, interval_s=IV), AFTER)
    fill(journal, "a", late[:1], IV)
    assert len(seen(root, tmp_path)) == 3600 // IV - 1  # the late tick is read before it is merged
    raced = []

    def rival(name: str) -> None:  # another pass extends the period file between this one's listing and its PUT
        if name == "lengths-recorded" and not raced:
            fill(journal, "a", late[1:], IV)
            raced.append(run_pass(cluster(root, interval_s=IV), AFTER))
    report = run_pass(cluster(root, interval_s=IV), AFTER, Options(step=rival))
    assert [r.added for r in raced[0].rewritten] == [2]  # the rival merged both late ticks with If-Match ...
    assert [p for p in report.problems if "changed by another pass" in p] and report.rewritten == []  # ... so not this
    after = seen(root, tmp_path)
    assert len(after) == 3600 // IV and keys(s3proxy, root, ".json") == []
    assert [journal.read("a", t, layout.tick_start(t, IV)) for t in late] == [snapshot(t, IV) for t in late]
