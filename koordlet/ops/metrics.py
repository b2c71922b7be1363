"""The agent's own Prometheus metrics, in per-agent registries (tests build their own agent or ``AgentMetrics``).

Two kinds of families live here:

- **Upstream's 41 ``koordlet_*`` families** (pkg/koordlet/metrics/*.go of koordinator-sh/koordinator), listed once
  in :data:`UPSTREAM_FAMILIES` with their type, label names, registry and the upstream file they come from. A
  scrape sees upstream's exact name, type and label names (the table test checks every one). Upstream keeps two
  registries and so do we: ``internal`` (the agent's own behaviour) and ``external`` (facts for users: resource
  summary, CPI, PSI, resctrl), served as ``/internal-metrics`` and ``/external-metrics``, and merged on
  ``/metrics`` (:meth:`AgentMetrics.pages`).
- **Our own families** (help text starting "(koordlet-py)"), all in the internal registry, as before.
- **The process's own** (:func:`register_process_collectors`): prometheus_client's ``process_*`` (CPU seconds,
  resident and virtual memory, open and maximum fds, start time), ``python_gc_*`` (collections, collected and
  uncollectable objects per generation) and ``python_info``, plus ``process_threads``; in the internal registry,
  so the operator's alerts on the agent's CPU, memory, fds and threads have something to read
  (deploy/monitoring/).

**Counters without ``_total``.** Go's client exposes a counter under the name it was given
(``# TYPE koordlet_pod_eviction counter`` / ``koordlet_pod_eviction{...} 1``); prometheus_client always adds
``_total`` (and a ``_created`` series). Upstream's counters are still ordinary prometheus_client ``Counter`` s here
(so in-process readers such as ``registry.get_sample_value`` see ``<name>_total``), and :func:`exposition`, which
the HTTP server uses instead of ``generate_latest``, writes the upstream families as Go does: counters under their
bare name, no ``_created`` series for any upstream family. Our own families keep prometheus_client's rendering
(``koordlet_loop_errors_total``...), so nothing that already scrapes them changes.

**Series of pods that are gone disappear.** Per-container and per-pod series are removed by their owners when a
container goes (CPI, PSI, cookies), reset and rewritten every cycle (CPU burst, container requests/limits), or,
for series keyed by a pod UID, removed when the pod leaves the informer's list (:meth:`AgentMetrics.pods_synced`).
The families upstream keeps in its expiring vectors (``pod_eviction_detail``,
``core_sched_cookie_manage_status``: a counter of an evicted pod would otherwise stay forever) drop a series five
minutes after its last change, as upstream's metric GC does (:meth:`AgentMetrics.expire`).
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# --- upstream's families ---------------------------------------------------------------------------------------

Kind = Literal["gauge", "counter", "histogram"]
Registry = Literal["internal", "external"]

SOURCE = "pkg/koordlet/metrics/"    # where upstream declares them (github.com/koordinator-sh/koordinator)
INTERNAL_PATH, EXTERNAL_PATH, DEFAULT_PATH = "/internal-metrics", "/external-metrics", "/metrics"
EXPIRE_AFTER = 300.0                 # upstream's metric GC: a series of an expiring family lives 5 min unchanged

# label names (upstream's metrics.go keys)
NODE, STATUS, RESOURCE, UNIT, PRIORITY, PREDICTOR = "node", "status", "resource", "unit", "priority", "predictor"
POD_UID, POD_NAME, POD_NS = "pod_uid", "pod_name", "pod_namespace"
CONTAINER_ID, CONTAINER_NAME = "container_id", "container_name"
PSI_LABELS = ("psi_resource_type", "psi_precision", "psi_degree", "cpu_full_supported")

# label values upstream uses
SUCCEEDED, FAILED = "succeeded", "failed"          # status of collect_*, core sched, runtime hooks
UNIT_CORE, UNIT_BYTE, UNIT_INTEGER = "core", "byte", "integer"


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Bucket bounds as client_golang's ExponentialBuckets computes them (each the previous times ``factor``), so
    the ``le`` values print the same."""
    out, bound = [], start
    for _ in range(count):
        out.append(bound)
        bound *= factor
    return tuple(out)


MILLISECOND_BUCKETS = exponential_buckets(0.01, 4, 8)     # 10 µs .. 163 ms (resource updates, runtime hooks)
KUBELET_BUCKETS = exponential_buckets(0.001, 4, 7)        # 1 ms .. 4 s (kubelet requests)


@dataclass(frozen=True)
class Family:
    """One upstream metric family as a scrape sees it."""

    name: str
    type: Kind
    labels: tuple[str, ...]
    registry: Registry
    source: str                      # the upstream file, under SOURCE
    help: str
    buckets: tuple[float, ...] = ()  # histograms only
    table: bool = False              # a gauge only ever set whole (TableGauge), a histogram observed in groups
    #                                  (TableHistogram)

    @property
    def upstream_file(self) -> str:
        return SOURCE + self.source


def _f(name: str, kind: Kind, labels: Sequence[str], registry: Registry, source: str, text: str,
       buckets: tuple[float, ...] = (), table: bool = False) -> Family:
    return Family("koordlet_" + name, kind, tuple(labels), registry, source, text, buckets, table)


_RESOURCE_SUMMARY = (NODE, RESOURCE, UNIT, POD_UID, POD_NAME, POD_NS, CONTAINER_ID, CONTAINER_NAME)

