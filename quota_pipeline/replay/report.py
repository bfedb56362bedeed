"""`replay --report`: one self-contained HTML page (matplotlib PNGs as data URIs, no external resource)."""
from __future__ import annotations

import base64
import html
import io
from typing import Sequence

import numpy as np
import pandas as pd

from quota_pipeline.core.config import Limit
from quota_pipeline.replay.report_frames import ReportFrames
from quota_pipeline.replay.sweep import SweepRow

MAX_CLUSTERS = 10  # the most throttled first; a page with hundreds of charts is read by nobody
THROTTLED, FALLBACK = "#d62728", "#9467bd"
GIB = 1024 ** 3
CSS = """body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
img{display:block;max-width:100%;margin:8px 0 20px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
p.note{color:#555;font-size:13px}"""


def render(frames: ReportFrames, sweep: Sequence[SweepRow] = (), title: str = "Replay report") -> str:
    """The page as a string: per cluster (the most throttled first) the factor over time with throttle episodes
    shaded, the worst log dir against the limits, the per-broker heat map; and the sweep comparison if any."""
    import matplotlib

    matplotlib.use("Agg")  # no display; the charts are PNG bytes
    # Cluster ids and log dirs are outside text: `$...$` in one must be drawn, not parsed as mathtext.
    with matplotlib.rc_context({"text.parse_math": False}):
        return _page(frames, sweep, title)


