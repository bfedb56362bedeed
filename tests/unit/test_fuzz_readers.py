"""Issue 18: fuzzers for the readers of outside input (hypothesis). Property: any input gives a result or a clear
rejection (ConfigError, RecordError, a rejected file or row with a reason), never another exception or a hang.
`pytest --hypothesis-show-statistics tests/unit/test_fuzz_readers.py` prints how many inputs each tried."""
from __future__ import annotations

import json
import string

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import RecordError, VolumeSnapshot
from quota_pipeline.core.properties import KNOWN
from quota_pipeline.core import snapshot_rules as rules

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])

# ---- properties files ----------------------------------------------------------------------------------------
keys = st.sampled_from(KNOWN + ("kafka.admin.x", "quota.pipeline.output.kafka.sasl.jaas.confg", "x"))
values = st.one_of(st.text(max_size=30), st.sampled_from(["0", "-1", "1e400", "nan", "PT5M", "P1M", "../x", "1L",
                                                          "User:a;b", "0.5", "\\uZZZZ", "\\"]))
lines = st.one_of(st.tuples(keys, st.sampled_from(["=", ":", " ", " = "]), values).map("".join),
                  st.text(max_size=40), st.just("# comment"), st.just("a=\\"))


@FUZZ
@given(st.one_of(st.lists(lines, max_size=12).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
                 st.binary(max_size=300)))
def test_any_properties_file_gives_a_config_or_error_lines(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("p") / "fuzz.properties"
    path.write_bytes(data)
    try:
        conf = cfg.load(path, require_admin=False)
    except cfg.ConfigError as exc:
        assert exc.problems and all(str(p).startswith("error: ") for p in exc.problems)
        return
    conf.effective()  # what `validate` prints
    for w in conf.warnings:
        assert w.startswith("warning: ")


# ---- JSONL journal lines ---------------------------------------------------------------------------------------
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
times = st.one_of(st.sampled_from(["2026-11-21T10:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+01:00",
                                   "9999-12-31T23:59:59-14:00", "1969-12-31T23:59:59Z", "2026-13-40", ""]),
                  st.datetimes().map(lambda d: d.isoformat()), st.text(max_size=25))
volumes = st.fixed_dictionaries({}, optional={
    "broker_id": st.one_of(st.integers(), json_values), "log_dir": st.one_of(st.text(max_size=8), json_values),
    "total_bytes": st.one_of(st.integers(min_value=-5, max_value=2**64), json_values),
    "available_bytes": st.one_of(st.integers(min_value=-5, max_value=2**64), json_values),
    "error": st.one_of(st.none(), st.just("KAFKA_STORAGE_ERROR"), json_values),
    "top_partitions": st.one_of(st.lists(st.fixed_dictionaries({"topic": st.text(max_size=5),
                                                                "partition": st.integers(),
                                                                "size_bytes": st.integers()}), max_size=2),
                                json_values)})
snapshots = st.fixed_dictionaries({}, optional={
    "cluster_id": st.one_of(st.text(max_size=10), json_values), "observed_at": st.one_of(times, json_values),
    "status": st.one_of(st.sampled_from(rules.STATUSES), json_values),
    "brokers": st.one_of(st.lists(st.integers(), max_size=3), json_values),
    "fenced_brokers": st.one_of(st.lists(st.integers(), max_size=3), json_values),
    "volumes": st.one_of(st.lists(volumes, max_size=3), json_values), "message": json_values})


def _mangle(text: str, cut: int, junk: bytes) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return raw[:cut] + junk if cut < len(raw) else raw


@FUZZ
@given(st.one_of(snapshots.map(lambda s: json.dumps(s).encode("utf-8", "surrogatepass")),
                 st.builds(_mangle, snapshots.map(json.dumps), st.integers(0, 200), st.binary(max_size=4)),
                 st.binary(max_size=200), st.integers(1, 5000).map(lambda n: b"[" * n)))
def test_any_journal_line_gives_a_snapshot_or_a_reason(line):
    try:
        snap = rules.parse_line(line)
    except RecordError as exc:
        assert str(exc)  # a reason a person can read
        return
    assert isinstance(snap, VolumeSnapshot)
    assert rules.EARLIEST <= snap.observed_at < rules.LATEST


# ---- Parquet journals (replay's own pass, no Spark) ---------------------------------------------------------------
column_types = {
    "cluster_id": [pa.string(), pa.int64(), pa.float64()], "observed_at": [pa.string(), pa.int64()],
    "status": [pa.string(), pa.int32()], "brokers": [pa.list_(pa.int64()), pa.string()],
    "broker_id": [pa.int64(), pa.int32(), pa.string()], "log_dir": [pa.string(), pa.int64()],
    "total_bytes": [pa.int64(), pa.float64()], "available_bytes": [pa.int64(), pa.string()],
    "error": [pa.string()], "observed_us": [pa.int64()],
}
samples = {pa.string(): st.one_of(st.none(), st.text(max_size=6), times, st.sampled_from(rules.STATUSES + ("c1",))),
           pa.int64(): st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.integers(-3, 300)),
           pa.int32(): st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)),
           pa.float64(): st.one_of(st.none(), st.floats()),
           pa.list_(pa.int64()): st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(0, 5)), max_size=3))}


