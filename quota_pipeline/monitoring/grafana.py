"""The Grafana dashboard as code; `python -m quota_pipeline.monitoring.grafana > FILE` writes it."""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

try:
    from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import VariableRefresh, VariableSort
except ModuleNotFoundError as e:  # an optional extra: say how to get it
    raise ModuleNotFoundError(f"{e}; install it: python3 -m pip install -e '.[monitoring]'", name=e.name) from e

from quota_pipeline.monitoring import panels

CHECKED_IN = Path("conf/monitoring/grafana-dashboard.json")
REGENERATE = f"python -m quota_pipeline.monitoring.grafana > {CHECKED_IN}"


def variables() -> list[DatasourceVariable | QueryVariable]:
    datasource = DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    cluster = (QueryVariable("cluster").label("Cluster").datasource(panels.DATASOURCE)
               .query("label_values(quota_pipeline_throttle_factor, cluster)")
               .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
               .multi(True).include_all(True))
    return [datasource, cluster]


def dashboard() -> Dashboard:
    board = (Dashboard("quota-pipeline").uid("quota-pipeline").tags(["kafka", "quota-pipeline"])
             .description("Disk-pressure protection decisions of the quota-pipeline job (docs/monitoring.md).")
             .time("now-6h", "now").refresh("1m").timezone("browser").variables(variables()))
    sections = {
        "Decision": [panels.throttle_factor(), panels.factor_source(), panels.decision_age(),
                     panels.violating_log_dirs()],
        "Log dirs": [panels.available_ratio(), panels.eta(), panels.predictive()],
        "Pipeline": [panels.snapshots_by_status(), panels.micro_batch_duration(), panels.fallback_transitions(),
                     panels.cache_evictions()],
    }
    ids = itertools.count(1)  # Grafana wants unique panel ids; the library leaves them unset
    for title, members in sections.items():
        board = board.with_row(Row(title).id(next(ids)))
        for panel in members:
            board = board.with_panel(panel.id(next(ids)))
    return board


def render() -> str:
    """The dashboard JSON as checked in: keys sorted, two-space indent, final newline."""
    return json.dumps(dashboard().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quota_pipeline.monitoring.grafana", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", nargs="?", const=CHECKED_IN, type=Path, metavar="FILE",
                        help=f"exit 1 when FILE (default {CHECKED_IN}) differs from the generated dashboard")
    args = parser.parse_args(argv)
    if args.check is None:
        sys.stdout.write(render())
        return 0
    try:
        current = args.check.read_text(encoding="utf-8")
    except OSError as e:
        print(f"error: {args.check}: {e.strerror}", file=sys.stderr)
        return 1
    if current != render():
        print(f"{args.check} differs from the generated dashboard; regenerate it: {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