def _page(frames: ReportFrames, sweep: Sequence[SweepRow], title: str) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p class='note'>Limits: {html.escape(_limits_text(frames))}. All times UTC.</p>"]
    if sweep:
        parts.append(f"<h2>What-if sweep: {html.escape(sweep[0].key)}</h2>")
        parts.append(_img(sweep_chart(sweep), f"sweep of {sweep[0].key}"))
        parts.append(_sweep_table(sweep))
    order = _clusters_by_throttling(frames.decisions)
    for cluster in order[:MAX_CLUSTERS]:
        d = frames.decisions[frames.decisions.cluster_id == cluster]
        parts.append(f"<h2>Cluster {html.escape(str(cluster))}</h2>")
        parts.append(_img(factor_chart(d, cluster), f"throttle factor of {cluster}"))
        w = frames.worst[frames.worst.cluster_id == cluster]
        if len(w):
            parts.append(_img(worst_chart(w, d, frames, cluster), f"worst log dir of {cluster}"))
        h = frames.heat[frames.heat.cluster_id == cluster]
        if len(h):
            parts.append(_img(heat_chart(h, frames.bucket_s.get(cluster, 0.0), cluster), f"heat map of {cluster}"))
    if len(order) > MAX_CLUSTERS:
        parts.append(f"<p class='note'>{len(order) - MAX_CLUSTERS} more cluster(s) not drawn.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def episodes(times: pd.Series, throttled: np.ndarray) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """(start, end) of each run of throttled decisions; a run ends at the next unthrottled decision (or the last)."""
    out = []
    start = None
    t = list(times)
    for k, on in enumerate(throttled):
        if on and start is None:
            start = t[k]
        elif not on and start is not None:
            out.append((start, t[k]))
            start = None
    if start is not None:
        out.append((start, t[-1]))
    return out


def factor_chart(d: pd.DataFrame, cluster: str) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 3.2), dpi=96)
    throttled = (d.throttle_factor < 1.0).to_numpy()
    fallback = d.fallback.to_numpy(dtype=bool)
    for k, (a, b) in enumerate(episodes(d.observed_at, throttled & ~fallback)):
        ax.axvspan(a, b, color=THROTTLED, alpha=0.15, lw=0, label="throttled" if k == 0 else None)
    for k, (a, b) in enumerate(episodes(d.observed_at, fallback)):
        ax.axvspan(a, b, color=FALLBACK, alpha=0.2, lw=0, label="fallback (no valid observation)" if k == 0 else None)
    ax.step(d.observed_at, d.throttle_factor, where="post", color="#1f77b4", lw=1.2, label="throttle factor")
    ax.set_ylim(-0.05, 1.08)
    ax.set_ylabel("throttle factor")
    n = int((throttled & ~np.concatenate([[False], throttled[:-1]])).sum())
    ax.set_title(f"{cluster}: throttle factor over time ({n} throttle episode(s))", loc="left", fontsize=11)
    _time_axis(ax)
    _legend_right(ax)
    return _png(fig)


def worst_chart(w: pd.DataFrame, d: pd.DataFrame, frames: ReportFrames, cluster: str) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 3.2), dpi=96)
    broker, log_dir = w.broker_id.iloc[0], w.log_dir.iloc[0]
    hard, soft = frames.limits.hard, frames.limits.soft
    if hard.kind == "ratio":
        ax.plot(d.observed_at, d.min_available_ratio * 100, color="#bbbbbb", lw=0.8,
                label="least available of all log dirs in force")
        ax.plot(w.observed_at, w.available_ratio * 100, color="#1f77b4", lw=1.2,
                label=f"broker {broker} {log_dir}")
        ax.set_ylabel("available (% of total)")
    else:
        ax.plot(w.observed_at, w.available_bytes / GIB, color="#1f77b4", lw=1.2, label=f"broker {broker} {log_dir}")
        ax.set_ylabel("available (GiB)")
    for limit, name, color in ((hard, "hard limit", THROTTLED), (soft, "soft limit", "#ff7f0e")):
        if limit is not None and limit.kind == hard.kind:
            ax.axhline(_in_axis_units(limit), color=color, ls="--", lw=1.2, label=f"{name} {_limit_text(limit)}")
    # An offline log dir (KAFKA_STORAGE_ERROR) has no bytes to draw: its spans are shaded instead.
    for k, (a, b) in enumerate(episodes(w.observed_at, w.offline.to_numpy(dtype=bool))):
        ax.axvspan(a, b, color="#555555", alpha=0.18, lw=0, label="offline (no reading)" if k == 0 else None)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{cluster}: the log dir closest to the hard limit, broker {broker} {log_dir}", loc="left", fontsize=11)
    _time_axis(ax)
    _legend_right(ax)
    return _png(fig)


def heat_chart(h: pd.DataFrame, bucket_s: float, cluster: str) -> bytes:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    grid = h.pivot_table(index="broker_id", columns="observed_at", values="min_ratio", aggfunc="min")
    brokers = list(grid.index)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.22 * max(4, min(len(brokers), 60))), dpi=96)
    starts = mdates.date2num(pd.DatetimeIndex(grid.columns).tz_convert(None).to_pydatetime())
    edges = np.append(starts, starts[-1] + max(bucket_s, 1.0) / 86400)
    mesh = ax.pcolormesh(edges, np.arange(len(brokers) + 1), grid.to_numpy() * 100, cmap="RdYlGn", vmin=0,
                         vmax=max(20.0, float(np.nanmax(grid.to_numpy())) * 100 if grid.size else 20.0))
    ax.set_yticks(np.arange(len(brokers)) + 0.5)
    ax.set_yticklabels([str(b) for b in brokers], fontsize=8 if len(brokers) < 40 else 5)
    ax.set_ylabel("broker")
    ax.xaxis_date()
    fig.colorbar(mesh, ax=ax, pad=0.01).set_label("least available (%)")
    ax.set_title(f"{cluster}: least available per broker over all its log dirs ({_duration(bucket_s)} per column; "
                 f"offline = 0 %, white = no reading)", loc="left", fontsize=11)
    _time_axis(ax)
    return _png(fig)


def sweep_chart(rows: Sequence[SweepRow]) -> bytes:
    """Per setting, summed over clusters: hours throttled, stopped (factor 0), in fallback, of the longest episode;
    episodes; GiB of production deferred; and the least headroom above the hard limit (of any cluster)."""
    import matplotlib.pyplot as plt

    values = list(dict.fromkeys(r.value for r in rows))
    total = {v: [r for r in rows if r.value == v] for v in values}
    hours = {
        "throttled": [sum(r.throttled_s for r in total[v]) / 3600 for v in values],
        "stopped (factor 0)": [sum(r.stopped_s for r in total[v]) / 3600 for v in values],
        "in fallback": [sum(r.fallback_s for r in total[v]) / 3600 for v in values],
        "longest episode": [max(r.longest_episode_s for r in total[v]) / 3600 for v in values],
    }
    count = [sum(r.episodes for r in total[v]) for v in values]
    deferred = [sum(r.deferred_bytes for r in total[v]) / GIB for v in values]
    heads = [[r.least_headroom_bytes for r in total[v] if r.least_headroom_bytes is not None] for v in values]
    headroom = [min(h) / GIB if h else np.nan for h in heads]
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.4), dpi=96, gridspec_kw={"width_ratios": [3, 2]})
    (ax, ax2), (ax3, ax4) = axes
    x = np.arange(len(values))
    width = 0.8 / len(hours)
    colors = (THROTTLED, "#111111", FALLBACK, "#8c564b")
    for k, (name, ys) in enumerate(hours.items()):
        bars = ax.bar(x + (k - (len(hours) - 1) / 2) * width, ys, width, label=name, color=colors[k])
        ax.bar_label(bars, fmt="%.2g", fontsize=7)
    ax.set_ylabel("hours")
    ax.set_ylim(0, max(0.1, max(max(ys) for ys in hours.values())) * 1.18)  # room for the bar labels
    ax.legend(fontsize=8, ncols=4, loc="lower left", bbox_to_anchor=(0.0, 1.0), frameon=False)
    _bars(ax2, x, count, "#1f77b4", "throttle episodes", "%d")
    _bars(ax3, x, deferred, "#2ca02c", "production deferred (GiB)", "%.3g")
    _bars(ax4, x, headroom, "#ff7f0e", "least headroom above the hard limit (GiB)", "%.3g")
    for a in (ax, ax2, ax3, ax4):
        a.set_xticks(x, values)
        a.set_xlabel(_short(rows[0].key))
    clusters = len({r.cluster_id for r in rows})
    if clusters > 1:
        ax4.text(1.0, -0.3, f"summed over {clusters} clusters (longest episode, least headroom: of any)",
                 transform=ax4.transAxes, fontsize=8, ha="right", color="#555")
    return _png(fig)


def _bars(ax, x: np.ndarray, ys: list, color: str, title: str, fmt: str) -> None:
    """One small bar chart of the sweep, labelled, with its title as the y label's place."""
    ys = [0.0 if y is None or y != y else y for y in ys]
    bars = ax.bar(x, ys, 0.5, color=color)
    ax.bar_label(bars, fmt=fmt, fontsize=8)
    low, high = min(0.0, min(ys)), max(0.0, max(ys))
    pad = max(high - low, 1e-9) * 0.18
    ax.set_ylim(low - (pad if low < 0 else 0), high + pad if high > 0 else pad)
    ax.set_title(title, loc="left", fontsize=11)


def _sweep_table(rows: Sequence[SweepRow]) -> str:
    head = ("cluster", _short(rows[0].key), "time throttled", "time stopped (factor 0)", "episodes",
            "longest episode", "time in fallback", "least available while unthrottled", "least headroom",
            "production deferred")
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            r.cluster_id, r.value, _duration(r.throttled_s), _duration(r.stopped_s), r.episodes,
            _duration(r.longest_episode_s), _duration(r.fallback_s),
            "-" if r.min_ratio_unthrottled is None else f"{r.min_ratio_unthrottled:.2%}",
            _gib(r.least_headroom_bytes), _gib(r.deferred_bytes)))
        + "</tr>" for r in rows)
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{body}</table>" + SWEEP_NOTE


