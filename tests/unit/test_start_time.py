"""The job's start (process start to first published decision): kept beside the checkpoint and read back as hostile
input, held against the validity by one rule, at start, in `validate` and in the alert rule."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import yaml

from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg
from quota_pipeline.streaming import start_time
from quota_pipeline.streaming.metrics import Metrics

RULES = Path(__file__).resolve().parents[2] / "conf" / "monitoring" / "quota-pipeline.rules.yml"
GAUGE = "quota_pipeline_last_start_duration_seconds"


def gauge_value(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value(GAUGE)


def test_the_kept_start_round_trips_and_is_replaced_whole(tmp_path):
    start_time.write(str(tmp_path), start_time.Kept(36.25, 1_800_000_000.5))
    assert start_time.read(str(tmp_path)) == (start_time.Kept(36.25, 1_800_000_000.5), None)
    start_time.write(f"file:{tmp_path}", start_time.Kept(12.0, 1_800_000_100.0))  # a file: URI is the same place
    assert start_time.read(str(tmp_path))[0] == start_time.Kept(12.0, 1_800_000_100.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["start.json"]  # no part file left beside it
    assert start_time.read(str(tmp_path / "never-ran")) == (None, None)


@pytest.mark.parametrize("planted", [
    b"not json", b"[36]", b'{"start_seconds": "36", "first_decision_at": 1}', b'{"start_seconds": true, '
    b'"first_decision_at": 1}', b'{"start_seconds": NaN, "first_decision_at": 1}',
    b'{"start_seconds": -1, "first_decision_at": 1}', b'{"start_seconds": 1e9, "first_decision_at": 1}',
    b'{"start_seconds": 36}', b'{"start_seconds": 36, "first_decision_at": 0}', b"\xff\xfe\x00garbage",
    b'{"start_seconds": 36, "first_decision_at": 1, "pad": "' + b"x" * 5000 + b'"}', b"",
])
def test_a_planted_or_garbled_start_file_is_refused_in_one_line(tmp_path, planted):
    (tmp_path / "start.json").write_bytes(planted)
    kept, refused = start_time.read(str(tmp_path))
    assert kept is None and refused is not None
    assert refused.startswith(f"refused {tmp_path / 'start.json'}: ") and "\n" not in refused
    assert "the next start writes it again" in refused


def test_an_unreadable_start_file_is_refused_in_one_line_not_raised(tmp_path):
    (tmp_path / "start.json").mkdir()  # a directory where the file should be
    kept, refused = start_time.read(str(tmp_path))
    assert kept is None and refused.startswith("refused ") and "cannot read it" in refused and "\n" not in refused


def test_the_validity_must_cover_twice_the_last_start():
    assert start_time.validity_warning(60, start_time.Kept(30.0, 1), "x") is None  # exactly twice: covered
    line = start_time.validity_warning(60, start_time.Kept(36.0, 1), "/c/start.json")
    assert line is not None and "\n" not in line
    assert "60 s" in line and "36.0 s" in line and "PT72S" in line and "/c/start.json" in line


def test_the_alert_rule_compares_as_the_job_does():
    """One comparison: the rule's factor is start_time.MARGIN (promtool tests the rule itself)."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
             if r.get("alert") == "QuotaPipelineValidityShorterThanRestart"]
    assert len(rules) == 1
    assert " ".join(rules[0]["expr"].split()) == (
        f"quota_pipeline_validity_seconds < on(job, instance) group_left {start_time.MARGIN} * {GAUGE}")


def test_the_first_decision_is_measured_once_kept_exported_and_logged(tmp_path, caplog):
    metrics, called = Metrics(), []
    clock = start_time.StartClock(str(tmp_path), metrics.start_seconds, logging.getLogger("quota_pipeline"),
                                  on_first=lambda: called.append(1), started=time.time() - 20)
    with caplog.at_level(logging.INFO, logger="quota_pipeline"):
        clock.published()
        clock.published()  # a later batch: nothing more
    assert 20 <= gauge_value(metrics) < 25 and called == [1]
    kept, _ = start_time.read(str(tmp_path))
    assert kept is not None and kept.seconds == pytest.approx(gauge_value(metrics), abs=0.01)
    lines = [r.getMessage() for r in caplog.records if "first decision published" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("first decision published 2") and "s after the job's" in lines[0]


def test_a_jvm_up_before_the_driver_starts_the_clock(tmp_path):
    metrics = Metrics()
    clock = start_time.StartClock(str(tmp_path), metrics.start_seconds, logging.getLogger("t"),
                                  started=time.time() - 5)
    clock.published(jvm_started=time.time() - 9)  # spark-submit's JVM, 4 s before the Python driver
    assert 9 <= gauge_value(metrics) < 12


def test_the_process_start_is_the_kernels(tmp_path):
    """Within the 10 ms of the kernel's record: prometheus-client's process_start_time_seconds, to its 1 s."""
    collected = {s.name: s.value for f in Metrics().registry.collect() for s in f.samples}
    assert abs(start_time.process_started() - collected["process_start_time_seconds"]) < 1.5
    assert start_time.process_started() <= time.time()


def config(tmp_path: Path, validity: str | None, name: str = "c") -> Path:
    path = tmp_path / f"{name}.properties"
    path.write_text("\n".join([f"{cfg.BOOTSTRAP}=localhost:9", f"{cfg.HARD_RATIO}=0.05",
                               f"{cfg.CHECKPOINT_PATH}={tmp_path / 'ck'}"]
                              + ([f"{cfg.VALIDITY}={validity}"] if validity else [])) + "\n")
    return path


def test_a_start_warns_of_the_last_start_the_validity_does_not_cover(tmp_path):
    start_time.write(str(tmp_path / "ck"), start_time.Kept(41.0, time.time()))
    metrics = Metrics()
    short, long_ = cfg.load(config(tmp_path, "PT60S")), cfg.load(config(tmp_path, "PT2M", "d"))
    lines = start_time.at_start([short, long_], str(tmp_path / "ck"), metrics.start_seconds)
    assert len(lines) == 1 and "validity (60 s)" in lines[0] and "PT82S" in lines[0]
    assert gauge_value(metrics) == 41.0  # the last start, until this one has published
    (tmp_path / "ck" / "start.json").write_text("{")
    [refused] = start_time.at_start([short], str(tmp_path / "ck"), Metrics().start_seconds)
    assert refused.startswith("refused ")


def test_validate_warns_when_the_validity_does_not_cover_twice_the_kept_start(tmp_path, capsys):
    path = config(tmp_path, "PT1M")
    assert main(["validate", str(path), "--offline"]) == 0
    assert "start" not in capsys.readouterr().err  # nothing kept yet
    start_time.write(str(tmp_path / "ck"), start_time.Kept(36.0, time.time()))
    assert main(["validate", str(path), "--offline"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: the readers' validity (60 s) does not cover 2 x")
    (tmp_path / "ck" / "start.json").write_text(json.dumps({"start_seconds": 20, "first_decision_at": 1}))
    assert main(["validate", str(path), "--offline"]) == 0
    assert "validity" not in capsys.readouterr().err
    (tmp_path / "ck" / "start.json").write_bytes(b"\x00" * 10)
    assert main(["validate", str(path), "--offline"]) == 0
    assert capsys.readouterr().err.startswith("warning: refused ")
