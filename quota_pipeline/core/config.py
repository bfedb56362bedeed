"""Strimzi-compatible configuration: read a .properties file, validate it against the table, report all problems.

Per-property rules live in properties.TABLE; the rules that join several properties are below, in `parse`.
"""
from __future__ import annotations

import datetime as dt
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import isodate
import javaproperties

from quota_pipeline.core.stop import DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_SECONDS, StopLimit

from quota_pipeline.core.client_names import unknown_client_key_warnings
from quota_pipeline.core.signing import SigningKey
from quota_pipeline.core.reference.trend import ETA_BUCKETS
from quota_pipeline.core.secrets import redact
from quota_pipeline.core.properties import (
    ADMIN_PREFIX, BY_NAME, DEFAULT_ETA_WINDOW, DEFAULT_MAX_CLOCK_SKEW, DEFAULT_MAX_MUTE, DEFAULT_OUTPUT_TOPIC, INDEX, KNOWN,
    OUTPUT_KAFKA_PREFIX, P,
    PASS_THROUGH_PREFIXES, Q, TABLE, Invalid, shown,
)

PRODUCE, FETCH, REQUEST = P + "produce", P + "fetch", P + "request"
EXCLUDED = P + "excluded.principal.name.list"
CHECK_INTERVAL_SECONDS = P + "storage.check-interval"
CHECK_INTERVAL_ISO = P + "storage.check.interval"
HARD_BYTES = P + "storage.per.volume.limit.min.available.bytes"
HARD_RATIO = P + "storage.per.volume.limit.min.available.ratio"
SOFT_BYTES = P + "storage.per.volume.soft.limit.min.available.bytes"
SOFT_RATIO = P + "storage.per.volume.soft.limit.min.available.ratio"
OFFLINE_POLICY = P + "storage.offline.log.dir.policy"
FENCED_POLICY = P + "storage.fenced.broker.policy"
ETA_HORIZON = P + "storage.per.volume.eta.horizon"
ETA_WINDOW = P + "storage.per.volume.eta.window"
FALLBACK = P + "throttle.factor.fallback"
VALIDITY = P + "throttle.factor.validity.duration"
BOOTSTRAP = ADMIN_PREFIX + "bootstrap.servers"
CLUSTER_NAME = Q + "cluster.name"
OUTPUT_TOPIC = Q + "output.topic"
OUTPUT_TOPIC_HERE = Q + "output.topic.on.this.cluster"
EXCLUDED_CLIENT_IDS = Q + "excluded.client.ids"  # deprecated and ignored
STOP_SCOPE = Q + "stop.scope"
STOP_DELEGATE = Q + "stop.authorizer.delegate"
PRODUCE_FLOOR = Q + "produce.quota.floor"
MAX_MUTE = Q + "throttle.max.mute"
# Kafka's own broker settings: the quota sensors' window, which the stop limit's arithmetic depends on.
QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE = "quota.window.num", "quota.window.size.seconds"
MAX_CLOCK_SKEW = Q + "reader.max.clock.skew"
SIGNING_KEYS = Q + "signing.keys"
JOURNAL_PATH = Q + "journal.path"
JOURNAL_PERIOD = Q + "journal.period"
JOURNAL_RETENTION = Q + "journal.retention"
CLOSEST_VOLUMES = Q + "record.closest.volumes"
CHECKPOINT_PATH = Q + "checkpoint.path"
RUN_GIVE_UP_AFTER = Q + "run.give.up.after"
METRICS_PORT = Q + "metrics.port"
METRICS_HOST = Q + "metrics.host"
# Values shown by `validate` that are no property's typed value (the ones in effect are filled in below).
_COMPUTED = {CHECK_INTERVAL_SECONDS, HARD_BYTES, HARD_RATIO, SOFT_BYTES, SOFT_RATIO, BOOTSTRAP,
             P + "kafka.clientIdPrefix"}

@dataclass(frozen=True)
class Problem:
    key: str
    message: str
    value: Any = None
    after: str | None = None  # a rule joining properties is reported after the last one it names

    @property
    def order(self) -> float:
        return INDEX[self.after] + 0.5 if self.after else INDEX.get(self.key, len(INDEX))

    def __str__(self) -> str:
        got = "" if self.value is None else f" (got {shown(self.key, self.value)})"
        return f"error: {self.key}: {redact(self.message)}{got}"  # a message may quote the file's text


