"""NodeMetric (``slo.koordinator.sh/v1alpha1``) status, built from the metric cache as upstream koordlet does.

Facts: upstream ``pkg/koordlet/statesinformer/impl/states_nodemetric.go`` (``nodeMetricInformer.sync``,
``collectMetric``):
* the spec's ``metricCollectPolicy`` is merged over defaults; aggregateDurationSeconds is at least 60 and
  reportIntervalSeconds at least 30;
* ``nodeUsage`` / ``systemUsage`` are AVG over [now − aggregateDuration, now];
* ``aggregatedNodeUsages`` / ``aggregatedSystemUsages`` carry avg/p50/p90/p95/p99 per policy duration, and a
  ResourceMap whose CPU series covers less than half its window (cold start) is sent empty ``{}``;
* pods without samples in the window are left out; memory follows ``nodeMemoryCollectPolicy``;
* ``numaUsages``: per NUMA node, AVG of ``node_numa_cpu_usage`` and ``node_numa_memory_usage`` over the same
  window (memory policy not applied, as upstream); a node missing either series in the window is left out;
  sorted by ``numaNodeID``; the key is omitted when no node qualifies (Go's omitempty on the slice);
* CPU is a milli-quantity truncated toward zero, memory a BinarySI byte count.

Per-NUMA ``systemUsage``: AVG of ``sys_numa_cpu_usage`` and ``sys_numa_memory_usage`` of that node over the same
window (upstream's collectNUMAUsages); ``{}`` when either has no sample there (upstream leaves the struct empty, and
Go serialises an empty struct-valued field as ``{}``). How those kinds are collected: collectors/usage.py.
Upstream takes the NUMA node list from its ``node_numa_info`` KV; we take the ``numa_node_id`` label values of
the CPU series held in the cache's memory window (which covers the report window unless
``metric-cache-memory-window`` is set below ``aggregateDurationSeconds``). Same result: a node is reported only
when it has samples in the window.

``prodReclaimableMetric`` / ``prodPeakMetric`` come from the peak predictor (``koordlet.prediction``), fed the
pods that had metrics, as upstream; when it cannot answer, ``prodReclaimableMetric`` is ``{"resource": {}}`` and
``prodPeakMetric`` is omitted, exactly what upstream sends. ``hostApplicationMetric``: per NodeSLO host
application with samples, AVG cpu and memory (``…_with_page_cache`` under ``usageWithPageCache``,
``…_with_hot_page_usage`` under ``usageWithHotPageCache`` while kidled runs), its priority
and QoS copied from the NodeSLO, sorted by name.

GPUs (``devices`` in ``nodeUsage`` and each pod's ``podUsage``): per GPU with samples in the window, AVG of
``node_gpu_core_usage`` / ``node_gpu_memory_usage`` (pods: ``pod_gpu_*`` with the pod's uid) as
``{type: gpu, id, minor, health: false, resources: {gpu-core: <int %>, gpu-memory: <bytes>, gpu-memory-ratio:
<int 100 × used / total>}}``; ``health`` is false because upstream never sets it here (a usage record, not a
device state).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import format_bytes, format_milli, milli, parse_quantity
from koordlet.component import Context, Plugin
from koordlet.host.nvml import Gpu
from koordlet.metriccache import AggregateResult, EmptyError, MetricCache
from koordlet.ops.values import parse_duration
from koordlet.prediction.reclaimable import ReclaimPrediction, node_allocatable
from koordlet.prediction.server import Resources
from koordlet.states.hostapps import HostApp
from koordlet.states.informer import PodMeta

log = logging.getLogger(__name__)

API_VERSION = "slo.koordinator.sh/v1alpha1"
AGGREGATIONS = ("avg", "p50", "p90", "p95", "p99")
MEMORY_POLICIES = ("usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache")
COLD_START_RATIO = 0.5
NUMA_LABEL = "numa_node_id"           # upstream's MetricPropertyNUMANodeID

# metric kind per (scope, memory policy); anything else is f"{scope}_memory_usage" (usageWithoutPageCache).
# usageWithHotPageCache applies only while kidled runs (the cold page collector started); otherwise node, pods and
# host applications all fall back to usageWithoutPageCache, as upstream (GetIsStartColdMemory)
_MEMORY_KIND = {
    ("node", "usageWithPageCache"): "node_memory_usage_with_page_cache",
    ("pod", "usageWithPageCache"): "pod_memory_usage_with_page_cache",
    ("host_application", "usageWithPageCache"): "host_application_memory_usage_with_page_cache",
    ("node", "usageWithHotPageCache"): "node_memory_with_hot_page_usage",
    ("pod", "usageWithHotPageCache"): "pod_memory_with_hot_page_usage",
    ("host_application", "usageWithHotPageCache"): "host_application_memory_with_hot_page_usage",
}
HOT_PAGE_POLICY = "usageWithHotPageCache"
FALLBACK_POLICY = "usageWithoutPageCache"


@dataclass(frozen=True)
class CollectPolicy:
    aggregate_duration: float = 300.0
    report_interval: float = 60.0
    durations: tuple[float, ...] = (300.0, 600.0, 1800.0)
    memory_policy: str = "usageWithoutPageCache"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> tuple[CollectPolicy, list[str]]:
        """Spec fields merged over the defaults; a bad field keeps its default and is reported."""
        errors: list[str] = []
        raw = (spec or {}).get("metricCollectPolicy") or {}
        if not isinstance(raw, Mapping):
            return cls(), [f"spec.metricCollectPolicy: expected an object, got {type(raw).__name__}"]
        base = cls()
        values: dict[str, Any] = {}

        def seconds(key: str, attr: str, minimum: float) -> None:
            v = raw.get(key)
            if v is None:
                return
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                errors.append(f"spec.metricCollectPolicy.{key}: expected a non-negative number, got {v!r}")
                return
            values[attr] = max(float(v), minimum)

        seconds("aggregateDurationSeconds", "aggregate_duration", 60.0)
        seconds("reportIntervalSeconds", "report_interval", 30.0)
        durations = (raw.get("nodeAggregatePolicy") or {}).get("durations")
        if durations is not None:
            try:
                values["durations"] = tuple(parse_duration(d) for d in durations)
            except (TypeError, ValueError) as e:
                errors.append(f"spec.metricCollectPolicy.nodeAggregatePolicy.durations: {e}")
        policy = raw.get("nodeMemoryCollectPolicy")
        if policy is not None:
            if policy in MEMORY_POLICIES:
                values["memory_policy"] = policy
            else:        # upstream degrades to usageWithoutPageCache too; we also say so
                errors.append(f"spec.metricCollectPolicy.nodeMemoryCollectPolicy: unknown {policy!r}, "
                              f"using {base.memory_policy}")
        merged = cls(**{**base.__dict__, **values})
        return merged, errors


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() for whole seconds: 300 -> "5m0s", 3600 -> "1h0m0s", 45 -> "45s"."""
    total = round(seconds)
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def resources(cpu_cores: float, memory_bytes: float) -> dict[str, str]:
    return {"cpu": format_milli(int(cpu_cores * 1000)), "memory": format_bytes(int(memory_bytes))}


