"""What NodeNUMAResource reads of one node: its NodeResourceTopology (CPU topology, reserved CPUs, per-NUMA
allocatable, the kubelet's policies) and its Node labels, parsed once per (NRT, Node) version into a
:class:`NodeTopology` (upstream's ``topology_options.go``: NewTopologyOptions; the annotations' shapes from
``apis/extension``).

Separate because the cluster cache parses it when the NRT or the Node changes, not per decision, and a bad annotation
here costs only itself (logged, read as absent).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from koordlet.base import wire
from koordlet.states import decode
from scheduler.numa.names import (
    BEST_EFFORT,
    CPU,
    LABEL_CPU_BIND_POLICY,
    LABEL_NUMA_ALLOCATE_STRATEGY,
    LABEL_NUMA_TOPOLOGY_POLICY,
    MAX_LIST_ENTRIES,
    NODE_BIND_NONE,
    NODE_FULL_PCPUS_ONLY,
    NODE_SPREAD_BY_PCPUS,
    NUMA_NONE,
    NUMA_POLICIES,
    RESTRICTED,
    SINGLE_NUMA_NODE,
)
from scheduler.numa.quantity import Quantity, quantity_of

log = logging.getLogger(__name__)

# NRT topologyPolicies values koord-scheduler recognizes (topology_options.go convertToNUMATopologyPolicy)
_NRT_POLICIES = {"BestEffort": BEST_EFFORT, "Restricted": RESTRICTED, "SingleNUMANodePodLevel": SINGLE_NUMA_NODE}
MAX_NUMA_ID = 63                  # upstream's NUMA masks are 64-bit: a zone with a larger id cannot be placed
MAX_CPU_ENTRIES = 8192            # cpu-topology entries (koordlet.host.cgroup.MAX_CPUS: no host has more)
_INT32 = (1 << 31) - 1


class CPUInfo(NamedTuple):
    """One logical CPU; ``core`` is upstream's core key (socket << 16 | core id), unique across sockets."""

    id: int
    core: int
    node: int
    socket: int


@dataclass(frozen=True)
class NodeTopology:
    """Everything NodeNUMAResource reads of one node: its NRT (CPU topology, reserved CPUs, per-NUMA allocatable,
    kubelet policies) and its Node labels. Parse once per (NRT, Node) version with :func:`parse_topology`."""

    cpus: Mapping[int, CPUInfo] = field(default_factory=dict)
    num_cores: int = 0                  # distinct (socket, node, core): upstream's NumCores
    num_nodes: int = 0                  # distinct (socket, node)
    num_sockets: int = 0
    reserved: frozenset[int] = frozenset()
    numa_resources: Mapping[int, Mapping[str, Quantity]] = field(default_factory=dict)   # NUMA id -> allocatable
    kubelet_numa_policy: str = NUMA_NONE
    kubelet_full_pcpus_only: bool = False
    node_numa_policy: str = NUMA_NONE   # the node label, when valid
    node_cpu_bind_policy: str = ""      # the node label
    numa_allocate_strategy: str = ""    # the node label
    cpus_in_numa: Mapping[int, frozenset[int]] = field(default_factory=dict)
    cpus_in_socket: Mapping[int, frozenset[int]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.num_sockets > 0 and self.num_nodes > 0 and self.num_cores > 0 and bool(self.cpus)

    @property
    def cpus_per_core(self) -> int:
        return len(self.cpus) // self.num_cores if self.num_cores else 0

    @property
    def cpus_per_node(self) -> int:
        return len(self.cpus) // self.num_nodes if self.num_nodes else 0

    @property
    def cpus_per_socket(self) -> int:
        return len(self.cpus) // self.num_sockets if self.num_sockets else 0

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted(self.numa_resources))

    @property
    def numa_policy(self) -> str:
        """The node's NUMA policy: its label, else the kubelet's topology manager policy (upstream's order)."""
        return self.node_numa_policy or self.kubelet_numa_policy

    @property
    def cpu_bind_policy(self) -> str:
        """``GetNodeCPUBindPolicy``: the label, or FullPCPUsOnly from the kubelet's static full-pcpus-only."""
        if self.node_cpu_bind_policy == NODE_FULL_PCPUS_ONLY or self.kubelet_full_pcpus_only:
            return NODE_FULL_PCPUS_ONLY
        if self.node_cpu_bind_policy == NODE_SPREAD_BY_PCPUS:
            return NODE_SPREAD_BY_PCPUS
        return NODE_BIND_NONE


