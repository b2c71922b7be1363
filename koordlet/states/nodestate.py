"""One node state: everything the agent knows about its node, from every source, and the per-cycle snapshot of it.

:class:`NodeState` is the live object: the pods (informer), the Node / NodeSLO / NodeMetric objects (watchers, in a
cluster), the standalone NodeSLO file, the kubelet's CPU settings, the host topology and RDMA NICs (re-read every
minute), and what collectors publish about the host (the GPU inventory, whether kidled runs). Components read it;
:meth:`NodeState.view` freezes it into a :class:`NodeView` once per QoS cycle, and the strategies and NRI hooks
decide from that value only.

Every source is parsed once per version (a NodeSLO by resourceVersion, the file by the spec object it produced, the
pools by the inputs they came from, compared by identity while a reference is held, never by ``id()``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.host.cgroup import Cgroups
from koordlet.host.paths import HostPaths
from koordlet.host.topology import Topology, read_topology
from koordlet.ops.config import Config
from koordlet.states.hostapps import HostApp, escaping, resolve_host_apps
from koordlet.states.informer import PodMeta, PodsInformer
from koordlet.states.kubelet import KubeletClient, KubeletCPUConfig
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.file import NodeSLOFile
from koordlet.states.nodeslo.merge import merge_node_slo_spec, node_slo_from_object
from koordlet.states.nodeslo.schema import NodeSLOSpec
from koordlet.states.pools import CPUPools, Pools, cpu_pools
from koordlet.states.runtimepods import RuntimePods
from koordlet.states.yarn import YarnContainers

if TYPE_CHECKING:
    from koordlet.host.nvml import GpuHealth, GpuInventory
    from koordlet.host.rdma import RdmaDevice
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.cluster import Cluster

log = logging.getLogger(__name__)

KUBELET_CONFIG_REFRESH = 60.0    # kubelet /configz re-read
HOST_APP_RECHECK = 1.0           # host applications' resolved dirs re-checked at most this often


@dataclass(frozen=True)
class NodeView:
    """Everything a strategy or an NRI hook decides from, captured once per cycle (pure data; no kernel reads)."""

    pods: tuple[PodMeta, ...]
    slo: NodeSLOSpec                          # merged over the defaults (states.nodeslo)
    host_apps: tuple[HostApp, ...]
    topology: Topology
    node: NodeInfo                            # labels/annotations/capacity/allocatable ({} standalone)
    cpu_manager_policy: str = "none"          # the kubelet's: "none" | "static"
    now: float = 0.0                          # Unix seconds
    # CPU pools as this agent reports them on the NodeResourceTopology (states.pools), so the enforcement and the
    # scheduler's view never disagree:
    ls_pools: Pools = field(default_factory=dict)   # NUMA node -> CPUs of cpu-shared-pools
    be_pools: Pools = field(default_factory=dict)   # be-cpu-shared-pools: minus LSE pins only
    system_cpus: tuple[int, ...] = ()        # system-qos-resource cpuset (SYSTEM pods), () when not set
    reserved_cpus: tuple[int, ...] = ()      # node reservation reservedCPUs


class Gpus(Protocol):
    """What the GPU collector publishes: the inventory (replaced whole) and XID health."""

    inventory: GpuInventory
    health: GpuHealth


class Kidled(Protocol):
    """What the cold page collector publishes: whether kidled runs (NodeMetric then reports hot-page usage)."""

    running: bool


@dataclass
class _Memo:
    """The last value computed from a set of inputs; inputs held (so compared by identity safely) or by value."""

    inputs: tuple[Any, ...] = ()
    value: Any = None

    def get(self, inputs: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        same = len(inputs) == len(self.inputs) and all(
            a is b or (not _by_identity(a) and a == b) for a, b in zip(inputs, self.inputs, strict=True))
        if not same:
            self.value = compute()
            self.inputs = inputs
        return self.value


def _by_identity(value: Any) -> bool:
    return isinstance(value, (tuple, list, Topology, NodeSLOSpec))


class NodeState:
    """The live node state (see the module docstring); thread-safe for readers, refreshed by the agent's loops."""

    def __init__(self, config: Config, paths: HostPaths, cgroups: Cgroups, informer: PodsInformer, *,
                 cluster: Cluster | None = None, kubelet: KubeletClient | None = None,
                 slo_file: NodeSLOFile | None = None, topology: Topology | None = None,
                 runtime_pods: RuntimePods | None = None, metrics: AgentMetrics | None = None,
                 yarn: YarnContainers | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.paths = paths
        self.cgroups = cgroups
        self.informer = informer
        self.runtime_pods = runtime_pods if runtime_pods is not None else RuntimePods()   # written by NRI hooks
        self.cluster = cluster
        self.kubelet = kubelet
        self.yarn = yarn                       # the copilot's YARN containers (evict-by-copilot-*), None: not asked
        self.slo_file = slo_file
        self.topology = topology if topology is not None else self._read_topology()
        self.rdma: list[RdmaDevice] | None = self.read_rdma() if config.gate("RDMADevices") else None
        self.gpus: Gpus | None = None          # published by the GPU collector (gate Accelerators)
        self.kidled: Kidled | None = None      # published by the cold page collector (gate ColdPageCollector)
        self._bad = LogOnce(log, logging.ERROR)
        self._lock = threading.Lock()
        self._topology_read = time.monotonic()
        self._slo = _Memo()
        self._pools = _Memo()
        self._kubelet_config: tuple[float, KubeletCPUConfig | None] = (float("-inf"), None)
        self._apps_checked: tuple[float, tuple[HostApp, ...] | None, tuple[HostApp, ...]] = (float("-inf"), None, ())
        if cluster is not None and metrics is not None:
            cluster.node.on_change.append(self._node_changed)

    # --- sources ------------------------------------------------------------------------------------------------

    @property
    def pods(self) -> tuple[PodMeta, ...]:
        """The informer's pods, with the YARN containers added to their NodeManager pod when the copilot is
        asked (states.yarn)."""
        pods = self.informer.pods
        return self.yarn.pods(pods) if self.yarn is not None else pods

    def node_info(self) -> NodeInfo:
        """This node's Node object (name only without a cluster or before the watch has it)."""
        obj = self.cluster.node.object if self.cluster else None
        return NodeInfo.from_object(obj) if obj else NodeInfo(self.config.node_name)

    def node_object(self) -> Mapping[str, Any] | None:
        return self.cluster.node.object if self.cluster else None

    def node_slo(self) -> NodeSLOSpec:
        """The effective NodeSLO spec: the cluster's NodeSLO, the standalone file, or the defaults."""
        return self._slo_state()[0]

    def host_apps(self) -> tuple[HostApp, ...]:
        """The NodeSLO's host applications with their cgroup dirs (refused ones logged once). Their dirs are checked
        again after resolving at most every :data:`HOST_APP_RECHECK` seconds (every collector and QoS cycle asks):
        a symlink that appears later must not lead a write outside the cgroup root."""
        apps = self._slo_state()[1]
        checked_at, checked, kept = self._apps_checked
        now = time.monotonic()
        if checked is apps and now - checked_at < HOST_APP_RECHECK:
            return kept
        escaping_ = escaping(apps, self.cgroups)
        for name, target in escaping_.items():
            self._bad(f"hostapp escape {name}", "NodeSLO %s: host application %s: its cgroup dir resolves to %s, "
                      "outside the cgroup root; not collected or enforced", self.config.node_name, name, target)
        kept = tuple(a for a in apps if a.name not in escaping_) if escaping_ else apps
        self._apps_checked = (now, apps, kept)
        return kept

    def _slo_state(self) -> tuple[NodeSLOSpec, tuple[HostApp, ...]]:
        if self.cluster is not None:
            obj = self.cluster.node_slo.object
            key: tuple[Any, ...] = ("object", (obj or {}).get("metadata", {}).get("resourceVersion"))
        elif self.slo_file is not None:
            obj, key = None, ("file", self.slo_file.spec)
        else:
            obj, key = None, ("defaults",)

        def parse() -> tuple[NodeSLOSpec, tuple[HostApp, ...]]:
            errors: list[str] = []
            if self.slo_file is not None and self.cluster is None:
                spec = self.slo_file.spec         # the file source logs its own errors
            else:
                spec, errors = node_slo_from_object(obj) if obj else merge_node_slo_spec(None, self.config.node_name)
            apps, app_errors = resolve_host_apps(spec.host_applications, self.cgroups.layout)
            for e in errors + app_errors:
                self._bad(f"nodeslo {e}", "NodeSLO %s: %s", self.config.node_name, e)
            return spec, tuple(apps)

        with self._lock:
            result: tuple[NodeSLOSpec, tuple[HostApp, ...]] = self._slo.get(key, parse)
        return result

    def kubelet_config(self) -> KubeletCPUConfig | None:
        """The kubelet's CPU/topology manager settings, re-read every minute; None when not queried.

        A failed read keeps the last good answer; before the first good one it raises (the NRT report waits,
        as upstream's does: reporting "no kubelet policy" would be wrong).
        """
        if self.config.disable_query_kubelet_config or self.kubelet is None:
            return None
        read_at, value = self._kubelet_config
        if time.monotonic() - read_at < KUBELET_CONFIG_REFRESH:
            return value
        try:
            value = KubeletCPUConfig.from_configz(self.kubelet.get_configz())
        except Exception as e:    # unreachable kubelet or bad document: the same consequence
            self._bad("configz", "kubelet /configz unusable error=%s", e)
            if value is None:
                raise
            return value
        if self._bad.forget("configz"):
            log.info("kubelet /configz readable again")
        self._kubelet_config = (time.monotonic(), value)
        return value

    def pools(self, kubelet: KubeletCPUConfig | None) -> CPUPools:
        """The CPU pools for the current pods, Node and topology (recomputed only when one of them changed)."""
        pods, topology, node = self.informer.pods, self.topology, self.node_info()
        with self._lock:
            pools: CPUPools = self._pools.get((pods, topology, node, kubelet),
                                              lambda: self._computed(cpu_pools(topology, pods, node, kubelet,
                                                                               self._bad)))
        return pools

    def _computed(self, pools: CPUPools) -> CPUPools:
        """New pools: the share pool metrics follow them (upstream records them when its cpuset hook parses the
        NodeResourceTopology, which carries these same pools)."""
        if self.metrics is not None:
            self.metrics.share_pools(pools.ls.values(), pools.be.values(), self.config.gate("PerCPUMetric"))
        return pools

    def _read_topology(self) -> Topology:
        """The host topology (CPUs and NUMA nodes, read together), counted as upstream's node info collector
        counts its CPU and NUMA reads."""
        try:
            topology = read_topology(self.paths)
        except Exception:
            self._count_topology(False)
            raise
        self._count_topology(True)
        return topology

    def _count_topology(self, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.collect_status(self.metrics.collect_node_cpu_info_status, ok)
            self.metrics.collect_status(self.metrics.collect_node_numa_info_status, ok)

    def _node_changed(self, obj: Mapping[str, Any] | None) -> None:
        """A new copy of the Node: its batch and mid allocatable (0 when absent, as upstream) to the metrics."""
        assert self.metrics is not None
        if obj is None:
            return
        allocatable = (obj.get("status") or {}).get("allocatable") or {}
        values = {}
        for name in (wire.BATCH_CPU, wire.BATCH_MEMORY, wire.MID_CPU, wire.MID_MEMORY):
            try:
                values[name] = float(math.ceil(parse_quantity(allocatable.get(name, 0))))
            except (ValueError, TypeError):
                self._bad(f"allocatable {name}", "Node %s: allocatable %s %r unreadable", self.config.node_name,
                          name, allocatable.get(name))
                continue
            self._bad.forget(f"allocatable {name}")
        self.metrics.node_allocatable(values)

    def memory_bytes(self) -> int:
        """Memory the pods can use: every NUMA node's MemTotal except GPU memory exposed as NUMA nodes."""
        return sum(n.mem_total_bytes for n in self.topology.nodes if not n.gpu_memory)

    def read_rdma(self) -> list[RdmaDevice]:
        """RDMA NICs from sysfs; a malformed device is skipped and logged once."""
        from koordlet.host.rdma import discover_rdma
        nics, problems = discover_rdma(self.paths)
        for problem in problems:
            self._bad(f"rdma {problem}", "rdma discovery: %s", problem)
        return nics

    # --- the cycle's snapshot -------------------------------------------------------------------------------------

    def view(self) -> NodeView | None:
        """The snapshot the QoS strategies and NRI hooks decide from; None until the pods have been synced once
        (deciding on an empty pod list would reset every pod's settings)."""
        if not self.informer.synced.is_set():
            return None
        try:
            kubelet = self.kubelet_config()
        except Exception:     # logged by kubelet_config(); decide as with policy none until it answers
            kubelet = None
        pools = self.pools(kubelet)
        return NodeView(pods=self.pods, slo=self.node_slo(), host_apps=self.host_apps(),
                        topology=self.topology, node=self.node_info(),
                        cpu_manager_policy=kubelet.policy if kubelet else "none", now=time.time(),
                        ls_pools=pools.ls, be_pools=pools.be, system_cpus=pools.system_cpus,
                        reserved_cpus=pools.reserved_cpus)

    # --- refresh (the agent's node loop) ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """The slow re-reads: host topology and RDMA NICs every collect-node-cpu-info-interval (60 s), the
        standalone NodeSLO file when it changed. A failed read keeps the last good value (logged once)."""
        if self.slo_file is not None:
            self.slo_file.refresh()
        now = time.monotonic()
        if now - self._topology_read < self.config.collect_node_cpu_info_interval:   # upstream node info period
            return
        self._topology_read = now
        try:
            self.topology = self._read_topology()
            if self.rdma is not None:
                self.rdma = self.read_rdma()
            self._bad.forget("topology")
        except Exception as e:      # keep the last topology; a sysfs hiccup must not stop reports
            self._bad("topology", "host topology re-read failed error=%s", e)
