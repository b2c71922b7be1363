"""LoadAware's arguments: upstream's LoadAwareSchedulingArgs with its defaults (``pkg/scheduler/apis/config/v1/
defaults.go``) and validation ranges (``validation/validation_pluginargs.go``), read from the extender's configuration
file.

Separate because the configuration loader reads them without the plugin.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from koordlet.ops.values import parse_duration
from scheduler.loadaware.names import CPU, INT64, MEMORY

log = logging.getLogger(__name__)

AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")


def frozen_map(values: Mapping[str, int]) -> Mapping[str, int]:
    """A read-only copy: the arguments and the parsed NodeMetric are shared by every call."""
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class AggregatedArgs:
    """Upstream's LoadAwareSchedulingAggregatedArgs; durations in seconds, 0 = the longest one reported."""
    usage_thresholds: Mapping[str, int] = field(default_factory=lambda: frozen_map({}))
    usage_aggregation_type: str = ""
    usage_aggregated_duration: float = 0.0
    score_aggregation_type: str = ""
    score_aggregated_duration: float = 0.0


@dataclass(frozen=True)
class LoadAwareArgs:
    """Upstream's LoadAwareSchedulingArgs after SetDefaults_LoadAwareSchedulingArgs.

    Built directly, the values are taken as given (tests use factors upstream's validation would refuse);
    :meth:`from_config` applies upstream's defaulting and validation to a plugin-args document.
    """
    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = 180
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: Mapping[str, int] = field(default_factory=lambda: frozen_map({CPU: 1, MEMORY: 1}))
    dominant_resource_weight: int = 0
    usage_thresholds: Mapping[str, int] = field(default_factory=lambda: frozen_map({CPU: 65, MEMORY: 95}))
    prod_usage_thresholds: Mapping[str, int] = field(default_factory=lambda: frozen_map({}))
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimated_scaling_factors: Mapping[str, int] = field(default_factory=lambda: frozen_map({CPU: 85, MEMORY: 70}))
    estimated_seconds_after_pod_scheduled: int | None = None
    estimated_seconds_after_initialized: int | None = None
    allow_customize_estimation: bool = False
    aggregated: AggregatedArgs | None = None
    supported_resources: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, doc: Mapping[str, Any]) -> LoadAwareArgs:
        """Plugin args as a KubeSchedulerConfiguration carries them (upstream's camelCase keys). Missing keys take
        upstream's defaults: resourceWeights {cpu: 1, memory: 1} unless dominantResourceWeight is set,
        usageThresholds {cpu: 65, memory: 95} when empty, estimatedScalingFactors filled per key from
        {cpu: 85, memory: 70}. ValueError names an unknown key or a bad value (upstream's validation ranges)."""
        return _args_from_config(doc)


_DEFAULTS = LoadAwareArgs()
_ARG_KEYS = ("apiVersion", "kind", "filterExpiredNodeMetrics", "nodeMetricExpirationSeconds",
             "enableScheduleWhenNodeMetricsExpired", "resourceWeights", "dominantResourceWeight", "usageThresholds",
             "prodUsageThresholds", "prodUsageIncludeSys", "scoreAccordingProdUsage", "estimator",
             "estimatedScalingFactors", "estimatedSecondsAfterPodScheduled", "estimatedSecondsAfterInitialized",
             "allowCustomizeEstimation", "aggregated", "supportedResources")
_AGGREGATED_KEYS = ("usageThresholds", "usageAggregationType", "usageAggregatedDuration", "scoreAggregationType",
                    "scoreAggregatedDuration")
_DEFAULT_ESTIMATOR = "defaultEstimator"


