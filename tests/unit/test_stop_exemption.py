"""Which writes a stop lets through (core/exemption.py): Kafka's internal topics always, the decision topic only on
the cluster that holds it (quota.pipeline.output.topic.on.this.cluster), excluded principals; never by client id.
The same rule in the Python reader, `enforce`'s DENY set, `remedy`'s protected topics and `validate`."""
from __future__ import annotations

import datetime as dt

import pytest

from quota_pipeline.reader.reader import Reader
from quota_pipeline.reader.write_refusal import CLUSTER_SCOPE
from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.exemption import INTERNAL_TOPICS
from quota_pipeline.enforce.refuse import RefusalPolicy, Scope, refused_topics
from quota_pipeline.remedy.gather import read_view
from tests.unit.test_remedy_execute import two_dirs

DECISIONS = "__quota_throttle_factors"
OBSERVED = {cfg.BOOTSTRAP: "observed:9092", cfg.HARD_BYTES: "1000", cfg.CLUSTER_NAME: "c1"}
OUTPUT = {**OBSERVED, "quota.pipeline.output.kafka.bootstrap.servers": "output:9092"}
HERE = {cfg.OUTPUT_TOPIC_HERE: "true"}
CLUSTER_WIDE = {"quota.pipeline.stop.scope": "cluster"}


def test_the_decision_topic_is_on_this_cluster_unless_an_output_cluster_is_named_or_it_is_said():
    assert cfg.parse(OBSERVED).decision_topic_here
    assert not cfg.parse(OUTPUT).decision_topic_here
    assert cfg.parse({**OUTPUT, cfg.OUTPUT_TOPIC_HERE: "True"}).decision_topic_here  # another listener of it
    assert not cfg.parse({**OBSERVED, cfg.OUTPUT_TOPIC_HERE: "false"}).decision_topic_here
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.parse({**OUTPUT, cfg.OUTPUT_TOPIC_HERE: "yes"})
    assert [str(p) for p in caught.value.problems] == [
        "error: quota.pipeline.output.topic.on.this.cluster: must be true or false (got yes)"]


def test_validate_shows_where_the_decision_topic_lives(tmp_path, capsys):
    path = tmp_path / "c.properties"
    for props, shown in ((OBSERVED, "true"), (OUTPUT, "false"), ({**OUTPUT, **HERE}, "true")):
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        assert main(["validate", "--offline", str(path)]) == 0
        assert f"quota.pipeline.output.topic.on.this.cluster={shown}\n" in capsys.readouterr().out


def stopped_reader(props: dict[str, str]) -> Reader:
    """A reader holding the fallback of 0: a stop of the whole cluster, whatever scope the reader has."""
    clock = ManualClock(dt.datetime(2026, 11, 21, 10, tzinfo=dt.timezone.utc))
    reader = Reader(cfg.parse({**props, "client.quota.callback.static.throttle.factor.fallback": "0",
                               "client.quota.callback.static.throttle.factor.validity.duration": "PT1S",
                               "client.quota.callback.static.excluded.principal.name.list": "User:pipeline"}),
                    clock=clock)
    clock.t += dt.timedelta(seconds=2)
    assert reader.answer().factor == 0.0 and reader.answer().basis == "fallback"
    return reader


def test_the_reader_refuses_the_decision_topics_name_on_a_cluster_that_does_not_hold_it():
    elsewhere = stopped_reader({**OUTPUT, **CLUSTER_WIDE})
    assert elsewhere.refuses("orders", "User:alice")
    assert elsewhere.refuses(DECISIONS, "User:alice")
    assert not elsewhere.refuses(DECISIONS, "User:pipeline")
    assert not any(elsewhere.refuses(t, "User:alice") for t in INTERNAL_TOPICS)
    for here in (stopped_reader({**OUTPUT, **HERE, **CLUSTER_WIDE}), stopped_reader({**OBSERVED, **CLUSTER_WIDE})):
        assert here.refuses("orders", "User:alice") and not here.refuses(DECISIONS, "User:alice")


def test_enforce_denies_writes_to_the_decision_topics_name_on_a_cluster_that_does_not_hold_it():
    listed = ["orders", DECISIONS, *INTERNAL_TOPICS]
    everything = Scope(CLUSTER_SCOPE)
    elsewhere = RefusalPolicy.of(cfg.parse({**OUTPUT, **CLUSTER_WIDE}))
    assert refused_topics(everything, listed, [], elsewhere) == {"orders", DECISIONS}
    here = RefusalPolicy.of(cfg.parse({**OUTPUT, **HERE, **CLUSTER_WIDE}))
    assert refused_topics(everything, listed, [], here) == {"orders"}


def test_remedy_never_moves_the_decision_topic_on_the_cluster_that_holds_it(tmp_path):
    cluster = two_dirs()
    cluster.add(DECISIONS, 0, 1, [(1, "/a")])
    checkpoint = {cfg.CHECKPOINT_PATH: str(tmp_path)}
    assert read_view(cluster, cfg.parse({**OUTPUT, **HERE, **checkpoint})).protected == {DECISIONS}
    assert read_view(cluster, cfg.parse({**OBSERVED, **checkpoint})).protected == {DECISIONS}
    assert read_view(cluster, cfg.parse({**OUTPUT, **checkpoint})).protected == frozenset()
    assert read_view(cluster, cfg.parse({**OBSERVED, cfg.OUTPUT_TOPIC_HERE: "false", **checkpoint})).protected \
        == frozenset()
