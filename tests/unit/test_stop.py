"""The record's `stop`: what a factor of 0 refuses (docs/design.md, Decision semantics). Each case is decided by the
reference (core/reference/cache.py + core/reference/decision.py + core/record.py), by replay's compiled pass and by the streaming
processor, which must publish the same stop."""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from tests.support.builders import GB, MemoryHandle, failed, ok, settings, spark_rows, vol
from quota_pipeline import resources
from quota_pipeline.core.reference.decision import DecisionState, step
from quota_pipeline.core.model import STOP_TOPICS_BUDGET, PartitionSize, Stop, stop_json_bytes
from quota_pipeline.core.record import ThrottleDecision, build_record, stop_from_json
from quota_pipeline.streaming import source
from quota_pipeline.streaming.processor import DecisionProcessor
from tests.unit.test_cluster_pass import replayed, write_flat

DECIDED = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
CLUSTER = {"scope": "cluster"}


def topics(b: int, free: int | None, names, log_dir: str = "/d0"):
    """A reading with its topics (None: not known)."""
    return replace(vol(b, free, log_dir=log_dir), topics=None if names is None else tuple(names))


def reference(snaps, s) -> list[dict]:
    state, out = DecisionState(), []
    for snap in snaps:
        summary, decision = step(state, snap, s)
        out.append(build_record(summary, decision, s, DECIDED, "out").to_json())
    return out


def compiled(tmp_path, snaps, s, chunk_rows: int = 2) -> list[dict | None]:
    got, rejected = replayed([write_flat(tmp_path / "j.parquet", snaps)], ["c1"], s, chunk_rows)
    assert rejected == []
    return [None if r["stop"] is None else stop_from_json(r["stop"]).to_json() for r in got]


def processed(snaps, s, per_batch: int = 1, handle: MemoryHandle | None = None) -> list[dict]:
    handle = handle or MemoryHandle()
    processor = DecisionProcessor({"a": s}, {"a": "out"})
    processor.init(handle)
    got = []
    for i in range(0, len(snaps), per_batch):
        frame = _frame(r for tick, snap in enumerate(snaps[i:i + per_batch], start=i)
                       for r in source.snapshot_rows("a", tick, snap))
        for out in processor.handleInputRows(("c1",), iter(frame), None):
            got.append(json.loads(out.value))
    return got


def _frame(rows) -> list:
    return spark_rows(rows)


def stops(tmp_path, snaps, s) -> list[dict | None]:
    """The stop of each snapshot, the same by all three forms."""
    want = [r["stop"] for r in reference(snaps, s)]
    assert compiled(tmp_path, snaps, s) == want
    assert [r["stop"] for r in processed(snaps, s)] == want
    assert [r["stop"] for r in processed(snaps, s, per_batch=3)] == want
    return want


def test_a_dir_at_the_hard_limit_stops_its_topics_and_no_other(tmp_path):
    s = settings(hard_bytes=10 * GB)
    snaps = [ok(0, topics(1, 50 * GB, ["a", "b"]), topics(2, 50 * GB, ["c"])),
             ok(10, topics(1, 10 * GB, ["b", "a"][::-1]), topics(2, 50 * GB, ["c"])),   # at the limit: inclusive
             ok(20, topics(1, 5 * GB, ["a", "b"]), topics(2, 5 * GB, ["b", "d"])),      # two dirs: the union
             ok(30, topics(1, 50 * GB, ["a", "b"]), topics(2, 50 * GB, ["c"]))]
    assert stops(tmp_path, snaps, s) == [None, {"scope": "topics", "topics": ["a", "b"]},
                                         {"scope": "topics", "topics": ["a", "b", "d"]}, None]


def test_a_stopped_dir_holding_no_partition_stops_no_topic(tmp_path):
    snaps = [ok(0, topics(1, 5 * GB, []), topics(2, 50 * GB, ["c"]))]
    assert stops(tmp_path, snaps, settings()) == [{"scope": "topics", "topics": []}]


def test_every_violating_dir_counts_not_only_the_closest_listed(tmp_path):
    """closest_volumes lists 1 (or none), the stop names the topics of all three dirs at the limit."""
    snaps = [ok(0, *(topics(b, 5 * GB, [f"t{b}"]) for b in (1, 2, 3)), topics(4, 50 * GB, ["x"]))]
    for closest in (0, 1):
        assert stops(tmp_path, snaps, settings(closest=closest)) == [
            {"scope": "topics", "topics": ["t1", "t2", "t3"]}]


def test_an_offline_dir_without_a_reading_stops_the_cluster(tmp_path):
    snaps = [ok(0, vol(1, None), topics(2, 50 * GB, ["c"])),
             ok(10, vol(1, None), topics(2, 5 * GB, ["c"]))]   # one known, one not: still the cluster
    assert stops(tmp_path, snaps, settings()) == [CLUSTER, CLUSTER]


def test_violate_policy_offline_entries_have_no_topics(tmp_path):
    snaps = [ok(0, topics(1, 50 * GB, ["a"])), ok(10, vol(1, None))]
    assert stops(tmp_path, snaps, settings(offline="violate")) == [None, CLUSTER]


