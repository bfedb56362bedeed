"""What the dashboard's tests and benchmark serve: decision records (schema_version 2, as the lead's record adds them)
and a follower stub that reports a status without Kafka."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterator

from quota_pipeline.core.model import format_time
from quota_pipeline.dashboard import view

GIB = 1024 ** 3
RATIO_LIMIT = {"hard": {"type": "min.available.ratio", "value": 0.05},
               "soft": {"type": "min.available.ratio", "value": 0.10}}


def volume(broker: int, log_dir: str, ratio: float | None, total: int = 100 * GIB, fill_rate: float | None = None,
           partitions: tuple[tuple[str, int, int], ...] = (), hard_ratio: float = 0.05) -> dict[str, Any]:
    """A closest_volumes entry; ratio None is an offline log dir; the ETA follows from the fill rate."""
    available = None if ratio is None else int(total * ratio)
    headroom = None if available is None else available - int(total * hard_ratio)
    eta = None if fill_rate is None or headroom is None else max(0.0, headroom / fill_rate)
    return {"broker_id": broker, "log_dir": log_dir, "available_bytes": available,
            "total_bytes": None if ratio is None else total, "available_ratio": ratio, "headroom_bytes": headroom,
            "fill_rate_bytes_per_second": fill_rate, "eta_seconds": eta,
            "top_partitions": [{"topic": t, "partition": p, "size_bytes": s} for t, p, s in partitions]}


def record(cluster: str, observed_at: dt.datetime, factor: float, volumes: list[dict[str, Any]] | None = None, *,
           source: str = "OBSERVATION", status: str = "SUCCESS", validity: dt.timedelta = dt.timedelta(minutes=5),
           throttled_since: dt.datetime | None = None, missing: tuple[int, ...] = (),
           version: int = 2) -> dict[str, Any]:
    volumes = volumes if volumes is not None else [volume(1, "/data/0", 0.5)]
    first = volumes[0] if volumes else None
    ratios = [v["available_ratio"] for v in volumes if v["available_ratio"] is not None]
    out = {
        "schema_version": version, "cluster_id": cluster, "observed_at": format_time(observed_at),
        "decided_at": format_time(observed_at + dt.timedelta(milliseconds=300)), "throttle_factor": factor,
        "source": source, "status": status,
        "valid_until": None if source == "FALLBACK" else format_time(observed_at + validity),
        "active_brokers": 3 - len(missing), "active_log_dirs": 6, "missing_brokers": list(missing),
        "limit": RATIO_LIMIT, "violations": sum(1 for v in volumes if (v["available_ratio"] or 0) <= 0.05),
        "worst_volume": None if first is None else {k: first[k] for k in (
            "broker_id", "log_dir", "available_bytes", "available_ratio")},
        "min_available_ratio": min(ratios) if ratios else None,
    }
    if version >= 2:
        out["throttled_since"] = format_time(throttled_since)
        out["closest_volumes"] = volumes
    return out


def encode(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec).encode()


def filling_story(cluster: str, start: dt.datetime, count: int, interval: dt.timedelta,
                  broker: int = 3, log_dir: str = "/data/1") -> Iterator[dict[str, Any]]:
    """`count` decisions of a disk filling from 30% free to 1%: graded between 10% and 5%, then stopped."""
    since = None
    for i in range(count):
        t = start + i * interval
        ratio = max(0.01, 0.30 - 0.29 * i / max(1, count - 1))
        factor = 1.0 if ratio > 0.10 else max(0.0, (ratio - 0.05) / 0.05)
        since = (since or t) if factor < 1.0 else None
        vol = volume(broker, log_dir, ratio, fill_rate=50 * 1024 ** 2,
                     partitions=(("orders", 3, 40 * GIB), ("clicks", 0, 12 * GIB)))
        yield record(cluster, t, round(factor, 4), [vol, volume(1, "/data/0", 0.6)], throttled_since=since)


def steady_story(cluster: str, start: dt.datetime, count: int, interval: dt.timedelta,
                 ratio: float = 0.6) -> Iterator[dict[str, Any]]:
    for i in range(count):
        yield record(cluster, start + i * interval, 1.0, [volume(2, "/data/0", ratio), volume(1, "/data/1", 0.7)])


class StubFollower:
    """The follower's face for the server: a status, no Kafka."""

    bootstrap, topic = "127.0.0.1:1", "__quota_throttle_factors"
    since = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)

    def __init__(self, state: str = "following", message: str = "following") -> None:
        self.state, self.message = state, message

    def status(self) -> view.FeedStatus:
        return view.FeedStatus(self.state, self.message, self.since, self.topic, self.bootstrap, caught_up=True)

    def close(self) -> None:
        pass