class NodeMetricBuilder:
    """``kidled_running``: the cold page collector started (kidled on); without it usageWithHotPageCache falls
    back to usageWithoutPageCache and :attr:`memory_policy_fallback` says so."""

    def __init__(self, cache: MetricCache, policy: CollectPolicy, *, kidled_running: bool = False) -> None:
        self._cache = cache
        self._policy = policy
        self._kidled_running = kidled_running

    @property
    def memory_policy(self) -> str:
        """The memory policy the report follows (the spec's, or the fallback)."""
        if self._policy.memory_policy == HOT_PAGE_POLICY and not self._kidled_running:
            return FALLBACK_POLICY
        return self._policy.memory_policy

    @property
    def memory_policy_fallback(self) -> str | None:
        """Why the spec's nodeMemoryCollectPolicy is not followed (for the caller to log once), or None."""
        if self.memory_policy == self._policy.memory_policy:
            return None
        return (f"nodeMemoryCollectPolicy {HOT_PAGE_POLICY} needs kidled (feature gate ColdPageCollector on a "
                f"kidled kernel with cgroup v1) and it is not running; reporting {FALLBACK_POLICY}")

    def _memory_kind(self, scope: str) -> str:
        return _MEMORY_KIND.get((scope, self.memory_policy), f"{scope}_memory_usage")

    def _query(self, cpu_kind: str, mem_kind: str, labels: Mapping[str, str] | None, start: float,
               end: float) -> tuple[AggregateResult, AggregateResult]:
        return (self._cache.query(cpu_kind, labels, start, end), self._cache.query(mem_kind, labels, start, end))

    @staticmethod
    def _resource_map(results: tuple[AggregateResult, AggregateResult], agg: str,
                      cold_start_window: float = 0.0) -> dict[str, Any]:
        """{"resources": {...}}, or {} when a series is empty or (cold start) covers < half the window."""
        cpu, mem = results
        try:
            cpu_value, mem_value = cpu.value(agg), mem.value(agg)
        except EmptyError:
            return {}
        if cpu.time_range() < cold_start_window * COLD_START_RATIO:
            return {}
        return {"resources": resources(cpu_value, mem_value)}

    def _aggregated(self, cpu_kind: str, mem_kind: str, now: float) -> list[dict[str, Any]]:
        out = []
        for d in self._policy.durations:
            results = self._query(cpu_kind, mem_kind, None, now - d, now)   # one query, four percentiles
            out.append({"usage": {agg: self._resource_map(results, agg, d) for agg in AGGREGATIONS},
                        "duration": go_duration(d)})
        return out

    def _numa_usages(self, start: float, end: float) -> list[dict[str, Any]]:
        """``numaUsages`` entries of the NUMA nodes whose CPU and memory series both have samples in the window,
        each with its system usage when that has samples too."""
        nodes = sorted({int(lb[NUMA_LABEL]) for lb in self._cache.series("node_numa_cpu_usage")
                        if lb.get(NUMA_LABEL, "").isdigit()})
        out = []
        for node in nodes:
            numa = {NUMA_LABEL: str(node)}
            usage = self._resource_map(self._query("node_numa_cpu_usage", "node_numa_memory_usage", numa, start,
                                                   end), "avg")
            if usage:
                system = self._resource_map(self._query("sys_numa_cpu_usage", "sys_numa_memory_usage", numa, start,
                                                        end), "avg")
                out.append({"numaNodeID": node, "nodeUsage": usage, "systemUsage": system})
        return out

    def _host_apps(self, apps: Iterable[HostApp], start: float, end: float) -> list[dict[str, Any]]:
        memory = self._memory_kind("host_application")
        out = []
        for app in apps:
            usage = self._resource_map(self._query("host_application_cpu_usage", memory,
                                                   {"host_app_name": app.name}, start, end), "avg")
            if usage:
                out.append({"name": app.name, "usage": usage, "priority": app.priority, "qos": app.qos})
        return sorted(out, key=lambda a: a["name"])

    def _gpu_devices(self, kind: str, extra: Mapping[str, str], gpus: Sequence[Gpu], start: float,
                     end: float) -> list[dict[str, Any]]:
        """Average use of each GPU that has samples in the window (``kind``: "node" or "pod")."""
        out = []
        for gpu in gpus:
            props = {**extra, "gpu_minor": str(gpu.minor), "gpu_device_uuid": gpu.uuid}
            try:
                core = self._cache.query(f"{kind}_gpu_core_usage", props, start, end).value("avg")
                memory = self._cache.query(f"{kind}_gpu_memory_usage", props, start, end).value("avg")
            except EmptyError:
                continue
            ratio = int(100 * memory / gpu.memory_total) if gpu.memory_total else 0
            out.append({"type": wire.DEVICE_GPU, "id": gpu.uuid, "minor": gpu.minor, "health": False,
                        "resources": {wire.RESOURCE_GPU_CORE: str(int(core)),
                                      wire.RESOURCE_GPU_MEMORY: format_bytes(int(memory)),
                                      wire.RESOURCE_GPU_MEMORY_RATIO: str(ratio)}})
        return out

    def status(self, pods: Iterable[PodMeta], now: float,
               reclaim: Callable[[list[PodMeta]], ReclaimPrediction] | None = None,
               host_apps: Iterable[HostApp] = (), gpus: Sequence[Gpu] = ()) -> dict[str, Any]:
        """The status; ``reclaim`` predicts Prod reclaimable / peak for the pods that had metrics."""
        start = now - self._policy.aggregate_duration
        node_mem = self._memory_kind("node")
        pod_mem = self._memory_kind("pod")
        pods_metric = []
        measured = []
        for meta in pods:
            usage = self._resource_map(self._query("pod_cpu_usage", pod_mem, {"pod_uid": meta.pod.uid}, start,
                                                   now), "avg")
            if not usage:
                continue                      # no samples in the window: dropped, as upstream
            measured.append(meta)
            devices = self._gpu_devices("pod", {"pod_uid": meta.pod.uid}, gpus, start, now)
            if devices:
                usage["devices"] = devices
            pods_metric.append({"namespace": meta.pod.namespace, "name": meta.pod.name, "podUsage": usage,
                                "priority": meta.pod.priority_class, "qos": meta.pod.qos_class})
        pods_metric.sort(key=lambda p: (p["namespace"], p["name"]))
        node_usage = self._resource_map(self._query("node_cpu_usage", node_mem, None, start, now), "avg")
        node_metric: dict[str, Any] = {
            "nodeUsage": node_usage,
            "aggregatedNodeUsages": self._aggregated("node_cpu_usage", node_mem, now),
            "systemUsage": self._resource_map(self._query("sys_cpu_usage", "sys_memory_usage", None, start, now),
                                              "avg"),
            "aggregatedSystemUsages": self._aggregated("sys_cpu_usage", "sys_memory_usage", now),
        }
        devices = self._gpu_devices("node", {}, gpus, start, now)
        if devices and node_usage:
            node_usage["devices"] = devices
        numa_usages = self._numa_usages(start, now)
        if numa_usages:
            node_metric["numaUsages"] = numa_usages
        prediction = reclaim(measured) if reclaim is not None else None
        status: dict[str, Any] = {
            "updateTime": dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "nodeMetric": node_metric,
            "podsMetric": pods_metric,
            "hostApplicationMetric": self._host_apps(host_apps, start, now),
            "prodReclaimableMetric": {"resource": _predicted(prediction.reclaimable if prediction else None)},
        }
        if prediction is not None and prediction.peak is not None:
            status["prodPeakMetric"] = {"resource": _predicted(prediction.peak)}
        return status


