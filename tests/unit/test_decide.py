"""The decision semantics of DESIGN.md, branch by branch, on the streaming (Python) form."""
from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from tests.support.builders import GB, at, failed, ok, partial, settings, vol
from quota_pipeline.core.reference.decision import decide_all
from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.model import DecisionSource, PartitionSize, Status, WorstVolume
from quota_pipeline.core.settings import Settings


def run(snaps, s=None):
    s = s or settings()
    return [(d.factor, d.source, d.valid_from) for _, d in decide_all(snaps, s)]


def factors(snaps, s=None):
    return [(f, src) for f, src, _ in run(snaps, s)]


def test_first_healthy_snapshot_is_an_observation_of_one():
    assert run([ok(0, vol(1, 50 * GB), vol(2, 50 * GB))]) == [(1.0, DecisionSource.OBSERVATION, at(0))]


def test_a_violation_throttles_at_once_even_when_incomplete():
    # Broker 2 reported nothing: incomplete, but broker 1 is at the limit, so production stops.
    out = factors([ok(0, vol(1, 10 * GB), brokers=(1, 2))])
    assert out == [(0.0, DecisionSource.OBSERVATION)]


def test_release_needs_a_complete_snapshot():
    snaps = [
        ok(0, vol(1, 5 * GB), vol(2, 50 * GB)),
        ok(10, vol(1, 50 * GB), brokers=(1, 2, 3)),          # broker 3 new, no reading: incomplete
        ok(20, vol(1, 50 * GB), vol(2, 50 * GB), vol(3, 50 * GB)),
    ]
    assert factors(snaps) == [(0.0, DecisionSource.OBSERVATION), (0.0, DecisionSource.RETAINED), (1.0, DecisionSource.OBSERVATION)]


def test_incomplete_with_cached_reading_still_decides():
    # Broker 2 is missing from the second poll but its reading from t=0 is still cached (validity 300 s).
    snaps = [ok(0, vol(1, 50 * GB), vol(2, 50 * GB)), ok(10, vol(1, 50 * GB), brokers=(1, 2))]
    assert factors(snaps) == [(1.0, DecisionSource.OBSERVATION), (1.0, DecisionSource.OBSERVATION)]


def test_incomplete_without_cache_retains_then_falls_back():
    s = settings(validity_s=60)
    snaps = [ok(0, vol(1, 50 * GB), vol(2, 50 * GB))] + [
        ok(t, vol(1, 50 * GB), brokers=(1, 2)) for t in (30, 60, 91)]
    out = run(snaps, s)
    # t=30: broker 2 still cached. t=60: its reading expired (t >= 0 + 60): incomplete -> retained.
    assert [(f, src) for f, src, _ in out] == [
        (1.0, DecisionSource.OBSERVATION), (1.0, DecisionSource.OBSERVATION), (1.0, DecisionSource.RETAINED), (0.5, DecisionSource.FALLBACK)]
    assert out[2][2] == at(30)  # RETAINED keeps valid_from of the last observation


def test_cache_expiry_is_inclusive_at_exactly_the_validity():
    s = settings(validity_s=60)
    snaps = [ok(0, vol(1, 5 * GB), vol(2, 50 * GB)), ok(60, vol(2, 50 * GB), brokers=(1, 2))]
    summaries = [summary for summary, _ in decide_all(snaps, s)]
    assert summaries[1].active_log_dirs == 1 and summaries[1].missing_brokers == (1,)


def test_failure_within_validity_retains_and_beyond_falls_back():
    s = settings(validity_s=60, fallback=0.25)
    snaps = [ok(0, vol(1, 5 * GB)), failed(30), failed(60), failed(61), ok(70, vol(1, 50 * GB))]
    out = factors(snaps, s)
    # t=60 is not past valid_from + validity (strictly greater is needed); t=61 is.
    assert out == [(0.0, DecisionSource.OBSERVATION), (0.0, DecisionSource.RETAINED), (0.0, DecisionSource.RETAINED),
                   (0.25, DecisionSource.FALLBACK), (1.0, DecisionSource.OBSERVATION)]


def test_fallback_persists_until_a_deciding_observation():
    s = settings(validity_s=60, fallback=0.25)
    snaps = [ok(0, vol(1, 50 * GB), vol(2, 50 * GB)), failed(100),
             ok(110, vol(1, 50 * GB), brokers=(1, 2)),   # incomplete: cannot release the fallback
             ok(120, vol(1, 50 * GB), vol(2, 50 * GB))]
    assert factors(snaps, s) == [(1.0, DecisionSource.OBSERVATION), (0.25, DecisionSource.FALLBACK),
                                 (0.25, DecisionSource.FALLBACK), (1.0, DecisionSource.OBSERVATION)]