# What the predictive columns can and cannot show on a recorded journal (docs/design.md, the predictive step).
SWEEP_NOTE = ("<p class='note'>A journal records disks that did not react to the swept setting: least headroom is "
              "what the journal read, and a hard stop recorded stays a stop under any horizon. Production deferred "
              "is the sum over decisions of (1 - factor) times the bytes the log dirs grew by until the next "
              "snapshot (replicas included; a retention pass in the interval counts only its net growth): what "
              "the setting would have held back of the production the journal recorded.</p>")


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:,.1f} GiB"


def _clusters_by_throttling(d: pd.DataFrame) -> list:
    share = (d.throttle_factor < 1.0).groupby(d.cluster_id).mean()
    return sorted(share.index, key=lambda c: (-share[c], str(c)))


def _legend_right(ax) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def _time_axis(ax) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_xlabel("time (UTC)")
    ax.grid(True, alpha=0.3)


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _img(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _in_axis_units(limit: Limit) -> float:
    return limit.value * 100 if limit.kind == "ratio" else limit.value / GIB


def _limit_text(limit: Limit) -> str:
    return f"{limit.value:.2%}" if limit.kind == "ratio" else f"{limit.value / GIB:,.1f} GiB"


def _limits_text(frames: ReportFrames) -> str:
    soft = frames.limits.soft
    return f"hard {_limit_text(frames.limits.hard)} available" + (
        f", soft {_limit_text(soft)} (graded throttling between)" if soft else ", no soft limit")


def _short(key: str) -> str:
    return key.removeprefix("client.quota.callback.static.")


def _duration(seconds: float) -> str:
    """A span as people say it: 37 s, 5 min, 2 h 05 min, 3 d 4 h; "-" for none."""
    s = int(round(seconds or 0))
    if not s:
        return "-"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60:02d} s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
