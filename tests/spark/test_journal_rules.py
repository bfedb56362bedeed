"""One corpus of journal lines, judged the same way by every reader (the Python model, Spark's JSONL reader, replay's
Parquet checks) and by the JSON Schema."""
from __future__ import annotations

import json

import pytest

from quota_pipeline import resources
from quota_pipeline.core.model import RecordError
from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.journal import lines
from quota_pipeline.journal import spark_reader as journal

VOL = {"broker_id": 1, "log_dir": "/d", "total_bytes": 100, "available_bytes": 40, "error": None}


_seconds = iter(range(10_000))


def snap(**fields) -> str:
    """A journal line; each at its own second, so that no two lines are duplicates of each other."""
    record = {"cluster_id": "c1", "observed_at": f"2026-11-21T10:{next(_seconds):02d}:00.000Z", "status": "SUCCESS",
              "brokers": [1], "fenced_brokers": [], "volumes": [VOL]}
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not ...})


def vol(**fields) -> dict:
    return {k: v for k, v in {**VOL, **fields}.items() if v is not ...}


VALID = [
    snap(),
    snap(status="TIMEOUT", brokers=..., fenced_brokers=..., volumes=...),
    snap(volumes=[vol(total_bytes=None, available_bytes=None, error="KAFKA_STORAGE_ERROR")]),
    snap(fenced_brokers=[2], brokers=[1], message="extension field"),
    snap(volumes=[vol(), vol(broker_id=2)]),
    snap(volumes=[vol(top_partitions=[{"topic": "orders", "partition": 3, "size_bytes": 40}])]),
    snap(observed_at="2026-11-21T10:00:00+01:00"),
    snap(volumes=[vol(topics=["orders", "payments"]), vol(broker_id=2, topics=[]), vol(broker_id=3, topics=None)]),
    snap(volumes=[vol(total_bytes=None, available_bytes=None, error="KAFKA_STORAGE_ERROR", topics=["orders"])]),
]
# (line, the reason both readers must give)
BAD = [
    ("this is not json", rules.NOT_JSON),
    ("[1, 2]", "not a JSON object"),
    (snap()[:40], rules.NOT_JSON),                                     # a truncated line
    (snap(cluster_id="prod-east").replace("-", "\udcff").encode("utf-8", "surrogateescape"), rules.NOT_UTF8),
    (snap(observed_at="9999-12-31T00:00:00Z"), "observed_at must be from 1970-01-01 to 2199-12-31 (UTC)"),
    (snap(observed_at="1969-12-31T23:59:59Z"), "observed_at must be from 1970-01-01 to 2199-12-31 (UTC)"),
    (snap(volumes=[vol(available_bytes=101)]), "volumes[].available_bytes must not exceed total_bytes"),
    (snap(cluster_id=...), "cluster_id must be a non-empty string"),
    (snap(cluster_id=""), "cluster_id must be a non-empty string"),
    (snap(observed_at="yesterday"), "observed_at must be an ISO-8601 timestamp"),
    (snap(observed_at=...), "observed_at must be an ISO-8601 timestamp"),
    (snap(status="OK"), f"status must be one of {', '.join(rules.STATUSES)}"),
    (snap(status=...), f"status must be one of {', '.join(rules.STATUSES)}"),
    (snap(brokers=...), "brokers must be a list of broker ids"),
    (snap(brokers=[1, None]), "brokers must be a list of broker ids"),
    (snap(fenced_brokers=[None]), "fenced_brokers must be a list of broker ids"),
    (snap(volumes=[vol(), 7]), rules.SNAPSHOT_RULES[-1].reason),
    (snap(observed_at="9999-12-30T00:00:00Z", status="OK"), "observed_at must be from 1970-01-01 to 2199-12-31 (UTC)"),
    (snap(volumes={"broker_id": 1}), rules.SNAPSHOT_RULES[-1].reason),
    (snap(volumes=[vol(top_partitions=["orders-3"])]), rules.SNAPSHOT_RULES[-1].reason),
    (snap(volumes=[vol(top_partitions=[{"topic": "orders", "partition": "x", "size_bytes": 1}])]),
     rules.SNAPSHOT_RULES[-1].reason),
    (snap(status="TIMEOUT", brokers=["a"]), "brokers must be a list of broker ids"),
    (snap(fenced_brokers=[1.5]), "fenced_brokers must be a list of broker ids"),
    (snap(volumes=[vol(broker_id="x")]), "volumes[].broker_id must be an integer"),
    (snap(volumes=[vol(total_bytes=1.5)]), "a volume without error needs integer total_bytes and available_bytes"),
    (snap(volumes=[vol(broker_id=None)]), "volumes[].broker_id must be an integer"),
    (snap(volumes=[vol(log_dir="")]), "volumes[].log_dir must be a non-empty string"),
    (snap(volumes=[vol(log_dir=...)]), "volumes[].log_dir must be a non-empty string"),
    (snap(volumes=[vol(total_bytes=None)]), "a volume without error needs integer total_bytes and available_bytes"),
    (snap(volumes=[vol(available_bytes=...)]), "a volume without error needs integer total_bytes and available_bytes"),
    (snap(volumes=[vol(available_bytes=-1)]),
     "volumes[] byte counts must be >= 0 (an offline dir has error set and null bytes)"),
    (snap(volumes=[vol(), vol()]), "volumes lists the same (broker_id, log_dir) twice"),
    # the first broken rule wins, in rule order, whatever the order of the volumes
    (snap(volumes=[vol(available_bytes=-1), vol(broker_id=2, log_dir="")]),
     "volumes[].log_dir must be a non-empty string"),
    (snap(cluster_id="", status="OK"), "cluster_id must be a non-empty string"),
    (snap(volumes=[vol(topics=["orders", None])]), rules.VOLUME_RULES[-1].reason),
    (snap(volumes=[vol(), vol(broker_id=2, topics="orders")]), rules.VOLUME_RULES[-1].reason),
    (snap(volumes=[vol(topics={"name": "orders"})]), rules.VOLUME_RULES[-1].reason),
    (snap(volumes=[vol(topics=[None], available_bytes=-1)]),
     "volumes[] byte counts must be >= 0 (an offline dir has error set and null bytes)"),
]