def _predicted(value: Resources | None) -> dict[str, Any]:
    if value is None:
        return {}
    return {"resources": {"cpu": format_milli(value.cpu_milli), "memory": format_bytes(value.memory_bytes)}}


def node_metric_object(node: str, spec: Mapping[str, Any] | None, status: Mapping[str, Any]) -> dict[str, Any]:
    """The whole object as the API server would hold it (what standalone mode writes to disk)."""
    return {"apiVersion": API_VERSION, "kind": "NodeMetric", "metadata": {"name": node},
            "spec": dict(spec or {}), "status": dict(status)}


# --- the report (koordlet.component) ------------------------------------------------------------------------------


def collect_policy(ctx: Context, bad: LogOnce) -> CollectPolicy:
    """The NodeMetric spec's collect policy over the defaults (bad fields logged once, defaults kept)."""
    cluster = ctx.node.cluster
    obj = cluster.node_metric.object if cluster else None
    policy, errors = CollectPolicy.from_spec((obj or {}).get("spec"))
    for e in errors:
        bad(f"nodemetric {e}", "NodeMetric %s: %s", ctx.config.node_name, e)
    return policy


def allocatable(ctx: Context) -> Resources | None:
    """What the Prod reclaimable prediction caps against: the Node's raw/allocatable in a cluster, the host's
    online CPUs and memory without one (there is no kubelet reserve to subtract)."""
    if ctx.node.cluster is not None:
        obj = ctx.node.node_object()
        return node_allocatable(obj) if obj else None
    return Resources(1000 * len(ctx.node.topology.online), ctx.node.memory_bytes())


