"""Prometheus metrics of the streaming job, served by the driver (prometheus-client).

Names follow Prometheus conventions; README.md maps each to the Strimzi plugin metric it replaces.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import GaugeMetricFamily

from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.model import DecisionSource, PredictiveThrottle
from quota_pipeline.core.record import predictive_of
from quota_pipeline.core.record_time import parse_record_time
from quota_pipeline.streaming import packed

@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        r = self.registry
        c = ["cluster"]
        self.factor = Gauge("quota_pipeline_throttle_factor", "Current factor: 1 open, 0 < f < 1 throttled to "
                            "f, 0 stopped (writes refused)", c, registry=r)
        self.factor_source = Gauge("quota_pipeline_throttle_factor_source",
                                   "1 for the source of the current factor", c + ["source"], registry=r)
        self.last_observation = Gauge("quota_pipeline_last_observation_timestamp_seconds",
                                      "observed_at of the last OBSERVATION decision", c, registry=r)
        self.fallbacks = Counter("quota_pipeline_fallback_applied_total",
                                 "Transitions to the fallback factor", c, registry=r)
        self.violating_volumes = Gauge("quota_pipeline_limit_violating_volumes",
                                       "Log dirs in force at or below the hard limit", c, registry=r)
        self.violations = Counter("quota_pipeline_limit_violations_total",
                                  "Log dir readings at or below the hard limit, summed over snapshots", c, registry=r)
        self.active_brokers = Gauge("quota_pipeline_active_brokers", "Active brokers in the last snapshot", c,
                                    registry=r)
        self.active_log_dirs = Gauge("quota_pipeline_active_log_dirs", "Log dir readings in force", c, registry=r)
        self.cached_volumes = Gauge("quota_pipeline_cached_volumes", "Entries in the volume cache", c, registry=r)
        self.evictions = Counter("quota_pipeline_cache_evictions_total", "Cached readings that expired", c,
                                 registry=r)
        v = c + ["broker_id", "log_dir"]
        self.available = Gauge("quota_pipeline_volume_available_bytes", "Available bytes of a log dir", v, registry=r)
        self.total = Gauge("quota_pipeline_volume_total_bytes", "Total bytes of a log dir", v, registry=r)
        self.ratio = Gauge("quota_pipeline_volume_available_ratio", "Available / total of a log dir", v, registry=r)
        self.snapshots = Counter("quota_pipeline_snapshots_total", "Snapshots by status", c + ["status"], registry=r)
        self.journal_bytes = Gauge("quota_pipeline_journal_bytes", "Bytes of the cluster's snapshot journal", c,
                                   registry=r)
        self.journal_files = Gauge("quota_pipeline_journal_files", "Files of the cluster's snapshot journal", c,
                                   registry=r)
        self.batch_seconds = Histogram("quota_pipeline_micro_batch_duration_seconds", "Micro-batch duration",
                                       registry=r, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
        self.eta = Gauge("quota_pipeline_volume_eta_seconds", "Seconds until a log dir among the closest to the hard "
                         "limit reaches it at its fill rate; absent when not filling", v, registry=r)
        self.predictive_eta = Gauge(
            "quota_pipeline_predictive_eta_seconds", "While a predictive throttle is in force (the record's "
            "predictive): its log dir's time to the hard limit at the fill rate of its lower envelope; absent "
            "otherwise", v, registry=r)
        self.predictive_horizon = Gauge(
            "quota_pipeline_predictive_horizon_seconds", "While a predictive throttle is in force: the horizon "
            "(storage.per.volume.eta.horizon) it is measured against; the factor it gives is ETA / horizon", v,
            registry=r)
        self.check_interval = Gauge("quota_pipeline_check_interval_seconds", "Configured check interval", c,
                                    registry=r)
        self.last_decision = Gauge("quota_pipeline_last_decision_timestamp_seconds",
                                   "decided_at of the last record published", c, registry=r)
        self.validity = Gauge("quota_pipeline_validity_seconds", "Configured throttle.factor.validity.duration", c,
                              registry=r)
        self.start_seconds = Gauge(LAST_START, LAST_START_HELP, registry=r)
        ProcessCollector(registry=r)  # process_start_time_seconds: a job that never published is stale too
        r.register(_SinceAcknowledged(self))
        self.intervals: dict[str, float] = {}  # check interval per config_name, set by the job
        self.validities: dict[str, float] = {}  # validity per config_name, set by the job
        self.started = self.clock.now().timestamp()
        self.acknowledged_at: dict[str, float] = {}  # cluster key -> wall time of its last acknowledged record
        self.ever_acknowledged: set[str] = set()  # keys whose acknowledged_at is an acknowledgement, not the start
        self._volumes: dict[str, set[tuple[str, str]]] = {}
        self._etas: dict[str, set[tuple[str, str]]] = {}
        self._predictive: dict[str, tuple[str, str]] = {}  # cluster key -> labels of its predictive series
        self._source: dict[str, str] = {}

    def serve(self, host: str, port: int) -> Any:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server

    def record(self, rows: Iterable[Any]) -> None:
        """Update from the decision rows of one micro-batch (processor.OUTPUT_SCHEMA)."""
        for row in rows:
            key = row.key
            self.factor.labels(key).set(row.throttle_factor)
            for s in DecisionSource:
                self.factor_source.labels(key, s.value).set(1 if row.decision_source == s.value else 0)
            if row.decision_source == DecisionSource.OBSERVATION:
                self.last_observation.labels(key).set(row.observed_at.timestamp())
            if row.decision_source == DecisionSource.FALLBACK and self._source.get(key) != DecisionSource.FALLBACK:
                self.fallbacks.labels(key).inc()  # transitions into fallback, as Strimzi counts them
            self._source[key] = row.decision_source
            self.violating_volumes.labels(key).set(row.violations)
            self.violations.labels(key).inc(row.violations)
            self.active_brokers.labels(key).set(row.active_brokers)
            self.active_log_dirs.labels(key).set(row.active_log_dirs)
            self.cached_volumes.labels(key).set(row.cached_volumes)
            self.evictions.labels(key).inc(row.evicted)
            self.snapshots.labels(key, row.status).inc()
            volumes = listed(getattr(row, "volumes", None))
            if row.status == "SUCCESS" or volumes:  # a partial view: the dirs of the brokers that answered
                self._set_volumes(key, volumes, every=row.status == "SUCCESS")
            if getattr(row, "config_name", None) in self.intervals:
                self.check_interval.labels(key).set(self.intervals[row.config_name])
            if getattr(row, "config_name", None) in self.validities:
                self.validity.labels(key).set(self.validities[row.config_name])
            record = json.loads(row.value) if getattr(row, "value", None) else {}
            if record.get("decided_at"):
                self.last_decision.labels(key).set(parse_record_time(record["decided_at"]).timestamp())
            self._set_etas(key, record.get("closest_volumes") or [])
            if record:
                self._set_predictive(key, predictive_of(record.get("predictive")))

    def awaiting(self, keys: Iterable[str]) -> None:
        """Decisions of these clusters are being published: one never acknowledged counts from the job's start."""
        for key in keys:
            self.acknowledged_at.setdefault(key, self.started)

    def acknowledged(self, key: str) -> None:
        """The output cluster acknowledged a decision of `key` (the publisher's delivery callback)."""
        self.acknowledged_at[key] = self.clock.now().timestamp()
        self.ever_acknowledged.add(key)

    def record_journal(self, report: dict) -> None:
        """Update from one journal maintenance report (journal/maintenance.py PassReport.to_json)."""
        usage = report.get("usage")
        if usage:
            self.journal_bytes.labels(report["cluster"]).set(usage["bytes"])
            self.journal_files.labels(report["cluster"]).set(usage["files"])

    def _set_etas(self, key: str, closest: list[dict]) -> None:
        seen = set()
        for v in closest:
            if v.get("eta_seconds") is not None:
                labels = (str(v["broker_id"]), v["log_dir"])
                seen.add(labels)
                self.eta.labels(key, *labels).set(v["eta_seconds"])
        for gone in self._etas.get(key, set()) - seen:  # no longer filling or no longer among the closest
            _remove(self.eta, (key, *gone))
        self._etas[key] = seen

    def _set_predictive(self, key: str, cause: PredictiveThrottle | None) -> None:
        labels = None if cause is None else (str(cause.broker_id), cause.log_dir)
        gone = self._predictive.pop(key, None)
        if gone is not None and gone != labels:
            for g in (self.predictive_eta, self.predictive_horizon):
                _remove(g, (key, *gone))
        if cause is None or labels is None:
            return
        self.predictive_eta.labels(key, *labels).set(cause.eta_seconds)
        self.predictive_horizon.labels(key, *labels).set(cause.horizon_seconds)
        self._predictive[key] = labels

    def _set_volumes(self, key: str, volumes: list[tuple], every: bool = True) -> None:
        """The volume gauges of `volumes`; with `every` (a SUCCESS lists every dir) the series of dirs it does not
        list go, a partial view's leaves them (their brokers did not answer)."""
        seen = set()
        for broker, log_dir, total, available in volumes:
            labels = (key, str(broker), log_dir)
            seen.add(labels[1:])
            if total is None:  # offline: no reading; the series goes until it reports bytes again
                for g in (self.available, self.total, self.ratio):
                    _remove(g, labels)
                continue
            self.available.labels(*labels).set(available)
            self.total.labels(*labels).set(total)
            self.ratio.labels(*labels).set(0.0 if total == 0 else available / total)
        if not every:
            self._volumes[key] = self._volumes.get(key, set()) | seen
            return
        for gone in self._volumes.get(key, set()) - seen:
            for g in (self.available, self.total, self.ratio):
                _remove(g, (key, *gone))
        self._volumes[key] = seen


