"""Issue 18, point 2: names that become paths are checked, and journal maintenance and enforce write or delete
nothing outside their configured root; `journal prune --dry-run` writes nothing."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.core.names import UnsafePath, problem
from quota_pipeline.enforce.baseline import BaselineError, BaselineFile, EnforcerState, baseline_file
from quota_pipeline.journal import layout
from quota_pipeline.journal.maintenance import ClusterJournal, Options, run_pass

NOW = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
OLD = dt.datetime(2020, 1, 1, 0, 0, tzinfo=dt.timezone.utc)
BASE = {cfg.HARD_BYTES: "100"}


@pytest.mark.parametrize("name", ["/tmp/x/victim", "../victim", "..", ".hidden", "a/b", "", "x" * 250, "é"])
def test_unsafe_names_are_refused(name):
    assert problem(name) is not None


@pytest.mark.parametrize("name", ["prod-east", "prod.east_2", "MkU3OEVBNTcwNTJENDM2Qk", "-dash-first"])
def test_safe_names_and_kafka_cluster_ids_pass(name):
    assert problem(name) is None


@pytest.mark.parametrize("name", ["/tmp/x/victim", "../victim"])
def test_a_cluster_name_that_is_a_path_is_a_config_error(name):
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse({**BASE, cfg.CLUSTER_NAME: name}, require_admin=False)
    line = str(err.value)
    assert line.startswith(f"error: {cfg.CLUSTER_NAME}: ") and "cannot name a directory" in line


def journal_with_old_tick(root, name="c1"):
    cj = ClusterJournal(str(root), name, dt.timedelta(minutes=1), dt.timedelta(hours=1), dt.timedelta(days=1))
    tick = int(OLD.timestamp() // 60)
    return cj, tick


def cluster_dir(cj: ClusterJournal) -> Path:
    return Path(cj.root) / cj.name


def test_prune_never_deletes_through_a_symlinked_day_directory(tmp_path):
    outside = tmp_path / "victim"
    outside.mkdir()
    cj, tick = journal_with_old_tick(tmp_path / "journal")
    victim = outside / f"{tick}.json"
    victim.write_text("{}")
    cluster_dir(cj).mkdir(parents=True)
    (cluster_dir(cj) / layout.day_of(OLD)).symlink_to(outside, target_is_directory=True)
    report = run_pass(cj, NOW, Options(compact=False))
    assert victim.exists() and report.pruned == []


def test_prune_deletes_old_periods_of_its_own_directory(tmp_path):
    cj, tick = journal_with_old_tick(tmp_path / "journal")
    own = cluster_dir(cj) / layout.tick_file(tick, OLD)
    own.parent.mkdir(parents=True)
    own.write_text("{}")
    run_pass(cj, NOW, Options(compact=False))
    assert not own.exists()  # the check above could fail: prune does delete what is its own


def test_a_cluster_directory_that_links_out_of_the_root_is_refused(tmp_path):
    outside = tmp_path / "victim"
    outside.mkdir()
    cj, tick = journal_with_old_tick(tmp_path / "journal")
    (tmp_path / "journal").mkdir()
    cluster_dir(cj).symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePath, match="leads outside"):
        run_pass(cj, NOW, Options(compact=False))
    assert os.listdir(outside) == []  # no lock file either


@pytest.mark.parametrize("name", ["../victim", "/tmp/x/victim"])
def test_a_journal_name_that_is_a_path_is_refused_before_anything_is_written(tmp_path, name):
    cj, _ = journal_with_old_tick(tmp_path / "journal", name)
    with pytest.raises(UnsafePath, match="cannot name a directory"):
        run_pass(cj, NOW, Options(compact=False))
    assert not (tmp_path / "victim").exists()


def test_dry_run_writes_no_lock(tmp_path):
    cj, tick = journal_with_old_tick(tmp_path / "journal")
    own = cluster_dir(cj) / layout.tick_file(tick, OLD)
    own.parent.mkdir(parents=True)
    own.write_text("{}")
    report = run_pass(cj, NOW, Options(compact=False, dry_run=True))
    assert report.plan is not None and report.plan.prune  # it says what it would delete
    assert own.exists() and not (cluster_dir(cj) / layout.LOCK_FILE).exists()


def test_journal_command_says_which_name_is_unsafe(tmp_path, capsys):
    from quota_pipeline.commands.journal import clusters_of

    conf = tmp_path / "...properties"  # no cluster.name: the file's stem, "..", would name the directory
    conf.write_text(f"{cfg.HARD_BYTES}=100\n{cfg.JOURNAL_PATH}={tmp_path / 'journal'}\n")
    with pytest.raises(SystemExit) as done:
        clusters_of([str(conf)])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "error: the cluster's journal name" in err and "'..' cannot name a directory" in err
    assert "Traceback" not in err


def test_enforce_baseline_name_and_symlink_are_confined(tmp_path):
    with pytest.raises(UnsafePath):
        baseline_file(None, str(tmp_path), "../victim")
    store = baseline_file(None, str(tmp_path), "prod-east")
    assert store.path == tmp_path / "enforce" / "prod-east.json"
    outside = tmp_path / "victim.json"
    outside.write_text("keep")
    (tmp_path / "enforce").mkdir()
    store.path.symlink_to(outside)
    state = EnforcerState("prod-east", {}, {}, 0.5)
    with pytest.raises(BaselineError, match="leads outside"):
        store.save(state)
    with pytest.raises(BaselineError):
        store.delete()
    assert outside.read_text() == "keep"
    plain = BaselineFile(tmp_path / "b" / "c1.json")
    plain.save(state)
    assert plain.load() is not None