def test_a_dir_that_went_offline_after_filling_keeps_its_readings_topics(tmp_path):
    # 1 GB/s: by 30 s the last reading (20 GB at 20 s) is down to the 10 GB hard limit.
    snaps = [ok(10 * i, replace(topics(1, g * GB, ["fill", "other"]), top_partitions=(PartitionSize("fill", 0, i),)),
                topics(2, 50 * GB, ["c"])) for i, g in enumerate([40, 30, 20])]
    snaps += [ok(t, vol(1, None), topics(2, 50 * GB, ["c"])) for t in (30, 40)]
    got = stops(tmp_path, snaps, settings(validity_s=60))
    assert got == [None] * 3 + [{"scope": "topics", "topics": ["fill", "other"]}] * 2
    assert reference(snaps, settings(validity_s=60))[3]["closest_volumes"][0]["reason"] == "offline-filling"


def test_a_factor_of_0_from_the_fallback_stops_the_cluster(tmp_path):
    s = settings(validity_s=30, fallback=0.0)
    snaps = [ok(0, topics(1, 50 * GB, ["a"])), failed(10), failed(40), failed(50)]
    got = stops(tmp_path, snaps, s)
    assert [r["source"] for r in reference(snaps, s)] == ["OBSERVATION", "RETAINED", "FALLBACK", "FALLBACK"]
    assert got == [None, None, CLUSTER, CLUSTER]


def test_a_retained_stop_is_computed_from_the_entries_in_force(tmp_path):
    s = settings(validity_s=30)
    snaps = [ok(0, topics(1, 5 * GB, ["a"])), failed(10), failed(20),
             failed(30)]   # the reading expired: still retained at 0, no violating entry left: the cluster
    records = reference(snaps, s)
    assert [(r["throttle_factor"], r["source"]) for r in records] == [(0.0, "OBSERVATION")] + [(0.0, "RETAINED")] * 3
    assert stops(tmp_path, snaps, s) == [{"scope": "topics", "topics": ["a"]}] * 3 + [CLUSTER]


def test_a_predictive_factor_of_0_stops_the_cluster(tmp_path):
    """No log dir violates, the predictive step alone gives 0 (its envelope has already crossed the limit)."""
    s = settings(hard_bytes=10 * GB, eta=(600, 60))
    free = [40, 30, 20, 9, 30, 30, 30]  # one reading below the limit, then a tooth back above it
    snaps = [ok(10 * i, topics(1, g * GB, ["a"]), topics(2, 50 * GB, ["c"])) for i, g in enumerate(free)]
    records = reference(snaps, s)
    zero_without_violation = [i for i, r in enumerate(records) if r["throttle_factor"] == 0.0 and not r["violations"]]
    assert zero_without_violation, [(r["throttle_factor"], r["violations"]) for r in records]
    got = stops(tmp_path, snaps, s)
    assert all(got[i] == CLUSTER for i in zero_without_violation)


def test_a_journal_without_topics_stops_the_cluster(tmp_path):
    """A journal written before the field: its readings' topics are not known."""
    line = json.dumps(ok(0, vol(1, 5 * GB)).to_json())
    assert "topics" not in line
    from quota_pipeline.core.snapshot_rules import parse_line
    snaps = [parse_line(line)]
    assert snaps[0].volumes[0].topics is None
    assert stops(tmp_path, snaps, settings()) == [CLUSTER]