class ConfigError(Exception):
    """Every problem found in one configuration, reported together."""

    def __init__(self, problems: list[Problem], warnings: list[str] | None = None):
        self.problems = problems
        self.warnings = warnings or []
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Limit:
    """A per-volume minimum: `bytes` (available bytes) or `ratio` (available / total)."""

    kind: str  # "bytes" | "ratio"
    value: float

    @property
    def type_name(self) -> str:
        return f"min.available.{self.kind}"

    def to_json(self) -> dict[str, Any]:
        value: float | int = int(self.value) if self.kind == "bytes" else self.value
        return {"type": self.type_name, "value": value}


@dataclass(frozen=True)
class Limits:
    hard: Limit
    soft: Limit | None = None

    def to_json(self) -> dict[str, Any]:
        return {"hard": self.hard.to_json(), "soft": None if self.soft is None else self.soft.to_json()}


@dataclass(frozen=True)
class Config:
    """The validated configuration of one observed cluster."""

    path: str
    limits: Limits
    check_interval: dt.timedelta = dt.timedelta(seconds=60)
    validity: dt.timedelta = dt.timedelta(minutes=5)
    fallback_factor: float = 1.0
    offline_policy: str = "pin"
    fenced_policy: str = "pin"
    eta_horizon: dt.timedelta = dt.timedelta(0)  # PT0S: the predictive policy is off
    eta_window: dt.timedelta = DEFAULT_ETA_WINDOW
    produce: float | None = None
    fetch: float | None = None
    request: float | None = None
    excluded_principals: tuple[str, ...] = ()
    excluded_client_ids: tuple[str, ...] = ()  # deprecated and ignored: kept so `validate` shows what is set
    stop_scope: str = "topics"  # what a stop refuses: the record's topics, or every topic ("cluster")
    stop_authorizer_delegate: str | None = None  # the broker's StopAuthorizer only
    produce_floor: float | None = None  # deprecated: fixes each client's limit at a stop
    max_mute: dt.timedelta = DEFAULT_MAX_MUTE
    quota_window_num: int = DEFAULT_WINDOW_NUM
    quota_window_size_seconds: int = DEFAULT_WINDOW_SIZE_SECONDS
    max_clock_skew: dt.timedelta = DEFAULT_MAX_CLOCK_SKEW
    signing_keys: tuple[SigningKey, ...] = field(default=(), repr=False)  # the first signs; any of them verifies
    admin: Mapping[str, str] = field(default_factory=dict)
    cluster_name: str | None = None
    output_topic: str = DEFAULT_OUTPUT_TOPIC
    output_topic_on_this_cluster: bool | None = None  # as set; decision_topic_here has the value in effect
    output_kafka: Mapping[str, str] = field(default_factory=dict)
    journal_path: str | None = None
    journal_period: dt.timedelta = dt.timedelta(hours=1)
    journal_retention: dt.timedelta = dt.timedelta(days=30)
    closest_volumes: int = 5
    checkpoint_path: str = "./checkpoints"
    run_give_up_after: dt.timedelta = dt.timedelta(minutes=15)  # PT0S: `run` restarts a failing query forever
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9404
    warnings: tuple[str, ...] = ()
    raw: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def stop_limit(self) -> StopLimit:
        """Each client's produce limit at a stop: from the max mute and the brokers' quota window (or the floor)."""
        return StopLimit(self.max_mute.total_seconds(), self.quota_window_num, self.quota_window_size_seconds,
                         self.produce_floor)

    @property
    def bootstrap_servers(self) -> str | None:
        return self.admin.get("bootstrap.servers")

    @property
    def separate_output(self) -> bool:
        """The decision topic is on a cluster of its own: the output settings name its bootstrap servers."""
        return "bootstrap.servers" in self.output_kafka

    @property
    def decision_topic_here(self) -> bool:
        """The decision topic lives on the observed cluster (quota.pipeline.output.topic.on.this.cluster): as set,
        else true unless the output settings name a cluster. A named output cluster may be another listener of this
        one, but only the operator knows: the default then grants the decision topic's name no exemption from a
        stop. The Java CallbackConfig.decisionTopicHere says the same."""
        if self.output_topic_on_this_cluster is not None:
            return self.output_topic_on_this_cluster
        return not self.separate_output

    @property
    def output_settings(self) -> dict[str, str]:
        """Client settings for the output cluster: the output settings alone when they name a cluster, else laid
        over the admin settings (without a bootstrap of their own they tune the observed cluster's client, which
        then holds the decision topic: the stall warning advises such a setting). The Java callback does the same."""
        return dict(self.output_kafka) if self.separate_output else {**self.admin, **self.output_kafka}

    @property
    def effective_journal_path(self) -> str:
        if self.journal_path:
            return self.journal_path
        if self.checkpoint_path.startswith("s3a://"):  # the same bucket, through the journal's s3:// client
            return "s3://" + self.checkpoint_path[len("s3a://"):].rstrip("/") + "/journal"
        return str(Path(self.checkpoint_path) / "journal")

    def effective(self) -> dict[str, str]:
        """Every property with its effective value (defaults filled in), secrets masked, for `validate`."""
        out = {name: _show(getattr(self, attr), name) for name, attr in FIELDS.items()}
        out[CHECK_INTERVAL_ISO] = isodate.duration_isoformat(self.check_interval)
        out[CLUSTER_NAME] = self.cluster_name or "(cluster id)"
        out[JOURNAL_PATH] = self.effective_journal_path
        out[OUTPUT_TOPIC_HERE] = str(self.decision_topic_here).lower()
        for kind, limit in (("hard", self.limits.hard), ("soft", self.limits.soft)):
            if limit is not None:
                out[_LIMIT_KEYS[kind, limit.kind]] = _num(limit)
        out.update({ADMIN_PREFIX + k: v for k, v in self.admin.items()})
        out.update({OUTPUT_KAFKA_PREFIX + k: v for k, v in self.output_kafka.items()})
        return {k: shown(k, v) for k, v in sorted(out.items())}  # every value: a path may hold userinfo


