"""Safety checker of a fault campaign: pure functions over a recorded history, knowing nothing of the pipeline's code.

    python3 -m verify.checker HISTORY_DIR      # exit 1 when a violation is found

It imports no quota_pipeline module. Its inputs are its own observations: the free bytes of every tmpfs log dir
(statvfs, sampled by the campaign), the decision topic read with a raw consumer and parsed here as plain JSON, the
producers' delivery counts, the faults the campaign injected, the job's log and Kafka's own log lines for a log
dir it took offline (`offline.jsonl`: a dir at 0 bytes that no failed write took offline stays online). Its model of
a broker is the design's reader, written again here: the record with the latest `observed_at` wins, a record dated
further ahead than the skew allowance is refused, and past `valid_until` the broker applies its fallback.

Properties (each violation is one line with its times and the faults in force):
- unsafe release: while a log dir is at or below the hard limit, the factor in force at the brokers is above the
  policy's (0) once its broker has been up for the detection allowance D (the check interval + the p99 delay from
  the start of an observation's interval to its decision's arrival, measured in this run), or, when the job skipped
  intervals (Spark still busy with a batch when the next was due), once its first observation that started with the
  dir low and its broker up has had the p99 delay to arrive: a late observation is the job's speed (its spacing is
  reported), a first observation after the crossing that does not stop is its logic;
- release: once no log dir is low and no fault is in force, factor 1 within R = 2 x interval + the p99 delay;
- admitted: while factor 0 has been in force for the grace G, the producers' acknowledged bytes stay within
  1.25 x brokers x clients x the stop's per-client limit (bytes/s) plus one request per client and broker; where
  writes are refused (`enforcer` "refuse": the stop authorizer, every tmpfs dir holding a replica of the producers'
  topic) the limit is 0, so nothing but the requests in flight when the stop arrived may be acknowledged (a stop that
  ends by expiry, the output cluster down, is judged until the first broker falls back: each holds the newest record
  that arrived while it ran, and may have missed the one before its stop or the outage, one interval sooner);
- gaps: no two of the job's decisions further apart than the validity while it runs (a gap overlapping a fault
  that stops publication - the job killed, the output broker stopped, a broker of the decision topic failing - is
  explained, not a violation);
- replay: `quota-pipeline replay` of the job's journal gives every published decision again, field for field;
- job log: no exception or ERROR line outside the faults in force (Kafka's KAFKA-20746 lines are Kafka's; what the
  job logs after the campaign's end, while the campaign stops it, is the stop's), and the job never exits by itself.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from bench.stats import percentile

NODE_FAULTS = ("kill9", "stop", "pause", "pause_short", "controller_restart", "fill_enospc")
RESTARTING_FAULTS = ("kill9", "stop", "controller_restart", "fill_enospc")  # the node's process starts anew
# Faults during which decisions may legitimately stop reaching the topic (or the brokers).
PUBLICATION_FAULTS = ("job_kill", "output_stop")
# When the decision topic lives on the observed cluster, a broker fault can stall publication too (an ISR wait).
OBSERVED_PUBLICATION_FAULTS = ("kill9", "stop", "pause", "controller_restart", "fill_enospc", "fill_hard")
KAFKA_OWN_LINES = ("Encountered metadata publishing fault",)  # KAFKA-20746, logged by Kafka's clients
LOG_MARGIN_S = 5.0  # a fault's consequences may be logged this long after it ends


# ---------------------------------------------------------------- the history


@dataclass(frozen=True)
class Meta:
    """The campaign's settings, as the checker needs them."""

    interval_s: float
    validity_s: float
    hard_limit_bytes: int
    fallback: float
    stop_limit_bytes_per_s: float  # the largest per-client produce limit of a stop, by the throttle design
    producers: int
    brokers: int
    request_bytes: int  # the most a client sends in one produce request (its batch size)
    skew_s: float = 30.0
    grace_s: float = 3.0
    output_on_observed: bool = False
    seed: int | None = None
    start: float = 0.0
    end: float = 0.0
    enforcer: str = "callback"  # what applies the decisions: the brokers' callback ("refuse": with the stop
    # authorizer) or `quota-pipeline enforce`


@dataclass(frozen=True)
class DiskSample:
    t: float
    node: int
    log_dir: str
    available: int


@dataclass(frozen=True)
class Published:
    """One record read from the decision topic: arrival (wall s), partition, offset, key, raw value."""

    arrived: float
    partition: int
    offset: int
    key: str | None
    value: str | None


