"""A stop that refuses writes on stock Kafka, as pure functions: which topics a stop covers, the ACL bindings that
refuse them, and what to create or delete given what the cluster shows and what the enforcer recorded as its own.

Kafka's quota throttle cannot stop a fleet (each client still gets a request through per mute, and waits out a mute
after the release); a DENY WRITE binding for every principal refuses each produce request at once and holds nothing
after it is deleted. See docs/enforce.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from quota_pipeline.reader.write_refusal import SCOPE_CLUSTER, SCOPE_TOPICS, RefusalPolicy, StopScope
from quota_pipeline.kafka.acls import ANY_HOST, Binding

__all__ = ["SCOPE_CLUSTER", "SCOPE_TOPICS", "RefusalPolicy"]

STOP_REFUSE, STOP_THROTTLE = "refuse", "throttle"
STOP_MODES = (STOP_REFUSE, STOP_THROTTLE)
EVERYONE = "User:*"
DENY, COMPANION, MARKER = "deny", "companion", "marker"
MARKER_PRINCIPAL = "User:quota-pipeline.enforce.marker"
MARKER_GROUP_PREFIX = "quota-pipeline.enforce/"


def deny_binding(topic: str) -> Binding:
    """The binding that refuses every principal's writes to `topic` (a DENY beats every ALLOW in Kafka's
    authorizers; only super.users pass)."""
    return Binding(EVERYONE, "TOPIC", topic, "WRITE", pattern_type="LITERAL", host=ANY_HOST, permission_type="DENY")


def companion_binding(topic: str) -> Binding:
    """ALLOW ALL for every principal on `topic`. With allow.everyone.if.no.acl.found=true, a topic without any ACL is
    open to all; the first ACL on it (our DENY) ends that for every operation, not only WRITE: consumers, metadata and
    the operator's deletions would be refused too. This binding keeps every operation but WRITE as it was; it is
    written only while no other ACL applies to the topic (otherwise those ACLs already decide who may read it)."""
    return Binding(EVERYONE, "TOPIC", topic, "ALL", pattern_type="LITERAL", host=ANY_HOST, permission_type="ALLOW")


def marker_binding(cluster: str, topic: str) -> Binding:
    """The enforcer's mark of ownership on `topic`: Kafka keeps one binding for identical ones, so an operator's DENY is
    the enforcer's DENY, and only a binding that no operator writes can say which topics the enforcer holds bindings
    on. It is on a consumer group no client uses (`quota-pipeline.enforce/<cluster>/<topic>`; `/` is not a topic's
    character), for a principal no client is, and denies: it grants nothing and changes nothing on the topic. It is
    created before the enforcer's first binding on the topic and deleted after its last; a state file's claim on a
    binding that the cluster shows without this marker is refused (`unclaimed`): writing the state file is not enough
    to make the enforcer delete an operator's binding, creating the marker takes the right to alter ACLs."""
    return Binding(MARKER_PRINCIPAL, "GROUP", f"{MARKER_GROUP_PREFIX}{cluster}/{topic}", "READ",
                   pattern_type="LITERAL", host=ANY_HOST, permission_type="DENY")


def topic_of(binding: Binding) -> str:
    """The topic a binding of the enforcer's is about (a marker names it after its cluster)."""
    if kind_of(binding) == MARKER:
        return binding.resource_name[len(MARKER_GROUP_PREFIX):].rpartition("/")[2]
    return binding.resource_name


def kind_of(binding: Binding) -> str | None:
    """DENY, COMPANION or MARKER when `binding` is one of the three this module writes, else None."""
    if binding.resource_type == "GROUP" and binding.principal == MARKER_PRINCIPAL:
        name = binding.resource_name
        if name.startswith(MARKER_GROUP_PREFIX) and "/" in name[len(MARKER_GROUP_PREFIX):] and \
                binding == marker_binding(*name[len(MARKER_GROUP_PREFIX):].rsplit("/", 1)):
            return MARKER
        return None
    if binding.resource_type != "TOPIC" or binding.pattern_type != "LITERAL" or binding.principal != EVERYONE \
            or binding.host != ANY_HOST:
        return None
    if binding == deny_binding(binding.resource_name):
        return DENY
    if binding == companion_binding(binding.resource_name):
        return COMPANION
    return None


