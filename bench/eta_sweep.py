"""Benchmark: the predictive policy on a month of one cluster's history (issue 21, point 4).

    python3 -m bench.eta_sweep                       # journal, replay --sweep and --report, the closed-loop model
    python3 -m bench.eta_sweep --no-model            # the replay sweep alone

1. Writes the month (harness/month_model.py: 3 brokers x 4 log dirs, a reading a minute, daily peaks, retention's
   sawtooth, a runaway producer on day 9 and an unlimited-retention topic from day 20) as the cluster recorded it
   under its own policy, the hard limit alone (horizon PT0S): bench/out/eta-month/journal.jsonl.gz.
2. Runs `quota-pipeline replay --sweep storage.per.volume.eta.horizon=PT0S,PT10M,PT30M,PT1H --report` over it
   (a subprocess) and prints the sweep. The journal's disks did not react to the swept horizons: a hard stop it
   recorded stays a stop whatever the horizon, and its least headroom is the same for all. The report's sweep chart
   is also written to --out/eta_sweep_replay.png.
3. The closed-loop model (a model, not history): the same month run once per horizon through the reference
   decision functions (core/reference/decision.py), the factor each snapshot decided slowing what producers write until the
   next one. Prints per horizon the time stopped and throttled, the least headroom, the production deferred
   (bytes producers wanted to write minus bytes written), and draws --out/eta_sweep_model.png.

--out (default bench/results/, the charts bench/RESULTS.md shows) takes the two charts. Prints the load average
before and after (the machine is shared) and writes bench/out/eta-month/results.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from quota_pipeline.core import config as cfg
from quota_pipeline.core.settings import Settings
from harness import month_model

ROOT = Path(__file__).resolve().parent.parent

OUT = ROOT / "bench" / "out" / "eta-month"
CHARTS = ROOT / "bench" / "results"
CONFIG = """client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05
client.quota.callback.static.throttle.factor.validity.duration=PT5M
client.quota.callback.static.throttle.factor.fallback=1.0
client.quota.callback.static.storage.check.interval=PT60S
client.quota.callback.static.storage.per.volume.eta.window=PT1H
"""
HORIZONS = ("PT0S", "PT10M", "PT30M", "PT1H")
GIB = 1024 ** 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-model", action="store_true", help="skip the closed-loop model")
    ap.add_argument("--no-replay", action="store_true", help="skip the replay sweep")
    ap.add_argument("--out", type=Path, default=CHARTS, help=f"where the two charts go (default {CHARTS})")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    conf_path = OUT / "month.properties"
    conf_path.write_text(CONFIG)
    conf = cfg.load(conf_path, require_admin=False)
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load average before {_load()}", flush=True)
    journal = OUT / "journal.jsonl.gz"
    results: dict = {"config": CONFIG, "horizons": HORIZONS}
    if not journal.exists():
        started = time.monotonic()
        run = month_model.closed_loop(Settings.of(conf), keep=True)
        with gzip.open(journal, "wt", encoding="utf-8") as fh:
            for snap in run.snapshots:
                fh.write(json.dumps(snap.to_json(), separators=(",", ":")) + "\n")
        print(f"journal: {len(run.snapshots)} snapshots x {len(run.snapshots[0].volumes)} log dirs in "
              f"{time.monotonic() - started:.0f} s -> {journal}", flush=True)
    if not args.no_replay:
        results["replay"] = replay_sweep(conf_path, journal, args.out / "eta_sweep_replay.png")
    if not args.no_model:
        results["model"] = model(conf, args.out / "eta_sweep_model.png")
    (OUT / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"load average after {_load()}")
    return 0


def replay_sweep(conf_path: Path, journal: Path, chart: Path) -> list[dict]:
    """`quota-pipeline replay --sweep ... --report` over the journal; the sweep rows, printed as markdown."""
    out = OUT / "decisions.parquet"
    cmd = [sys.executable, "-m", "quota_pipeline.cli", "replay", "--config", str(conf_path), "--input", str(journal),
           "--output", str(out), "--sweep", "storage.per.volume.eta.horizon=" + ",".join(HORIZONS),
           "--report", str(OUT / "report.html")]
    print("$ " + " ".join(cmd[1:]), flush=True)
    started = time.monotonic()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    rows = json.loads(Path(str(out) + ".sweep.json").read_text())
    print(f"replay --sweep: {time.monotonic() - started:.0f} s (start-up included)\n")
    print("| horizon | time stopped (factor 0) | time throttled (factor < 1) | episodes | least headroom | "
          "production deferred |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['value']} | {_duration(r['stopped_s'])} | {_duration(r['throttled_s'])} | {r['episodes']} | "
              f"{r['least_headroom_bytes'] / GIB:.1f} GiB | {r['deferred_bytes'] / GIB:.1f} GiB |")
    print(flush=True)
    from quota_pipeline.replay import report
    from quota_pipeline.replay.sweep import SweepRow

    import matplotlib

    matplotlib.use("Agg")
    chart.write_bytes(report.sweep_chart([SweepRow(**r) for r in rows]))
    print(f"chart: {chart} (the report's sweep comparison)")
    return rows


def model(conf: cfg.Config, chart: Path) -> list[dict]:
    """The closed-loop month per horizon; per incident and in all: stopped, throttled, least headroom, deferred."""
    base = Settings.of(conf)
    rows, runs = [], {}
    for h in HORIZONS:
        started = time.monotonic()
        settings = Settings(**{**base.__dict__, "eta_horizon": cfg.BY_NAME[cfg.ETA_HORIZON].convert(h)})
        run = runs[h] = month_model.closed_loop(settings)
        span = np.diff(run.t_s, append=run.t_s[-1:])
        row = {"horizon": h, "seconds": round(time.monotonic() - started, 1)}
        for name, (lo, hi) in {"all": (0, np.inf), **_incident_days()}.items():
            m = (run.t_s >= lo) & (run.t_s < hi)
            row[name] = {"stopped_s": float(span[m & (run.factor <= 0)].sum()),
                         "throttled_s": float(span[m & (run.factor < 1)].sum()),
                         "least_headroom_bytes": float(run.headroom[m].min()),
                         "deferred_bytes": float((run.wanted - run.written)[m].sum()),
                         "written_bytes": float(run.written[m].sum())}
        rows.append(row)
        print(f"model {h}: {row['seconds']} s", flush=True)
    print("\nclosed-loop model (the disks react to the factor; a model, not history):\n")
    print("| horizon | window | time stopped (factor 0) | time throttled (factor < 1) | least headroom | "
          "production deferred |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        for name in ("all", "incident 1", "incident 2"):
            x = r[name]
            print(f"| {r['horizon']} | {name} | {_duration(x['stopped_s'])} | {_duration(x['throttled_s'])} | "
                  f"{x['least_headroom_bytes'] / GIB:.1f} GiB | {x['deferred_bytes'] / GIB:.1f} GiB |")
    draw(runs, chart)
    return rows


def _incident_days() -> dict[str, tuple[float, float]]:
    """Each incident's window in seconds since the start: from 6 hours before it to 6 hours after its clean-up."""
    return {f"incident {i}": (a - 6 * 3600, a + length + 6 * 3600)
            for i, (a, length, _) in enumerate((month_model.INCIDENT_1, month_model.INCIDENT_2), start=1)}


