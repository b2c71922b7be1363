"""Upstream's 41 ``koordlet_*`` families (``pkg/koordlet/metrics/*.go`` of koordinator-sh/koordinator), listed once in
:data:`UPSTREAM_FAMILIES` with their type, label names, registry and the upstream file they come from, so a scrape sees
upstream's exact name, type and label names (the table test checks every one); and upstream's label names and values.
:class:`.families.Families` builds each row's vector; the groups take theirs by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter", "histogram"]
Registry = Literal["internal", "external"]

SOURCE = "pkg/koordlet/metrics/"    # where upstream declares them (github.com/koordinator-sh/koordinator)

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