def _usage(resource_map: Mapping[str, Any] | None) -> dict[str, float]:
    """{"resources": {cpu, memory}} of a status as (cpu cores, memory bytes) for the metrics; {} stays {}."""
    res = (resource_map or {}).get("resources") or {}
    out = {}
    if "cpu" in res:
        out["cpu"] = milli(res["cpu"]) / 1000
    if "memory" in res:
        out["memory"] = float(math.ceil(parse_quantity(res["memory"])))
    return out


def record_metrics(ctx: Context, status: Mapping[str, Any], prediction: ReclaimPrediction | None) -> None:
    """What upstream's NodeMetric reporter records with each status it builds: the Prod reclaimable (0 with status
    1 when the prediction failed) and, with gate NodeMetricPromMetrics, the node / system / per-NUMA usages."""
    m = ctx.metrics
    value = prediction.reclaimable if prediction is not None else None
    if value is None:
        m.prod_reclaimable(wire.PRIORITY_PROD, None, None)
    else:
        m.prod_reclaimable(wire.PRIORITY_PROD, value.cpu_milli / 1000, float(value.memory_bytes))
    if ctx.config.gate("NodeMetricPromMetrics"):
        node = status.get("nodeMetric") or {}
        numa = {int(n["numaNodeID"]): (_usage(n.get("nodeUsage")), _usage(n.get("systemUsage")))
                for n in node.get("numaUsages") or []}
        m.node_metric_usages(_usage(node.get("nodeUsage")), _usage(node.get("systemUsage")), numa)


