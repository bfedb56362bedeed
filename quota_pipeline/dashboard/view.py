"""The pure view model: per-cluster facts (factor in force, why, since when, staleness), risk order, timelines."""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from quota_pipeline.reader.admission import honoured_until
from quota_pipeline.core.model import OFFLINE_FILLING, format_time
from quota_pipeline.core.properties import DEFAULT_MAX_CLOCK_SKEW
from quota_pipeline.dashboard import text
from quota_pipeline.dashboard.history import ClusterRecord, Refused, Unreadable
from quota_pipeline.dashboard.records import DecisionView, VolumeView
from quota_pipeline.reader.write_refusal import RefusalPolicy

STALE_INTERVALS = 2  # no decision for more than this many check intervals: say so
FIRST_TOPICS = 10  # refused topics named in a line; the page's list holds them all


@dataclass(frozen=True)
class StopView:
    """The stop in force: the refused topics (None: every topic) and why, the log dirs at or below the hard limit
    (`violations` counts them all; `dirs` those the record lists)."""

    topics: tuple[str, ...] | None
    dirs: tuple[VolumeView, ...]
    violations: int

    @property
    def headline(self) -> str:
        if self.topics is None:
            return "STOPPED: writes refused to every topic"
        return f"STOPPED: writes refused to {len(self.topics)} topic{'' if len(self.topics) == 1 else 's'}"

    def first_topics(self, n: int = FIRST_TOPICS) -> tuple[tuple[str, ...], int]:
        """The first `n` refused topics and how many more there are."""
        topics = self.topics or ()
        return topics[:n], max(0, len(topics) - n)


def stop_in_force(d: DecisionView | None, factor: float | None, basis: str) -> StopView | None:
    """What the brokers' StopAuthorizer refuses now (write_refusal.RefusalPolicy, the one rule), None when writes
    are not stopped; the dashboard does not know a broker's own quota.pipeline.stop.scope, so it shows the record's."""
    if factor is None:
        return None
    scope = RefusalPolicy().in_force(factor, basis, None if d is None else d.stop)
    if scope is None:
        return None
    dirs = () if d is None else at_limit(d)
    return StopView(None if scope.topics is None else tuple(sorted(scope.topics)), dirs,
                    0 if d is None else max(d.violations, len(dirs)))


def at_limit(d: DecisionView) -> tuple[VolumeView, ...]:
    """The listed log dirs at or below the hard limit: offline, or without headroom (v1: its worst, when one
    violates)."""
    if not d.volumes_listed:
        return d.volumes[:1] if d.violations > 0 else ()
    return tuple(v for v in d.volumes if v.offline or (v.headroom_bytes is not None and v.headroom_bytes <= 0))


@dataclass(frozen=True)
class FeedStatus:
    """How the follower stands with the decision topic, in words."""

    state: str  # connecting | unreachable | topic-missing | following
    message: str
    since: dt.datetime
    topic: str
    bootstrap: str
    caught_up: bool = False


@dataclass(frozen=True)
class ViewSettings:
    """What the view needs from the configuration."""

    check_interval: dt.timedelta
    fallback: float  # what brokers apply when no valid decision holds
    validity: dt.timedelta = dt.timedelta(minutes=5)  # with the skew: how long brokers honour a valid_until at most
    max_clock_skew: dt.timedelta = DEFAULT_MAX_CLOCK_SKEW

    @property
    def stale_after(self) -> dt.timedelta:
        return self.check_interval * STALE_INTERVALS


@dataclass(frozen=True)
class ClusterSummary:
    """One cluster as an operator reads it; `factor` is what its brokers apply now."""

    key: str
    state: str  # STOPPED | THROTTLED | OK | NO DECISION
    factor: float | None
    basis: str  # record | fallback | none
    reason: str
    latest: DecisionView | None
    age_seconds: float | None
    stale: bool
    throttled_since: dt.datetime | None
    since_approx: bool  # the run starts at the oldest record seen: it may have begun earlier
    eta_seconds: float | None
    unreadable: int
    last_error: str | None
    stop: StopView | None = None

    @property
    def flagged(self) -> bool:
        return self.stale or self.basis != "record"

    def risk(self) -> tuple[Any, ...]:
        """Factor ascending, then stale or fallback, then the smallest ETA, then the smallest minimum ratio."""
        ratio = self.latest.min_available_ratio if self.latest else None
        return (1.0 if self.factor is None else self.factor, 0 if self.flagged else 1,
                math.inf if self.eta_seconds is None else self.eta_seconds,
                math.inf if ratio is None else ratio, self.key)


