"""`quota-pipeline replay` as a user runs it: example journal, schema, rejects, formats, --strict."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from chispa import assert_df_equality

from quota_pipeline.core import config as cfg
from quota_pipeline.cli import main
from quota_pipeline.core.reference.decision import decide_all
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import VolumeSnapshot, parse_time
from quota_pipeline.core.snapshot_rules import parse_snapshot
from quota_pipeline.resources import errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "conf" / "examples"
CONF = str(EXAMPLES / "example.properties")


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def example_snapshots() -> list[VolumeSnapshot]:
    return [parse_snapshot(r) for r in read_jsonl(EXAMPLES / "journal.jsonl")]


@pytest.fixture(scope="module")
def example_replay(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "decisions.jsonl"
    assert main(["replay", "--config", CONF, "--input", str(EXAMPLES), "--output", str(out)]) == 0
    return read_jsonl(out)


def test_one_valid_record_per_snapshot(example_replay):
    assert len(example_replay) == len(example_snapshots()) == 400
    for record in example_replay:
        assert errors("throttle_decision", record) == []


def test_sorted_by_cluster_then_time(example_replay):
    keys = [(r["cluster_id"], r["observed_at"]) for r in example_replay]
    assert keys == sorted(keys)


def test_replay_follows_the_reference_decisions(example_replay):
    settings = Settings.of(cfg.load(CONF, require_admin=False))
    expected = {(sm.cluster_id, sm.observed_at): (sm, d) for sm, d in decide_all(example_snapshots(), settings)}
    for r in example_replay:
        sm, d = expected[(r["cluster_id"], parse_time(r["observed_at"]))]
        assert (r["throttle_factor"], r["source"]) == (d.factor, d.source.value)
        vu = d.valid_until(settings.validity)
        assert r["valid_until"] == (None if vu is None else vu.strftime("%Y-%m-%dT%H:%M:%S.000Z"))
        assert r["violations"] == sm.violations and r["missing_brokers"] == list(sm.missing_brokers)


def test_the_example_story_is_visible(example_replay):
    east = [r for r in example_replay if r["cluster_id"] == "prod-east"]
    west = [r for r in example_replay if r["cluster_id"] == "prod-west"]
    assert any(r["throttle_factor"] == 0.0 and r["violations"] for r in east)        # disk filled
    assert any(0 < r["throttle_factor"] < 1 and r["source"] == "OBSERVATION" for r in east)  # graded
    assert any(r["source"] == "FALLBACK" and r["status"] == "TIMEOUT" for r in east)  # failure > validity
    assert east[-1]["throttle_factor"] == 1.0                                          # recovered
    offline = [r for r in west if r["worst_volume"] and r["worst_volume"]["broker_id"] == 13
               and r["throttle_factor"] == 0.0]
    assert len(offline) >= 40                                                          # pinned while offline
    assert west[-1]["throttle_factor"] == 1.0


def test_prints_a_summary_per_cluster(spark, tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert main(["replay", "--config", CONF, "--input", str(EXAMPLES / "journal.jsonl"), "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "prod-east" in text and "prod-west" in text and "400 decisions" in text


def write_mixed_journal(path: Path) -> None:
    good = read_jsonl(EXAMPLES / "journal.jsonl")[:6]
    lines = [json.dumps(good[0]), "this is not json", json.dumps(good[1]),
             json.dumps({**good[2], "observed_at": "yesterday"}),
             "", json.dumps({**good[3], "status": "FINE"}),
             json.dumps(good[1]),  # duplicate of line 3
             json.dumps({**good[4], "volumes": [{"broker_id": 1, "log_dir": "/x", "total_bytes": 10}]}),
             json.dumps(good[5])]
    path.write_text("\n".join(lines) + "\n")


def test_malformed_lines_are_reported_and_written_not_dropped(spark, tmp_path, capsys):
    journal = tmp_path / "j.jsonl"
    write_mixed_journal(journal)
    out = tmp_path / "d.jsonl"
    assert main(["replay", "--config", CONF, "--input", str(journal), "--output", str(out)]) == 0
    assert len(read_jsonl(out)) == 3
    rejected = read_jsonl(str(out) + ".rejected")
    assert [(r["line"], r["reason"].split(" ")[0]) for r in rejected] == [
        (2, "not"), (4, "observed_at"), (6, "status"), (7, "duplicate"), (8, "a")]
    assert all(r["file"].endswith("j.jsonl") and r["text"] for r in rejected)
    err = capsys.readouterr().err
    assert "rejected 5 input line(s)" in err and "j.jsonl:2: not valid JSON" in err


def test_strict_fails_without_output(spark, tmp_path):
    journal = tmp_path / "j.jsonl"
    write_mixed_journal(journal)
    out = tmp_path / "d.jsonl"
    assert main(["replay", "--config", CONF, "--input", str(journal), "--output", str(out), "--strict"]) == 1
    assert not out.exists()


def flatten(snapshots: list[dict]) -> pd.DataFrame:
    rows = []
    for s in snapshots:
        base = {k: s[k] for k in ("cluster_id", "observed_at", "status", "brokers", "fenced_brokers")}
        for v in s["volumes"] or [{}]:
            rows.append({**base, **{k: v.get(k) for k in ("broker_id", "log_dir", "total_bytes",
                                                          "available_bytes", "error")}})
    return pd.DataFrame(rows).astype({"broker_id": "Int64", "total_bytes": "Int64", "available_bytes": "Int64"})


def test_parquet_input_and_output_match_jsonl(spark, tmp_path, example_replay):
    snaps = read_jsonl(EXAMPLES / "journal.jsonl")
    src = tmp_path / "in"
    src.mkdir()
    flatten(snaps[:200]).to_parquet(src / "a.parquet")
    with gzip.open(src / "b.jsonl.gz", "wt") as fh:   # a directory may mix formats and compression
        fh.writelines(json.dumps(s) + "\n" for s in snaps[200:])
    out = tmp_path / "decisions.parquet"
    assert main(["replay", "--config", CONF, "--input", str(src), "--output", str(out)]) == 0
    got = spark.read.parquet(str(out)).select("cluster_id", "observed_at", "throttle_factor", "source")
    expected = spark.createDataFrame([(r["cluster_id"], parse_time(r["observed_at"]).replace(tzinfo=None),
                                       r["throttle_factor"], r["source"]) for r in example_replay],
                                     "cluster_id string, observed_at timestamp, throttle_factor double, source string")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_missing_input_is_a_clear_error(tmp_path, capsys):
    assert main(["replay", "--config", CONF, "--input", str(tmp_path / "none"), "--output", "x.jsonl"]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_line_numbers_are_exact_when_a_file_is_read_in_many_splits(spark, tmp_path):
    from quota_pipeline.journal import lines
    from quota_pipeline.journal import spark_reader as journal

    good = read_jsonl(EXAMPLES / "journal.jsonl")[0]
    text = []
    for i in range(1, 200):
        if i % 17 == 0:
            text.append(f"garbage {i}")
        else:
            text.append(json.dumps({**good, "observed_at": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z"}))
    path = tmp_path / "split.jsonl"
    path.write_text("\n".join(text) + "\n")
    valid, rejected = journal.read(spark, str(path), split_bytes=7000)  # ~40 splits, most mid-line
    assert [r["line"] for r in lines.rejections(rejected)] == [i for i in range(1, 200) if i % 17 == 0]
    assert valid.count() == 199 - 11


def test_parquet_journal_replays_without_spark_as_on_spark(spark, tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    flatten(read_jsonl(EXAMPLES / "journal.jsonl")).to_parquet(src / "journal.parquet")  # two clusters
    local, on_spark = tmp_path / "local.parquet", tmp_path / "spark.parquet"
    assert main(["replay", "--config", CONF, "--input", str(src), "--output", str(local)]) == 0
    assert "without Spark" in capsys.readouterr().err
    assert main(["replay", "--config", CONF, "--input", str(src), "--output", str(on_spark), "--engine", "spark"]) == 0
    assert "starting Spark" in capsys.readouterr().err
    got, expected = (spark.read.parquet(str(p)).drop("decided_at") for p in (local, on_spark))
    assert got.count() == 400
    assert_df_equality(got, expected, ignore_row_order=True)


def test_a_local_engine_asked_to_run_on_another_hosts_master_is_refused(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    code = main(["replay", "--config", CONF, "--input", str(EXAMPLES / "journal.jsonl"), "--output", str(out),
                 "--engine", "local", "--master", "spark://elsewhere:7077"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    assert err == ["error: --engine local runs on this host, not on --master spark://elsewhere:7077; leave one out"]


def test_jsonl_replays_without_spark_unless_asked(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert main(["replay", "--config", CONF, "--input", str(EXAMPLES / "journal.jsonl"), "--output", str(out)]) == 0
    assert "without Spark" in capsys.readouterr().err
    assert len(read_jsonl(out)) == 400
