"""Candidate ways to apply a throttle factor of 0 through client quotas, as pure functions of the time since the
throttle began: each answers the quota writes (entity, key, value or None to delete) in force at that time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

Entity = tuple[tuple[str, str | None], ...]  # ((entity_type, name or None for <default>), ...)
Write = tuple[Entity, str, float | None]
PRODUCE = "producer_byte_rate"
REQUEST = "request_percentage"
DEFAULT_USER_AND_CLIENT: Entity = (("user", None), ("client-id", None))
DEFAULT_USER: Entity = (("user", None),)


@dataclass(frozen=True)
class Context:
    """What an enforcement path knows: the clients' quota entities, their baseline produce quota, the window."""

    client_ids: tuple[str, ...]
    baseline: float | None  # producer_byte_rate per client before the throttle; None = unlimited
    window_s: float = 11.0  # quota.window.num x quota.window.size.seconds (Kafka's defaults: 11 x 1 s)

    def entity(self, client_id: str) -> Entity:
        return (("client-id", client_id),)

    def baseline_writes(self) -> list[Write]:
        return [(self.entity(c), PRODUCE, self.baseline) for c in self.client_ids]


@dataclass(frozen=True)
class Policy:
    """A named candidate: `during(ctx, tau)` is the target `tau` seconds into the throttle, `after` the release."""

    name: str
    summary: str
    during: Callable[[Context, float], list[Write]]
    after: Callable[[Context], list[Write]]
    needs_baseline: bool = False


def _in_place(value: Callable[[Context, float], float]) -> Callable[[Context, float], list[Write]]:
    """Scale each client's own entity (the same quota window the client was using before the throttle)."""
    return lambda ctx, tau: [(ctx.entity(c), PRODUCE, value(ctx, tau)) for c in ctx.client_ids]


def ramp_value(ctx: Context, tau: float, floor: float, k: float = 1.5) -> float:
    """Linear from baseline/k to `floor` over one quota window: never below the windowed rate/k if the
    pre-throttle traffic was spread evenly over the window (throttle time <= (k - 1) x window)."""
    assert ctx.baseline is not None
    return float(int(max(floor, ctx.baseline * max(0.0, 1.0 - tau / ctx.window_s) / k)))  # Kafka: whole bytes/s


def policies(floor: float) -> list[Policy]:
    """The candidates measured by bench/throttle_recovery.py, with `floor` bytes/s where one is used."""
    restore = Context.baseline_writes
    return [
        Policy("strimzi-1Bps", "produce quota 1 B/s in place (today: Strimzi callback and enforce at factor 0)",
               _in_place(lambda ctx, tau: 1.0), restore),
        Policy(f"floor-{floor / 1024:.0f}KiB", f"produce quota {floor / 1024:.0f} KiB/s in place",
               _in_place(lambda ctx, tau: floor), restore),
        Policy("ramp", f"in place, linear from baseline/1.5 to {floor / 1024:.0f} KiB/s over one window",
               _in_place(lambda ctx, tau: ramp_value(ctx, tau, floor)), restore, needs_baseline=True),
        Policy("request-0.01%", "request_percentage 0.01 in place (throttle bounded by Kafka), produce unchanged",
               lambda ctx, tau: [(ctx.entity(c), REQUEST, 0.01) for c in ctx.client_ids],
               lambda ctx: [(ctx.entity(c), REQUEST, None) for c in ctx.client_ids]),
        Policy(f"fresh-{floor / 1024:.0f}KiB",
               f"produce quota {floor / 1024:.0f} KiB/s on user=<default>,client-id=<default>: a new quota window",
               lambda ctx, tau: [(DEFAULT_USER_AND_CLIENT, PRODUCE, floor)],
               lambda ctx: [(DEFAULT_USER_AND_CLIENT, PRODUCE, None)]),
        # All clients here are User:ANONYMOUS: one window shared by both, as the callback's broker-wide quota.
        Policy(f"fresh-shared-{floor / 1024:.0f}KiB",
               f"produce quota {floor / 1024:.0f} KiB/s on user=<default>: a new window shared by both clients",
               lambda ctx, tau: [(DEFAULT_USER, PRODUCE, floor)],
               lambda ctx: [(DEFAULT_USER, PRODUCE, None)]),
    ]