# Config attribute of each property whose typed value is kept as it is (limits and intervals are combined).
FIELDS = {
    PRODUCE: "produce", FETCH: "fetch", REQUEST: "request", EXCLUDED: "excluded_principals",
    OFFLINE_POLICY: "offline_policy", FENCED_POLICY: "fenced_policy", ETA_HORIZON: "eta_horizon",
    ETA_WINDOW: "eta_window", FALLBACK: "fallback_factor", VALIDITY: "validity",
    OUTPUT_TOPIC: "output_topic", OUTPUT_TOPIC_HERE: "output_topic_on_this_cluster",
    EXCLUDED_CLIENT_IDS: "excluded_client_ids", STOP_SCOPE: "stop_scope",
    STOP_DELEGATE: "stop_authorizer_delegate", PRODUCE_FLOOR: "produce_floor", MAX_MUTE: "max_mute",
    MAX_CLOCK_SKEW: "max_clock_skew", SIGNING_KEYS: "signing_keys",
    CHECKPOINT_PATH: "checkpoint_path", METRICS_HOST: "metrics_host", METRICS_PORT: "metrics_port",
    CLUSTER_NAME: "cluster_name", JOURNAL_PATH: "journal_path", JOURNAL_PERIOD: "journal_period",
    JOURNAL_RETENTION: "journal_retention", CLOSEST_VOLUMES: "closest_volumes",
    RUN_GIVE_UP_AFTER: "run_give_up_after",
}
_LIMIT_KEYS = {("hard", "bytes"): HARD_BYTES, ("hard", "ratio"): HARD_RATIO,
               ("soft", "bytes"): SOFT_BYTES, ("soft", "ratio"): SOFT_RATIO}


def _show(value: Any, name: str) -> str:
    if value is None:
        return BY_NAME[name].default_text
    if isinstance(value, dt.timedelta):
        return isodate.duration_isoformat(value) if value else "PT0S"  # isodate writes a zero as P0D
    if isinstance(value, tuple):
        return (";" if name == EXCLUDED else ",").join(map(str, value))
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _num(limit: Limit) -> str:
    return str(int(limit.value)) if limit.kind == "bytes" else repr(limit.value)


