"""Simulator scenarios: load YAML/JSON, validate against the JSON Schema, turn into typed specs."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from quota_pipeline import resources

DEFAULT_CLUSTER_ID = "sim-cluster"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 29092
DEFAULT_TOTAL_BYTES = 10**12
DEFAULT_USED_RATIO = 0.25
DEFAULT_FENCE_AFTER = 9.0  # Kafka's broker.session.timeout.ms: a dead broker is fenced after 9 s
DEFAULT_ERROR_CODE = 31  # CLUSTER_AUTHORIZATION_FAILED, what a misconfigured ACL returns
FAULT_TYPES = (
    "broker_down", "broker_fenced", "slow", "log_dir_offline", "old_protocol",
    "no_byte_counts", "omit_log_dirs", "log_dirs_error", "describe_cluster_error", "corrupt",
)
APIS = ("ApiVersions", "Metadata", "DescribeCluster", "DescribeLogDirs")

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50}
_SIZE = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([kKMGTP]i?B|B)?\s*$")


class ScenarioError(ValueError):
    """A scenario that does not follow schemas/simulator_scenario.schema.json; the message names the field."""


def parse_size(value: int | float | str) -> float:
    """An integer/number of bytes or a string like '500GiB' / '1.5TB' / '-10MB' (rates)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ScenarioError(f"not a size: {value!r}; write bytes as an integer or e.g. '500GiB'")
    return float(match.group(1)) * _UNITS[(match.group(2) or "").upper()]


@dataclass(frozen=True)
class LogDirSpec:
    path: str
    total_bytes: int
    used_bytes: float
    fill_rate: float = 0.0
    timeline: tuple[tuple[float, float], ...] = ()  # (simulated second, used bytes)
    offline_when_full: bool = False
    statvfs: str | None = None
    topics: tuple[tuple[str, int], ...] = ()  # (topic, partitions) with a replica here, as DescribeLogDirs lists


@dataclass(frozen=True)
class BrokerSpec:
    broker_id: int
    log_dirs: tuple[LogDirSpec, ...]
    rack: str | None = None


@dataclass(frozen=True)
class FaultSpec:
    """One timed fault; brokers None means every broker."""

    type: str
    brokers: tuple[int, ...] | None = None
    log_dir: str | None = None
    at: float = 0.0
    until: float | None = None
    delay_ms: int = 0
    apis: tuple[str, ...] | None = None
    fence_after: float = DEFAULT_FENCE_AFTER
    error_code: int = DEFAULT_ERROR_CODE

    def active(self, t: float) -> bool:
        return self.at <= t and (self.until is None or t < self.until)

    def applies_to(self, broker_id: int) -> bool:
        return self.brokers is None or broker_id in self.brokers

    def affects_api(self, api: str) -> bool:
        return self.apis is None or api in self.apis

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "FaultSpec":
        _validate({"brokers": 1, "faults": [dict(raw)]})
        return _fault(raw)


@dataclass(frozen=True)
class Scenario:
    brokers: tuple[BrokerSpec, ...]
    faults: tuple[FaultSpec, ...] = ()
    cluster_id: str = DEFAULT_CLUSTER_ID
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    speed: float = 1.0
    end_after: float | None = None
    source: str = "<scenario>"


def load_scenario(source: str | Path | Mapping[str, Any] | Scenario) -> Scenario:
    """A Scenario from a YAML/JSON file path, a dict, or a Scenario (returned as is)."""
    if isinstance(source, Scenario):
        return source
    if isinstance(source, Mapping):
        return from_dict(source)
    path = Path(source)
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file; examples are in {resources.path('scenarios')}")
    text = path.read_text(encoding="utf-8")
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    return from_dict(raw, str(path))


def from_flags(brokers: int, log_dirs: int, **overrides: Any) -> Scenario:
    """The scenario behind `simulate --brokers N --log-dirs M`: N healthy brokers, M log dirs each."""
    return from_dict({"brokers": brokers, "log_dirs": log_dirs, **{k: v for k, v in overrides.items() if v is not None}},
                     "--brokers/--log-dirs")


def _validate(raw: Any, source: str = "<scenario>") -> None:
    schema = resources.schema("simulator_scenario")
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        while best.context:  # a oneOf/anyOf failure: report the branch that came closest, not "any of"
            best = jsonschema.exceptions.best_match(best.context)
        where = "/".join(str(p) for p in best.absolute_path) or "(top level)"
        raise ScenarioError(f"{source}: {where}: {best.message}; see schemas/simulator_scenario.schema.json")


