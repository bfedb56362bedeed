"""What `enforce` admits at its setting: the lines it states at start, and warnings where the total has no bound."""
from __future__ import annotations

from quota_pipeline.core.stop import REFERENCE_REQUEST_BYTES, StopLimit

CLIENT_COUNTS = (1, 8, 100, 300)
LIBRDKAFKA_REQUEST_BYTES = 1_000_000.0  # librdkafka's message.max.bytes: its largest produce request


def throttle_mute_seconds(stop: StopLimit, floor: float) -> float:
    """The mute of a 1 MiB request on the enforcer's new window at `floor`: measured over (num - 1) x size."""
    return max(0.0, REFERENCE_REQUEST_BYTES / floor - stop.measured_seconds)


def per_client(stop: StopLimit, floor: float, request_bytes: float = LIBRDKAFKA_REQUEST_BYTES) -> float:
    """Bytes/s a broker admits from one client at factor 0: one request of that size per mute, or the floor itself
    when the requests are small enough to be muted less than a quota window (Java's 16 KiB batches)."""
    mute = request_bytes / floor - stop.measured_seconds
    return request_bytes / mute if mute >= stop.window_seconds else floor


def describe(stop: StopLimit, floor: float, produce_base: float | None,
             clients: tuple[int, ...] = CLIENT_COUNTS) -> list[str]:
    """What a stop means for this enforcer, as it states at start."""
    mute = throttle_mute_seconds(stop, floor)
    each = per_client(stop, floor)
    totals = ", ".join(f"{n}: {_rate(n * each)}" for n in clients)
    return [f"at factor 0 each client gets {floor:.0f} bytes/s per broker on a new quota window: a 1 MiB request is "
            f"muted {mute:.0f} s, so a producer is back within about {mute:.0f} s of the release",
            f"a broker admits about N x {_rate(each)} at factor 0 from N librdkafka clients ({totals}); Java clients "
            f"are held to {floor:.0f} bytes/s each; a longer quota.pipeline.throttle.max.mute admits less"]


def warnings(produce_base: float | None) -> list[str]:
    """Where the total a broker admits grows without bound: client quotas are per client, never shared."""
    out = ["between factors 0 and 1 each client keeps its own quota x factor (floored at the stop's quota): "
           "the total a broker admits grows with the number of clients; the broker-side callback shares one quota"]
    if produce_base is None:
        out.append("client.quota.callback.static.produce is not set: clients without a produce quota stay "
                   "unlimited at every factor above 0; set it to bound them")
    return out


def _rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 1e6:.2f} MB/s" if bytes_per_second >= 1e6 else f"{bytes_per_second / 1e3:.1f} kB/s"
