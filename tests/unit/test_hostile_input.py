"""Issue 18, points 3 and 6: broken input gives one `error:` line or a rejection saying what is wrong, never a
traceback: Latin-1 properties, malformed Parquet footers, wrong-typed columns, out-of-range times."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.journal.inputs import find_inputs
from quota_pipeline.journal.layout import Sources
from quota_pipeline.journal.period_file import META_SOURCES

HARD = cfg.HARD_BYTES


def test_latin1_properties_are_read_as_java_reads_them(tmp_path):
    path = tmp_path / "broker.properties"
    path.write_bytes(f"{HARD}=100\n# caf\xe9 owner\n{cfg.CLUSTER_NAME}=prod-east\nnote=caf\xe9 \\u00e9\n".encode("latin-1"))
    props = cfg.read_properties(path)
    assert props["note"] == "café é" and cfg.load(path, require_admin=False).cluster_name == "prod-east"


def test_a_malformed_unicode_escape_is_one_error_line(tmp_path):
    path = tmp_path / "broker.properties"
    path.write_text(f"{HARD}=100\nx=\\uZZ\n")
    with pytest.raises(cfg.ConfigError) as err:
        cfg.read_properties(path)
    assert str(err.value).startswith(f"error: {path}: not a valid .properties file") and "\n" not in str(err.value)


def write(path, table, metadata=None):
    if metadata:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, str(path))
    return str(path)


ROW = {"cluster_id": ["c1"], "observed_at": ["2026-11-21T10:00:00Z"], "status": ["SUCCESS"], "brokers": [[1]],
       "broker_id": [1], "log_dir": ["/d"], "total_bytes": [100], "available_bytes": [40]}


@pytest.mark.parametrize("footer", ["{not json", "[1, 2]", '{"2026-11-21": 5}', '{"../x": [[1, 2]]}'])
def test_a_malformed_sources_footer_makes_the_file_a_rejection(tmp_path, footer):
    f = write(tmp_path / "p.parquet", pa.table(ROW), {META_SOURCES: footer})
    inputs = find_inputs(str(tmp_path))
    assert inputs.parquet == () and inputs.unreadable[0][0] == f
    assert inputs.unreadable[0][1].startswith(f"malformed {META_SOURCES} footer metadata")
    with pytest.raises(ValueError):
        Sources.from_json(footer)


def test_an_int64_cluster_id_is_a_wrong_schema(tmp_path):
    f = write(tmp_path / "p.parquet", pa.table({**ROW, "cluster_id": [7]}))
    assert find_inputs(str(tmp_path)).unreadable == ((f, "wrong schema: column cluster_id is int64, a journal's is "
                                                         "string"),)


def test_a_parquet_file_of_something_else_is_a_wrong_schema(tmp_path):
    f = write(tmp_path / "p.parquet", pa.table({"a": [1]}))
    (why,) = [w for p, w in find_inputs(str(tmp_path)).unreadable if p == f]
    assert why.startswith("wrong schema: none of a flattened journal's columns")


def test_a_journal_parquet_file_is_read():
    schema = pa.schema([(n, pa.string()) for n in ("cluster_id", "observed_at", "status")]
                       + [("brokers", pa.list_(pa.int64())), ("broker_id", pa.int32()),
                          ("top_partitions", pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32()),
                                                                  ("size_bytes", pa.int64())])))])
    assert rules.parquet_schema_problem(schema) is None


@pytest.mark.parametrize("line,reason", [
    (b'{"cluster_id": "prod-\xff-east", "observed_at": "2026-11-21T10:00:00Z"}', rules.NOT_UTF8),
    (b'{"cluster_id": "prod-east", "observed_at": "2026-11-21T1', rules.NOT_JSON),
    (json.dumps({"cluster_id": "c", "observed_at": "9999-12-31T00:00:00Z", "status": "SUCCESS", "brokers": [1],
                 "volumes": []}).encode(), "observed_at must be from 1970-01-01 to 2199-12-31 (UTC)"),
    (json.dumps({"cluster_id": "c", "observed_at": "2026-11-21T10:00:00Z", "status": "SUCCESS", "brokers": [1],
                 "volumes": [{"broker_id": 1, "log_dir": "/d", "total_bytes": 10, "available_bytes": 11}]}).encode(),
     "volumes[].available_bytes must not exceed total_bytes"),
])
def test_replay_input_checks_say_what_is_wrong(line, reason):
    from quota_pipeline.core.model import RecordError

    with pytest.raises(RecordError, match="^" + reason.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]").replace("?", r"\?") + "$"):
        rules.parse_line(line)


def test_the_line_reader_never_replaces_bytes():
    from quota_pipeline.journal.lines import decode

    assert decode(b'{"k": "prod-\xff"}') == ('{"k": "prod-\\xff"}', rules.NOT_UTF8)
    assert decode('{"k": "é"}'.encode()) == ('{"k": "é"}', None)
