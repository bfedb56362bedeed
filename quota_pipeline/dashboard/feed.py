"""The topic follower, its bounded history and the view settings together: what the page and `tail` read."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable

from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.config import Config
from quota_pipeline.dashboard import view
from quota_pipeline.dashboard.follower import TopicFollower, consumer_settings
from quota_pipeline.dashboard.history import DEFAULT_MAX_POINTS, DEFAULT_WINDOW, History, Refused

Tap = Callable[[bytes | None, bytes | None, str, bool], Any]  # key, value, where, readable
OnRefused = Callable[[Refused], Any]  # a record refused as brokers refuse it (dated ahead of the clock)


@dataclass
class Feed:
    """`Feed.of(config).start()`; `overview()` and `page()` for the views, `detail(key)` for one cluster's timeline."""

    history: History
    follower: TopicFollower
    settings: view.ViewSettings
    clock: Clock = SYSTEM

    @classmethod
    def of(cls, config: Config, window: dt.timedelta = DEFAULT_WINDOW, max_points: int = DEFAULT_MAX_POINTS,
           clock: Clock = SYSTEM, tap: Tap | None = None, on_refused: OnRefused | None = None,
           **follower_options: Any) -> "Feed":
        history = History(window, max_points, clock, config.max_clock_skew, signing_keys=config.signing_keys)

        def on_record(key: bytes | None, value: bytes | None, where: str,
                      headers: list[tuple[str, Any]] | None = None) -> None:
            refused = history.refused_total
            readable = history.apply(key, value, where, headers)
            if history.refused_total != refused and history.last_refused is not None:
                if on_refused is not None:
                    on_refused(history.last_refused)
            elif tap is not None:
                tap(key, value, where, readable)

        follower = TopicFollower(consumer_settings(config), config.output_topic, on_record, clock=clock,
                                 **follower_options)
        return cls(history, follower, view.ViewSettings(config.check_interval, config.fallback_factor, config.validity,
                                                    config.max_clock_skew), clock)

    def start(self) -> "Feed":
        self.follower.start()
        return self

    def close(self) -> None:
        self.follower.close()

    def overview(self) -> list[view.ClusterSummary]:
        return view.overview(self.history.records(), self.clock.now(), self.settings)

    def page(self) -> dict[str, Any]:
        now = self.clock.now()
        summaries = view.overview(self.history.records(), now, self.settings)
        return view.page_json(summaries, self.follower.status(), now, self.settings,
                              (self.history.unreadable_total, self.history.last_unreadable),
                              (self.history.refused_total, self.history.last_refused))

    def detail(self, key: str) -> dict[str, Any] | None:
        """One cluster's summary and its timeline; None for a cluster the topic does not hold."""
        records = self.history.records(with_points=True, only=key)
        if not records:
            return None
        rec = records[0]
        summary = view.summarize(rec, self.clock.now(), self.settings)
        return {"now": self.clock.now().timestamp(), "cluster": view.summary_json(summary),
                "timeline": view.timeline(rec)}
