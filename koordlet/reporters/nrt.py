"""NodeResourceTopology (``topology.node.k8s.io/v1alpha1``): what upstream koordlet reports, built from our topology.

Facts: upstream ``pkg/koordlet/statesinformer/impl/states_noderesourcetopology.go`` (``nodeTopoInformer.calcNodeTopo``,
``reportNodeTopology``).

* One zone ``node-<id>`` (type ``Node``) per NUMA node with ``cpu`` (logical CPUs), ``memory`` (node MemTotal minus
  hugepage memory) and ``hugepages-2Mi`` / ``hugepages-1Gi`` (0 unless the ``HugePageReport`` gate is on);
  ``available`` = ``allocatable`` = ``capacity``, except that the Node label
  ``node.koordinator.sh/enable-numa-reservation=true`` spreads the kubelet reserve (capacity − allocatable) over the
  zones, ceil(reserve / zones) in milli-units each.
* The koordinator annotations: cpu topology, CPU basic info, LS and BE shared pools, kubelet CPU manager policy,
  kubelet-managed pod CPU allocations, node reservation and system-QoS resource — same keys and JSON shapes.
* Only our annotations, our label and our zone resources change on an existing object (others' edits are kept).

Differences from upstream, on purpose:
* A malformed ``system-qos-resource`` Node annotation makes upstream skip the whole report forever; we log it,
  report ``{}`` for it and go on. A malformed pod ``resource-status`` is skipped for that pod only (as upstream).
* Upstream's zone merge rebuilds every resource from its ``allocatable`` alone, so with NUMA reservation on, the
  ``capacity`` it writes equals ``allocatable``. We merge whole resource entries: capacity stays capacity.
* Upstream copies the ``enable-numa-reservation`` label but never removes it when the Node loses it, and then finds a
  difference on every cycle (an update every 3 s). We remove it.
* NUMA nodes without CPUs: upstream refuses to report when the CPU and NUMA node counts differ. We report such a
  memory-only node (CXL) as a zone with cpu 0, and leave out NUMA nodes that are GPU memory (not for pods).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import format_bytes, format_milli, milli
from koordlet.component import Context, Plugin
from koordlet.host.cgroup import format_cpu_list
from koordlet.host.topology import Topology
from koordlet.reporters.cluster import ObjectWriter
from koordlet.states.decode import json_value
from koordlet.states.kubelet import KubeletCPUConfig
from koordlet.states.node import NodeInfo
from koordlet.states.pools import CPUPools, Pools
from koordlet.states.topology import cpu_basic_info_annotation, cpu_topology_annotation, go_json

log = logging.getLogger(__name__)


API_VERSION = "topology.node.k8s.io/v1alpha1"
KIND = "NodeResourceTopology"
ZONE_TYPE = "Node"
MANAGED_RESOURCES = ("cpu", "memory", "koordinator.sh/gpu", "hugepages-2Mi", "hugepages-1Gi")
MANAGED_ANNOTATIONS = (wire.ANNOTATION_CPU_BASIC_INFO, wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
                       wire.ANNOTATION_CPU_SHARED_POOLS, wire.ANNOTATION_BE_CPU_SHARED_POOLS,
                       wire.ANNOTATION_CPU_TOPOLOGY, wire.ANNOTATION_POD_CPU_ALLOCS,
                       wire.ANNOTATION_NODE_RESERVATION, wire.ANNOTATION_SYSTEM_QOS_RESOURCE)
MANAGED_LABELS = (wire.LABEL_ENABLE_NUMA_RESERVATION,)
_HUGEPAGE_SIZES_KB = {2048: "hugepages-2Mi", 1048576: "hugepages-1Gi"}

@dataclass(frozen=True)
class NRTStatus:
    """What this agent owns on the object: the policy, its annotations and label, and its zones."""

    topology_policy: str
    annotations: dict[str, str]
    labels: dict[str, str]
    zones: list[dict[str, Any]]


def _pool_annotation(topo: Topology, pools: Pools) -> list[dict[str, Any]]:
    """``[{"socket", "node", "cpuset"}]`` sorted by (socket, node); a pool's socket is that of its lowest CPU."""
    socket = {c.id: c.socket for c in topo.cpus}
    out = [{"socket": socket[cpus[0]], "node": node, "cpuset": format_cpu_list(cpus)}
           for node, cpus in pools.items() if cpus]
    return sorted(out, key=lambda p: (p["socket"], p["node"]))


def _reservation_annotation(pools: CPUPools) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "resources" in pools.reservation:
        out["resources"] = pools.reservation["resources"]
    if pools.reserved_cpus:
        out["reservedCPUs"] = format_cpu_list(pools.reserved_cpus)
    if "applyPolicy" in pools.reservation:
        out["applyPolicy"] = pools.reservation["applyPolicy"]
    return out


def _allocs_annotation(pools: CPUPools) -> list[dict[str, Any]] | None:
    allocs = []
    for a in pools.kubelet_allocs:
        alloc: dict[str, Any] = {"namespace": a.namespace, "name": a.name} if a.name else {}
        alloc.update(uid=a.uid, cpuset=format_cpu_list(a.cpus), managedByKubelet=True)
        allocs.append(alloc)
    return allocs or None


