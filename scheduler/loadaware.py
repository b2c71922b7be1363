"""LoadAware: koord-scheduler's LoadAwareScheduling plugin as a pure module, fed by the agent's NodeMetric.

Facts: upstream ``pkg/scheduler/plugins/loadaware`` (load_aware.go, helper.go, pod_assign_cache.go,
estimator/default_estimator.go) and ``pkg/scheduler/apis/config/v1/defaults.go`` and
``validation/validation_pluginargs.go``. Verdicts and scores equal upstream's for the same inputs, including its float64
rounding (Go's ``math.Round``: halves away from zero) and int64 truncating division in the score.

Why the shape: the extender asks filter and prioritize about one pod over up to 500 nodes, so everything that does
not change per call is computed once and remembered by identity (the caller hands us the same objects until they
change): the incoming pod's estimate (last pod only), each node's allocatable vector and threshold profile (per
node object, or per ``resourceVersion``), a NodeMetric's resource vectors and the sums over a node's assigned pods
(per NodeMetricView and per :class:`NodeLoad` generation). A call is then O(resources) integer arithmetic; a
NodeMetric update or a pod added to a node costs O(pods on that node) once.

Resources are vectors in the order of :attr:`LoadAware.resources`: cpu, memory and every resource any argument
names, sorted (upstream's ResourceVectorizer). cpu is in milli-cores, everything else in base units, both rounded
up as Kubernetes' MilliValue/Value do. A resource that only a node annotation names is ignored, as upstream.

Tenant and operator input (the Node annotations ``scheduling.koordinator.sh/usage-thresholds`` and
``node.koordinator.sh/raw-allocatable``, the pod's estimation annotations) is decoded with the bounds of
:mod:`koordlet.states.decode`; a bad value is logged once per node (or pod) and ignored, as upstream ignores it, and
never raises out of :meth:`LoadAware.filter` or :meth:`LoadAware.score`.

Not thread-safe beyond the GIL's atomic assignments: the caches are replaced whole, so concurrent readers see an
old or a new entry; one :class:`NodeLoad` must not be mutated by two threads at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.host.cgroup import KubeQOS
from koordlet.ops.values import parse_duration
from koordlet.states import decode
from koordlet.states.pod import Pod, kube_qos_of
from scheduler.requests import containers_total

log = logging.getLogger(__name__)

CPU, MEMORY = "cpu", "memory"
AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")

# Node annotation: {"usageThresholds": {...}, "prodUsageThresholds": {...}, "aggregatedUsage": {...}}
ANNOTATION_USAGE_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"
# Pod annotations read only with allowCustomizeEstimation: a JSON map of factors, and two decimal integers.
ANNOTATION_SCALING_FACTORS = "scheduling.koordinator.sh/load-estimated-scaling-factors"
ANNOTATION_SECONDS_AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
ANNOTATION_SECONDS_AFTER_INITIALIZED = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"

REASON_EXPIRED = "node(s) nodeMetric expired"
REASON_USAGE = "node(s) {} usage exceed threshold"
REASON_AGGREGATED_USAGE = "node(s) {} aggregated usage exceed threshold"

DEFAULT_MILLI_CPU = 250                       # an incoming pod that asks for no cpu is estimated at 250m
DEFAULT_MEMORY = 200 * 1024 * 1024            # ... and at 200 MiB of memory
DEFAULT_REPORT_INTERVAL = 60.0                # NodeMetric spec.metricCollectPolicy.reportIntervalSeconds
MAX_SCORE = 100
MAX_CACHED_NODES = 100_000                    # the node cache is cleared past this (far above any cluster)

_INT64 = (-(2**63), 2**63 - 1)
_DECIMAL = re.compile(r"[+-]?[0-9]{1,19}")   # strconv.ParseInt(s, 10, 64)
_POD_LEVEL = (CPU, MEMORY)                    # resources pod-level spec.resources may set (and hugepages-*)
_TRANSLATED = {wire.PRIORITY_BATCH: {CPU: wire.BATCH_CPU, MEMORY: wire.BATCH_MEMORY},
               wire.PRIORITY_MID: {CPU: wire.MID_CPU, MEMORY: wire.MID_MEMORY}}

Vec = tuple[int, ...]
PodKey = tuple[str, str]                      # (namespace, name), how NodeMetric names a pod


def _frozen(values: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(values))


# --- arguments ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AggregatedArgs:
    """Upstream's LoadAwareSchedulingAggregatedArgs; durations in seconds, 0 = the longest one reported."""
    usage_thresholds: Mapping[str, int] = field(default_factory=lambda: _frozen({}))
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
    resource_weights: Mapping[str, int] = field(default_factory=lambda: _frozen({CPU: 1, MEMORY: 1}))
    dominant_resource_weight: int = 0
    usage_thresholds: Mapping[str, int] = field(default_factory=lambda: _frozen({CPU: 65, MEMORY: 95}))
    prod_usage_thresholds: Mapping[str, int] = field(default_factory=lambda: _frozen({}))
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimated_scaling_factors: Mapping[str, int] = field(default_factory=lambda: _frozen({CPU: 85, MEMORY: 70}))
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


