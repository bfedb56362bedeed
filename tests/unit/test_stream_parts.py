"""The streaming job's parts without Spark: ticks and partitions, the journal, state encoding, metrics, sink."""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.support.builders import GB, MemoryHandle, ok, settings, spark_rows, vol
from tests.support.journal_strategies import cluster_journal
from quota_pipeline.core import config as cfg
from quota_pipeline.streaming import source
from quota_pipeline.core.reference.decision import DecisionState, step
from quota_pipeline.streaming.metrics import Metrics
from quota_pipeline.core.model import Status, VolumeSnapshot
from quota_pipeline.journal.store import Journal


def props(name: str, tmp_path, interval: str = "10") -> dict:
    return {cfg.HARD_BYTES: "1000", cfg.CHECK_INTERVAL_SECONDS: interval, cfg.BOOTSTRAP: "127.0.0.1:1",
            cfg.CLUSTER_NAME: name, cfg.CHECKPOINT_PATH: str(tmp_path / "ckpt")}


def test_one_poll_per_cluster_per_tick_and_missed_ticks_are_not_invented(tmp_path):
    reader = source.KafkaVolumesReader([source.ObservedCluster("a", props("a", tmp_path)),
                                        source.ObservedCluster("b", props("b", tmp_path, "30"))])
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert {k: end[k] - start[k] for k in end} == {"a": 1, "b": 1}   # the first batch polls at once
    parts = reader.partitions(start, end)
    assert sorted((t.config_name, t.tick) for p in parts for t in p.ticks) == sorted(end.items())
    # After ten missed ticks of "a" only its latest tick is polled; "b" has no new tick: not polled.
    later = {"a": end["a"] + 10, "b": end["b"]}
    assert [(t.config_name, t.tick) for p in reader.partitions(end, later) for t in p.ticks] == [("a", end["a"] + 10)]


def test_clusters_are_spread_over_at_most_poll_tasks_partitions_in_a_stable_order(tmp_path):
    names = [f"c{i:02d}" for i in range(7)]
    reader = source.KafkaVolumesReader([source.ObservedCluster(n, props(n, tmp_path)) for n in reversed(names)],
                                       poll_tasks=3)
    start = reader.initialOffset()
    parts = reader.partitions(start, reader.latestOffset(start, None))
    assert [[t.config_name for t in p.ticks] for p in parts] == [names[0::3], names[1::3], names[2::3]]
    one = source.KafkaVolumesReader([source.ObservedCluster("a", props("a", tmp_path))], poll_tasks=3)
    assert len(one.partitions(start, one.latestOffset(start, None))) == 1


def test_a_cluster_added_to_the_fleet_is_polled_at_once_and_a_removed_one_is_left_out(tmp_path):
    # Offsets of the previous run, from the checkpoint: "a" and "gone". This run is configured with "a" and "new".
    reader = source.KafkaVolumesReader([source.ObservedCluster("a", props("a", tmp_path)),
                                        source.ObservedCluster("new", props("new", tmp_path))])
    now = reader.latestOffset({}, None)
    previous = {"a": now["a"] - 3, "gone": 12}
    assert set(now) == {"a", "new"}
    assert sorted((t.config_name, t.tick) for p in reader.partitions(previous, now) for t in p.ticks) == [
        ("a", now["a"]), ("new", now["new"])]
    # A batch planned by the previous run and re-run after the restart: the removed cluster is not polled.
    assert [t.config_name for p in reader.partitions(previous, {"a": now["a"], "gone": 13}) for t in p.ticks] == ["a"]