def draw(runs: dict, path: Path) -> None:
    """Per incident: the factor and the least headroom over time under each horizon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows = _incident_days()
    fig, axes = plt.subplots(2, len(windows), figsize=(12, 6), dpi=96, sharex="col")
    for j, (name, (lo, hi)) in enumerate(windows.items()):
        for h, run in runs.items():
            m = (run.t_s >= lo) & (run.t_s < hi)
            hours = (run.t_s[m] - lo) / 3600
            axes[0, j].step(hours, run.factor[m], where="post", lw=1.0, label=h)
            axes[1, j].plot(hours, run.headroom[m] / GIB, lw=1.0, label=h)
        axes[0, j].set_title(f"{name}: throttle factor", loc="left", fontsize=11)
        axes[0, j].set_ylim(-0.05, 1.08)
        axes[1, j].set_title(f"{name}: least headroom above the hard limit (GiB)", loc="left", fontsize=11)
        axes[1, j].axhline(0, color="#d62728", ls="--", lw=1)
        axes[1, j].set_xlabel("hours from 6 h before the incident")
        for a in axes[:, j]:
            a.grid(True, alpha=0.3)
    axes[0, 0].legend(title="eta.horizon", fontsize=8)
    fig.suptitle("Closed-loop model of the month (production slowed by the factor in force): a model, not history",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"\nchart: {path}")


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min" if s else "0"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
