"""Replay's per-cluster columnar pass (replay/cluster_files.py reading, core/compiled/cluster_pass.py over core/compiled/kernel.py)
equals the reference (core/reference/cache.py + core/reference/decision.py) on random journals, in one chunk and in many; bad rows
are rejected with the reasons of core/snapshot_rules.py."""
from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings as hsettings, strategies as st

from tests.support.builders import GB, ok, settings, vol
from tests.support.journal_strategies import LAYOUTS, brokers_on_every_row, cluster_journal, fleets, write_exported
from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.reference.decision import decide_all
from quota_pipeline.core.record import stop_of
from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.journal import period_file
from quota_pipeline.replay.cluster_files import ClusterFiles, Task

UTC = dt.timezone.utc


def write_flat(path, snaps, row_group_size=None, layout="sorted") -> str:
    """Snapshots as a flattened Parquet journal (one row per volume), in the order given, in one of
    journal_strategies.LAYOUTS."""
    table = period_file.table_of(period_file.Entry("t.json", i, s.to_json()) for i, s in enumerate(snaps))
    if layout == "exported":
        return write_exported(path, table, row_group_size)
    pq.write_table(table, str(path), row_group_size=row_group_size)
    return str(path)


def streaming(snaps, s) -> list[dict]:
    rows = []
    for sm, d in decide_all(snaps, s):
        w = sm.worst_volume
        rows.append({
            "cluster_id": sm.cluster_id, "observed_at": sm.observed_at, "throttle_factor": d.factor,
            "source": d.source.value, "valid_until": d.valid_until(s.validity), "status": sm.status.value,
            "violations": sm.violations, "active_log_dirs": sm.active_log_dirs, "active_brokers": sm.active_brokers,
            "missing_brokers": list(sm.missing_brokers), "min_available_ratio": sm.min_available_ratio,
            "worst_volume": None if w is None else {"broker_id": w.broker_id, "log_dir": w.log_dir,
                                                    "available_bytes": w.available_bytes,
                                                    "available_ratio": w.available_ratio},
            "throttled_since": d.throttled_since,
            "closest_volumes": [{**c.to_json(), "top_partitions": [p.to_json() for p in c.top_partitions]}
                                for c in sm.closest_volumes],
            "predictive": None if sm.predictive is None else sm.predictive.to_json(),
            "stop": _stop_row(stop_of(sm, d)),
        })
    return rows


def _stop_row(stop) -> dict | None:
    """record.stop_of as a row of replay's `stop` column (a cluster stop's topics null)."""
    return None if stop is None else {"scope": stop.scope, "topics": list(stop.topics) if stop.scope == "topics"
                                      else None}


# (horizon, window) seconds of the predictive step: off, and on with buckets of 10 s and of 100 s (the journals' polls
# are 1 to 200 s apart, their fills 20 and 200 MB/s from up to 20 GB).
ETA = ((0, 3600), (60, 60), (600, 600), (3600, 60))


def replayed(files, clusters, s, chunk_rows=10 ** 9) -> tuple[list[dict], list[dict]]:
    rows, rejected = [], []
    for c in clusters:
        p = ClusterFiles(Task(c, tuple(files)), s, chunk_rows=chunk_rows)
        for batch in p.batches():
            rows.extend(batch.to_pylist())
        rejected.extend(p.outcome.rejected)
    return rows, rejected


@hsettings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(fleets(), st.sampled_from(["pin", "last-known", "violate"]), st.sampled_from([None, 15 * GB]),
       st.sampled_from([0, 30, 60]), st.sampled_from(["pin", "expire"]), st.sampled_from([0, 2, 5]),
       st.sampled_from([1, 3, 10 ** 9]), st.booleans(), st.sampled_from(LAYOUTS), st.sampled_from(ETA))
