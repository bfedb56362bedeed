"""Steps 1-3 of the decision semantics in set-based Spark SQL: readings become intervals of snapshots.

Each reading of a (broker, log_dir) is in the cache from its snapshot until the next event of the
same key or until it expires (the first snapshot at or past observed_at + validity), whichever comes
first; under `pin`, an offline report before then pins it until the next reading with bytes. With
each cluster's snapshots numbered 0..n-1, an interval is a range of snapshot numbers: exploding it
and aggregating on (cluster, number) gives every snapshot's cache without a time-range join
(DESIGN.md measured that join as quadratic). Windows run per key (parallel), and per cluster only
over the one-row-per-snapshot table. Under `storage.fenced.broker.policy=pin`, a reading still cached when
its broker is first seen fenced is pinned from that snapshot on, as an offline report pins it.
core/cache.py is the streaming form; the tests hold them equal.
"""
from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from quota_pipeline.core import policy, trend
from quota_pipeline.core.config import Limits
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import micros

KEY = ("cluster_id", "broker_id", "log_dir")
SUMMARY_COLUMNS = (
    "cluster_id", "seq", "observed_at", "status", "active_brokers", "active_log_dirs", "missing_brokers",
    "violations", "policy_factor", "complete", "worst_volume", "min_available_ratio", "closest_volumes",
)


def number_snapshots(snaps: DataFrame, settings: Settings) -> DataFrame:
    """One row per snapshot: its number, where its readings expire, the registered brokers in force."""
    by_time = Window.partitionBy("cluster_id").orderBy("t_us")
    success = F.col("status") == "SUCCESS"
    validity = micros(settings.validity)
    slim = snaps.select(
        "cluster_id", "observed_at", "status", "brokers", "fenced_brokers",
        F.unix_micros("observed_at").alias("t_us"),
    )
    return slim.select(
        "*",
        (F.row_number().over(by_time) - 1).alias("seq"),
        # Snapshots with t < t_n + validity; being 0-based and unique in time, this is the number of
        # the first snapshot whose eviction step drops a reading taken at t_n.
        F.count("*").over(by_time.rangeBetween(Window.unboundedPreceding, validity - 1)).alias("expires_at"),
        F.count("*").over(Window.partitionBy("cluster_id")).alias("n_snapshots"),
        F.last(F.when(success, F.array_union("brokers", "fenced_brokers")), ignorenulls=True)
        .over(by_time.rowsBetween(Window.unboundedPreceding, 0)).alias("registered"),
        F.when(success, F.array_distinct(F.concat("brokers", "fenced_brokers")))
        .otherwise(F.array().cast("array<bigint>")).alias("expected"),
    )


def _events(snaps: DataFrame, numbered: DataFrame, settings: Settings) -> DataFrame:
    """Every reading and offline report of a SUCCESS snapshot, with its snapshot number and expiry."""
    volumes = snaps.where(F.col("status") == "SUCCESS").select(
        "cluster_id", "observed_at", F.explode("volumes").alias("v"))
    events = volumes.select(
        "cluster_id", "observed_at", F.col("v.broker_id").alias("broker_id"), F.col("v.log_dir").alias("log_dir"),
        F.col("v.total_bytes").alias("total_bytes"), F.col("v.available_bytes").alias("available_bytes"),
        F.col("v.error").isNotNull().alias("offline"), F.col("v.top_partitions").alias("top_partitions"),
    )
    if settings.offline_policy == "last-known":
        events = events.where(~F.col("offline"))  # an offline report leaves the cache as it is
    events = events.join(numbered.select("cluster_id", "observed_at", "seq", "t_us", "expires_at", "n_snapshots"),
                         ["cluster_id", "observed_at"])
    # The key's last readings (offline reports aside, as the streaming history keeps only readings).
    recent = Window.partitionBy(*KEY, "offline").orderBy("seq").rowsBetween(-(trend.FILL_READINGS - 1), 0)
    history = F.filter(F.collect_list(F.struct("t_us", "available_bytes")).over(recent),
                       lambda h: h.t_us >= F.col("t_us") - micros(settings.validity))
    events = _with_fill_rate(events.withColumn("_history", F.when(~F.col("offline"), history)))
    return events.select(
        *KEY, "seq", "expires_at", "n_snapshots", "offline", "fill_rate",
        F.when(~F.col("offline"), F.col("total_bytes")).alias("total_bytes"),
        F.when(~F.col("offline"), F.col("available_bytes")).alias("available_bytes"),
        F.when(~F.col("offline"), F.col("top_partitions")).alias("top_partitions"),
    )