@st.composite
def parquet_tables(draw):
    names = draw(st.lists(st.sampled_from(sorted(column_types)), min_size=1, max_size=len(column_types), unique=True))
    n = draw(st.integers(1, 6))
    columns = {}
    for name in names:
        t = draw(st.sampled_from(column_types[name]))
        columns[name] = pa.array(draw(st.lists(samples[t], min_size=n, max_size=n)), t)
    footer = draw(st.one_of(st.none(), st.sampled_from(['{"2026-11-21": [[1, 2]]}', "{", "[]", '{"x": 1}']),
                            st.text(max_size=20)))
    return pa.table(columns), footer


@FUZZ
@given(parquet_tables())
def test_any_parquet_journal_gives_decisions_or_rejections(tmp_path_factory, drawn):
    from tests.support.builders import settings as replay_settings
    from quota_pipeline.journal.inputs import find_inputs
    from quota_pipeline.journal.period_file import META_SOURCES
    from quota_pipeline.replay.cluster_files import ClusterFiles, Task
    from quota_pipeline.replay.job import plan_tasks

    table, footer = drawn
    d = tmp_path_factory.mktemp("pq")
    if footer is not None:
        table = table.replace_schema_metadata({META_SOURCES: footer})
    pq.write_table(table, str(d / "j.parquet"))
    inputs = find_inputs(str(d))
    for _, why in inputs.unreadable:
        assert why.startswith(("wrong schema", "malformed", "unreadable"))
    files = [f for g in inputs.parquet for f in g]
    for task in plan_tasks(files):
        p = ClusterFiles(Task(task.cluster_id, task.files), replay_settings())
        decided = sum(b.num_rows for b in p.batches())
        assert decided == p.outcome.snapshots or decided >= 0
        assert all(r["reason"] for r in p.outcome.rejected)


# ---- decision records, as the Python readers take them -----------------------------------------------------------
records = st.fixed_dictionaries({"schema_version": st.one_of(st.sampled_from([1, 2]), json_values),
                                 "throttle_factor": st.one_of(st.floats(0, 1), json_values)}, optional={
    "cluster_id": json_values, "observed_at": st.one_of(times, json_values), "decided_at": st.one_of(times, json_values),
    "valid_until": st.one_of(times, json_values), "source": json_values, "status": json_values,
    "throttled_since": st.one_of(times, json_values), "min_available_ratio": json_values,
    "missing_brokers": json_values, "worst_volume": json_values, "closest_volumes": json_values,
    "limit": json_values, "violations": json_values, "active_brokers": json_values})


def _readable_but(**fields: object) -> bytes:
    """A well-formed record but for `fields`: random fields rarely get past the ones the reader checks first."""
    import datetime as dt

    from harness.dashboard import encode, record, volume
    base = record("c1", dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc), 0.5, [volume(1, "/d", 0.1)])
    return encode({**base, **fields})


@FUZZ
@given(st.one_of(records.map(lambda r: json.dumps(r).encode("utf-8", "surrogatepass")), st.binary(max_size=120)))
@example(_readable_but(active_brokers=float("inf")))  # int(Infinity) raised OverflowError, not a RecordError
@example(_readable_but(violations=float("-inf"), worst_volume={"broker_id": 1, "log_dir": "/d",
                                                               "available_bytes": float("nan"), "available_ratio": 0.1}))
def test_any_decision_record_is_read_or_refused(value):
    from quota_pipeline.reader.parsing import parse_decision

    try:
        parse_decision(value)
    except ValueError as exc:  # RecordError, JSONDecodeError, UnicodeDecodeError: the reader counts and skips it
        assert str(exc)