def summarize(rec: ClusterRecord, now: dt.datetime, settings: ViewSettings) -> ClusterSummary:
    latest = rec.latest
    last_error = None if rec.last_error is None else f"{rec.last_error.error} {rec.last_error.where}".strip()
    if latest is None:
        reason = f"no readable decision: {rec.unreadable} record(s) could not be read"
        return ClusterSummary(rec.key, "NO DECISION", None, "none", reason, None, None, True, None, False, None,
                              rec.unreadable, last_error)
    factor, basis, held = in_force(latest, now, settings.fallback, settings)
    age = (now - latest.decided_at).total_seconds()
    since, approx = _since(latest, rec, factor)
    return ClusterSummary(
        key=rec.key, state="STOPPED" if factor == 0 else "THROTTLED" if factor < 1.0 else "OK", factor=factor,
        basis=basis,
        reason=f"{held}; the last decision said factor {text.factor(latest.throttle_factor)} ({_why(latest)})"
        if basis == "fallback" else _why(latest), latest=latest, age_seconds=age,
        stale=now - latest.decided_at > settings.stale_after, throttled_since=since, since_approx=approx,
        eta_seconds=eta(latest.volumes), unreadable=rec.unreadable, last_error=last_error,
        stop=stop_in_force(latest, factor, basis))


def in_force(latest: DecisionView, now: dt.datetime, fallback: float,
             settings: ViewSettings | None = None) -> tuple[float, str, str]:
    """What brokers apply (as reader/reader.py answers): the record while valid, else their fallback; a valid_until
    is honoured at most until observed_at + validity + skew, as brokers honour it."""
    if latest.source == "FALLBACK" or latest.valid_until is None:
        return fallback, "fallback", (f"the pipeline has no valid decision (last poll {latest.status}); "
                                      f"brokers apply the fallback {text.factor(fallback)}")
    until = _honoured(latest, settings)
    if now > until:
        beyond = "" if until == latest.valid_until else " (its valid_until is beyond observed_at + validity + skew)"
        return fallback, "fallback", (f"the last decision expired at {text.clock_time(until)}{beyond}; "
                                      f"brokers apply the fallback {text.factor(fallback)}")
    return latest.throttle_factor, "record", ""


def _honoured(latest: DecisionView, settings: ViewSettings | None) -> dt.datetime:
    assert latest.valid_until is not None
    return latest.valid_until if settings is None else \
        honoured_until(latest, settings.validity, settings.max_clock_skew) or latest.valid_until


def changes_after(s: ClusterSummary, settings: ViewSettings) -> dt.datetime | None:
    """The instant after which this summary changes with time alone (it goes stale, or its decision expires and
    brokers fall back); None when nothing but a new record changes it. Ages are left to the page, which
    computes them from decided_at, so that a summary can be kept until then."""
    d = s.latest
    if d is None:
        return None
    after = [] if s.stale else [d.decided_at + settings.stale_after]
    if s.basis == "record" and d.valid_until is not None:
        after.append(_honoured(d, settings))
    return min(after, default=None)


def _why(d: DecisionView) -> str:
    closest = d.volumes[0] if d.volumes else None
    where = "" if closest is None else f"broker {closest.broker_id} {closest.log_dir}: {volume_state(closest, d.limit)}"
    if d.violations > 0:
        head = f"{d.violations} log dir(s) at or below the hard limit"
    elif d.predictive is not None and d.throttle_factor < 1.0:
        head = f"predictive throttle: {text.predictive(d.predictive)}"
    elif d.throttle_factor < 1.0:
        head = "log dirs between the soft and the hard limit"
    else:
        head = "no log dir at the hard limit"
    retained = "" if d.source != "RETAINED" else f" (retained: last poll {d.status})"
    return f"{head}{'; closest ' + where if where else ''}{retained}"