def _with_fill_rate(events: DataFrame) -> DataFrame:
    """`fill_rate`: core.trend.fill_rate over `_history` as array expressions, term by term in the same order (so
    the same doubles). Every term is a column of its own, passed through the next step so that Spark keeps it
    computed once per row: written as one expression, the offsets and means were inlined into every lambda call
    (a mean recomputed per element), which made this the costliest step of replay."""
    h = F.col("_history")
    steps = [
        {"_n": F.size(h), "_last": F.element_at(h, -1).t_us},
        {"_ts": F.transform(h, lambda x: (x.t_us - F.col("_last")) / F.lit(1e6)),
         "_avail": F.transform(h, lambda x: x.available_bytes.cast("double"))},
        {"_mean_t": F.aggregate("_ts", F.lit(0.0), lambda acc, x: acc + x) / F.col("_n"),
         "_mean_a": F.aggregate("_avail", F.lit(0.0), lambda acc, x: acc + x) / F.col("_n")},
        {"_var": F.aggregate("_ts", F.lit(0.0), lambda acc, x: acc + (x - F.col("_mean_t")) * (x - F.col("_mean_t"))),
         "_cov": F.aggregate(F.arrays_zip("_ts", "_avail"), F.lit(0.0),
                             lambda acc, z: acc + (z["_ts"] - F.col("_mean_t")) * (z["_avail"] - F.col("_mean_a")))},
        # ANSI mode fails a division by zero even on doubles: a single reading (no variance) has no rate.
        {"_rate": F.when(F.col("_var") != 0.0, -F.col("_cov") / F.col("_var"))},
    ]
    for step in steps:
        events = events.withColumns(step)
    rate = F.col("_rate")
    fill_rate = F.when(h.isNotNull() & (F.col("_n") >= 2) & (F.col("_var") != 0.0) & (rate > 0.0), rate)
    temporary = ["_history", *(name for step in steps for name in step)]
    return events.withColumn("fill_rate", fill_rate).drop(*temporary)


def _first_fenced(ev: DataFrame, numbered: DataFrame, until: Column) -> DataFrame:
    """`fenced_at`: the first snapshot number in [seq, until) at which a SUCCESS snapshot lists the event's broker
    as fenced and not active, or null. One window per (cluster, broker) over the events and those markers:
    walking back from the end, the smallest marker seen so far is the next one at or after each event."""
    markers = numbered.where(F.col("status") == "SUCCESS").select(
        "cluster_id", F.explode(F.array_except("fenced_brokers", "brokers")).alias("broker_id"), "seq",
        F.lit(True).alias("marker"))
    rows = ev.withColumn("marker", F.lit(False)).unionByName(markers, allowMissingColumns=True)
    # At equal numbers the marker comes first: a broker fenced in the event's own snapshot pins it at once.
    back = Window.partitionBy("cluster_id", "broker_id").orderBy(F.desc("seq"), F.desc("marker")) \
        .rowsBetween(Window.unboundedPreceding, 0)
    nxt = F.min(F.when(F.col("marker"), F.col("seq"))).over(back)
    return rows.withColumn("fenced_at", F.when(nxt < until, nxt)).where(~F.col("marker")).drop("marker")


