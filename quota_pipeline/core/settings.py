"""The part of the configuration the decision depends on, shared by streaming and replay."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from quota_pipeline.core.config import Config, Limits
from quota_pipeline.core.exemption import StopExemption


@dataclass(frozen=True)
class Settings:
    """The part of the configuration the decision depends on."""

    limits: Limits
    validity: dt.timedelta
    fallback_factor: float = 1.0
    offline_policy: str = "pin"
    fenced_policy: str = "pin"
    closest_volumes: int = 5
    eta_horizon: dt.timedelta = dt.timedelta(0)  # PT0S: the predictive policy is off
    eta_window: dt.timedelta = dt.timedelta(hours=1)
    # What a stop never refuses on this cluster: the record's stop lists only the topics it refuses.
    exemption: StopExemption = StopExemption()

    @classmethod
    def of(cls, conf: Config) -> "Settings":
        return cls(conf.limits, conf.validity, conf.fallback_factor, conf.offline_policy, conf.fenced_policy,
                   conf.closest_volumes, conf.eta_horizon, conf.eta_window, StopExemption.of(conf))
