"""Random journals of a few clusters (hypothesis): brokers that come, go and are fenced, offline and empty
volumes, failed polls, partial views (a failed poll with the volumes of the brokers that answered), readings with
top partitions and with their topics known (some none), not known or absent (a journal written before the field),
and log dirs that fill, hold steady or free at a steady rate, some cleaned up once (a jump up: the predictive step's
restart), some only in the last step before they go offline for a while (the offline-after-filling rule); shared
by the replay equivalence tests. A journal is written in one of LAYOUTS: as the journal writes it, or as another
tool might export the same rows (exported)."""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import strategies as st

from tests.support.builders import GB, failed, ok, vol
from quota_pipeline.core.model import PartitionSize, Status, Volume


# Bytes per second a drifting log dir loses: fast, slow, steady, freeing.
DRIFT_RATES = (200_000_000, 20_000_000, 0, -50_000_000)
# A reading's topics: not known, none (a dir holding no partition), some.
TOPICS = st.one_of(st.none(), st.lists(st.sampled_from(["t", "u", "v", "fill"]), unique=True, max_size=3)
                   .map(lambda ts: tuple(sorted(ts))))


@st.composite
def drift(draw):
    """A log dir that moves at a steady rate from a start level, then is reported offline over a span of polls
    (as Kafka takes a dir offline at ENOSPC or on a failed disk), perhaps cleaned up at a poll (bytes freed at once,
    as an operator deleting a topic), perhaps flat until a fill begins a poll or two before it goes offline (seen in
    the last step only, the fit over the flat readings before it diluted): (start free, rate, total, offline from,
    to, (clean-up poll, bytes) or None, its readings' topics, the poll the fill begins at or None)."""
    start = draw(st.integers(2, 40)) * GB // 2
    rate = draw(st.sampled_from(DRIFT_RATES))
    total = draw(st.sampled_from([100 * GB, 7 * GB + 3]))
    offline_from = draw(st.integers(1, 12))
    clean_up = draw(st.one_of(st.none(),
                              st.tuples(st.integers(1, 25), st.integers(1, 60).map(lambda g: g * GB // 2))))
    begins = draw(st.one_of(st.none(), st.just(max(1, offline_from - 1))))
    return (start, rate, total, offline_from, offline_from + draw(st.integers(1, 30)), clean_up, draw(TOPICS),
            begins)


def drifting(d, t: float, poll: int, b: int, log_dir: str, since: float = 0.0) -> Volume:
    """Drift `d`'s reading at time `t` of poll number `poll`; `since`: when its fill began (the poll before the
    one it begins at), for a drift that begins late."""
    start, rate, total, offline_from, offline_to, clean_up, topics, begins = d
    if offline_from <= poll < offline_to:
        return vol(b, None, total=total, log_dir=log_dir)
    freed = clean_up[1] if clean_up is not None and poll >= clean_up[0] else 0
    elapsed = t if begins is None else 0.0 if poll < begins else t - since
    free = min(max(start - int(rate * elapsed) + freed, 0), total)
    # What fills it: an offline dir that filled up keeps its last reading's partitions in the record.
    return replace(vol(b, free, total=total, log_dir=log_dir), top_partitions=(PartitionSize("fill", b, poll),),
                   topics=topics)


@st.composite
def cluster_journal(draw, cluster: str):
    t, snaps = 0.0, []
    # Some log dirs follow a steady trend (and go offline) instead of random readings.
    drifts = draw(st.dictionaries(st.tuples(st.integers(1, 5), st.sampled_from(["/a", "/b"])), drift(),
                                  max_size=3))
    since = {}  # per drift that begins late: the time of the poll before the one it begins at
    # In some journals the brokers of the drifting dirs are registered and report at every poll, so that a drift
    # is read poll after poll up to the one it goes offline at.
    steady = draw(st.booleans())
    for poll in range(draw(st.integers(1, 30))):
        for key, d in drifts.items():
            if d[7] == poll:
                since[key] = t
        t += draw(st.sampled_from([1, 10, 29, 30, 31, 60, 200]))
        if draw(st.integers(0, 6)) == 0:
            snaps.append(failed(t, draw(st.sampled_from(list(Status)[1:])), cluster=cluster))
            continue
        brokers = draw(st.sets(st.integers(1, 3), min_size=1))
        # brokers 2 and 3 are active in some snapshots and fenced in others (a stop, a restart)
        fenced = draw(st.sets(st.integers(2, 5), max_size=2)) - brokers
        if steady:
            brokers |= {b for b, _ in drifts} - fenced
        reporting = draw(st.sets(st.sampled_from(sorted(brokers | fenced))))
        if steady:
            reporting |= {b for b, _ in drifts}
        vols = []
        for b in sorted(reporting):
            dirs = draw(st.sets(st.sampled_from(["/a", "/b"]), min_size=1)) | {d for k, d in drifts if k == b}
            for d in sorted(dirs):
                if (b, d) in drifts:
                    vols.append(drifting(drifts[b, d], t, poll, b, d, since.get((b, d), 0.0)))
                    continue
                free = draw(st.one_of(st.none(), st.integers(0, 40).map(lambda g: g * GB // 2)))
                total = draw(st.sampled_from([100 * GB, 0, 7 * GB + 3]))
                v = vol(b, None if free is None else min(free, total), total=total, log_dir=d)
                if free is not None and draw(st.booleans()):
                    v = replace(v, top_partitions=(PartitionSize("t", b, free // 3), PartitionSize("u", 0, 7)))
                if free is not None:
                    v = replace(v, topics=draw(TOPICS))
                vols.append(v)
        snap = ok(t, *vols, brokers=sorted(brokers), fenced=sorted(fenced), cluster=cluster)
        if vols and draw(st.integers(0, 6)) == 0:
            # A partial view: the poll failed on the brokers that are not reporting (they did not answer).
            snap = replace(snap, status=draw(st.sampled_from(list(Status)[1:])), message="broker did not answer")
        snaps.append(snap)
    return snaps


@st.composite
def fleets(draw):
    snaps = []
    for i in range(draw(st.integers(1, 6))):
        snaps += draw(cluster_journal(f"c{i}"))
    return snaps


# "sorted": the journal's own Parquet form, rows in the order given. "exported" (journal/synthetic_journals.py's layout of the
# same name): the failed polls' rows appended at the end of the file, log_dir as plain (not dictionary-encoded)
# strings, the brokers list on every row, no observed_us (times parsed from the text).
LAYOUTS = ("sorted", "exported")


def brokers_on_every_row(snaps: list) -> list:
    """The snapshots as the exported layout carries them: a failed poll with its cluster's brokers list (the
    brokers seen so far), as a tool that writes the list on every row does (a partial view has its own). Compare
    decisions of these."""
    seen: dict[str, set] = {}
    out = []
    for x in sorted(snaps, key=lambda x: x.observed_at):
        if x.status == Status.SUCCESS or x.volumes:
            seen.setdefault(x.cluster_id, set()).update(x.brokers)
            out.append(x)
        else:
            out.append(replace(x, brokers=tuple(sorted(seen.get(x.cluster_id, ())))))
    return out


def write_exported(path, table: pa.Table, row_group_size: int | None = None) -> str:
    """The journal's flattened rows (period_file.table_of) written in the exported layout: without the topics
    column when no row knows its topics (a journal written before it)."""
    failed = pc.not_equal(table.column("status"), "SUCCESS")
    table = pa.concat_tables([table.filter(pc.invert(failed)), table.filter(failed)])
    table = table.drop_columns([c for c in ("observed_us", "tick", "journal_file") if c in table.column_names])
    if table.column("topics").null_count == table.num_rows:
        table = table.drop_columns(["topics"])
    plain = [c for c in table.column_names if c != "log_dir"]
    pq.write_table(table, str(path), row_group_size=row_group_size, use_dictionary=plain)
    return str(path)