@dataclass(frozen=True)
class Decision:
    arrived: float
    observed_at: float
    factor: float
    source: str
    valid_until: float | None
    status: str
    raw: dict


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str  # "node3", "job", "output", "topic"
    start: float
    end: float
    detail: dict = field(default_factory=dict)

    def covers(self, a: float, b: float, margin: float = 0.0, before: float | None = None) -> bool:
        """In force at some time in [a, b], widened by `margin` after its end (and `before` its start, default
        the same margin)."""
        return self.start - (margin if before is None else before) <= b and a <= self.end + margin

    @property
    def node(self) -> int | None:
        return int(self.target[4:]) if self.target.startswith("node") else None


@dataclass(frozen=True)
class ProducerSample:
    t: float
    client: str
    acked: int
    failed: int


@dataclass(frozen=True)
class JobRun:
    start: float
    end: float | None
    exit_code: int | None
    cause: str  # "campaign" (stopped at the end), "fault" (killed by job_kill), "exited" (by itself)


@dataclass(frozen=True)
class History:
    meta: Meta
    disks: Sequence[DiskSample]
    published: Sequence[Published]
    faults: Sequence[Fault]
    producers: Sequence[ProducerSample]
    job_runs: Sequence[JobRun]
    job_log: Sequence[tuple[float, str]]
    replayed: Sequence[dict] | None = None  # `quota-pipeline replay` output, when the campaign ran it
    # Kafka's own word that it took a log dir offline, (time, node, log dir) from the brokers' logs; None in a
    # history recorded before the campaign kept it (then a dir at 0 bytes is taken for offline).
    offline: Sequence[tuple[float, int, str]] | None = None


@dataclass(frozen=True)
class Violation:
    prop: str
    start: float
    end: float
    what: str
    faults: tuple[str, ...] = ()
    explained: bool = False


@dataclass(frozen=True)
class Report:
    violations: list[Violation]
    explained: list[Violation]
    decisions: int
    forged: int
    faults_by_kind: dict[str, int]
    detection_allowance_s: float
    release_allowance_s: float
    p99_delay_s: float
    p99_spacing_s: float  # between consecutive observations the job published: the interval it actually held
    detection_delays: list[float]
    release_delays: list[float]
    admit_bound_bytes_per_s: float


# ---------------------------------------------------------------- parsing