def from_dict(raw: Any, source: str = "<scenario>") -> Scenario:
    """Validate a parsed scenario and build the typed Scenario; raises ScenarioError naming the field."""
    _validate(raw, source)
    defaults = dict(raw.get("defaults") or {})
    per_broker = raw.get("log_dirs", 1)
    raw_brokers = raw["brokers"]
    if isinstance(raw_brokers, int):
        raw_brokers = [{} for _ in range(raw_brokers)]
    brokers = []
    for i, b in enumerate(raw_brokers):
        dirs = b.get("log_dirs", per_broker)
        if isinstance(dirs, int):
            dirs = [{"path": f"/var/lib/kafka/data-{j}"} for j in range(dirs)]
        where = f"{source}: brokers/{i}"
        specs = tuple(_log_dir({**defaults, **d}, f"{where}/log_dirs/{j}") for j, d in enumerate(dirs))
        paths = [s.path for s in specs]
        if len(set(paths)) != len(paths):
            raise ScenarioError(f"{where}/log_dirs: the same path appears twice; give each log dir its own path")
        brokers.append(BrokerSpec(broker_id=b.get("id", i + 1), log_dirs=specs, rack=b.get("rack")))
    ids = [b.broker_id for b in brokers]
    if len(set(ids)) != len(ids):
        raise ScenarioError(f"{source}: brokers: broker ids must be unique (got {ids})")
    faults = tuple(_fault(f) for f in raw.get("faults") or ())
    for i, f in enumerate(faults):
        unknown = [b for b in (f.brokers or ()) if b not in ids]
        if unknown:
            raise ScenarioError(f"{source}: faults/{i}: no broker with id {unknown[0]} (brokers are {ids})")
        if f.until is not None and f.until <= f.at:
            raise ScenarioError(f"{source}: faults/{i}/until: must be after at ({f.at})")
    return Scenario(
        brokers=tuple(brokers), faults=faults,
        cluster_id=raw.get("cluster_id", DEFAULT_CLUSTER_ID), host=raw.get("host", DEFAULT_HOST),
        port=raw.get("port", DEFAULT_PORT), speed=float(raw.get("speed", 1.0)), end_after=raw.get("end_after"),
        source=source,
    )


def _used(spec: Mapping[str, Any], total: float, where: str) -> float:
    """Used bytes from whichever of used_bytes / available_bytes / used_ratio is set (the first wins)."""
    if "used_bytes" in spec:
        used = parse_size(spec["used_bytes"])
    elif "available_bytes" in spec:
        used = total - parse_size(spec["available_bytes"])
    else:
        used = spec.get("used_ratio", DEFAULT_USED_RATIO) * total
    if not 0 <= used <= total:
        raise ScenarioError(f"{where}: usage must lie between 0 and total_bytes ({int(total)})")
    return used


def _log_dir(spec: Mapping[str, Any], where: str) -> LogDirSpec:
    total = parse_size(spec.get("total_bytes", DEFAULT_TOTAL_BYTES))
    timeline = tuple(sorted((float(p["at"]), _used(p, total, f"{where}/timeline")) for p in spec.get("timeline") or ()))
    return LogDirSpec(
        path=spec["path"], total_bytes=int(total), used_bytes=_used(spec, total, where),
        fill_rate=parse_size(spec.get("fill_rate", 0)), timeline=timeline,
        offline_when_full=bool(spec.get("offline_when_full", False)), statvfs=spec.get("statvfs"),
        topics=tuple(sorted((str(name), int(n)) for name, n in (spec.get("topics") or {}).items())),
    )


def _fault(raw: Mapping[str, Any]) -> FaultSpec:
    if "broker" in raw:
        brokers: tuple[int, ...] | None = (raw["broker"],)
    elif isinstance(raw.get("brokers"), list):
        brokers = tuple(raw["brokers"])
    else:
        brokers = None
    return FaultSpec(
        type=raw["type"], brokers=brokers, log_dir=raw.get("log_dir"), at=float(raw.get("at", 0)),
        until=None if raw.get("until") is None else float(raw["until"]), delay_ms=int(raw.get("delay_ms", 0)),
        apis=tuple(raw["apis"]) if raw.get("apis") else None,
        fence_after=float(raw.get("fence_after", DEFAULT_FENCE_AFTER)),
        error_code=int(raw.get("error_code", DEFAULT_ERROR_CODE)),
    )
