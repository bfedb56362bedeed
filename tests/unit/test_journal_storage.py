"""The journal's storage contract (journal/storage.py), held by both implementations alike: a local directory and an
object store (S3Proxy). First writer wins, claim sets a foreign file aside, list, delete, a period file published
only over the version listed, and a compaction killed between any two of its steps loses and duplicates nothing.
And a journal path on any other storage is refused in one line naming the supported ones."""
from __future__ import annotations

import datetime as dt
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from quota_pipeline.cli import main
from quota_pipeline.journal import layout, object_storage, ownership
from quota_pipeline.journal.maintenance import Options, run_pass
from quota_pipeline.journal.storage import UnsupportedJournalPath
from quota_pipeline.journal.store import Journal, storage_for
from tests.support.journal_fixtures import T0, cluster, fill, first_tick, view
from tests.support.s3proxy_fixtures import s3proxy  # noqa: F401 - the session's S3Proxy

IV = 120  # 30 tick files an hour: each crash on a fresh journal stays quick
HOUR = dt.timedelta(hours=1)
AFTER = T0 + 2 * HOUR + dt.timedelta(minutes=10)  # both hours of the journal closed (grace: 3 intervals)


class Killed(BaseException):
    """A crash at a step (BaseException: nothing in the pass may catch it)."""


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> str:
    """A fresh journal root: a local directory, or a prefix in the session's S3Proxy bucket."""
    if request.param == "local":
        return str(tmp_path / "journal")
    return request.getfixturevalue("s3proxy").uri(f"contract-{uuid.uuid4().hex[:12]}")


def seen(root: str, tmp_path: Path) -> list:
    """Every snapshot a reader of the journal sees (an object store's copied first, as replay copies it), each once."""
    if not root.startswith("s3://"):
        return view(Path(root)) if Path(root).exists() else []
    local = tmp_path / f"copy-{uuid.uuid4().hex[:8]}"
    object_storage.download(root, local)
    return view(local) if local.exists() else []


def test_first_writer_wins_and_every_racing_writer_is_told_so(root):
    s = storage_for(root)
    assert s.write_new("a/2026-03-01/1.json", b"first\n") is True
    assert s.write_new("a/2026-03-01/1.json", b"second\n") is False
    assert s.read("a/2026-03-01/1.json") == b"first\n" and s.read("a/2026-03-01/1.json", 3) == b"fir"
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: s.write_new("a/2026-03-01/2.json", f"{i}\n".encode()), range(8)))
    assert won.count(True) == 1 and s.read("a/2026-03-01/2.json") == f"{won.index(True)}\n".encode()
    assert s.read("a/2026-03-01/3.json") is None


def test_claim_sets_a_foreign_file_aside_and_gives_way_to_its_own_token(root):
    s, rel, token = storage_for(root), "a/2026-03-01/7.json", ownership.new_token()
    s.write_new(rel, b'{"planted": true}\n')
    mine = json.dumps({"n": 1, ownership.TOKEN_FIELD: token}).encode()
    assert s.claim(rel, mine, token) == (None, [(rel, rel + ".rejected-1")])
    assert s.read(rel) == mine and s.read(rel + ".rejected-1") == b'{"planted": true}\n'
    retry = json.dumps({"n": 2, ownership.TOKEN_FIELD: token}).encode()
    assert s.claim(rel, retry, token) == ({"n": 1, ownership.TOKEN_FIELD: token}, [])  # the first attempt's
    other = ownership.new_token()
    held, aside = s.claim(rel, json.dumps({"n": 3, ownership.TOKEN_FIELD: other}).encode(), other)
    assert held is None and aside == [(rel, rel + ".rejected-2")] and json.loads(s.read(rel))["n"] == 3