def test_a_topic_list_over_the_budget_stops_the_cluster(tmp_path):
    names = [f"{i:06d}-" + "x" * 240 for i in range(STOP_TOPICS_BUDGET // 240)]
    assert stop_json_bytes(names) > STOP_TOPICS_BUDGET > stop_json_bytes(names[:-100])
    snaps = [ok(0, topics(1, 5 * GB, names)), ok(10, topics(1, 5 * GB, names[:-100]))]
    got = stops(tmp_path, snaps, settings())
    assert got[0] == CLUSTER and got[1] == {"scope": "topics", "topics": names[:-100]}


def test_the_stop_in_the_record_and_its_schema():
    s = settings()
    snaps = [ok(0, topics(1, 5 * GB, ["a", "b"])), ok(10, vol(1, None)), ok(20, topics(1, 50 * GB, ["a"]))]
    for record in reference(snaps, s):
        assert resources.errors("throttle_decision", record) == []
        back = ThrottleDecision.from_json(json.loads(json.dumps(record)))
        assert (None if back.stop is None else back.stop.to_json()) == record["stop"]
    replay_cluster = {**reference(snaps, s)[1], "stop": {"scope": "cluster", "topics": None}}  # replay's JSONL
    assert resources.errors("throttle_decision", replay_cluster) == []
    older = reference(snaps, s)[0]
    del older["stop"]
    assert resources.errors("throttle_decision", older) == [] and ThrottleDecision.from_json(older).stop is None
    for bad in ({"scope": "topics"}, {"scope": "topics", "topics": [1]}, {"scope": "everything"}, "cluster"):
        assert resources.errors("throttle_decision", {**older, "stop": bad}) != []
        assert stop_from_json(bad) == Stop("cluster")   # acted on: one that cannot be read stops the cluster


def test_the_observer_lists_every_topic_with_a_replica_on_the_dir_future_ones_included():
    from quota_pipeline.kafka.observer import _BrokerProblems, _volumes

    def part(i, size, future=False):
        return SimpleNamespace(partition_index=i, partition_size=size, is_future_key=future)

    def topic(name, *parts):
        return SimpleNamespace(name=name, partitions=list(parts))

    results = [
        SimpleNamespace(error_code=0, log_dir="/d0", total_bytes=100, usable_bytes=50, topics=[
            topic("orders", part(0, 10), part(1, 20)), topic("moving", part(3, 1, future=True)),
            topic("empty"), topic("audit", part(0, 5))]),
        SimpleNamespace(error_code=0, log_dir="/d1", total_bytes=100, usable_bytes=90, topics=[]),
        SimpleNamespace(error_code=56, log_dir="/d2", total_bytes=-1, usable_bytes=-1, topics=[]),
    ]
    response = SimpleNamespace(API_VERSION=4, error_code=0, results=results)
    d0, d1, d2 = _volumes(1, response, _BrokerProblems())
    assert d0.topics == ("audit", "moving", "orders")
    assert [p.topic for p in d0.top_partitions] == ["orders", "orders", "audit"]  # the largest: no future replica
    assert d1.topics == () and d2.offline and d2.topics is None
    assert d0.to_json()["topics"] == ["audit", "moving", "orders"] and "topics" not in d2.to_json()


def test_lists_that_join_alike_are_told_apart(tmp_path):
    """The compiled pass unites each distinct list of topics once, found by joining a list's names: [] and [""],
    and a name holding the separator, are still told apart."""
    s = settings()
    snaps = [ok(0, topics(1, 5 * GB, []), topics(2, 5 * GB, [""])),
             ok(10, topics(1, 5 * GB, []), topics(2, 50 * GB, [""])),
             ok(20, topics(1, 5 * GB, ["a\x1fb"]), topics(2, 5 * GB, ["a", "b"])),
             ok(30, topics(1, 5 * GB, ["a\x1fb"]), topics(2, 50 * GB, ["a", "b"]))]
    assert stops(tmp_path, snaps, s) == [{"scope": "topics", "topics": [""]}, {"scope": "topics", "topics": []},
                                         {"scope": "topics", "topics": ["a", "a\x1fb", "b"]},
                                         {"scope": "topics", "topics": ["a\x1fb"]}]


@pytest.mark.parametrize("values", [[["a"], None, [], ["b", "c"]], [7, None, 8, 9]])
@pytest.mark.parametrize("rows", [[3, 0, 1, 2, 3], [0, 2, 3], [1, 2, 3], [2], [0, 0, 3, 3], [3, 1], []])
def test_rows_are_taken_chunk_by_chunk_in_the_order_asked(rows, values):
    from quota_pipeline.core.compiled.rows import Rows
    column = pa.chunked_array([pa.array(values[:2]), pa.array(values[2:])])
    taken = Rows(np.array(rows, np.int64)).take(column)
    assert isinstance(taken, pa.Array) and taken.to_pylist() == [values[r] for r in rows]
    assert Rows(np.array(rows, np.int64)).take(pa.chunked_array([column.combine_chunks()])).to_pylist() == \
        [values[r] for r in rows]
    with_an_empty_chunk = pa.chunked_array([column.chunk(0), pa.array([], column.type), column.chunk(1)])
    assert Rows(np.array(rows, np.int64)).take(with_an_empty_chunk).to_pylist() == [values[r] for r in rows]


def test_the_stop_lists_only_what_it_refuses_the_decision_topic_only_where_another_cluster_holds_it(tmp_path):
    """Kafka's internal topics are never refused, nor the decision topic on the cluster that holds it: the record's
    stop does not list them. With the decision topic on an output cluster of its own, a topic of its name on the
    observed cluster is anyone's, refused and listed like any other."""
    from quota_pipeline.core import config as cfg
    from quota_pipeline.core.settings import Settings
    held = ["orders", "__consumer_offsets", "__quota_throttle_factors", "__transaction_state"]
    snaps = [ok(0, topics(1, 5 * GB, held), topics(2, 5 * GB, ["__share_group_state"]))]
    assert stops(tmp_path, snaps, settings()) == [{"scope": "topics", "topics": ["orders"]}]
    base = {cfg.BOOTSTRAP: "observed:9092", cfg.HARD_BYTES: str(10 * GB)}
    output = {**base, "quota.pipeline.output.kafka.bootstrap.servers": "output:9092"}
    for props, listed in ((base, ["orders"]), (output, ["__quota_throttle_factors", "orders"]),
                          ({**output, cfg.OUTPUT_TOPIC_HERE: "true"}, ["orders"])):
        s = replace(settings(), exemption=Settings.of(cfg.parse(props)).exemption)
        assert stops(tmp_path, snaps, s) == [{"scope": "topics", "topics": listed}], props