def test_fallback_record_has_no_valid_until():
    s = settings(validity_s=60)
    [(_, first), (summary, second)] = list(decide_all([ok(0, vol(1, 50 * GB)), failed(61)], s))
    assert first.valid_until(s.validity) == at(60)
    assert second.source is DecisionSource.FALLBACK and second.valid_until(s.validity) is None


def test_graded_factor_between_soft_and_hard():
    s = settings(hard_bytes=10 * GB, soft_bytes=30 * GB)
    snaps = [ok(0, vol(1, 20 * GB), vol(2, 50 * GB)), ok(10, vol(1, 25 * GB), vol(2, 15 * GB)),
             ok(20, vol(1, 31 * GB), vol(2, 31 * GB))]
    assert factors(snaps, s) == [(0.5, DecisionSource.OBSERVATION), (0.25, DecisionSource.OBSERVATION), (1.0, DecisionSource.OBSERVATION)]


def test_without_soft_limit_it_is_strimzis_zero_one_rule():
    snaps = [ok(0, vol(1, 10 * GB + 1)), ok(10, vol(1, 10 * GB)), ok(20, vol(1, 10 * GB + 1))]
    assert [f for f, _ in factors(snaps)] == [1.0, 0.0, 1.0]


def test_ratio_limit_counts_total_zero_as_ratio_zero():
    from quota_pipeline.core.config import Limit, Limits
    from quota_pipeline.core.settings import Settings

    s = Settings(Limits(Limit("ratio", 0.0)), dt.timedelta(minutes=5))
    assert factors([ok(0, vol(1, 0, total=0))], s) == [(0.0, DecisionSource.OBSERVATION)]


def test_offline_pin_keeps_last_reading_while_offline():
    s = settings(validity_s=60, offline="pin")
    snaps = [ok(0, vol(1, 5 * GB)), ok(30, vol(1, None)), ok(200, vol(1, None)), ok(230, vol(1, 50 * GB))]
    summaries = [sm for sm, _ in decide_all(snaps, s)]
    # The violating reading stays in force long past the validity while the dir stays offline.
    assert [sm.violations for sm in summaries] == [1, 1, 1, 0]
    assert summaries[2].worst_volume.available_bytes == 5 * GB


def test_offline_pin_without_reading_violates():
    s = settings(offline="pin")
    assert factors([ok(0, vol(1, None), vol(2, 50 * GB))], s) == [(0.0, DecisionSource.OBSERVATION)]


def test_pinned_entry_counts_only_while_its_broker_is_registered():
    s = settings(validity_s=60, offline="pin")
    snaps = [ok(0, vol(1, None), vol(2, 50 * GB)),
             ok(100, vol(2, 50 * GB), brokers=(2,)),      # broker 1 deregistered: its pin stops counting
             ok(110, vol(2, 50 * GB), brokers=(1, 2))]    # back: pinned entry counts again
    assert [f for f, _ in factors(snaps, s)] == [0.0, 1.0, 0.0]


def test_offline_last_known_lets_the_reading_expire():
    s = settings(validity_s=60, offline="last-known")
    snaps = [ok(0, vol(1, 5 * GB)), ok(30, vol(1, None)), ok(70, vol(1, None))]
    summaries = [sm for sm, _ in decide_all(snaps, s)]
    assert [sm.violations for sm in summaries] == [1, 1, 0]
    assert summaries[2].missing_brokers == (1,)


def test_offline_violate_makes_it_violate_and_expire():
    s = settings(validity_s=60, offline="violate")
    snaps = [ok(0, vol(1, 50 * GB)), ok(30, vol(1, None)), failed(95)]
    summaries = [sm for sm, _ in decide_all(snaps, s)]
    assert [sm.violations for sm in summaries] == [0, 1, 0]


def went_offline(free_gb: list[float], offline_at: list[float], every: float = 10, total: int = 100 * GB):
    """Readings of /d0 every `every` seconds from 0 (with the partition that fills it), then offline reports at
    `offline_at`; broker 2 healthy throughout."""
    readings = [ok(every * i, replace(vol(1, int(g * GB), total=total), top_partitions=(PartitionSize("t", 0, i),)),
                   vol(2, 50 * GB)) for i, g in enumerate(free_gb)]
    return readings + [ok(t, vol(1, None), vol(2, 50 * GB)) for t in offline_at]


