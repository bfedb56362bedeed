"""Creates ACL bindings on a cluster through the Admin API (CreateAcls) and finds who else may write a topic."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from quota_pipeline.kafka.acls import CLUSTER_RESOURCE, Binding
from quota_pipeline.kafka.refusal import ClusterRefused, RefusalWatch
from quota_pipeline.kafka.settings import to_librdkafka

log = logging.getLogger(__name__)
_WRITES = ("WRITE", "ALL")


class AclAdminError(RuntimeError):
    """The cluster could not be reached or refused to show or create ACLs; the message says what to do."""


class AuthorizerMissing(AclAdminError):
    """The cluster has no authorizer (authorizer.class.name): it would keep no ACL, let alone enforce one."""


@dataclass(frozen=True)
class Applied:
    added: tuple[Binding, ...]
    present: tuple[Binding, ...]
    other_writers: tuple[str, ...]  # ACLs (as text) letting someone else write the topic


def _resource_type(name: str) -> Any:
    from confluent_kafka.admin import ResourceType
    return ResourceType.BROKER if name == "CLUSTER" else ResourceType[name]  # librdkafka calls the cluster BROKER


def to_acl_binding(b: Binding) -> Any:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType
    return AclBinding(_resource_type(b.resource_type), b.resource_name, ResourcePatternType[b.pattern_type],
                      b.principal, b.host, AclOperation[b.operation], AclPermissionType[b.permission_type])


def from_acl_binding(acl: Any) -> Binding:
    kind = "CLUSTER" if acl.restype.name == "BROKER" else acl.restype.name
    return Binding(acl.principal, kind, acl.name, acl.operation.name, pattern_type=acl.resource_pattern_type.name,
                   host=acl.host, permission_type=acl.permission_type.name)


def describe(b: Binding) -> str:
    return (f"{b.permission_type} {b.principal} {b.operation} on {b.resource_type}:{b.resource_name}"
            f"{'' if b.pattern_type == 'LITERAL' else f' ({b.pattern_type})'}"
            f"{'' if b.host == '*' else f' from {b.host}'}")


class AclAdmin:
    """One librdkafka admin client on one cluster, from Java-style client settings (`where` names their prefix)."""

    def __init__(self, settings: Mapping[str, str], where: str, timeout: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient
        conf, parsed = to_librdkafka(settings)
        for key in parsed.ignored:
            log.warning("%s%s is not used by the admin client; ignored", where, key)
        self.bootstrap = conf.get("bootstrap.servers", "?")
        self.timeout = timeout
        self._watch = RefusalWatch(settings, where, log)
        self._admin = AdminClient({**conf, "error_cb": self._watch, "log_level": 3})

    def _wait(self, future: Any, what: str) -> Any:
        from confluent_kafka import KafkaException
        try:
            return future.result(self.timeout)
        except KafkaException as exc:
            error = exc.args[0]
            kind = AuthorizerMissing if getattr(error, "name", lambda: "")() == "SECURITY_DISABLED" else AclAdminError
            raise kind(self._explain(error, what)) from None
        except TimeoutError:
            raise AclAdminError(self._refused() or f"{what} on {self.bootstrap}: no answer within "
                                f"{self.timeout:.0f} s; check the bootstrap servers and the network") from None

    def _refused(self) -> str | None:
        self._admin.poll(0)  # serves error_cb
        return self._watch.message

    def _explain(self, error: Any, what: str) -> str:
        name = error.name() if hasattr(error, "name") else str(error)
        if self._refused():
            return str(self._watch.message)
        if name == "SECURITY_DISABLED":
            return (f"{what} on {self.bootstrap}: the cluster has no authorizer (authorizer.class.name), so ACLs "
                    "would not be enforced; configure org.apache.kafka.metadata.authorizer.StandardAuthorizer first")
        if name == "CLUSTER_AUTHORIZATION_FAILED":
            return (f"{what} on {self.bootstrap}: this principal may not manage ACLs (it needs ALTER and DESCRIBE on "
                    "the cluster); give --command-config FILE with an admin's client settings")
        text = error.str() if hasattr(error, "str") else str(error)
        return f"{what} on {self.bootstrap} failed: {name}: {text}"

    def existing(self, resource_type: str, name: str, match: bool = False) -> list[Binding]:
        """The bindings on one resource: LITERAL ones, or (match) every pattern that applies to `name`."""
        from confluent_kafka.admin import (
            AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
        )
        pattern = ResourcePatternType.MATCH if match else ResourcePatternType.LITERAL
        acl_filter = AclBindingFilter(_resource_type(resource_type), name, pattern, None, None, AclOperation.ANY,
                                      AclPermissionType.ANY)
        return [from_acl_binding(a) for a in self._wait(self._admin.describe_acls(acl_filter,
                                                                                  request_timeout=self.timeout),
                                                         "DescribeAcls")]

    def apply(self, bindings: Sequence[Binding], topic: str, writer: str) -> Applied:
        """Create the bindings not there yet; list every other ALLOW that lets a principal write `topic`."""
        try:
            present_now = set(self.existing("CLUSTER", CLUSTER_RESOURCE)) | set(self.existing("TOPIC", topic))
            missing = [b for b in bindings if b not in present_now]
            if missing:
                futures = self._admin.create_acls([to_acl_binding(b) for b in missing], request_timeout=self.timeout)
                for future in futures.values():
                    self._wait(future, "CreateAcls")
            writers = [b for b in self.existing("TOPIC", topic, match=True)
                       if b.permission_type == "ALLOW" and b.operation in _WRITES and b.principal != writer]
        except ClusterRefused as exc:
            raise AclAdminError(str(exc)) from None
        return Applied(tuple(missing), tuple(b for b in bindings if b in present_now),
                       tuple(describe(b) for b in writers))

    # ---- what `enforce --stop refuse` needs: exact bindings in and out, the topics, the authorizer -------------------

    def topic_acls(self) -> list[Binding]:
        """Every binding on topics, whatever its pattern, principal, operation or permission (one DescribeAcls)."""
        from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
        acl_filter = AclBindingFilter(_resource_type("TOPIC"), None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        return [from_acl_binding(a) for a in self._guarded(lambda: self._wait(
            self._admin.describe_acls(acl_filter, request_timeout=self.timeout), "DescribeAcls"))]

    def refusal_acls(self, marker_principal: str) -> list[Binding]:
        """Every binding on topics, and `marker_principal`'s on consumer groups, from ONE DescribeAcls (one broker's
        view of the metadata log: whatever was committed before a binding it shows, it shows too)."""
        from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
        acl_filter = AclBindingFilter(_resource_type("ANY"), None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        found = [from_acl_binding(a) for a in self._guarded(lambda: self._wait(
            self._admin.describe_acls(acl_filter, request_timeout=self.timeout), "DescribeAcls"))]
        return [b for b in found if b.resource_type == "TOPIC"
                or (b.resource_type == "GROUP" and b.principal == marker_principal)]

    def create(self, bindings: Sequence[Binding]) -> None:
        """CreateAcls of `bindings` in one request (creating a binding that exists already changes nothing)."""
        if not bindings:
            return
        futures = self._guarded(lambda: self._admin.create_acls([to_acl_binding(b) for b in bindings],
                                                                request_timeout=self.timeout))
        for future in futures.values():
            self._guarded(lambda: self._wait(future, "CreateAcls"))

    def delete(self, bindings: Sequence[Binding]) -> list[Binding]:
        """DeleteAcls with one exact filter per binding (its principal, host, operation, permission and LITERAL or
        PREFIXED resource), so nothing but these bindings can match; returns what the cluster deleted."""
        if not bindings:
            return []
        filters = [to_acl_binding_filter(b) for b in bindings]
        futures = self._guarded(lambda: self._admin.delete_acls(filters, request_timeout=self.timeout))
        deleted: list[Binding] = []
        for future in futures.values():
            deleted += [from_acl_binding(a) for a in self._guarded(lambda: self._wait(future, "DeleteAcls"))]
        return deleted

    def topics(self) -> list[str]:
        """The topics the cluster lists to this principal (those it may DESCRIBE)."""
        from confluent_kafka import KafkaException
        try:
            return sorted(self._admin.list_topics(timeout=self.timeout).topics)
        except KafkaException as exc:
            raise AclAdminError(self._explain(exc.args[0], "ListTopics")) from None

    def authorizer(self) -> str:
        """The brokers' authorizer.class.name (empty: none), as DescribeConfigs of one broker shows it. (librdkafka's
        DescribeAcls answers an empty list where the broker says SECURITY_DISABLED, so it cannot tell.)"""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType
        try:
            brokers = sorted(self._admin.list_topics(timeout=self.timeout).brokers)
        except KafkaException as exc:
            raise AclAdminError(self._explain(exc.args[0], "Metadata")) from None
        if not brokers:
            raise AclAdminError(f"Metadata on {self.bootstrap}: no broker listed")
        futures = self._admin.describe_configs([ConfigResource(ResourceType.BROKER, str(brokers[0]))],
                                               request_timeout=self.timeout)
        for future in futures.values():
            entry = self._wait(future, "DescribeConfigs").get("authorizer.class.name")
            return "" if entry is None or entry.value is None else str(entry.value).strip()
        return ""

    def _guarded(self, call: Any) -> Any:
        try:
            return call()
        except ClusterRefused as exc:
            raise AclAdminError(str(exc)) from None


def to_acl_binding_filter(b: Binding) -> Any:
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    return AclBindingFilter(_resource_type(b.resource_type), b.resource_name, ResourcePatternType[b.pattern_type],
                            b.principal, b.host, AclOperation[b.operation], AclPermissionType[b.permission_type])