def intervals(snaps: DataFrame, numbered: DataFrame, settings: Settings) -> DataFrame:
    """(key, reading, pinned, start, end): the snapshot numbers [start, end) whose cache holds the reading."""
    ev = _events(snaps, numbered, settings)
    by_key = Window.partitionBy(*KEY).orderBy("seq")
    # Next reading with bytes after this event; a growing frame over the reversed order stays linear.
    later = Window.partitionBy(*KEY).orderBy(F.desc("seq")).rowsBetween(Window.unboundedPreceding, -1)
    ev = ev.select(
        "*",
        F.lead("seq").over(by_key).alias("next_seq"),
        F.lead("offline").over(by_key).alias("next_offline"),
        F.lag("offline").over(by_key).alias("prev_offline"),
        F.lag("expires_at").over(by_key).alias("prev_expires_at"),
        F.min(F.when(~F.col("offline"), F.col("seq"))).over(later).alias("next_reading"),
    )
    n, seq = F.col("n_snapshots"), F.col("seq")
    # Upsert comes after eviction, so a reading is in force at its own snapshot even at validity 0.
    unpinned_end = F.greatest(seq + 1, F.least(F.coalesce("next_seq", n), F.col("expires_at")))
    pinned_end = F.coalesce("next_reading", n)

    def seg(pinned: bool, start: Column, end: Column) -> Column:
        return F.struct(F.lit(pinned).alias("pinned"), start.cast("bigint").alias("start"),
                        end.cast("bigint").alias("end"))

    if settings.fenced_policy == "pin":
        return _pin_fenced(ev, numbered, settings, seg, unpinned_end)
    if settings.offline_policy != "pin":
        segments = F.array(seg(False, seq, unpinned_end))
    else:
        reading = ~F.col("offline")
        # An offline report that finds the reading still cached pins it until the next reading.
        pinned_by_next = reading & F.coalesce(F.col("next_offline"), F.lit(False)) & \
            (F.col("next_seq") < F.col("expires_at"))
        # The first offline report of a run that found nothing cached adds a pinned violating entry;
        # later reports of the same run change nothing.
        first_offline = F.col("offline") & (
            F.col("prev_offline").isNull() | (~F.col("prev_offline") & (seq >= F.col("prev_expires_at"))))
        segments = (F.when(pinned_by_next, F.array(seg(False, seq, F.col("next_seq")),
                                                   seg(True, F.col("next_seq"), pinned_end)))
                    .when(reading, F.array(seg(False, seq, unpinned_end)))
                    .when(first_offline, F.array(seg(True, seq, pinned_end)))
                    .otherwise(F.array().cast("array<struct<pinned:boolean,start:bigint,end:bigint>>")))
    return _explode(ev, segments)


def _explode(ev: DataFrame, segments: Column) -> DataFrame:
    """One pass over the window's output: every event yields its segments (0, 1 or 2; empty ones dropped)."""
    reading = ("total_bytes", "available_bytes", "fill_rate", "top_partitions")
    return ev.select("cluster_id", "broker_id", "log_dir", *reading, F.explode(segments).alias("s")) \
        .select("cluster_id", "broker_id", "log_dir", *reading,
                F.col("s.pinned").alias("pinned"), F.col("s.start").alias("start"), F.col("s.end").alias("end")) \
        .where(F.col("start") < F.col("end"))


def _pin_fenced(ev: DataFrame, numbered: DataFrame, settings: Settings, seg, unpinned_end: Column) -> DataFrame:
    """The segments when fenced brokers' readings are pinned: an unpinned stretch ends at the first snapshot
    that sees its broker fenced, and the rest is pinned until a reading replaces it (any event under
    `violate`, the next reading with bytes otherwise: an offline report leaves a pinned entry pinned)."""
    n, seq = F.col("n_snapshots"), F.col("seq")
    pin_offline = settings.offline_policy == "pin"
    pinned_end = F.coalesce("next_reading" if pin_offline else "next_seq", n)
    reading = ~F.col("offline")
    pinned_by_next = (reading & F.coalesce(F.col("next_offline"), F.lit(False))
                      & (F.col("next_seq") < F.col("expires_at"))) if pin_offline else F.lit(False)
    # Under `violate` every event is a reading (an offline report upserts); `last-known` dropped them.
    unpinned_until = F.when(pinned_by_next, F.col("next_seq")).when(reading | F.lit(not pin_offline), unpinned_end)
    ev = _first_fenced(ev, numbered, unpinned_until)
    fenced_at = F.col("fenced_at")
    first_offline = F.lit(False)
    if pin_offline:
        # A report that finds nothing cached adds a pinned violating entry: the previous reading expired and was
        # not pinned by its broker being fenced. Later reports of the same run change nothing.
        ev = ev.withColumn("prev_pinned", F.lag("fenced_at").over(Window.partitionBy(*KEY).orderBy("seq")).isNotNull())
        prev_pinned = F.col("prev_pinned")
        first_offline = F.col("offline") & (F.col("prev_offline").isNull() | (
            ~F.col("prev_offline") & (seq >= F.col("prev_expires_at")) & ~prev_pinned))
    segments = (
        F.when(fenced_at.isNotNull(), F.array(seg(False, seq, fenced_at), seg(True, fenced_at, pinned_end)))
        .when(pinned_by_next, F.array(seg(False, seq, F.col("next_seq")), seg(True, F.col("next_seq"), pinned_end)))
        .when(unpinned_until.isNotNull(), F.array(seg(False, seq, unpinned_until)))
        .when(first_offline, F.array(seg(True, seq, pinned_end)))
        .otherwise(F.array().cast("array<struct<pinned:boolean,start:bigint,end:bigint>>")))
    return _explode(ev, segments)


