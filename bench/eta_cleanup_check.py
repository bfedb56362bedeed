"""The predictive step around clean-ups: issue 21's study day (a 5 MB/s fill on a retention sawtooth, and the same
cleaned up at 9 h, after the limit) and 22 days of harness/month_model.py (closed loop, PT0S and PT1H): when the factor
first falls, when the limit is reached, and how soon after each clean-up the factor is 1 again. Prints JSON.

    PYTHONPATH=<a tree of quota-pipeline>:. python3 -P -m bench.eta_cleanup_check    # compare two commits' trees

-P keeps the working directory off the front of sys.path, so the package comes from the tree named first.
"""
import datetime as dt
import json

import numpy as np
from quota_pipeline.core import trend
from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.decision import decide_all
from quota_pipeline.core.model import Status, Volume, VolumeSnapshot
from harness import month_model


class study:  # issue 21's design study: a retention sawtooth with an optional incident on top
    @staticmethod
    def sawtooth(days=1, step=10, total=1000e9, used0=850e9, write=20e6, period=300, incident=None):
        t = np.arange(0, days * 86400, step, dtype=float)
        used = np.empty_like(t); u = used0; last_del = 0.0
        for i, x in enumerate(t):
            u += write * step
            if incident and incident[0] <= x < incident[1]:
                u += incident[2] * step
            if x - last_del >= period:
                u -= write * period; last_del = x
            used[i] = u
        return t, total - used


T0 = dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc)
HARD = 100e9


def limit_settings(h):
    return Settings(Limits(Limit("ratio", 0.05)), dt.timedelta(minutes=5), 1.0, eta_horizon=dt.timedelta(seconds=h))


def main() -> None:
    out = {"trend": trend.__file__}
    # The study's day: the sawtooth with the 5 MB/s incident from 6 h to 10 h; and a variant whose extra bytes are
    # deleted at 9 h (a clean-up while throttled).
    for name, cleanup in (("study incident", None), ("study incident, cleaned up at 9 h", 9 * 3600)):
        t, a = study.sawtooth(incident=(6 * 3600, 10 * 3600, 5e6))
        if cleanup is not None:
            extra = np.where(t >= 6 * 3600, np.minimum(t, 10 * 3600) - 6 * 3600, 0) * 5e6  # bytes of the incident
            a = np.where(t >= cleanup, a + extra, a)
        for h in (1800, 3600):
            s = Settings(Limits(Limit("bytes", int(HARD))), dt.timedelta(minutes=5), 1.0,
                         eta_horizon=dt.timedelta(seconds=h))
            snaps = [VolumeSnapshot("c", T0 + dt.timedelta(seconds=float(x)), Status.SUCCESS, (1,), (),
                                    (Volume(1, "/d", 1000 * 10 ** 9, int(y)),)) for x, y in zip(t, a)]
            f = np.array([d.factor for _, d in decide_all(snaps, s)])
            reach = t[np.argmax(a <= HARD)] if (a <= HARD).any() else None
            first = t[np.argmax(f < 1.0)] if (f < 1.0).any() else None
            rec = {"limit_at": reach, "first_below_1": first, "throttled_s": float((f < 1).sum() * 10),
                   "steady_part_throttled": bool((f[t < 6 * 3600] < 1).any())}
            if cleanup is not None:
                after = t >= cleanup
                rec["factor_before_cleanup"] = float(f[np.argmax(after) - 1])
                rec["released_s_after_cleanup"] = float(t[after][np.argmax(f[after] == 1.0)] - cleanup)
            out[f"{name} H={h}"] = rec

    # The month model, 22 days (both incidents and their clean-ups), closed loop, per horizon.
    ends = {"incident 1": month_model.INCIDENT_1[0] + month_model.INCIDENT_1[1], "incident 2": month_model.INCIDENT_2[0] + month_model.INCIDENT_2[1]}
    starts = {"incident 1": month_model.INCIDENT_1[0], "incident 2": month_model.INCIDENT_2[0]}
    # PT0S keeps its snapshots: they are also the recorded journal decided again below.
    runs = {h: month_model.closed_loop(limit_settings(h), days=22, keep=h == 0) for h in (0, 3600)}
    for h, r in runs.items():
        for inc in ends:
            lo, hi = starts[inc] - 6 * 3600, ends[inc] + 6 * 3600
            w = (r.t_s >= lo) & (r.t_s < hi)
            first_limit = r.t_s[(r.t_s >= starts[inc]) & (r.headroom <= 0)]
            first_drop = r.t_s[(r.t_s >= starts[inc] - 3600) & (r.factor < 1.0)]
            after = r.t_s >= ends[inc]
            rel = r.t_s[after & (r.factor == 1.0)]
            out[f"month {inc} H={h}"] = {
                "first_factor_drop_s_after_start": float(first_drop[0] - starts[inc]) if len(first_drop) else None,
                "first_at_limit_s_after_start": float(first_limit[0] - starts[inc]) if len(first_limit) else None,
                "stopped_min": float((r.factor[w] == 0).sum()), "throttled_min": float((r.factor[w] < 1).sum()),
                "factor_at_cleanup": float(r.factor[after][0]), "released_s_after_cleanup": float(rel[0] - ends[inc]) if len(rel) else None,
                "throttled_min_after_cleanup": float((r.factor[after & (r.t_s < hi)] < 1).sum()),
                "least_headroom_gib": float(r.headroom[w].min() / 2 ** 30)}
        steady = np.ones(len(r.t_s), bool)
        for inc in ends:
            steady &= ~((r.t_s >= starts[inc] - 6 * 3600) & (r.t_s < ends[inc] + 6 * 3600))
        out[f"month steady days H={h}"] = {"throttled_min": float((r.factor[steady] < 1).sum())}
    print(json.dumps(out, indent=1, default=float))

    # The recorded journal (the month under PT0S, 22 days) decided again per horizon (replay's sweep, by the reference).
    rec = runs[0]
    for h in (3600,):
        f = np.array([d.factor for _, d in decide_all(rec.snapshots, limit_settings(h))])
        eps = int(((f < 1)[1:] & ~(f < 1)[:-1]).sum() + (f[0] < 1))
        rel = {}
        for inc in ends:
            after = rec.t_s >= ends[inc]
            r1 = rec.t_s[after & (f == 1.0)]
            rel[inc] = float(r1[0] - ends[inc]) if len(r1) else None
        out[f"recorded H={h}"] = {"stopped_min": float((f == 0).sum()), "throttled_min": float((f < 1).sum()),
                                  "episodes": eps, "released_s_after_cleanup": rel}
    print(json.dumps({k: v for k, v in out.items() if k.startswith("recorded")}, indent=1))


if __name__ == "__main__":
    main()
