"""The least-privilege ACL bindings of the pipeline, its readers and `enforce`, as data, kafka-acls.sh lines and JSON."""
from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

CLUSTER_RESOURCE = "kafka-cluster"  # the one CLUSTER resource's name
ANY_HOST = "*"
OBSERVED, OUTPUT, BOTH = "observed", "output", "observed+output"  # BOTH: the topic is on the observed cluster

# kafka-acls.sh spells operations in camel case; the Admin API (and --json) in upper snake case.
_CLI_OPERATION = {"READ": "Read", "WRITE": "Write", "CREATE": "Create", "DESCRIBE": "Describe",
                  "DESCRIBE_CONFIGS": "DescribeConfigs", "ALTER_CONFIGS": "AlterConfigs"}
_PRINCIPAL = re.compile(r"^(?P<type>[A-Za-z][\w.-]*):(?P<name>.+)$")
_JAAS_USERNAME = re.compile(r'\busername\s*=\s*"((?:[^"\\]|\\.)*)"')


class AclInputError(ValueError):
    """A principal or setting the bindings cannot be made from; the message says what to give instead."""


@dataclass(frozen=True, order=True)
class Binding:
    """One ALLOW ACL: `principal` may do `operation` on a LITERAL resource from any host; `why` is for people."""

    principal: str
    resource_type: str  # TOPIC | CLUSTER
    resource_name: str
    operation: str
    why: str = field(default="", compare=False)  # not part of the ACL: the same binding for two reasons is one
    pattern_type: str = "LITERAL"
    host: str = ANY_HOST
    permission_type: str = "ALLOW"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class ClusterAcls:
    """The bindings that belong on one cluster: `role` says which (observed, output, or both when they are one)."""

    role: str
    bootstrap: str
    secured: bool  # not PLAINTEXT: kafka-acls.sh needs --command-config to log in as an admin
    bindings: tuple[Binding, ...]

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.role, "bootstrap_servers": self.bootstrap,
                "bindings": [b.to_json() for b in self.bindings]}


@dataclass(frozen=True)
class Principals:
    """Who runs what. The pipeline may log in as different principals on the observed and the output cluster."""

    pipeline: str  # on the output cluster: creates and writes the decision topic
    observer: str  # the pipeline on the observed cluster: DescribeLogDirs
    readers: tuple[str, ...] = ()  # brokers' callbacks, dashboards, tail
    enforce: tuple[str, ...] = ()


def check_principal(text: str, flag: str, wildcard_ok: bool = False) -> str:
    """`Type:name` as Kafka writes principals (User:alice, User:CN=host,O=org); raise AclInputError otherwise."""
    found = _PRINCIPAL.match(text.strip())
    if not found:
        raise AclInputError(f"{flag}: {text!r} is not a principal; write it as Kafka does, e.g. User:alice "
                            "(SASL user name) or User:CN=pipeline,O=example (TLS certificate)")
    if found.group("name") == "*" and not wildcard_ok:
        raise AclInputError(f"{flag}: {text} would grant every principal; name the one principal it is")
    if found.group("type") == "User" and found.group("name") == "ANONYMOUS":
        raise AclInputError(f"{flag}: User:ANONYMOUS is every client of a PLAINTEXT listener; ACLs cannot single "
                            "it out: give the principal it has on a SASL or SSL listener")
    return f"{found.group('type')}:{found.group('name')}"


def sasl_principal(settings: Mapping[str, str]) -> str | None:
    """User:<name> for a SASL PLAIN or SCRAM login in Java client settings (what Kafka's authorizer sees), else
    None: a TLS certificate's principal depends on the broker's ssl.principal.mapping.rules."""
    if not settings.get("security.protocol", "").strip().upper().startswith("SASL_"):
        return None
    if settings.get("sasl.mechanism", "GSSAPI").strip().upper() not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        return None
    found = _JAAS_USERNAME.search(settings.get("sasl.jaas.config", ""))
    return f"User:{found.group(1)}" if found else None


def is_secured(settings: Mapping[str, str]) -> bool:
    return settings.get("security.protocol", "PLAINTEXT").strip().upper() != "PLAINTEXT"


def _topic(principal: str, topic: str, operations: Sequence[str], why: str) -> list[Binding]:
    return [Binding(principal, "TOPIC", topic, op, why) for op in operations]


