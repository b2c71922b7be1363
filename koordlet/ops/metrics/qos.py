"""Families the QoS strategies set (``koordlet/qos/``): evictions, core scheduling cookies, CPU burst and suppress,
blkio, resctrl and net QoS, the periodic reconcile of what the runtime hooks own, and each strategy's failures."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge

from koordlet.ops.metrics.exposition import TableGauge, TableHistogram
from koordlet.ops.metrics.families import Families
from koordlet.ops.metrics.upstream import FAILED, SUCCEEDED


class QoSMetrics(Families):
    def _declare_qos(self) -> None:
        # the reconciler (qos/reconciler.py)
        self.qos_strategy_errors = self._own(
            Counter, "koordlet_qos_strategy_errors", "(koordlet-py) QoS strategy cycles that failed, by strategy",
            ["node", "strategy"])
        # evictions (qos/evict.py): upstream's koordlet_pod_eviction counts only evictions that happened;
        # koordlet_pod_eviction_attempts counts every attempt by the gate that asked and its outcome, dry runs and
        # failures included
        self.pod_eviction = self._upstream("koordlet_pod_eviction", Counter)
        self.pod_eviction_detail = self._upstream("koordlet_pod_eviction_detail", Counter)
        self.pod_eviction_attempts = self._own(
            Counter, "koordlet_pod_eviction_attempts", "(koordlet-py) eviction attempts by gate (MemoryEvict, "
            "CPUEvict, ...) and result: evicted, failed (API refused), killed, kill_failed (standalone), would_evict "
            "(standalone with kill off)", ["node", "gate", "result"])
        # core scheduling (qos/core_sched.py)
        self.container_core_sched_cookie = self._upstream("koordlet_container_core_sched_cookie", Gauge)
        self.core_sched_cookie_manage_status = self._upstream("koordlet_core_sched_cookie_manage_status", Counter)
        # CPU burst (qos/cpu_burst.py) and CPU suppress (qos/cpu_suppress.py)
        self.container_scaled_cfs_burst_us = self._upstream("koordlet_container_scaled_cfs_burst_us", TableGauge)
        self.container_scaled_cfs_quota_us = self._upstream("koordlet_container_scaled_cfs_quota_us", TableGauge)
        self.be_suppress_cpu_cores = self._upstream("koordlet_be_suppress_cpu_cores", Gauge)
        self.be_suppress_ls_used_cpu_cores = self._upstream("koordlet_be_suppress_ls_used_cpu_cores", Gauge)
        # blkio (qos/blkio.py): its read of the mount table, the blocks it could not resolve
        self.collect_node_local_storage_info_status = self._upstream(
            "koordlet_collect_node_local_storage_info_status", Counter)
        self.blkio_block_errors = self._own(
            Counter, "koordlet_blkio_block_errors", "(koordlet-py) blkio QoS blocks skipped because they did not "
            "resolve to a disk, counted per reconcile cycle, by block type", ["node", "block_type"])
        # resctrl (qos/resctrl/)
        self.resctrl_pods_without_group = self._own(
            Gauge, "koordlet_resctrl_pods_without_group", "(koordlet-py) pods with a node.koordinator.sh/resctrl "
            "annotation running in their class group because every CLOSID is in use", ["node"])
        self.resctrl_closid_exhausted = self._own(
            Counter, "koordlet_resctrl_closid_exhausted", "(koordlet-py) times a pod-level resctrl group could not be "
            "created because every CLOSID was in use (once per pod and episode)", ["node"])
        # net QoS (qos/net_qos/): tc changes are netlink requests, not executor writes
        self.net_qos_tc_operations = self._own(
            Counter, "koordlet_net_qos_tc_operations", "(koordlet-py) tc changes made over netlink by net QoS, by "
            "operation (root, del-root, add-class, change-class, del-class, add-u32, add-cgroup, del-filter) and "
            "outcome (written, error_<ERRNO>)", ["node", "op", "outcome"])
        # pod resources (qos/pod_resources.py): upstream's runtime hook reconciler
        self.runtime_hook_reconciler_invoked_duration_milliseconds = self._upstream(
            "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds", TableHistogram)

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

    def hook_reconciled(self, level: str, resources: Iterable[str], ok: bool, seconds: float) -> None:
        """One observation per resource the periodic reconcile decided for one pod or container at ``level``
        (the reconciler calls this for every pod every second; the family's labels are bounded: levels ×
        resources × status, and it never expires)."""
        status = SUCCEEDED if ok else FAILED
        self.runtime_hook_reconciler_invoked_duration_milliseconds.observe(
            [(self.node, level, resource, status) for resource in set(resources)], seconds * 1000)