def python_reason(line: str | bytes) -> str | None:
    try:
        rules.parse_line(line)
    except RecordError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("line,reason", BAD, ids=[f"{i}:{r}" for i, (_, r) in enumerate(BAD)])
def test_python_reader_gives_the_rule_reason(line, reason):
    assert python_reason(line) == reason


@pytest.mark.parametrize("line", VALID)
def test_python_reader_accepts_valid_lines(line):
    assert python_reason(line) is None


def test_the_json_schema_agrees(tmp_path):
    for line in VALID:
        assert resources.errors("volume_snapshot", json.loads(line)) == [], line
    for line, reason in BAD:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # not JSON at all: nothing for a schema to judge
        if not next(r for r in (*rules.SNAPSHOT_RULES, *rules.VOLUME_RULES, rules.DUPLICATE_VOLUMES)
                    if r.reason == reason).in_schema:
            continue  # comparisons between values (and a date range) are beyond JSON Schema
        assert resources.errors("volume_snapshot", record), f"the schema accepts: {line}"
def test_spark_reader_gives_the_same_reasons(spark, tmp_path):
    corpus = VALID + [line for line, _ in BAD]
    (tmp_path / "corpus.jsonl").write_bytes(b"\n".join(c if isinstance(c, bytes) else c.encode() for c in corpus) + b"\n")
    valid, rejected = journal.read(spark, str(tmp_path))
    by_line = {r["line"]: r["reason"] for r in lines.rejections(rejected)}
    expected = {len(VALID) + i + 1: reason for i, (_, reason) in enumerate(BAD)}
    assert by_line == expected
    assert valid.count() == len(VALID)