def _config_duration(where: str, value: Any) -> float:
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
        return None if value is None else _config_int(key, value, *_INT64)

    expiration = doc.get("nodeMetricExpirationSeconds")
    expiration = (_DEFAULTS.node_metric_expiration_seconds if expiration is None
                  else _config_int("nodeMetricExpirationSeconds", expiration, 1, _INT64[1]))
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
        resource_weights=_frozen(weights), dominant_resource_weight=dominant,
        usage_thresholds=_frozen(usage), prod_usage_thresholds=_frozen(prod),
        prod_usage_include_sys=flag("prodUsageIncludeSys", False),
        score_according_prod_usage=flag("scoreAccordingProdUsage", False),
        estimated_scaling_factors=_frozen(factors),
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
        usage_thresholds=_frozen(_config_map("aggregated.usageThresholds", raw.get("usageThresholds"), 0, 100)),
        usage_aggregation_type=_config_type("aggregated.usageAggregationType", raw.get("usageAggregationType")),
        usage_aggregated_duration=_config_duration("aggregated.usageAggregatedDuration",
                                                   raw.get("usageAggregatedDuration")),
        score_aggregation_type=_config_type("aggregated.scoreAggregationType", raw.get("scoreAggregationType")),
        score_aggregated_duration=_config_duration("aggregated.scoreAggregatedDuration",
                                                   raw.get("scoreAggregatedDuration")))


# --- NodeMetric --------------------------------------------------------------------------------------------------

def _nanoseconds(seconds: float) -> int:
    """Durations are compared as Go does, in whole nanoseconds ("5m" and "5m0s" and "300s" are one key)."""
    return round(seconds * 1_000_000_000)


def _resource_value(name: str, q: Fraction) -> int:
    """Upstream's getResourceValue: MilliValue for cpu, Value for the rest (both round up)."""
    return math.ceil(q * 1000) if name == CPU else math.ceil(q)


def _rfc3339(raw: str, where: str) -> float:
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
        ns = _nanoseconds(duration)
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
                                            *_INT64)))
    raw_time = status.get("updateTime")
    update_time = None if raw_time is None else _rfc3339(decode.string(key, raw_time, "status.updateTime"),
                                                         "status.updateTime")

    def resources(raw: Any, where: str) -> dict[str, int]:
        values = decode.obj(key, decode.obj(key, raw, where).get("resources"), f"{where}.resources")
        out = {}
        for res, q in values.items():
            value = decode.quantity(key, q, f"{where}.resources.{res}")
            if value < 0:
                raise decode.DecodeError(key, f"{where}.resources.{res}: negative usage {q!r:.40}")
            out[str(res)] = _resource_value(res, value)
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
            duration = 0 if raw_duration is None else _nanoseconds(
                _config_duration(f"{where}.duration", decode.string(key, raw_duration, f"{where}.duration")))
            for kind, usage in decode.obj(key, entry.get("usage"), f"{where}.usage").items():
                values = resources(usage, f"{where}.usage.{kind}")
                if not values:          # a cold-start window is reported empty: not a usage of 0
                    continue
                aggregated[(str(kind), duration)] = _frozen(values)
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
        pod_usages[pod_key] = _frozen(values)
        if entry.get("priority") == wire.PRIORITY_PROD:
            prod_pods.add(pod_key)
    return NodeMetricView(
        name=str(meta.get("name") or ""), update_time=update_time, report_interval=report_interval,
        node_usage=None if node_usage is None else _frozen(node_usage), system_usage=_frozen(system_usage),
        aggregated=MappingProxyType(aggregated), pod_usages=MappingProxyType(pod_usages),
        prod_pods=frozenset(prod_pods))


# --- pods --------------------------------------------------------------------------------------------------------

