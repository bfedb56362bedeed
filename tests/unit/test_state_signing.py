"""State files under signing keys: what a writer of the checkpoint directory without a key can no longer make the
enforcer or remedy act on."""
from __future__ import annotations

import json

import pytest

from quota_pipeline.core.signing import parse_keys
from quota_pipeline.enforce.baseline import BaselineError, BaselineFile
from quota_pipeline.enforce.refuse import RefusalState, deny_binding
from quota_pipeline.enforce.refuser import RefusalFile

KEYS = parse_keys("k1:" + "a" * 40)
ROTATED = parse_keys("k2:" + "b" * 40 + ",k1:" + "a" * 40)
OTHER = parse_keys("k1:" + "z" * 40)
DENY = deny_binding("orders")


def refusal_file(tmp_path, keys=KEYS, cluster="east") -> RefusalFile:
    return RefusalFile.beside(BaselineFile(tmp_path / f"{cluster}.json", tmp_path, keys))


def saved(tmp_path, keys=KEYS, cluster="east") -> RefusalFile:
    store = refusal_file(tmp_path, keys, cluster)
    store.save(RefusalState(cluster, frozenset({DENY})))
    return store


def test_a_signed_file_reads_back_and_names_its_key(tmp_path):
    store = saved(tmp_path)
    assert store.load() == RefusalState("east", frozenset({DENY}))
    assert json.loads(store.path.read_text())["signature"].startswith("k1:")


def test_a_planted_unsigned_file_is_refused_with_one_line_naming_it(tmp_path):
    store = refusal_file(tmp_path)
    RefusalFile.beside(BaselineFile(tmp_path / "east.json", tmp_path)).save(RefusalState("east", frozenset({DENY})))
    with pytest.raises(BaselineError) as err:
        store.load()
    line = str(err.value)
    assert "\n" not in line and "east.refusals.json" in line and "is not signed" in line and "nothing was done" in line


@pytest.mark.parametrize("tamper", [
    lambda raw: raw["bindings"].append({**raw["bindings"][0], "resource_name": "payments"}),
    lambda raw: raw.__setitem__("cluster", "west"),
])
def test_a_signed_file_changed_by_hand_is_refused(tmp_path, tamper):
    store = saved(tmp_path)
    raw = json.loads(store.path.read_text())
    tamper(raw)
    store.path.write_text(json.dumps(raw))
    with pytest.raises(BaselineError, match="none of the keys"):
        store.load()


def test_a_file_signed_with_another_secret_or_for_another_cluster_is_refused(tmp_path):
    saved(tmp_path, OTHER)
    with pytest.raises(BaselineError, match="none of the keys"):
        refusal_file(tmp_path).load()
    west = saved(tmp_path / "w", cluster="west")
    east = refusal_file(tmp_path / "w", cluster="east")
    east.path.write_bytes(west.path.read_bytes())  # a genuine file of another cluster, copied over
    with pytest.raises(BaselineError, match="none of the keys"):
        east.load()


def test_a_file_signed_before_a_rotation_is_read_with_the_second_key(tmp_path):
    saved(tmp_path, KEYS)
    assert refusal_file(tmp_path, ROTATED).load() == RefusalState("east", frozenset({DENY}))


def test_without_keys_the_file_is_read_as_before(tmp_path):
    store = saved(tmp_path, ())
    assert "signature" not in json.loads(store.path.read_text())
    assert store.load() == RefusalState("east", frozenset({DENY}))
