"""The NodeMetric as LoadAware reads it (``pod_assign_cache.go``: nodeInfo.AddOrUpdateNodeMetric): node, system,
aggregated and per-pod usages as resource maps, parsed once per resourceVersion into a :class:`NodeMetricView`.

Separate because the cluster cache parses each NodeMetric when it changes, not per decision; a bad one is one
ValueError naming the field.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from koordlet.base import wire
from koordlet.states import decode
from scheduler.loadaware.args import config_duration, frozen_map
from scheduler.loadaware.names import CPU, INT64, PodKey

DEFAULT_REPORT_INTERVAL = 60.0                # NodeMetric spec.metricCollectPolicy.reportIntervalSeconds


def nanoseconds(seconds: float) -> int:
    """Durations are compared as Go does, in whole nanoseconds ("5m" and "5m0s" and "300s" are one key)."""
    return round(seconds * 1_000_000_000)


def resource_value(name: str, q: Fraction) -> int:
    """Upstream's getResourceValue: MilliValue for cpu, Value for the rest (both round up)."""
    return math.ceil(q * 1000) if name == CPU else math.ceil(q)


def rfc3339(raw: str, where: str) -> float:
    """An RFC 3339 time (``updateTime``, a condition's ``lastTransitionTime``) in epoch seconds; ValueError naming
    ``where`` otherwise."""
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"{where}: {raw!r:.80} is not an RFC 3339 time") from None


@dataclass(frozen=True)
class NodeMetricView:
    """What LoadAware reads from one NodeMetric (``pod_assign_cache.go: nodeInfo.AddOrUpdateNodeMetric``), parsed once
    per resourceVersion.

    Usages map a resource name to its value (cpu milli-cores, the rest base units). ``node_usage`` is None when
    the report has no ``status.nodeMetric`` (the plugin then lets the node pass and scores it 0).
    ``aggregated`` is keyed by (type, duration in ns); duration 0 holds the longest duration reported for that
    type. ``pod_usages`` holds only pods whose usage has resources; ``prod_pods`` the ones reported as koord-prod.
    """
    name: str
    update_time: float | None
    report_interval: float
    node_usage: Mapping[str, int] | None
    system_usage: Mapping[str, int]
    aggregated: Mapping[tuple[str, int], Mapping[str, int]]
    pod_usages: Mapping[PodKey, Mapping[str, int]]
    prod_pods: frozenset[PodKey]

    def aggregated_usage(self, kind: str, duration: float) -> Mapping[str, int] | None:
        """Upstream's getTargetAggregatedUsage: the usage of (kind, duration); for duration 0, the longest
        reported, else nodeUsage. None when an explicit duration is missing (the caller then falls back to the sum
        of the pods' full estimates)."""
        ns = nanoseconds(duration)
        usage = self.aggregated.get((kind, ns))
        if usage is None and ns == 0:
            return self.node_usage
        return usage


def parse_node_metric(obj: Mapping[str, Any]) -> NodeMetricView:
    """A NodeMetric object (Kubernetes JSON) → :class:`NodeMetricView`; ValueError naming the bad field."""
    try:
        name = obj["metadata"]["name"]
    except (TypeError, KeyError, IndexError):
        name = None
    key = f"NodeMetric {name if isinstance(name, str) else '?'}"
    parse: Callable[[str, Any], NodeMetricView] = decode.decoder(key)(_parse_node_metric)
    return parse(key, obj)


def _parse_node_metric(key: str, obj: Any) -> NodeMetricView:
    obj = decode.obj(key, obj, null=False)
    meta = decode.obj(key, obj.get("metadata"), "metadata")
    spec = decode.obj(key, obj.get("spec"), "spec")
    status = decode.obj(key, obj.get("status"), "status")
    policy = decode.obj(key, spec.get("metricCollectPolicy"), "spec.metricCollectPolicy")
    interval = policy.get("reportIntervalSeconds")
    report_interval = (DEFAULT_REPORT_INTERVAL if interval is None else
                       float(decode.integer(key, interval, "spec.metricCollectPolicy.reportIntervalSeconds",
                                            *INT64)))
    raw_time = status.get("updateTime")
    update_time = None if raw_time is None else rfc3339(decode.string(key, raw_time, "status.updateTime"),
                                                        "status.updateTime")

    def resources(raw: Any, where: str) -> dict[str, int]:
        values = decode.obj(key, decode.obj(key, raw, where).get("resources"), f"{where}.resources")
        out = {}
        for res, q in values.items():
            value = decode.quantity(key, q, f"{where}.resources.{res}")
            if value < 0:
                raise decode.DecodeError(key, f"{where}.resources.{res}: negative usage {q!r:.40}")
            out[str(res)] = resource_value(res, value)
        return out

    node_usage: dict[str, int] | None = None
    system_usage: dict[str, int] = {}
    aggregated: dict[tuple[str, int], Mapping[str, int]] = {}
    info = status.get("nodeMetric")
    if info is not None:
        info = decode.obj(key, info, "status.nodeMetric")
        node_usage = resources(info.get("nodeUsage"), "status.nodeMetric.nodeUsage")
        system_usage = resources(info.get("systemUsage"), "status.nodeMetric.systemUsage")
        longest: dict[str, int] = {}
        for i, entry in enumerate(decode.array(key, info.get("aggregatedNodeUsages"),
                                               "status.nodeMetric.aggregatedNodeUsages")):
            where = f"status.nodeMetric.aggregatedNodeUsages[{i}]"
            entry = decode.obj(key, entry, where, null=False)
            raw_duration = entry.get("duration")
            duration = 0 if raw_duration is None else nanoseconds(
                config_duration(f"{where}.duration", decode.string(key, raw_duration, f"{where}.duration")))
            for kind, usage in decode.obj(key, entry.get("usage"), f"{where}.usage").items():
                values = resources(usage, f"{where}.usage.{kind}")
                if not values:          # a cold-start window is reported empty: not a usage of 0
                    continue
                aggregated[(str(kind), duration)] = frozen_map(values)
                if duration > longest.get(kind, 0):
                    longest[kind] = duration
        for kind, duration in longest.items():
            aggregated[(kind, 0)] = aggregated[(kind, duration)]

    pod_usages: dict[PodKey, Mapping[str, int]] = {}
    prod_pods: set[PodKey] = set()
    for i, entry in enumerate(decode.array(key, status.get("podsMetric"), "status.podsMetric")):
        if entry is None:
            continue
        where = f"status.podsMetric[{i}]"
        entry = decode.obj(key, entry, where)
        values = resources(entry.get("podUsage"), f"{where}.podUsage")
        if not values:
            continue
        pod_key = (decode.string(key, entry.get("namespace", ""), f"{where}.namespace"),
                   decode.string(key, entry.get("name", ""), f"{where}.name"))
        pod_usages[pod_key] = frozen_map(values)
        if entry.get("priority") == wire.PRIORITY_PROD:
            prod_pods.add(pod_key)
    return NodeMetricView(
        name=str(meta.get("name") or ""), update_time=update_time, report_interval=report_interval,
        node_usage=None if node_usage is None else frozen_map(node_usage), system_usage=frozen_map(system_usage),
        aggregated=MappingProxyType(aggregated), pod_usages=MappingProxyType(pod_usages),
        prod_pods=frozenset(prod_pods))
