"""A tick file the job did not write is never its observation: a new micro-batch polls and journals its own poll,
moving the planted file aside; only a batch re-run from the checkpoint reads the journal. Without Spark: the
source's parts, the local and the object-store journal, and the journal's file modes. The job end to end is in
tests/spark/test_stream_planted.py."""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import stat
from dataclasses import replace

import pytest

from tests.support.builders import GB, ok, vol
from quota_pipeline.core import config as cfg
from quota_pipeline.journal import layout, ownership
from quota_pipeline.journal.object_storage import ObjectStorage
from quota_pipeline.journal.inputs import find_inputs
from quota_pipeline.journal.objstore import Got
from quota_pipeline.journal.store import Journal
from quota_pipeline.streaming import checkpoint_files, source
from tests.support.s3proxy_fixtures import s3proxy  # noqa: F401 - the session's S3Proxy, for the object-store test

T = dt.datetime(2026, 11, 27, 6, 0, tzinfo=dt.timezone.utc)
FULL = ok(0, vol(1, 0), vol(2, 50 * GB), brokers=(1, 2), cluster="real-id")      # the real cluster: a disk is full
FINE = ok(5, vol(1, 90 * GB), vol(2, 90 * GB), brokers=(1, 2), cluster="real-id")  # what someone planted


def props(name: str, tmp_path) -> dict:
    return {cfg.HARD_BYTES: "1000", cfg.CHECK_INTERVAL_SECONDS: "10", cfg.BOOTSTRAP: "127.0.0.1:1",
            cfg.CLUSTER_NAME: name, cfg.CHECKPOINT_PATH: str(tmp_path / "ckpt")}


def plant(journal_root, name: str, tick: int, at: dt.datetime, snap=FINE, text: str | None = None):
    """A tick file written by someone else: a valid snapshot (or any text) in the tick's place."""
    path = journal_root / name / layout.tick_file(tick, at)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text is not None else json.dumps(snap.to_json()) + "\n")
    return path


@pytest.fixture
def observer(monkeypatch):
    polls: list[int] = []

    class Real:
        def __init__(self, _conf):
            pass

        def poll(self):
            polls.append(1)
            return replace(FULL, observed_at=FULL.observed_at + dt.timedelta(seconds=len(polls)))

    monkeypatch.setattr("quota_pipeline.kafka.observer.Observer", Real)
    monkeypatch.setattr(source, "_observers", {})
    return polls


def test_a_new_batch_polls_and_sets_a_planted_tick_file_aside(tmp_path, observer, caplog):
    conf = cfg.parse(props("a", tmp_path))
    tick = 42
    at = source.tick_time(conf, tick)
    planted = plant(tmp_path / "ckpt" / "journal", "a", tick, at)
    with caplog.at_level(logging.WARNING, logger="quota_pipeline"):
        got = source.poll_or_replay("a", conf, tick, ownership.new_token())
    assert observer == [1] and got.volumes == FULL.volumes           # decided from the poll: the full disk
    assert Journal(conf.effective_journal_path).read("a", tick, at) == got  # and the journal holds that poll
    aside = planted.with_name(planted.name + ".rejected-1")
    assert json.loads(aside.read_text()) == FINE.to_json()          # the planted file kept for whoever looks
    [line] = [r.getMessage() for r in caplog.records]
    assert f'tick file "a/{layout.tick_file(tick, at)}"' in line and ".rejected-1" in line and "not used" in line


def test_a_retried_attempt_of_the_same_task_takes_what_the_first_journaled(tmp_path, observer):
    conf = cfg.parse(props("a", tmp_path))
    token = ownership.new_token()
    first = source.poll_or_replay("a", conf, 7, token)
    again = source.poll_or_replay("a", conf, 7, token)
    assert again == first and observer == [1, 1]  # it polled, but gives way to its own first attempt
    assert not list((tmp_path / "ckpt" / "journal").rglob("*.rejected-*"))


def test_another_batchs_tick_file_is_not_the_new_batchs(tmp_path, observer):
    """Even the job's own file of another batch (another token) is set aside: a new batch's tick is new."""
    conf = cfg.parse(props("a", tmp_path))
    first = source.poll_or_replay("a", conf, 7, ownership.new_token())
    second = source.poll_or_replay("a", conf, 7, ownership.new_token())
    assert second != first and Journal(conf.effective_journal_path).read("a", 7, source.tick_time(conf, 7)) == second
    assert len(list((tmp_path / "ckpt" / "journal").rglob("*.rejected-*"))) == 1