def test_a_dir_that_went_offline_after_filling_to_the_limit_violates():
    # 1 GB/s: by 30 s the last reading (20 GB at 20 s) is down to the 10 GB hard limit (inclusive).
    snaps = went_offline([40, 30, 20], [30, 200, 400]) + [ok(410, vol(1, 50 * GB), vol(2, 50 * GB))]
    summaries = [(sm, d) for sm, d in decide_all(snaps, settings(validity_s=60))]
    assert [(d.factor, d.source) for _, d in summaries] == [(1.0, DecisionSource.OBSERVATION)] * 3 + [
        (0.0, DecisionSource.OBSERVATION)] * 3 + [(1.0, DecisionSource.OBSERVATION)]
    sm = summaries[3][0]
    assert sm.violations == 1 and sm.worst_volume == WorstVolume(1, "/d0", None, None)
    [near, _] = sm.closest_volumes
    assert (near.broker_id, near.available_bytes, near.headroom_bytes, near.eta_seconds, near.reason) == \
        (1, None, None, 0.0, "offline-filling")
    assert near.fill_rate_bytes_per_second == pytest.approx(GB)
    assert near.top_partitions == (PartitionSize("t", 0, 2),)   # what was filling it, from its last reading
    # Pinned while it stays offline, past the validity; its next reading replaces it.
    assert summaries[5][0].closest_volumes[0].reason == "offline-filling"
    assert summaries[6][0].closest_volumes[0].reason is None


def test_a_fill_that_began_just_before_the_dir_went_offline_violates_at_its_first_offline_report():
    """Flat readings, one sudden step of 15.6 GB in 10 s, then offline (the campaign, seed 1, scaled): the fit over
    the five readings says 0.32 GB/s (above the limit until 74 s), the last step 1.56 GB/s (the limit by 47 s)."""
    s = settings(validity_s=60)
    summaries = list(decide_all(went_offline([36.5, 36.5, 36.3, 36.3, 20.7], [47, 60], total=40 * GB), s))
    assert [d.factor for _, d in summaries] == [1.0] * 5 + [0.0, 0.0]
    assert summaries[5][0].closest_volumes[0].reason == "offline-filling"
    # The record keeps the fitted rate (what the dashboard and the ETA show), not the step.
    assert summaries[5][0].closest_volumes[0].fill_rate_bytes_per_second == pytest.approx(0.318 * GB, rel=0.01)


def fast_last_step(offline_until: float = 1020):
    """Readings 6,100,000, 6,402,446 and 6,044,886 bytes at 0, 20 and 55 s (the last step 10,216 B/s, the fit over
    the three 2,042 B/s), then offline every 30 s from 60 s: by the step the 887,206-byte limit is reached 505 s
    after the last reading (at 559.9 s), by the fit only after 2,525 s; broker 2 healthy throughout."""
    readings = [ok(t, vol(1, a, total=10 ** 8), vol(2, 50 * GB))
                for t, a in ((0, 6_100_000), (20, 6_402_446), (55, 6_044_886))]
    return readings + [ok(t, vol(1, None), vol(2, 50 * GB)) for t in range(60, int(offline_until) + 1, 30)]


FAST_STEP_LIMIT = Limits(Limit("bytes", 887_206))


def test_the_last_step_before_a_dir_went_offline_counts_for_as_long_as_it_stays_offline():
    """The step is the reading's, like its fit: a report many validities later still extrapolates at it (a dir
    that filled at the step's rate is full by then) instead of at the fit alone."""
    s = replace(settings(validity_s=60), limits=FAST_STEP_LIMIT)
    snaps = fast_last_step()
    summaries = list(decide_all(snaps, s))
    stopped = [sm.observed_at for sm, d in summaries if d.factor == 0.0]
    assert stopped == [x.observed_at for x in snaps if x.observed_at >= at(570)]
    assert {sm.closest_volumes[0].reason for sm, d in summaries if d.factor == 0.0} == {"offline-filling"}