@dataclass(frozen=True)
class Scope:
    """The stop in force (the rule the broker-side StopAuthorizer and the reader share:
    write_refusal.RefusalPolicy), and why, for the printed lines."""

    stop: StopScope
    why: str = ""

    @property
    def cluster_wide(self) -> bool:
        return self.stop.topics is None

    @property
    def topics(self) -> frozenset[str]:
        return self.stop.topics or frozenset()


def stop_scope(policy: RefusalPolicy, factor: float, basis: str, decision: Any) -> Scope | None:
    """What the answer in force refuses (write_refusal.RefusalPolicy.in_force): None above factor 0. At 0 the whole
    cluster when quota.pipeline.stop.scope is `cluster`, when the answer is not a record's (the fallback, or the reader's start:
    nothing says which topics), or when the record's stop names no topics; else the topics it names."""
    inner = policy.in_force(factor, basis, getattr(decision, "stop", None) if basis == "record" else None)
    if inner is None:
        return None
    if policy.cluster_wide:
        why = f"factor 0, quota.pipeline.stop.scope={SCOPE_CLUSTER}"
    elif basis != "record":
        why = f"factor 0 ({basis}): no record says which topics"
    elif inner.topics is None:
        why = "factor 0, the record stops the cluster"
    else:
        why = "factor 0, the record stops this topic"
    return Scope(inner, why)


def refused_topics(scope: Scope | None, listed: Iterable[str], ours: Iterable[str], policy: RefusalPolicy) -> set[str]:
    """The topics to refuse now. Cluster-wide: every topic the cluster lists, and those the enforcer already refuses
    (a principal without DESCRIBE no longer sees a topic once it has an ACL: the stop must not lift itself).
    Never what the stop exempts (RefusalPolicy.refuses, core/exemption.py: Kafka's internal topics, and the decision
    topic when this cluster holds it; a topic of that name on a cluster that does not is refused like any other). No
    principal is named: a binding for User:* exempts nobody, only the brokers' super.users pass."""
    if scope is None:
        return set()
    named = set(listed) | set(ours) if scope.cluster_wide else set(scope.topics)
    return {t for t in named if policy.refuses(scope.stop, t, None)}


def applies_to(binding: Binding, topic: str) -> bool:
    """Whether an ACL binding on topics applies to `topic`: literal (or the `*` wildcard) or prefixed."""
    if binding.resource_type != "TOPIC":
        return False
    if binding.pattern_type == "PREFIXED":
        return topic.startswith(binding.resource_name)
    return binding.resource_name in (topic, "*")


@dataclass(frozen=True)
class AclChanges:
    """One step's ACL changes. `record` is written to the state file before `create` is sent (write-ahead);
    `delete` is sent before its bindings leave the state file."""

    create: tuple[Binding, ...] = ()
    record: tuple[Binding, ...] = ()  # the new ones among `create`: not in the state file yet
    delete: tuple[Binding, ...] = ()
    operators: tuple[Binding, ...] = ()  # wanted but present as someone else's binding: left alone, never ours

    @property
    def empty(self) -> bool:
        return not (self.create or self.delete)


def wanted_bindings(topics: Iterable[str], present: Iterable[Binding], ours: Iterable[Binding],
                    allow_everyone: bool) -> set[Binding]:
    """DENY for each topic, and its companion ALLOW where allow.everyone.if.no.acl.found governs the topic: no ACL
    applies to it but ours (an operator's identical DENY counts as theirs)."""
    mine = set(ours)
    others = [b for b in present if b not in mine]
    out: set[Binding] = set()
    for topic in topics:
        out.add(deny_binding(topic))
        if allow_everyone and not any(applies_to(b, topic) for b in others):
            out.add(companion_binding(topic))
    return out


