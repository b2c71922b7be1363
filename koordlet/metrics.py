"""The agent's own Prometheus metrics, in one registry per agent instance (tests build their own).

Names follow upstream koordlet (reference/metrics-and-reports.md §7: prefix ``koordlet_``, label ``node``)
where upstream has the metric; the rest are ours and say so in their help text.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class HostAppLabels(Protocol):
    """What the host-application series are labelled with (a ``koordlet.states.hostapps.HostApp``; named
    structurally so that this module, below the states layer, does not import it)."""

    @property
    def name(self) -> str: ...
    @property
    def priority(self) -> str: ...
    @property
    def qos(self) -> str: ...


class AgentMetrics:
    def __init__(self, node: str) -> None:
        self.node = node
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.start_time = Gauge("koordlet_start_time", "Unix time the agent started", ["node"], registry=r)
        self.node_used_cpu_cores = Gauge("koordlet_node_used_cpu_cores", "Node CPU usage in cores",
                                         ["node"], registry=r)
        self.node_used_memory_bytes = Gauge("koordlet_node_used_memory_bytes",
                                            "Node memory usage (MemTotal - MemAvailable) in bytes", ["node"],
                                            registry=r)
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
        self.reports = Counter("koordlet_report", "(koordlet-py) report attempts by kind (nodemetric, "
                               "noderesourcetopology, files) and result (updated, created, unchanged, absent, "
                               "failed...)", ["node", "kind", "result"], registry=r)
        self.host_application_resource_usage = Gauge(
            "koordlet_host_application_resource_usage", "Usage of a NodeSLO host application (cpu in cores, "
            "memory in bytes)", ["node", "host_application_name", "resource", "priority_class", "qos"],
            registry=r)
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
        # BE CPU suppress and evictions (qos/cpu_suppress.py, qos/evict.py)
        self.be_suppress_cpu_cores = Gauge("koordlet_be_suppress_cpu_cores", "CPU cores the BE tier is "
                                           "suppressed to, by policy (type: cpuset | cfsQuota)", ["node", "type"],
                                           registry=r)
        self.be_suppress_ls_used_cpu_cores = Gauge("koordlet_be_suppress_ls_used_cpu_cores", "CPU cores used by "
                                                   "non-BE pods when BE suppress last computed", ["node"],
                                                   registry=r)
        self.pod_eviction = Counter(
            "koordlet_pod_eviction", "Pod evictions by reason (the feature gate) and result (koordlet-py "
            "labels: evicted, failed, killed, kill_failed, would_evict)", ["node", "reason", "result"],
            registry=r)
        # CPU burst (qos/cpu_burst.py); reset every cycle as upstream's ResetCPUBurstCollector
        burst = ["node", "pod_namespace", "pod_name", "container_id", "container_name"]
        self.container_scaled_cfs_burst_us = Gauge("koordlet_container_scaled_cfs_burst_us", "cpu.cfs_burst_us "
                                                   "set on the container", burst, registry=r)
        self.container_scaled_cfs_quota_us = Gauge("koordlet_container_scaled_cfs_quota_us", "cpu.cfs_quota_us "
                                                   "the container was scaled to by CPU burst", burst, registry=r)
        # core scheduling (qos/core_sched.py)
        self.core_sched_cookie_manage_status = Counter(
            "koordlet_core_sched_cookie_manage_status", "Core sched cookie operations by group and status "
            "(succeeded: created, assigned or cleared; failed: a kernel error other than an exited process)",
            ["node", "core_sched_group", "status"], registry=r)
        self.container_core_sched_cookie = Gauge(
            "koordlet_container_core_sched_cookie", "The core scheduling cookie of the container (value 1)",
            ["node", "pod_name", "pod_namespace", "pod_uid", "container_name", "container_id",
             "core_sched_group", "core_sched_cookie"], registry=r)
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
        # CPI (collectors/cpi.py): upstream's performance metric, and ours for the fd budget
        self.container_cpi = Gauge(
            "koordlet_container_cpi", "Container cycles and instructions counted over the last CPI window "
            "(CPI = cycles / instructions)", ["node", "container_id", "container_name", "pod_uid", "pod_name",
                                              "pod_namespace", "cpi_field"], registry=r)
        self.cpi_containers = Gauge(
            "koordlet_cpi_containers", "(koordlet-py) containers counted in the last CPI window (counted) and those "
            "left for a later window because the fd budget was short (deferred)", ["node", "state"], registry=r)
        # PSI (collectors/psi.py); label values as upstream: psi_precision avg10|avg60|avg300, cpu_full_supported
        # "true"|"false" (of that row's resource, despite the name)
        psi = ["psi_resource_type", "psi_precision", "psi_degree"]
        self.container_psi = Gauge(
            "koordlet_container_psi", "Container psi collected by koordlet", ["node", "container_id",
            "container_name", "pod_uid", "pod_name", "pod_namespace", *psi, "cpu_full_supported"], registry=r)
        self.pod_psi = Gauge("koordlet_pod_psi", "Pod psi collected by koordlet", ["node", "pod_uid", "pod_name",
                             "pod_namespace", *psi, "cpu_full_supported"], registry=r)
        self.node_psi = Gauge("koordlet_node_psi", "(koordlet-py) node pressure stall information from "
                              "/proc/pressure: percent of wall time stalled (full only where the kernel has it)",
                              ["node", *psi], registry=r)
        self.start_time.labels(node).set_to_current_time()

    def host_app_usage(self, app: HostAppLabels, resource: str, value: float) -> None:
        self.host_application_resource_usage.labels(self.node, app.name, resource, app.priority, app.qos).set(value)

    def skipped(self, collector: str, reason: str, n: int = 1) -> None:
        if n:
            self.collect_skipped.labels(self.node, collector, reason).inc(n)
