"""Which decision records a reader takes (signed, not from ahead of its clock, not written again), and for how long.

The Java callback's DecisionRecord, DecisionSignature and DecisionHolder say the same.
"""
from __future__ import annotations

import datetime as dt
from typing import Protocol

import isodate

from quota_pipeline.core import signing
from quota_pipeline.core.config import MAX_CLOCK_SKEW
from quota_pipeline.core.model import format_time
from quota_pipeline.core.record import ThrottleDecision
from quota_pipeline.core.signing import SigningKey
from quota_pipeline.reader.log_text import printable


def refusal(decision: ThrottleDecision, now: dt.datetime, skew: dt.timedelta) -> str | None:
    """Why a reader whose clock reads `now` must not take `decision`, or None when it may: its observed_at or
    decided_at is further ahead of that clock than `skew` (quota.pipeline.reader.max.clock.skew). Only the pipeline
    may change the factor: a record from the future would otherwise outrank every genuine one, since the latest
    observed_at wins. The Java callback's DecisionRecord.refusal says the same."""
    latest = now + skew
    for field, at in (("observed_at", decision.observed_at), ("decided_at", decision.decided_at)):
        if at is not None and at > latest:
            ahead = int((at - now).total_seconds())
            return (f"{field} {format_time(at)} is {ahead} s ahead of this reader's clock ({format_time(now)}); "
                    f"{MAX_CLOCK_SKEW} allows {_iso(skew)}")
    return None


def signature_refusal(keys: tuple[SigningKey, ...], key: bytes | None, value: bytes,
                      signature: bytes | None) -> str | None:
    """Why a reader holding `keys` (quota.pipeline.signing.keys) must not take a record, or None when it may: no key
    is configured, or the record's signature header names one of them and its HMAC matches (core/signing.py). The
    Java callback's DecisionSignature.refusal says the same."""
    if not keys:
        return None
    if signature is None:
        return f"it carries no {signing.HEADER} header, and {signing.KEYS_PROPERTY} requires one"
    parts = signing.split(signature)
    if parts is None:
        return f"its {signing.HEADER} header is not <key id>:<64 hex digits>"
    key_id, digest = parts
    for k in keys:
        if k.key_id == key_id:
            if signing.valid(k, key, value, digest):
                return None
            return f"its signature does not match key {printable(key_id)}: not written by the pipeline, or altered"
    return (f"it is signed with key id {printable(key_id)}, which this reader does not hold (it holds "
            f"{', '.join(k.key_id for k in keys)})")


def replay_refusal(decision: ThrottleDecision, newest_read: dt.datetime | None) -> str | None:
    """Why a record read from the topic after one of the same cluster observed later must not be taken, or None: the
    pipeline writes a cluster's records in order, so it was written again (a replay, signed or not). Only a reader's
    own order counts: the Java callback restarting from its stored decision reads older records after it, and
    ignores those as older. DecisionHolder says the same."""
    if newest_read is None or decision.observed_at >= newest_read:
        return None
    return (f"observed_at {format_time(decision.observed_at)} is older than that of a record read before it "
            f"({format_time(newest_read)}): a record written again, since the pipeline writes a cluster's records "
            "in order")


class Dated(Protocol):
    """What honoured_until reads: a ThrottleDecision, or the dashboard's view of one."""

    @property
    def observed_at(self) -> dt.datetime: ...

    @property
    def valid_until(self) -> dt.datetime | None: ...


def honoured_until(decision: Dated, validity: dt.timedelta, skew: dt.timedelta) -> dt.datetime | None:
    """Until when a held record is honoured: its valid_until, but never beyond observed_at + the reader's own validity
    + skew, so that a record cannot outlive a stopped pipeline by more than a genuine one would. None without
    valid_until."""
    if decision.valid_until is None:
        return None
    try:
        limit = decision.observed_at + validity + skew
    except OverflowError:  # observed_at near year 9999: only a clock that far on takes such a record
        return decision.valid_until
    return min(decision.valid_until, limit)


def _iso(duration: dt.timedelta) -> str:
    return isodate.duration_isoformat(duration)