def test_the_columnar_pass_equals_the_streaming_form(tmp_path_factory, snaps, offline, soft, validity, fenced,
                                                     closest, chunk_rows, ratio, layout, eta):
    s = settings(hard_bytes=5 * GB, soft_bytes=soft, validity_s=validity, offline=offline, fallback=0.3,
                 fenced=fenced, closest=closest, eta=eta)
    if ratio:  # ratio limits: the offline-after-filling extrapolation compares a ratio of the last total
        s = replace(s, limits=Limits(Limit("ratio", 0.1), None if soft is None else Limit("ratio", 0.25)))
    if layout == "exported":  # failed polls' rows at the end: a row group spans every chunk of its clusters
        snaps = brokers_on_every_row(snaps)
    # Clusters interleaved in one file, in small row groups: each chunk of a cluster reads only its rows.
    path = write_flat(tmp_path_factory.mktemp("cp") / "j.parquet", sorted(snaps, key=lambda x: x.observed_at), 7,
                      layout)
    got, rejected = replayed([path], sorted({x.cluster_id for x in snaps}), s, chunk_rows)
    assert rejected == []
    want = streaming(snaps, s)
    key = lambda r: (r["cluster_id"], r["observed_at"])  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)



def test_the_strategies_generate_dirs_that_go_offline_after_filling():
    """The property tests above see the offline-after-filling rule at work (find fails when no journal the
    strategy can draw has such a dir)."""
    s = settings(hard_bytes=5 * GB, validity_s=60)

    def reasons(snaps) -> set:
        return {c.reason for sm, _ in decide_all(snaps, s) for c in sm.closest_volumes}

    # No shrinking: the example only has to exist, and shrinking a journal took minutes.
    found = find(fleets(), lambda snaps: "offline-filling" in reasons(snaps), random=random.Random(0),
                 settings=hsettings(phases=[Phase.generate], max_examples=2000, database=None))
    assert "offline-filling" in reasons(found)


def offline_by_the_last_step_alone(snaps, s) -> bool:
    """Some dir becomes offline-filling by the reference at a report more than a validity after its last reading,
    where that reading's fit alone does not reach the hard limit by then (its last step does)."""
    from quota_pipeline.core.reference import trend
    from quota_pipeline.core.model import epoch_micros

    def late(x, v, readings) -> bool:
        h = trend.recent(readings, readings[-1][0], s.validity)
        (tr, a), fit = h[-1], trend.fill_rate(h)
        elapsed = epoch_micros(x.observed_at) / 1e6 - tr / 1e6
        return elapsed > s.validity.total_seconds() and (fit is None or a - fit * elapsed > s.limits.hard.value)

    # Cheap first: most journals have no offline report a validity after a reading of a dir that was filling.
    readings: dict = {}
    maybe = False
    for x in snaps:
        for v in x.volumes:
            key = (x.cluster_id, v.broker_id, v.log_dir)
            if not v.offline:
                readings[key] = readings.get(key, ()) + ((epoch_micros(x.observed_at), v.available_bytes),)
            elif key in readings and trend.onset_rate(readings[key][-2:]) is not None and late(x, v, readings[key]):
                maybe = True
    if not maybe:
        return False
    readings, filling = {}, set()
    ordered = sorted(snaps, key=lambda x: (x.cluster_id, x.observed_at))
    for (sm, _), x in zip(decide_all(snaps, s), ordered):
        now = {(x.cluster_id, c.broker_id, c.log_dir) for c in sm.closest_volumes if c.reason == "offline-filling"}
        for v in x.volumes:
            key = (x.cluster_id, v.broker_id, v.log_dir)
            if not v.offline:
                readings[key] = readings.get(key, ()) + ((epoch_micros(x.observed_at), v.available_bytes),)
            elif key in now and key not in filling and key in readings and late(x, v, readings[key]):
                return True
        filling = now
    return False


