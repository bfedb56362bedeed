"""A lazily opened kafka-python admin client built from the Java-style kafka.admin.* settings."""
from __future__ import annotations

import logging
from typing import Callable, Mapping

from kafka.admin import KafkaAdminClient

from quota_pipeline.kafka.settings import to_kafka_python

log = logging.getLogger(__name__)


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
        self._kwargs = {**settings.kwargs, "request_timeout_ms": timeout_ms}
        self._factory = client_factory or KafkaAdminClient
        self._client: KafkaAdminClient | None = None

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
