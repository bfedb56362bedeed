"""`replay` of JSONL journals and tick files without Spark: the same records, rejections and sweep as on Spark, and
the example journal with --report starts no JVM."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from chispa import assert_df_equality

from quota_pipeline.core import config as cfg
from quota_pipeline.core.settings import Settings
from quota_pipeline.replay import job as replay
from quota_pipeline.replay import sweep as sweeps
from tests.support.builders import GB, settings
from tests.support.journal_strategies import fleets
from tests.unit.test_cluster_pass import ETA
from tests.spark.test_equivalence import assert_replay_is_the_reference
from tests.spark.test_journal_replay import story_journal
from tests.spark.test_journal_rules import BAD, VALID
from tests.spark.test_replay import write_mixed_journal

ROOT = Path(__file__).resolve().parents[2]
kernel = next(m for n, m in sys.modules.items() if n.startswith("quota_pipeline.") and n.endswith(".kernel"))
EXAMPLES = ROOT / "conf" / "examples"
CONF = str(EXAMPLES / "example.properties")


def conf_settings() -> Settings:
    return Settings.of(cfg.load(CONF, require_admin=False))


def without_decided_at(path: Path) -> list[str]:
    """The output's lines as written, each record's decided_at (the time of the run) left out."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        head, sep, tail = line.partition('"decided_at":"')
        out.append(head + tail[tail.index('"') + 2:] if sep else line)
    return out


def both_engines(spark, tmp_path: Path, source: Path, out_name: str = "d.jsonl", **kw):
    local, on_spark = tmp_path / "local" / out_name, tmp_path / "spark" / out_name
    return (replay.run(None, conf_settings(), str(source), str(local), **kw), local,
            replay.run(spark, conf_settings(), str(source), str(on_spark), **kw), on_spark)


def test_a_jsonl_journal_replayed_without_spark_gives_the_lines_spark_writes(spark, tmp_path):
    journal = tmp_path / "j.jsonl"
    write_mixed_journal(journal)  # rejects of every kind, a duplicate among them
    with journal.open("a") as fh:
        fh.write((EXAMPLES / "journal.jsonl").read_text())
    result, local, on_spark, spark_out = both_engines(spark, tmp_path, journal)
    assert result.records == on_spark.records == 400 and result.rejected == on_spark.rejected == 5 + 3
    assert without_decided_at(local) == without_decided_at(spark_out)
    local_rejected = Path(str(local) + ".rejected").read_text().splitlines()
    assert local_rejected == Path(str(spark_out) + ".rejected").read_text().splitlines()
    assert result.clusters == on_spark.clusters


def test_tick_files_replayed_without_spark_give_the_records_spark_gives(spark, tmp_path):
    story_journal(tmp_path / "journal")  # one JSON file per poll, as the streaming job journals
    result, local, on_spark, spark_out = both_engines(spark, tmp_path, tmp_path / "journal", "d.parquet")
    assert result.records == on_spark.records == 400 and result.rejected == on_spark.rejected == 0
    got, expected = (spark.read.parquet(str(p)).drop("decided_at") for p in (local, spark_out))
    assert_df_equality(got, expected, ignore_row_order=True)


def test_a_sweep_over_jsonl_runs_without_spark_as_on_spark(spark, tmp_path):
    conf = cfg.load(CONF, require_admin=False)
    sweep = sweeps.parse("storage.per.volume.limit.min.available.ratio=0.01,0.05,0.08", conf)
    result, _, on_spark, _ = both_engines(spark, tmp_path, EXAMPLES / "journal.jsonl", sweep=sweep)
    assert [r.to_json() for r in result.sweep] == [r.to_json() for r in on_spark.sweep]
    assert len(result.sweep) == 2 * 3 and any(r.throttled_s for r in result.sweep)


def test_every_rule_is_reported_as_the_spark_reader_reports_it(spark, tmp_path):
    corpus = VALID + [line for line, _ in BAD]
    (tmp_path / "corpus.jsonl").write_bytes(b"\n".join(c if isinstance(c, bytes) else c.encode() for c in corpus)
                                            + b"\n")
    result, local, on_spark, spark_out = both_engines(spark, tmp_path, tmp_path / "corpus.jsonl")
    rejected = [json.loads(line) for line in Path(str(local) + ".rejected").read_text().splitlines()]
    assert {r["line"]: r["reason"] for r in rejected} == {len(VALID) + i + 1: reason for i, (_, reason) in
                                                          enumerate(BAD)}
    assert result.records == on_spark.records == len(VALID)
    assert Path(str(local) + ".rejected").read_text() == Path(str(spark_out) + ".rejected").read_text()


