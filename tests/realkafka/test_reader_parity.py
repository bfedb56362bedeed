"""The Java callback and the Python readers take exactly the same records: a differential run over a few hundred
variants of a genuine record (each field removed, or given each JSON type and some edge values), the Java side
through the plugin's own DecisionHolder (tests/java/parity/.../RecordParity.java, compiled against the built jar and
KAFKA_HOME's libs). The shared vectors pin the contract case by case; this looks for any other difference."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any


from quota_pipeline.reader.reader import Reader
from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import ManualClock
from harness.kafka_client import T0, decision
from harness.kafka import kafka_home

SOURCE = Path(__file__).resolve().parents[1] / "java" / "parity" / "io" / "quotapipeline" / "callback" / "RecordParity.java"
NOW = T0 + dt.timedelta(seconds=1)
ODD: tuple[Any, ...] = (None, True, False, 0, -1, 1, 2, 1.5, 10 ** 30, float("inf"), "", "x", "SUCCESS",
                        "OBSERVATION", "2026-11-21T10:00:00Z", "2026-11-21T10:00:00.5+01:00", "2999-01-01T00:00:00Z",
                        "2026-11-21", [], [1], {}, {"scope": "topics", "topics": ["a"]})


def variants() -> list[bytes]:
    base = {**decision("c1", 0.5, T0).to_json(), "unknown": 1}
    out = [json.dumps(base).encode()]
    for field in base:
        out.append(json.dumps({k: v for k, v in base.items() if k != field}).encode())
        out += [json.dumps({**base, field: odd}).encode() for odd in ODD]
    deciding = ("schema_version", "cluster_id", "observed_at", "decided_at", "throttle_factor", "source",
                "valid_until", "status", "active_brokers", "active_log_dirs", "violations")
    out.append(json.dumps({k: base[k] for k in deciding}).encode())  # the fields every reader requires, no more
    out.append(json.dumps({k: base[k] for k in ("schema_version", "observed_at", "throttle_factor", "source",
                                                "valid_until")}).encode())  # the five that once sufficed
    out += [b"\xef\xbb\xbf" + out[0], out[0] + b" x", b"[]", b"null", b"", b"{\"schema_version\": 1"]
    return out


def python_takes(value: bytes) -> bool:
    conf = cfg.parse({cfg.BOOTSTRAP: "127.0.0.1:1", cfg.HARD_BYTES: "1", cfg.CLUSTER_NAME: "c1"}, "<parity>")
    return Reader(conf, clock=ManualClock(NOW)).apply_record(b"c1", value)


def java_takes(values: list[bytes], jar: Path, work: Path) -> list[bool]:
    libs = f"{kafka_home()}/libs/*"
    classes = work / "classes"
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{jar}:{libs}", str(SOURCE)], check=True,
                   capture_output=True, timeout=120)
    lines = work / "values.txt"
    lines.write_text("".join(v.hex() + "\n" for v in values))
    done = subprocess.run(["java", "-cp", f"{classes}:{jar}:{libs}", "io.quotapipeline.callback.RecordParity",
                           str(lines), NOW.isoformat().replace("+00:00", "Z")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line == "accept" for line in done.stdout.split()]


def test_the_java_callback_and_the_python_reader_take_the_same_records(callback_jar: Path, tmp_path):  # noqa: F811
    values = variants()
    java = java_takes(values, callback_jar, tmp_path)
    python = [python_takes(v) for v in values]
    assert len(java) == len(values)
    differ = [(v.decode("utf-8", "replace"), j, p) for v, j, p in zip(values, java, python) if j != p]
    assert not differ, f"{len(differ)} of {len(values)} records are taken by one reader only (value, java, python): " \
                       f"{differ[:5]}"
    assert 50 < sum(python) < len(values) - 50, "the variants must hold both kinds"
