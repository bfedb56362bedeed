"""Strimzi-compatible configuration: read a .properties file, validate every property, report all problems."""
from __future__ import annotations

import datetime as dt
import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import isodate
import javaproperties

P = "client.quota.callback.static."
Q = "quota.pipeline."

PRODUCE = P + "produce"
FETCH = P + "fetch"
REQUEST = P + "request"
EXCLUDED = P + "excluded.principal.name.list"
CHECK_INTERVAL_SECONDS = P + "storage.check-interval"
CHECK_INTERVAL_ISO = P + "storage.check.interval"
HARD_BYTES = P + "storage.per.volume.limit.min.available.bytes"
HARD_RATIO = P + "storage.per.volume.limit.min.available.ratio"
SOFT_BYTES = P + "storage.per.volume.soft.limit.min.available.bytes"
SOFT_RATIO = P + "storage.per.volume.soft.limit.min.available.ratio"
OFFLINE_POLICY = P + "storage.offline.log.dir.policy"
FALLBACK = P + "throttle.factor.fallback"
VALIDITY = P + "throttle.factor.validity.duration"
ADMIN_PREFIX = P + "kafka.admin."
BOOTSTRAP = ADMIN_PREFIX + "bootstrap.servers"
CLIENT_ID_PREFIX = P + "kafka.clientIdPrefix"
CLUSTER_NAME = Q + "cluster.name"
OUTPUT_TOPIC = Q + "output.topic"
OUTPUT_KAFKA_PREFIX = Q + "output.kafka."
JOURNAL_PATH = Q + "journal.path"
CHECKPOINT_PATH = Q + "checkpoint.path"
METRICS_PORT = Q + "metrics.port"
METRICS_HOST = Q + "metrics.host"

OFFLINE_POLICIES = ("pin", "last-known", "violate")
DEFAULT_OUTPUT_TOPIC = "__quota_throttle_factors"
KNOWN = (
    PRODUCE, FETCH, REQUEST, EXCLUDED, CHECK_INTERVAL_SECONDS, CHECK_INTERVAL_ISO, HARD_BYTES, HARD_RATIO,
    SOFT_BYTES, SOFT_RATIO, OFFLINE_POLICY, FALLBACK, VALIDITY, BOOTSTRAP, CLIENT_ID_PREFIX, CLUSTER_NAME,
    OUTPUT_TOPIC, JOURNAL_PATH, CHECKPOINT_PATH, METRICS_PORT, METRICS_HOST,
)
PASS_THROUGH_PREFIXES = (ADMIN_PREFIX, OUTPUT_KAFKA_PREFIX)

_SECRET = re.compile(r"password|secret|token|credential|sasl\.jaas\.config|(^|[._])key$", re.IGNORECASE)
MASK = "******"


def is_secret(key: str) -> bool:
    return bool(_SECRET.search(key))


def shown(key: str, value: Any) -> str:
    """A value as it may be printed or logged: secrets masked."""
    return MASK if is_secret(key) else str(value)


@dataclass(frozen=True)
class Problem:
    key: str
    message: str
    value: Any = None

    def __str__(self) -> str:
        got = "" if self.value is None else f" (got {shown(self.key, self.value)})"
        return f"error: {self.key}: {self.message}{got}"


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
    produce: float | None = None
    fetch: float | None = None
    request: float | None = None
    excluded_principals: tuple[str, ...] = ()
    admin: Mapping[str, str] = field(default_factory=dict)
    cluster_name: str | None = None
    output_topic: str = DEFAULT_OUTPUT_TOPIC
    output_kafka: Mapping[str, str] = field(default_factory=dict)
    journal_path: str | None = None
    checkpoint_path: str = "./checkpoints"
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9404
    warnings: tuple[str, ...] = ()
    raw: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def bootstrap_servers(self) -> str | None:
        return self.admin.get("bootstrap.servers")

    @property
    def output_settings(self) -> dict[str, str]:
        """Producer settings for the output cluster: the admin settings unless overridden."""
        return dict(self.output_kafka) if self.output_kafka else dict(self.admin)

    @property
    def effective_journal_path(self) -> str:
        return self.journal_path or str(Path(self.checkpoint_path) / "journal")

    def effective(self) -> dict[str, str]:
        """Every property with its effective value (defaults filled in), secrets masked, for `validate`."""
        out: dict[str, str] = {
            PRODUCE: _unlimited(self.produce),
            FETCH: _unlimited(self.fetch),
            REQUEST: _unlimited(self.request),
            EXCLUDED: ";".join(self.excluded_principals),
            CHECK_INTERVAL_ISO: isodate.duration_isoformat(self.check_interval),
            (HARD_BYTES if self.limits.hard.kind == "bytes" else HARD_RATIO): _num(self.limits.hard),
            OFFLINE_POLICY: self.offline_policy,
            FALLBACK: repr(self.fallback_factor),
            VALIDITY: isodate.duration_isoformat(self.validity),
            CLUSTER_NAME: self.cluster_name or "(cluster id)",
            OUTPUT_TOPIC: self.output_topic,
            JOURNAL_PATH: self.effective_journal_path,
            CHECKPOINT_PATH: self.checkpoint_path,
            METRICS_HOST: self.metrics_host,
            METRICS_PORT: str(self.metrics_port),
        }
        if self.limits.soft is not None:
            out[SOFT_BYTES if self.limits.soft.kind == "bytes" else SOFT_RATIO] = _num(self.limits.soft)
        for k, v in self.admin.items():
            out[ADMIN_PREFIX + k] = shown(k, v)
        for k, v in self.output_kafka.items():
            out[OUTPUT_KAFKA_PREFIX + k] = shown(k, v)
        return dict(sorted(out.items()))