def test_the_strategies_generate_dirs_offline_by_their_last_step_a_validity_after_it():
    """The property tests see a fill seen in the last step only extrapolated past the validity (find fails when no
    journal the strategy can draw has one)."""
    s = settings(hard_bytes=5 * GB, validity_s=60)
    found = find(cluster_journal("c1"), lambda snaps: offline_by_the_last_step_alone(snaps, s),
                 random=random.Random(0), settings=hsettings(phases=[Phase.generate], max_examples=3000,
                                                             database=None))
    assert offline_by_the_last_step_alone(found, s)


@pytest.mark.parametrize("journal", ["stops", "never_releases", "observes_nothing"])
def test_the_compiled_pass_decides_partial_views_as_the_reference(tmp_path, journal):
    """test_decide's partial views (a failed poll with the volumes of the brokers that answered)."""
    from tests.unit.test_decide import partial_views

    snaps, s, want = partial_views(journal)
    got, rejected = replayed([write_flat(tmp_path / "j.parquet", snaps)], ["c1"], s, chunk_rows=2)
    assert rejected == [] and got == streaming(snaps, s)
    assert [(r["throttle_factor"], r["source"], r["missing_brokers"]) for r in got] == want


def test_the_strategies_generate_partial_views_that_stop():
    """The property tests see a partial view stop the cluster at once (find fails when no journal has one)."""
    s = settings(hard_bytes=5 * GB, validity_s=60)

    def stops(snaps) -> bool:
        return any(sm.partial and d.factor == 0.0 and d.source.value == "OBSERVATION"
                   for sm, d in decide_all(snaps, s))

    found = find(cluster_journal("c1"), stops, random=random.Random(0),
                 settings=hsettings(phases=[Phase.generate], max_examples=2000, database=None))
    assert stops(found)


def test_the_compiled_pass_decides_a_broker_back_with_its_dir_offline_as_the_reference(tmp_path):
    """test_decide's broker that comes back with its dir offline (its reading pinned by the fence goes stale)."""
    s = settings(validity_s=20)
    snaps = [ok(0, vol(1, 50 * GB), vol(3, 50 * GB))]
    snaps += [ok(t, vol(1, 50 * GB), brokers=(1,), fenced=(3,)) for t in (10, 20, 30, 40)]
    snaps += [ok(t, vol(1, 50 * GB), vol(3, None)) for t in (50, 60, 70, 80, 90)]
    snaps += [ok(100, vol(1, 50 * GB), vol(3, 40 * GB))]
    got, _ = replayed([write_flat(tmp_path / "j.parquet", snaps)], ["c1"], s, chunk_rows=3)
    assert got == streaming(snaps, s)
    assert [r["throttle_factor"] for r in got] == [1.0] * 5 + [0.0] * 5 + [1.0]


def test_the_compiled_pass_takes_the_last_step_of_a_fill_as_the_reference(tmp_path):
    from tests.unit.test_decide import went_offline

    s = settings(validity_s=60)
    snaps = went_offline([36.5, 36.5, 36.3, 36.3, 20.7], [47, 60], total=40 * GB)
    got, _ = replayed([write_flat(tmp_path / "j.parquet", snaps)], ["c1"], s, chunk_rows=2)
    assert got == streaming(snaps, s)
    assert [r["throttle_factor"] for r in got] == [1.0] * 5 + [0.0, 0.0]


def test_the_compiled_pass_keeps_the_last_step_of_a_dir_offline_past_the_validity_as_the_reference(tmp_path):
    from tests.unit.test_decide import FAST_STEP_LIMIT, fast_last_step

    s = replace(settings(validity_s=60), limits=FAST_STEP_LIMIT)
    snaps = fast_last_step()
    got, _ = replayed([write_flat(tmp_path / "j.parquet", snaps)], ["c1"], s, chunk_rows=4)
    assert got == streaming(snaps, s)
    assert [r["throttle_factor"] for r in got] == [1.0 if x.observed_at < snaps[0].observed_at +
                                                   dt.timedelta(seconds=570) else 0.0 for x in snaps]