def _go_round(x: float) -> int:
    """Go's math.Round: to the nearest integer, halves away from zero (Python's round() goes to even)."""
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return t


def _quantity(raw: Any, where: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _section(c: Mapping[str, Any], kind: str, name: str, where: str) -> Fraction:
    raw = ((c.get("resources") or {}).get(kind) or {}).get(name)
    return Fraction(0) if raw is None else _quantity(raw, f"{where}.resources.{kind}.{name}")


def _pod_total(spec: Mapping[str, Any], kind: str, name: str) -> Fraction:
    """Kubernetes' PodRequests / PodLimits (component-helpers, default options) for one resource: the containers
    and the sidecars (restartable init containers) together, at least what any init container needs while it runs
    beside the sidecars started before it; pod-level ``spec.resources`` replace cpu, memory and hugepages-*; the
    overhead is added to requests, and to limits that are set."""
    total = containers_total(
        spec, lambda i, section, c: {name: _section(c, kind, name, f"spec.{section}[{i}]")}).get(name, Fraction(0))
    pod_level = spec.get("resources") or {}
    supported = name in _POD_LEVEL or name.startswith("hugepages-")
    if supported and _pod_level_set(pod_level, kind) and name in (pod_level.get(kind) or {}):
        total = _quantity(pod_level[kind][name], f"spec.resources.{kind}.{name}")
    overhead = (spec.get("overhead") or {}).get(name)
    if overhead is not None and (kind == "requests" or total != 0):
        total += _quantity(overhead, f"spec.overhead.{name}")
    return total


def _pod_level_set(pod_level: Mapping[str, Any], kind: str) -> bool:
    """IsPodLevelRequestsSet for requests; IsPodLevelResourcesSet (requests or limits) for limits."""
    sections = ("requests",) if kind == "requests" else ("requests", "limits")
    return any(r in _POD_LEVEL or str(r).startswith("hugepages-")
               for s in sections for r in (pod_level.get(s) or {}))


def _estimate_resource(spec: Mapping[str, Any], name: str, factor: int) -> int:
    """Upstream's estimatedUsedByResource: max(request, limit) × factor / 100 in float64, rounded, capped at the
    limit; a pod that asks for none of cpu or memory (or their batch- twins) is estimated at 250m / 200 MiB."""
    if not name:                 # a priority class with no such resource (koord-free, or batch gpu): nothing asked
        return 0
    request, limit = _pod_total(spec, "requests", name), _pod_total(spec, "limits", name)
    quantity = limit if limit > request else request
    if quantity == 0:
        if name in (CPU, wire.BATCH_CPU):
            return DEFAULT_MILLI_CPU
        if name in (MEMORY, wire.BATCH_MEMORY):
            return DEFAULT_MEMORY
        return 0
    value, cap = (math.ceil(quantity * 1000), math.ceil(limit * 1000)) if name == CPU else \
        (math.ceil(quantity), math.ceil(limit))
    estimated = _go_round(float(value) * float(factor) / 100)
    return cap if 0 < cap < estimated else estimated


def priority_class(pod: Mapping[str, Any]) -> str:
    """Upstream's GetPodPriorityClassWithDefault, through the agent's own rule (koordlet.states.pod.Pod): the
    ``koordinator.sh/priority-class`` label, else ``spec.priority``'s range, else from the QoS class (the
    ``koordinator.sh/qosClass`` label, else the Kubernetes class). A ``status.qosClass`` that is absent or not a
    Kubernetes class is computed from the spec, as kubectl does. ValueError when the spec's cpu/memory cannot be
    read for that."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    labels = meta.get("labels")
    priority = spec.get("priority")
    try:
        kube_qos = KubeQOS((pod.get("status") or {}).get("qosClass"))
    except ValueError:
        kube_qos = kube_qos_of(spec)
    return Pod("", "", "", kube_qos, labels=labels if isinstance(labels, Mapping) else {},
               priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
               ).priority_class


def _is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, Mapping) and r.get("kind") == "DaemonSet" for r in refs)


def _condition_time(pod: Mapping[str, Any], kind: str) -> float | None:
    """lastTransitionTime of a True condition of that type, or None (absent, not True, no time)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            raw = c.get("lastTransitionTime")
            if c.get("status") != "True" or not isinstance(raw, str) or not raw:
                return None
            return _rfc3339(raw, f"status.conditions[{kind}].lastTransitionTime")
    return None


def _annotation_seconds(annotations: Mapping[str, Any], key: str) -> int:
    """GetCustomEstimatedSeconds*: a decimal int64, or -1 when absent or not one."""
    raw = annotations.get(key)
    if isinstance(raw, str) and _DECIMAL.fullmatch(raw):
        value = int(raw)
        if _INT64[0] <= value <= _INT64[1]:
            return value
    return -1


@decode.decoder(ANNOTATION_SCALING_FACTORS)
def _custom_factors(raw: str) -> dict[str, int]:
    """The pod's own factors. Upstream takes any int64; a negative factor is refused here (it would make the
    node's estimated usage shrink and push scores past 100)."""
    doc = decode.json_object(ANNOTATION_SCALING_FACTORS, raw)
    return {str(k): decode.integer(ANNOTATION_SCALING_FACTORS, v, str(k), 0, _INT64[1]) for k, v in doc.items()}


@dataclass(frozen=True)
class _PodInfo:
    """The incoming pod as filter and score need it; ``estimated`` is None when it could not be estimated."""
    prod: bool
    daemonset: bool
    estimated: Vec | None


@dataclass(frozen=True)
class _Assigned:
    """One pod of a NodeLoad: upstream's podAssignInfo, reduced to what the sums need."""
    key: PodKey
    prod: bool
    estimated: Vec | None         # None: nothing estimated (all zero, or the pod could not be read)
    assigned_at: float
    deadline: float | None        # forced estimation until then (estimatedSecondsAfter*)


# --- nodes -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _AggregatedProfile:
    thresholds: Vec
    kind: str
    duration: float


@dataclass(frozen=True)
class _Profile:
    """Thresholds for one node: upstream's usageThresholdsFilterProfile (all-zero = off)."""
    usage: Vec
    prod: Vec
    aggregated: _AggregatedProfile | None


@dataclass(frozen=True)
class _NodeState:
    source: Mapping[str, Any]
    resource_version: str
    allocatable: Vec
    profile: _Profile


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
def _raw_allocatable(raw: str, names: Iterable[str]) -> dict[str, int]:
    """The capacity before amplification, for the resources LoadAware looks at; all or nothing, as upstream."""
    doc = decode.json_object(wire.ANNOTATION_RAW_ALLOCATABLE, raw)
    return {r: _resource_value(r, decode.quantity(wire.ANNOTATION_RAW_ALLOCATABLE, doc[r], r))
            for r in names if r in doc}


@dataclass(frozen=True)
class _CustomThresholds:
    usage: dict[str, int]
    prod: dict[str, int]
    aggregated: tuple[dict[str, int], str, float] | None


@decode.decoder(ANNOTATION_USAGE_THRESHOLDS)
def _custom_thresholds(raw: str) -> _CustomThresholds:
    """extension.GetCustomUsageThresholds: any type mismatch fails the whole annotation, as json.Unmarshal does."""
    key = ANNOTATION_USAGE_THRESHOLDS
    doc = _go_fields(decode.obj(key, decode.loads(key, raw)), _CUSTOM_FIELDS)

    def thresholds(value: Any, where: str) -> dict[str, int]:
        return {str(r): decode.integer(key, v, f"{where}.{r}", *_INT64)
                for r, v in decode.obj(key, value, where).items()}

    aggregated = None
    if doc.get("aggregatedUsage") is not None:
        agg = _go_fields(decode.obj(key, doc["aggregatedUsage"], "aggregatedUsage"), _CUSTOM_AGGREGATED_FIELDS)
        kind = agg.get("usageAggregationType")
        duration = agg.get("usageAggregatedDuration")
        aggregated = (thresholds(agg.get("usageThresholds"), "aggregatedUsage.usageThresholds"),
                      "" if kind is None else decode.string(key, kind, "aggregatedUsage.usageAggregationType"),
                      0.0 if duration is None else _config_duration(
                          "aggregatedUsage.usageAggregatedDuration",
                          decode.string(key, duration, "aggregatedUsage.usageAggregatedDuration")))
    return _CustomThresholds(thresholds(doc.get("usageThresholds"), "usageThresholds"),
                             thresholds(doc.get("prodUsageThresholds"), "prodUsageThresholds"), aggregated)


# --- the plugin --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadTotals:
    """Sums over a node's assigned pods against one NodeMetric (upstream nodeInfo's fields), as vectors over
    :attr:`LoadAware.resources`: prod pods' reported usage (plus systemUsage with prodUsageIncludeSys), the
    estimates that exceed what the report shows for pods it has not caught up with (node and prod), and the sum of
    all full estimates (used when the requested aggregated usage is missing)."""
    prod_usage: Vec
    node_delta: Vec
    prod_delta: Vec
    node_estimated: Vec


@dataclass(frozen=True)
class _MetricVectors:
    node_usage: Vec | None
    system_usage: Vec
    aggregated: Mapping[tuple[str, int], Vec]
    pod_usages: Mapping[PodKey, Vec]


class LoadAware:
    """Filter and score by estimated node usage, as koord-scheduler's LoadAwareScheduling does."""

    def __init__(self, args: LoadAwareArgs) -> None:
        self.args = args
        names = {CPU, MEMORY, *args.usage_thresholds, *args.prod_usage_thresholds, *args.resource_weights,
                 *args.estimated_scaling_factors, *args.supported_resources}
        if args.aggregated is not None:
            names.update(args.aggregated.usage_thresholds)
        self.resources: tuple[str, ...] = tuple(sorted(names))
        weights = self.factor_vec(args.resource_weights)
        # upstream: no weights and no dominant weight disable scoring (every node 0)
        self._weights: Vec | None = None if args.dominant_resource_weight == 0 and not any(weights) else weights
        agg = args.aggregated
        self._profile = _Profile(
            self.factor_vec(args.usage_thresholds), self.factor_vec(args.prod_usage_thresholds),
            _AggregatedProfile(self.factor_vec(agg.usage_thresholds), agg.usage_aggregation_type,
                               agg.usage_aggregated_duration)
            if agg is not None and agg.usage_thresholds and agg.usage_aggregation_type else None)
        self._nodes: dict[str, _NodeState] = {}
        self._last_pod: tuple[Mapping[str, Any], _PodInfo] | None = None
        self._warn = LogOnce(log)

    # -- vectors --

    def factor_vec(self, values: Mapping[str, int]) -> Vec:
        """A map over resource names as a vector over :attr:`resources` (names outside them are dropped)."""
        return tuple(values.get(name, 0) for name in self.resources)

    def _add(self, a: Vec, b: Vec) -> Vec:
        return tuple(x + y for x, y in zip(a, b, strict=True))

    # -- estimation --

    def estimate(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """The pod's estimated usage per scaling-factor resource (``estimator/default_estimator.go``:
        ``DefaultEstimator.EstimatePod``): cpu in milli-cores, memory in bytes.
        Batch and mid pods are estimated from their kubernetes.io/batch-* / mid-* resources. ValueError when the
        pod's resources cannot be read."""
        factors: Mapping[str, int] = self.args.estimated_scaling_factors
        meta = pod.get("metadata") or {}
        raw = (meta.get("annotations") or {}).get(ANNOTATION_SCALING_FACTORS)
        if self.args.allow_customize_estimation and raw:
            try:
                custom = _custom_factors(raw)
            except decode.DecodeError as e:
                self._warn("pod-factors", "pod annotation ignored pod=%s/%s reason=%s", meta.get("namespace"),
                           meta.get("name"), e)
                custom = {}
            if custom:
                factors = {**factors, **custom}
        pclass = priority_class(pod)
        spec = pod.get("spec") or {}
        out = {}
        for name, factor in factors.items():
            real = name if pclass in (wire.PRIORITY_PROD, wire.PRIORITY_NONE) else \
                _TRANSLATED.get(pclass, {}).get(name, "")
            out[name] = _estimate_resource(spec, real, factor)
        return out

    def _pod_info(self, pod: Mapping[str, Any]) -> _PodInfo:
        """The incoming pod, computed once per pod object (upstream keeps it in the cycle state)."""
        last = self._last_pod
        if last is not None and last[0] is pod:
            return last[1]
        try:
            prod = priority_class(pod) == wire.PRIORITY_PROD
            estimated: Vec | None = self.factor_vec(self.estimate(pod))
        except ValueError as e:
            meta = pod.get("metadata") or {}
            self._warn("pod-estimate", "pod not estimated pod=%s/%s reason=%s", meta.get("namespace"),
                       meta.get("name"), e)
            prod, estimated = False, None
        info = _PodInfo(prod, _is_daemonset_pod(pod), estimated)
        self._last_pod = (pod, info)
        return info

    def _assigned(self, pod: Mapping[str, Any], assigned_at: float) -> _Assigned:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        try:
            prod = priority_class(pod) == wire.PRIORITY_PROD
            vec = self.factor_vec(self.estimate(pod))
            estimated = vec if any(vec) else None
            scheduled = _condition_time(pod, "PodScheduled")
            timestamp = assigned_at if scheduled is None else scheduled
            deadline = self._deadline(pod, timestamp)
        except ValueError as e:       # the pod still counts as assigned, with nothing estimated (upstream's error path)
            self._warn("pod-estimate", "pod not estimated pod=%s/%s reason=%s", key[0], key[1], e)
            prod, estimated, timestamp, deadline = False, None, assigned_at, None
        return _Assigned(key, prod, estimated, timestamp, deadline)

    def _deadline(self, pod: Mapping[str, Any], timestamp: float) -> float | None:
        """Upstream's shouldEstimatePodDeadline: estimation is forced until secondsAfterInitialized past the
        Initialized condition (when the pod is initialized), else secondsAfterPodScheduled past the assignment."""
        after_scheduled = after_initialized = -1
        if self.args.allow_customize_estimation:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            after_scheduled = _annotation_seconds(annotations, ANNOTATION_SECONDS_AFTER_SCHEDULED)
            after_initialized = _annotation_seconds(annotations, ANNOTATION_SECONDS_AFTER_INITIALIZED)
        if self.args.estimated_seconds_after_pod_scheduled is not None and after_scheduled < 0:
            after_scheduled = self.args.estimated_seconds_after_pod_scheduled
        if self.args.estimated_seconds_after_initialized is not None and after_initialized < 0:
            after_initialized = self.args.estimated_seconds_after_initialized
        if after_initialized > 0:
            initialized = _condition_time(pod, "Initialized")
            if initialized is not None:
                return initialized + after_initialized
        if after_scheduled > 0:
            return timestamp + after_scheduled
        return None

    # -- nodes --

    def allocatable(self, node: Mapping[str, Any]) -> dict[str, int]:
        """The node's denominator per resource (upstream's EstimateNode): status.allocatable, overridden per key by
        the ``node.koordinator.sh/raw-allocatable`` annotation (the capacity before amplification)."""
        return dict(zip(self.resources, self._node_state(node).allocatable, strict=True))

    def _node_state(self, node: Mapping[str, Any]) -> _NodeState:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        rv = str(meta.get("resourceVersion") or "")
        state = self._nodes.get(name)
        if state is not None and (state.source is node or (rv and state.resource_version == rv)):
            return state
        annotations = meta.get("annotations") or {}
        state = _NodeState(node, rv, self._node_allocatable(name, node, annotations),
                           self._node_profile(name, annotations))
        if len(self._nodes) >= MAX_CACHED_NODES:
            self._nodes.clear()
        self._nodes[name] = state
        return state

    def _resource_list(self, values: Mapping[str, Any], where: str, node: str) -> dict[str, int]:
        out = {}
        for res in self.resources:
            if res in values:
                try:
                    out[res] = _resource_value(res, decode.quantity(where, values[res], res))
                except ValueError as e:
                    self._warn(f"{node}/{where}/{res}", "node resource ignored node=%s reason=%s", node, e)
        return out

    def _node_allocatable(self, name: str, node: Mapping[str, Any], annotations: Mapping[str, Any]) -> Vec:
        status = (node.get("status") or {}).get("allocatable") or {}
        values = self._resource_list(status, "status.allocatable", name) if isinstance(status, Mapping) else {}
        raw = annotations.get(wire.ANNOTATION_RAW_ALLOCATABLE)
        if raw is not None:
            try:
                values.update(_raw_allocatable(raw, self.resources))
            except decode.DecodeError as e:
                self._warn(f"{name}/raw-allocatable", "node annotation ignored node=%s key=%s reason=%s", name,
                           wire.ANNOTATION_RAW_ALLOCATABLE, e)
        return self.factor_vec(values)

    def _node_profile(self, name: str, annotations: Mapping[str, Any]) -> _Profile:
        """generateUsageThresholdsFilterProfile: each section the annotation sets replaces the global one."""
        raw = annotations.get(ANNOTATION_USAGE_THRESHOLDS)
        if raw is None:
            return self._profile
        try:
            custom = _custom_thresholds(raw)
        except decode.DecodeError as e:
            self._warn(f"{name}/usage-thresholds", "node annotation ignored node=%s key=%s reason=%s", name,
                       ANNOTATION_USAGE_THRESHOLDS, e)
            return self._profile
        agg = custom.aggregated
        if agg is not None and not (agg[0] and agg[1]):
            agg = None
        if not custom.usage and not custom.prod and agg is None:
            return self._profile
        base = self._profile
        return _Profile(self.factor_vec(custom.usage) if custom.usage else base.usage,
                        self.factor_vec(custom.prod) if custom.prod else base.prod,
                        base.aggregated if agg is None else _AggregatedProfile(self.factor_vec(agg[0]), agg[1], agg[2]))

    # -- metric and load --

    def _metric_vectors(self, metric: NodeMetricView) -> _MetricVectors:
        vec = self.factor_vec
        return _MetricVectors(None if metric.node_usage is None else vec(metric.node_usage),
                              vec(metric.system_usage),
                              {k: vec(v) for k, v in metric.aggregated.items()},
                              {k: vec(v) for k, v in metric.pod_usages.items()})

    def _totals(self, metric: NodeMetricView, vectors: _MetricVectors, pods: Iterable[_Assigned]) -> LoadTotals:
        """Upstream's nodeInfo.addPod over every assigned pod."""
        n = len(self.resources)
        include_sys = self.args.prod_usage_include_sys and metric.node_usage is not None
        prod_usage = list(vectors.system_usage) if include_sys else [0] * n
        node_delta, prod_delta, node_estimated = [0] * n, [0] * n, [0] * n
        update = metric.update_time
        horizon = None if update is None else update - metric.report_interval

        def add_delta(total: list[int], e: Vec, u: Vec | None) -> None:
            for i in range(n):
                d = e[i] - (u[i] if u is not None else 0)
                if d > 0:
                    total[i] += d

        for pod in pods:
            u = vectors.pod_usages.get(pod.key)
            active_prod = pod.prod and pod.key in metric.prod_pods
            if active_prod and u is not None:
                for i in range(n):
                    prod_usage[i] += u[i]
            e = pod.estimated
            if e is None:
                continue
            # the report cannot show the pod yet: no usage, assigned within the last report interval, or in its
            # forced-estimation window (a zero Go time stands for a missing updateTime: always before)
            should = (u is None or horizon is None or horizon < pod.assigned_at
                      or (pod.deadline is not None and (update is None or pod.deadline > update)))
            if should:
                add_delta(node_delta, e, u)
            for i in range(n):
                node_estimated[i] += e[i]
            if not pod.prod:
                continue
            if not active_prod and u is not None:
                u, should = None, True
            if should:
                add_delta(prod_delta, e, u)
        return LoadTotals(tuple(prod_usage), tuple(node_delta), tuple(prod_delta), tuple(node_estimated))

    def _existing(self, metric: NodeMetricView, load: NodeLoad, prod: bool, kind: str, duration: float) -> Vec:
        """GetNodeMetricAndEstimatedOfExisting: the node's usage before the incoming pod."""
        vectors, totals = load._derive(metric)
        if prod:
            return self._add(totals.prod_usage, totals.prod_delta)
        if kind:
            usage = vectors.aggregated.get((kind, _nanoseconds(duration)))
            if usage is None and _nanoseconds(duration) == 0:
                usage = vectors.node_usage
        else:
            usage = vectors.node_usage
        if usage is None:
            return totals.node_estimated
        return self._add(usage, totals.node_delta)

    def _expired(self, metric: NodeMetricView, now: float) -> bool:
        expiration = self.args.node_metric_expiration_seconds
        return metric.update_time is None or (expiration > 0 and now - metric.update_time >= expiration)

    # -- filter and score --

    def filter(self, pod: Mapping[str, Any], node: Mapping[str, Any], metric: NodeMetricView | None,
               load: NodeLoad, now: float) -> str | None:
        """None when the node passes; otherwise the reason, worded as upstream (``load_aware.go: Plugin.Filter``)."""
        info = self._pod_info(pod)
        if info.daemonset:
            return None
        state = self._node_state(node)
        profile = state.profile
        prod_pod = any(profile.prod) and info.prod
        aggregated = profile.aggregated if not prod_pod else None
        if prod_pod:
            thresholds = profile.prod
        elif aggregated is not None:
            thresholds = aggregated.thresholds
        else:
            thresholds = profile.usage
        if not any(thresholds):
            return None
        if metric is None:            # no agent on the node: load-aware placement is an optimization, let it pass
            return None
        if self.args.filter_expired_node_metrics and self._expired(metric, now):
            return None if self.args.enable_schedule_when_node_metrics_expired else REASON_EXPIRED
        if metric.node_usage is None:
            return None
        estimated = self._existing(metric, load, prod_pod, aggregated.kind if aggregated else "",
                                   aggregated.duration if aggregated else 0.0)
        if info.estimated is not None:
            estimated = self._add(estimated, info.estimated)
        for i, threshold in enumerate(thresholds):
            total = state.allocatable[i]
            if threshold == 0 or total == 0:
                continue
            if _go_round(estimated[i] / total * 100) > threshold:
                reason = REASON_AGGREGATED_USAGE if aggregated is not None else REASON_USAGE
                return reason.format(self.resources[i])
        return None

    def score(self, pod: Mapping[str, Any], node: Mapping[str, Any], metric: NodeMetricView | None,
              load: NodeLoad, now: float) -> int:
        """0..100, not normalized (``load_aware.go: Plugin.Score``); 0 without a fresh NodeMetric."""
        weights = self._weights
        if weights is None or metric is None:
            return 0
        info = self._pod_info(pod)
        state = self._node_state(node)
        prod_pod = self.args.score_according_prod_usage and info.prod
        agg = self.args.aggregated
        kind, duration = ((agg.score_aggregation_type, agg.score_aggregated_duration)
                          if not prod_pod and agg is not None and agg.score_aggregation_type else ("", 0.0))
        if self._expired(metric, now) or metric.node_usage is None or info.estimated is None:
            return 0
        used = self._add(self._existing(metric, load, prod_pod, kind, duration), info.estimated)
        return _score(self.args.dominant_resource_weight, weights, used, state.allocatable)


def _score(dominant_weight: int, weights: Vec, used: Vec, allocatable: Vec) -> int:
    """loadAwareSchedulingScorer: the weighted mean of each resource's least-used score, the dominant weight
    applied to the lowest of them; int64 arithmetic (scores and weights are non-negative, so // truncates)."""
    node_score, weight_sum = 0, 0
    dominant = MAX_SCORE if dominant_weight else 0
    if dominant_weight:
        weight_sum = dominant_weight
    for weight, u, capacity in zip(weights, used, allocatable, strict=True):
        score = 0 if capacity == 0 or u > capacity else (capacity - u) * MAX_SCORE // capacity
        node_score += score * weight
        weight_sum += weight
        dominant = min(dominant, score)
    node_score += dominant * dominant_weight
    return node_score // weight_sum if weight_sum > 0 else 0


class NodeLoad:
    """The pods assigned to one node (upstream's pod assign cache, for one node), owned by the caller.

    Each pod is estimated once, when it is added; the sums against a NodeMetric are computed on first use after
    a change (an added or removed pod, or a new NodeMetricView) and then reused by every filter and score.
    """

    def __init__(self, plugin: LoadAware) -> None:
        self._plugin = plugin
        self._pods: dict[str, _Assigned] = {}
        self._generation = 0
        self._derived: tuple[NodeMetricView, int, _MetricVectors, LoadTotals] | None = None

    def add(self, pod: Mapping[str, Any], assigned_at: float) -> None:
        """Add (or replace, by uid) a pod bound or assumed to this node. ``assigned_at`` is when this scheduler
        assumed it; the pod's PodScheduled condition time wins when it has one. A terminated pod (Succeeded or
        Failed) is removed instead; koord-scheduler's reserve pods are not counted. ValueError without a uid."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not isinstance(uid, str) or not uid:
            raise ValueError("pod has no metadata.uid")
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self.remove(uid)
            return
        if (meta.get("annotations") or {}).get(ANNOTATION_RESERVE_POD) == "true":
            return
        self._pods[uid] = self._plugin._assigned(pod, assigned_at)
        self._generation += 1

    def remove(self, uid: str) -> None:
        if self._pods.pop(uid, None) is not None:
            self._generation += 1

    def __len__(self) -> int:
        return len(self._pods)

    def totals(self, metric: NodeMetricView) -> LoadTotals:
        """The sums over this node's pods against ``metric``."""
        return self._derive(metric)[1]

    def _derive(self, metric: NodeMetricView) -> tuple[_MetricVectors, LoadTotals]:
        cached = self._derived
        if cached is not None and cached[0] is metric:
            if cached[1] == self._generation:
                return cached[2], cached[3]
            vectors = cached[2]
        else:
            vectors = self._plugin._metric_vectors(metric)
        totals = self._plugin._totals(metric, vectors, self._pods.values())
        self._derived = (metric, self._generation, vectors, totals)
        return vectors, totals