def test_a_rerun_reads_the_journaled_snapshot_and_polls_only_without_a_valid_one(tmp_path, observer):
    conf = cfg.parse(props("a", tmp_path))
    at = source.tick_time(conf, 9)
    published = source.poll_or_replay("a", conf, 9, ownership.new_token())
    assert source.poll_or_replay("a", conf, 9, ownership.new_token(), rerun=True) == published
    assert observer == [1]
    # A tick file that is not a snapshot was not written by the job (it writes whole files): polled, set aside.
    damaged = plant(tmp_path / "ckpt" / "journal", "a", 10, source.tick_time(conf, 10), text='{"cluster_id": "x"')
    got = source.poll_or_replay("a", conf, 10, ownership.new_token(), rerun=True)
    assert observer == [1, 1] and got.volumes == FULL.volumes
    assert damaged.with_name(damaged.name + ".rejected-1").exists()
    assert Journal(conf.effective_journal_path).read("a", 9, at) == published


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_whatever_else_takes_the_ticks_place_is_moved_aside_without_following_it(tmp_path, observer, kind):
    conf = cfg.parse(props("a", tmp_path))
    target = tmp_path / "ckpt" / "journal" / "a" / layout.tick_file(3, source.tick_time(conf, 3))
    target.parent.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(FINE.to_json()))
    {"symlink": lambda: target.symlink_to(outside), "directory": lambda: target.mkdir(),
     "fifo": lambda: os.mkfifo(target)}[kind]()
    got = source.poll_or_replay("a", conf, 3, ownership.new_token())
    assert got.volumes == FULL.volumes and target.is_file() and not target.is_symlink()
    assert os.path.lexists(target.with_name(target.name + ".rejected-1")) and outside.exists()


def test_the_reader_marks_only_the_checkpoints_planned_batch_as_a_rerun(tmp_path):
    clusters = [source.ObservedCluster(n, props(n, tmp_path)) for n in ("a", "b")]
    fresh = source.KafkaVolumesReader(clusters)
    start = fresh.initialOffset()
    end = fresh.latestOffset(start, None)
    parts = [t for p in fresh.partitions(start, end) for t in p.ticks]
    assert not any(t.rerun for t in parts) and len({t.token for t in parts}) == 2 and all(t.token for t in parts)
    resumed = source.KafkaVolumesReader(clusters, replanned=end)
    assert all(t.rerun for p in resumed.partitions(start, end) for t in p.ticks)
    later = {k: v + 1 for k, v in end.items()}
    assert not any(t.rerun for p in resumed.partitions(end, later) for t in p.ticks)


def test_the_planned_batch_is_read_from_the_checkpoints_offsets_log(tmp_path):
    query = tmp_path / "ckpt" / "query"
    assert checkpoint_files.last_planned(str(query)) is None
    (query / "offsets").mkdir(parents=True)
    for batch, ticks in ((8, {"a": 100}), (9, {"a": 101, "b": 7})):
        (query / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(ticks)}')
    (query / "offsets" / ".9.crc").write_text("")
    assert checkpoint_files.last_planned(str(query)) == {"a": 101, "b": 7}
    assert checkpoint_files.query_dir(str(tmp_path / "ckpt")) == str(query)
    # The source finds it under the configured checkpoint path, as the job's query writes it.
    ds = source.KafkaVolumesSource.of([cfg.parse(props("a", tmp_path))])(options={})
    assert ds.streamReader(None).replanned == {"a": 101, "b": 7}


def test_replay_and_compaction_never_read_a_set_aside_file(tmp_path, observer):
    conf = cfg.parse(props("a", tmp_path))
    plant(tmp_path / "ckpt" / "journal", "a", 5, source.tick_time(conf, 5))
    source.poll_or_replay("a", conf, 5, ownership.new_token())
    inputs = find_inputs(str(tmp_path / "ckpt" / "journal"))
    assert [os.path.basename(f) for f in inputs.jsonl] == ["5.json"]
    assert layout.TICK_FILE.match("5.json.rejected-1") is None