def test_a_partition_polls_its_clusters_at_the_same_time_and_journals_each(tmp_path, monkeypatch):
    import threading
    import time

    names = ["a", "b", "c", "d"]
    inside, most = [0], [0]
    lock = threading.Lock()

    class SlowObserver:
        def __init__(self, conf):
            self.name = conf.cluster_name

        def poll(self):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.3)
            with lock:
                inside[0] -= 1
            return ok(0, vol(1, 50 * GB), cluster=f"id-{self.name}")

    monkeypatch.setattr("quota_pipeline.kafka.observer.Observer", SlowObserver)
    monkeypatch.setattr(source, "_observers", {})
    reader = source.KafkaVolumesReader([source.ObservedCluster(n, props(n, tmp_path)) for n in names], poll_tasks=1)
    start = reader.initialOffset()
    [part] = reader.partitions(start, reader.latestOffset(start, None))
    rows = list(reader.read(part))
    assert most[0] == 4  # four polls inside at once, not one after another (however loaded the machine)
    assert [r[0] for r in rows] == names  # one row per cluster, in the partition's order
    journal = Journal(str(tmp_path / "ckpt" / "journal"))
    assert all(journal.last_cluster_id(n) == f"id-{n}" for n in names)


def test_a_journaled_tick_is_returned_to_a_rerun_not_polled_again(tmp_path, monkeypatch):
    conf = cfg.parse(props("a", tmp_path))
    polls = []

    class FakeObserver:
        def __init__(self, _conf):
            pass

        def poll(self):
            polls.append(1)
            return ok(len(polls), vol(1, 50 * GB), cluster="real-id")

    monkeypatch.setattr("quota_pipeline.kafka.observer.Observer", FakeObserver)
    monkeypatch.setattr(source, "_observers", {})
    first = source.poll_or_replay("a", conf, 42, "token-of-the-first-run")
    again = source.poll_or_replay("a", conf, 42, "token-of-the-rerun", rerun=True)
    assert polls == [1] and again == first
    assert Journal(conf.effective_journal_path).last_cluster_id("a") == "real-id"


def test_a_failed_poll_is_filed_under_the_last_known_cluster_id(tmp_path, monkeypatch):
    conf = cfg.parse(props("a", tmp_path))
    Journal(conf.effective_journal_path).remember_cluster_id("a", "real-id")

    class Failing:
        def __init__(self, _conf):
            pass

        def poll(self):
            return VolumeSnapshot("127.0.0.1:1", ok(0).observed_at, Status.TIMEOUT, message="timed out")

    monkeypatch.setattr("quota_pipeline.kafka.observer.Observer", Failing)
    monkeypatch.setattr(source, "_observers", {})
    assert source.poll_or_replay("a", conf, 7, "token").cluster_id == "real-id"


def test_journal_is_first_writer_wins(tmp_path):
    j = Journal(str(tmp_path))
    t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    first, second = ok(0, vol(1, 1)), ok(1, vol(1, 2))
    assert j.write("a", 1, t, first) == first
    assert j.write("a", 1, t, second) == first   # a retried task gets what the first attempt journaled
    assert j.read("a", 1, t) == first


def packed_volumes(*listed) -> bytes:
    """The source's packed value of volumes given as [broker id, log dir, total bytes, available bytes]."""
    from quota_pipeline.core.model import Volume
    from quota_pipeline.streaming import packed

    return packed.pack([Volume(b, d, t, a) for b, d, t, a in listed])


def row(**kw):
    base = dict(key="c", throttle_factor=1.0, decision_source="OBSERVATION", observed_at=dt.datetime(2026, 1, 1),
                violations=0, active_brokers=2, active_log_dirs=2, cached_volumes=2, evicted=0, status="SUCCESS",
                volumes=packed_volumes([1, "/a", 100, 50], [2, "/a", 100, 40]))
    return SimpleNamespace(**{**base, **kw})