def plan(wanted: Iterable[Binding], present: Iterable[Binding], ours: Iterable[Binding], cluster: str,
         settling: Iterable[Binding] = ()) -> AclChanges:
    """The changes that make the enforcer's bindings exactly `wanted`, with the marker of each topic it holds one on.

    - A wanted binding the cluster already shows and the state file does not hold is someone else's: never created,
      recorded or deleted by us. A topic where all it wants is someone else's gets no marker.
    - A wanted binding that is not shown is created; when the state file does not hold it yet it is recorded first.
      One of ours that was created moments ago (`settling`) may not be shown yet (ACLs reach the brokers through the
      metadata log): not sent again.
    - Every binding of ours that is not wanted is deleted, shown or not (a create may be in flight or not shown yet;
      an exact delete of a binding that is not there deletes nothing)."""
    wanted_set, present_set, ours_set = set(wanted), set(present), set(ours)
    settling_set = set(settling)
    operators = sorted(b for b in wanted_set & present_set if b not in ours_set)
    held = wanted_set - set(operators)
    held |= {marker_binding(cluster, b.resource_name) for b in held}
    create = sorted(b for b in held - present_set if b not in settling_set)
    record = tuple(b for b in create if b not in ours_set)
    delete = sorted(ours_set - held)
    return AclChanges(tuple(create), record, tuple(delete), tuple(operators))


def creation_order(bindings: Iterable[Binding]) -> list[list[Binding]]:
    """CreateAcls requests in order: markers first (a binding is created only once its topic's marker exists), then
    companions before the DENYs they accompany, so that no moment refuses reads."""
    items = list(bindings)
    return [batch for batch in ([b for b in items if kind_of(b) == MARKER], [b for b in items if kind_of(b) == COMPANION],
                                [b for b in items if kind_of(b) not in (MARKER, COMPANION)]) if batch]


def deletion_order(bindings: Iterable[Binding]) -> list[list[Binding]]:
    """DeleteAcls requests in order: DENYs before their companions, for the same reason, and markers last."""
    return list(reversed(creation_order(bindings)))


def unclaimed(claims: Iterable[Binding], present: Iterable[Binding], cluster: str) -> set[Binding]:
    """The bindings a state file lists that are not the enforcer's: the cluster shows them, and not the marker of
    their topic (which the enforcer creates before its first binding there and deletes after its last). A listed
    binding the cluster does not show is the enforcer's to create or to forget; one shown with the marker is its own
    (one DescribeAcls shows both: the marker, committed first, is shown wherever the binding is)."""
    shown = set(present)
    return {b for b in claims if kind_of(b) != MARKER and b in shown
            and marker_binding(cluster, b.resource_name) not in shown}


# ---- the state file's content ------------------------------------------------------------------------------------

FORMAT_VERSION = 2  # 1: before markers; its bindings cannot be told from an operator's


@dataclass(frozen=True)
class RefusalState:
    """The bindings the enforcer wrote, or is about to write, on one cluster: the only ones it ever deletes."""

    cluster: str
    bindings: frozenset[Binding] = frozenset()

    def with_added(self, added: Iterable[Binding]) -> "RefusalState":
        return RefusalState(self.cluster, self.bindings | frozenset(added))

    def without(self, removed: Iterable[Binding]) -> "RefusalState":
        return RefusalState(self.cluster, self.bindings - frozenset(removed))

    def to_json(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "cluster": self.cluster,
                "bindings": [_binding_json(b) for b in sorted(self.bindings)]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "RefusalState":
        if raw.get("format_version") == 1:
            raise ValueError("format_version 1, written by an earlier release without ownership markers: finish the "
                             "stop with that release, or delete the bindings it lists by hand")
        if raw.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"unknown format_version {raw.get('format_version')!r}")
        bindings = frozenset(Binding(str(b["principal"]), str(b["resource_type"]), str(b["resource_name"]),
                                     str(b["operation"]), pattern_type=str(b["pattern_type"]), host=str(b["host"]),
                                     permission_type=str(b["permission_type"])) for b in raw["bindings"])
        cluster = str(raw["cluster"])
        strange = [b for b in bindings if kind_of(b) is None
                   or (kind_of(b) == MARKER and b != marker_binding(cluster, topic_of(b)))]
        if strange:
            raise ValueError(f"holds a binding the enforcer never writes: {strange[0]}")
        return cls(cluster, bindings)


def _binding_json(b: Binding) -> dict[str, str]:
    out = b.to_json()
    out.pop("why", None)
    return out