def test_journal_directories_are_0700_and_its_files_0600(tmp_path, observer):
    from quota_pipeline.journal.maintenance import ClusterJournal, Options, run_pass

    old = os.umask(0o022)  # the usual umask: the journal must not rely on a stricter one
    try:
        conf = cfg.parse(props("a", tmp_path))
        journal_root = tmp_path / "ckpt" / "journal"
        interval = 10
        old_tick = int((T - dt.timedelta(days=1)).timestamp()) // interval
        for tick in (old_tick, old_tick + 1):
            source.poll_or_replay("a", conf, tick, ownership.new_token())
        cj = ClusterJournal(str(journal_root), "a", dt.timedelta(seconds=interval), dt.timedelta(hours=1),
                            dt.timedelta(days=30))
        report = run_pass(cj, T, Options())
        assert report.rewritten, report
        source.poll_or_replay("a", conf, old_tick + 2 * 24 * 360, ownership.new_token())  # a tick file again
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "ckpt").rglob("*")}
    assert {p: m for p, m in modes.items() if (tmp_path / p).is_dir() and m != 0o700} == {}
    assert {p: m for p, m in modes.items() if (tmp_path / p).is_file() and m != 0o600} == {}
    names = {p.rsplit("/", 1)[-1] for p in modes}
    assert {"_cluster_id", "_periods", "_lock", "_write_lock"} <= names and any(n.endswith(".parquet") for n in names)


class MemoryStore:
    """The ObjectStore calls `claim` makes, with S3's conditional PUT semantics."""

    bucket = "b"

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.n = 0
        self.before_put = lambda rel: None

    def key(self, rel: str) -> str:
        return rel

    def get(self, rel: str):
        got = self.objects.get(rel)
        return None if got is None else Got(*got)

    def put(self, rel, data, if_none_match=False, if_match=None):
        self.before_put(rel)
        held = self.objects.get(rel)
        if (if_none_match and held is not None) or (if_match is not None and (held is None or held[1] != if_match)):
            return None
        self.n += 1
        self.objects[rel] = (data, f'"{self.n}"')
        return f'"{self.n}"'


def test_an_object_store_journal_sets_a_planted_object_aside_and_keeps_first_writer_wins(tmp_path):
    store, rel, token = MemoryStore(), "a/2026-11-27/42.json", ownership.new_token()
    store.put(rel, json.dumps(FINE.to_json()).encode())
    held, aside = ObjectStorage(store).claim(rel, ownership.record_text(FULL, token).encode(), token)
    assert held is None and aside == [(rel, rel + ".rejected-1")]
    assert json.loads(store.objects[rel + ".rejected-1"][0]) == FINE.to_json()
    assert json.loads(store.objects[rel][0])[ownership.TOKEN_FIELD] == token
    # A retried attempt of the same task gives way to it; no second object is set aside.
    later = replace(FULL, observed_at=FULL.observed_at + dt.timedelta(seconds=1))
    held, aside = ObjectStorage(store).claim(rel, ownership.record_text(later, token).encode(), token)
    assert held is not None and held["observed_at"] == FULL.to_json()["observed_at"] and aside == []


def test_an_object_planted_again_while_it_is_set_aside_is_not_overwritten_unseen(tmp_path):
    store, rel, token = MemoryStore(), "a/2026-11-27/42.json", ownership.new_token()
    store.put(rel, b"planted once")
    replanted = []

    def replant(key):
        if key == rel and store.objects.get(rel, (b"",))[0] == b"planted once" and not replanted:
            if any(k.endswith(".rejected-1") for k in store.objects):
                replanted.append(1)
                store.objects[rel] = (b"planted twice", '"x"')

    store.before_put = replant
    held, aside = ObjectStorage(store).claim(rel, ownership.record_text(FULL, token).encode(), token)
    assert held is None and [a for _, a in aside] == [rel + ".rejected-1", rel + ".rejected-2"]
    assert store.objects[rel + ".rejected-2"][0] == b"planted twice"