def sample(m: Metrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_metrics_follow_decisions_and_drop_vanished_volumes():
    m = Metrics()
    m.record([row()])
    assert sample(m, "quota_pipeline_volume_available_bytes", cluster="c", broker_id="2", log_dir="/a") == 40
    m.record([row(throttle_factor=0.5, decision_source="FALLBACK", status="TIMEOUT"),
              row(throttle_factor=0.5, decision_source="FALLBACK", status="TIMEOUT"),
              row(volumes=packed_volumes([1, "/a", 100, 50]))])
    assert sample(m, "quota_pipeline_volume_available_bytes", cluster="c", broker_id="2", log_dir="/a") is None
    assert sample(m, "quota_pipeline_fallback_applied_total", cluster="c") == 1   # one transition
    assert sample(m, "quota_pipeline_snapshots_total", cluster="c", status="TIMEOUT") == 2
    assert sample(m, "quota_pipeline_throttle_factor", cluster="c") == 1.0


def test_metrics_take_a_partial_views_volumes_and_keep_the_others():
    m = Metrics()
    m.record([row()])
    m.record([row(status="TIMEOUT", volumes=packed_volumes([1, "/a", 100, 5]))])   # broker 2 did not answer
    assert sample(m, "quota_pipeline_volume_available_bytes", cluster="c", broker_id="1", log_dir="/a") == 5
    assert sample(m, "quota_pipeline_volume_available_bytes", cluster="c", broker_id="2", log_dir="/a") == 40
    m.record([row(status="TIMEOUT", volumes=None)])   # a failed poll: nothing changes
    assert sample(m, "quota_pipeline_volume_available_bytes", cluster="c", broker_id="1", log_dir="/a") == 5


def test_metrics_export_the_closest_volumes_eta_the_interval_and_the_last_decision():
    m = Metrics()
    m.intervals = {"east": 10.0}
    near = {"broker_id": 3, "log_dir": "/d1", "eta_seconds": 1800.0}
    value = json.dumps({"decided_at": "2026-11-21T10:00:00.500Z", "closest_volumes": [near, {**near, "log_dir": "/d2",
                                                                                          "eta_seconds": None}]})
    m.record([row(config_name="east", value=value)])
    assert sample(m, "quota_pipeline_volume_eta_seconds", cluster="c", broker_id="3", log_dir="/d1") == 1800.0
    assert sample(m, "quota_pipeline_volume_eta_seconds", cluster="c", broker_id="3", log_dir="/d2") is None
    assert sample(m, "quota_pipeline_check_interval_seconds", cluster="c") == 10.0
    assert sample(m, "quota_pipeline_last_decision_timestamp_seconds", cluster="c") == 1795255200.5
    m.record([row(config_name="east", value=json.dumps({"closest_volumes": []}))])   # no longer filling
    assert sample(m, "quota_pipeline_volume_eta_seconds", cluster="c", broker_id="3", log_dir="/d1") is None
    assert sample(m, "process_start_time_seconds") is not None


def test_publisher_fails_the_batch_when_the_output_cluster_does_not_acknowledge():
    from quota_pipeline.kafka.publisher import DeliveryFailed, Publisher
    from harness.ports import free_port

    publisher = Publisher({"bootstrap.servers": f"127.0.0.1:{free_port()}", "message.timeout.ms": "1500"},
                          "t", flush_timeout=5)
    with pytest.raises(DeliveryFailed, match="retried"):
        publisher.publish([("c", "{}")])


def test_the_fleet_change_is_read_from_the_checkpoints_last_offsets(tmp_path):
    from quota_pipeline.streaming.fleet import FleetChange, fleet_change

    query = tmp_path / "query"
    assert fleet_change(str(query), ["a"]) is None  # a new checkpoint: nothing to compare with
    (query / "offsets").mkdir(parents=True)
    (query / "offsets" / "9").write_text('v1\n{"batchWatermarkMs":0}\n{"a":10,"gone":4}\n')
    (query / "offsets" / "10").write_text('v1\n{"batchWatermarkMs":0}\n{"a":11,"gone":5}\n')  # the last, by number
    (query / "offsets" / ".10.crc").write_text("")
    assert fleet_change(str(query), ["a", "new"]) == FleetChange(added=("new",), removed=("gone",))


def _rows(rows) -> list:
    return spark_rows(rows)


def test_a_removed_clusters_state_is_dropped_by_its_removal_row_and_no_one_elses(tmp_path):
    from quota_pipeline.streaming.processor import REMOVED, DecisionProcessor

    handle = MemoryHandle()
    first = DecisionProcessor({"a": settings()}, {"a": "a"})
    first.init(handle)
    out = list(first.handleInputRows(("id-a",), iter(_rows(source.snapshot_rows(
        "a", 1, ok(0, vol(1, 5 * GB), cluster="id-a")))), None))
    assert [r.throttle_factor for r in out] == [0.0]

    # The source's removal rows come from the previous run's offsets and the journal's cluster id.
    Journal(str(tmp_path / "ckpt" / "journal")).remember_cluster_id("a", "id-a")
    reader = source.KafkaVolumesReader([source.ObservedCluster("b", props("b", tmp_path))])
    end = reader.latestOffset({}, None)
    [part] = reader.partitions({"a": 5, "never-observed": 3}, end)
    assert part.removals == (source.Removal("a", "id-a", 5),)
    removal = _rows(reader.read(source.PollPartition((), part.removals)))
    assert [r.status for r in removal] == [REMOVED]

    # Still configured (a restart that kept "a"): the row changes nothing.
    assert list(first.handleInputRows(("id-a",), iter(removal), None)) == []
    assert handle.states["cluster"].exists()
    # Restarted without "a": the state is dropped and reported, without a value to publish.
    restarted = DecisionProcessor({"b": settings()}, {"b": "b"})
    restarted.init(handle)
    [dropped] = list(restarted.handleInputRows(("id-a",), iter(removal), None))
    assert (dropped.key, dropped.config_name, dropped.status) == ("id-a", "a", REMOVED)
    assert dropped.value is None and not handle.states["cluster"].exists()


@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(cluster_journal("c1"), st.sampled_from(["pin", "last-known", "violate"]), st.sampled_from([0, 30, 60]),
       st.sampled_from(["pin", "expire"]), st.integers(1, 3), st.sampled_from([(0, 3600), (60, 60), (600, 600)]))
def test_the_job_decides_as_the_reference_batch_by_batch(snaps, offline, validity, fenced, per_batch, eta):
    """The processor (the compiled pass, its state carried between micro-batches in the state store) publishes what
    the reference (core/reference/decision.step) publishes."""
    from quota_pipeline.core.record import build_record
    from quota_pipeline.streaming.processor import DecisionProcessor

    s = settings(hard_bytes=5 * GB, soft_bytes=15 * GB, validity_s=validity, offline=offline, fenced=fenced,
                 fallback=0.3, eta=eta)
    reference, state = [], DecisionState()
    for snap in snaps:
        summary, decision = step(state, snap, s)
        value = build_record(summary, decision, s, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "out").to_json()
        reference.append(value)
    # Through the processor, `per_batch` snapshots a micro-batch.
    handle = MemoryHandle()
    processor = DecisionProcessor({"a": s}, {"a": "out"})
    processor.init(handle)
    got = []
    for i in range(0, len(snaps), per_batch):
        frame = _rows(r for tick, snap in enumerate(snaps[i:i + per_batch], start=i) for r in
                      source.snapshot_rows("a", tick, snap))
        for out in processor.handleInputRows(("c1",), iter(frame), None):
            got.append(json.loads(out.value))
    for value in got + reference:
        value.pop("decided_at")
    assert got == reference


def _processed(snaps, s, per_batch: int = 1) -> list[dict]:
    """The records the processor publishes for `snaps` of cluster c1, `per_batch` snapshots a micro-batch (the
    state saved in the state store and loaded again between them)."""
    from quota_pipeline.streaming.processor import DecisionProcessor

    handle = MemoryHandle()
    processor = DecisionProcessor({"a": s}, {"a": "out"})
    processor.init(handle)
    got = []
    for i in range(0, len(snaps), per_batch):
        frame = _rows(r for tick, snap in enumerate(snaps[i:i + per_batch], start=i)
                      for r in source.snapshot_rows("a", tick, snap))
        for out in processor.handleInputRows(("c1",), iter(frame), None):
            got.append(json.loads(out.value))
    return got


def test_the_job_keeps_the_last_step_of_a_dir_offline_across_micro_batches():
    """test_decide's fast last step: the state carried between micro-batches keeps the step, so the stop comes
    by it, a validity and more after the last reading."""
    from tests.unit.test_decide import FAST_STEP_LIMIT, fast_last_step

    s = replace(settings(validity_s=60), limits=FAST_STEP_LIMIT)
    snaps = fast_last_step()
    got = _processed(snaps, s)
    assert [r["throttle_factor"] for r in got] == [1.0 if (x.observed_at - snaps[0].observed_at).total_seconds()
                                                   < 570 else 0.0 for x in snaps]


class _Waits:
    """A stop event that records how long it was asked to wait, without waiting; `stop_after` waits, it is set."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.waits: list[float] = []
        self.stop_after = stop_after

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return self.stop_after is not None and len(self.waits) >= self.stop_after


def _failing(times: int):
    calls = []

    def prepare() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise RuntimeError("KafkaError{code=_TRANSPORT}: Failed to get metadata\nsecond line")
        return "exists"
    return prepare, calls


def test_a_first_start_fails_at_once_when_the_output_cluster_is_unreachable():
    from quota_pipeline.streaming.query import output_ready
    prepare, calls = _failing(1)
    with pytest.raises(RuntimeError):
        output_ready(prepare, resuming=False, stop=_Waits(), warn=lambda m: None)
    assert len(calls) == 1


def test_a_job_resuming_from_its_checkpoint_waits_out_an_output_outage_with_backoff():
    """The fault campaign's find: a job restarted while the output broker was down exited (code 1) instead of
    waiting, so the service manager's restart loop, not the job, waited the outage out."""
    from quota_pipeline.streaming.query import output_ready
    prepare, calls = _failing(5)
    warnings: list[str] = []
    stop = _Waits()
    assert output_ready(prepare, resuming=True, stop=stop, warn=warnings.append) == "exists"
    assert len(calls) == 6 and stop.waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert len(warnings) == 5 and "waits for the cluster" in warnings[0] and "\n" not in warnings[0]


def test_a_stop_ends_the_wait_for_the_output_cluster():
    from quota_pipeline.streaming.query import output_ready
    prepare, calls = _failing(100)
    assert output_ready(prepare, resuming=True, stop=_Waits(stop_after=2), warn=lambda m: None) is None
    assert len(calls) == 2


def test_a_job_is_resuming_once_its_checkpoint_holds_a_committed_batch(tmp_path):
    from quota_pipeline.streaming.query import StreamJob
    job = SimpleNamespace(first=SimpleNamespace(checkpoint_path=str(tmp_path)))
    assert not StreamJob.resuming(job)
    (tmp_path / "query" / "commits").mkdir(parents=True)
    assert not StreamJob.resuming(job)
    (tmp_path / "query" / "commits" / "0").write_text("v1\n{}")
    assert StreamJob.resuming(job)


PREDICTIVE = {"broker_id": 2, "log_dir": "/data/x", "eta_seconds": 840.0, "horizon_seconds": 1800.0}


def test_metrics_export_the_predictive_throttle_while_it_is_in_force():
    m = Metrics()
    m.record([row(throttle_factor=0.47, value=json.dumps({"closest_volumes": [], "predictive": PREDICTIVE}))])
    labels = dict(cluster="c", broker_id="2", log_dir="/data/x")
    assert sample(m, "quota_pipeline_predictive_eta_seconds", **labels) == 840.0
    assert sample(m, "quota_pipeline_predictive_horizon_seconds", **labels) == 1800.0
    moved = {**PREDICTIVE, "broker_id": 3, "eta_seconds": 600.0}
    m.record([row(throttle_factor=0.33, value=json.dumps({"predictive": moved}))])  # another log dir now
    assert sample(m, "quota_pipeline_predictive_eta_seconds", **labels) is None
    assert sample(m, "quota_pipeline_predictive_eta_seconds", **{**labels, "broker_id": "3"}) == 600.0
    for value in ({"predictive": None}, {"closest_volumes": []}):  # released; a record from before the field
        m.record([row(throttle_factor=0.33, value=json.dumps({"predictive": moved}))])
        m.record([row(value=json.dumps(value))])
        assert sample(m, "quota_pipeline_predictive_eta_seconds", **{**labels, "broker_id": "3"}) is None
        assert sample(m, "quota_pipeline_predictive_horizon_seconds", **{**labels, "broker_id": "3"}) is None


def test_the_factor_change_log_line_names_the_predictive_cause(caplog, tmp_path):
    from quota_pipeline.streaming.query import StreamJob

    job = StreamJob([cfg.parse(props("c", tmp_path))], summary_every=1e9)  # no Spark until start()
    caplog.set_level("INFO", logger="quota_pipeline")
    job._log([row(value=json.dumps({"predictive": None})),
              row(throttle_factor=0.4667, value=json.dumps({"predictive": PREDICTIVE})),
              row(throttle_factor=0.4, value=json.dumps({"predictive": {**PREDICTIVE, "log_dir": "/d\x1b[2J"}}))])
    lines = [r.getMessage() for r in caplog.records]
    assert "predictive" not in lines[0]
    assert lines[1].startswith("c: throttle factor 1.000 -> 0.467 (OBSERVATION)")
    assert lines[1].endswith("; predictive: broker 2 /data/x reaches the hard limit in 14 min at the current fill "
                             "(horizon 30 min)")
    assert "/d\\x1b[2J reaches" in lines[2]  # outside text: its control characters escaped


def test_a_snapshot_crosses_spark_as_one_row_and_its_volumes_reach_the_metrics():
    """One row per snapshot whatever its size (Spark's per-batch cost follows rows), its volumes intact on the
    other side, and a value that is not the source's own refused rather than read."""
    from quota_pipeline.streaming import packed
    from quota_pipeline.streaming.metrics import listed as listed_of
    from quota_pipeline.streaming.processor import DecisionProcessor

    snap = ok(0, *[vol(b, 20 * GB) for b in range(1, 201)], cluster="id-a")
    rows = list(source.snapshot_rows("a", 1, snap))
    assert len(rows) == 1
    assert packed.unpack(rows[0][-1]).column("broker_id").to_pylist() == list(range(1, 201))
    processor = DecisionProcessor({"a": settings()}, {"a": "a"})
    processor.init(MemoryHandle())
    [out] = list(processor.handleInputRows(("id-a",), iter(_rows(rows)), None))
    listed = listed_of(out.volumes)
    assert len(listed) == 200 and listed[0][0] == 1 and listed[0][3] == 20 * GB
    with pytest.raises(ValueError, match="packed snapshot"):
        import pyarrow as pa
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, pa.schema([("x", pa.int64())])) as w:
            w.write_table(pa.table({"x": [1]}))
        packed.unpack(sink.getvalue().to_pybytes())