def parse_time(text: str) -> float:
    """RFC 3339 (with Z) to epoch seconds."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def forged_offsets(faults: Iterable[Fault]) -> set[tuple[int, int]]:
    return {(p, o) for f in faults if f.kind.startswith("forge") for p, o in f.detail.get("offsets", [])}


def decisions_of(published: Iterable[Published], cluster: str | None, forged: set[tuple[int, int]]
                 ) -> tuple[list[Decision], list[Violation]]:
    """The job's decisions for `cluster` (any key when None) in arrival order, and a violation per record that is
    neither a decision nor one the campaign forged."""
    out: list[Decision] = []
    bad: list[Violation] = []
    for p in sorted(published, key=lambda r: (r.arrived, r.partition, r.offset)):
        if (p.partition, p.offset) in forged or (cluster is not None and p.key != cluster) or p.value is None:
            continue
        try:
            raw = json.loads(p.value)
            d = Decision(p.arrived, parse_time(raw["observed_at"]), float(raw["throttle_factor"]), raw["source"],
                         parse_time(raw["valid_until"]) if raw.get("valid_until") else None, raw["status"], raw)
        except (ValueError, KeyError, TypeError) as exc:
            bad.append(Violation("record", p.arrived, p.arrived,
                                 f"partition {p.partition} offset {p.offset} is not a decision ({exc}) and the "
                                 f"campaign did not forge it"))
            continue
        out.append(d)
    return out, bad


# ---------------------------------------------------------------- the brokers' view


def in_force(decisions: Sequence[Decision], t: float, fallback: float, skew_s: float) -> float:
    """The factor a reader applies at `t` given the decisions that had arrived by then (the design's reader)."""
    best: Decision | None = None
    for d in decisions:
        if d.arrived > t:
            break
        if d.observed_at > d.arrived + skew_s:
            continue  # dated ahead of the reader's clock: refused
        if best is None or d.observed_at >= best.observed_at:
            best = d
    if best is None:
        return 1.0  # before the first record: 1.0 for one validity (the campaign starts before any fill)
    if best.source == "FALLBACK" or (best.valid_until is not None and t > best.valid_until):
        return fallback
    return best.factor


def factor_changes(decisions: Sequence[Decision], meta: Meta, until: float) -> list[tuple[float, float]]:
    """(time, factor in force) at every instant it may change: arrivals and expiries."""
    times = {d.arrived for d in decisions} | {d.valid_until for d in decisions if d.valid_until is not None}
    times = sorted(t for t in times if t <= until)
    out: list[tuple[float, float]] = []
    for t in times:
        f = in_force(decisions, t + 1e-6, meta.fallback, meta.skew_s)
        if not out or out[-1][1] != f:
            out.append((t, f))
    return out


def factor_at(changes: Sequence[tuple[float, float]], t: float) -> float:
    f = 1.0
    for when, value in changes:
        if when > t:
            break
        f = value
    return f


# ---------------------------------------------------------------- disks and nodes


def low_intervals(disks: Sequence[DiskSample], hard: int, end: float, faults: Iterable[Fault] | None = None,
                  offline: Sequence[tuple[float, int, str]] | None = None) -> list[tuple[int, str, float, float]]:
    """(node, log dir, from, to) while the log dir's available bytes were at or below `hard` (by the samples). Given
    the faults, a dir that Kafka took offline (at ENOSPC) is unusable until its broker restarts (the end of the next
    restarting fault on its node), freed or not: it counts as low until then, as the default offline policy (`pin`)
    holds its last reading. Which dirs went offline is Kafka's word (`offline`, from the brokers' logs); without it
    (an older history) a dir that touched 0 bytes is taken for offline, which Kafka does not always do: a dir filled
    to 0 while no write of the broker's failed there stays online."""
    faults = None if faults is None else list(faults)
    out = []
    by_dir: dict[tuple[int, str], list[DiskSample]] = {}
    for s in sorted(disks, key=lambda s: s.t):
        by_dir.setdefault((s.node, s.log_dir), []).append(s)
    for (node, log_dir), samples in sorted(by_dir.items()):
        spans = []
        since = back = None  # back: when a dir that ran out of space is usable again (its node's restart)
        for s in samples:
            if s.available <= hard and since is None:
                since = s.t
            if s.available <= 0 and since is not None and back is None and faults is not None and offline is None:
                back = restarted(faults, node, s.t, end)
            if s.available > hard and since is not None and (back is None or s.t >= back):
                spans.append((since, s.t))
                since = back = None
        if since is not None:
            spans.append((since, end))
        if faults is not None and offline is not None:
            spans += [(t, restarted(faults, node, t, end, offline=True)) for t, n, d in offline
                      if n == node and os.path.normpath(d) == os.path.normpath(log_dir)]
        out += [(node, log_dir, a, b) for a, b in _merged(spans)]
    return out


def _merged(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of `spans`, as disjoint spans in time order."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def restarted(faults: Iterable[Fault], node: int, after: float, end: float, offline: bool = False) -> float:
    """When `node` was next back from a restart (kill -9, a stop, a restart after ENOSPC) that ended after `after`.
    With `offline` (`after` is Kafka's line taking a dir offline), a kill -9, stop or controller restart under way
    at `after` does not count: its node was already down, so the line came from the process it started, and only a
    later restart brings the dir back. A fill to ENOSPC restarts its node at its end, after Kafka's line."""
    return min((f.end for f in faults if f.node == node and f.kind in RESTARTING_FAULTS and f.end > after
                and not (offline and f.kind != "fill_enospc" and f.start <= after)), default=end)


def down_intervals(faults: Iterable[Fault], node: int) -> list[tuple[float, float]]:
    """When `node` could not answer the job: killed, stopped, paused or restarting (fault start to end)."""
    return sorted((f.start, f.end) for f in faults if f.node == node and f.kind in NODE_FAULTS
                  and f.kind != "fill_enospc")


def up_time_reached(since: float, until: float, down: Sequence[tuple[float, float]], needed: float) -> float | None:
    """The instant in [since, until] by which the node has been up for `needed` seconds, or None."""
    t, left = since, needed
    for a, b in down:
        if b <= t:
            continue
        if a > t:
            run = min(a, until) - t
            if run >= left:
                return t + left
            left -= max(0.0, run)
        t = max(t, b)
        if t >= until:
            return None
    return t + left if t + left <= until else None


def faults_at(faults: Iterable[Fault], a: float, b: float, margin: float = 0.0) -> tuple[str, ...]:
    return tuple(f"{f.kind}@{f.target}" for f in faults if f.covers(a, b, margin))


def publication_faults(meta: Meta) -> tuple[str, ...]:
    return PUBLICATION_FAULTS + (OBSERVED_PUBLICATION_FAULTS if meta.output_on_observed else ())


def explaining(faults: Iterable[Fault], meta: Meta, a: float, b: float) -> tuple[str, ...]:
    """The faults in [a, b] that stop decisions from reaching the brokers: from their start until one validity
    after their end (the recovery); a fault that starts after the span explains nothing of it."""
    kinds = publication_faults(meta)
    return tuple(f"{f.kind}@{f.target}" for f in faults
                 if f.kind in kinds and f.covers(a, b, meta.validity_s, before=0.0))


# ---------------------------------------------------------------- the properties


def interval_start(t: float, interval_s: float) -> float:
    """The start of the check interval `t` falls in: the job observes once per interval, intervals counted from the
    Unix epoch (as Spark's processing-time trigger fires them)."""
    return math.floor(t / interval_s) * interval_s


def publication_delays(decisions: Sequence[Decision], faults: Sequence[Fault], meta: Meta,
                       runs: Sequence[JobRun] = ()) -> list[float]:
    """From the start of the observation's interval to the decision's arrival, for decisions no publication fault
    held back; a run's first decision is left out (its observation waited in the journal while Spark started).
    Measured from the interval's start, not from `observed_at`: a poll that starts late in its interval (a micro-batch
    still busy with the one before) is part of the job's delay. The seed 11 enforce run polled up to 1.9 s into its
    2-s interval, and a dir that crossed the limit just after one poll was published 3.3 s later, beyond an allowance
    of the interval plus the p99 delay from `observed_at` (3.2 s)."""
    kinds = publication_faults(meta)
    firsts = {min((d.arrived for d in decisions if d.arrived >= r.start), default=None) for r in runs}
    return [d.arrived - interval_start(d.observed_at, meta.interval_s) for d in decisions if d.arrived not in firsts
            and not any(f.kind in kinds and f.covers(d.observed_at, d.arrived) for f in faults)]


def check_unsafe_release(h: History, decisions: Sequence[Decision], detection: float,
                         low: Sequence[tuple[int, str, float, float]]) -> tuple[list[Violation], list[float]]:
    """Factor above 0 in force while a log dir is low (`low`, low_intervals with the faults and Kafka's offline
    lines), once its broker was up for `detection` seconds."""
    meta = h.meta
    changes = factor_changes(decisions, meta, meta.end)
    out: list[Violation] = []
    delays: list[float] = []
    for _, _, since, until in low_intervals(h.disks, meta.hard_limit_bytes, meta.end):  # as the disks show it
        zero = next((t for t, f in changes if since <= t < until and f == 0.0), None)
        if zero is None and factor_at(changes, since) == 0.0:
            zero = since
        if zero is not None:
            delays.append(zero - since)
    observed = sorted(d.observed_at for d in decisions)
    delay = detection - meta.interval_s
    for node, log_dir, since, until in low:
        down = down_intervals(h.faults, node)
        deadline = up_time_reached(since, until, down, detection)
        if deadline is None:
            continue  # too short, or its broker never up long enough: nobody could see it
        seen_from = up_time_reached(since, until, down, 0.0)
        first = next((t for t in observed if seen_from is not None and t >= seen_from), None)
        if first is not None:  # a job that skipped intervals is held to its first observation after the crossing
            deadline = max(deadline, interval_start(first, meta.interval_s) + delay)
            if deadline >= until:
                continue
        # Offending spans: factor > 0 in force within [deadline, until).
        points = [deadline] + [t for t, _ in changes if deadline < t < until]
        spans = []
        for i, t in enumerate(points):
            nxt = points[i + 1] if i + 1 < len(points) else until
            if factor_at(changes, t) > 0.0:
                if spans and abs(spans[-1][1] - t) < 1e-9:
                    spans[-1] = (spans[-1][0], nxt)
                else:
                    spans.append((t, nxt))
        for a, b in spans:
            why = explaining(h.faults, meta, a, b)
            out.append(Violation(
                "unsafe-release", a, b,
                f"node {node} {log_dir} at or below the hard limit since {fmt(since)} (broker up {detection:.1f} s "
                f"by {fmt(deadline)}), yet factor {factor_at(changes, a)} in force",
                faults_at(h.faults, a, b), explained=bool(why)))
    return out, delays


def check_release(h: History, decisions: Sequence[Decision], bound: float,
                  low: Sequence[tuple[int, str, float, float]]) -> tuple[list[Violation], list[float]]:
    """Factor 1 within `bound` of every calm start (no low log dir in `low`, no fault) that followed a factor
    below 1; a job that skipped intervals within the p99 delay of its second observation that started calm (as
    `bound` allows two intervals)."""
    meta = h.meta
    changes = factor_changes(decisions, meta, meta.end)
    observed = sorted(d.observed_at for d in decisions)
    delay = bound - 2 * meta.interval_s
    busy = [(since, until) for _, _, since, until in low]
    busy += [(f.start, f.end) for f in h.faults if not f.kind.startswith("forge")]
    calm_starts = sorted({b for _, b in busy if b < meta.end})
    out: list[Violation] = []
    delays: list[float] = []
    for a in calm_starts:
        if any(s <= a < e for s, e in busy):
            continue
        calm_end = min([s for s, _ in busy if s > a] + [meta.end])
        if factor_at(changes, a) == 1.0:
            continue
        one = next((t for t, f in changes if a < t < calm_end and f == 1.0), None)
        if one is not None:
            delays.append(one - a)
        calm_obs = [t for t in observed if t >= a][:2]
        allowed = max(bound, interval_start(calm_obs[1], meta.interval_s) + delay - a) if len(calm_obs) == 2 else bound
        if calm_end - a < allowed:
            continue  # the calm did not last long enough to judge
        if one is None or one - a > allowed:
            out.append(Violation("release", a, a + allowed,
                                 f"calm since {fmt(a)} (no log dir low, no fault) but factor "
                                 f"{factor_at(changes, a + allowed)} still in force {allowed:.1f} s later"
                                 + ("" if one is None else f" (1.0 after {one - a:.1f} s)"),
                                 faults_at(h.faults, a - bound, a)))
    return out, delays


def acked_at(samples: Sequence[ProducerSample], t: float) -> float:
    """A producer's acknowledged bytes at `t`, interpolated between its samples."""
    prev = None
    for s in samples:
        if s.t >= t:
            if prev is None:
                return float(s.acked)
            span = s.t - prev.t
            return prev.acked + (s.acked - prev.acked) * ((t - prev.t) / span if span > 0 else 1.0)
        prev = s
    return float(prev.acked) if prev else 0.0


# The tolerance on what a stop admits ("no more than 1.25 x N x S / M"): Kafka measures a client's rate over
# sampled windows and appends a request before it throttles, so a client held to a limit runs somewhat above it.
ADMIT_SLACK = 1.25


def admit_bound(meta: Meta) -> float:
    return ADMIT_SLACK * meta.brokers * meta.producers * meta.stop_limit_bytes_per_s


def first_expiry(h: History, decisions: Sequence[Decision], expiry: float) -> float:
    """When the first broker falls back in a stop that ends by expiry at `expiry` (no decision arrived then: the
    output cluster was down). A broker holds the newest record that arrived while it ran: one stopped or killed
    during the stop restarts with the record it applied last (its saved decision), which expires sooner, and its
    clients' backlog goes through at once. One check interval earlier still: a broker may have missed the record
    that arrived just before it went down, or just before the outage."""
    held = []
    for node in range(1, h.meta.brokers + 1):
        down = down_intervals(h.faults, node)
        read = [d for d in decisions if d.arrived <= expiry and d.valid_until is not None
                and d.observed_at <= d.arrived + h.meta.skew_s and not any(s <= d.arrived <= e for s, e in down)]
        if read:
            held.append(max(read, key=lambda d: d.observed_at).valid_until)
    return min(held + [expiry]) - h.meta.interval_s


def check_admitted(h: History, decisions: Sequence[Decision]) -> list[Violation]:
    """Acknowledged bytes while factor 0 has been in force for the grace, against the design's bound."""
    meta = h.meta
    changes = factor_changes(decisions, meta, meta.end) + [(meta.end, -1.0)]
    by_client: dict[str, list[ProducerSample]] = {}
    for s in sorted(h.producers, key=lambda s: s.t):
        by_client.setdefault(s.client, []).append(s)
    arrivals = {d.arrived for d in decisions}
    out = []
    for (t, f), (nxt, _) in zip(changes, changes[1:]):
        a, b = t + meta.grace_s, nxt if nxt in arrivals or nxt >= meta.end else first_expiry(h, decisions, nxt)
        if f != 0.0 or b - a < 2.0:
            continue
        admitted = sum(acked_at(s, b) - acked_at(s, a) for s in by_client.values())
        allowed = admit_bound(meta) * (b - a) + meta.brokers * len(by_client) * meta.request_bytes
        if admitted > allowed:
            out.append(Violation("admitted", a, b,
                                 f"{admitted / (b - a):.0f} B/s acknowledged at factor 0 over {b - a:.1f} s; the "
                                 f"bound is {allowed / (b - a):.0f} B/s", faults_at(h.faults, a, b)))
    return out


def check_gaps(h: History, decisions: Sequence[Decision]) -> list[Violation]:
    """Consecutive decisions (and a run's last one and its end) further apart than the validity."""
    meta = h.meta
    out = []
    for run in h.job_runs:
        end = run.end if run.end is not None else meta.end
        times = sorted(d.arrived for d in decisions if run.start <= d.arrived <= end)
        for a, b in zip(times, times[1:] + [end]):
            if b - a > meta.validity_s:
                why = explaining(h.faults, meta, a, b)
                out.append(Violation("gap", a, b, f"no decision for {b - a:.1f} s (validity {meta.validity_s:.0f} s)",
                                     faults_at(h.faults, a, b), explained=bool(why)))
    return out


def check_replay(h: History, decisions: Sequence[Decision]) -> list[Violation]:
    """Every published decision appears in the replay with the same factor, source, validity and status."""
    if h.replayed is None:
        return []
    fields = ("throttle_factor", "source", "valid_until", "status")
    replayed = {r["observed_at"]: r for r in h.replayed}
    out = []
    for d in decisions:
        key = d.raw["observed_at"]
        r = replayed.get(key)
        if r is None:
            out.append(Violation("replay", d.arrived, d.arrived, f"published decision of {key} is not in the replay"))
        elif any(r.get(k) != d.raw.get(k) for k in fields):
            diff = {k: (d.raw.get(k), r.get(k)) for k in fields if r.get(k) != d.raw.get(k)}
            out.append(Violation("replay", d.arrived, d.arrived, f"decision of {key}: published vs replayed {diff}"))
    return out


ERROR_LINE = re.compile(r"Traceback|Exception|\bERROR\b")


def check_job(h: History) -> list[Violation]:
    """Exceptions in the job's log outside the faults (with a margin), and runs that ended by themselves."""
    out = []
    for t, line in h.job_log:
        if t > h.meta.end:
            break  # the campaign is stopping the job: what it logs then (an InterruptedException) is the stop's
        if not ERROR_LINE.search(line) or any(k in line for k in KAFKA_OWN_LINES):
            continue
        why = faults_at(h.faults, t, t, LOG_MARGIN_S)
        out.append(Violation("job-log", t, t, line.strip()[:200], why, explained=bool(why)))
    for run in h.job_runs:
        if run.cause in ("exited", "enforcer exited"):
            who = "enforce" if run.cause == "enforcer exited" else "the job"
            out.append(Violation("job-exit", run.end or h.meta.end, run.end or h.meta.end,
                                 f"{who} exited by itself with code {run.exit_code}",
                                 faults_at(h.faults, run.start, run.end or h.meta.end)))
    return out


def check(h: History, cluster: str | None = None) -> Report:
    meta = h.meta
    forged = forged_offsets(h.faults)
    decisions, bad = decisions_of(h.published, cluster, forged)
    delay = percentile(publication_delays(decisions, h.faults, meta, h.job_runs), 99, empty=0.0)
    firsts = {min((d.arrived for d in decisions if d.arrived >= r.start), default=None) for r in h.job_runs}
    observed = sorted({d.observed_at for d in decisions
                       if d.observed_at <= d.arrived + meta.skew_s and d.arrived not in firsts})
    spacing = percentile([b - a for a, b in zip(observed, observed[1:])
                          if not any(f.kind in publication_faults(meta) and f.covers(a, b) for f in h.faults)],
                         99, empty=0.0)
    detection, release = meta.interval_s + delay, 2 * meta.interval_s + delay
    low = low_intervals(h.disks, meta.hard_limit_bytes, meta.end, h.faults, h.offline)
    unsafe, detection_delays = check_unsafe_release(h, decisions, detection, low)
    released, release_delays = check_release(h, decisions, release, low)
    found = bad + unsafe + released + check_admitted(h, decisions) + check_gaps(h, decisions) \
        + check_replay(h, decisions) + check_job(h)
    found.sort(key=lambda v: (v.start, v.prop))
    kinds: dict[str, int] = {}
    for f in h.faults:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    return Report([v for v in found if not v.explained], [v for v in found if v.explained], len(decisions),
                  sum(1 for p in h.published if (p.partition, p.offset) in forged), dict(sorted(kinds.items())),
                  detection, release, delay, spacing, detection_delays, release_delays, admit_bound(meta))


# ---------------------------------------------------------------- output


def fmt(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def line(v: Violation, start: float) -> str:
    tag = "EXPLAINED" if v.explained else "VIOLATION"
    faults = ", ".join(v.faults) or "none"
    return (f"{tag} {v.prop} {fmt(v.start)}..{fmt(v.end)} (+{v.start - start:.1f}..+{v.end - start:.1f} s): "
            f"{v.what}; faults in force: {faults}")


def summary(r: Report, meta: Meta) -> str:
    faults = ", ".join(f"{k} {n}" for k, n in r.faults_by_kind.items()) or "none"
    worst_d = f"{max(r.detection_delays):.1f} s" if r.detection_delays else "n/a"
    worst_r = f"{max(r.release_delays):.1f} s" if r.release_delays else "n/a"
    return (f"seed {meta.seed}: {sum(r.faults_by_kind.values())} faults ({faults}); {r.decisions} decisions checked, "
            f"{r.forged} forged records ignored; {len(r.violations)} violations, {len(r.explained)} explained by "
            f"faults; worst detection {worst_d} (allowed {r.detection_allowance_s:.1f} s = interval "
            f"{meta.interval_s:.0f} s + p99 delay {r.p99_delay_s:.1f} s), worst release {worst_r} (allowed "
            f"{r.release_allowance_s:.1f} s); p99 spacing of the job's observations {r.p99_spacing_s:.1f} s; "
            f"admitted bound at factor 0 {r.admit_bound_bytes_per_s:.0f} B/s")


def render(r: Report, meta: Meta) -> str:
    lines = [line(v, meta.start) for v in sorted(r.violations + r.explained, key=lambda v: v.start)]
    return "\n".join(lines + [summary(r, meta)])


# ---------------------------------------------------------------- reading a history directory


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def load(directory: Path) -> tuple[History, str | None]:
    """A history written by verify/campaign.py, and the decision key it checks."""
    meta_raw = json.loads((directory / "meta.json").read_text())
    meta = Meta(**{k: v for k, v in meta_raw.items() if k in Meta.__dataclass_fields__})
    job_log = []
    for name in ("job.tlog", "enforcer.tlog"):  # enforce's log, in the enforce variant, is judged as the job's
        if (directory / name).exists():
            for text in (directory / name).read_text(errors="replace").splitlines():
                t, _, rest = text.partition("\t")
                job_log.append((float(t), rest))
    job_log.sort(key=lambda x: x[0])
    replayed = _jsonl(directory / "replayed.jsonl") if (directory / "replayed.jsonl").exists() else None
    history = History(
        meta,
        [DiskSample(**d) for d in _jsonl(directory / "disks.jsonl")],
        [Published(**d) for d in _jsonl(directory / "published.jsonl")],
        [Fault(**d) for d in _jsonl(directory / "faults.jsonl")],
        [ProducerSample(**d) for d in _jsonl(directory / "producers.jsonl")],
        [JobRun(**d) for d in _jsonl(directory / "job_runs.jsonl")],
        job_log, replayed,
        [(d["t"], d["node"], d["log_dir"]) for d in _jsonl(directory / "offline.jsonl")]
        if (directory / "offline.jsonl").exists() else None)
    return history, meta_raw.get("cluster")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args and args[0] in ("-h", "--help") else 2
    directory = Path(args[0])
    if not (directory / "meta.json").is_file():
        print(f"error: {directory} has no meta.json; give the history directory verify/campaign.py wrote")
        return 2
    history, cluster = load(directory)
    report = check(history, cluster)
    print(render(report, history.meta))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
