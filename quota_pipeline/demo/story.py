"""The demo's story in short lines: what the published decisions and the demo producer show, as they happen."""
from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from quota_pipeline.core.model import format_time, parse_time

FIRST_TOPICS = 10  # a stop's refused topics named in its line; the rest are counted


@dataclass(frozen=True)
class StoryLine:
    """One story line: when it happened (a decision's observed_at, or the moment the producer saw it) and what."""

    at: dt.datetime
    text: str

    def __str__(self) -> str:
        return f"{format_time(self.at)}  {self.text}"

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at.timestamp(), "text": self.text}


def _limit_text(limit: dict | None) -> str:
    if not limit:
        return "?"
    if limit.get("type", "").endswith("ratio"):
        return f"{limit['value']:.0%} free"
    return f"{int(limit['value']):,} bytes free"


def _volume_text(v: dict | None) -> str:
    if not v:
        return "no log dir"
    where = f"broker {v['broker_id']} {v['log_dir']}"
    ratio = v.get("available_ratio")
    return f"{where} ({'offline' if ratio is None else f'{ratio:.1%} free'})"


def _dir(v: dict | None) -> tuple[Any, Any] | None:
    return None if not v else (v["broker_id"], v["log_dir"])


def refused_topics_text(stop: dict | None) -> str:
    """The stop's scope in words: the topics it refuses by name (the first FIRST_TOPICS, then a count), or all."""
    if not stop or stop.get("scope") != "topics":
        return "writes refused to every topic of the cluster (scope cluster)"
    topics = list(stop.get("topics") or [])
    named = ", ".join(topics[:FIRST_TOPICS]) + (f" and {len(topics) - FIRST_TOPICS} more"
                                                if len(topics) > FIRST_TOPICS else "")
    return f"writes refused to {len(topics)} topic{'s' if len(topics) != 1 else ''}: {named} (scope topics)"


@dataclass
class Story:
    """`observe(record)` for every published decision (the record's JSON as a dict), `say(text)` for what the demo
    producer sees; each new line goes to `on_line` and is kept for the page (`lines()`)."""

    on_line: Callable[[StoryLine], Any] = lambda line: None
    started: float | None = None  # the demo process's start (wall time): the first decision says how long it took
    _lines: list[StoryLine] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last: dict | None = None
    _stop_dir: tuple[Any, Any] | None = None

    def lines(self) -> list[StoryLine]:
        with self._lock:
            return list(self._lines)

    def say(self, text: str, at: dt.datetime | None = None) -> None:
        line = StoryLine(at or dt.datetime.now(dt.timezone.utc), text)
        with self._lock:
            self._lines.append(line)
        self.on_line(line)

    def observe(self, record: dict) -> None:
        at = parse_time(record["observed_at"])
        for text in self._changes(self._last, record):
            self.say(text, at)
        self._last = record

    def _changes(self, old: dict | None, new: dict) -> list[str]:
        out: list[str] = []
        factor, source = new["throttle_factor"], new["source"]
        hard = _limit_text((new.get("limit") or {}).get("hard"))
        if old is None:
            took = "" if self.started is None else \
                f", {parse_time(new['decided_at']).timestamp() - self.started:.0f} s after the demo's start"
            out.append(f"first decision: factor {factor:.2f} from {new['active_brokers']} brokers and "
                       f"{new['active_log_dirs']} log dirs{took}")
            old = {**new, "throttle_factor": 1.0, "source": "OBSERVATION", "violations": 0, "missing_brokers": [],
                   "stop": None}
        out += self._brokers(old, new)
        if source == "FALLBACK" and old["source"] != "FALLBACK":
            out.append(f"no complete reading within the validity: the job fell back to factor {factor:.2f} "
                       f"(the configured fallback), which the brokers apply")
        elif source != "FALLBACK" and old["source"] == "FALLBACK":
            out.append(f"complete readings again: the job decides from them (factor {factor:.2f})")
        if new["violations"] > 0 and old["violations"] == 0:
            out.append(f"log dir filled: {_volume_text(new.get('worst_volume'))}, at or below the {hard} hard limit")
        old_factor = old["throttle_factor"]
        if factor == 0.0 and old_factor != 0.0:
            self._stop_dir = _dir(new.get("worst_volume"))
            out.append(f"stop began: {refused_topics_text(new.get('stop'))}")
        elif factor != 0.0 and old_factor == 0.0:
            why = (f"{self._stop_dir_now(new)} is above the {hard} hard limit again"
                   if new["violations"] == 0 and source != "FALLBACK" else "the job fell back (see above)")
            again = "accepted again" if factor == 1.0 else f"accepted again, slowed to {factor:.2f} (quota throttle)"
            out.append(f"stop released (factor {factor:.2f}): {why}; writes {again}")
        elif 0.0 < factor < 1.0 and old_factor == 1.0 and source != "FALLBACK":
            soft = _limit_text((new.get("limit") or {}).get("soft"))
            out.append(f"production slowed to {factor:.2f} (quota throttle): {_volume_text(new.get('worst_volume'))}"
                       f" is below the {soft} soft limit")
        elif factor == 1.0 and 0.0 < old_factor < 1.0 and old["source"] != "FALLBACK":
            out.append("production at full speed again (factor 1.00)")
        return out

    def _stop_dir_now(self, new: dict) -> str:
        """The log dir the stop was for, with its free space now when the record lists it among the closest."""
        if self._stop_dir is None:
            return "the full log dir"
        for v in new.get("closest_volumes") or []:
            if _dir(v) == self._stop_dir:
                return _volume_text(v)
        return "broker %s %s" % self._stop_dir

    @staticmethod
    def _brokers(old: dict, new: dict) -> list[str]:
        out = []
        gone, back = set(new["missing_brokers"]) - set(old["missing_brokers"]), \
            set(old["missing_brokers"]) - set(new["missing_brokers"])
        for b in sorted(gone):
            kept = ("the job keeps its last reading of it for the validity (RETAINED)"
                    if new["source"] == "RETAINED" else
                    f"the job decides factor {new['throttle_factor']:.2f} ({new['source']})")
            out.append(f"broker {b} missing (status {new['status']}): {kept}")
        for b in sorted(back):
            if new["active_brokers"] < old["active_brokers"]:
                out.append(f"broker {b} left the cluster (fenced): the job decides from the "
                           f"{new['active_brokers']} brokers that remain")
            else:
                out.append(f"broker {b} answers again")
        if not gone and not back and new["active_brokers"] > old["active_brokers"]:
            out.append(f"a broker rejoined the cluster: {new['active_brokers']} brokers")
        return out