class _Frame:
    """A micro-batch's decisions as foreachBatch hands them over: collect(), and drop() of a column."""

    def __init__(self, rows: list, dropped: tuple[str, ...] = ()):
        self.rows, self.dropped = rows, dropped

    def drop(self, column: str) -> "_Frame":
        return _Frame(self.rows, self.dropped + (column,))

    def collect(self) -> list:
        from pyspark.sql import Row
        return [Row(**{k: v for k, v in r.asDict().items() if k not in self.dropped}) for r in self.rows]


@pytest.mark.parametrize("gauges", [True, False])
def test_the_volumes_reach_the_driver_only_for_the_per_log_dir_gauges(tmp_path, gauges):
    """Without a metrics endpoint (--no-metrics) the job leaves each decision's volumes on the executors and still
    publishes every decision; with one, every log dir has its gauge."""
    from quota_pipeline.streaming.processor import DecisionProcessor
    from quota_pipeline.streaming.query import StreamJob

    snap = ok(0, *[vol(b, 20 * GB) for b in range(1, 4)], cluster="id-a")
    processor = DecisionProcessor({"a": settings()}, {"a": "a"})
    processor.init(MemoryHandle())
    decided = list(processor.handleInputRows(("id-a",), iter(_rows(source.snapshot_rows("a", 1, snap))), None))
    job = StreamJob([cfg.parse(props("a", tmp_path), "a")], volume_gauges=gauges)
    published, seen = [], []
    job._publisher = SimpleNamespace(publish=lambda pairs: published.extend(pairs))
    job.on_decisions = seen.extend
    job._batch(_Frame(decided), 0)
    job._recorder.submit(lambda: None).result(timeout=10)  # the metrics of the batch are in
    assert published == [(decided[0].key, decided[0].value)]
    assert ("volumes" in seen[0].asDict()) is gauges
    available = sample(job.metrics, "quota_pipeline_volume_available_bytes", cluster="a", broker_id="2",
                       log_dir="/d0")
    assert available == (20 * GB if gauges else None)