def test_list_delete_and_a_period_file_put_only_over_the_version_listed(root, tmp_path):
    s = storage_for(root)
    for rel in ("a/2026-03-01/1.json", "a/2026-03-01/2.json", "a/_cluster_id", "b/2026-03-01/1.json"):
        s.write_new(rel, b"x")
    assert [e.rel for e in s.list("a")] == ["a/2026-03-01/1.json", "a/2026-03-01/2.json", "a/_cluster_id"]
    assert s.delete(["a/2026-03-01/1.json"]) == 1 and s.delete(["a/2026-03-01/1.json"]) in (0, 1)  # gone: no error
    assert [e.rel for e in s.list("a")] == ["a/2026-03-01/2.json", "a/_cluster_id"]

    def built(data: bytes) -> Path:
        path = tmp_path / f".compact-{data.hex()}.parquet"  # put_file consumes it
        path.write_bytes(data)
        return path

    period, steps = "a/2026-03-01/p.parquet", []
    assert s.put_file(period, built(b"one"), None, steps.append) is True
    [listed] = [e for e in s.list("a") if e.rel == period]
    assert s.put_file(period, built(b"two"), None, steps.append) is False  # one is there: not replaced unseen
    assert s.put_file(period, built(b"three"), listed.version, steps.append) is True
    assert s.put_file(period, built(b"four"), listed.version, steps.append) is False  # listed before "three"
    assert s.read(period) == b"three" and steps
    with s.staged([], {period: listed.version}) as staged:
        assert staged is None  # what a pass that listed "one" finds: the period changed, it leaves it alone


@pytest.fixture
def steps_of_a_pass(root) -> list[str]:
    """The steps a compaction pass on this storage reports, in order (from a journal of its own)."""
    other = f"{root}-steps"
    start = first_tick(IV)
    fill(Journal(other), "a", range(start, start + 2 * 3600 // IV), IV)
    names: list[str] = []
    run_pass(cluster(other, interval_s=IV), AFTER, Options(step=names.append))
    assert {"writing", "lengths-recorded", "deleted-first", "deleted"} <= set(names)
    return list(dict.fromkeys(names))


def test_a_compaction_killed_between_any_two_steps_loses_and_duplicates_nothing(root, tmp_path, steps_of_a_pass):
    for n, step in enumerate(steps_of_a_pass):
        def crash(name: str, step=step) -> None:
            if name == step:
                raise Killed(name)
        journal_root, start = f"{root}/{n}", first_tick(IV)
        journal = Journal(journal_root)
        written = fill(journal, "a", range(start, start + 2 * 3600 // IV), IV)
        before = seen(journal_root, tmp_path)
        with pytest.raises(Killed):
            run_pass(cluster(journal_root, interval_s=IV), AFTER, Options(step=crash))
        assert seen(journal_root, tmp_path) == before, f"a reader after a crash at {step}"
        run_pass(cluster(journal_root, interval_s=IV), AFTER)  # recovery: the next pass
        assert seen(journal_root, tmp_path) == before, f"a reader after recovering from a crash at {step}"
        assert [e.rel for e in storage_for(journal_root).list("a") if ".json" in e.rel] == []
        assert len([e for e in storage_for(journal_root).list("a") if e.rel.endswith(".parquet")]) == 2
        for tick, snap in written.items():  # a re-run of any tick gets its first snapshot, from its period file
            at = layout.tick_start(tick, IV)
            assert journal.read("a", tick, at) == snap and journal.write("a", tick, at, written[start]) == snap


@pytest.mark.parametrize("path", ["hdfs://namenode/journal", "gs://bucket/journal", "memory://journal",
                                  "s3a://bucket/journal", "hdfs://user:s3cr3t@namenode/journal"])
def test_a_journal_on_another_storage_is_refused_in_one_line_naming_the_supported_ones(path, tmp_path, capsys):
    with pytest.raises(UnsupportedJournalPath) as refused:
        Journal(path)
    line = str(refused.value)
    assert "\n" not in line and "s3://" in line and "local" in line and "s3cr3t" not in line
    conf = tmp_path / "a.properties"
    conf.write_text("client.quota.callback.static.storage.per.volume.limit.min.available.bytes=1000\n"
                    "client.quota.callback.static.storage.check-interval=10\n"
                    f"quota.pipeline.cluster.name=a\nquota.pipeline.journal.path={path}\n")
    with pytest.raises(SystemExit) as exit_:
        main(["journal", "stats", "--config", str(conf)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and line in err and "s3cr3t" not in err
    from quota_pipeline.core import config as cfg
    from quota_pipeline.streaming.query import JobConfigError, check_runnable

    with pytest.raises(JobConfigError, match="is not supported"):  # the job refuses it before it starts
        check_runnable([cfg.load(str(conf), require_admin=False)])


def test_a_local_path_and_file_uri_are_one_journal(tmp_path):
    fill(Journal(f"file://{tmp_path}"), "a", [first_tick(IV)], IV)
    assert Journal(str(tmp_path)).read("a", first_tick(IV), layout.tick_start(first_tick(IV), IV)) is not None
