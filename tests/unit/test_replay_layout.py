"""A journal exported by another tool (harness/synthetic_journals.py's "exported" layout: failed polls' rows appended at the end,
log_dir as plain strings, the brokers list on every row) is decided as the same journal in time order, and replay
reads each of its row groups once: the one spanning every chunk is not read again for each chunk."""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.builders import settings
from harness import synthetic_journals
from quota_pipeline.replay import cluster_files
from quota_pipeline.replay.cluster_files import ClusterFiles, Task

ROW_GROUP = 2_000
CHUNK_ROWS = 3_000


@pytest.fixture(scope="module")
def journals(tmp_path_factory):
    out = tmp_path_factory.mktemp("layouts")
    paths = {}
    for layout in synthetic_journals.LAYOUTS:
        paths[layout] = str(out / f"{layout}.parquet")
        synthetic_journals.flat_parquet_journal(out / f"{layout}.parquet", snapshots=600, chunk=150, layout=layout,
                                   row_group=ROW_GROUP)
    return paths


def replay(path: str) -> tuple[pa.Table, list]:
    p = ClusterFiles(Task("bench", (path,)), settings(hard_bytes=10 * 1024 ** 3, validity_s=60),
                     chunk_rows=CHUNK_ROWS)
    return pa.Table.from_batches(list(p.batches())), p.outcome.rejected


def test_the_exported_layout_is_what_it_says(journals):
    f = pq.ParquetFile(journals["exported"])
    table = f.read()
    failed = [s != "SUCCESS" for s in table.column("status").to_pylist()]
    assert 0 < sum(failed) < len(failed) and failed == sorted(failed)  # the failed polls' rows come last
    assert all(len(b) == 10 for b in table.column("brokers").to_pylist())
    log_dir = table.schema.get_field_index("log_dir")
    assert all("RLE_DICTIONARY" not in f.metadata.row_group(g).column(log_dir).encodings
               for g in range(f.num_row_groups))
    assert f.num_row_groups > 5 and pq.read_table(journals["sorted"]).num_rows == len(table)


def test_an_exported_journal_is_decided_as_the_sorted_one(journals):
    sorted_, rejected = replay(journals["sorted"])
    exported, rejected_exported = replay(journals["exported"])
    assert rejected == rejected_exported == []
    assert sorted_.num_rows == exported.num_rows > 500
    assert 0 < sum(f < 1.0 for f in sorted_.column("throttle_factor").to_pylist()) < sorted_.num_rows
    # A failed poll's record counts the brokers its row lists: every column but that one is the same.
    same = [c for c in sorted_.column_names if c != "active_brokers"]
    assert sorted_.select(same).equals(exported.select(same))
    ok = [s == "SUCCESS" for s in sorted_.column("status").to_pylist()]
    assert sorted_.filter(pa.array(ok)).equals(exported.filter(pa.array(ok)))


def test_each_row_group_is_read_once(journals, monkeypatch):
    reads = Counter()
    read = cluster_files.read

    def counted(path, groups, columns):
        if "log_dir" in columns:  # the chunks' reads, not the plan's reading of the times
            reads.update(groups)
        return read(path, groups, columns)

    monkeypatch.setattr(cluster_files, "read", counted)
    replay(journals["exported"])
    groups = pq.ParquetFile(journals["exported"]).num_row_groups
    # The last group (the failed polls of every chunk, and the latest rows) is read for the first chunk and its
    # rows of each later chunk held (before: read again for every chunk); a group that begins with the end of the
    # previous chunk's last snapshot is read once too.
    assert sorted(reads) == list(range(groups)) and set(reads.values()) == {1}, reads


def test_a_row_group_as_large_as_a_chunk_that_begins_inside_a_snapshot_is_read_once(tmp_path, monkeypatch):
    # Row groups of more rows than a chunk, cut inside snapshots (3,100 rows: not a multiple of a snapshot's 50):
    # a chunk cut at a group's end took a few rows of the next group, which was then read again for the rest.
    path = tmp_path / "exported.parquet"
    synthetic_journals.flat_parquet_journal(path, snapshots=600, chunk=150, layout="exported", row_group=3_100)
    reads = Counter()
    read = cluster_files.read

    def counted(path, groups, columns):
        if "log_dir" in columns:
            reads.update(groups)
        return read(path, groups, columns)

    monkeypatch.setattr(cluster_files, "read", counted)
    decided, rejected = replay(str(path))
    groups = pq.ParquetFile(path).num_row_groups
    # The last group (the failed polls) is held for the chunks it can be held for and read again for the rest.
    assert [reads[g] for g in range(groups - 1)] == [1] * (groups - 1), reads
    assert rejected == [] and decided.num_rows == 600
