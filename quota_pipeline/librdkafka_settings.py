"""Java-style Kafka client settings (the Strimzi properties) mapped to confluent-kafka (librdkafka) settings."""
from __future__ import annotations

from typing import Mapping

from quota_pipeline.admin_settings import AdminSettings, to_kafka_python

# kafka-python keyword (already parsed from the Java names, JAAS included) -> librdkafka property.
_RENAMES = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "sasl_kerberos_service_name": "sasl.kerberos.service.name",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "ssl_crlfile": "ssl.crl.location",
    "client_id": "client.id",
}


def to_librdkafka(settings: Mapping[str, str]) -> tuple[dict[str, str], AdminSettings]:
    """librdkafka settings from Java-style ones; the AdminSettings carry what could not be used (names only)."""
    parsed = to_kafka_python(settings)
    out: dict[str, str] = {}
    servers = parsed.kwargs.get("bootstrap_servers")
    if servers:
        out["bootstrap.servers"] = ",".join(servers)
    for key, value in parsed.kwargs.items():
        if key in _RENAMES:
            out[_RENAMES[key]] = str(value)
    if parsed.kwargs.get("ssl_check_hostname") is False:
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out, parsed
