"""Replay reads the journal as the streaming job leaves it: the same decisions before, during and after
compaction; a directory mixing clusters, periods and forms read whole, bad files reported; small files packed."""
from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import pytest
from chispa import assert_df_equality

from tests.support.journal_fixtures import T0, cluster, files, view
from quota_pipeline.core import config as cfg
from quota_pipeline.core.settings import Settings
from harness import synthetic_journals
from quota_pipeline.journal import layout
from quota_pipeline.journal.maintenance import Options, run_pass
from quota_pipeline.journal.store import Journal
from quota_pipeline.replay import job as replay

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf" / "examples" / "example.properties")
INTERVAL_S = 30
HALF_HOUR = dt.timedelta(minutes=30)


class Killed(BaseException):
    pass


def story_journal(root: Path) -> None:
    """The example story (two clusters, 100 minutes) as the job journals it: one tick file per poll."""
    journal = Journal(str(root))
    for snap in synthetic_journals.example_story(T0):
        tick = int(snap.observed_at.timestamp() // INTERVAL_S)
        name = "east" if snap.cluster_id == "prod-east" else "west"
        journal.write(name, tick, layout.tick_start(tick, INTERVAL_S), snap)


def maintain(root: Path, now: dt.datetime, options: Options | None = None) -> None:
    for name in ("east", "west"):
        run_pass(cluster(root, name, INTERVAL_S, period=HALF_HOUR), now, options)


def decisions(spark, root: Path, out: Path):
    result = replay.run(spark, Settings.of(cfg.load(CONF, require_admin=False)), str(root), str(out))
    assert result.rejected == 0
    return spark.read.parquet(str(out)).drop("decided_at")


def test_replay_agrees_before_during_and_after_compaction(spark, tmp_path):
    root = tmp_path / "journal"
    story_journal(root)
    before = decisions(spark, root, tmp_path / "before")
    assert before.count() == 400

    renames = []

    def kill_at_the_second_rename(step: str) -> None:
        renames.extend([step] if step == "renamed" else [])
        if len(renames) == 2:
            raise Killed(step)

    # East: its first half hour compacted, its second renamed into place with its tick files not yet deleted,
    # its third not compacted, its fourth open; west untouched.
    with pytest.raises(Killed):
        maintain(root, T0 + dt.timedelta(minutes=100), Options(step=kill_at_the_second_rename))
    assert len(files(root, "*.parquet")) == 2 and len(files(root, "*.json")) == 400 - 60
    during = decisions(spark, root, tmp_path / "during")
    maintain(root, T0 + dt.timedelta(hours=3))
    assert files(root, "*.json") == []
    after = decisions(spark, root, tmp_path / "after")
    for other in (during, after):
        assert_df_equality(other, before, ignore_row_order=True, ignore_nullable=True)


def test_a_directory_mixing_clusters_periods_and_forms_is_read_whole_and_bad_files_reported(spark, tmp_path):
    root = tmp_path / "in"
    story_journal(root / "journal")
    maintain(root / "journal", T0 + dt.timedelta(minutes=100))          # compacted and open periods
    other = [s.to_json() for s in synthetic_journals.example_story(T0 + dt.timedelta(days=1))]
    with gzip.open(root / "export.jsonl.gz", "wt") as fh:               # an export of another day
        fh.writelines(json.dumps(r) + "\n" for r in other[:200])
        fh.write("not a snapshot\n")
    (root / "broken.parquet").write_bytes(b"PAR1 this is not a Parquet file")
    expected = len(view(root / "journal")) + 200
    out = tmp_path / "d.jsonl"
    result = replay.run(spark, Settings.of(cfg.load(CONF, require_admin=False)), str(root), str(out))
    assert result.records == expected
    rejected = [json.loads(line) for line in Path(result.rejected_path).read_text().splitlines()]
    assert [(Path(r["file"]).name, r["line"], r["reason"].split(":")[0]) for r in rejected] == [
        ("broken.parquet", 0, "unreadable Parquet file"), ("export.jsonl.gz", 201, "not valid JSON (a truncated or damaged line?)")]
    strict = replay.run(spark, Settings.of(cfg.load(CONF, require_admin=False)), str(root),
                        str(tmp_path / "s.jsonl"), strict=True)
    assert strict.rejected == 2 and not (tmp_path / "s.jsonl").exists()


def test_many_small_tick_files_are_read_in_few_tasks(spark, tmp_path):
    from quota_pipeline.journal import spark_reader

    story_journal(tmp_path)
    paths = tuple(map(str, files(tmp_path, "*.json")))
    frame = spark_reader.read_jsonl(spark, paths)
    assert len(paths) == 400 and frame.rdd.getNumPartitions() <= spark.sparkContext.defaultParallelism
    assert frame.where("reason is null").count() == 400