@pytest.mark.parametrize("free, offline_at, total, hard, factors", [
    ([40, 30, 20], [30, 200], 100 * GB, Limit("bytes", 10 * GB), [0.0, 0.0]),    # filling: offline-filling
    ([40, 40, 40], [30, 200], 100 * GB, Limit("bytes", 10 * GB), [1.0, 1.0]),    # steady: its last reading stays
    ([20, 30, 40], [30], 100 * GB, Limit("bytes", 10 * GB), [1.0]),              # freeing
    ([12.2, 12.1, 12.0], [30, 200, 240], 100 * GB, Limit("bytes", 10 * GB), [1.0, 1.0, 0.0]),  # reached later
    ([3, 2.5, 2], [45, 47], 7 * GB, Limit("ratio", 0.1), [1.0, 0.0]),
])
def test_the_compiled_pass_decides_offline_dirs_as_the_reference(tmp_path, free, offline_at, total, hard, factors):
    from tests.unit.test_decide import went_offline

    s = replace(settings(validity_s=60), limits=Limits(hard))
    snaps = went_offline(free, offline_at, total=total)
    got, _ = replayed([write_flat(tmp_path / "j.parquet", snaps)], ["c1"], s, chunk_rows=2)
    assert got == streaming(snaps, s)
    assert [r["throttle_factor"] for r in got[3:]] == factors
    assert [r["closest_volumes"][0]["reason"] for r in got[3:]] == [
        "offline-filling" if f == 0.0 else None for f in factors]
    assert [r["closest_volumes"][0]["eta_seconds"] for r in got[3:] if r["throttle_factor"] == 0.0] == \
        [0.0] * factors.count(0.0)


def test_a_journal_split_over_files_out_of_order_is_read_in_time_order(tmp_path):
    s = settings(hard_bytes=5 * GB, validity_s=30)
    snaps = [ok(10 * i, vol(1, (20 - i) * GB), vol(2, 50 * GB)) for i in range(20)]
    late = write_flat(tmp_path / "b.parquet", snaps[10:], 4)
    early = write_flat(tmp_path / "a-late-name.parquet", snaps[:10][::-1], 3)
    got, _ = replayed([early, late], ["c1"], s, chunk_rows=5)
    want = streaming(snaps, s)
    assert [r["throttle_factor"] for r in got] == [r["throttle_factor"] for r in want]
    assert [r["observed_at"] for r in got] == [r["observed_at"] for r in want]


def test_bad_rows_are_rejected_with_the_rules_reasons_and_where_they_are(tmp_path):
    s = settings()
    good = [ok(10 * i, vol(1, 50 * GB)) for i in range(3)]
    path = write_flat(tmp_path / "good.parquet", good)
    table = pq.read_table(path)
    broken = table.to_pylist()
    broken[1]["log_dir"] = ""
    broken[2]["status"] = "NOPE"
    dup = dict(broken[0])
    pq.write_table(pa.Table.from_pylist(broken, schema=table.schema), str(tmp_path / "bad.parquet"))
    pq.write_table(pa.Table.from_pylist([dup], schema=table.schema), str(tmp_path / "dup.parquet"))
    files = [str(tmp_path / "bad.parquet"), str(tmp_path / "dup.parquet")]
    got, rejected = replayed(files, ["c1"], s)
    assert len(got) == 1
    reasons = {(r["file"].rsplit("/", 1)[1], r["line"]): r["reason"] for r in rejected}
    assert reasons == {
        ("bad.parquet", 2): rules.VOLUME_RULES[1].reason,
        ("bad.parquet", 3): rules.SNAPSHOT_RULES[4].reason,
        ("dup.parquet", 1): "duplicate snapshot of this cluster and observed_at",
    }
    assert [r["first"] for r in rejected if r["first"]] == [{"file": files[0], "offset": 0, "line": 1}]