def _annotation(name: str, key: str, raw: Any) -> Any:
    """An NRT annotation's JSON, or None (logged) when it is not bounded JSON: upstream reads it as absent too. Our
    own annotations can be large (cpu-topology of a big host): the bound is the API server's for all of them."""
    if raw is None:
        return None
    try:
        return decode.loads(key, raw, max_bytes=decode.MAX_OBJECT_ANNOTATIONS)
    except decode.DecodeError as e:
        log.warning("NRT annotation ignored node=%s key=%s problem=%s", name, key, e.problem)
        return None


def _cpu_set(name: str, key: str, raw: Any, where: str) -> frozenset[int]:
    if raw in (None, ""):
        return frozenset()
    try:
        return frozenset(decode.cpu_list(key, raw, where))
    except decode.DecodeError as e:
        log.warning("NRT cpu list ignored node=%s key=%s problem=%s", name, key, e.problem)
        return frozenset()


def _parse_cpus(name: str, doc: Any) -> list[CPUInfo]:
    key = wire.ANNOTATION_CPU_TOPOLOGY
    try:
        detail = decode.array(key, decode.obj(key, doc).get("detail"), "detail", max_items=MAX_CPU_ENTRIES)
        out = []
        for i, d in enumerate(detail):
            d = decode.obj(key, d, f"detail[{i}]", null=False)
            ids = [decode.integer(key, d.get(f, 0), f"detail[{i}].{f}", 0, hi)
                   for f, hi in (("id", MAX_CPU_ENTRIES - 1), ("core", _INT32), ("socket", _INT32), ("node", _INT32))]
            out.append(CPUInfo(ids[0], ids[2] << 16 | ids[1], ids[3], ids[2]))
        return out
    except decode.DecodeError as e:
        log.warning("NRT annotation ignored node=%s key=%s problem=%s", name, key, e.problem)
        return []


def _reserved_cpus(name: str, annotations: Mapping[str, Any]) -> tuple[frozenset[int], bool]:
    """CPUs no pod may be given (kubelet-managed pods', the kubelet's reserved, the node reservation's, the
    exclusive system-QoS cpuset), and whether the kubelet is static with full-pcpus-only."""
    reserved: set[int] = set()
    allocs = _annotation(name, wire.ANNOTATION_POD_CPU_ALLOCS, annotations.get(wire.ANNOTATION_POD_CPU_ALLOCS))
    if isinstance(allocs, list):
        for a in allocs[:MAX_LIST_ENTRIES]:
            if isinstance(a, Mapping) and a.get("managedByKubelet") is True and a.get("uid"):
                reserved |= _cpu_set(name, wire.ANNOTATION_POD_CPU_ALLOCS, a.get("cpuset"), "cpuset")
    kubelet = _annotation(name, wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
                          annotations.get(wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY))
    full_only = False
    if isinstance(kubelet, Mapping):
        options = kubelet.get("options")
        full_only = (kubelet.get("policy") == "static" and isinstance(options, Mapping)
                     and options.get("full-pcpus-only") == "true")
        reserved |= _cpu_set(name, wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY, kubelet.get("reservedCPUs"),
                             "reservedCPUs")
    reservation = _annotation(name, wire.ANNOTATION_NODE_RESERVATION,
                              annotations.get(wire.ANNOTATION_NODE_RESERVATION))
    if isinstance(reservation, Mapping):
        reserved |= _cpu_set(name, wire.ANNOTATION_NODE_RESERVATION, reservation.get("reservedCPUs"), "reservedCPUs")
    system = _annotation(name, wire.ANNOTATION_SYSTEM_QOS_RESOURCE,
                         annotations.get(wire.ANNOTATION_SYSTEM_QOS_RESOURCE))
    if isinstance(system, Mapping) and system.get("cpusetExclusive") is not False:
        reserved |= _cpu_set(name, wire.ANNOTATION_SYSTEM_QOS_RESOURCE, system.get("cpuset"), "cpuset")
    return frozenset(reserved), full_only


_ZONE_NAME = re.compile(r"[+-]?\d+")