def test_a_dir_that_went_offline_while_steady_or_freeing_keeps_its_last_reading():
    s = settings(validity_s=60)
    for free in ([40, 40, 40], [20, 30, 40], [11, 11, 11]):
        summaries = list(decide_all(went_offline(free, [30, 200, 4000]), s))
        assert [(d.factor, sm.violations) for sm, d in summaries] == [(1.0, 0)] * 6, free
        kept = summaries[-1][0].closest_volumes
        assert [(c.broker_id, c.available_bytes, c.reason) for c in kept][:1] == [(1, int(free[-1] * GB), None)]


def test_a_slowly_filling_offline_dir_violates_once_its_rate_reaches_the_limit_by_the_time_of_a_poll():
    # 10 MB/s from 12 GB at 20 s: the 10 GB limit is reached 200 s later, so at the poll at 240 s, not at 200 s.
    s = settings(validity_s=60)
    summaries = list(decide_all(went_offline([12.2, 12.1, 12.0], [30, 200, 240, 250]), s))
    assert [d.factor for _, d in summaries] == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert summaries[4][0].closest_volumes[0].eta_seconds == pytest.approx(200.0)   # its last reading's ETA


def test_the_extrapolation_compares_a_ratio_limit_with_the_last_total():
    ratio = Settings(Limits(Limit("ratio", 0.1)), dt.timedelta(seconds=60))
    # 7 GB dir: 50 MB/s from 2 GB at 20 s gives 0.7 GB (ratio 0.1) at 46 s.
    snaps = went_offline([3, 2.5, 2], [45], total=7 * GB)
    assert [d.factor for _, d in decide_all(snaps, ratio)] == [1.0, 1.0, 1.0, 1.0]
    snaps = went_offline([3, 2.5, 2], [47], total=7 * GB)
    assert [d.factor for _, d in decide_all(snaps, ratio)] == [1.0, 1.0, 1.0, 0.0]


def test_the_other_offline_policies_ignore_the_fill_rate():
    filling = went_offline([40, 30, 20], [30, 100])
    # last-known (Strimzi): the healthy last reading counts until it expires; then broker 1 is missing and the
    # fallback (0.5 here) applies once the decision is older than the validity.
    summaries = list(decide_all(filling, settings(validity_s=60, offline="last-known")))
    assert [(d.factor, d.source) for _, d in summaries][3:] == [(1.0, DecisionSource.OBSERVATION),
                                                                (0.5, DecisionSource.FALLBACK)]
    assert summaries[-1][0].missing_brokers == (1,)
    # violate: every offline report violates, a failed disk as well as a full one.
    steady = went_offline([40, 40, 40], [30])
    [*_, (sm, d)] = decide_all(steady, settings(validity_s=60, offline="violate"))
    assert d.factor == 0.0 and sm.closest_volumes[0].reason == "offline"


def back_with_its_dir_offline(fenced_policy: str = "pin"):
    """Broker 3 healthy (50 GB free), stopped (fenced) for 40 s, back with /d0 offline: its disk filled while it
    was down (the fault campaign, seed 1: another writer on the volume), then /d0 readable again at 100 s."""
    s = settings(validity_s=20, fenced=fenced_policy)
    snaps = [ok(0, vol(1, 50 * GB), vol(3, 50 * GB))]
    snaps += [ok(t, vol(1, 50 * GB), brokers=(1,), fenced=(3,)) for t in (10, 20, 30, 40)]
    snaps += [ok(t, vol(1, 50 * GB), vol(3, None)) for t in (50, 60, 70, 80, 90)]
    return list(decide_all(snaps + [ok(100, vol(1, 50 * GB), vol(3, 40 * GB))], s))


def test_a_broker_back_with_its_dir_offline_violates_whatever_its_reading_before_the_stop():
    """The reading pinned while its broker was fenced predates the broker's run: an offline dir it brings back may
    have filled meanwhile, so it violates like an offline dir with no reading (pin), until it is read again."""
    summaries = back_with_its_dir_offline()
    assert [d.factor for _, d in summaries] == [1.0] * 5 + [0.0] * 5 + [1.0]
    sm = summaries[5][0]
    assert sm.violations == 1 and sm.closest_volumes[0].broker_id == 3
    assert sm.closest_volumes[0].reason == "offline" and sm.closest_volumes[0].eta_seconds is None


def test_a_dir_failing_under_a_running_broker_still_keeps_its_healthy_reading():
    """Without a stop in between, an offline report after a healthy reading is a failed disk: no throttle."""
    s = settings(validity_s=20)
    snaps = [ok(0, vol(1, 50 * GB), vol(3, 50 * GB))] + [ok(t, vol(1, 50 * GB), vol(3, None)) for t in (10, 20, 60)]
    assert [d.factor for _, d in decide_all(snaps, s)] == [1.0] * 4


