"""Journal compaction and retention without Spark: layout, plan, crash safety at every step, the store after
compaction, a long run with a manual clock, the command, the job's background child."""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.journal_fixtures import T0, cluster, files, fill, first_tick, snapshot, view
from quota_pipeline.cli import main
from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.model import UTC
from quota_pipeline.journal import layout
from quota_pipeline.journal.layout import Period, Sources
from quota_pipeline.journal.local_storage import LocalStorage
from quota_pipeline.journal.maintenance import Options, run_pass
from quota_pipeline.journal.storage import JournalBusy
from quota_pipeline.journal.store import Journal

HOUR = dt.timedelta(hours=1)
IV = 30  # seconds between ticks in most tests
STEPS = ("lengths-recorded", "writing", "written", "renamed", "deleted-first", "deleted")


class Killed(BaseException):
    """A crash injected at a step (BaseException: nothing in the pass may catch it)."""


def kill_at(name: str):
    def step(current: str) -> None:
        if current == name:
            raise Killed(name)
    return step


def three_hours(tmp_path: Path, interval_s: float = IV) -> tuple[Journal, dict]:
    journal = Journal(str(tmp_path))
    start = first_tick(interval_s)
    return journal, fill(journal, "a", range(start, start + int(3 * 3600 / interval_s)), interval_s)


# -- layout and plan -------------------------------------------------------------------------------

def test_periods_are_aligned_to_the_epoch_and_named_by_their_bounds():
    p = Period.containing(dt.datetime(2026, 3, 1, 10, 59, 59, tzinfo=UTC), HOUR)
    assert (p.start, p.end) == (dt.datetime(2026, 3, 1, 10, tzinfo=UTC), dt.datetime(2026, 3, 1, 11, tzinfo=UTC))
    assert p.file == "2026-03-01/20260301T100000Z-20260301T110000Z.parquet"
    assert Period.from_file_name(p.file.split("/")[1]) == p
    assert Period.containing(dt.datetime(2026, 3, 1, 23, 30, tzinfo=UTC), dt.timedelta(days=1)).start == \
        dt.datetime(2026, 3, 1, tzinfo=UTC)


def test_a_tick_belongs_to_the_period_of_its_start_unless_the_interval_changed():
    tick = first_tick(10) + 359  # 00:59:50
    assert layout.tick_period("2026-03-01", tick, 10, HOUR) == Period.containing(T0, HOUR)
    assert layout.tick_period("2026-03-01", tick, 30, HOUR) is None  # another interval: another day


def test_sources_hold_tick_ranges_and_answer_membership():
    s = Sources.of(["2026-03-01/5.json", "2026-03-01/6.json", "2026-03-01/9.json", "2026-03-02/1.json"])
    assert s.to_json() == '{"2026-03-01":[[5,6],[9,9]],"2026-03-02":[[1,1]]}'
    assert "2026-03-01/6.json" in s and "2026-03-01/7.json" not in s and "2026-03-02/1.json" in s
    assert "2026-03-01/notes.json" not in s
    merged = Sources.merge([s, Sources.of(["2026-03-01/7.json", "2026-03-01/8.json"])])
    assert merged.ranges["2026-03-01"] == [(5, 9)] and len(merged) == 6
    assert Sources.from_json(merged.to_json()).ranges == merged.ranges


def test_a_period_closes_after_its_grace_and_expires_after_retention():
    p = Period.containing(T0, HOUR)
    ten_s = dt.timedelta(seconds=10)
    assert layout.grace(ten_s) == dt.timedelta(minutes=1)
    assert layout.grace(dt.timedelta(minutes=5)) == dt.timedelta(minutes=15)
    assert not layout.is_closed(p, p.end + dt.timedelta(seconds=59), ten_s)
    assert layout.is_closed(p, p.end + dt.timedelta(seconds=60), ten_s)
    assert layout.is_expired(p, p.end + HOUR, HOUR) and not layout.is_expired(p, p.end + HOUR - ten_s, HOUR)
    assert not layout.is_expired(p, p.end + dt.timedelta(days=999), dt.timedelta(0))  # PT0S keeps everything


