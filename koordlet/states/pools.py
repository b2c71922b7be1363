"""The node's CPU pools, computed once as data from the host topology, the pods, the Node and the kubelet.

The same value feeds the QoS strategies (``NodeView``), the NRI hooks and the NodeResourceTopology report, which
formats it into the koordinator annotations; so enforcement and what koord-scheduler reads never disagree, and
nothing is turned into JSON only to be parsed back.

* LS pool (``cpu-shared-pools``): online CPUs minus the node reservation, the exclusive system-QoS cpuset, the
  cpusets of pods koord-scheduler pinned (``resource-status``) and the CPUs the kubelet static policy pinned.
* BE pool (``be-cpu-shared-pools``): the same, except that of the scheduler's pins only LSE pods' are removed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import milli
from koordlet.host.cgroup import parse_cpu_list
from koordlet.host.topology import Topology
from koordlet.states import decode
from koordlet.states.informer import PodMeta
from koordlet.states.kubelet import KubeletCPUConfig
from koordlet.states.node import NodeInfo
from koordlet.states.pod import resource_status

log = logging.getLogger(__name__)

Pools = Mapping[int, tuple[int, ...]]      # NUMA node -> sorted CPU ids


@dataclass(frozen=True)
class KubeletAlloc:
    """A pod whose CPUs the kubelet static policy pinned and koordinator does not manage."""

    uid: str
    cpus: tuple[int, ...]
    namespace: str = ""            # "" when the pod is not (or no longer) known to the agent
    name: str = ""


@dataclass(frozen=True)
class CPUPools:
    """The shared pools and the CPUs taken out of them, with the effective node-level settings behind them."""

    ls: Pools = field(default_factory=dict)
    be: Pools = field(default_factory=dict)
    reserved_cpus: tuple[int, ...] = ()          # node reservation: reservedCPUs, or taken by topology for its cpu
    system_cpus: tuple[int, ...] = ()            # system-qos-resource cpuset (whether exclusive or not)
    system_exclusive: bool = True                # cpusetExclusive (default true): the cpuset leaves the pools
    kubelet_reserved: tuple[int, ...] = ()       # static policy only: the kubelet's reserved CPUs
    kubelet_allocs: tuple[KubeletAlloc, ...] = ()
    reservation: Mapping[str, Any] = field(default_factory=dict)   # the Node's reservation: resources, applyPolicy
    system_qos: Mapping[str, Any] = field(default_factory=dict)    # the Node's system-qos-resource, as reported


def all_cpus(pools: Pools) -> tuple[int, ...]:
    """The union of per-NUMA pools, sorted."""
    return tuple(sorted({c for cpus in pools.values() for c in cpus}))


def take_by_topology(topo: Topology, count: int) -> list[int]:
    """``count`` CPUs picked like the kubelet's static policy picks reserved CPUs from an idle node.

    Whole NUMA nodes, then whole sockets, then whole cores while at least that many are still needed, then single
    threads; each level in id order. On 8 CPUs with HT (cores {0,4},{1,5}...) 2 gives {0,4} and 3 gives {0,1,4}.
    """
    usable = sorted((c for c in topo.cpus if c.online and c.core is not None and c.socket is not None),
                    key=lambda c: (c.node or 0, c.socket, c.core, c.id))
    if count <= 0 or not usable:
        return []
    taken: set[int] = set()
    levels = (lambda c: ("node", c.node or 0), lambda c: ("socket", c.socket), lambda c: ("core", c.node, c.core))
    for key in levels:
        groups: dict[Any, list[int]] = {}
        for c in usable:
            groups.setdefault(key(c), []).append(c.id)
        for cpus in groups.values():
            free = [i for i in cpus if i not in taken]
            if len(free) == len(cpus) and count - len(taken) >= len(cpus):
                taken.update(cpus)
    for c in usable:
        if len(taken) >= count:
            break
        taken.add(c.id)
    return sorted(taken)


def pinned_cpus(meta: PodMeta, bad: LogOnce) -> set[int]:
    """The cpuset koord-scheduler gave the pod (``resource-status``); a malformed value costs only this pod."""
    try:
        return set(meta.pod.decoded(resource_status).cpus)
    except decode.DecodeError as e:
        bad(meta.pod.uid, "pod %s annotation %s: %s; its cpuset is ignored", meta.pod.key, e.key, e.problem)
        return set()


def _node_json(node: NodeInfo, key: str, bad: LogOnce) -> dict[str, Any] | None:
    raw = node.annotations.get(key)
    if not raw:
        return None
    try:
        return decode.json_object(key, raw)
    except decode.DecodeError as e:
        bad(key, "node %s annotation %s: %s; reported as {}", node.name, key, e.problem)
        return None


def _reservation(topo: Topology, node: NodeInfo, bad: LogOnce) -> tuple[dict[str, Any], tuple[int, ...]]:
    """The Node's reservation fields we report and the CPUs it takes out of the pools (reservedCPUs, or as many
    CPUs as its ``resources.cpu`` asks for, taken by topology)."""
    doc = _node_json(node, wire.ANNOTATION_NODE_RESERVATION, bad)
    if doc is None:
        return {}, ()
    out: dict[str, Any] = {}
    resources = doc.get("resources")
    if isinstance(resources, dict) and resources:
        out["resources"] = resources
    cpus: list[int] = []
    explicit = doc.get("reservedCPUs")
    try:
        if explicit:
            cpus = parse_cpu_list(str(explicit))
        elif isinstance(resources, dict) and "cpu" in resources:
            cpus = take_by_topology(topo, math.ceil(milli(resources["cpu"]) / 1000))
    except ValueError as e:
        bad(wire.ANNOTATION_NODE_RESERVATION, "node %s annotation %s: bad reserved cpus: %s", node.name,
            wire.ANNOTATION_NODE_RESERVATION, e)
    if doc.get("applyPolicy"):
        out["applyPolicy"] = doc["applyPolicy"]
    return out, tuple(sorted(set(cpus)))


def _system_qos(node: NodeInfo, bad: LogOnce) -> tuple[dict[str, Any], tuple[int, ...], bool]:
    doc = _node_json(node, wire.ANNOTATION_SYSTEM_QOS_RESOURCE, bad)
    if doc is None:
        return {}, (), True
    out = {k: doc[k] for k in ("cpuset", "cpusetExclusive") if doc.get(k) not in (None, "")}
    try:
        cpus = tuple(parse_cpu_list(str(out.get("cpuset", ""))))
    except ValueError as e:
        bad(wire.ANNOTATION_SYSTEM_QOS_RESOURCE, "node %s annotation %s: bad cpuset: %s", node.name,
            wire.ANNOTATION_SYSTEM_QOS_RESOURCE, e)
        cpus = ()
    return out, cpus, out.get("cpusetExclusive", True) is not False


def _kubelet_allocs(topo: Topology, pods: Sequence[PodMeta], pinned: Mapping[str, set[int]]) -> list[KubeletAlloc]:
    """Pods whose CPUs the kubelet static policy pinned and koordinator does not manage, sorted by uid."""
    state = topo.cpu_manager
    if state is None:
        return []
    by_uid = {m.pod.uid: m.pod for m in pods}
    managed = {m.pod.uid for m in pods if m.pod.raw_qos_class in (wire.QOS_LS, wire.QOS_BE) or pinned.get(m.pod.uid)}
    allocs = []
    for uid, containers in state.entries.items():
        cpus = tuple(sorted({c for cs in containers.values() for c in cs}))
        if uid in managed or not cpus:
            continue
        pod = by_uid.get(uid)
        allocs.append(KubeletAlloc(uid, cpus, pod.namespace if pod else "", pod.name if pod else ""))
    return sorted(allocs, key=lambda a: a.uid)


def _per_node(topo: Topology, remove: set[int]) -> dict[int, tuple[int, ...]]:
    """Online CPUs with topology (those the NRT's cpu-topology lists) minus ``remove``, per NUMA node."""
    out: dict[int, list[int]] = {}
    for c in topo.cpus:
        if c.online and c.core is not None and c.socket is not None and c.id not in remove:
            out.setdefault(c.node if c.node is not None else 0, []).append(c.id)
    return {node: tuple(sorted(ids)) for node, ids in sorted(out.items())}


def cpu_pools(topo: Topology, pods: Sequence[PodMeta], node: NodeInfo, kubelet: KubeletCPUConfig | None,
              bad: LogOnce | None = None) -> CPUPools:
    """The pools this agent enforces and reports. ``kubelet`` is None when its config is not queried."""
    bad = bad or LogOnce(log, logging.ERROR)
    pinned = {m.pod.uid: pinned_cpus(m, bad) for m in pods}
    kubelet_reserved: tuple[int, ...] = ()
    allocs: list[KubeletAlloc] = []
    if kubelet is not None and kubelet.policy == "static":
        kubelet_reserved = kubelet.reserved_system_cpus or tuple(
            take_by_topology(topo, math.ceil(kubelet.reserved_cpu_milli / 1000)))
        allocs = _kubelet_allocs(topo, pods, pinned)
    kubelet_cpus = {c for a in allocs for c in a.cpus}
    reservation, reserved = _reservation(topo, node, bad)
    system_qos, system, exclusive = _system_qos(node, bad)
    ls_taken, be_taken = set(kubelet_cpus), set(kubelet_cpus)
    for meta in pods:
        cpus = pinned[meta.pod.uid]
        ls_taken |= cpus
        if meta.pod.raw_qos_class == wire.QOS_LSE:
            be_taken |= cpus
    out_of_pools = set(reserved) | (set(system) if exclusive else set())
    return CPUPools(ls=_per_node(topo, ls_taken | out_of_pools), be=_per_node(topo, be_taken | out_of_pools),
                    reserved_cpus=reserved, system_cpus=system, system_exclusive=exclusive,
                    kubelet_reserved=kubelet_reserved, kubelet_allocs=tuple(allocs), reservation=reservation,
                    system_qos=system_qos)
