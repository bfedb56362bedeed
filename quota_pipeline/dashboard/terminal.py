"""The page's facts for a terminal (rich): the feed, every cluster riskiest first, the details of those at risk."""
from __future__ import annotations

import datetime as dt

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from quota_pipeline.core.display import text as shown, visible
from quota_pipeline.dashboard import text
from quota_pipeline.reader.log_text import printable
from quota_pipeline.core.config import MAX_CLOCK_SKEW
from quota_pipeline.core.model import OFFLINE_FILLING
from quota_pipeline.dashboard.history import Refused
from quota_pipeline.dashboard.records import DecisionView, VolumeView
from quota_pipeline.dashboard.view import ClusterSummary, FeedStatus, StopView, ViewSettings, volume_state

DETAILS = 3  # clusters shown in detail: the riskiest, when throttled, stale or on the fallback


def render(summaries: list[ClusterSummary], feed: FeedStatus, now: dt.datetime, settings: ViewSettings,
           unreadable_total: int = 0, refused: tuple[int, Refused | None] = (0, None)) -> RenderableType:
    parts: list[RenderableType] = [feed_line(feed, now, unreadable_total), *refused_line(*refused),
                                   overview_table(summaries, now, settings)]
    at_risk = [s for s in summaries if s.state != "OK" or s.stale or s.basis != "record"][:DETAILS]
    parts.extend(detail(s, now, settings) for s in at_risk)
    return Group(*parts)


def feed_line(feed: FeedStatus, now: dt.datetime, unreadable_total: int) -> Text:
    if feed.state == "following":
        line = Text(visible(f"{feed.topic} on {feed.bootstrap}: ") + ("live" if feed.caught_up else "reading history ..."),
                    style="green")
    elif feed.state == "connecting":
        line = Text(f"{visible(feed.message)} ({text.duration((now - feed.since).total_seconds())}) ...", style="yellow")
    else:
        line = Text(f"decision topic unavailable for {text.duration((now - feed.since).total_seconds())}: "
                    f"{visible(feed.message)}", style="bold red")
    if unreadable_total:
        line.append(f"  {unreadable_total} record(s) could not be read", style="yellow")
    return line


REFUSAL_RULES = (f"not signed with a configured key, written again, or dated further ahead of this clock than "
                 f"{MAX_CLOCK_SKEW} allows")


def refused_line(total: int, last: Refused | None) -> list[Text]:
    """Records refused as brokers refuse them (unsigned, written again, dated ahead): how many, the last one's place
    and its own reason, since the headline cannot know which rule refused each."""
    if not total:
        return []
    line = Text(f"{total} decision record(s) refused as the brokers refuse them ({REFUSAL_RULES}); only the "
                "pipeline may change the factor", style="bold red")
    if last is not None:
        line.append(f" (last: key {printable(last.key)} {printable(last.where)[1:-1]}: {last.reason})")
    return [line]