def _unlimited(v: float | None) -> str:
    return "unlimited" if v is None else repr(v)


def _num(limit: Limit) -> str:
    return str(int(limit.value)) if limit.kind == "bytes" else repr(limit.value)


def read_properties(path: str | Path) -> dict[str, str]:
    """Java .properties syntax (separators, comments, continuations, escapes) via javaproperties."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([Problem(str(path), "no such configuration file; pass the path of a .properties file")])
    with p.open("r", encoding="utf-8") as fh:
        return dict(javaproperties.load(fh))


def load(path: str | Path, require_admin: bool = True) -> Config:
    return parse(read_properties(path), str(path), require_admin=require_admin)


def parse(props: Mapping[str, str], path: str = "<properties>", require_admin: bool = True) -> Config:
    """Validate properties into a Config or raise ConfigError with every problem at once."""
    problems: list[Problem] = []
    values: dict[str, Any] = {}

    def get(key: str, convert: Callable[[str], Any]) -> Any:
        raw = props.get(key)
        if raw is None:
            return None
        try:
            return convert(raw.strip())
        except _Invalid as exc:
            problems.append(Problem(key, str(exc), raw))
            return None

    for key in (PRODUCE, FETCH, REQUEST):
        values[key] = get(key, _double(minimum=0.0))

    principals = get(EXCLUDED, _principals) or ()

    seconds = get(CHECK_INTERVAL_SECONDS, _int(minimum=0))
    iso = get(CHECK_INTERVAL_ISO, _duration)
    if CHECK_INTERVAL_SECONDS in props and CHECK_INTERVAL_ISO in props:
        problems.append(Problem(
            CHECK_INTERVAL_SECONDS,
            f"set only one of {CHECK_INTERVAL_SECONDS} (seconds) and {CHECK_INTERVAL_ISO} (ISO-8601)",
            f"{props[CHECK_INTERVAL_SECONDS]} and {props[CHECK_INTERVAL_ISO]}",
        ))
    if seconds is not None:
        check_interval = dt.timedelta(seconds=seconds)
    elif iso is not None:
        check_interval = iso
    else:
        check_interval = dt.timedelta(seconds=60)

    hard_bytes = get(HARD_BYTES, _long(minimum=0))
    hard_ratio = get(HARD_RATIO, _double(0.0, 1.0))
    soft_bytes = get(SOFT_BYTES, _long(minimum=0))
    soft_ratio = get(SOFT_RATIO, _double(0.0, 1.0))
    hard: Limit | None = None
    if HARD_BYTES in props and HARD_RATIO in props:
        problems.append(Problem(
            HARD_BYTES, f"set exactly one hard limit, not both {HARD_BYTES} and {HARD_RATIO}",
            f"{props[HARD_BYTES]} and {props[HARD_RATIO]}",
        ))
    elif HARD_BYTES not in props and HARD_RATIO not in props:
        problems.append(Problem(HARD_BYTES, f"a hard limit is required: set {HARD_BYTES} or {HARD_RATIO}"))
    elif hard_bytes is not None:
        hard = Limit("bytes", hard_bytes)
    elif hard_ratio is not None:
        hard = Limit("ratio", hard_ratio)
    soft: Limit | None = None
    if SOFT_BYTES in props and SOFT_RATIO in props:
        problems.append(Problem(
            SOFT_BYTES, f"set at most one soft limit, not both {SOFT_BYTES} and {SOFT_RATIO}",
            f"{props[SOFT_BYTES]} and {props[SOFT_RATIO]}",
        ))
    elif soft_bytes is not None:
        soft = Limit("bytes", soft_bytes)
    elif soft_ratio is not None:
        soft = Limit("ratio", soft_ratio)
    if hard is not None and soft is not None and soft.kind == hard.kind and soft.value <= hard.value:
        key = SOFT_BYTES if soft.kind == "bytes" else SOFT_RATIO
        problems.append(Problem(key, f"the soft limit must leave more space than the hard limit ({_num(hard)})",
                                _num(soft)))

    offline = props.get(OFFLINE_POLICY, "pin").strip()
    if offline not in OFFLINE_POLICIES:
        problems.append(Problem(OFFLINE_POLICY, f"must be one of {', '.join(OFFLINE_POLICIES)}", offline))

    fallback = get(FALLBACK, _double(0.0, 1.0))
    validity = get(VALIDITY, _duration)

    admin = {k[len(ADMIN_PREFIX):]: v for k, v in props.items() if k.startswith(ADMIN_PREFIX)}
    output_kafka = {k[len(OUTPUT_KAFKA_PREFIX):]: v for k, v in props.items() if k.startswith(OUTPUT_KAFKA_PREFIX)}
    if "bootstrap.servers" in admin:
        servers = [s.strip() for s in admin["bootstrap.servers"].split(",") if s.strip()]
        if not servers:
            problems.append(Problem(BOOTSTRAP, "must list at least one host:port", admin["bootstrap.servers"]))
        else:
            admin["bootstrap.servers"] = ",".join(servers)
    elif require_admin:
        problems.append(Problem(BOOTSTRAP, "required: the host:port list of the cluster to observe"))

    port = get(METRICS_PORT, _int(minimum=0, maximum=65535))
    output_topic = props.get(OUTPUT_TOPIC, DEFAULT_OUTPUT_TOPIC).strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", output_topic):
        problems.append(Problem(OUTPUT_TOPIC, "not a valid Kafka topic name (letters, digits, . _ -)", output_topic))

    warnings = _unknown_key_warnings(props)
    if problems:
        raise ConfigError(problems, warnings)
    assert hard is not None
    return Config(
        path=path,
        limits=Limits(hard, soft),
        check_interval=check_interval,
        validity=validity if validity is not None else dt.timedelta(minutes=5),
        fallback_factor=fallback if fallback is not None else 1.0,
        offline_policy=offline,
        produce=values[PRODUCE],
        fetch=values[FETCH],
        request=values[REQUEST],
        excluded_principals=tuple(principals),
        admin=admin,
        cluster_name=(props.get(CLUSTER_NAME) or "").strip() or None,
        output_topic=output_topic,
        output_kafka=output_kafka,
        journal_path=(props.get(JOURNAL_PATH) or "").strip() or None,
        checkpoint_path=(props.get(CHECKPOINT_PATH) or "").strip() or "./checkpoints",
        metrics_host=(props.get(METRICS_HOST) or "").strip() or "127.0.0.1",
        metrics_port=port if port is not None else 9404,
        warnings=tuple(warnings),
        raw=dict(props),
    )


def _unknown_key_warnings(props: Mapping[str, str]) -> list[str]:
    warnings = []
    for key in sorted(props):
        if not key.startswith((P, Q)) or key in KNOWN or key.startswith(PASS_THROUGH_PREFIXES):
            continue
        close = difflib.get_close_matches(key, KNOWN, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        warnings.append(f"warning: {key}: unknown property, ignored{hint}")
    return warnings


class _Invalid(ValueError):
    pass


def _double(minimum: float | None = None, maximum: float | None = None) -> Callable[[str], float]:
    def convert(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise _Invalid("must be a number") from None
        if math.isnan(value):
            raise _Invalid("must be a number")
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise _Invalid(f"must be between {minimum} and {maximum}")
        if minimum is not None and value < minimum:
            raise _Invalid(f"must be at least {minimum}")
        return value
    return convert


def _int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    def convert(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise _Invalid("must be a whole number") from None
        if minimum is not None and value < minimum:
            raise _Invalid(f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise _Invalid(f"must be at most {maximum}")
        return value
    return convert


def _long(minimum: int) -> Callable[[str], int]:
    int_convert = _int(minimum=minimum, maximum=2**63 - 1)

    def convert(raw: str) -> int:
        return int_convert(raw[:-1] if raw[-1:] in "lL" and raw[:-1].isdigit() else raw)
    return convert


def _duration(raw: str) -> dt.timedelta:
    try:
        value = isodate.parse_duration(raw)
    except (ValueError, isodate.ISO8601Error):
        raise _Invalid("must be an ISO-8601 duration such as PT30S or PT5M") from None
    if not isinstance(value, dt.timedelta):
        raise _Invalid("years and months have no fixed length; use days, hours, minutes or seconds")
    if value < dt.timedelta(0):
        raise _Invalid("must not be negative")
    return value


def _principals(raw: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in raw.split(";") if p.strip())
    bad = [p for p in names if not p.startswith("User:") or len(p) == len("User:")]
    if bad:
        raise _Invalid(f"each ';'-separated principal must be written User:<name>; fix {', '.join(bad)}")
    return names
