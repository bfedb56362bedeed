"""Java-style Kafka client settings (`kafka.admin.*`, `output.kafka.*`) translated once: to kafka-python, then librdkafka."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

log = logging.getLogger(__name__)

# Java name -> kafka-python name, for settings that only change spelling (values are ints).
_INT_SETTINGS = {
    "request.timeout.ms": "request_timeout_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "receive.buffer.bytes": "receive_buffer_bytes",
    "send.buffer.bytes": "send_buffer_bytes",
}
# Python-client names accepted as they are (PEM files), for operators without a Java truststore.
_PYTHON_SSL = {"ssl.cafile": "ssl_cafile", "ssl.certfile": "ssl_certfile", "ssl.keyfile": "ssl_keyfile",
               "ssl.crlfile": "ssl_crlfile", "ssl.password": "ssl_password"}
# Understood and deliberately not needed by the Python client (no warning).
_NOT_NEEDED = {"ssl.truststore.password", "ssl.truststore.type", "ssl.keystore.type", "default.api.timeout.ms",
               "bootstrap.servers", "ssl.keystore.password", "ssl.key.password", "sasl.jaas.config",
               "ssl.endpoint.identification.algorithm", "ssl.check.hostname"}
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
DEFAULT_RECONNECT_BACKOFF_MAX_MS = 1000  # the Java admin client's default; kafka-python's 30 s would hide a broker's return


@dataclass
class AdminSettings:
    """kafka-python KafkaAdminClient kwargs plus what could not be used (names only, never values)."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def to_kafka_python(admin: Mapping[str, str]) -> AdminSettings:
    """Map `client.quota.callback.static.kafka.admin.*` (prefix removed) to KafkaAdminClient kwargs."""
    out = AdminSettings()
    kw = out.kwargs
    servers = [s.strip() for s in admin.get("bootstrap.servers", "").split(",") if s.strip()]
    if servers:
        kw["bootstrap_servers"] = servers
    kw["reconnect_backoff_max_ms"] = DEFAULT_RECONNECT_BACKOFF_MAX_MS
    for key, raw in admin.items():
        value = raw.strip()
        if key in _INT_SETTINGS:
            try:
                kw[_INT_SETTINGS[key]] = int(value)
            except ValueError:
                out.warnings.append(f"{key}: not a whole number, ignored")
        elif key == "client.id":
            kw["client_id"] = value
        elif key == "security.protocol":
            kw["security_protocol"] = value.upper()
        elif key == "sasl.mechanism":
            kw["sasl_mechanism"] = value.upper()
        elif key == "sasl.kerberos.service.name":
            kw["sasl_kerberos_service_name"] = value
        elif key in _PYTHON_SSL:
            kw[_PYTHON_SSL[key]] = value
        elif key == "ssl.truststore.location":
            if _is_pem(admin.get("ssl.truststore.type"), value):
                kw.setdefault("ssl_cafile", value)
            else:
                out.warnings.append("ssl.truststore.location: the Python client reads PEM only; set "
                                    "ssl.truststore.type=PEM with a PEM file, or ssl.cafile")
        elif key == "ssl.keystore.location":
            if _is_pem(admin.get("ssl.keystore.type"), value):
                kw.setdefault("ssl_certfile", value)  # a PEM keystore holds the key and the chain
            else:
                out.warnings.append("ssl.keystore.location: the Python client reads PEM only; set "
                                    "ssl.keystore.type=PEM with a PEM file, or ssl.certfile and ssl.keyfile")
        elif key not in _NOT_NEEDED:
            out.ignored.append(key)
    password = admin.get("ssl.key.password") or admin.get("ssl.keystore.password")
    if password and "ssl_password" not in kw:
        kw["ssl_password"] = password
    algorithm = admin.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        kw["ssl_check_hostname"] = algorithm.strip().lower() == "https"
    if "ssl.check.hostname" in admin:
        kw["ssl_check_hostname"] = admin["ssl.check.hostname"].strip().lower() == "true"
    if "sasl.jaas.config" in admin:
        _jaas(admin["sasl.jaas.config"], out)
    return out


def _is_pem(declared_type: str | None, path: str) -> bool:
    if declared_type is not None:
        return declared_type.strip().upper() == "PEM"
    return path.lower().endswith((".pem", ".crt", ".cer"))  # Java's default type is JKS


def _jaas(config: str, out: AdminSettings) -> None:
    module = config.strip().split()[0] if config.strip() else ""
    if module.endswith(("PlainLoginModule", "ScramLoginModule")):
        options = {k: v.replace('\\"', '"') for k, v in _JAAS.findall(config)}
        if "username" in options:
            out.kwargs["sasl_plain_username"] = options["username"]
        if "password" in options:
            out.kwargs["sasl_plain_password"] = options["password"]
        if "username" not in options or "password" not in options:
            out.warnings.append("sasl.jaas.config: expected username=\"...\" password=\"...\"")
    else:
        out.warnings.append(f"sasl.jaas.config: login module {module.rsplit('.', 1)[-1] or '(none)'} is not "
                            "supported by the Python client; use PlainLoginModule or ScramLoginModule")

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


# Java client settings librdkafka reads under the same name and meaning (timeouts of the publisher and readers).
_LIBRDKAFKA_SAME = ("delivery.timeout.ms", "request.timeout.ms", "retry.backoff.ms", "reconnect.backoff.ms",
                    "reconnect.backoff.max.ms", "socket.connection.setup.timeout.ms", "linger.ms")


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
    for key in _LIBRDKAFKA_SAME:
        if key in settings:
            out[key] = settings[key].strip()
            if key in parsed.ignored:
                parsed.ignored.remove(key)
    return out, parsed
