"""Random journals of a few clusters (hypothesis): brokers that come, go and are fenced, offline and empty
volumes, failed polls, readings with top partitions; shared by the replay equivalence tests."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from builders import GB, failed, ok, vol
from quota_pipeline.core.model import PartitionSize, Status


@st.composite
def cluster_journal(draw, cluster: str):
    t, snaps = 0.0, []
    for _ in range(draw(st.integers(1, 30))):
        t += draw(st.sampled_from([1, 10, 29, 30, 31, 60, 200]))
        if draw(st.integers(0, 6)) == 0:
            snaps.append(failed(t, draw(st.sampled_from(list(Status)[1:])), cluster=cluster))
            continue
        brokers = draw(st.sets(st.integers(1, 3), min_size=1))
        # brokers 2 and 3 are active in some snapshots and fenced in others (a stop, a restart)
        fenced = draw(st.sets(st.integers(2, 5), max_size=2)) - brokers
        reporting = draw(st.sets(st.sampled_from(sorted(brokers | fenced))))
        vols = []
        for b in sorted(reporting):
            for d in sorted(draw(st.sets(st.sampled_from(["/a", "/b"]), min_size=1))):
                free = draw(st.one_of(st.none(), st.integers(0, 40).map(lambda g: g * GB // 2)))
                total = draw(st.sampled_from([100 * GB, 0, 7 * GB + 3]))
                v = vol(b, None if free is None else min(free, total), total=total, log_dir=d)
                if free is not None and draw(st.booleans()):
                    v = replace(v, top_partitions=(PartitionSize("t", b, free // 3), PartitionSize("u", 0, 7)))
                vols.append(v)
        snaps.append(ok(t, *vols, brokers=sorted(brokers), fenced=sorted(fenced), cluster=cluster))
    return snaps


@st.composite
def fleets(draw):
    snaps = []
    for i in range(draw(st.integers(1, 6))):
        snaps += draw(cluster_journal(f"c{i}"))
    return snaps