# Every upstream family: name, type, label names (in upstream's order), registry, upstream file, our help text.
UPSTREAM_FAMILIES: tuple[Family, ...] = (
    # common.go (internal)
    _f("start_time", "gauge", [NODE], "internal", "common.go", "Unix time the agent started"),
    _f("collect_node_cpu_info_status", "counter", [NODE, STATUS], "internal", "common.go",
       "Reads of the node's CPU information (host topology), by status"),
    _f("collect_node_numa_info_status", "counter", [NODE, STATUS], "internal", "common.go",
       "Reads of the node's NUMA information (host topology), by status"),
    _f("collect_node_local_storage_info_status", "counter", [NODE, STATUS], "internal", "common.go",
       "Reads of the node's local storage information (mount table, for blkio QoS), by status"),
    _f("pod_eviction", "counter", [NODE, "reason"], "internal", "common.go",
       "Pods evicted (API eviction accepted, or processes killed standalone)"),
    _f("pod_eviction_detail", "counter", [NODE, POD_NS, POD_NAME, "reason"], "internal", "common.go",
       "Pods evicted, per pod (a series goes 5 minutes after its last eviction)"),
    _f("node_used_cpu_cores", "gauge", [NODE], "internal", "common.go", "Node CPU usage in cores"),
    _f("node_used_memory_bytes", "gauge", [NODE], "internal", "common.go",
       "Node memory usage (MemTotal - MemAvailable) in bytes"),
    # core_sched.go (internal)
    _f("container_core_sched_cookie", "gauge",
       [NODE, POD_NAME, POD_NS, POD_UID, CONTAINER_NAME, CONTAINER_ID, "core_sched_group", "core_sched_cookie"],
       "internal", "core_sched.go", "The core scheduling cookie of the container (value 1)"),
    _f("core_sched_cookie_manage_status", "counter", [NODE, "core_sched_group", STATUS], "internal",
       "core_sched.go", "Core sched cookie operations by group and status (a series goes 5 minutes after its "
       "last change)"),
    # cpi.go (external)
    _f("container_cpi", "gauge", [NODE, CONTAINER_ID, CONTAINER_NAME, POD_UID, POD_NAME, POD_NS, "cpi_field"],
       "external", "cpi.go", "Container cycles and instructions counted over the last CPI window"),
    # cpu_burst.go (internal)
    _f("container_scaled_cfs_burst_us", "gauge", [NODE, POD_NS, POD_NAME, CONTAINER_ID, CONTAINER_NAME],
       "internal", "cpu_burst.go", "cpu.cfs_burst_us set on the container by CPU burst", table=True),
    _f("container_scaled_cfs_quota_us", "gauge", [NODE, POD_NS, POD_NAME, CONTAINER_ID, CONTAINER_NAME],
       "internal", "cpu_burst.go", "cpu.cfs_quota_us the container was scaled to by CPU burst", table=True),
    # cpu_cpuset.go (internal)
    _f("cpuset_share_pool_cpu_cores", "gauge", [NODE], "internal", "cpu_cpuset.go",
       "CPUs in the LS share pools (cpu-shared-pools)"),
    _f("cpuset_be_share_pool_cpu_cores", "gauge", [NODE], "internal", "cpu_cpuset.go",
       "CPUs in the BE share pools (be-cpu-shared-pools)"),
    _f("cpuset_share_pool_info", "gauge", [NODE, "cpu"], "internal", "cpu_cpuset.go",
       "1 for each CPU in the LS share pools (gate PerCPUMetric)"),
    _f("cpuset_be_share_pool_info", "gauge", [NODE, "cpu"], "internal", "cpu_cpuset.go",
       "1 for each CPU in the BE share pools (gate PerCPUMetric)"),
    # cpu_suppress.go (internal)
    _f("be_suppress_cpu_cores", "gauge", [NODE, "type"], "internal", "cpu_suppress.go",
       "CPU cores the BE tier is suppressed to, by policy (type: cpuset | cfsQuota)"),
    _f("be_suppress_ls_used_cpu_cores", "gauge", [NODE], "internal", "cpu_suppress.go",
       "CPU cores used by non-BE pods when BE suppress last computed"),
    _f("be_suppress_be_used_cpu_cores", "gauge", [NODE], "internal", "cpu_suppress.go",
       "CPU cores used by the BE tier (besteffort cgroup), as last collected"),
    # host_application.go (internal)
    _f("host_application_resource_usage", "gauge",
       [NODE, "host_application_name", RESOURCE, "priority_class", "qos"], "internal", "host_application.go",
       "Usage of a NodeSLO host application (cpu in cores, memory in bytes)", table=True),
    # kubelet.go (internal)
    _f("kubelet_request_duration_seconds", "histogram", ["verb", "path", "code"], "internal", "kubelet.go",
       "Kubelet HTTP requests that got an answer, by verb, path and status code", KUBELET_BUCKETS),
    # node_metric.go (internal; recorded with gate NodeMetricPromMetrics)
    _f("node_metric_node_usage", "gauge", [NODE, RESOURCE, UNIT], "internal", "node_metric.go",
       "Node usage as last reported in the NodeMetric status"),
    _f("node_metric_system_usage", "gauge", [NODE, RESOURCE, UNIT], "internal", "node_metric.go",
       "System usage as last reported in the NodeMetric status"),
    _f("node_metric_numa_node_usage", "gauge", [NODE, "numa_node_id", RESOURCE, UNIT], "internal",
       "node_metric.go", "Per-NUMA node usage as last reported in the NodeMetric status"),
    _f("node_metric_numa_system_usage", "gauge", [NODE, "numa_node_id", RESOURCE, UNIT], "internal",
       "node_metric.go", "Per-NUMA system usage as last reported in the NodeMetric status"),
    # oom_score_adj.go (internal)
    _f("container_oom_score_adj", "gauge", [NODE, POD_NAME, POD_NS, POD_UID, CONTAINER_NAME], "internal",
       "oom_score_adj.go", "oom_score_adj set for the container (gate OOMScoreAdj)"),
    # prediction.go (internal)
    _f("node_predicted_resource_reclaimable", "gauge", [NODE, PREDICTOR, RESOURCE, UNIT], "internal",
       "prediction.go", "Prod reclaimable resources predicted, by predictor"),
    _f("node_predicted_resource_peak", "gauge", [NODE, PREDICTOR, RESOURCE, UNIT], "internal", "prediction.go",
       "Prod peak resources predicted, by predictor"),
    # psi.go (external)
    _f("container_psi", "gauge", [NODE, CONTAINER_ID, CONTAINER_NAME, POD_UID, POD_NAME, POD_NS, *PSI_LABELS],
       "external", "psi.go", "Container psi collected by koordlet"),
    _f("pod_psi", "gauge", [NODE, POD_UID, POD_NAME, POD_NS, *PSI_LABELS], "external", "psi.go",
       "Pod psi collected by koordlet"),
    # resctrl.go (external)
    _f("resctrl_llc_occupancy", "gauge", [NODE, "cache_id", "qos"], "external", "resctrl.go",
       "LLC occupancy in bytes of the resctrl class groups (LSR, LS, BE), per cache id"),
    _f("resctrl_memory_bandwidth", "gauge", [NODE, "cache_id", "qos", "mb_type"], "external", "resctrl.go",
       "Memory bandwidth counters of the resctrl class groups (LSR, LS, BE), per cache id"),
    # resource_executor.go (internal)
    _f("resource_update_duration_milliseconds", "histogram", ["type", STATUS], "internal",
       "resource_executor.go", "Time to write a kernel file (type: cgroup | default), by status (success | "
       "failed)", MILLISECOND_BUCKETS),
    # resource_summary.go (external)
    _f("node_resource_allocatable", "gauge", [NODE, RESOURCE, UNIT], "external", "resource_summary.go",
       "Batch and mid allocatable of the Node, as koord-manager set it"),
    _f("node_priority_resource_reclaimable", "gauge", [NODE, PRIORITY, RESOURCE, UNIT], "external",
       "resource_summary.go", "Reclaimable resources reported in the NodeMetric, by priority"),
    _f("node_resource_priority_reclaimable_status", "gauge", [NODE, PRIORITY], "external",
       "resource_summary.go", "0 when the reclaimable prediction of the priority succeeded, 1 when it failed"),
    _f("container_resource_requests", "gauge", _RESOURCE_SUMMARY, "external", "resource_summary.go",
       "Batch and mid requests of the container", table=True),
    _f("container_resource_limits", "gauge", _RESOURCE_SUMMARY, "external", "resource_summary.go",
       "Batch and mid limits of the container", table=True),
    # runtime_hook.go (internal)
    _f("runtime_hook_invoked_duration_milliseconds", "histogram", [NODE, "hook", "stage", STATUS], "internal",
       "runtime_hook.go", "Time to run the runtime hooks of an NRI event, by hook, stage and status",
       MILLISECOND_BUCKETS),
    _f("runtime_hook_reconciler_invoked_duration_milliseconds", "histogram",
       [NODE, "level", "resource_type", STATUS], "internal", "runtime_hook.go",
       "Time to decide the settings the runtime hooks own for one pod or container, per cgroup resource, in the "
       "periodic reconcile", MILLISECOND_BUCKETS, table=True),
)
UPSTREAM: Mapping[str, Family] = {f.name: f for f in UPSTREAM_FAMILIES}

