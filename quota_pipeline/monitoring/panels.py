"""The panels of the Grafana dashboard, one function each, with their PromQL over the driver's metrics."""
from __future__ import annotations

from grafana_foundation_sdk.builders import stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders.common import TableSortByFieldState
from grafana_foundation_sdk.builders.dashboard import ThresholdsConfig
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.models.common import (
    GraphDrawStyle, LineInterpolation, TableCellBackgroundDisplayMode, TableColoredBackgroundCellOptions)
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef, DataTransformerConfig, DynamicConfigValue, Threshold, ThresholdsMode, ValueMap, ValueMappingResult)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
CLUSTER = 'cluster=~"$cluster"'
# Numbers the state timeline maps back to the decision's source.
SOURCE_CODES = {"OBSERVATION": (1, "green"), "RETAINED": (2, "yellow"), "FALLBACK": (3, "red")}
ETA_ALERT_SECONDS = 3600  # QuotaPipelineLogDirFillingUp fires below this
# On the value column only: in the defaults it would colour the label columns with the base colour too.
COLORED_BACKGROUND = TableColoredBackgroundCellOptions(mode=TableCellBackgroundDisplayMode.BASIC)


def query(expr: str, legend: str, ref_id: str = "A") -> Dataquery:
    return Dataquery().expr(expr).legend_format(legend).ref_id(ref_id).datasource(DATASOURCE)


def table_query(expr: str) -> Dataquery:
    return Dataquery().expr(expr).instant().format(PromQueryFormat.TABLE).ref_id("A").datasource(DATASOURCE)


def thresholds(*steps: tuple[float | None, str]) -> ThresholdsConfig:
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in steps])


def throttle_factor() -> timeseries.Panel:
    return (timeseries.Panel().title("Factor: open, throttled or stopped").datasource(DATASOURCE)
            .description("The factor in force per cluster: 1 = open; 0 < f < 1 = throttled to f (producer quotas "
                         "x f); 0 = stopped (writes refused; on brokers with only the quota callback, each producer "
                         "held to the quota throttle's floor).")
            .with_target(query(f"quota_pipeline_throttle_factor{{{CLUSTER}}}", "{{cluster}}"))
            .min(0).max(1).decimals(2).line_interpolation(LineInterpolation.STEP_AFTER).span(12).height(8))


def factor_source() -> statetimeline.Panel:
    expr = " + ".join(
        f'{code} * sum by (cluster) (quota_pipeline_throttle_factor_source{{{CLUSTER}, source="{source}"}})'
        for source, (code, _color) in SOURCE_CODES.items())
    mapping = ValueMap({str(code): ValueMappingResult(text=source, color=color)
                        for source, (code, color) in SOURCE_CODES.items()})
    return (statetimeline.Panel().title("Factor source").datasource(DATASOURCE)
            .description("OBSERVATION: decided from a snapshot; RETAINED: the last decision is kept (poll failed "
                         "or snapshot incomplete); FALLBACK: no valid decision for longer than the validity.")
            .with_target(query(expr, "{{cluster}}")).mappings([mapping]).span(12).height(8))


def decision_age() -> timeseries.Panel:
    return (timeseries.Panel().title("Time since the last observation, record and acknowledgement vs the alert "
                                     "thresholds")
            .datasource(DATASOURCE)
            .description("QuotaPipelineObservationStale / QuotaPipelineDecisionsStale fire when a line stays "
                         "above the cluster's threshold (2 check intervals); QuotaPipelineDecisionsUnacknowledged "
                         "when the time since the last acknowledgement stays above half the validity (a decision "
                         "stall, docs/design.md; at the whole validity the brokers apply their fallback).")
            .with_target(query(f"time() - quota_pipeline_last_observation_timestamp_seconds{{{CLUSTER}}}",
                               "{{cluster}} since the last observation", "A"))
            .with_target(query(f"time() - quota_pipeline_last_decision_timestamp_seconds{{{CLUSTER}}}",
                               "{{cluster}} since the last record", "B"))
            .with_target(query(f"2 * quota_pipeline_check_interval_seconds{{{CLUSTER}}}",
                               "{{cluster}} 2 check intervals", "C"))
            .with_target(query(f"quota_pipeline_last_acknowledged_decision_age_seconds{{{CLUSTER}}}",
                               "{{cluster}} since the last acknowledgement", "D"))
            .with_target(query(f"0.5 * quota_pipeline_validity_seconds{{{CLUSTER}}}",
                               "{{cluster}} half the validity", "E"))
            .unit("s").min(0).span(12).height(8))


def violating_log_dirs() -> timeseries.Panel:
    return (timeseries.Panel().title("Violating log dirs").datasource(DATASOURCE)
            .description("Log dirs in force at or below the hard limit; any above 0 stops production.")
            .with_target(query(f"quota_pipeline_limit_violating_volumes{{{CLUSTER}}}", "{{cluster}}"))
            .min(0).decimals(0).line_interpolation(LineInterpolation.STEP_AFTER)
            .thresholds(thresholds((None, "green"), (1, "red"))).span(12).height(8))