@pytest.mark.parametrize("column, value, reason", [
    ("observed_at", "yesterday", rules.SNAPSHOT_RULES[2].reason),
    ("broker_id", None, rules.VOLUME_RULES[0].reason),
    ("available_bytes", -1, rules.VOLUME_RULES[3].reason),
    ("total_bytes", None, rules.VOLUME_RULES[2].reason),
])
def test_each_volume_rule(tmp_path, column, value, reason):
    path = write_flat(tmp_path / "j.parquet", [ok(0, vol(1, 50 * GB), vol(2, 50 * GB))])
    rows = pq.read_table(path).to_pylist()
    rows[1][column] = value
    if column == "observed_at":
        rows[1]["observed_us"] = None
        rows[0]["observed_at"] = rows[1]["observed_at"] = value
        rows[0]["observed_us"] = None
    pq.write_table(pa.Table.from_pylist(rows, schema=period_file.SCHEMA), path)
    got, rejected = replayed([path], ["c1"], settings())
    assert got == [] and [r["reason"] for r in rejected] == [reason]


def test_the_strategies_generate_stops_of_each_scope():
    """The property tests above see the record's stop list topics (some), stop a dir holding no partition (none)
    and stop the cluster for a violating dir whose topics are not known (find fails when no journal has it)."""
    s = settings(hard_bytes=5 * GB, validity_s=60)

    def stops(snaps) -> set:
        out = set()
        for sm, d in decide_all(snaps, s):
            stop = stop_of(sm, d)
            if stop is not None and d.source.value == "OBSERVATION":
                out.add("cluster" if stop.scope == "cluster" else "none" if not stop.topics else "some")
        return out

    for scope in ("some", "none", "cluster"):
        found = find(fleets(), lambda snaps: scope in stops(snaps), random=random.Random(0),
                     settings=hsettings(phases=[Phase.generate], max_examples=2000, database=None))
        assert scope in stops(found)


def test_the_strategies_generate_predictive_throttles():
    """The property test above sees the predictive step lower the factor (issue 21)."""
    s = settings(hard_bytes=5 * GB, validity_s=60, eta=(600, 600))

    def predicted(snaps) -> bool:
        return any(sm.predictive is not None for sm, _ in decide_all(snaps, s))

    found = find(fleets(), predicted, random=random.Random(0),
                 settings=hsettings(phases=[Phase.generate], max_examples=2000, database=None))
    assert predicted(found)


@pytest.mark.parametrize("eta", [(600, 3600), (1800, 3600), (1800, 600)])
def test_the_compiled_pass_throttles_a_fill_on_a_sawtooth_as_the_reference(tmp_path, eta):
    """test_eta's journal, a retention sawtooth with a real fill on top, decided in chunks of a few snapshots (the
    buckets carried from chunk to chunk)."""
    from tests.unit.test_eta import HARD, TOTAL, sawtooth

    s = settings(hard_bytes=HARD, eta=eta)
    snaps = [ok(t, vol(1, a, total=TOTAL), vol(2, 500 * GB, total=TOTAL), vol(2, a + GB, total=TOTAL, log_dir="/d1"))
             for t, a in sawtooth(5 * 3600, extra=(3600, 5 * 3600, 8e6))]
    got, _ = replayed([write_flat(tmp_path / "j.parquet", snaps)], ["c1"], s, chunk_rows=50)
    want = streaming(snaps, s)
    assert got == want
    assert any(r["predictive"] is not None for r in want) and any(0.0 < r["throttle_factor"] < 1.0 for r in want)


def test_a_time_an_offset_moves_out_of_datetimes_range_is_out_of_the_journals_range_not_an_error():
    """Found by the Parquet fuzzer: year 1 at +01:00 is year 0 in UTC; replay rejects its row (out of range) and
    goes on, where the parse raised RecordError through the whole replay."""
    from quota_pipeline.core.compiled.frame import BAD_TIME, in_range, parsetimes
    t = parsetimes(pa.array(["", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2026-03-02T00:00:00Z"]))
    assert t[0] == BAD_TIME
    assert list(in_range(t)) == [False, False, False, True]