def _config_int(where: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: expected an integer, got {value!r:.80}")
    if not lo <= value <= hi:
        raise ValueError(f"{where}: {value} is outside {lo}..{hi}")
    return value


def _config_bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {value!r:.80}")
    return value


def _config_map(where: str, value: Any, lo: int, hi: int) -> dict[str, int]:
    """A map of resource name to an integer in lo..hi; null is an empty map (Go's nil map)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a map of resource name to integer, got {value!r:.80}")
    return {str(k): _config_int(f"{where}.{k}", v, lo, hi) for k, v in value.items()}


def config_duration(where: str, value: Any) -> float:
    """A Go duration ("5m", "1m30s") in seconds; null is 0. ValueError naming ``where`` otherwise."""
    if value is None:
        return 0.0
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a duration like 5m, got {value!r:.80}")
    try:
        return parse_duration(value)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _config_type(where: str, value: Any) -> str:
    if value is None or value == "":
        return ""
    if value not in AGGREGATION_TYPES:
        raise ValueError(f"{where}: {value!r:.80} is not one of {', '.join(AGGREGATION_TYPES)}")
    return str(value)


def _unknown_keys(where: str, doc: Mapping[str, Any], known: Iterable[str]) -> None:
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown:
        raise ValueError(f"{where}unknown key {unknown[0]!r} (known: {', '.join(known)})")


def _args_from_config(doc: Mapping[str, Any]) -> LoadAwareArgs:
    if not isinstance(doc, Mapping):
        raise ValueError(f"LoadAwareSchedulingArgs: expected a map, got {type(doc).__name__}")
    _unknown_keys("LoadAwareSchedulingArgs: ", doc, _ARG_KEYS)
    kind = doc.get("kind")
    if kind not in (None, "LoadAwareSchedulingArgs"):
        raise ValueError(f"kind: expected LoadAwareSchedulingArgs, got {kind!r:.80}")
    estimator = doc.get("estimator") or ""
    if not isinstance(estimator, str):
        raise ValueError(f"estimator: expected a string, got {estimator!r:.80}")
    if estimator not in ("", _DEFAULT_ESTIMATOR):      # upstream falls back to its only estimator too
        log.warning("loadaware estimator unknown, using the default estimator=%s default=%s", estimator,
                    _DEFAULT_ESTIMATOR)

    def flag(key: str, default: bool) -> bool:
        value = doc.get(key)
        return default if value is None else _config_bool(key, value)

    def seconds(key: str) -> int | None:
        value = doc.get(key)
        return None if value is None else _config_int(key, value, *INT64)

    expiration = doc.get("nodeMetricExpirationSeconds")
    expiration = (_DEFAULTS.node_metric_expiration_seconds if expiration is None
                  else _config_int("nodeMetricExpirationSeconds", expiration, 1, INT64[1]))
    weights = _config_map("resourceWeights", doc.get("resourceWeights"), 1, 100)
    dominant = doc.get("dominantResourceWeight")
    dominant = 0 if dominant is None else _config_int("dominantResourceWeight", dominant, 0, 100)
    if not weights and dominant == 0:
        weights = dict(_DEFAULTS.resource_weights)
    usage = _config_map("usageThresholds", doc.get("usageThresholds"), 0, 100) or dict(_DEFAULTS.usage_thresholds)
    # upstream does not range-check prodUsageThresholds; a percentage outside 0..100 is refused here all the same
    prod = _config_map("prodUsageThresholds", doc.get("prodUsageThresholds"), 0, 100)
    factors = {**_DEFAULTS.estimated_scaling_factors,
               **_config_map("estimatedScalingFactors", doc.get("estimatedScalingFactors"), 1, 100)}
    missing = sorted(set(weights) - set(factors))
    if missing:
        raise ValueError(f"estimatedScalingFactors: no factor for {missing[0]!r}, which resourceWeights weighs")
    supported = doc.get("supportedResources") or []
    if not isinstance(supported, list) or not all(isinstance(r, str) for r in supported):
        raise ValueError(f"supportedResources: expected a list of resource names, got {supported!r:.80}")
    return LoadAwareArgs(
        filter_expired_node_metrics=flag("filterExpiredNodeMetrics", True),
        node_metric_expiration_seconds=expiration,
        enable_schedule_when_node_metrics_expired=flag("enableScheduleWhenNodeMetricsExpired", False),
        resource_weights=frozen_map(weights), dominant_resource_weight=dominant,
        usage_thresholds=frozen_map(usage), prod_usage_thresholds=frozen_map(prod),
        prod_usage_include_sys=flag("prodUsageIncludeSys", False),
        score_according_prod_usage=flag("scoreAccordingProdUsage", False),
        estimated_scaling_factors=frozen_map(factors),
        estimated_seconds_after_pod_scheduled=seconds("estimatedSecondsAfterPodScheduled"),
        estimated_seconds_after_initialized=seconds("estimatedSecondsAfterInitialized"),
        allow_customize_estimation=flag("allowCustomizeEstimation", False),
        aggregated=_aggregated_from_config(doc.get("aggregated")),
        supported_resources=tuple(supported))


def _aggregated_from_config(raw: Any) -> AggregatedArgs | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"aggregated: expected a map, got {raw!r:.80}")
    _unknown_keys("aggregated: ", raw, _AGGREGATED_KEYS)
    return AggregatedArgs(
        usage_thresholds=frozen_map(_config_map("aggregated.usageThresholds", raw.get("usageThresholds"), 0, 100)),
        usage_aggregation_type=_config_type("aggregated.usageAggregationType", raw.get("usageAggregationType")),
        usage_aggregated_duration=config_duration("aggregated.usageAggregatedDuration",
                                                  raw.get("usageAggregatedDuration")),
        score_aggregation_type=_config_type("aggregated.scoreAggregationType", raw.get("scoreAggregationType")),
        score_aggregated_duration=config_duration("aggregated.scoreAggregatedDuration",
                                                  raw.get("scoreAggregatedDuration")))