def listed(value: bytes | None) -> list[tuple]:
    """(broker id, log dir, total bytes, available bytes) of each volume of a packed snapshot (streaming/packed.py)."""
    if not value:
        return []
    v = packed.unpack(bytes(value)).select(["broker_id", "log_dir", "total_bytes", "available_bytes"]).to_pydict()
    return list(zip(v["broker_id"], v["log_dir"], v["total_bytes"], v["available_bytes"]))


LAST_START = "quota_pipeline_last_start_duration_seconds"
LAST_START_HELP = ("Seconds from the job's process start to its first published decision, of this start once it has "
                   "published, else the last one kept beside the checkpoint; the validity should cover twice it")
SINCE_ACKNOWLEDGED = "quota_pipeline_last_acknowledged_decision_age_seconds"
SINCE_ACKNOWLEDGED_HELP = ("Seconds since the output cluster last acknowledged a decision of the cluster (since the "
                           "job's start before the first); grows while a delivery stalls")
# The name before metric names ended in their unit; served as well for one release, then removed.
DEPRECATED_SINCE_ACKNOWLEDGED = "quota_pipeline_seconds_since_last_acknowledged_decision"


ACKNOWLEDGED = "quota_pipeline_last_acknowledged_decision_timestamp_seconds"
ACKNOWLEDGED_HELP = "When the output cluster last acknowledged a decision record"