def _cluster(principal: str, operations: Sequence[str], why: str) -> list[Binding]:
    return [Binding(principal, "CLUSTER", CLUSTER_RESOURCE, op, why) for op in operations]


def observed_bindings(who: Principals) -> list[Binding]:
    """On the observed cluster. DescribeCluster needs no ACL (Kafka 4.1 answers it to any logged-in client);
    DescribeLogDirs needs DESCRIBE on the cluster. Client quotas: ALTER_CONFIGS and DESCRIBE_CONFIGS on it."""
    out = _cluster(who.observer, ["DESCRIBE"], "the pipeline's DescribeLogDirs of every broker")
    for principal in who.enforce:
        out += _cluster(principal, ["ALTER_CONFIGS", "DESCRIBE_CONFIGS"],
                        "enforce: AlterClientQuotas and DescribeClientQuotas")
    return out


def output_bindings(who: Principals, topic: str) -> list[Binding]:
    """On the output cluster. Each operation a client sends requests for is listed even where Kafka implies it
    (WRITE and READ imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS), so dropping one binding never takes
    another away silently. The idempotent producer needs no IDEMPOTENT_WRITE since Kafka 3.0 (KIP-679): WRITE
    on the topic is enough. Readers assign partitions and join no group, so they need no group ACL."""
    out = _topic(who.pipeline, topic, ["CREATE", "WRITE", "DESCRIBE"],
                 "the pipeline creates the decision topic if missing and is its only writer")
    out += _cluster(who.pipeline, ["DESCRIBE_CONFIGS"],
                    "the pipeline reads the brokers' replica.lag.time.max.ms (DescribeConfigs)")
    for principal in dict.fromkeys([*who.readers, *who.enforce]):
        out += _topic(principal, topic, ["READ", "DESCRIBE"], "follows the decision topic (assign, no group)")
    return out


def plan(who: Principals, topic: str, observed: Mapping[str, str], output: Mapping[str, str] | None) -> list[ClusterAcls]:
    """The bindings per cluster; `output` None means the decision topic lives on the observed cluster."""
    def acls(role: str, settings: Mapping[str, str], bindings: list[Binding]) -> ClusterAcls:
        return ClusterAcls(role, settings.get("bootstrap.servers", ""), is_secured(settings),
                           tuple(dict.fromkeys(bindings)))  # same binding from two roles: once, first reason kept
    if output is None:
        return [acls(BOTH, observed, observed_bindings(who) + output_bindings(who, topic))]
    return [acls(OBSERVED, observed, observed_bindings(who)), acls(OUTPUT, output, output_bindings(who, topic))]


def kafka_acls_lines(clusters: Sequence[ClusterAcls], command_configs: Mapping[str, str | None]) -> list[str]:
    """One `kafka-acls.sh --add` line per principal and resource, operations together; `command_configs` maps a
    role to the admin's client properties file (None: a placeholder where the cluster is secured)."""
    lines: list[str] = []
    for cluster in clusters:
        lines.append(f"# {cluster.role} cluster ({cluster.bootstrap})")
        config = command_configs.get(cluster.role)
        if config is None and cluster.secured:
            config = "ADMIN.properties"
            lines.append("# ADMIN.properties: client settings (security.protocol, sasl.*, ssl.*) of a principal "
                         "allowed to create ACLs (ALTER on the cluster, e.g. a super user)")
        connect = f"kafka-acls.sh --bootstrap-server {shlex.quote(cluster.bootstrap)}"
        if config:
            connect += f" --command-config {shlex.quote(config)}"
        grouped: dict[tuple[str, str, str], list[Binding]] = {}
        for binding in cluster.bindings:
            grouped.setdefault((binding.principal, binding.resource_type, binding.resource_name), []).append(binding)
        for (principal, resource_type, name), bindings in grouped.items():
            ops = " ".join(f"--operation {_CLI_OPERATION[b.operation]}" for b in bindings)
            resource = "--cluster" if resource_type == "CLUSTER" else f"--topic {shlex.quote(name)}"
            why = "; ".join(dict.fromkeys(b.why for b in bindings if b.why))
            lines.append(f"{connect} --add --allow-principal {shlex.quote(principal)} {ops} {resource}"
                         + (f"  # {why}" if why else ""))
    return lines


def to_json(clusters: Sequence[ClusterAcls]) -> dict[str, Any]:
    return {"clusters": [c.to_json() for c in clusters]}
