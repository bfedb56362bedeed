"""The Python reader against tests/vectors/broker_quota_vectors.json, the file the Java callback's tests run too
(broker-callback: SharedVectorsTest): one behaviour, two languages. Format: tests/vectors/README.md."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from quota_pipeline.reader.reader import UNLIMITED, Reader
from quota_pipeline.reader.log_text import printable
from quota_pipeline.reader.parsing import parse_decision
from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.display import visible
from quota_pipeline.core.model import parse_time
from quota_pipeline.core.signing import HEADER as SIGNATURE_HEADER
from quota_pipeline.dashboard.records import parse_record

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "broker_quota_vectors.json"


def _load() -> dict[str, Any]:
    if not VECTORS.is_file():
        raise FileNotFoundError(f"the shared vectors file {VECTORS} is missing; it belongs to the repository")
    return json.loads(VECTORS.read_text(encoding="utf-8"))


DOC = _load()
DEFAULTS = DOC["defaults"]
# Which (principal, topic) a stop lets through, with the decision topic on this cluster or not: cases of the same form.
BEHAVIOUR = DOC["cases"] + DOC["stop_exemption_cases"]


def properties(case: dict[str, Any]) -> dict[str, str]:
    return {**DEFAULTS["properties"], **case["properties"]}


def value_of(step: dict[str, Any]) -> bytes | None:
    """null: a tombstone; a string: the raw text; an object: merged over the default record and written."""
    if "value_hex" in step:
        return bytes.fromhex(step["value_hex"])
    value = step["value"]
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps({**DEFAULTS["record"], **value}).encode("utf-8")


def check(reader: Reader, step: dict[str, Any], where: str) -> None:
    answer = reader.answer()
    if "factor" in step:
        assert answer.factor == step["factor"], f"{where}: factor"
    if "basis" in step:
        assert answer.basis == step["basis"], f"{where}: basis"
    if "reset_required" in step:
        assert reader.reset_required("PRODUCE") is step["reset_required"], f"{where}: reset_required(PRODUCE)"
    if "skipped" in step:
        assert reader.stats.skipped == step["skipped"], f"{where}: skipped"
    if "refused" in step:
        assert reader.stats.refused == step["refused"], f"{where}: refused"
    for limit in step.get("limits", ()):
        principal = limit.get("principal", "User:ANONYMOUS")
        client_id = limit.get("client_id", "client")
        expected = UNLIMITED if limit["limit"] == "unlimited" else limit["limit"]
        # Asked for every entry, as Kafka asks before each charge: the window epoch moves when the tags are asked.
        tags = reader.quota_metric_tags(limit["type"], principal, client_id)
        if "tags" in limit:
            assert tags == limit["tags"], f"{where}: tags of {limit['type']} for {principal} / {client_id}"
        got = reader.quota_limit(limit["type"], principal, client_id)
        assert got == expected, f"{where}: limit of {limit['type']} for {principal} / {client_id}"
    for write in step.get("refused_writes", ()):  # a write's client_id is not asked: the reader takes none
        principal = write.get("principal", "User:ANONYMOUS")
        assert reader.refuses(write["topic"], principal) is write["refused"], \
            f"{where}: write of {principal} to {write['topic']}"


def test_the_file_holds_enough_cases():
    assert len(DOC["cases"]) >= 25


@pytest.mark.parametrize("case", BEHAVIOUR, ids=[c["name"] for c in BEHAVIOUR])
def test_behaviour(case: dict[str, Any]):
    clock = ManualClock(parse_time(case["start"]))
    reader = Reader(cfg.parse(properties(case), "<vectors>", require_admin=False), clock=clock)
    for index, step in enumerate(case["steps"]):
        clock.t = parse_time(step["at"])
        where = f"{case['name']} step {index}"
        if "value" in step or "value_hex" in step:
            key = step["key"]
            headers = None if "signature" not in step else [(SIGNATURE_HEADER, step["signature"].encode("utf-8"))]
            taken = reader.apply_record(None if key is None else key.encode("utf-8"), value_of(step), "", headers)
            if "expect" in step:
                assert ("accept" if taken else "refuse") == step["expect"], f"{where}: the record is taken or not"
        else:
            check(reader, step, where)


@pytest.mark.parametrize("case", DOC["config_cases"], ids=[c["name"] for c in DOC["config_cases"]])
def test_configuration(case: dict[str, Any]):
    props = properties(case)
    if case["error"] is None:
        Reader(cfg.parse(props, "<vectors>", require_admin=False))
        return
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.parse(props, "<vectors>", require_admin=False)
    assert [(p.key, p.message) for p in caught.value.problems] == [
        (case["error"]["property"], case["error"]["message"])]


RECORDS = DOC["records"]
ENCODINGS = {"UTF-8": "utf-8", "UTF-16LE": "utf-16-le", "UTF-16BE": "utf-16-be", "UTF-32LE": "utf-32-le",
             "UTF-32BE": "utf-32-be"}


def record_value(case: dict[str, Any]) -> bytes:
    """defaults.record, then records.base, then the case's fields, in its encoding, after U+FEFF when bom."""
    text = json.dumps({**DEFAULTS["record"], **RECORDS["base"], **case.get("fields", {})})
    return (("\ufeff" if case.get("bom") else "") + text).encode(ENCODINGS[case.get("encoding", "UTF-8")])


@pytest.mark.parametrize("case", RECORDS["cases"], ids=[c["name"] for c in RECORDS["cases"]])
@pytest.mark.parametrize("read", [parse_decision, parse_record], ids=["brokers", "dashboard"])
def test_record_grammar(case: dict[str, Any], read):
    """Every Python reader takes exactly the records the file says (the Java callback runs the same cases)."""
    value = record_value(case)
    if case["expect"] == "refuse":
        with pytest.raises(ValueError):
            read(value)
    else:
        observed_at = read(value).observed_at
        assert observed_at.utcoffset() == dt.timedelta(0)
        assert observed_at.isoformat(timespec="microseconds").replace("+00:00", "Z") == case["observed_at_utc"]


@pytest.mark.parametrize("case", DOC["escapes"], ids=[c["name"] for c in DOC["escapes"]])
def test_escapes(case: dict[str, Any]):
    """Outside text in a log line: quoted (log_text.printable, Java's Printable.quote) and escaped (display.visible,
    Java's Printable.visible), the same in both languages."""
    assert printable(case["text"], case.get("limit", 120)) == case["quoted"]
    assert visible(case["text"]) == case["visible"]