class _SinceAcknowledged:
    """Computed at each scrape, so that a stall shows while it lasts (the publisher is blocked meanwhile). The age
    and the acknowledgement's time come from one reading of acknowledged_at: an acknowledgement arriving during a
    scrape cannot pair a new age with the previous time."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list:
        return [GaugeMetricFamily(name, help_, labels=["cluster"])
                for name, help_ in (*self._names(), (ACKNOWLEDGED, ACKNOWLEDGED_HELP))]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        now = self.metrics.clock.now().timestamp()
        ages = sorted(dict(self.metrics.acknowledged_at).items())
        for name, help_ in self._names():
            family = GaugeMetricFamily(name, help_, labels=["cluster"])
            for key, at in ages:
                family.add_metric([key], max(0.0, now - at))
            yield family
        acknowledged = GaugeMetricFamily(ACKNOWLEDGED, ACKNOWLEDGED_HELP, labels=["cluster"])
        for key, at in ages:
            if key in self.metrics.ever_acknowledged:
                acknowledged.add_metric([key], at)
        yield acknowledged

    @staticmethod
    def _names() -> tuple[tuple[str, str], ...]:
        return ((SINCE_ACKNOWLEDGED, SINCE_ACKNOWLEDGED_HELP),
                (DEPRECATED_SINCE_ACKNOWLEDGED, f"Deprecated: use {SINCE_ACKNOWLEDGED}. {SINCE_ACKNOWLEDGED_HELP}"))


def _remove(gauge: Gauge, labels: tuple) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:
        pass