# -- compaction ------------------------------------------------------------------------------------

def test_closed_periods_become_one_sorted_parquet_file_each_and_nothing_is_lost(tmp_path):
    journal, written = three_hours(tmp_path)
    before = view(tmp_path)
    now = T0 + 3 * HOUR - dt.timedelta(seconds=30)  # the third hour is still open
    report = run_pass(cluster(tmp_path, interval_s=IV), now)
    assert [r.period for r in report.rewritten] == [str(Period.containing(T0 + i * HOUR, HOUR)) for i in (0, 1)]
    assert view(tmp_path) == before
    assert len(files(tmp_path, "*.parquet")) == 2 and len(files(tmp_path, "*.json")) == 3600 // IV
    for f in files(tmp_path, "*.parquet"):
        table = pq.read_table(f)
        us = table.column("observed_us").to_pylist()
        assert us == sorted(us) and table.schema.field("total_bytes").type == "int64"
        assert pq.read_metadata(f).row_group(0).column(0).compression == "ZSTD"
    for tick, snap in written.items():  # a re-run of any tick finds its snapshot, compacted or not
        assert journal.read("a", tick, layout.tick_start(tick, IV)) == snap
    assert report.usage.periods_compacted == 2 and report.usage.periods_open == 1
    assert report.usage.oldest == min(s.observed_at for s in before)
    assert report.usage.newest == max(s.observed_at for s in before)


@pytest.mark.parametrize("step", STEPS)
def test_a_compaction_killed_at_any_step_loses_and_duplicates_nothing(tmp_path, step):
    three_hours(tmp_path)
    before = view(tmp_path)
    now = T0 + 3 * HOUR + dt.timedelta(minutes=5)
    with pytest.raises(Killed):
        run_pass(cluster(tmp_path, interval_s=IV), now, Options(step=kill_at(step)))
    assert view(tmp_path) == before   # a reader in between sees each snapshot once
    run_pass(cluster(tmp_path, interval_s=IV), now)  # recovery: the next pass
    assert view(tmp_path) == before
    assert files(tmp_path, "*.json") == [] and len(files(tmp_path, "*.parquet")) == 3
    assert [p for p in tmp_path.rglob(".*") if p.is_file()] == []  # no temporary file left behind


KILLER = textwrap.dedent("""
    import datetime as dt, os, signal, sys
    from quota_pipeline.journal.maintenance import ClusterJournal, Options, run_pass
    def step(name):
        if name == sys.argv[2]:
            os.kill(os.getpid(), signal.SIGKILL)
    cj = ClusterJournal(sys.argv[1], "a", dt.timedelta(seconds=int(sys.argv[4])), dt.timedelta(hours=1),
                        dt.timedelta(days=30))
    run_pass(cj, dt.datetime.fromisoformat(sys.argv[3]), Options(step=step))
""")