def _zones(topo: Topology, node: NodeInfo, hugepage_report: bool) -> list[dict[str, Any]]:
    numa_reservation = node.labels.get(wire.LABEL_ENABLE_NUMA_RESERVATION) == "true"
    nodes = [n for n in topo.nodes if not n.gpu_memory]
    reserve: dict[str, int] = {}          # resource -> per-zone milli-units
    if numa_reservation and nodes:
        for name in ("cpu", "memory"):
            try:
                diff = milli(node.capacity[name]) - milli(node.allocatable[name])
            except (KeyError, ValueError):
                continue
            if diff > 0:
                reserve[name] = -(-diff // len(nodes))
    online = set(topo.online)
    zones = []
    for n in nodes:
        hugepages = dict.fromkeys(_HUGEPAGE_SIZES_KB.values(), 0)
        if hugepage_report:
            for size_kb, count in n.hugepages.items():
                if size_kb in _HUGEPAGE_SIZES_KB:
                    hugepages[_HUGEPAGE_SIZES_KB[size_kb]] = size_kb * 1024 * count
        capacity_milli = {"cpu": 1000 * sum(1 for c in n.cpus if c in online),
                          "memory": 1000 * (n.mem_total_bytes - sum(hugepages.values())),
                          **{k: 1000 * v for k, v in hugepages.items()}}
        resources = []
        for name in sorted(capacity_milli):
            cap = capacity_milli[name]
            alloc = max(cap - reserve.get(name, 0), 0)
            fmt = format_milli if name == "cpu" else _format_bytes_milli
            resources.append({"name": name, "capacity": fmt(cap), "allocatable": fmt(alloc),
                              "available": fmt(alloc)})
        zones.append({"name": f"node-{n.id}", "type": ZONE_TYPE, "resources": resources})
    return sorted(zones, key=lambda z: z["name"])


def _format_bytes_milli(value_milli: int) -> str:
    """BinarySI bytes; a reserve split into a fraction of a byte keeps Kubernetes' milli form."""
    return format_bytes(value_milli // 1000) if value_milli % 1000 == 0 else format_milli(value_milli)


def build_status(topo: Topology, pools: CPUPools, node: NodeInfo, kubelet: KubeletCPUConfig | None, *,
                 hugepage_report: bool = False) -> NRTStatus:
    """Everything this agent reports on the NodeResourceTopology, from host topology, its pools and the Node.

    ``kubelet`` is None when the kubelet config is not queried (standalone, or ``disable-query-kubelet-config``):
    the policy annotation is then ``{}`` and ``topologyPolicies`` is ``None``, as upstream.
    """
    policy: dict[str, Any] = {}
    if kubelet is not None:
        policy = {"policy": kubelet.policy}
        if kubelet.options:
            policy["options"] = dict(kubelet.options)
        if pools.kubelet_reserved:
            policy["reservedCPUs"] = format_cpu_list(pools.kubelet_reserved)
    annotations = {
        wire.ANNOTATION_CPU_BASIC_INFO: go_json(cpu_basic_info_annotation(topo)),
        wire.ANNOTATION_CPU_TOPOLOGY: go_json(cpu_topology_annotation(topo)),
        wire.ANNOTATION_CPU_SHARED_POOLS: go_json(_pool_annotation(topo, pools.ls)),
        wire.ANNOTATION_BE_CPU_SHARED_POOLS: go_json(_pool_annotation(topo, pools.be)),
        wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: go_json(policy),
        wire.ANNOTATION_POD_CPU_ALLOCS: go_json(_allocs_annotation(pools)),
        wire.ANNOTATION_NODE_RESERVATION: go_json(_reservation_annotation(pools)),
        wire.ANNOTATION_SYSTEM_QOS_RESOURCE: go_json(dict(pools.system_qos)),
    }
    labels = {k: node.labels[k] for k in MANAGED_LABELS if node.labels.get(k)}
    return NRTStatus(topology_policy=kubelet.topology_policy if kubelet is not None else "None",
                     annotations=annotations, labels=labels, zones=_zones(topo, node, hugepage_report))


def new_object(node: NodeInfo) -> dict[str, Any]:
    """The object upstream creates when there is none: managed-by label, owned by the Node, required fields."""
    meta: dict[str, Any] = {"name": node.name, "labels": {wire.LABEL_MANAGED_BY: wire.MANAGED_BY_KOORDINATOR}}
    if node.uid:
        meta["ownerReferences"] = node.owner_references()
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "topologyPolicies": ["None"], "zones": []}


def _merge_zones(old: Iterable[Any], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Zones not in ``new`` are dropped; in the others our resources replace theirs, other resources stay.
    ``old`` is what the object holds: anything a writer put there, so checked."""
    old_by_name = {z.get("name"): z for z in old if isinstance(z, Mapping)}
    merged = []
    for zone in new:
        old_resources: list[Any] = old_by_name.get(zone["name"], {}).get("resources") or []
        resources = {r["name"]: r for r in old_resources if isinstance(r, Mapping) and "name" in r}
        resources.update({r["name"]: r for r in zone["resources"]})
        merged.append({**old_by_name.get(zone["name"], {}), **zone,
                       "resources": [resources[k] for k in sorted(resources)]})
    return merged


def apply(obj: Mapping[str, Any], status: NRTStatus) -> dict[str, Any]:
    """A copy of ``obj`` with our fields set, everything else as it was."""
    out: dict[str, Any] = json.loads(json.dumps(obj))
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **status.annotations}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in MANAGED_LABELS}
    meta["labels"] = {**labels, **status.labels}
    out["topologyPolicies"] = [status.topology_policy]
    out["zones"] = _merge_zones(out.get("zones") or [], status.zones)
    return out


def difference(obj: Mapping[str, Any] | None, status: NRTStatus) -> str:
    """Why ``obj`` needs an update to carry ``status`` ("" when it already does).

    Annotation values compare as JSON values, so a reformatted but equal value is no change.
    """
    if not obj:
        return "no object"
    meta = obj.get("metadata") or {}
    if obj.get("topologyPolicies") != [status.topology_policy]:
        return "topologyPolicies"
    annotations = meta.get("annotations") or {}
    for key in MANAGED_ANNOTATIONS:
        if json_value(annotations.get(key)) != json_value(status.annotations.get(key)):
            return f"annotation {key}"
    labels = meta.get("labels") or {}
    for key in MANAGED_LABELS:
        if labels.get(key) != status.labels.get(key):
            return f"label {key}"
    zones = obj.get("zones") or []
    if [(z.get("name"), z.get("type")) for z in zones] != [(z["name"], z["type"]) for z in status.zones]:
        return "zones"
    for old, new in zip(zones, status.zones, strict=True):
        old_res = {r.get("name"): r for r in old.get("resources") or [] if r.get("name") in MANAGED_RESOURCES}
        new_res = {r["name"]: r for r in new["resources"]}
        if set(old_res) != set(new_res) or any(_quantity_fields(old_res[k]) != _quantity_fields(new_res[k])
                                               for k in new_res):
            return f"zone {new['name']} resources"
    return ""


def _quantity_fields(resource: Mapping[str, Any]) -> tuple[int, ...]:
    try:
        return tuple(milli(resource.get(k, 0)) for k in ("capacity", "allocatable", "available"))
    except ValueError:
        return (-1,)


def write_nrt(writer: ObjectWriter, node: NodeInfo, status: NRTStatus) -> str:
    """Our NodeResourceTopology part: created owned by the Node, updated only where it differs."""
    def update(obj: dict[str, Any]) -> dict[str, Any] | None:
        reason = difference(obj, status)
        if not reason:
            return None
        log.debug("NRT update node=%s reason=%s", node.name, reason)
        return apply(obj, status)

    return writer.write(node.name, lambda: apply(new_object(node), status), update)


# --- the report (koordlet.component) ------------------------------------------------------------------------------


def status(ctx: Context) -> NRTStatus:
    """What this agent reports now; raises while the kubelet's CPU settings were never readable."""
    kubelet = ctx.node.kubelet_config()
    return build_status(ctx.node.topology, ctx.node.pools(kubelet), ctx.node.node_info(), kubelet,
                        hugepage_report=ctx.config.gate("HugePageReport"))


def node_object(ctx: Context) -> dict[str, Any]:
    """The NodeResourceTopology object this agent would report now (as created for this node)."""
    return apply(new_object(ctx.node.node_info()), status(ctx))


def node_known(ctx: Context, bad: LogOnce, kind: str) -> bool:
    """Objects owned by the Node wait for the Node (logged once while it is missing)."""
    cluster = ctx.node.cluster
    if cluster is None or not cluster.node.synced.is_set():
        return False
    if cluster.node.object is None:
        bad("node", "Node %s not found in the API server; %s waits for it", ctx.config.node_name, kind)
        return False
    bad.forget("node")
    return True


class NRTReport:
    """The NodeResourceTopology every node-topology-sync-interval, created owned by the Node."""

    kind = "noderesourcetopology"
    wait_first = False

    def __init__(self, ctx: Context) -> None:
        from koordlet.states.kubeapi import NODE_RESOURCE_TOPOLOGIES
        assert ctx.node.cluster is not None
        self._ctx, self._cluster = ctx, ctx.node.cluster
        self._writer = ObjectWriter(self._cluster.api, self._cluster.nrt, NODE_RESOURCE_TOPOLOGIES)
        self._bad = LogOnce(log, logging.ERROR)

    def interval(self) -> float:
        return self._ctx.config.node_topology_sync_interval

    def ready(self) -> bool:
        return self._cluster.nrt.synced.is_set() and node_known(self._ctx, self._bad, "NodeResourceTopology")

    def send(self, stop: threading.Event) -> str:
        return write_nrt(self._writer, self._ctx.node.node_info(), status(self._ctx))


PLUGIN = Plugin("noderesourcetopology", lambda ctx: NRTReport(ctx) if ctx.node.cluster else None,
                gates=("NodeTopologyReport",), when=lambda c: c.node_topology_sync_interval > 0, cluster=True)
