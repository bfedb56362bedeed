"""A lazily opened kafka-python admin client built from the Java-style kafka.admin.* settings."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping

import kafka.errors as Errors
from kafka.admin import KafkaAdminClient

from quota_pipeline.kafka.refusal import ADMIN_SETTINGS, PROBE_SECONDS, ClusterRefused, probe
from quota_pipeline.kafka.settings import to_kafka_python

log = logging.getLogger(__name__)

# A cluster that lets us in bootstraps well within this; past it, a probe asks whether it refused us.
PROBE_AFTER_MS = 2000
MIN_BOOTSTRAP_MS = 100


# The admin client's own network client class, named by its public default rather than by a module path of
# kafka-python's internals.
_NETWORK_CLIENT = KafkaAdminClient.DEFAULT_CONFIG["kafka_client"]


def _client_without_sensors(**configs: Any) -> Any:
    """kafka-python's network client without its per-connection sensors: nothing reads them, and recording them for
    every request was about a tenth of a poll's CPU."""
    return _NETWORK_CLIENT(**{**configs, "metrics": None})


class ClosingAdminClient(KafkaAdminClient):
    """KafkaAdminClient that stops its IO thread when bootstrapping fails (kafka-python leaves it running, so
    an observer polling an unreachable cluster would gain a thread per poll), its network client without sensors."""

    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**{"kafka_client": _client_without_sensors, **configs})
        except BaseException:
            client = getattr(self, "_client", None)
            if client is not None:
                client.close()
            raise


class AdminConnection:
    """Holds one admin client across calls; subclasses open it with `self._factory(**self._kwargs, ...)`."""

    def __init__(self, admin: Mapping[str, str], timeout_ms: int,
                 client_factory: Callable[..., KafkaAdminClient] | None = None) -> None:
        settings = to_kafka_python(admin)
        for key in settings.ignored:  # names only: values may be secrets
            log.warning("kafka.admin.%s is not used by the Python admin client; ignored", key)
        for warning in settings.warnings:
            log.warning("kafka.admin.%s", warning)
        self.timeout_ms = timeout_ms
        self._settings = dict(admin)
        self._kwargs = {**settings.kwargs, "request_timeout_ms": timeout_ms}
        self._factory = client_factory or ClosingAdminClient
        self._client: KafkaAdminClient | None = None

    def _bootstrap(self, timeout_ms: int) -> KafkaAdminClient:
        """A bootstrapped client within `timeout_ms`. kafka-python retries a refused login or certificate until
        the timeout and then only says it could not bootstrap, so a bootstrap that stalls is followed by a
        short probe: a refusal raises ClusterRefused at once, anything else gets the rest of the time."""
        started = time.monotonic()
        try:
            return self._factory(**self._kwargs, bootstrap_timeout_ms=min(timeout_ms, PROBE_AFTER_MS))
        except Errors.KafkaTimeoutError:
            left = timeout_ms / 1000 - (time.monotonic() - started)
            refused = probe(self._settings, ADMIN_SETTINGS, timeout=min(PROBE_SECONDS, max(0.5, left)))
            if refused:
                raise ClusterRefused(refused) from None
            left_ms = int((timeout_ms / 1000 - (time.monotonic() - started)) * 1000)
            if left_ms < MIN_BOOTSTRAP_MS:
                raise
            return self._factory(**self._kwargs, bootstrap_timeout_ms=left_ms)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken client must not break the caller or hide its outcome
                log.debug("closing the admin client failed", exc_info=True)


COMMAND_TIMEOUT_MS = 30000  # a command's admin requests, unless the settings give request.timeout.ms


class CommandAdmin(AdminConnection):
    """A command's admin client, opened on first use: its timeout from the settings, and a cluster that cannot be
    reached or refuses the client raised as the subclass's `error`, saying what to check."""

    error: type[Exception] = RuntimeError

    def __init__(self, admin: Mapping[str, str], client_factory: Callable[..., KafkaAdminClient] | None = None,
                 timeout_ms: int | None = None):
        super().__init__(admin, timeout_ms or int(admin.get("request.timeout.ms", COMMAND_TIMEOUT_MS)),
                         client_factory)
        self.bootstrap = admin.get("bootstrap.servers", "")

    def _connect(self) -> KafkaAdminClient:
        if self._client is None:
            try:
                self._client = self._bootstrap(self.timeout_ms)
            except ClusterRefused as exc:
                raise self.error(str(exc)) from None
            except Errors.KafkaError as exc:
                raise self.error(f"cannot reach {self.bootstrap} ({exc}); check kafka.admin.bootstrap.servers "
                                 "(or --bootstrap-server), the network and the security settings") from None
        return self._client