def test_numbers_beyond_the_columns_types_are_rejected_not_a_crash(tmp_path):
    line = {"cluster_id": "c", "observed_at": "2026-11-21T10:00:00Z", "status": "SUCCESS", "brokers": [1],
            "volumes": [{"broker_id": 1, "log_dir": "/d", "total_bytes": 2 ** 70, "available_bytes": 1}]}
    (tmp_path / "j.jsonl").write_text(json.dumps(line) + "\n" + '{"cluster_id": "\\ud800"}\n')
    result = replay.run(None, conf_settings(), str(tmp_path / "j.jsonl"), str(tmp_path / "d.jsonl"))
    assert result.records == 0
    assert [r["reason"] for r in result.first_rejections] == [
        "a volume without error needs integer total_bytes and available_bytes", "not valid UTF-8"]


@hsettings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(fleets(), st.sampled_from(["pin", "last-known", "violate"]), st.sampled_from([None, 15 * GB]),
       st.sampled_from([0, 30, 60]))
def test_a_jsonl_replay_without_spark_equals_the_streaming_decisions(spark, tmp_path_factory, snaps, offline, soft,
                                                                     validity):
    s = settings(hard_bytes=5 * GB, soft_bytes=soft, validity_s=validity, offline=offline, fallback=0.3)
    work = tmp_path_factory.mktemp("local")
    path = work / "journal.jsonl"
    path.write_text("".join(json.dumps(x.to_json()) + "\n" for x in snaps))
    assert_replay_is_the_reference(None, spark, s, path, work, snaps)


def test_the_example_with_a_report_starts_no_spark(tmp_path):
    """The README's first replay, as a new user runs it: no JVM, pyspark not even imported."""
    probe = ("import sys\nfrom quota_pipeline.cli import main\n"
             "code = main(sys.argv[1:])\n"
             "print('imported:', sorted(m for m in ('pyspark', 'py4j') if m in sys.modules))\n"
             "sys.exit(code)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS",)}
    done = subprocess.run([sys.executable, "-c", probe, "replay", "--config", CONF, "--input",
                           str(EXAMPLES / "journal.jsonl"), "--output", "out.jsonl", "--report", "r.html"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "imported: []" in done.stdout and "without Spark" in done.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(records) == 400 and "Cluster prod-east" in (tmp_path / "r.html").read_text()


# Decides journals with the kernel's Python form (kernel_form: a small journal's first replay after an install),
# one request per line on stdin: {"input", "output", "settings"}; answers whether the kernel it ran was compiled.
PYTHON_FORM_WORKER = """
import json, sys
from quota_pipeline.replay import kernel_form
with kernel_form.importing(True):
    from quota_pipeline.replay import job
from tests.support.builders import settings
kernel = next(m for n, m in sys.modules.items() if n.startswith("quota_pipeline.") and n.endswith(".kernel"))
for line in sys.stdin:
    req = json.loads(line)
    job.run(None, settings(**req["settings"]), req["input"], req["output"])
    print(json.dumps({"compiled": any(hasattr(f, "py_func") for f in vars(kernel).values())}), flush=True)
"""


@pytest.fixture(scope="module")
def python_form():
    worker = subprocess.Popen([sys.executable, "-c", PYTHON_FORM_WORKER], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def decide(journal: Path, out: Path, **kw) -> bool:
        worker.stdin.write(json.dumps({"input": str(journal), "output": str(out), "settings": kw}) + "\n")
        worker.stdin.flush()
        return json.loads(worker.stdout.readline())["compiled"]

    yield decide
    worker.stdin.close()
    worker.wait(60)


@hsettings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(fleets(), st.sampled_from(["pin", "last-known", "violate"]), st.sampled_from([None, 15 * GB]),
       st.sampled_from([0, 30, 60]), st.sampled_from(["pin", "expire"]), st.sampled_from(ETA))
def test_the_kernels_python_form_decides_as_the_compiled_kernel(python_form, tmp_path_factory, snaps, offline, soft,
                                                                 validity, fenced, eta):
    kw = dict(hard_bytes=5 * GB, soft_bytes=soft, validity_s=validity, offline=offline, fallback=0.3, fenced=fenced,
              eta=eta)
    work = tmp_path_factory.mktemp("forms")
    path = work / "journal.jsonl"
    path.write_text("".join(json.dumps(x.to_json()) + "\n" for x in snaps))
    assert python_form(path, work / "python.jsonl", **kw) is False
    replay.run(None, settings(**kw), str(path), str(work / "compiled.jsonl"))
    assert any(hasattr(f, "py_func") for f in vars(kernel).values()), "this process decides with the compiled kernel"
    assert without_decided_at(work / "python.jsonl") == without_decided_at(work / "compiled.jsonl")
