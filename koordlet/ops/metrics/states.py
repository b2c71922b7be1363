"""Families the node state sets (``koordlet/states/``): the pods it syncs and their containers' batch/mid requests
and limits, the Node's allocatable, the host topology reads and the CPU share pools, the kubelet client's
requests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from prometheus_client import Counter, Gauge, Histogram

from koordlet.ops.metrics.exposition import TableGauge
from koordlet.ops.metrics.families import Families, replace_series
from koordlet.ops.metrics.upstream import UNIT_BYTE, UNIT_INTEGER


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


class StateMetrics(Families):
    def _declare_states(self) -> None:
        # the pod sync (states/informer.py, wired by the agent)
        self.pods = self._own(Gauge, "koordlet_pods", "(koordlet-py) pods known on this node", ["node", "source"])
        self.pod_sync_errors = self._own(
            Counter, "koordlet_pod_sync_errors", "(koordlet-py) failed pod syncs", ["node", "source"])
        self.container_resource_requests = self._upstream("koordlet_container_resource_requests", TableGauge)
        self.container_resource_limits = self._upstream("koordlet_container_resource_limits", TableGauge)
        self._live_pods: frozenset[str] = frozenset()
        # NodeState (states/nodestate.py): the host topology, the CPU pools, the Node
        self.collect_node_cpu_info_status = self._upstream("koordlet_collect_node_cpu_info_status", Counter)
        self.collect_node_numa_info_status = self._upstream("koordlet_collect_node_numa_info_status", Counter)
        self.cpuset_share_pool_cpu_cores = self._upstream("koordlet_cpuset_share_pool_cpu_cores", Gauge)
        self.cpuset_be_share_pool_cpu_cores = self._upstream("koordlet_cpuset_be_share_pool_cpu_cores", Gauge)
        self.cpuset_share_pool_info = self._upstream("koordlet_cpuset_share_pool_info", Gauge)
        self.cpuset_be_share_pool_info = self._upstream("koordlet_cpuset_be_share_pool_info", Gauge)
        self.node_resource_allocatable = self._upstream("koordlet_node_resource_allocatable", Gauge)
        # the kubelet client (states/kubelet.py)
        self.kubelet_request_duration_seconds = self._upstream("koordlet_kubelet_request_duration_seconds",
                                                               Histogram)

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

    def share_pools(self, ls: Iterable[Iterable[int]], be: Iterable[Iterable[int]], per_cpu: bool) -> None:
        """The CPU share pools as reported on the NodeResourceTopology (per NUMA node), counted and, with gate
        PerCPUMetric, one series per CPU (replacing the last ones: a CPU that left a pool must not stay)."""
        ls_cpus = sorted({c for pool in ls for c in pool})
        be_cpus = sorted({c for pool in be for c in pool})
        self.cpuset_share_pool_cpu_cores.labels(self.node).set(len(ls_cpus))
        self.cpuset_be_share_pool_cpu_cores.labels(self.node).set(len(be_cpus))
        if per_cpu:
            replace_series(self.cpuset_share_pool_info, {(self.node, str(c)): 1.0 for c in ls_cpus})
            replace_series(self.cpuset_be_share_pool_info, {(self.node, str(c)): 1.0 for c in be_cpus})

    def node_allocatable(self, values: Mapping[str, float]) -> None:
        """Batch and mid allocatable of the Node (resource name -> value; cpu ones in milli-cores, unit
        ``integer``, memory ones in bytes), as upstream's Node informer records them."""
        for resource, value in values.items():
            unit = UNIT_BYTE if resource.endswith("memory") else UNIT_INTEGER
            self.node_resource_allocatable.labels(self.node, resource, unit).set(value)

    def kubelet_request(self, path: str, code: int, seconds: float) -> None:
        self.kubelet_request_duration_seconds.labels("get", path, str(code)).observe(seconds)
