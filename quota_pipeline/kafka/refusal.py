"""Why a cluster cannot be used: a short librdkafka connection that tells a refused login or certificate apart."""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Mapping

from quota_pipeline.kafka.settings import to_librdkafka

PROBE_SECONDS = 5.0
ADMIN_SETTINGS = "client.quota.callback.static.kafka.admin."
OUTPUT_SETTINGS = "quota.pipeline.output.kafka."
# librdkafka's error text: "<proto>://<host:port>/<node>: <reason> (after 3ms in state AUTH_REQ)"
_TEXT = re.compile(r"^(?:\w+://)?(?P<listener>[^/\s]+)/\S*:\s*(?P<reason>.*?)(?:\s*\(after \d+ms in state \w+\))?$")


class ClusterRefused(RuntimeError):
    """The cluster refused our login, or we refused its certificate: retrying cannot help; the message says
    which listener and which settings to check."""


def refusal_codes() -> dict[int, str]:
    from confluent_kafka import KafkaError
    return {KafkaError._AUTHENTICATION: "login", KafkaError._SSL: "tls"}


def _all_down(errors: list[Any]) -> bool:
    from confluent_kafka import KafkaError
    return any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors)


def describe(error_text: str, kind: str, settings: Mapping[str, str], where: str) -> str:
    """One line naming the listener (host:port) and what to check; never a secret (librdkafka's text has none)."""
    found = _TEXT.match(error_text.strip())
    listener = found.group("listener") if found else settings.get("bootstrap.servers", "?")
    reason = found.group("reason") if found else error_text
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if kind == "login":
        return (f"{listener} ({protocol}) refused the login: {reason}; check the user name and password in "
                f"{where}sasl.jaas.config and {where}sasl.mechanism")
    return (f"TLS handshake with {listener} ({protocol}) failed: {reason}; check {where}ssl.truststore.location "
            f"(a PEM file of the CA with {where}ssl.truststore.type=PEM) and the broker's certificate")


def probe(settings: Mapping[str, str], where: str, timeout: float = PROBE_SECONDS) -> str | None:
    """Connect once with librdkafka: a refusal as one line, else None (connected, unreachable, or too slow)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf, _ = to_librdkafka(settings)
    errors: list[Any] = []
    admin = AdminClient({**conf, "error_cb": errors.append, "log_level": 0})
    codes = refusal_codes()
    deadline = time.monotonic() + timeout
    while True:
        for error in errors:
            if error.code() in codes:
                return describe(error.str(), codes[error.code()], settings, where)
        if _all_down(errors) or time.monotonic() >= deadline:
            return None  # down or slow, not refusing: the caller's own message fits
        try:
            admin.list_topics(timeout=min(0.2, max(0.01, deadline - time.monotonic())))
            return None
        except KafkaException:
            admin.poll(0)  # serves error_cb


class RefusalWatch:
    """A librdkafka error_cb for long-lived clients: logs every client error, keeps the first refusal as one
    line (`message`) for the caller to act on."""

    def __init__(self, settings: Mapping[str, str], where: str, log: logging.Logger) -> None:
        self.settings, self.where, self.log = dict(settings), where, log
        self.message: str | None = None

    def __call__(self, error: Any) -> None:
        codes = refusal_codes()
        if error.code() in codes:
            if self.message is not None:
                return  # librdkafka retries the login every few hundred ms: say it once
            self.message = describe(error.str(), codes[error.code()], self.settings, self.where)
        self.log.warning("%s", error.str())

    def wait_for(self, event: threading.Event, timeout: float) -> bool:
        """Wait until `event` is set (True), the timeout passes or a refusal arrives (False)."""
        deadline = time.monotonic() + timeout
        while not event.is_set() and self.message is None and time.monotonic() < deadline:
            event.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        return event.is_set()