@pytest.mark.parametrize("step", ("written", "renamed", "deleted-first", "prune-period-files"))
def test_kill_9_at_a_step_then_recovery_equals_the_journal_before(tmp_path, step):
    three_hours(tmp_path)
    now = T0 + 3 * HOUR + dt.timedelta(minutes=5)
    if step.startswith("prune"):
        run_pass(cluster(tmp_path, interval_s=IV), now)  # compacted first; the killed pass deletes the 1st hour
        now = T0 + HOUR + dt.timedelta(days=30)
    before = [s for s in view(tmp_path) if not step.startswith("prune") or s.observed_at >= T0 + HOUR]
    proc = subprocess.run([sys.executable, "-c", KILLER, str(tmp_path), step, now.isoformat(), str(IV)],
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == -signal.SIGKILL
    run_pass(cluster(tmp_path, interval_s=IV), now)
    assert view(tmp_path) == before


@pytest.mark.parametrize("step", ("prune-leftovers", "prune-period-files", "prune-ticks-first"))
def test_a_prune_killed_half_way_is_finished_by_the_next_pass(tmp_path, step):
    journal, written = three_hours(tmp_path)
    start = first_tick(IV)
    stray = start + 100
    (tmp_path / "a" / layout.tick_file(stray, layout.tick_start(stray, IV))).unlink()
    run_pass(cluster(tmp_path, interval_s=IV), T0 + HOUR + dt.timedelta(minutes=5))  # the first hour, without it
    journal.write("a", stray, layout.tick_start(stray, IV), written[stray])  # then journaled late
    for tick in range(start, start + 3):  # and leftovers, as an interrupted compaction leaves them
        (tmp_path / "a" / layout.tick_file(tick, layout.tick_start(tick, IV))).write_text(
            json.dumps(written[tick].to_json()) + "\n")
    later = T0 + HOUR + dt.timedelta(days=30, minutes=30)  # the first hour is past retention, the others not
    kept = [s for s in view(tmp_path) if s.observed_at >= T0 + HOUR]
    with pytest.raises(Killed):
        run_pass(cluster(tmp_path, interval_s=IV), later, Options(step=kill_at(step)))
    assert set(view(tmp_path)) >= set(kept)  # only expired snapshots may be gone so far
    run_pass(cluster(tmp_path, interval_s=IV), later)
    assert view(tmp_path) == kept
    assert not (tmp_path / "a" / "2026-03-01" / f"{start}.json").exists()


def test_a_late_tick_in_a_compacted_period_is_read_then_merged_in_order(tmp_path):
    journal, written = three_hours(tmp_path)
    now = T0 + 3 * HOUR + dt.timedelta(minutes=5)
    start = first_tick(IV)
    late = start + 100  # as if its batch ran only after an outage: it was never journaled
    (tmp_path / "a" / layout.tick_file(late, layout.tick_start(late, IV))).unlink()
    run_pass(cluster(tmp_path, interval_s=IV), now)
    snap = snapshot(late, IV)
    assert journal.write("a", late, layout.tick_start(late, IV), snap) == snap
    assert snap in view(tmp_path) and journal.read("a", late, layout.tick_start(late, IV)) == snap
    report = run_pass(cluster(tmp_path, interval_s=IV), now)
    assert [(r.added, r.removed) for r in report.rewritten] == [(1, 1)]
    assert files(tmp_path, "*.json") == [] and view(tmp_path) == sorted(written.values(), key=lambda s: s.observed_at)
    us = pq.read_table(tmp_path / "a" / Period.containing(T0, HOUR).file).column("observed_us").to_pylist()
    assert us == sorted(us)


def test_a_period_file_written_before_topics_reads_them_as_not_known_and_takes_late_ticks(tmp_path):
    from dataclasses import replace

    journal, written = three_hours(tmp_path)
    now = T0 + 3 * HOUR + dt.timedelta(minutes=5)
    start = first_tick(IV)
    late = next(t for t in range(start + 100, start + 200) if t % 5 and t % 13)  # a poll with topics known
    (tmp_path / "a" / layout.tick_file(late, layout.tick_start(late, IV))).unlink()
    run_pass(cluster(tmp_path, interval_s=IV), now)
    period = tmp_path / "a" / Period.containing(T0, HOUR).file
    table = pq.read_table(period)
    assert "topics" in table.column_names
    footer = {k: v for k, v in pq.read_metadata(period).metadata.items() if k != b"ARROW:schema"}
    pq.write_table(table.drop_columns(["topics"]).replace_schema_metadata(footer), period)  # as written before
    unknown = {t: replace(s, volumes=tuple(replace(v, topics=None) for v in s.volumes)) for t, s in written.items()}
    tick = start + 5
    assert journal.read("a", tick, layout.tick_start(tick, IV)) == unknown[tick]
    snap = snapshot(late, IV)
    assert snap.volumes[-1].topics is not None and journal.write("a", late, layout.tick_start(late, IV), snap) == snap
    report = run_pass(cluster(tmp_path, interval_s=IV), now)
    assert [(r.added, r.removed) for r in report.rewritten] == [(1, 1)]
    merged = {s.observed_at: s for s in view(tmp_path)}
    assert merged[snap.observed_at] == snap and merged[unknown[tick].observed_at] == unknown[tick]


def test_a_rerun_of_a_compacted_tick_gets_the_first_snapshot_not_a_new_one(tmp_path):
    journal, written = three_hours(tmp_path)
    run_pass(cluster(tmp_path, interval_s=IV), T0 + 3 * HOUR + dt.timedelta(minutes=5))
    tick = first_tick(IV) + 5
    other = snapshot(tick + 1, IV)
    assert journal.write("a", tick, layout.tick_start(tick, IV), other) == written[tick]
    assert files(tmp_path, "*.json") == [] and len(view(tmp_path)) == len(written)


def test_ticks_compacted_under_an_earlier_period_length_are_still_found(tmp_path):
    journal, written = three_hours(tmp_path)
    run_pass(cluster(tmp_path, interval_s=IV), T0 + HOUR + dt.timedelta(minutes=5))  # the first hour, hourly
    half = dt.timedelta(minutes=30)
    run_pass(cluster(tmp_path, interval_s=IV, period=half), T0 + 3 * HOUR + dt.timedelta(minutes=5))
    assert (tmp_path / "a" / "_periods").read_text().split() == ["PT1H", "PT30M"]
    assert len(files(tmp_path, "*.parquet")) == 1 + 4 and files(tmp_path, "*.json") == []
    for tick, snap in written.items():
        assert journal.read("a", tick, layout.tick_start(tick, IV)) == snap


def test_a_tick_file_that_is_not_a_valid_snapshot_stays_json_for_replay_to_report(tmp_path):
    three_hours(tmp_path)
    start = first_tick(IV)
    bad = tmp_path / "a" / layout.tick_file(start + 7, layout.tick_start(start + 7, IV))
    bad.write_text('{"cluster_id": "c1", "observed_at": "2026-03-01T00:01:10.007Z", "status": "FINE"}\n')
    report = run_pass(cluster(tmp_path, interval_s=IV), T0 + 3 * HOUR + dt.timedelta(minutes=5))
    assert files(tmp_path, "*.json") == [bad]
    assert report.rewritten[0].kept == ((f"2026-03-01/{start + 7}.json", "status must be one of SUCCESS, "
                                         "DESCRIBE_CLUSTER_ERROR, DESCRIBE_LOG_DIRS_ERROR, TIMEOUT, "
                                         "UNSUPPORTED_BROKER, ERROR"),)
    assert any(str(bad) in p for p in report.problems)


def test_arrow_and_python_flatten_tick_files_alike():
    from quota_pipeline.journal.period_file import Entry, rows_of, table_of

    entries = []
    for tick in range(first_tick(IV), first_tick(IV) + 40):  # failed polls, offline dirs, top partitions
        text = json.dumps(snapshot(tick, IV, brokers=3).to_json()).encode()
        entries.append(Entry(f"2026-03-01/{tick}.json", tick, json.loads(text), text))
    table, fits = rows_of(entries)
    assert fits == entries and table.equals(table_of(entries))


def test_tick_files_replay_would_read_otherwise_or_arrow_cannot_hold_are_left_as_json(tmp_path):
    journal, written = three_hours(tmp_path)
    start = first_tick(IV)
    pretty, huge = (tmp_path / "a" / layout.tick_file(t, layout.tick_start(t, IV)) for t in (start + 3, start + 4))
    pretty.write_text(json.dumps(written[start + 3].to_json(), indent=2))  # replay reads it line by line
    record = written[start + 4].to_json()
    record["volumes"][0].update(total_bytes=2 ** 70, available_bytes=2 ** 69)  # valid, but not an int64
    huge.write_text(json.dumps(record))
    rejects_before, rejects_after = [], []
    before = view(tmp_path, rejects_before)
    report = run_pass(cluster(tmp_path, interval_s=IV), T0 + 3 * HOUR + dt.timedelta(minutes=5))
    assert files(tmp_path, "*.json") == [pretty, huge]
    assert view(tmp_path, rejects_after) == before and rejects_after == rejects_before != []
    assert [why for _, why in report.rewritten[0].kept] == ["not one JSON line", "a value does not fit the "
                                                            "period file's columns"]


def test_a_journal_written_before_the_interval_changed_is_filed_by_observed_at(tmp_path):
    journal = Journal(str(tmp_path))
    start = first_tick(30)
    fill(journal, "a", range(start, start + 240), 30)  # two hours at 30 s
    before = view(tmp_path)
    report = run_pass(cluster(tmp_path, interval_s=10), T0 + 3 * HOUR)  # the config now says 10 s
    assert len(report.rewritten) == 2 and view(tmp_path) == before


def test_one_maintenance_pass_at_a_time(tmp_path):
    three_hours(tmp_path)
    with LocalStorage(str(tmp_path)).lock("a"):
        with pytest.raises(JournalBusy, match="another process is maintaining"):
            run_pass(cluster(tmp_path, interval_s=IV), T0 + 4 * HOUR)
    assert len(run_pass(cluster(tmp_path, interval_s=IV), T0 + 4 * HOUR).rewritten) == 3


# -- retention over a long run ------------------------------------------------------------------------

def test_a_long_run_keeps_the_journal_size_flat(tmp_path):
    """A day at 1 s with retention PT1H, compressed: 1 s ticks, one-minute periods, two minutes of retention,
    40 periods; the store writes each tick and a pass runs every 10 s of the manual clock."""
    clock = ManualClock(T0)
    journal = Journal(str(tmp_path))
    cj = cluster(tmp_path, interval_s=1, period=dt.timedelta(minutes=1), retention=dt.timedelta(minutes=2))
    start, sizes = first_tick(1), []
    for i in range(40 * 60):
        tick = start + i
        journal.write("a", tick, layout.tick_start(tick, 1), snapshot(tick, 1))
        clock.advance(1)
        if i % 10 == 9:
            u = run_pass(cj, clock.now()).usage
            sizes.append((u.bytes, u.files))
    steady = sizes[len(sizes) // 4:]  # past the first retention
    assert max(f for _, f in steady) <= 60 + 60 + 3 + 3  # open and closing periods' ticks, 3 period files, ids
    early, late = steady[:len(steady) // 3], steady[-len(steady) // 3:]
    assert max(b for b, _ in late) <= 1.1 * max(b for b, _ in early)
    assert len(files(tmp_path, "*.parquet")) <= 3
    assert view(tmp_path)[0].observed_at >= clock.now() - dt.timedelta(minutes=4)


def test_retention_pt0s_keeps_everything(tmp_path):
    three_hours(tmp_path)
    before = view(tmp_path)
    run_pass(cluster(tmp_path, interval_s=IV, retention=dt.timedelta(0)), T0 + dt.timedelta(days=3650))
    assert view(tmp_path) == before and files(tmp_path, "*.json") == []


# -- the command ----------------------------------------------------------------------------------

def conf(tmp_path: Path, **extra: str) -> str:
    path = tmp_path / "a.properties"
    props = {"client.quota.callback.static.storage.per.volume.limit.min.available.bytes": "1000",
             "client.quota.callback.static.storage.check-interval": "10", "quota.pipeline.cluster.name": "a",
             "quota.pipeline.journal.path": str(tmp_path / "journal"), **extra}
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def recent_journal(tmp_path: Path, from_hours: float, to_hours: float = 0) -> None:
    """Ticks from `from_hours` ago to `to_hours` ago, every 10 s."""
    journal = Journal(str(tmp_path / "journal"))
    now = dt.datetime.now(UTC)
    start, end = (first_tick(10, now - dt.timedelta(hours=h)) for h in (from_hours, to_hours))
    fill(journal, "a", range(start, end), 10)


def test_journal_command_compacts_prunes_and_reports(tmp_path, capsys):
    recent_journal(tmp_path, 4, 2)  # every period closed, whatever the time now
    path = conf(tmp_path, **{"quota.pipeline.journal.retention": "PT3H"})
    assert main(["journal", "compact", "--config", path, "--dry-run"]) == 0
    assert "would compact" in capsys.readouterr().out and files(tmp_path, "*.parquet") == []
    assert main(["journal", "compact", "--config", path]) == 0
    out = capsys.readouterr().out
    assert out.count("a: compacted ") >= 2 and "0 open" in out and files(tmp_path, "*.json") == []
    assert main(["journal", "compact", "--config", path]) == 0
    assert "nothing to compact" in capsys.readouterr().out
    assert main(["journal", "prune", "--config", path]) == 0
    assert "past retention" in capsys.readouterr().out
    assert main(["journal", "stats", "--config", path, "--json"]) == 0
    [stats] = json.loads(capsys.readouterr().out)
    assert stats["cluster"] == "a" and stats["periods_open"] == 0 and stats["periods_compacted"] >= 1
    assert stats["files"] == len(files(tmp_path / "journal", "*")) and stats["oldest"] < stats["newest"]
    assert main(["journal", "stats", "--config", path]) == 0
    assert "periods compacted" in capsys.readouterr().out


def test_a_deeply_nested_or_misnamed_tick_file_is_set_aside_and_the_rest_of_the_journal_processed(tmp_path,
                                                                                                    capsys):
    recent_journal(tmp_path, 4, 2)
    day = next(p for p in (tmp_path / "journal" / "a").iterdir() if p.is_dir())
    tick = int(sorted(day.glob("*.json"))[-1].stem)
    (day / f"{tick + 1}.json").write_text("[" * 100_000 + "]" * 100_000 + "\n")  # deeper than the stack
    (day / f"{10 ** 15}.json").write_text("{}\n")  # a tick beyond the calendar
    path = conf(tmp_path)
    assert main(["journal", "stats", "--config", path]) == 0
    assert main(["journal", "compact", "--config", path]) == 0
    out = capsys.readouterr().out
    assert out.count("a: compacted ") >= 2
    assert f"{tick + 1}.json: left as JSON: unreadable" in out and "Traceback" not in out
    assert (day / f"{tick + 1}.json").exists() and files(tmp_path, "*.parquet")
    assert main(["journal", "prune", "--config", path]) == 0


def test_a_journal_period_of_zero_is_a_config_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["journal", "stats", "--config", conf(tmp_path, **{"quota.pipeline.journal.period": "PT0S"})])
    assert exit_.value.code == 2
    assert "quota.pipeline.journal.period must be a whole number of seconds" in capsys.readouterr().err


def test_the_job_refuses_a_journal_period_of_zero(tmp_path):
    from quota_pipeline.core import config as cfg
    from quota_pipeline.streaming.query import JobConfigError, check_runnable

    with pytest.raises(JobConfigError, match="quota.pipeline.journal.period"):
        check_runnable([cfg.load(conf(tmp_path, **{"quota.pipeline.journal.period": "PT0S"}), require_admin=False)])


# -- the job's background child ---------------------------------------------------------------------

def test_the_background_child_compacts_reports_usage_and_stops_with_its_stdin(tmp_path):
    from quota_pipeline.journal.background import Maintenance
    from quota_pipeline.streaming.metrics import Metrics

    recent_journal(tmp_path, 2, 1)
    metrics, reports = Metrics(), []
    m = Maintenance([cluster(tmp_path / "journal")], lambda r: (reports.append(r), metrics.record_journal(r)))
    m.start()
    deadline = time.monotonic() + 30
    while not reports and time.monotonic() < deadline:
        time.sleep(0.1)
    proc = m._proc
    niceness = os.getpriority(os.PRIO_PROCESS, proc.pid)
    m.stop()
    assert reports and reports[0]["compacted"] and proc.poll() is not None
    assert niceness == 19  # the lowest priority there is
    assert metrics.registry.get_sample_value("quota_pipeline_journal_files", {"cluster": "a"}) == \
        len(files(tmp_path / "journal" / "a", "*"))
    assert metrics.registry.get_sample_value("quota_pipeline_journal_bytes", {"cluster": "a"}) > 0
