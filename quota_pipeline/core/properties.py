"""Every configuration property as one table of specs (name, type, default, validator, doc), like Strimzi's ConfigDef.

Parsing (config.py), `validate`'s effective view, the "did you mean" suggestions and docs/configuration.md's
tables (`python -m quota_pipeline.core.properties`) all read this table. Rules that join several properties
(one hard limit, the two interval forms, soft vs hard) stay explicit in config.py.
"""
from __future__ import annotations

import datetime as dt
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

import isodate

from quota_pipeline.core.secrets import MASK, redact, secret_name

P = "client.quota.callback.static."
Q = "quota.pipeline."
ADMIN_PREFIX = P + "kafka.admin."
OUTPUT_KAFKA_PREFIX = Q + "output.kafka."
PASS_THROUGH_PREFIXES = (ADMIN_PREFIX, OUTPUT_KAFKA_PREFIX)

OFFLINE_POLICIES = ("pin", "last-known", "violate")
FENCED_POLICIES = ("pin", "expire")
DEFAULT_OUTPUT_TOPIC = "__quota_throttle_factors"
# The pipeline's producer's client id. It exempts nothing: a client chooses its own id, so any client could take it.
PUBLISHER_CLIENT_ID = "quota-pipeline-publisher"
STOP_SCOPES = ("topics", "cluster")
DEFAULT_STOP_DELEGATE = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The longest a producer stays muted after the release: a stop then admits about N x 1 MiB / 60 s per broker from N
# librdkafka clients, in the range measured for Strimzi's plugin (bench/RESULTS.md, "Against Strimzi's quota plugin").
DEFAULT_MAX_MUTE = dt.timedelta(seconds=60)
# How far a decision record's observed_at or decided_at may be ahead of a reader's clock (docs/broker-side.md).
DEFAULT_MAX_CLOCK_SKEW = dt.timedelta(seconds=30)
# The window of the predictive policy's fill rate (core/trend.py, envelope_rate): six buckets of 10 min, each at
# least the retention check interval's Kafka default (5 min), so that a bucket holds a deletion (issue 21).
DEFAULT_ETA_WINDOW = dt.timedelta(hours=1)


def is_secret(key: str) -> bool:
    """A key whose value is never shown: one Kafka types as a password (its own ConfigDefs), or one that looks like
    a secret by its name (a setting Kafka does not know, or a plugin's: secrets.secret_name)."""
    from quota_pipeline.core.client_names import is_password

    return secret_name(key) or is_password(key)


def shown(key: str, value: Any) -> str:
    """A value as it may be printed or logged: secrets masked by the key's name, and by the value's look (a
    password= inside a misspelled JAAS key, a URI's userinfo, a PEM private key under any name: core/secrets.py).
    An empty value stays empty: it holds no secret, and says the setting is unset."""
    text = str(value)
    return MASK if text and is_secret(key) else redact(text)


class Invalid(ValueError):
    """A property value that fails its spec; the message says what a valid value looks like."""


Convert = Callable[[str], Any]


@dataclass(frozen=True)
class Property:
    """One row of the table: `convert` parses and validates a stripped value or raises Invalid."""

    name: str
    type: str
    default: Any
    convert: Convert
    doc: str
    shown_default: str = ""
    strimzi: bool = False

    @property
    def default_text(self) -> str:
        return self.shown_default or ("" if self.default is None else str(self.default))