def read_properties(path: str | Path) -> dict[str, str]:
    """Java .properties syntax (separators, comments, continuations, `\\uXXXX` escapes) via javaproperties.

    Java (Kafka's and Strimzi's loaders) reads a .properties file as ISO-8859-1; a file that is valid UTF-8 is read
    as UTF-8 (what an editor wrote), any other as ISO-8859-1, so every byte Java accepts is accepted."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([Problem(str(path), "no such configuration file; pass the path of a .properties file")])
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot read it ({exc.strerror}); check its permissions")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("iso-8859-1")  # as java.util.Properties.load(InputStream): every byte is a character
    try:
        return dict(javaproperties.loads(text))
    except ValueError as exc:  # a malformed \\uXXXX escape (javaproperties.InvalidUEscapeError)
        raise ConfigError([Problem(str(path), f"not a valid .properties file: {exc}; write a backslash as \\\\ "
                                              "and a character as \\uXXXX (four hex digits)")]) from None


def load(path: str | Path, require_admin: bool = True) -> Config:
    return parse(read_properties(path), str(path), require_admin=require_admin)


def typed_values(props: Mapping[str, str], problems: list[Problem]) -> dict[str, Any]:
    """Each property of the table that is set, parsed by its spec; a failure becomes a Problem."""
    values: dict[str, Any] = {}
    for spec in TABLE:
        raw = props.get(spec.name)
        if raw is None:
            continue
        try:
            values[spec.name] = spec.convert(raw.strip())
        except Invalid as exc:
            problems.append(Problem(spec.name, str(exc), raw.strip()))
    return values


def parse(props: Mapping[str, str], path: str = "<properties>", require_admin: bool = True) -> Config:
    """Validate properties into a Config or raise ConfigError with every problem at once."""
    problems: list[Problem] = []
    values = typed_values(props, problems)
    check_interval = _check_interval(props, values, problems)
    limits = _limits(props, values, problems)
    admin = _admin(props, problems, require_admin)
    window = _quota_window(props)
    _max_mute(values, window, problems)
    _eta_window(values, check_interval, problems)
    warnings = unknown_key_warnings(props) + stop_warnings(values, window)
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: p.order), warnings)
    assert limits is not None
    kept = {attr: values[name] for name, attr in FIELDS.items() if values.get(name) is not None}
    return Config(
        path=path, limits=limits, check_interval=check_interval, admin=admin,
        output_kafka={k[len(OUTPUT_KAFKA_PREFIX):]: v for k, v in props.items() if k.startswith(OUTPUT_KAFKA_PREFIX)},
        quota_window_num=window[0], quota_window_size_seconds=window[1],
        warnings=tuple(warnings), raw=dict(props), **kept,
    )


def _check_interval(props: Mapping[str, str], values: dict[str, Any], problems: list[Problem]) -> dt.timedelta:
    if CHECK_INTERVAL_SECONDS in props and CHECK_INTERVAL_ISO in props:
        problems.append(Problem(
            CHECK_INTERVAL_SECONDS,
            f"set only one of {CHECK_INTERVAL_SECONDS} (seconds) and {CHECK_INTERVAL_ISO} (ISO-8601)",
            f"{props[CHECK_INTERVAL_SECONDS]} and {props[CHECK_INTERVAL_ISO]}", after=CHECK_INTERVAL_ISO,
        ))
    if values.get(CHECK_INTERVAL_SECONDS) is not None:
        return dt.timedelta(seconds=values[CHECK_INTERVAL_SECONDS])
    iso = values.get(CHECK_INTERVAL_ISO)
    return dt.timedelta(seconds=60) if iso is None else iso


def _limits(props: Mapping[str, str], values: dict[str, Any], problems: list[Problem]) -> Limits | None:
    hard: Limit | None = None
    if HARD_BYTES in props and HARD_RATIO in props:
        problems.append(Problem(HARD_BYTES, f"set exactly one hard limit, not both {HARD_BYTES} and {HARD_RATIO}",
                                f"{props[HARD_BYTES]} and {props[HARD_RATIO]}", after=SOFT_RATIO))
    elif HARD_BYTES not in props and HARD_RATIO not in props:
        problems.append(Problem(HARD_BYTES, f"a hard limit is required: set {HARD_BYTES} or {HARD_RATIO}",
                                after=SOFT_RATIO))
    elif values.get(HARD_BYTES) is not None:
        hard = Limit("bytes", values[HARD_BYTES])
    elif values.get(HARD_RATIO) is not None:
        hard = Limit("ratio", values[HARD_RATIO])
    soft: Limit | None = None
    if SOFT_BYTES in props and SOFT_RATIO in props:
        problems.append(Problem(SOFT_BYTES, f"set at most one soft limit, not both {SOFT_BYTES} and {SOFT_RATIO}",
                                f"{props[SOFT_BYTES]} and {props[SOFT_RATIO]}", after=SOFT_RATIO))
    elif values.get(SOFT_BYTES) is not None:
        soft = Limit("bytes", values[SOFT_BYTES])
    elif values.get(SOFT_RATIO) is not None:
        soft = Limit("ratio", values[SOFT_RATIO])
    if hard is not None and soft is not None and soft.kind == hard.kind and soft.value <= hard.value:
        problems.append(Problem(_LIMIT_KEYS["soft", soft.kind],
                                f"the soft limit must leave more space than the hard limit ({_num(hard)})", _num(soft),
                                after=SOFT_RATIO))
    return None if hard is None else Limits(hard, soft)


def _admin(props: Mapping[str, str], problems: list[Problem], require_admin: bool) -> dict[str, str]:
    admin = {k[len(ADMIN_PREFIX):]: v for k, v in props.items() if k.startswith(ADMIN_PREFIX)}
    if "bootstrap.servers" in admin:
        servers = [s.strip() for s in admin["bootstrap.servers"].split(",") if s.strip()]
        if not servers:
            problems.append(Problem(BOOTSTRAP, "must list at least one host:port", admin["bootstrap.servers"]))
        else:
            admin["bootstrap.servers"] = ",".join(servers)
    elif require_admin:
        problems.append(Problem(BOOTSTRAP, "required: the host:port list of the cluster to observe"))
    return admin


def _quota_window(props: Mapping[str, str]) -> tuple[int, int]:
    """The brokers' quota.window.num and quota.window.size.seconds when the file sets them (a broker's own file),
    else Kafka's defaults; Kafka validates them, so an unreadable one counts as its default here."""
    def positive(key: str, default: int) -> int:
        try:
            value = int(props.get(key, "").strip())
        except ValueError:
            return default
        return value if value > 0 else default
    return positive(QUOTA_WINDOW_NUM, DEFAULT_WINDOW_NUM), positive(QUOTA_WINDOW_SIZE, DEFAULT_WINDOW_SIZE_SECONDS)