# NRI event -> upstream's runtime hook stage (pkg/runtimeproxy/config RuntimeHookType)
HOOK_STAGES: Mapping[str, str] = {
    "RunPodSandbox": "PreRunPodSandbox",
    "CreateContainer": "PreCreateContainer",
    "UpdateContainer": "PreUpdateContainerResources",
    "PostStartContainer": "PostStartContainer",
    "StopContainer": "PostStopContainer",
    "RemovePodSandbox": "PreRemoveRunPodSandbox",
}
HOOK_NAME = "koordlet-py"      # our hooks run as one handler per event, not one plugin at a time as upstream's


# --- exposition --------------------------------------------------------------------------------------------------


class _One:
    """One family as a collector, for ``generate_latest``."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterable[Metric]:
        return (self._metric,)


# prometheus_client's value formatting (untyped there), so these counters print as every other series does
_format: Callable[[float], str] = floatToGoString


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _bare_counter(metric: Metric) -> bytes:
    """A counter as Go's client writes it: the family and its samples under the bare name, no ``_created``."""
    name = metric.name
    doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    lines = [f"# HELP {name} {doc}\n", f"# TYPE {name} counter\n"]
    for s in metric.samples:
        if s.name != name + "_total":
            continue
        labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(s.labels.items()))
        lines.append(f"{name}{{{labels}}} {_format(s.value)}\n" if labels else f"{name} {_format(s.value)}\n")
    return "".join(lines).encode()


def exposition(registry: Collector) -> bytes:
    """The Prometheus text format (0.0.4) of ``registry``, with upstream's families as upstream's Go client writes
    them (see the module docstring); everything else exactly as ``generate_latest`` writes it."""
    out: list[bytes] = []
    for metric in registry.collect():
        if metric.name not in UPSTREAM or metric.type == "gauge":
            out.append(generate_latest(_One(metric)))
        elif metric.type == "counter":
            out.append(_bare_counter(metric))
        else:
            trimmed = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            trimmed.samples = [s for s in metric.samples if s.name != metric.name + "_created"]
            out.append(generate_latest(_One(trimmed)))
    return b"".join(out)


# --- the agent's metrics ---------------------------------------------------------------------------------------