def overview_table(summaries: list[ClusterSummary], now: dt.datetime, settings: ViewSettings) -> Table:
    table = Table(title=f"clusters, riskiest first ({now:%H:%M:%S} UTC)", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    widest = max((len(visible(s.key)) for s in summaries), default=7)
    table.add_column("cluster", no_wrap=True, min_width=min(30, widest))
    table.add_column("factor", no_wrap=True, min_width=6)
    table.add_column("state")
    for column in ("below 1 since", "last decision", "closest log dir", "free", "ETA", "missing brokers"):
        table.add_column(column)  # these wrap in a narrow terminal; the cluster and its factor never do
    for s in summaries:
        d = s.latest
        closest = d.volumes[0] if d and d.volumes else None
        table.add_row(*(c if isinstance(c, Text) else shown(c) for c in (  # every cell as text, never markup
            s.key, Text(text.factor(s.factor), style=_factor_style(s.factor)), _state(s), _since(s, now),
            "-" if d is None else f"{d.source} {text.duration(s.age_seconds)} ago",
            "-" if closest is None else f"broker {closest.broker_id} {closest.log_dir}",
            "-" if closest is None else ("offline" if closest.offline else text.percent(closest.available_ratio)),
            _eta(s), "-" if d is None else text.brokers(d.missing_brokers))))
    if not summaries:
        table.caption = "no decision on the topic yet"
    return table


def detail(s: ClusterSummary, now: dt.datetime, settings: ViewSettings) -> Group:
    head = Text(f"\n{visible(s.key)}: ", style="bold")
    head.append(s.state, style=_factor_style(s.factor))
    head.append(f", factor {text.factor(s.factor)}: {visible(s.reason)}")
    lines: list[RenderableType] = [head]
    if s.stop is not None:
        lines.extend(stop_lines(s.stop, s.latest.limit if s.latest else {}))
    if s.stale and s.latest is not None:
        lines.append(Text(f"No decision for {text.duration(s.age_seconds)}: more than two check intervals "
                          f"({text.duration(settings.check_interval.total_seconds())} each). Is the streaming job "
                          "running and publishing?", style="bold red"))
    if s.unreadable:
        lines.append(Text(f"{s.unreadable} record(s) could not be read (last: {visible(s.last_error)})", style="yellow"))
    d = s.latest
    if d is None:
        return Group(*lines)
    if d.missing_brokers:
        lines.append(Text(f"missing brokers: {text.brokers(d.missing_brokers)}", style="yellow"))
    if d.note:
        lines.append(shown(d.note, style="yellow"))
    lines.append(volumes_table(d))
    return Group(*lines)


def stop_lines(stop: StopView, limit: dict) -> list[Text]:
    """The stop in force: its scope and count, the first refused topics (names escaped), and the dirs why."""
    first, more = stop.first_topics()
    head = Text(stop.headline, style="bold red")
    if first:
        head.append(": " + ", ".join(visible(t) for t in first) + (f" + {more} more" if more else ""))
    elif stop.topics is None:
        head.append(" of the cluster")
    why = "; ".join(f"broker {v.broker_id} {visible(v.log_dir)}: {volume_state(v, limit)}" for v in stop.dirs)
    unlisted = stop.violations - len(stop.dirs)
    if unlisted > 0:
        why += f"{'; ' if why else ''}{unlisted} more not listed in the record"
    return [head, Text(f"why: {stop.violations} log dir(s) at or below the hard limit"
                       + (f" ({why})" if why else ""), style="red")]


def volumes_table(d: DecisionView) -> Table:
    table = Table(box=None, pad_edge=False, title_justify="left",
                  title=shown(f"log dirs closest to the hard limit ({text.limits(d.limit)})"))
    for column in ("broker", "log dir", "available", "of total", "headroom", "filling at", "ETA", "largest partitions"):
        table.add_column(column)
    for v in d.volumes:
        table.add_row(*_volume_row(v, d.volumes_listed))
    return table


def _volume_row(v: VolumeView, listed: bool) -> list[Text]:
    available = (("offline, was filling" if v.reason == OFFLINE_FILLING else "offline") if v.offline
                 else f"{text.size(v.available_bytes)} ({text.percent(v.available_ratio)})")
    partitions = ", ".join(f"{p.topic}-{p.partition} {text.size(p.size_bytes)}" for p in v.top_partitions)
    return [shown(c) for c in (str(v.broker_id), v.log_dir, available, text.size(v.total_bytes), text.size(v.headroom_bytes),
            text.rate(v.fill_rate_bytes_per_second) if v.fill_rate_bytes_per_second else _idle(listed),
            _volume_eta(v.eta_seconds, listed),
            partitions or ("none listed" if listed else "not in a version 1 record"))]


def _state(s: ClusterSummary) -> Text:
    out = Text(s.state, style="bold red" if s.state in ("STOPPED", "THROTTLED") else "green" if s.state == "OK"
               else "yellow")
    if s.stale and s.latest is not None:
        out.append(" STALE", style="bold yellow")
    if s.basis == "fallback":
        out.append(" FALLBACK", style="bold yellow")
    if s.latest is not None and s.latest.predictive is not None and s.basis == "record":
        out.append(" PREDICTIVE", style="bold yellow")  # throttled ahead of the hard limit: the reason says why
    return out


def _factor_style(factor: float | None) -> str:
    return "yellow" if factor is None else "bold red" if factor == 0 else "yellow" if factor < 1 else "green"


def _since(s: ClusterSummary, now: dt.datetime) -> str:
    if s.throttled_since is None:
        return "-"
    held = text.duration((now - s.throttled_since).total_seconds())
    return f"{'at least ' if s.since_approx else ''}{s.throttled_since:%H:%M:%S} ({held})"


def _eta(s: ClusterSummary) -> str:
    return _volume_eta(s.eta_seconds, bool(s.latest and s.latest.volumes_listed))


def _volume_eta(seconds: float | None, listed: bool) -> str:
    if seconds is None:
        return "not filling" if listed else "-"
    return "at the limit now" if seconds <= 0 else f"in {text.duration(seconds)}"


def _idle(listed: bool) -> str:
    return "not filling" if listed else "-"
