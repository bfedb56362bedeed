"""The set-based Spark form of the volume cache equals the streaming Python form, on random journals."""
from __future__ import annotations

import datetime as dt
import json

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from builders import GB, failed, ok, settings, vol
from quota_pipeline.replay import intervals as aggregate
from quota_pipeline.journal import spark_reader as journal
from quota_pipeline.replay import job as replay
from quota_pipeline.core.decision import decide_all
from quota_pipeline.core.model import Status


@st.composite
def cluster_journal(draw, cluster: str):
    t, snaps = 0.0, []
    for _ in range(draw(st.integers(1, 30))):
        t += draw(st.sampled_from([1, 10, 29, 30, 31, 60, 200]))
        if draw(st.integers(0, 6)) == 0:
            snaps.append(failed(t, draw(st.sampled_from(list(Status)[1:])), cluster=cluster))
            continue
        brokers = draw(st.sets(st.integers(1, 3), min_size=1))
        fenced = draw(st.sets(st.integers(4, 5), max_size=1))
        reporting = draw(st.sets(st.sampled_from(sorted(brokers | fenced))))
        vols = []
        for b in sorted(reporting):
            for d in sorted(draw(st.sets(st.sampled_from(["/a", "/b"]), min_size=1))):
                free = draw(st.one_of(st.none(), st.integers(0, 40).map(lambda g: g * GB // 2)))
                total = draw(st.sampled_from([100 * GB, 0, 7 * GB + 3]))
                vols.append(vol(b, None if free is None else min(free, total), total=total, log_dir=d))
        snaps.append(ok(t, *vols, brokers=sorted(brokers), fenced=sorted(fenced), cluster=cluster))
    return snaps


@st.composite
def fleets(draw):
    snaps = []
    for i in range(draw(st.integers(1, 6))):
        snaps += draw(cluster_journal(f"c{i}"))
    return snaps


def python_records(snaps, s):
    return {(sm.cluster_id, sm.observed_at): (sm, d) for sm, d in decide_all(snaps, s)}


@hsettings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(fleets(), st.sampled_from(["pin", "last-known", "violate"]), st.sampled_from([None, 15 * GB]),
       st.sampled_from([30, 60]))
def test_spark_replay_equals_streaming_decisions(spark, tmp_path_factory, snaps, offline, soft, validity):
    s = settings(hard_bytes=5 * GB, soft_bytes=soft, validity_s=validity, offline=offline, fallback=0.3)
    path = tmp_path_factory.mktemp("eq") / "journal.jsonl"
    path.write_text("".join(json.dumps(x.to_json()) + "\n" for x in snaps))
    valid, rejected = journal.read(spark, str(path))
    assert rejected.count() == 0
    rows = replay.decisions(aggregate.summaries(valid, s), s).collect()
    expected = python_records(snaps, s)
    assert len(rows) == len(expected)
    for r in rows:
        sm, d = expected[(r.cluster_id, r.observed_at.replace(tzinfo=dt.timezone.utc))]
        assert (r.throttle_factor, r.source) == (d.factor, d.source.value), (r, sm, d)
        assert _naive(d.valid_until(s.validity)) == r.valid_until
        assert (r.violations, r.active_log_dirs, r.active_brokers) == (
            sm.violations, sm.active_log_dirs, sm.active_brokers), (r, sm)
        assert tuple(r.missing_brokers) == sm.missing_brokers
        assert r.min_available_ratio == sm.min_available_ratio
        worst = None if r.worst_volume is None else tuple(r.worst_volume)
        expected_worst = None if sm.worst_volume is None else (
            sm.worst_volume.broker_id, sm.worst_volume.log_dir, sm.worst_volume.available_bytes,
            sm.worst_volume.available_ratio)
        assert worst == expected_worst, (r, sm)


def _naive(t):
    return None if t is None else t.replace(tzinfo=None)