class PodLabels(Protocol):
    """A pod as the per-pod series see it (a ``koordlet.states.pod.Pod``)."""

    @property
    def uid(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...


class ResourceRow(NamedTuple):
    """One batch/mid resource of one container, as ``container_resource_requests`` / ``_limits`` label it
    (built by ``koordlet.states.informer.resource_rows``); 0 = not set."""

    pod_uid: str
    pod_name: str
    pod_namespace: str
    container_id: str          # as the pod status has it: <runtime>://<id>
    container_name: str
    resource: str
    request: int
    limit: int


class TableGauge:
    """A gauge family only ever set whole (:meth:`replace`, directly or through a :class:`GaugeCycle`), kept as one
    dict of label values -> value and turned into samples when collected. prometheus_client keeps a child
    ``Gauge`` per series (its own lock, value holder and label dict: about 700 bytes), which for families of every
    container, rewritten at every pod sync or cycle, was most of the agent's per-container metric state. Scrapes
    and ``get_sample_value`` see an ordinary gauge; a scrape sees the last whole set, never part of one."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._values: Mapping[tuple[str, ...], float] = {}
        registry.register(self)

    def replace(self, values: Mapping[tuple[str, ...], float]) -> None:
        """Make ``values`` (label values in ``labelnames`` order -> value) the family's whole set of series."""
        self._values = {labels: float(value) for labels, value in values.items()}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in self._values.items():
            family.add_metric(labels, value)
        return (family,)


class TableHistogram:
    """A histogram family whose observations come in groups: several series observed with one value (the periodic
    reconcile times each pod once and observes that time under every resource it decided, ~1,000 observations a
    second at 250 pods). Each series is one list of per-bucket counts and the sum; a group costs one bucket search
    and one list increment per series, where prometheus_client's children cost a lock, a search and two value
    updates per observation. Scrapes and ``get_sample_value`` see an ordinary histogram without ``_created`` (as
    upstream's Go client writes one)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        bounds = [float(b) for b in buckets]
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        self._les = tuple(_format(b) for b in bounds)
        self._series: dict[tuple[str, ...], list[float]] = {}    # label values -> per-bucket counts, then the sum
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, series: Iterable[tuple[str, ...]], value: float) -> None:
        """One observation of ``value`` in each of ``series`` (label values in ``labelnames`` order)."""
        at = bisect.bisect_left(self._bounds, value)
        width = len(self._bounds)
        with self._lock:
            for key in series:
                row = self._series.get(key)
                if row is None:
                    row = self._series[key] = [0.0] * (width + 1)
                row[at] += 1
                row[width] += value

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            rows = [(key, list(row)) for key, row in self._series.items()]
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, row in rows:
            cumulative = list(itertools.accumulate(row[:-1]))
            family.add_metric(list(key), list(zip(self._les, cumulative, strict=True)), row[-1])
        return (family,)


Vector = Gauge | Counter | Histogram | TableGauge | TableHistogram


class _ThreadsCollector:
    """``process_threads``: the OS threads of this process (``Threads:`` of ``/proc/self/status``), the one process
    fact prometheus_client's ProcessCollector leaves out (the Rust client's process collector has it under this
    name). Every Python thread is one; a leak shows here before it shows in memory."""

    def __init__(self, proc: str = "/proc") -> None:
        self._status = f"{proc}/self/status"

    def collect(self) -> Iterable[Metric]:
        try:
            with open(self._status, "rb") as f:
                for line in f:
                    if line.startswith(b"Threads:"):
                        yield GaugeMetricFamily("process_threads", "(koordlet-py) OS threads of the agent process",
                                                value=float(line.split()[1]))
                        return
        except OSError:          # no procfs (not Linux): the family is absent, as ProcessCollector's are
            return


def register_process_collectors(registry: CollectorRegistry) -> None:
    """The process's own metrics into ``registry`` (each registry of each AgentMetrics: tests build many)."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(_ThreadsCollector())


class GaugeCycle:
    """The series one cycle sets on a gauge family, published together at the end of the cycle as the family's
    whole set: the series of the previous cycle that this one did not set are gone. Clearing the gauge first and
    refilling it as the cycle goes (what this replaces) let a scrape between the two see a family with some or
    none of its series; here a scrape sees the previous cycle's set or this one's. One writer per family (the
    strategy or collector that owns it)."""

    def __init__(self, gauge: TableGauge) -> None:
        self._gauge = gauge
        self._values: dict[tuple[str, ...], float] = {}

    def set(self, labels: tuple[str, ...], value: float) -> None:
        self._values[labels] = value

    def publish(self) -> None:
        """Make this cycle's series the family's, and start the next cycle empty."""
        self._gauge.replace(self._values)
        self._values = {}