@pytest.mark.parametrize("header", [b"{}", b'{"has": ["|O", [3]]}', b"not json", b'{"has": ["<i8", [-1]]}'])
def test_a_saved_state_with_arrays_this_job_does_not_save_is_refused(header):
    from quota_pipeline.core.compiled import state_codec
    from quota_pipeline.core.compiled.state_codec import STATE_FIELDS, STATE_MAGIC

    if header.startswith(b'{"has"'):  # every array named, the first one not as this job saves it
        names = [*STATE_FIELDS, "key_broker", "brokers"]
        header = b"{" + header[1:-1] + b"," + b",".join(b'"%s":["<i8",[1]]' % n.encode() for n in names[1:]) + b"}"
    with pytest.raises(ValueError, match="not a state this job wrote|not an array this job saves"):
        state_codec.restore(STATE_MAGIC + header + b"\n" + bytes(64))


def test_a_saved_state_claiming_an_outsize_size_is_refused():
    from quota_pipeline.streaming.processor import MAX_STATE_BYTES, state_columns

    with pytest.raises(ValueError, match="not a state this job wrote"):
        state_columns({"compressed": "zstd", "size": MAX_STATE_BYTES + 1, "columns": ""})


def test_a_poll_worker_connects_to_the_rest_of_the_fleet_after_its_own_polls(tmp_path, monkeypatch):
    """Spark may hand the next batch's other poll task to this worker: it finds its connections then, instead of
    connecting to every cluster of it within the micro-batch. Connecting polls each once, unjournaled."""
    names = ["a", "b", "c", "d"]
    made: list[str] = []

    class CountingObserver:
        def __init__(self, conf):
            self.name = conf.cluster_name
            made.append(self.name)

        def poll(self):
            return ok(0, vol(1, 50 * GB), cluster=f"id-{self.name}")

        def close(self):
            pass

    monkeypatch.setattr("quota_pipeline.kafka.observer.Observer", CountingObserver)
    monkeypatch.setattr(source, "_observers", {})
    monkeypatch.setattr(source, "_connecting", None)
    reader = source.KafkaVolumesReader([source.ObservedCluster(n, props(n, tmp_path)) for n in names], poll_tasks=2)
    start = reader.initialOffset()
    first, second = reader.partitions(start, reader.latestOffset(start, None))
    mine, others = [t.config_name for t in first.ticks], [t.config_name for t in second.ticks]
    assert [n for n, _ in first.fleet] == others and [n for n, _ in second.fleet] == mine
    assert [r[0] for r in reader.read(first)] == mine
    source._connecting.join(10)
    assert sorted(made) == names  # one connection each, the other task's clusters too
    journal = tmp_path / "ckpt" / "journal"
    assert all(not list((journal / n).rglob("*.json")) for n in others)  # connected, not journaled
    assert [r[0] for r in reader.read(second)] == others
    assert sorted(made) == names  # the other half's polls found their connections
