"""The pipeline's view of a real cluster: client properties as a Kafka operator writes them, configs, decisions."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Iterable, Mapping

from quota_pipeline.core import config as cfg
from quota_pipeline.core.properties import PUBLISHER_CLIENT_ID
from quota_pipeline.kafka.client_quotas import Quotas
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin
from harness import kafka_config as rc
from harness.kafka_client import decision, wait_for
from harness.kafka import RealKafka

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def client_properties(cluster: RealKafka, listener: str = rc.PLAINTEXT, password: str | None = None) -> dict[str, str]:
    """Java client properties for `listener` (security.protocol, sasl.*, ssl.truststore.*), no prefix."""
    props = {"bootstrap.servers": cluster.bootstrap(listener), "security.protocol": listener}
    if listener == rc.SASL:
        secret = cluster.scram_password if password is None else password
        props.update({"sasl.mechanism": rc.SCRAM_MECHANISM,
                      "sasl.jaas.config": f'{SCRAM_MODULE} required username="{cluster.scram_user}" '
                                          f'password="{secret}";'})
    elif listener == rc.SSL:
        props.update({"ssl.truststore.location": str(cluster.ca_file), "ssl.truststore.type": "PEM"})
    return props


def prefixed(prefix: str, props: Mapping[str, str]) -> dict[str, str]:
    return {prefix + k: v for k, v in props.items()}


def pipeline_properties(cluster: RealKafka, listener: str = rc.PLAINTEXT, password: str | None = None,
                        **extra: str) -> dict[str, str]:
    """A complete configuration observing `cluster` through `listener` (hard limit 1 byte unless overridden)."""
    return {cfg.HARD_BYTES: "1", **prefixed(cfg.ADMIN_PREFIX, client_properties(cluster, listener, password)),
            **extra}


def pipeline_config(cluster: RealKafka, listener: str = rc.PLAINTEXT, **extra: str) -> cfg.Config:
    return cfg.parse(pipeline_properties(cluster, listener, **extra), f"<{listener}>")


def write_properties(path: Path, props: Mapping[str, str]) -> Path:
    """A .properties file; values are written as they are (none of ours needs escaping but backslashes)."""
    path.write_text("".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in props.items()))
    return path


def publish_decisions(cluster: RealKafka, topic: str, records: Iterable[tuple[str, float, dt.datetime]]) -> None:
    """Publish (cluster key, factor, observed_at) decisions as the pipeline does: its client id, acks=all."""
    from confluent_kafka import Producer
    producer = Producer({**cluster.client_config(), "client.id": PUBLISHER_CLIENT_ID, "acks": "all",
                         "linger.ms": 0})
    for key, factor, observed_at in records:
        producer.produce(topic, key=key.encode(), value=json.dumps(decision(key, factor, observed_at).to_json()))
    assert producer.flush(20) == 0, "decisions were not acknowledged"


def restore_quotas(admin: QuotaAdmin, before: Quotas, timeout: float = 15.0) -> None:
    """Put the client quotas back as `before` and wait until Describe shows it (Kafka 4 shows writes late)."""
    current = admin.describe()
    changes = [Change(e, k, None) for e, values in current.items() for k in values if k not in before.get(e, {})]
    changes += [Change(e, k, v) for e, values in before.items() for k, v in values.items()
                if current.get(e, {}).get(k) != v]
    admin.alter(changes)
    wait_for(lambda: admin.describe() == before, timeout, "the client quotas are as before the test")