class AgentMetrics:
    def __init__(self, node: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.node = node
        self._clock = clock                  # when expiring series changed (tests pass their own)
        self.internal = CollectorRegistry(auto_describe=True)
        self.external = CollectorRegistry(auto_describe=True)
        # /metrics: both (upstream merges its two gatherers); also what in-process readers query
        self.registry = CollectorRegistry()
        self.registry.register(self.internal)
        self.registry.register(self.external)
        self._vectors: dict[str, Vector] = {}
        for family in UPSTREAM_FAMILIES:
            self._vectors[family.name] = _vector(family, self.internal if family.registry == "internal"
                                                 else self.external)
        self._lock = threading.Lock()
        self._touched: dict[tuple[str, tuple[str, ...]], float] = {}    # expiring series -> last change
        self._live_pods: frozenset[str] = frozenset()
        r = self.internal

        # --- upstream's families (UPSTREAM_FAMILIES), by the code that owns each fact ---
        self.start_time = self._gauge("koordlet_start_time")                         # agent
        self.collect_node_cpu_info_status = self._counter("koordlet_collect_node_cpu_info_status")    # NodeState
        self.collect_node_numa_info_status = self._counter("koordlet_collect_node_numa_info_status")  # NodeState
        self.collect_node_local_storage_info_status = self._counter(
            "koordlet_collect_node_local_storage_info_status")                         # qos/blkio
        self.pod_eviction = self._counter("koordlet_pod_eviction")                   # qos/evict
        self.pod_eviction_detail = self._counter("koordlet_pod_eviction_detail")     # qos/evict
        self.node_used_cpu_cores = self._gauge("koordlet_node_used_cpu_cores")       # collectors/usage
        self.node_used_memory_bytes = self._gauge("koordlet_node_used_memory_bytes")
        self.container_core_sched_cookie = self._gauge("koordlet_container_core_sched_cookie")   # qos/core_sched
        self.core_sched_cookie_manage_status = self._counter("koordlet_core_sched_cookie_manage_status")
        self.container_cpi = self._gauge("koordlet_container_cpi")                   # collectors/cpi
        self.container_scaled_cfs_burst_us = self._table("koordlet_container_scaled_cfs_burst_us")  # qos/cpu_burst
        self.container_scaled_cfs_quota_us = self._table("koordlet_container_scaled_cfs_quota_us")
        self.cpuset_share_pool_cpu_cores = self._gauge("koordlet_cpuset_share_pool_cpu_cores")   # states/nodestate
        self.cpuset_be_share_pool_cpu_cores = self._gauge("koordlet_cpuset_be_share_pool_cpu_cores")
        self.cpuset_share_pool_info = self._gauge("koordlet_cpuset_share_pool_info")
        self.cpuset_be_share_pool_info = self._gauge("koordlet_cpuset_be_share_pool_info")
        self.be_suppress_cpu_cores = self._gauge("koordlet_be_suppress_cpu_cores")   # qos/cpu_suppress
        self.be_suppress_ls_used_cpu_cores = self._gauge("koordlet_be_suppress_ls_used_cpu_cores")
        self.be_suppress_be_used_cpu_cores = self._gauge("koordlet_be_suppress_be_used_cpu_cores")  # usage (BE)
        self.host_application_resource_usage = self._table("koordlet_host_application_resource_usage")
        self.kubelet_request_duration_seconds = self._histogram("koordlet_kubelet_request_duration_seconds")
        self.node_metric_node_usage = self._gauge("koordlet_node_metric_node_usage")   # reporters/nodemetric
        self.node_metric_system_usage = self._gauge("koordlet_node_metric_system_usage")
        self.node_metric_numa_node_usage = self._gauge("koordlet_node_metric_numa_node_usage")
        self.node_metric_numa_system_usage = self._gauge("koordlet_node_metric_numa_system_usage")
        self.container_oom_score_adj = self._gauge("koordlet_container_oom_score_adj")   # nri_plugin/hooks
        self.node_predicted_resource_reclaimable = self._gauge("koordlet_node_predicted_resource_reclaimable")
        self.node_predicted_resource_peak = self._gauge("koordlet_node_predicted_resource_peak")   # prediction
        self.container_psi = self._gauge("koordlet_container_psi")                   # collectors/psi
        self.pod_psi = self._gauge("koordlet_pod_psi")
        self.resctrl_llc_occupancy = self._gauge("koordlet_resctrl_llc_occupancy")   # (no resctrl monitor yet)
        self.resctrl_memory_bandwidth = self._gauge("koordlet_resctrl_memory_bandwidth")
        self.resource_update_duration_milliseconds = self._histogram(
            "koordlet_resource_update_duration_milliseconds")                         # executor
        self.node_resource_allocatable = self._gauge("koordlet_node_resource_allocatable")   # NodeState (Node)
        self.node_priority_resource_reclaimable = self._gauge("koordlet_node_priority_resource_reclaimable")
        self.node_resource_priority_reclaimable_status = self._gauge(
            "koordlet_node_resource_priority_reclaimable_status")                    # reporters/nodemetric
        self.container_resource_requests = self._table("koordlet_container_resource_requests")   # pod sync
        self.container_resource_limits = self._table("koordlet_container_resource_limits")
        self.runtime_hook_invoked_duration_milliseconds = self._histogram(
            "koordlet_runtime_hook_invoked_duration_milliseconds")                    # nri_plugin/plugin
        self.runtime_hook_reconciler_invoked_duration_milliseconds = self._table_histogram(
            "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds")         # qos/pod_resources

        # --- ours (koordlet-py), all in the internal registry ---
        self.collect_skipped = Counter(
            "koordlet_collect_skipped", "(koordlet-py) cgroup readings skipped: vanished = the pod or "
            "container went away mid-read (normal), error = unreadable or malformed file",
            ["node", "collector", "reason"], registry=r)
        self.collect_cycle_seconds = Histogram(
            "koordlet_collect_cycle_duration_seconds", "(koordlet-py) duration of one collection cycle",
            ["node"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0), registry=r)
        self.pods = Gauge("koordlet_pods", "(koordlet-py) pods known on this node", ["node", "source"],
                          registry=r)
        self.pod_sync_errors = Counter("koordlet_pod_sync_errors", "(koordlet-py) failed pod syncs",
                                       ["node", "source"], registry=r)
        self.metric_cache_series = Gauge("koordlet_metric_cache_series",
                                         "(koordlet-py) time series held in memory by the metric cache",
                                         ["node"], registry=r)
        self.metric_cache_points = Gauge("koordlet_metric_cache_points",
                                         "(koordlet-py) samples held in memory by the metric cache", ["node"],
                                         registry=r)
        self.metric_cache_point_bytes = Gauge("koordlet_metric_cache_point_bytes",
                                              "(koordlet-py) bytes of the metric cache's sample buffers in memory "
                                              "(raw heads and compressed chunks)", ["node"], registry=r)
        self.metric_cache_history_seconds = Gauge(
            "koordlet_metric_cache_history_seconds", "(koordlet-py) seconds of history the metric cache holds on "
            "disk: now (held), and what its max_bytes holds at the rate seen, up to the retention (capacity; "
            "absent until roll-ups have run ten minutes)", ["node", "kind"], registry=r)
        self.reports = Counter("koordlet_report", "(koordlet-py) report attempts by kind (nodemetric, "
                               "noderesourcetopology, files) and result (updated, created, unchanged, absent, "
                               "failed...)", ["node", "kind", "result"], registry=r)
        # GPUs (koordlet-py: upstream sends GPU usage only to its metric cache and NodeMetric)
        gpu = ["node", "minor", "uuid"]
        self.gpu_core_usage = Gauge("koordlet_gpu_core_usage", "(koordlet-py) Σ SM utilization of the GPU's "
                                    "processes, percent of one card", gpu, registry=r)
        self.gpu_utilization = Gauge("koordlet_gpu_utilization", "(koordlet-py) percent of time a kernel ran on "
                                     "the GPU (NVML utilization.gpu; absent in MIG mode)", gpu, registry=r)
        self.gpu_memory_used_bytes = Gauge("koordlet_gpu_memory_used_bytes", "(koordlet-py) GPU memory in use "
                                           "(device-wide)", gpu, registry=r)
        self.gpu_memory_total_bytes = Gauge("koordlet_gpu_memory_total_bytes", "(koordlet-py) GPU memory size",
                                            gpu, registry=r)
        self.gpu_healthy = Gauge("koordlet_gpu_healthy", "(koordlet-py) 1 while the GPU is healthy, 0 after an "
                                 "XID or when it fell off the bus", gpu, registry=r)
        pod_gpu = ["node", "pod_uid", "pod_name", "pod_namespace", "minor", "uuid"]
        self.pod_gpu_core_usage = Gauge("koordlet_pod_gpu_core_usage", "(koordlet-py) SM utilization of the "
                                        "pod's processes on one GPU, percent of the card", pod_gpu, registry=r)
        self.pod_gpu_memory_used_bytes = Gauge("koordlet_pod_gpu_memory_used_bytes", "(koordlet-py) GPU memory "
                                               "held by the pod's processes on one GPU", pod_gpu, registry=r)
        # HAMi-core vGPUs (collectors/hami_vgpu.py, gate HamiCoreVGPUMonitor): libvgpu's shared region per container
        vgpu = ["node", "pod_uid", "pod_name", "pod_namespace", "container_name", "vdevice_index", "device_uuid"]
        self.container_vgpu_memory_used_bytes = Gauge(
            "koordlet_container_vgpu_memory_used_bytes", "(koordlet-py) device memory the container's processes "
            "hold on one vGPU, as HAMi-core's libvgpu accounts it", vgpu, registry=r)
        self.container_vgpu_memory_limit_bytes = Gauge(
            "koordlet_container_vgpu_memory_limit_bytes", "(koordlet-py) libvgpu's device memory limit of the "
            "container on one vGPU", vgpu, registry=r)
        self.container_vgpu_core_utilization = Gauge(
            "koordlet_container_vgpu_core_utilization", "(koordlet-py) SM utilization of the container's "
            "processes on one vGPU, percent of the card, as libvgpu samples it", vgpu, registry=r)
        self.executor_updates = Counter(
            "koordlet_executor_updates", "(koordlet-py) kernel file updates by resource (cgroup file or sysctl "
            "name) and outcome: written, missing (file absent: feature or cgroup not there), error_<ERRNO>",
            ["node", "resource", "outcome"], registry=r)
        self.loop_errors = Counter(
            "koordlet_loop_errors", "(koordlet-py) steps of an agent loop that raised, by loop (the loop goes on)",
            ["node", "loop"], registry=r)
        self.qos_strategy_errors = Counter(
            "koordlet_qos_strategy_errors", "(koordlet-py) QoS strategy cycles that failed, by strategy",
            ["node", "strategy"], registry=r)
        # evictions (qos/evict.py): upstream's koordlet_pod_eviction counts only evictions that happened; this
        # one counts every attempt by the gate that asked and its outcome, dry runs and failures included
        self.pod_eviction_attempts = Counter(
            "koordlet_pod_eviction_attempts", "(koordlet-py) eviction attempts by gate (MemoryEvict, CPUEvict, "
            "...) and result: evicted, failed (API refused), killed, kill_failed (standalone), would_evict "
            "(standalone with kill off)", ["node", "gate", "result"], registry=r)
        self.blkio_block_errors = Counter(
            "koordlet_blkio_block_errors", "(koordlet-py) blkio QoS blocks skipped because they did not resolve to "
            "a disk, counted per reconcile cycle, by block type", ["node", "block_type"], registry=r)
        # resctrl (qos/resctrl.py)
        self.resctrl_pods_without_group = Gauge(
            "koordlet_resctrl_pods_without_group", "(koordlet-py) pods with a node.koordinator.sh/resctrl "
            "annotation running in their class group because every CLOSID is in use", ["node"], registry=r)
        self.resctrl_closid_exhausted = Counter(
            "koordlet_resctrl_closid_exhausted", "(koordlet-py) times a pod-level resctrl group could not be "
            "created because every CLOSID was in use (once per pod and episode)", ["node"], registry=r)
        # net QoS (qos/net_qos.py): tc changes are netlink requests, not executor writes
        self.net_qos_tc_operations = Counter(
            "koordlet_net_qos_tc_operations", "(koordlet-py) tc changes made over netlink by net QoS, by operation "
            "(root, del-root, add-class, change-class, del-class, add-u32, add-cgroup, del-filter) and outcome "
            "(written, error_<ERRNO>)", ["node", "op", "outcome"], registry=r)
        # NRI plugin (nri_plugin/plugin.py)
        self.nri_hook_seconds = Histogram(
            "koordlet_nri_hook_seconds", "(koordlet-py) time to answer an NRI call, by method (decode, hooks, "
            "encode; fail-open answers included)", ["node", "hook"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=r)
        self.nri_hook_errors = Counter(
            "koordlet_nri_hook_errors", "(koordlet-py) NRI calls answered fail-open (empty adjustment), by method "
            "and reason (timeout: over the hook budget; error: a hook raised; bad_request: undecodable message)",
            ["node", "hook", "reason"], registry=r)
        self.nri_reconnects = Counter(
            "koordlet_nri_reconnects", "(koordlet-py) NRI connection attempts that ended or failed, by reason "
            "(socket_absent, refused, connect_error, register_failed, eof, protocol_error, partial_timeout, closed)",
            ["node", "reason"], registry=r)
        self.nri_connected = Gauge("koordlet_nri_connected", "(koordlet-py) 1 while registered with the "
                                   "runtime's NRI socket", ["node"], registry=r)
        # PodResources proxy (koordlet/podresources/)
        self.pod_resources_requests = Counter(
            "koordlet_pod_resources_proxy_requests", "(koordlet-py) PodResources calls answered by the proxy, by "
            "method and gRPC status code", ["node", "method", "code"], registry=r)
        self.pod_resources_upstream_calls = Counter(
            "koordlet_pod_resources_proxy_upstream_calls", "(koordlet-py) calls the proxy made to the kubelet's "
            "PodResources socket (at most one per second per method), by method and result (ok, error)",
            ["node", "method", "result"], registry=r)
        self.pod_resources_staleness = Gauge(
            "koordlet_pod_resources_proxy_staleness_seconds", "(koordlet-py) age of the kubelet PodResources "
            "answer the proxy serves from (grows while the kubelet is away; -1: it never answered)", ["node"],
            registry=r)
        # CPI fd budget (collectors/cpi.py)
        self.cpi_containers = Gauge(
            "koordlet_cpi_containers", "(koordlet-py) containers counted in the last CPI window (counted) and those "
            "left for a later window because the fd budget was short (deferred)", ["node", "state"], registry=r)
        # node PSI (collectors/psi.py); label values as upstream's pod/container PSI
        self.node_psi = Gauge("koordlet_node_psi", "(koordlet-py) node pressure stall information from "
                              "/proc/pressure: percent of wall time stalled (full only where the kernel has it)",
                              ["node", *PSI_LABELS[:3]], registry=r)
        register_process_collectors(r)
        self.start_time.labels(node).set_to_current_time()

    # --- building ----------------------------------------------------------------------------------------------

    def _gauge(self, name: str) -> Gauge:
        vector = self._vectors[name]
        assert isinstance(vector, Gauge), name
        return vector

    def _counter(self, name: str) -> Counter:
        vector = self._vectors[name]
        assert isinstance(vector, Counter), name
        return vector

    def _histogram(self, name: str) -> Histogram:
        vector = self._vectors[name]
        assert isinstance(vector, Histogram), name
        return vector

    def _table_histogram(self, name: str) -> TableHistogram:
        vector = self._vectors[name]
        assert isinstance(vector, TableHistogram), name
        return vector

    def _table(self, name: str) -> TableGauge:
        vector = self._vectors[name]
        assert isinstance(vector, TableGauge), name
        return vector

    def pages(self) -> dict[str, CollectorRegistry]:
        """What the HTTP server serves, as upstream's koordlet: both registries, and each on its own."""
        return {DEFAULT_PATH: self.registry, INTERNAL_PATH: self.internal, EXTERNAL_PATH: self.external}

    # --- recording (one method per fact where there is more to it than one ``labels().set()``) ----------------

    def skipped(self, collector: str, reason: str, n: int = 1) -> None:
        if n:
            self.collect_skipped.labels(self.node, collector, reason).inc(n)

    def collect_status(self, counter: Counter, ok: bool) -> None:
        """One read of node information (``collect_node_*_info_status``)."""
        counter.labels(self.node, SUCCEEDED if ok else FAILED).inc()

    def evicted(self, namespace: str, name: str, reason: str) -> None:
        """An eviction that happened (upstream's RecordPodEviction); the per-pod series expires."""
        self.pod_eviction.labels(self.node, reason).inc()
        labels = (self.node, namespace, name, reason)
        self.pod_eviction_detail.labels(*labels).inc()
        self._touch("koordlet_pod_eviction_detail", labels)

    def core_sched_managed(self, group: str, ok: bool) -> None:
        labels = (self.node, group, SUCCEEDED if ok else FAILED)
        self.core_sched_cookie_manage_status.labels(*labels).inc()
        self._touch("koordlet_core_sched_cookie_manage_status", labels)

    def oom_score_adj(self, pod: PodLabels, container: str, value: int) -> None:
        self.container_oom_score_adj.labels(self.node, pod.name, pod.namespace, pod.uid, container).set(value)

    def kubelet_request(self, path: str, code: int, seconds: float) -> None:
        self.kubelet_request_duration_seconds.labels("get", path, str(code)).observe(seconds)

    def resource_updated(self, cgroup: bool, ok: bool, seconds: float) -> None:
        self.resource_update_duration_milliseconds.labels(
            "cgroup" if cgroup else "default", "success" if ok else "failed").observe(seconds * 1000)

    def runtime_hook(self, event: str, ok: bool, seconds: float) -> None:
        """One NRI event's hooks (upstream: one hook plugin at one stage); events without an upstream stage
        (Synchronize) are not recorded."""
        stage = HOOK_STAGES.get(event)
        if stage is not None:
            self.runtime_hook_invoked_duration_milliseconds.labels(
                self.node, HOOK_NAME, stage, SUCCEEDED if ok else FAILED).observe(seconds * 1000)

    def hook_reconciled(self, level: str, resources: Iterable[str], ok: bool, seconds: float) -> None:
        """One observation per resource the periodic reconcile decided for one pod or container at ``level``
        (the reconciler calls this for every pod every second; the family's labels are bounded: levels ×
        resources × status, and it never expires)."""
        status = SUCCEEDED if ok else FAILED
        self.runtime_hook_reconciler_invoked_duration_milliseconds.observe(
            [(self.node, level, resource, status) for resource in set(resources)], seconds * 1000)

    def share_pools(self, ls: Iterable[Iterable[int]], be: Iterable[Iterable[int]], per_cpu: bool) -> None:
        """The CPU share pools as reported on the NodeResourceTopology (per NUMA node), counted and, with gate
        PerCPUMetric, one series per CPU (replacing the last ones: a CPU that left a pool must not stay)."""
        ls_cpus = sorted({c for pool in ls for c in pool})
        be_cpus = sorted({c for pool in be for c in pool})
        self.cpuset_share_pool_cpu_cores.labels(self.node).set(len(ls_cpus))
        self.cpuset_be_share_pool_cpu_cores.labels(self.node).set(len(be_cpus))
        if per_cpu:
            _replace(self.cpuset_share_pool_info, {(self.node, str(c)): 1.0 for c in ls_cpus})
            _replace(self.cpuset_be_share_pool_info, {(self.node, str(c)): 1.0 for c in be_cpus})

    def node_allocatable(self, values: Mapping[str, float]) -> None:
        """Batch and mid allocatable of the Node (resource name -> value; cpu ones in milli-cores, unit
        ``integer``, memory ones in bytes), as upstream's Node informer records them."""
        for resource, value in values.items():
            unit = UNIT_BYTE if resource.endswith("memory") else UNIT_INTEGER
            self.node_resource_allocatable.labels(self.node, resource, unit).set(value)

    def prod_reclaimable(self, priority: str, cpu_cores: float | None, memory_bytes: float | None) -> None:
        """The NodeMetric report's reclaimable of one priority; None = the prediction failed (0 and status 1)."""
        failed = cpu_cores is None or memory_bytes is None
        self.node_priority_resource_reclaimable.labels(self.node, priority, "cpu", UNIT_CORE).set(cpu_cores or 0)
        self.node_priority_resource_reclaimable.labels(self.node, priority, "memory", UNIT_BYTE).set(
            memory_bytes or 0)
        self.node_resource_priority_reclaimable_status.labels(self.node, priority).set(1 if failed else 0)

    def predicted(self, predictor: str, reclaimable: tuple[float, float] | None,
                  peak: tuple[float, float] | None) -> None:
        """One predictor's answer ((cpu cores, memory bytes), None when it had none)."""
        for gauge, value in ((self.node_predicted_resource_reclaimable, reclaimable),
                             (self.node_predicted_resource_peak, peak)):
            if value is not None:
                gauge.labels(self.node, predictor, "cpu", UNIT_CORE).set(value[0])
                gauge.labels(self.node, predictor, "memory", UNIT_BYTE).set(value[1])

    def node_metric_usages(self, node: Mapping[str, float], system: Mapping[str, float],
                           numa: Mapping[int, tuple[Mapping[str, float], Mapping[str, float]]]) -> None:
        """The usages of the NodeMetric status just built (resource -> cpu cores / memory bytes; per NUMA node:
        (node usage, system usage)); they replace the last ones, so a NUMA node that dropped out goes."""
        def series(values: Mapping[str, float], *extra: str) -> dict[tuple[str, ...], float]:
            return {(self.node, *extra, resource, UNIT_CORE if resource == "cpu" else UNIT_BYTE): value
                    for resource, value in values.items()}

        numa_node: dict[tuple[str, ...], float] = {}
        numa_system: dict[tuple[str, ...], float] = {}
        for numa_id, (on_node, on_system) in numa.items():
            numa_node.update(series(on_node, str(numa_id)))
            numa_system.update(series(on_system, str(numa_id)))
        _replace(self.node_metric_node_usage, series(node))
        _replace(self.node_metric_system_usage, series(system))
        _replace(self.node_metric_numa_node_usage, numa_node)
        _replace(self.node_metric_numa_system_usage, numa_system)

    def pods_synced(self, uids: Iterable[str], rows: Iterable[ResourceRow]) -> None:
        """After every good pod sync (``uids``: the pods listed): the containers' batch/mid requests and limits
        replaced by this sync's (upstream resets and rewrites them on every sync), and every series of a pod that
        left the list since the last sync removed."""
        requests: dict[tuple[str, ...], float] = {}
        limits: dict[tuple[str, ...], float] = {}
        for row in rows:
            # units as upstream labels them: requests "integer", limits "byte", whatever the resource
            where = (row.pod_uid, row.pod_name, row.pod_namespace, row.container_id, row.container_name)
            if row.request:
                requests[(self.node, row.resource, UNIT_INTEGER, *where)] = row.request
            if row.limit:
                limits[(self.node, row.resource, UNIT_BYTE, *where)] = row.limit
        self.container_resource_requests.replace(requests)
        self.container_resource_limits.replace(limits)
        live = frozenset(uids)
        with self._lock:
            gone, self._live_pods = self._live_pods - live, live
        if gone:
            self.forget_pods(gone)

    def forget_pods(self, uids: Iterable[str]) -> None:
        """Remove every series labelled with one of these pod UIDs (the pods are gone)."""
        uids = set(uids)
        for vector in self._pod_vectors():
            names = _label_names(vector)
            at = names.index(POD_UID)
            for values in _children(vector):
                if values[at] in uids:
                    vector.remove(*values)

    def _pod_vectors(self) -> Iterator[Gauge | Counter]:
        for family in UPSTREAM_FAMILIES:
            vector = self._vectors[family.name]
            if POD_UID in family.labels and isinstance(vector, (Gauge, Counter)):
                yield vector
        yield self.pod_gpu_core_usage
        yield self.pod_gpu_memory_used_bytes
        yield self.container_vgpu_memory_used_bytes
        yield self.container_vgpu_memory_limit_bytes
        yield self.container_vgpu_core_utilization

    def _touch(self, family: str, labels: tuple[str, ...]) -> None:
        with self._lock:
            self._touched[(family, labels)] = self._clock()

    def expire(self, now: float | None = None) -> int:
        """Drop the series of expiring families unchanged for :data:`EXPIRE_AFTER` seconds (upstream's metric
        GC); called by the agent's housekeeping loop. Returns how many went."""
        now = self._clock() if now is None else now
        with self._lock:
            old = [key for key, at in self._touched.items() if now - at >= EXPIRE_AFTER]
            for key in old:
                del self._touched[key]
        for name, labels in old:
            vector = self._vectors[name]
            assert not isinstance(vector, TableGauge | TableHistogram), name   # only series set one by one expire
            try:
                vector.remove(*labels)
            except KeyError:
                pass
        return len(old)


def _vector(family: Family, registry: CollectorRegistry) -> Vector:
    if family.table and family.type == "histogram":
        return TableHistogram(family.name, family.help, family.labels, family.buckets, registry)
    if family.table:
        return TableGauge(family.name, family.help, family.labels, registry)
    if family.type == "gauge":
        return Gauge(family.name, family.help, family.labels, registry=registry)
    if family.type == "counter":
        return Counter(family.name, family.help, family.labels, registry=registry)
    return Histogram(family.name, family.help, family.labels, buckets=family.buckets, registry=registry)


def _replace(gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
    """Make ``values`` the gauge's whole set of series: the others removed, these set. Unlike ``clear()`` and
    setting again, a scrape in between never sees the family empty."""
    for labels in _children(gauge):
        if labels not in values:
            gauge.remove(*labels)
    for labels, value in values.items():
        gauge.labels(*labels).set(value)


def _label_names(vector: Gauge | Counter) -> list[str]:
    return list(vector._labelnames)      # no public accessor; fixed at construction


def _children(vector: Gauge | Counter) -> list[tuple[str, ...]]:
    """The label values of every series the vector holds (from its samples: the public view)."""
    names = _label_names(vector)
    seen: dict[tuple[str, ...], None] = {}
    for metric in vector.collect():
        for s in metric.samples:
            if s.name.endswith("_created"):
                continue
            seen[tuple(s.labels[n] for n in names)] = None
    return list(seen)