def test_replays_parquet_checks_give_the_same_reasons(tmp_path):
    """Replay checks flattened Parquet itself (core/compiled/cluster_pass.py, vectorised): every corpus line that typed
    Parquet columns can hold at all gets the reason the other readers give, at its first row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.support.builders import settings
    from quota_pipeline.journal import period_file
    from quota_pipeline.replay.cluster_files import ClusterFiles, Task

    schema = pa.schema([f for f in period_file.SCHEMA if f.name not in ("tick", "journal_file", "observed_us")])
    rows, origin, expected = [], [], {}
    for i, (line, reason) in enumerate([(line, None) for line in VALID] + BAD):
        try:
            record = json.loads(line)
            volumes = record.get("volumes") or [{}]
            flat = [{**{k: record.get(k) for k in period_file.SNAPSHOT_FIELDS},
                     **{k: v.get(k) for k in period_file.VOLUME_FIELDS}} for v in volumes]
            held = pa.Table.from_pylist(flat, schema=schema).to_pylist()
        except (ValueError, AttributeError, TypeError, pa.ArrowException):
            continue  # typed columns cannot hold it: no Parquet writer produces it
        if json.dumps(held, sort_keys=True) != json.dumps(flat, sort_keys=True):
            continue  # held only as something else (1.5 as 1): not this line any more
        expected[len(rows) + 1] = reason
        rows.extend(flat)
        origin.extend([i] * len(flat))
    assert len([r for r in expected.values() if r]) >= 18  # most of the corpus is representable
    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), str(path))
    rejected = []
    for cluster in ("c1", None):
        p = ClusterFiles(Task(cluster, (str(path),)), settings())
        for _ in p.batches():
            pass
        rejected += p.outcome.rejected
    assert {r["line"]: r["reason"] for r in rejected} == {line: r for line, r in expected.items() if r}


# Each rule of the table with the example it carries: every reader must name that very rule.
RECORD_RULES = (*rules.SNAPSHOT_RULES, *rules.VOLUME_RULES, rules.DUPLICATE_VOLUMES)


def _flat_files(tmp_path) -> dict[str, str]:
    """Each rule's example as a flattened Parquet journal file of its own (rule key -> file): the record rules'
    examples flattened (the object rule's place taken by the rows' one, as rules.FLATTENED_RULES says), the
    duplicate snapshot's two records in two files (the later file's is the duplicate)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from quota_pipeline.journal import period_file

    schema = pa.schema([f for f in period_file.SCHEMA if f.name not in ("tick", "journal_file", "observed_us")])

    def flat(record: dict) -> list[dict]:
        return [{**{k: record.get(k) for k in period_file.SNAPSHOT_FIELDS},
                 **{k: v.get(k) for k in period_file.VOLUME_FIELDS}} for v in record.get("volumes") or [{}]]

    files: dict[str, str] = {}
    cases = [(r.key, r.example if r is rules.DISAGREEING_ROWS else flat(r.example)) for r in rules.FLATTENED_RULES] + [
        ("duplicate_snapshot-0", flat(rules.DUPLICATE_SNAPSHOT.example[0])),
        ("duplicate_snapshot", flat(rules.DUPLICATE_SNAPSHOT.example[1]))]
    for key, rows in cases:
        path = tmp_path / f"{key}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), str(path))
        files[key] = str(path)
    return files


def _pass_reasons(files: dict[str, str]) -> dict[str, str]:
    """What the decision pass (replay's, without Spark) rejects in each file, by rule key."""
    from tests.support.builders import settings
    from quota_pipeline.replay.cluster_files import ClusterFiles, Task

    key_of = {path: key for key, path in files.items()}
    found = {}
    for cluster in ("c1", None):
        p = ClusterFiles(Task(cluster, tuple(sorted(files.values()))), settings())
        for _ in p.batches():
            pass
        found.update({key_of[r["file"]]: r["reason"] for r in p.outcome.rejected})
    return found


def test_each_rules_example_breaks_it_first_for_the_python_reader():
    for rule in RECORD_RULES:
        assert python_reason(json.dumps(rule.example)) == rule.reason, rule.key


def test_each_rules_example_is_named_alike_by_the_pass(tmp_path):
    expected = {r.key: r.reason for r in rules.FLATTENED_RULES} | {"duplicate_snapshot": rules.DUPLICATE_SNAPSHOT.reason}
    assert _pass_reasons(_flat_files(tmp_path)) == expected
def test_each_rules_example_is_named_alike_by_the_python_reader_the_spark_reader_and_the_pass(spark, tmp_path):
    """The acceptance of the one table: each rule's example, fed to the three readers, is refused by that rule."""
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    lines = [json.dumps(r.example) for r in RECORD_RULES] + [json.dumps(r) for r in rules.DUPLICATE_SNAPSHOT.example]
    (jsonl / "examples.jsonl").write_text("\n".join(lines) + "\n")
    _, rejected = journal.read(spark, str(jsonl))
    spark_jsonl = {r["line"]: r["reason"].split(" (first at")[0] for r in lines_of(rejected)}
    assert spark_jsonl == {**{i + 1: r.reason for i, r in enumerate(RECORD_RULES)},
                           len(lines): rules.DUPLICATE_SNAPSHOT.reason}
    assert [python_reason(line) for line in lines[:len(RECORD_RULES)]] == [r.reason for r in RECORD_RULES]
    flat = tmp_path / "flat"
    flat.mkdir()
    files = _flat_files(flat)
    _, rejected = journal.read(spark, str(flat))
    key_of = {path: key for key, path in files.items()}
    spark_flat = {key_of[r["file"].removeprefix("file:")]: r["reason"].split(" (first at")[0]
                  for r in lines_of(rejected)}
    assert spark_flat == _pass_reasons(files)


def lines_of(rejected) -> list[dict]:
    return list(lines.rejections(rejected))


def test_the_json_schema_states_the_rules_it_can(tmp_path):
    """The JSON Schema refuses each example of a rule the table says it states, and accepts a valid record."""
    assert resources.errors("volume_snapshot", json.loads(VALID[0])) == []
    for rule in RECORD_RULES:
        if rule.in_schema:
            assert resources.errors("volume_snapshot", rule.example), f"the schema accepts {rule.key}'s example"
