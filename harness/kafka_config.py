"""server.properties of one KRaft node (combined broker+controller) with PLAINTEXT, SCRAM and SSL listeners."""
from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Mapping, Sequence

# Listener names double as security protocols; CONTROLLER and inter-broker traffic stay on PLAINTEXT so that
# SCRAM users can be created after start (no credentials are needed at format time).
PLAINTEXT = "PLAINTEXT"
SASL = "SASL_PLAINTEXT"
SSL = "SSL"
CONTROLLER = "CONTROLLER"
LISTENERS = (PLAINTEXT, SASL, SSL, CONTROLLER)
SCRAM_MECHANISM = "SCRAM-SHA-512"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# With the authorizer on, only the PLAINTEXT principal is a super user: the nodes' own traffic (inter-broker and
# controller listeners are PLAINTEXT) and the tests' bootstrap admin, on loopback. SCRAM users get only what ACLs
# grant them.
BOOTSTRAP_ADMIN = "User:ANONYMOUS"


@dataclass(frozen=True)
class NodeLayout:
    """Where one node listens and keeps its data."""

    node_id: int
    ports: Mapping[str, int]
    log_dirs: Sequence[str]
    metadata_dir: str


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka avoids a leading '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def quorum_voters(nodes: Sequence[NodeLayout]) -> str:
    """The static `controller.quorum.voters` value: every node votes (works on Kafka 3.3 and later)."""
    return ",".join(f"{n.node_id}@127.0.0.1:{n.ports[CONTROLLER]}" for n in nodes)


def authorizer_properties() -> dict[str, str]:
    """KRaft's StandardAuthorizer with the PLAINTEXT principal as the only super user; no ACL means denied."""
    return {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": BOOTSTRAP_ADMIN,
            "allow.everyone.if.no.acl.found": "false"}


def _escape(value: str) -> str:
    # java.util.Properties turns the two characters `\n` back into a newline (PEM keys and chains are multi-line).
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def server_properties(node: NodeLayout, voters: str, replication: int, tls: Mapping[str, str],
                      overrides: Mapping[str, str]) -> str:
    """The text of `node`'s server.properties; `tls` holds the SSL listener's entries, `overrides` win over all."""
    bound = ",".join(f"{name}://127.0.0.1:{node.ports[name]}" for name in LISTENERS)
    advertised = ",".join(f"{name}://127.0.0.1:{node.ports[name]}" for name in LISTENERS if name != CONTROLLER)
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": bound,
        "advertised.listeners": advertised,
        "controller.listener.names": CONTROLLER,
        "inter.broker.listener.name": PLAINTEXT,
        "listener.security.protocol.map": ",".join(
            f"{name}:{PLAINTEXT if name == CONTROLLER else name}" for name in LISTENERS),
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"listener.name.{SASL.lower()}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "log.dirs": ",".join(node.log_dirs),
        "metadata.log.dir": node.metadata_dir,
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        **tls,
        **overrides,
    }
    return "".join(f"{key}={_escape(value)}\n" for key, value in props.items())
