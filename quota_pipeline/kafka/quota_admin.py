"""DescribeClientQuotas / AlterClientQuotas over the wire with kafka-python's protocol classes."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable

import kafka.errors as Errors
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from quota_pipeline.kafka.admin import CommandAdmin
from quota_pipeline.kafka.client_quotas import Entity, Quotas

log = logging.getLogger(__name__)



class QuotaAdminError(RuntimeError):
    """A quota request the cluster refused or could not answer; the message says what to do."""


@dataclass(frozen=True)
class Change:
    """One quota value to set, or to remove when value is None."""

    entity: Entity
    key: str
    value: float | None

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.entity}: delete {self.key}"
        return f"{self.entity}: set {self.key}={_fmt(self.value)}"

    def to_json(self) -> dict[str, Any]:
        return {"entity": self.entity.to_json(), "key": self.key, "value": self.value}


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


class QuotaAdmin(CommandAdmin):
    """One admin client for quota calls: `describe()` every entity, `alter(changes)` in one request."""

    error = QuotaAdminError

    def _send(self, request: Any) -> Any:
        client = self._connect()
        manager = client._manager

        async def call() -> Any:
            return await manager.wait_for(manager.send(request, request_timeout_ms=self.timeout_ms), self.timeout_ms)
        try:
            return manager.run(call)
        except Errors.IncompatibleBrokerVersion:
            raise QuotaAdminError(f"{self.bootstrap} does not support {type(request).__name__}; client quotas "
                                  "through the admin API need Kafka >= 2.6 (KIP-546)") from None
        except Errors.KafkaError as exc:
            self.close()  # the next call reconnects
            raise QuotaAdminError(f"{type(request).__name__} to {self.bootstrap} failed: {type(exc).__name__}: "
                                  f"{exc}; check that the cluster is reachable and retry") from None

    def cluster_id(self) -> str | None:
        client = self._connect()
        try:
            return client.describe_cluster().get("cluster_id")
        except Errors.KafkaError as exc:
            raise QuotaAdminError(f"DescribeCluster on {self.bootstrap} failed: {exc}") from None

    def describe(self) -> Quotas:
        """Every client-quota entity with its values (an empty non-strict filter matches everything)."""
        response = self._send(DescribeClientQuotasRequest(components=[], strict=False))
        if response.error_code:
            raise QuotaAdminError(f"DescribeClientQuotas failed: {Errors.for_code(response.error_code).message}"
                                  f"{': ' + response.error_message if response.error_message else ''}; "
                                  "the principal needs DESCRIBE_CONFIGS on the cluster")
        return {Entity.from_mapping({c.entity_type: c.entity_name for c in e.entity}):
                {v.key: float(v.value) for v in e.values}
                for e in response.entries or []}

    def alter(self, changes: Iterable[Change], validate_only: bool = False) -> None:
        """Apply changes in one AlterClientQuotas request; raise with every entity the cluster refused."""
        by_entity: dict[Entity, list[Change]] = {}
        for change in changes:
            by_entity.setdefault(change.entity, []).append(change)
        if not by_entity:
            return
        Entry = AlterClientQuotasRequest.EntryData
        entries = [Entry(entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in entity.parts],
                         ops=[Entry.OpData(key=c.key, value=0.0 if c.value is None else float(c.value),
                                           remove=c.value is None) for c in ops])
                   for entity, ops in by_entity.items()]
        response = self._send(AlterClientQuotasRequest(entries=entries, validate_only=validate_only))
        failures = []
        for entry in response.entries:
            if entry.error_code:
                entity = Entity.from_mapping({c.entity_type: c.entity_name for c in entry.entity})
                failures.append(f"{entity}: {Errors.for_code(entry.error_code).message}"
                                f"{' (' + entry.error_message + ')' if entry.error_message else ''}")
        if failures:
            raise QuotaAdminError("AlterClientQuotas refused " + "; ".join(failures)
                                  + "; fix the values (or the principal's ALTER_CONFIGS permission) and retry")