def _max_mute(values: Mapping[str, Any], window: tuple[int, int], problems: list[Problem]) -> None:
    """The shortest max mute the stop limit's arithmetic holds for, whatever the request size (StopLimit)."""
    mute = values.get(MAX_MUTE)
    seconds = StopLimit(window_num=window[0], window_size_seconds=window[1]).shortest_mute_seconds
    if mute is not None and mute.total_seconds() < seconds:
        problems.append(Problem(MAX_MUTE, "must be at least (quota.window.num - 1) x quota.window.size.seconds + 2 "
                                f"quota windows (PT{seconds:g}S): a shorter mute lets smaller requests be charged twice",
                                isodate.duration_isoformat(mute)))


def _eta_window(values: Mapping[str, Any], check_interval: dt.timedelta, problems: list[Problem]) -> None:
    """With the predictive policy on, each of the ETA window's buckets must hold a reading: a bucket (a sixth of the
    window) shorter than the check interval leaves some empty, and the fill rate would rest on fewer minima."""
    horizon = values.get(ETA_HORIZON) or dt.timedelta(0)
    window = values.get(ETA_WINDOW) or DEFAULT_ETA_WINDOW
    if horizon > dt.timedelta(0) and window / ETA_BUCKETS < check_interval:
        problems.append(Problem(ETA_WINDOW, f"a sixth of the window must be at least the check interval "
                                f"({isodate.duration_isoformat(check_interval)}); set it to at least "
                                f"{isodate.duration_isoformat(check_interval * ETA_BUCKETS)}",
                                isodate.duration_isoformat(window)))


def stop_warnings(values: Mapping[str, Any], window: tuple[int, int]) -> list[str]:
    """Deprecated properties, and a static quota a stop cannot lower (the Java callback logs the same at start)."""
    mute = values.get(MAX_MUTE, DEFAULT_MAX_MUTE).total_seconds()
    stop = StopLimit(mute, window[0], window[1], values.get(PRODUCE_FLOOR))
    warnings = []
    if values.get(EXCLUDED_CLIENT_IDS) is not None:
        warnings.append(f"warning: {EXCLUDED_CLIENT_IDS} is deprecated and ignored: a client chooses its own id, so "
                        "it let any client that named itself so escape every stop; no client is exempt by its id now. "
                        f"Remove it; exempt the pipeline's principal with {EXCLUDED} and let writes to the decision "
                        "topic through with io.quotapipeline.callback.StopAuthorizer (docs/broker-side.md)")
    if stop.floor is not None:
        warnings.append(f"warning: {PRODUCE_FLOOR} is deprecated: it fixes each client's limit at a stop to "
                        f"{stop.floor} bytes/s (a 1 MiB request muted about {round(stop.mute_seconds(0))} s); remove "
                        f"it and set {MAX_MUTE} (the longest mute after the release) instead")
    produce = values.get(PRODUCE)
    if produce is not None and stop.enter_limit() >= produce:
        warnings.append(f"warning: {PRODUCE} ({produce}) is not above the per-client limit at a stop "
                        f"({stop.enter_limit()} bytes/s): a throttle cannot lower the produce quota; raise {MAX_MUTE} "
                        "or the static quota")
    return warnings


def unknown_key_warnings(props: Mapping[str, str]) -> list[str]:
    warnings = []
    for key in sorted(props):
        if not key.startswith((P, Q)) or key in KNOWN or key.startswith(PASS_THROUGH_PREFIXES):
            continue
        close = difflib.get_close_matches(key, KNOWN, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        warnings.append(f"warning: {key}: unknown property, ignored{hint}")
    return warnings + unknown_client_key_warnings(props, PASS_THROUGH_PREFIXES)