def test_fenced_brokers_must_be_covered_for_a_release():
    snaps = [ok(0, vol(1, 5 * GB), vol(2, 50 * GB)),
             ok(10, vol(1, 50 * GB), brokers=(1,), fenced=(3,)),
             ok(20, vol(1, 50 * GB), vol(3, 50 * GB), brokers=(1,), fenced=(3,))]
    out = list(decide_all(snaps, settings()))
    assert out[1][0].missing_brokers == (3,) and out[1][1].source is DecisionSource.RETAINED
    assert out[2][1].factor == 1.0 and out[2][1].source is DecisionSource.OBSERVATION


def full_broker_stops(fenced_policy: str):
    """Strimzi #40 as measured on Kafka 4.1: broker 3 at 5% free, then stopped cleanly and reported fenced."""
    s = settings(validity_s=20, fenced=fenced_policy)
    snaps = [ok(0, vol(1, 50 * GB), vol(2, 50 * GB), vol(3, 5 * GB))]
    snaps += [ok(t, vol(1, 50 * GB), vol(2, 50 * GB), brokers=(1, 2), fenced=(3,)) for t in range(10, 70, 10)]
    return factors(snaps, s)


def test_a_full_broker_that_stops_keeps_the_throttle_while_fenced():
    assert full_broker_stops("pin") == [(0.0, DecisionSource.OBSERVATION)] * 7


def test_fenced_expire_lets_a_stopped_full_broker_release_the_throttle():
    # Strimzi's behaviour: the reading expires; the snapshot is then incomplete, so the decision is retained
    # until the validity runs out and the fallback (0.5 here) applies with broker 3 still full.
    assert full_broker_stops("expire")[-1] == (0.5, DecisionSource.FALLBACK)


def test_a_fenced_brokers_pinned_reading_is_replaced_by_its_next_reading():
    s = settings(validity_s=20)
    snaps = [ok(0, vol(1, 50 * GB), vol(3, 5 * GB)),
             ok(10, vol(1, 50 * GB), brokers=(1,), fenced=(3,)),
             ok(50, vol(1, 50 * GB), brokers=(1,), fenced=(3,)),
             ok(60, vol(1, 50 * GB), vol(3, 50 * GB), brokers=(1, 3))]   # back, its disk cleaned up
    assert [f for f, _ in factors(snaps, s)] == [0.0, 0.0, 0.0, 1.0]


def partial_views(journal: str):
    """(snapshots, settings, [(factor, source, missing brokers)] per snapshot) of a journal with partial views."""
    obs, ret, fb = "OBSERVATION", "RETAINED", "FALLBACK"
    if journal == "stops":
        # Broker 2 does not answer (killed, before the controller fences it); brokers 1 and 3 did, and broker 3's
        # dir is past the hard limit.
        return [ok(0, vol(1, 50 * GB), vol(2, 50 * GB), vol(3, 50 * GB)),
                partial(10, vol(1, 50 * GB), vol(3, 5 * GB), brokers=(1, 2, 3)),
                partial(20, vol(1, 50 * GB), vol(3, 50 * GB), brokers=(1, 2, 3), status=Status.TIMEOUT),
                ok(30, vol(1, 50 * GB), vol(3, 50 * GB), brokers=(1, 3), fenced=(2,))], settings(validity_s=60), [
            (1.0, obs, []), (0.0, obs, [2]),
            (0.0, ret, [2]),   # broker 3's dir is fine again, but broker 2 still does not answer: no release
            (1.0, obs, [])]    # fenced: its reading at 0 s is pinned, the view complete
    if journal == "never_releases":
        return [ok(0, vol(1, 5 * GB), vol(2, 50 * GB)),
                partial(10, vol(1, 50 * GB), brokers=(1, 2)),      # broker 1 fine now, 2 silent
                partial(20, vol(1, None), brokers=(1, 2)),         # broker 1's dir offline: its reading pinned
                partial(80, vol(1, None), brokers=(1, 2)),
                ok(90, vol(1, None), vol(2, 50 * GB))], settings(validity_s=60, fallback=1.0), [
            (0.0, obs, []), (0.0, ret, [2]), (0.0, ret, [2]), (1.0, fb, [2]), (1.0, obs, [])]
    # A poll no broker answered (as every failed poll journaled before partial views were kept): its brokers list
    # changes nothing and nobody is missing.
    return [ok(0, vol(1, 5 * GB), vol(3, 50 * GB), brokers=(1, 3), fenced=(2,)),
            replace(failed(10, Status.DESCRIBE_LOG_DIRS_ERROR), brokers=(1, 2, 3))], settings(validity_s=60), [
        (0.0, obs, [2]), (0.0, ret, [])]


