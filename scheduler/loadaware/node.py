"""What LoadAware keeps of a Node (its usage-threshold profile and its cached state) and the decoders of the two Node
annotations it reads: ``node.koordinator.sh/raw-allocatable`` (the capacity before amplification) and
``scheduling.koordinator.sh/usage-thresholds`` (the node's own thresholds), as upstream's ``apis/extension`` decodes
them.

Separate because these annotations are the operator's input, decoded with their own bounds, and the plugin caches
what it makes of them per Node object (or resourceVersion).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.states import decode
from scheduler.loadaware.args import config_duration
from scheduler.loadaware.metric import resource_value
from scheduler.loadaware.names import ANNOTATION_USAGE_THRESHOLDS, INT64, Vec


@dataclass(frozen=True)
class AggregatedProfile:
    """The aggregated-usage thresholds of a profile, and the usage they compare with (type, duration)."""
    thresholds: Vec
    kind: str
    duration: float


@dataclass(frozen=True)
class Profile:
    """Thresholds for one node: upstream's usageThresholdsFilterProfile (all-zero = off)."""
    usage: Vec
    prod: Vec
    aggregated: AggregatedProfile | None


@dataclass(frozen=True)
class NodeState:
    """The plugin's cached reading of one Node object: its allocatable vector and its threshold profile."""
    source: Mapping[str, Any]
    resource_version: str
    allocatable: Vec
    profile: Profile


_CUSTOM_FIELDS = ("usageThresholds", "prodUsageThresholds", "aggregatedUsage")
_CUSTOM_AGGREGATED_FIELDS = ("usageThresholds", "usageAggregationType", "usageAggregatedDuration")


def _go_fields(doc: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The fields Go's encoding/json fills from an object: keys match case-insensitively, a later key wins,
    unknown keys are ignored."""
    by_fold = {n.lower(): n for n in names}
    out: dict[str, Any] = {}
    for k, v in doc.items():
        name = by_fold.get(str(k).lower())
        if name is not None:
            out[name] = v
    return out


@decode.decoder(wire.ANNOTATION_RAW_ALLOCATABLE)
def raw_allocatable(raw: str, names: Iterable[str]) -> dict[str, int]:
    """The capacity before amplification, for the resources LoadAware looks at; all or nothing, as upstream."""
    doc = decode.json_object(wire.ANNOTATION_RAW_ALLOCATABLE, raw)
    return {r: resource_value(r, decode.quantity(wire.ANNOTATION_RAW_ALLOCATABLE, doc[r], r))
            for r in names if r in doc}


@dataclass(frozen=True)
class CustomThresholds:
    """The usage-thresholds annotation's sections (an absent one is empty, or None for aggregatedUsage)."""
    usage: dict[str, int]
    prod: dict[str, int]
    aggregated: tuple[dict[str, int], str, float] | None


@decode.decoder(ANNOTATION_USAGE_THRESHOLDS)
def custom_thresholds(raw: str) -> CustomThresholds:
    """extension.GetCustomUsageThresholds: any type mismatch fails the whole annotation, as json.Unmarshal does."""
    key = ANNOTATION_USAGE_THRESHOLDS
    doc = _go_fields(decode.obj(key, decode.loads(key, raw)), _CUSTOM_FIELDS)

    def thresholds(value: Any, where: str) -> dict[str, int]:
        return {str(r): decode.integer(key, v, f"{where}.{r}", *INT64)
                for r, v in decode.obj(key, value, where).items()}

    aggregated = None
    if doc.get("aggregatedUsage") is not None:
        agg = _go_fields(decode.obj(key, doc["aggregatedUsage"], "aggregatedUsage"), _CUSTOM_AGGREGATED_FIELDS)
        kind = agg.get("usageAggregationType")
        duration = agg.get("usageAggregatedDuration")
        aggregated = (thresholds(agg.get("usageThresholds"), "aggregatedUsage.usageThresholds"),
                      "" if kind is None else decode.string(key, kind, "aggregatedUsage.usageAggregationType"),
                      0.0 if duration is None else config_duration(
                          "aggregatedUsage.usageAggregatedDuration",
                          decode.string(key, duration, "aggregatedUsage.usageAggregatedDuration")))
    return CustomThresholds(thresholds(doc.get("usageThresholds"), "usageThresholds"),
                            thresholds(doc.get("prodUsageThresholds"), "prodUsageThresholds"), aggregated)