def volume_state(v: VolumeView, limit: dict[str, Any]) -> str:
    if v.offline:
        if v.reason == OFFLINE_FILLING:
            return "offline after filling: its last readings reach the hard limit by now (counts as full)"
        return "offline (counts as full)"
    hard = limit.get("hard") if isinstance(limit.get("hard"), dict) else {}
    shown = text.limit_value(hard).removesuffix(" available")
    if hard.get("type") == "min.available.ratio":
        return f"{text.percent(v.available_ratio)} available, hard limit {shown}"
    return f"{text.size(v.available_bytes)} available, hard limit {shown}"


def _since(d: DecisionView, rec: ClusterRecord, factor: float) -> tuple[dt.datetime | None, bool]:
    """The record's throttled_since (v2), else the start of the timeline's run of factor < 1."""
    if factor >= 1.0:
        return None, False
    if d.throttled_since is not None:
        return d.throttled_since, False
    if rec.run_start is None:
        return None, False
    start = dt.datetime.fromtimestamp(rec.run_start, dt.timezone.utc)
    return start, rec.run_start == rec.first_t


def eta(volumes: tuple[VolumeView, ...]) -> float | None:
    known = [v.eta_seconds for v in volumes if v.eta_seconds is not None]
    return min(known) if known else None


def overview(records: list[ClusterRecord], now: dt.datetime, settings: ViewSettings) -> list[ClusterSummary]:
    """Every cluster's summary, riskiest first."""
    return sorted((summarize(r, now, settings) for r in records), key=ClusterSummary.risk)


def page_json(summaries: list[ClusterSummary], feed: FeedStatus, now: dt.datetime, settings: ViewSettings,
              unreadable: tuple[int, Unreadable | None] = (0, None),
              refused: tuple[int, Refused | None] = (0, None)) -> dict[str, Any]:
    """The page's overview: the feed, counts, unreadable and refused records, clusters in risk order."""
    return {**page_head(counts(summaries), feed, now, settings, unreadable, refused),
            "clusters": [row_json(s) for s in summaries]}


def page_head(cluster_counts: dict[str, int], feed: FeedStatus, now: dt.datetime, settings: ViewSettings,
              unreadable: tuple[int, Unreadable | None] = (0, None),
              refused: tuple[int, Refused | None] = (0, None)) -> dict[str, Any]:
    """Everything of the overview but the clusters: the feed, the counts, the last unreadable and refused record."""
    total, last = unreadable
    refused_total, last_refused = refused
    return {"now": now.timestamp(), "check_interval_seconds": settings.check_interval.total_seconds(),
            "stale_after_seconds": settings.stale_after.total_seconds(), "fallback": settings.fallback,
            "feed": feed_json(feed),
            "counts": {**cluster_counts, "unreadable_records": total, "refused_records": refused_total},
            "last_unreadable": None if last is None else {
                "key": last.key, "where": last.where, "error": last.error, "at": last.at.timestamp()},
            "last_refused": None if last_refused is None else {
                "key": last_refused.key, "where": last_refused.where, "reason": last_refused.reason,
                "at": last_refused.at.timestamp()}}


def row_json(s: ClusterSummary) -> dict[str, Any]:
    """One overview row: the summary with the closest volume only, without its age (the page computes it from
    decided_at, so a row holds until the cluster changes), and its risk order as JSON for the page to sort by."""
    row = summary_json(s, all_volumes=False, all_topics=False)
    del row["age_seconds"]
    factor, flagged, eta_, ratio, key = s.risk()
    row["risk"] = [factor, flagged, None if eta_ == math.inf else eta_, None if ratio == math.inf else ratio]
    return row


def counts(summaries: list[ClusterSummary]) -> dict[str, int]:
    return {"clusters": len(summaries), "stopped": sum(s.state == "STOPPED" for s in summaries),
            "throttled": sum(s.state == "THROTTLED" for s in summaries),
            "stale": sum(s.stale for s in summaries), "fallback": sum(s.basis == "fallback" for s in summaries)}