def _zones(name: str, zones: Any) -> dict[int, dict[str, Quantity]]:
    """``node-<id>`` zones of type Node: resource name -> allocatable, as upstream's extractNUMANodeResources."""
    out: dict[int, dict[str, Quantity]] = {}
    for z in zones if isinstance(zones, list) else []:
        if not isinstance(z, Mapping) or z.get("type") != "Node":
            continue
        parts = str(z.get("name", "")).split("node-")
        if len(parts) != 2 or not _ZONE_NAME.fullmatch(parts[1]):
            continue
        numa = int(parts[1])
        if not 0 <= numa <= MAX_NUMA_ID:
            log.warning("NRT zone ignored node=%s zone=%s problem=NUMA id outside 0..%d", name, z.get("name"),
                        MAX_NUMA_ID)
            continue
        resources: dict[str, Quantity] = {}
        for r in z.get("resources") or []:
            if not isinstance(r, Mapping) or not isinstance(r.get("name"), str):
                continue
            try:
                resources[r["name"]] = quantity_of("zones", r.get("allocatable", 0), f"{z.get('name')}.{r['name']}")
            except decode.DecodeError as e:
                log.warning("NRT zone resource ignored node=%s problem=%s", name, e.problem)
        out[numa] = resources
    return out


def parse_topology(nrt: Mapping[str, Any] | None, node: Mapping[str, Any]) -> NodeTopology | None:
    """The node's topology from its NodeResourceTopology and Node; None when there is no NRT.

    Per-NUMA cpu is the zone's allocatable less the reserved CPUs in that NUMA node (upstream's NewTopologyOptions).
    """
    if nrt is None:
        return None
    meta = nrt.get("metadata") or {}
    name = str(meta.get("name", ""))
    annotations = meta.get("annotations") or {}
    cpus = _parse_cpus(name, _annotation(name, wire.ANNOTATION_CPU_TOPOLOGY,
                                         annotations.get(wire.ANNOTATION_CPU_TOPOLOGY)))
    reserved, full_only = _reserved_cpus(name, annotations)
    zones = _zones(name, nrt.get("zones"))
    by_cpu = {c.id: c for c in cpus}
    for numa, resources in zones.items():
        cpu = resources.get(CPU)
        if cpu is not None and cpu.milli != 0:
            held = sum(1 for c in reserved if c in by_cpu and by_cpu[c].node == numa)
            resources[CPU] = Quantity(cpu.milli - 1000 * held, cpu.fmt)
    kubelet_numa = NUMA_NONE
    for p in nrt.get("topologyPolicies") or []:
        if p in _NRT_POLICIES:
            kubelet_numa = _NRT_POLICIES[p]
            break
    labels = (node.get("metadata") or {}).get("labels") or {}
    label_numa = str(labels.get(LABEL_NUMA_TOPOLOGY_POLICY) or "")
    if label_numa not in NUMA_POLICIES:
        log.warning("node label ignored node=%s label=%s value=%.40s", name, LABEL_NUMA_TOPOLOGY_POLICY, label_numa)
        label_numa = NUMA_NONE
    in_numa: dict[int, set[int]] = defaultdict(set)
    in_socket: dict[int, set[int]] = defaultdict(set)
    for c in by_cpu.values():
        in_numa[c.node].add(c.id)
        in_socket[c.socket].add(c.id)
    return NodeTopology(
        cpus=MappingProxyType(by_cpu),
        num_cores=len({(c.socket, c.node, c.core) for c in by_cpu.values()}),
        num_nodes=len({(c.socket, c.node) for c in by_cpu.values()}),
        num_sockets=len(in_socket),
        reserved=reserved,
        numa_resources=MappingProxyType({k: MappingProxyType(v) for k, v in sorted(zones.items())}),
        kubelet_numa_policy=kubelet_numa, kubelet_full_pcpus_only=full_only,
        node_numa_policy=label_numa,
        node_cpu_bind_policy=str(labels.get(LABEL_CPU_BIND_POLICY) or ""),
        numa_allocate_strategy=str(labels.get(LABEL_NUMA_ALLOCATE_STRATEGY) or ""),
        cpus_in_numa=MappingProxyType({k: frozenset(v) for k, v in in_numa.items()}),
        cpus_in_socket=MappingProxyType({k: frozenset(v) for k, v in in_socket.items()}))