def _closest_candidate(settings: Settings) -> Column:
    """An entry in force as a sortable struct: its first fields are core.cache.closest_key (offline first, then
    least headroom, broker, log dir), the rest what the record shows."""
    avail, total, rate = F.col("available_bytes"), F.col("total_bytes"), F.col("fill_rate")
    headroom = avail.cast("double") - policy.limit_bytes(settings.limits.hard, total, policy.spark_ops())
    eta = F.when(headroom.isNull() | rate.isNull(), F.lit(None).cast("double")) \
        .when(headroom <= 0, F.lit(0.0)).otherwise(headroom / rate)
    return F.struct(
        headroom.isNotNull().alias("has_headroom"), F.coalesce(headroom, F.lit(0.0)).alias("order"),
        F.col("broker_id"), F.col("log_dir"), avail.alias("available_bytes"), total.alias("total_bytes"),
        policy.available_ratio_col(avail, total).alias("available_ratio"), headroom.alias("headroom_bytes"),
        rate.alias("fill_rate_bytes_per_second"), eta.alias("eta_seconds"),
        F.coalesce("top_partitions", F.array().cast("array<struct<topic:string,partition:int,size_bytes:bigint>>"))
        .alias("top_partitions"))


def _closest(n: int) -> Column:
    """The n candidates nearest the hard limit, as the record lists them."""
    ranked = F.slice(F.array_sort(F.collect_list("candidate")), 1, n) if n else \
        F.slice(F.collect_list("candidate"), 1, 0)
    return F.transform(ranked, lambda c: F.struct(*[c[f].alias(f) for f in CLOSEST_FIELDS])).cast(CLOSEST_TYPE)


CLOSEST_FIELDS = ("broker_id", "log_dir", "available_bytes", "total_bytes", "available_ratio", "headroom_bytes",
                  "fill_rate_bytes_per_second", "eta_seconds", "top_partitions")
WORST_TYPE = "struct<factor:double,available_ratio:double,available_bytes:bigint,broker_id:bigint,log_dir:string>"
CLOSEST_TYPE = ("array<struct<broker_id:bigint,log_dir:string,available_bytes:bigint,total_bytes:bigint,"
                "available_ratio:double,headroom_bytes:double,fill_rate_bytes_per_second:double,eta_seconds:double,"
                "top_partitions:array<struct<topic:string,partition:int,size_bytes:bigint>>>>")


def sweep_columns(i: int) -> tuple[str, str]:
    """The names of the i-th extra limits' violations and policy factor in a summary row (see summaries)."""
    return f"sweep_violations_{i}", f"sweep_factor_{i}"