def node_metric(ctx: Context, bad: LogOnce, now: float | None = None) -> dict[str, Any]:
    """The NodeMetric object this agent would report now (status built from the metric cache)."""
    cluster = ctx.node.cluster
    obj = cluster.node_metric.object if cluster else None
    at = time.time() if now is None else now
    gpus = [g for g in ctx.node.gpus.inventory.gpus if not g.lost] if ctx.node.gpus else []
    kidled = ctx.node.kidled
    builder = NodeMetricBuilder(ctx.cache, collect_policy(ctx, bad), kidled_running=bool(kidled and kidled.running))
    if builder.memory_policy_fallback:
        bad("memory policy", "NodeMetric %s: %s", ctx.config.node_name, builder.memory_policy_fallback)
    else:
        bad.forget("memory policy")
    predicted: list[ReclaimPrediction] = []

    def reclaim(pods: list[PodMeta]) -> ReclaimPrediction:
        predicted.append(ctx.prediction.reclaimable(at, allocatable(ctx), pods))
        return predicted[-1]

    status = builder.status(ctx.node.pods, at, reclaim, ctx.node.host_apps(), gpus)
    record_metrics(ctx, status, predicted[-1] if predicted else None)
    return node_metric_object(ctx.config.node_name, (obj or {}).get("spec") or {}, status)


class NodeMetricReport:
    """``UpdateStatus`` of this node's NodeMetric every report interval of its spec (the first after one
    interval, as upstream)."""

    kind = "nodemetric"
    wait_first = True

    def __init__(self, ctx: Context) -> None:
        from koordlet.reporters.cluster import NodeMetricStatusWriter
        assert ctx.node.cluster is not None
        self._ctx, self._cluster = ctx, ctx.node.cluster
        self._writer = NodeMetricStatusWriter(self._cluster.api, self._cluster.node_metric, ctx.config.node_name)
        self._bad = LogOnce(log, logging.ERROR)

    def interval(self) -> float:
        return collect_policy(self._ctx, self._bad).report_interval

    def ready(self) -> bool:
        return self._cluster.node_metric.synced.is_set()

    def send(self, stop: threading.Event) -> str:
        return self._writer.write(node_metric(self._ctx, self._bad)["status"], stop)


PLUGIN = Plugin("nodemetric", lambda ctx: NodeMetricReport(ctx) if ctx.node.cluster else None,
                when=lambda c: c.enable_node_metric_report, cluster=True)