def double(minimum: float | None = None, maximum: float | None = None) -> Convert:
    def convert(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise Invalid("must be a number") from None
        if math.isnan(value):
            raise Invalid("must be a number")
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise Invalid(f"must be between {minimum} and {maximum}")
        if minimum is not None and value < minimum:
            raise Invalid(f"must be at least {minimum}")
        return value
    return convert


def integer(minimum: int | None = None, maximum: int | None = None) -> Convert:
    def convert(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise Invalid("must be a whole number") from None
        if minimum is not None and value < minimum:
            raise Invalid(f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise Invalid(f"must be at most {maximum}")
        return value
    return convert


def long(minimum: int) -> Convert:
    as_int = integer(minimum=minimum, maximum=2**63 - 1)
    return lambda raw: as_int(raw[:-1] if raw[-1:] in "lL" and raw[:-1].isdigit() else raw)


def duration(raw: str) -> dt.timedelta:
    try:
        value = isodate.parse_duration(raw)
    except (ValueError, isodate.ISO8601Error):
        raise Invalid("must be an ISO-8601 duration such as PT30S or PT5M") from None
    if not isinstance(value, dt.timedelta):
        raise Invalid("years and months have no fixed length; use days, hours, minutes or seconds")
    if value < dt.timedelta(0):
        raise Invalid("must not be negative")
    return value


def positive_duration(raw: str) -> dt.timedelta:
    value = duration(raw)
    if value <= dt.timedelta(0):
        raise Invalid("must be longer than PT0S")
    return value


def principals(raw: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in raw.split(";") if p.strip())
    bad = [p for p in names if not p.startswith("User:") or len(p) == len("User:")]
    if bad:
        raise Invalid(f"each ';'-separated principal must be written User:<name>; fix {', '.join(bad)}")
    return names


def names(raw: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in raw.split(",") if n.strip())


def choice(*allowed: str) -> Convert:
    def convert(raw: str) -> str:
        if raw not in allowed:
            raise Invalid(f"must be one of {', '.join(allowed)}")
        return raw
    return convert


def topic(raw: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", raw):
        raise Invalid("not a valid Kafka topic name (letters, digits, . _ -)")
    return raw


def text(raw: str) -> str | None:
    return raw or None


def boolean(raw: str) -> bool:
    """`true` or `false`, as Kafka's ConfigDef reads a boolean (any case)."""
    if raw.lower() not in ("true", "false"):
        raise Invalid("must be true or false")
    return raw.lower() == "true"


def signing_keys(raw: str) -> tuple[Any, ...]:
    """quota.pipeline.signing.keys: `<id>:<secret>` entries (core/signing.py); blank: none."""
    from quota_pipeline.core.signing import parse_keys

    try:
        return parse_keys(raw)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def safe_name(raw: str) -> str | None:
    """A name that becomes a directory (core/names.py's pattern), or unset."""
    from quota_pipeline.core import names as path_names

    why = path_names.problem(raw) if raw else None
    if why is not None:
        raise Invalid(f"{why} (the journal and enforce's baseline are kept under this name)")
    return raw or None


_PT = dt.timedelta
TABLE: tuple[Property, ...] = (
    Property(P + "produce", "double", None, double(0.0), "static produce quota in bytes/s (broker side); "
             "only produce is scaled by the factor", "unlimited", strimzi=True),
    Property(P + "fetch", "double", None, double(0.0), "static fetch quota in bytes/s (broker side)",
             "unlimited", strimzi=True),
    Property(P + "request", "double", None, double(0.0), "static request quota in % (broker side)",
             "unlimited", strimzi=True),
    Property(P + "excluded.principal.name.list", "list", (), principals,
             "`;`-separated `User:name` entries never throttled, nor refused by StopAuthorizer (enforce's DENY WRITE "
             "ACLs spare only `super.users`); a name without `User:` is an error",
             "empty", strimzi=True),
    Property(P + "storage.check-interval", "int", None, integer(minimum=0),
             "seconds between polls; 0 disables, and `run` refuses to start", "60", strimzi=True),
    Property(P + "storage.check.interval", "duration", None, duration,
             "the same as ISO-8601; setting both forms is an error", "PT1M", strimzi=True),
    Property(P + "storage.per.volume.limit.min.available.bytes", "long", None, long(minimum=0),
             "hard limit: stop production when a log dir's available bytes <= this", strimzi=True),
    Property(P + "storage.per.volume.limit.min.available.ratio", "double", None, double(0.0, 1.0),
             "hard limit on available / total (0..1); exactly one hard limit is required", strimzi=True),
    Property(P + "storage.per.volume.soft.limit.min.available.bytes", "long", None, long(minimum=0),
             "graded throttling: the factor falls linearly from 1 at the soft limit to 0 at the hard one", "none"),
    Property(P + "storage.per.volume.soft.limit.min.available.ratio", "double", None, double(0.0, 1.0),
             "the soft limit as available / total", "none"),
    Property(P + "storage.offline.log.dir.policy", "choice", "pin", choice(*OFFLINE_POLICIES),
             "an offline log dir (KAFKA_STORAGE_ERROR): `pin` keeps its last reading while it stays offline "
             "(none, one from before its broker's stop, or one filling fast enough to have reached the hard limit "
             "by now: it violates); `last-known` "
             "lets that reading expire (Strimzi); `violate` makes it violate"),
    Property(P + "throttle.factor.fallback", "double", 1.0, double(0.0, 1.0),
             "factor when no valid decision can be made (0..1)", strimzi=True),
    Property(P + "throttle.factor.validity.duration", "duration", _PT(minutes=5), duration,
             "how long a decision and a cached log dir reading stay valid", "PT5M", strimzi=True),
    Property(ADMIN_PREFIX + "bootstrap.servers", "list", None, text,
             "the observed cluster; other `kafka.admin.*` settings (security.protocol, ssl.*, sasl.*) go to "
             "the admin client", "required", strimzi=True),
    Property(P + "kafka.clientIdPrefix", "string", None, text, "accepted for Strimzi compatibility; unused",
             strimzi=True),
    Property(P + "storage.fenced.broker.policy", "choice", "pin", choice(*FENCED_POLICIES),
             "a registered but fenced broker (stopped, restarting): `pin` keeps its cached readings in force "
             "while it stays registered (a full broker that stops cannot release the stop or the throttle); "
             "`expire` lets them expire (Strimzi)"),
    Property(P + "storage.per.volume.eta.horizon", "duration", _PT(0), duration,
             "predictive throttling: a log dir whose time to the hard limit (from its lowest reading in the ETA "
             "window, at that window's fill rate; a reading above every reading of the window, a clean-up, restarts "
             "that history, so freeing space lifts the throttle at once) is below this gets the factor ETA / horizon, "
             "0 at the limit; PT0S turns it off", "PT0S"),
    Property(P + "storage.per.volume.eta.window", "duration", DEFAULT_ETA_WINDOW, positive_duration,
             "the ETA's fill rate: the least-squares slope of the least available bytes in each sixth of this "
             "window (with a horizon set, a sixth must be at least the check interval), so that retention's "
             "sawtooth does not look like a fill", "PT1H"),
    Property(Q + "cluster.name", "string", None, safe_name, "the record key on the output topic, and the name of the "
             "cluster's journal directory: letters, digits, `.`, `_`, `-`, not starting with `.`", "cluster id"),
    Property(Q + "excluded.client.ids", "list", None, names,
             "deprecated and ignored: no client is exempt by its client id (a client chooses its own, so any client "
             "could name itself the pipeline's); exempt the pipeline's principal with `P+excluded.principal.name.list`",
             "none"),
    Property(Q + "stop.scope", "choice", STOP_SCOPES[0], choice(*STOP_SCOPES),
             "(broker, `enforce`) what a stop refuses at factor 0: `topics`, the writes to the topics the decision "
             "record names (every topic when it names none, on the fallback and before the first decision); "
             "`cluster`, every write. Never Kafka's internal topics, the decision topic on the cluster that holds it "
             "(`quota.pipeline.output.topic.on.this.cluster`) or excluded principals"),
    Property(Q + "stop.authorizer.delegate", "string", None, text,
             "(broker) the authorizer `io.quotapipeline.callback.StopAuthorizer` asks about every action it does not "
             "refuse, with its ACLs and settings; `none`: the broker had no authorizer (all else allowed, no ACLs)",
             DEFAULT_STOP_DELEGATE),
    Property(Q + "throttle.max.mute", "duration", DEFAULT_MAX_MUTE, duration,
             "the longest a producer stays muted after the release (at least PT32S with Kafka's default quota "
             "window, `quota.window.num` x `quota.window.size.seconds`); each client's produce limit at a stop follows from "
             "it, and its mute lengthens up to it while the stop lasts (`validate` prints what a stop admits)",
             "PT60S"),
    Property(Q + "produce.quota.floor", "double", None, double(1.0),
             "deprecated: a fixed per-client produce limit in bytes/s at a stop, instead of the one derived from "
             "`quota.pipeline.throttle.max.mute`", "derived"),
    Property(Q + "reader.max.clock.skew", "duration", DEFAULT_MAX_CLOCK_SKEW, duration,
             "how far a decision record's `observed_at` or `decided_at` may be ahead of a reader's clock (the "
             "callback, the reader, `enforce`, the dashboard); a record further ahead is refused and counted, and a "
             "`valid_until` is honoured at most until `observed_at` + the validity + this", "PT30S"),
    Property(Q + "state.dir", "string", None, text,
             "(callback) " + 'where a broker keeps the last decision it applied (`<cluster>.decision.json`, written atomically): a restart starts from it under the usual rules (refused if dated ahead or unsigned where signatures are required, the fallback once `observed_at` + validity + skew has passed) instead of 1.0 while the decision topic cannot be read yet; only a regular file owned by the broker\'s user is read, never through a link; empty: memory only', "the first of the broker's `log.dirs`"),
    Property(Q + "signing.keys", "list", (), signing_keys,
             "`<id>:<secret>` entries (a secret of at least 32 characters), `,`-separated, at most two: the pipeline "
             "signs each decision record with the first (HMAC-SHA-256 over its key and value, header "
             "`quota-pipeline-signature`), and every reader (the callback, StopAuthorizer, the reader, `enforce`, "
             "`tail`, the dashboard) refuses a record not signed with one of them; give the pipeline and every reader "
             "the same keys (a rotation: docs/security.md). Never shown", "none: records are not signed"),
    Property(Q + "enforce.stop", "choice", "refuse", choice("refuse", "throttle"),
             "what `enforce` does at factor 0 on a stock cluster: `refuse` writes DENY WRITE ACL bindings for "
             "`User:*` on the stop's topics (needs an authorizer; only `super.users` escape), `throttle` refuses "
             "nothing and lowers client quotas to the quota throttle's floor (`--stop` overrides it)"),
    Property(Q + "journal.path", "string", None, text,
             "durable snapshot journal (local path or s3://bucket/prefix; other URIs are refused)", "`<checkpoint>/journal`"),
    Property(Q + "journal.period", "duration", _PT(hours=1), duration,
             "closed periods of this length are compacted to one Parquet file per cluster", "PT1H"),
    Property(Q + "journal.retention", "duration", _PT(days=30), duration,
             "whole periods older than this are deleted; PT0S keeps everything", "P30D"),
    Property(Q + "record.closest.volumes", "int", 5, integer(minimum=0, maximum=100),
             "how many log dirs closest to the hard limit each decision record lists"),
    Property(Q + "checkpoint.path", "string", "./checkpoints", text, "Spark checkpoint (offsets and decision state)"),
    Property(Q + "run.give.up.after", "duration", _PT(minutes=15), duration,
             "(`run`, from the first CONFIG) how long the job keeps trying while no micro-batch publishes (a failing "
             "query restarted with backoff; resuming from its checkpoint, an output cluster that does not answer): "
             "then `run` logs one line and exits with code 4, so that a supervisor (Kubernetes, systemd, the Spark "
             "operator) restarts it or alerts; PT0S tries forever",
             "PT15M"),
    Property(Q + "metrics.host", "string", "127.0.0.1", text, "Prometheus endpoint of the driver"),
    Property(Q + "metrics.port", "int", 9404, integer(minimum=0, maximum=65535), "Prometheus endpoint port"),
    Property(Q + "output.topic", "string", DEFAULT_OUTPUT_TOPIC, topic, "compacted topic, created if missing"),
    Property(Q + "output.topic.on.this.cluster", "boolean", None, boolean,
             "(broker, `enforce`, the record's stop) the decision topic lives on the cluster these properties observe "
             "(a broker's: its own), so its writes are never refused by a stop (the record that lifts the stop must "
             "get through); `false`: a topic of that name here is anyone's topic and a stop refuses it like any other. "
             "Set `true` when `quota.pipeline.output.kafka.bootstrap.servers` names another listener of this cluster",
             "`true` without `quota.pipeline.output.kafka.bootstrap.servers`, else `false`"),
)
BY_NAME = {p.name: p for p in TABLE}
INDEX = {p.name: i for i, p in enumerate(TABLE)}
KNOWN = tuple(BY_NAME)


# Prefixes whose keys are passed to a Kafka client as they are (documented beside the table).
PREFIX_DOCS = ((OUTPUT_KAFKA_PREFIX + "*", "the admin settings",
                "client settings for the output cluster (the publisher, readers): Java client property names; "
                "without `bootstrap.servers` they are laid over the admin settings (the decision topic on the "
                "observed cluster, its clients tuned)"),)


def markdown(strimzi: bool) -> str:
    """The docs/configuration.md table of the Strimzi properties (strimzi=True) or of this project's extensions."""
    rows = ["| property | default | meaning |", "|---|---|---|"]
    for p in TABLE:
        if p.strimzi == strimzi:
            name = p.name.replace(P, "P+", 1) if p.name.startswith(P) else p.name
            rows.append(f"| `{name}` | {p.default_text} | {p.doc} |")
    if not strimzi:
        rows += [f"| `{name}` | {default} | {doc} |" for name, default, doc in PREFIX_DOCS]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(f"{markdown(True)}\n\n{markdown(False)}\n")