def summaries(snaps: DataFrame, settings: Settings, sweep: Sequence[Limits] = (), detail: bool = True) -> DataFrame:
    """One SnapshotSummary row per snapshot (SUMMARY_COLUMNS), the input of decide.advance.

    `sweep`: other limits to judge the same cache by, in the same aggregation (the cache does not depend on the
    limits, so every limit is one more conditional sum and min over rows already grouped): their violations and
    policy factors come out as sweep_columns(i). `detail=False` leaves out the worst and closest volumes, which
    only the decision records show (a what-if sweep needs neither, and the sorted candidates are costly).
    """
    numbered = number_snapshots(snaps, settings).cache()
    spans = intervals(snaps, numbered, settings)
    cached = spans.select(
        "cluster_id", "broker_id", "log_dir", "total_bytes", "available_bytes", "fill_rate", "top_partitions", "pinned",
        F.explode(F.sequence("start", F.col("end") - 1)).alias("seq"),
    )
    # Pinned entries count only while their broker is registered as of the latest SUCCESS snapshot.
    registered = numbered.select("cluster_id", "seq", "registered")
    pinned = cached.where("pinned").join(registered, ["cluster_id", "seq"]) \
        .where(F.array_contains("registered", F.col("broker_id"))).drop("registered")
    in_force = cached.where(~F.col("pinned")).unionByName(pinned)

    avail, total = F.col("available_bytes"), F.col("total_bytes")
    factor = policy.volume_factor_col(avail, total, settings.limits)
    ratio = policy.available_ratio_col(avail, total)
    extra = [c for i, limits in enumerate(sweep) for c in (
        policy.violates_col(avail, total, limits).cast("int").alias(f"_violates_{i}"),
        policy.volume_factor_col(avail, total, limits).alias(f"_factor_{i}"))]
    extra_aggs = [a for i in range(len(sweep)) for a in (
        F.sum(f"_violates_{i}").alias(f"_violations_{i}"), F.min(f"_factor_{i}").alias(f"_policy_factor_{i}"))]
    if detail:
        detail_aggs = [
            _closest(settings.closest_volumes).alias("closest_volumes"),
            # Struct order = decide.worst_key: factor, ratio, bytes (nulls, i.e. offline, first), broker, dir.
            F.min(F.struct("factor", "available_ratio", "available_bytes", "broker_id", "log_dir")).alias("worst"),
        ]
    else:
        detail_aggs = [F.lit(None).cast(CLOSEST_TYPE).alias("closest_volumes"), F.lit(None).cast(WORST_TYPE).alias("worst")]
    per_snapshot = in_force.select(
        "cluster_id", "seq", "broker_id", "log_dir", avail.alias("available_bytes"),
        factor.alias("factor"), ratio.alias("available_ratio"),
        policy.violates_col(avail, total, settings.limits).cast("int").alias("violates"),
        *([_closest_candidate(settings).alias("candidate")] if detail else []),
        *extra,
    ).groupBy("cluster_id", "seq").agg(
        *detail_aggs,
        F.count("*").alias("active_log_dirs"),
        F.sum("violates").alias("violations"),
        F.min("factor").alias("policy_factor"),
        F.min("available_ratio").alias("min_available_ratio"),
        F.collect_set("broker_id").alias("covered"),
        *extra_aggs,
    )
    joined = numbered.join(per_snapshot, ["cluster_id", "seq"], "left")
    # A snapshot with no entry in force violates nothing and has factor 1, under any limits.
    sweep_out = [c for i in range(len(sweep)) for c in (
        F.coalesce(f"_violations_{i}", F.lit(0)).cast("int").alias(sweep_columns(i)[0]),
        F.coalesce(f"_policy_factor_{i}", F.lit(1.0)).alias(sweep_columns(i)[1]))]
    missing = F.array_sort(F.array_except("expected", F.coalesce("covered", F.array().cast("array<bigint>"))))
    return joined.select(
        "cluster_id", "seq", "observed_at", "status",
        F.size(F.array_distinct("brokers")).alias("active_brokers"),
        F.coalesce("active_log_dirs", F.lit(0)).alias("active_log_dirs"),
        missing.alias("missing_brokers"),
        F.coalesce("violations", F.lit(0)).cast("int").alias("violations"),
        F.coalesce("policy_factor", F.lit(1.0)).alias("policy_factor"),
        ((F.col("status") == "SUCCESS") & (F.size(missing) == 0)).alias("complete"),
        F.when(F.col("worst").isNotNull(), F.struct(
            F.col("worst.broker_id").alias("broker_id"), F.col("worst.log_dir").alias("log_dir"),
            F.col("worst.available_bytes").alias("available_bytes"),
            F.col("worst.available_ratio").alias("available_ratio"))).alias("worst_volume"),
        "min_available_ratio",
        F.coalesce("closest_volumes", F.array().cast(CLOSEST_TYPE)).alias("closest_volumes"),
        *sweep_out,
    )
