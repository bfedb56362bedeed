"""Exactly one form of the streaming job's state is read: the decision state's current version (state_codec), under
the stateful step that decides on rows. Every other form, an earlier version's, is refused with one line that says
to start from a fresh checkpoint (docs/design.md says why that is safe)."""
from __future__ import annotations

import base64
import io
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.core.compiled import state_codec
from quota_pipeline.streaming import checkpoint_files, processor
from quota_pipeline.streaming.query import JobConfigError, check_runnable
from tests.support.builders import MemoryHandle, ok, settings, spark_rows, vol

GB = 10 ** 9


def _current() -> str:
    """A state value as the job saves it: a cluster decided at a throttle."""
    from quota_pipeline.streaming import source

    handle = MemoryHandle()
    p = processor.DecisionProcessor({"a": settings(hard_bytes=5 * GB)}, {"a": "out"})
    p.init(handle)
    list(p.handleInputRows(("c1",), iter(spark_rows(source.snapshot_rows("a", 0, ok(0, vol(1, 4 * GB))))), None))
    return handle.states["cluster"].value[0]


def _columns(data: bytes, **extra) -> str:
    """`data` as the state value's columns, with `extra` in place of the current version's fields."""
    return json.dumps({"config": "a", "columns": base64.b64encode(data).decode(), **extra})


def _others(value: str) -> dict[str, str]:
    """The forms earlier versions saved, from the current one's state."""
    raw = json.loads(value)
    data = processor.state_columns(raw)
    npz = io.BytesIO()
    np.savez(npz, has=np.zeros(1, bool))

    def zstd(columns: bytes) -> str:
        return json.dumps({**raw, "size": len(columns), "columns": base64.b64encode(
            processor.STATE_CODEC.compress(columns, asbytes=True)).decode()})

    return {
        "the Python form's JSON": json.dumps({"config": "a", "registered": [1], "entries": [], "decision": None}),
        "zlib-compressed": _columns(zlib.compress(data), compressed="zlib"),
        "uncompressed": _columns(data),
        "an npz archive": _columns(npz.getvalue()),
        "an Arrow IPC stream": zstd(b"\xff\xff\xff\xff" + bytes(60)),
        "version 1": zstd(data.replace(b"state 2\n", b"state 1\n", 1)),
        "version 3": zstd(data.replace(b"state 2\n", b"state 3\n", 1)),
        "not JSON": "\x00state",
    }


def test_exactly_one_state_format_is_read():
    value = _current()
    carried = processor.load_state(value)
    assert carried is not None and carried.states[0].has.any()
    assert processor.load_state(processor.save_state(carried, "a")) is not None  # the current form round-trips
    for name, other in _others(value).items():
        with pytest.raises(state_codec.StateVersionError) as refused:
            processor.load_state(other)
        message = str(refused.value)
        assert message == state_codec.REFUSED and "\n" not in message, name
        assert "start from a fresh checkpoint" in message


def test_a_checkpoint_of_the_pandas_form_is_refused_in_one_line(tmp_path):
    conf = cfg.parse({cfg.HARD_RATIO: "0.1", cfg.CHECK_INTERVAL_ISO: "PT1S", cfg.VALIDITY: "PT30S",
                      cfg.BOOTSTRAP: "127.0.0.1:1", cfg.CLUSTER_NAME: "full",
                      cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint")})
    check_runnable([conf])  # a fresh checkpoint runs
    metadata = Path(checkpoint_files.query_dir(conf.checkpoint_path)) / "state" / "0" / "_metadata" / "v2"
    metadata.mkdir(parents=True)
    (metadata / "0").write_text("v2\n" + json.dumps({"operatorInfo": {"operatorName": checkpoint_files.PANDAS_FORM}}))
    with pytest.raises(JobConfigError) as refused:
        check_runnable([conf])
    assert "\n" not in str(refused.value) and "start from a fresh checkpoint" in str(refused.value)