def summary_json(s: ClusterSummary, all_volumes: bool = True, all_topics: bool = True) -> dict[str, Any]:
    """The summary for the page; the overview lists only the closest volume (`closest`) and the first refused
    topics, the detail all of them."""
    d = s.latest
    base: dict[str, Any] = {
        "stop": None if s.stop is None else stop_json(s.stop, d.limit if d else {}, all_topics),
        "key": s.key, "state": s.state, "factor": s.factor, "factor_text": text.factor(s.factor), "basis": s.basis,
        "reason": s.reason, "age_seconds": s.age_seconds, "stale": s.stale, "eta_seconds": s.eta_seconds,
        "throttled_since": _epoch(s.throttled_since), "since_approx": s.since_approx,
        "unreadable": s.unreadable, "last_error": s.last_error,
    }
    if d is None:
        return base
    return {**base, "record_factor": d.throttle_factor, "source": d.source, "status": d.status,
            "schema_version": d.schema_version, "observed_at": _epoch(d.observed_at),
            "decided_at": _epoch(d.decided_at), "valid_until": _epoch(d.valid_until),
            "decided_at_text": format_time(d.decided_at), "min_available_ratio": d.min_available_ratio,
            "limit": d.limit, "limit_text": text.limits(d.limit), "violations": d.violations,
            "active_brokers": d.active_brokers, "missing_brokers": list(d.missing_brokers),
            "volumes_listed": d.volumes_listed, "note": d.note,
            "predictive": None if d.predictive is None else d.predictive.to_json(),
            "closest": _volume_json(d.volumes[0], d.limit) if d.volumes else None,
            **({"volumes": [_volume_json(v, d.limit) for v in d.volumes]} if all_volumes else {})}


def stop_json(stop: StopView, limit: dict[str, Any], all_topics: bool = True) -> dict[str, Any]:
    """The stop for the page: scope, headline, the refused topics (all, or the first with how many more), the dirs."""
    first, more = stop.first_topics()
    return {"scope": "cluster" if stop.topics is None else "topics", "headline": stop.headline,
            "count": None if stop.topics is None else len(stop.topics),
            "topics": list(stop.topics or ()) if all_topics else list(first), "more": 0 if all_topics else more,
            "violations": stop.violations,
            "dirs": [{"broker_id": v.broker_id, "log_dir": v.log_dir, "state": volume_state(v, limit)}
                     for v in stop.dirs]}


def _volume_json(v: VolumeView, limit: dict[str, Any]) -> dict[str, Any]:
    return {**v.to_json(), "state": volume_state(v, limit)}


def feed_json(feed: FeedStatus) -> dict[str, Any]:
    return {"state": feed.state, "message": feed.message, "since": _epoch(feed.since), "topic": feed.topic,
            "bootstrap": feed.bootstrap, "caught_up": feed.caught_up}


def timeline(rec: ClusterRecord) -> dict[str, Any]:
    """Column arrays for the charts: time, factor, minimum available ratio, and the ratio limit lines."""
    hard, soft = ratio_limits(rec.latest)
    n = len(rec.points)
    return {"t": rec.points.t, "factor": rec.points.factor, "min_ratio": rec.points.min_ratio,
            "hard": [hard] * n if hard is not None else None, "soft": [soft] * n if soft is not None else None}


def ratio_limits(d: DecisionView | None) -> tuple[float | None, float | None]:
    """The limits as available ratios: as configured, or for a bytes limit at the closest log dir's size."""
    if d is None:
        return None, None
    closest_total = next((v.total_bytes for v in d.volumes if v.total_bytes), None)

    def as_ratio(entry: Any) -> float | None:
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), (int, float)):
            return None
        if entry.get("type") == "min.available.ratio":
            return float(entry["value"])
        return None if closest_total is None else float(entry["value"]) / closest_total
    return as_ratio(d.limit.get("hard")), as_ratio(d.limit.get("soft"))


def _epoch(t: dt.datetime | None) -> float | None:
    return None if t is None else t.timestamp()