def available_ratio() -> table.Panel:
    return (table.Panel().title("Available ratio per log dir (lowest first)").datasource(DATASOURCE)
            .description("Available / total bytes of every log dir with a reading, now.")
            .with_target(table_query(f"quota_pipeline_volume_available_ratio{{{CLUSTER}}}"))
            .with_transformation(_keep_volume_columns())
            .sort_by([TableSortByFieldState().display_name("Value").desc(False)])
            .unit("percentunit").decimals(1).span(12).height(10))


def eta() -> table.Panel:
    return (table.Panel().title("Time to the hard limit (closest log dirs)").datasource(DATASOURCE)
            .description("For each cluster's 5 log dirs closest to the hard limit, the time until it is reached "
                         "at the current fill rate; log dirs that are not filling are not listed. Red: "
                         "QuotaPipelineLogDirFillingUp fires.")
            .with_target(table_query(f"quota_pipeline_volume_eta_seconds{{{CLUSTER}}}"))
            .with_transformation(_keep_volume_columns())
            .sort_by([TableSortByFieldState().display_name("Value").desc(False)])
            .unit("s").thresholds(thresholds((None, "red"), (ETA_ALERT_SECONDS, "orange"), (6 * 3600, "green")))
            .override_by_name("Value", [DynamicConfigValue("custom.cellOptions", COLORED_BACKGROUND)])
            .span(12).height(10))


def predictive() -> timeseries.Panel:
    return (timeseries.Panel().title("Predictive throttle: time to the hard limit vs the horizon")
            .datasource(DATASOURCE)
            .description("While a predictive throttle is in force (storage.per.volume.eta.horizon; the record's "
                         "`predictive`): the throttling log dir's time to the hard limit at the fill rate of its "
                         "lowest readings, and the horizon it is measured against; the factor is their ratio. No "
                         "line: no predictive throttle. QuotaPipelinePredictiveThrottle fires while one lasts.")
            .with_target(query(f"quota_pipeline_predictive_eta_seconds{{{CLUSTER}}}",
                               "{{cluster}} broker {{broker_id}} {{log_dir}} ETA", "A"))
            .with_target(query(f"quota_pipeline_predictive_horizon_seconds{{{CLUSTER}}}",
                               "{{cluster}} horizon", "B"))
            .unit("s").min(0).line_interpolation(LineInterpolation.STEP_AFTER).span(12).height(8))


def _keep_volume_columns() -> DataTransformerConfig:
    return DataTransformerConfig(id_val="organize", options={
        "excludeByName": {"Time": True, "__name__": True, "job": True, "instance": True},
        "indexByName": {"cluster": 0, "broker_id": 1, "log_dir": 2, "Value": 3},
    })


def snapshots_by_status() -> timeseries.Panel:
    expr = f"60 * sum by (cluster, status) (rate(quota_pipeline_snapshots_total{{{CLUSTER}}}[$__rate_interval]))"
    return (timeseries.Panel().title("Snapshots by status").datasource(DATASOURCE)
            .description("Polls per minute by outcome; anything but SUCCESS is a failed poll.")
            .with_target(query(expr, "{{cluster}} {{status}}")).unit("opm").min(0).span(12).height(8))


def micro_batch_duration() -> timeseries.Panel:
    panel = (timeseries.Panel().title("Micro-batch duration").datasource(DATASOURCE)
             .description("Quantiles over 10 minutes, per driver (the histogram has no cluster label).")
             .unit("s").min(0).span(12).height(8))
    for ref_id, q, name in (("A", "0.5", "p50"), ("B", "0.9", "p90"), ("C", "0.99", "p99")):
        expr = (f"histogram_quantile({q}, sum by (instance, le) "
                "(rate(quota_pipeline_micro_batch_duration_seconds_bucket[10m])))")
        panel = panel.with_target(query(expr, name + " {{instance}}", ref_id))
    return panel


def fallback_transitions() -> stat.Panel:
    expr = f"round(sum by (cluster) (increase(quota_pipeline_fallback_applied_total{{{CLUSTER}}}[$__range])))"
    return (stat.Panel().title("Transitions to the fallback (time range)").datasource(DATASOURCE)
            .description("How often each cluster fell back to throttle.factor.fallback in the selected range.")
            .with_target(query(expr, "{{cluster}}").instant())
            .decimals(0).thresholds(thresholds((None, "green"), (1, "red"))).span(12).height(8))


def cache_evictions() -> timeseries.Panel:
    expr = f"60 * sum by (cluster) (rate(quota_pipeline_cache_evictions_total{{{CLUSTER}}}[$__rate_interval]))"
    return (timeseries.Panel().title("Cache evictions").datasource(DATASOURCE)
            .description("Cached log dir readings that expired (older than the validity) per minute: brokers "
                         "that stopped reporting a log dir.")
            .with_target(query(expr, "{{cluster}}")).unit("opm").min(0).draw_style(GraphDrawStyle.BARS)
            .span(12).height(8))