def test_the_warning_names_the_files_quoted_and_capped():
    from quota_pipeline.journal.store import Claimed

    long = "a/2026-11-27/" + "9" * 500 + ".json"
    line = source.foreign_warning("a", 9, Claimed(FULL, ((long, long + ".rejected-1"),)))
    assert line is not None and "\n" not in line and len(line) < 700 and '"a/2026-11-27/999' in line
    assert source.foreign_warning("a", 9, Claimed(FULL)) is None
    assert "period file" in source.foreign_warning("a", 9, Claimed(FULL, (), True))


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_rerun_neither_blocks_nor_fails_on_what_is_not_a_tick_file(tmp_path, observer, kind):
    conf = cfg.parse(props("a", tmp_path))
    target = tmp_path / "ckpt" / "journal" / "a" / layout.tick_file(4, source.tick_time(conf, 4))
    target.parent.mkdir(parents=True)
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    got = source.poll_or_replay("a", conf, 4, ownership.new_token(), rerun=True)
    assert got.volumes == FULL.volumes and target.is_file() and observer == [1]


def test_an_empty_token_owns_nothing():
    assert ownership.owned_record(json.dumps({ownership.TOKEN_FIELD: ""}).encode(), "") is None


def test_on_an_object_store_a_planted_tick_is_set_aside_and_a_retry_takes_its_own(s3proxy):  # noqa: F811
    """Against S3Proxy's conditional PUTs. (Its If-Match is not atomic under concurrent PUTs, as S3's is, so attempts
    racing a planted object are the MemoryStore tests' part.)"""
    import uuid

    journal, token, tick = Journal(s3proxy.uri(f"journal-{uuid.uuid4().hex[:12]}")), ownership.new_token(), 42
    rel = journal.path("a", tick, T)
    journal.storage.store.put(rel, (json.dumps(FINE.to_json()) + "\n").encode())
    first = journal.claim("a", tick, T, FULL, token)
    assert first.snapshot == FULL and [a for _, a in first.set_aside] == [rel + ".rejected-1"]
    assert json.loads(journal.storage.store.get(rel + ".rejected-1").data) == FINE.to_json()
    retry = journal.claim("a", tick, T, replace(FULL, observed_at=T), token)
    assert retry.snapshot == FULL and not retry.set_aside  # first writer wins among the task's attempts
    other = journal.claim("a", tick, T, replace(FULL, observed_at=T), ownership.new_token())
    assert other.snapshot.observed_at == T and [a for _, a in other.set_aside] == [rel + ".rejected-2"]
    assert journal.read_valid("a", tick, T) == other.snapshot  # what a re-run would take


def test_attempts_of_one_task_racing_a_planted_object_agree_on_one_poll():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    store, rel, token = MemoryStore(), "a/2026-11-27/42.json", ownership.new_token()
    lock = threading.Lock()
    put, get = store.put, store.get
    store.put = lambda *a, **k: (lock.acquire(), put(*a, **k), lock.release())[1]  # S3 applies a PUT atomically
    store.get = lambda rel: (lock.acquire(), get(rel), lock.release())[1]
    put(rel, json.dumps(FINE.to_json()).encode())
    texts = [ownership.record_text(replace(FULL, observed_at=FULL.observed_at + dt.timedelta(seconds=i)), token)
             for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda t: ObjectStorage(store).claim(rel, t.encode(), token), texts))
    held = json.loads(store.objects[rel][0])
    assert all((h or json.loads(t)) == held for (h, _), t in zip(results, texts))


@pytest.mark.parametrize("log_dir", ["/data/kafka-1", "/données/é", "/bad-\udcff"])
def test_a_tick_files_line_reads_back_as_the_snapshot_whatever_the_log_dirs_name(log_dir):
    """The line is the fast encoder's when it is plain ASCII, else the standard one's (outside names escaped, a lone
    surrogate too, which the fast one refuses): either way one line of ASCII JSON that reads back as the snapshot."""
    from quota_pipeline.core.snapshot_rules import parse_snapshot

    snap = replace(FULL, volumes=(replace(FULL.volumes[0], log_dir=log_dir), *FULL.volumes[1:]))
    text = ownership.record_text(snap, "token")
    assert text.endswith("\n") and text.count("\n") == 1 and text.isascii()
    record = json.loads(text)
    assert record[ownership.TOKEN_FIELD] == "token" and record["volumes"][0]["log_dir"] == log_dir
    assert text == json.dumps({**snap.to_json(), ownership.TOKEN_FIELD: "token"}, separators=(",", ":")) + "\n"
    assert parse_snapshot(record) == snap