@pytest.mark.parametrize("journal", ["stops", "never_releases", "observes_nothing"])
def test_a_partial_view_is_an_observation_of_the_brokers_that_answered(journal):
    """A violation seen in a partial view stops at once (and pins as usual); the brokers that did not answer are
    missing, so it never releases."""
    snaps, s, want = partial_views(journal)
    summaries = list(decide_all(snaps, s))
    assert [(d.factor, d.source.value, list(sm.missing_brokers)) for sm, d in summaries] == want
    assert [sm.partial for sm, _ in summaries] == [x.status is not Status.SUCCESS and bool(x.volumes) for x in snaps]
    if journal == "stops":
        assert summaries[1][0].worst_volume.broker_id == 3 and summaries[1][1].valid_from == at(10)
    if journal == "never_releases":  # pinned from the partial view's reading at 10 s, kept past the validity
        assert summaries[3][0].closest_volumes[0].available_bytes == 50 * GB


def test_failed_snapshot_still_evicts():
    s = settings(validity_s=60)
    snaps = [ok(0, vol(1, 5 * GB)), failed(60)]
    assert [sm.violations for sm, _ in decide_all(snaps, s)] == [1, 0]


def test_one_decision_per_snapshot_even_unchanged():
    snaps = [ok(t, vol(1, 50 * GB)) for t in range(0, 100, 10)]
    assert len(run(snaps)) == 10


def test_clusters_are_independent():
    snaps = [ok(0, vol(1, 5 * GB), cluster="a"), ok(0, vol(1, 50 * GB), cluster="b")]
    out = {sm.cluster_id: d.factor for sm, d in decide_all(snaps, settings())}
    assert out == {"a": 0.0, "b": 1.0}


# --- property: a throttle is never released by an incomplete or failed snapshot --------------------

free = st.one_of(st.none(), st.integers(0, 100 * GB))


@st.composite
def journals(draw):
    n = draw(st.integers(1, 25))
    t, snaps = 0.0, []
    for _ in range(n):
        t += draw(st.sampled_from([1, 10, 30, 59, 60, 61, 120, 400]))
        if draw(st.integers(0, 5)) == 0:
            snaps.append(failed(t, draw(st.sampled_from(list(Status)[1:]))))
            continue
        brokers = draw(st.sets(st.integers(1, 4), min_size=1))
        fenced = draw(st.sets(st.integers(5, 6), max_size=1))
        reporting = draw(st.sets(st.sampled_from(sorted(brokers | fenced))))
        vols = [vol(b, draw(free), log_dir=d) for b in sorted(reporting)
                for d in draw(st.sets(st.sampled_from(["/a", "/b"]), min_size=1))]
        if vols and draw(st.integers(0, 4)) == 0:  # a partial view: the brokers not reporting did not answer
            snaps.append(partial(t, *vols, brokers=sorted(brokers), fenced=sorted(fenced),
                                 status=draw(st.sampled_from(list(Status)[1:]))))
            continue
        snaps.append(ok(t, *vols, brokers=sorted(brokers), fenced=sorted(fenced)))
    return snaps


@hsettings(max_examples=300, deadline=None)
@given(journals(), st.sampled_from(["pin", "last-known", "violate"]),
       st.sampled_from([None, 30 * GB]), st.floats(0, 1))
def test_never_released_by_incomplete_or_failed_snapshot(snaps, offline, soft, fallback):
    s = settings(soft_bytes=soft, fallback=fallback, offline=offline, validity_s=60)
    previous = None
    for summary, decision in decide_all(snaps, s):
        if previous is not None and decision.factor > previous.factor:
            rising_ok = summary.status is Status.SUCCESS and summary.complete
            assert rising_ok or decision.source is DecisionSource.FALLBACK, (summary, previous, decision)
            if decision.source is DecisionSource.FALLBACK:
                # Only the fallback may raise a factor without a complete observation, and only to itself.
                assert decision.factor == fallback
        previous = decision
