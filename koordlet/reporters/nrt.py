"""NodeResourceTopology (``topology.node.k8s.io/v1alpha1``): what upstream koordlet reports, built from our topology.

Facts: reference/metrics-and-reports.md §6, checked against upstream's states_noderesourcetopology.go.

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
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from koordlet import wire
from koordlet.host.cgroup import parse_cpu_list
from koordlet.host.topology import Topology
from koordlet.logutil import LogOnce
from koordlet.quantity import format_bytes, format_milli, milli
from koordlet.states.informer import PodMeta
from koordlet.topology import cpu_basic_info_annotation, cpu_topology_annotation, format_cpu_list, go_json

log = logging.getLogger("koordlet.reporters.nrt")

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

# kubelet topologyManagerScope -> topologyManagerPolicy -> NRT topologyPolicies value
_TOPOLOGY_POLICIES = {
    "container": {"single-numa-node": "SingleNUMANodeContainerLevel", "restricted": "RestrictedContainerLevel",
                  "best-effort": "BestEffortContainerLevel"},
    "pod": {"single-numa-node": "SingleNUMANodePodLevel", "restricted": "RestrictedPodLevel",
            "best-effort": "BestEffortPodLevel"},
}


@dataclass(frozen=True)
class KubeletCPUConfig:
    """The parts of the kubelet's ``/configz`` the report needs."""

    policy: str = "none"
    options: Mapping[str, str] = field(default_factory=dict)
    reserved_system_cpus: tuple[int, ...] = ()
    reserved_cpu_milli: int = 0            # kubeReserved.cpu + systemReserved.cpu
    topology_manager_policy: str = ""
    topology_manager_scope: str = "container"

    @classmethod
    def from_configz(cls, doc: Mapping[str, Any]) -> "KubeletCPUConfig":
        """Parse ``{"kubeletconfig": {...}}``; ValueError names the field that is wrong."""
        cfg = doc.get("kubeletconfig") if isinstance(doc, Mapping) else None
        if not isinstance(cfg, Mapping):
            raise ValueError("kubelet /configz: no kubeletconfig object")

        def text(key: str, default: str) -> str:
            v = cfg.get(key)
            if v is None:
                return default
            if not isinstance(v, str):
                raise ValueError(f"kubelet /configz: {key} is not a string: {v!r}")
            return v

        options = cfg.get("cpuManagerPolicyOptions") or {}
        if not isinstance(options, Mapping) or not all(isinstance(v, str) for v in options.values()):
            raise ValueError(f"kubelet /configz: cpuManagerPolicyOptions is not a map of strings: {options!r}")
        try:
            reserved_cpus = tuple(parse_cpu_list(text("reservedSystemCPUs", "")))
        except ValueError:
            raise ValueError(f"kubelet /configz: reservedSystemCPUs {cfg.get('reservedSystemCPUs')!r} is not a "
                             "cpu list") from None
        reserved_milli = 0
        if reserved_cpus:      # --reserved-cpus overrides the cpu of kubeReserved and systemReserved
            reserved_milli = 1000 * len(reserved_cpus)
        else:
            for key in ("kubeReserved", "systemReserved"):
                section = cfg.get(key) or {}
                if not isinstance(section, Mapping):
                    raise ValueError(f"kubelet /configz: {key} is not a map: {section!r}")
                if "cpu" in section:
                    try:
                        reserved_milli += milli(section["cpu"])
                    except ValueError as e:
                        raise ValueError(f"kubelet /configz: {key}.cpu: {e}") from None
        return cls(policy=text("cpuManagerPolicy", "none") or "none", options=dict(options),
                   reserved_system_cpus=reserved_cpus, reserved_cpu_milli=reserved_milli,
                   topology_manager_policy=text("topologyManagerPolicy", ""),
                   topology_manager_scope=text("topologyManagerScope", "container"))

    @property
    def topology_policy(self) -> str:
        """The NRT ``topologyPolicies`` value for this kubelet (``None`` unless a known policy and scope)."""
        return _TOPOLOGY_POLICIES.get(self.topology_manager_scope, {}).get(self.topology_manager_policy, "None")


@dataclass(frozen=True)
class NodeInfo:
    """What the report reads from the Node object (empty in standalone mode)."""

    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)

    def owner_references(self) -> list[dict[str, Any]]:
        """What upstream puts on the objects it creates for a node (NRT, Device): owned by the Node, so they go
        with it; none before the Node's uid is known."""
        if not self.uid:
            return []
        return [{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid, "controller": True,
                 "blockOwnerDeletion": True}]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> "NodeInfo":
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        return cls(name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
                   labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {}),
                   capacity=dict(status.get("capacity") or {}), allocatable=dict(status.get("allocatable") or {}))


@dataclass(frozen=True)
class NRTStatus:
    """What this agent owns on the object: the policy, its annotations and label, and its zones."""

    topology_policy: str
    annotations: dict[str, str]
    labels: dict[str, str]
    zones: list[dict[str, Any]]


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


def _resource_status_cpuset(meta: PodMeta, bad: LogOnce) -> set[int]:
    raw = meta.pod.annotations.get(wire.ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return set()
    try:
        doc = json.loads(raw)
        cpuset = doc.get("cpuset", "") if isinstance(doc, dict) else None
        if not isinstance(cpuset, str):
            raise ValueError("cpuset is not a string")
        return set(parse_cpu_list(cpuset))
    except ValueError as e:
        bad(meta.pod.uid, "pod %s annotation %s is malformed: %s; its cpuset is ignored", meta.pod.key,
            wire.ANNOTATION_RESOURCE_STATUS, e)
        return set()


def _pools(cpus: Mapping[int, tuple[int, int]], remove: set[int]) -> list[dict[str, Any]]:
    """CPUs (id -> (socket, node)) minus ``remove``, grouped per NUMA node, sorted by (socket, node)."""
    per_node: dict[int, list[int]] = {}
    for cpu, (_, node) in cpus.items():
        if cpu not in remove:
            per_node.setdefault(node, []).append(cpu)
    pools = [{"socket": cpus[min(ids)][0], "node": node, "cpuset": format_cpu_list(ids)}
             for node, ids in per_node.items()]
    return sorted(pools, key=lambda p: (p["socket"], p["node"]))


def _json_annotation(node: NodeInfo, key: str, bad: LogOnce) -> dict[str, Any] | None:
    raw = node.annotations.get(key)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return doc
    except ValueError as e:
        bad(key, "node %s annotation %s is malformed: %s; reported as {}", node.name, key, e)
        return None


def _node_reservation(topo: Topology, node: NodeInfo, bad: LogOnce) -> tuple[dict[str, Any], set[int]]:
    """The effective node reservation (reservedCPUs resolved) and the CPUs it takes out of the pools."""
    doc = _json_annotation(node, wire.ANNOTATION_NODE_RESERVATION, bad)
    if doc is None:
        return {}, set()
    out: dict[str, Any] = {}
    resources = doc.get("resources")
    if isinstance(resources, dict) and resources:
        out["resources"] = resources
    cpus: set[int] = set()
    explicit = doc.get("reservedCPUs")
    try:
        if explicit:
            cpus = set(parse_cpu_list(str(explicit)))
        elif isinstance(resources, dict) and "cpu" in resources:
            cpus = set(take_by_topology(topo, math.ceil(milli(resources["cpu"]) / 1000)))
    except ValueError as e:
        bad(wire.ANNOTATION_NODE_RESERVATION, "node %s annotation %s: bad reserved cpus: %s", node.name,
            wire.ANNOTATION_NODE_RESERVATION, e)
    if cpus:
        out["reservedCPUs"] = format_cpu_list(sorted(cpus))
    if doc.get("applyPolicy"):
        out["applyPolicy"] = doc["applyPolicy"]
    return out, cpus


def _system_qos(node: NodeInfo, bad: LogOnce) -> tuple[dict[str, Any], set[int]]:
    doc = _json_annotation(node, wire.ANNOTATION_SYSTEM_QOS_RESOURCE, bad)
    if doc is None:
        return {}, set()
    out = {k: doc[k] for k in ("cpuset", "cpusetExclusive") if doc.get(k) not in (None, "")}
    try:
        cpus = set(parse_cpu_list(str(out.get("cpuset", ""))))
    except ValueError as e:
        bad(wire.ANNOTATION_SYSTEM_QOS_RESOURCE, "node %s annotation %s: bad cpuset: %s", node.name,
            wire.ANNOTATION_SYSTEM_QOS_RESOURCE, e)
        cpus = set()
    exclusive = out.get("cpusetExclusive", True) is not False
    return out, cpus if exclusive else set()


def _kubelet_allocs(topo: Topology, pods: Sequence[PodMeta], bad: LogOnce) -> list[dict[str, Any]]:
    """Pods whose CPUs the kubelet static policy pinned and koordinator does not manage, sorted by uid."""
    state = topo.cpu_manager
    if state is None:
        return []
    by_uid = {m.pod.uid: m.pod for m in pods}
    managed = {m.pod.uid for m in pods
               if m.pod.raw_qos_class in (wire.QOS_LS, wire.QOS_BE) or _resource_status_cpuset(m, bad)}
    allocs = []
    for uid, containers in state.entries.items():
        cpus = sorted({c for cs in containers.values() for c in cs})
        if uid in managed or not cpus:
            continue
        alloc: dict[str, Any] = {}
        pod = by_uid.get(uid)
        if pod is not None:
            alloc.update(namespace=pod.namespace, name=pod.name)
        alloc.update(uid=uid, cpuset=format_cpu_list(cpus), managedByKubelet=True)
        allocs.append(alloc)
    return sorted(allocs, key=lambda a: a["uid"])


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
        hugepages = {name: 0 for name in _HUGEPAGE_SIZES_KB.values()}
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


def build_status(topo: Topology, pods: Sequence[PodMeta], node: NodeInfo, kubelet: KubeletCPUConfig | None, *,
                 hugepage_report: bool = False, bad: LogOnce | None = None) -> NRTStatus:
    """Everything this agent reports on the NodeResourceTopology, from host topology, pods and the Node.

    ``kubelet`` is None when the kubelet config is not queried (standalone, or ``disable-query-kubelet-config``):
    the policy annotation is then ``{}`` and ``topologyPolicies`` is ``None``, as upstream.
    """
    bad = bad or LogOnce(log, logging.ERROR)
    detail = cpu_topology_annotation(topo).get("detail", [])
    cpus = {d["id"]: (d["socket"], d["node"]) for d in detail}

    policy: dict[str, Any] = {}
    allocs: list[dict[str, Any]] = []
    if kubelet is not None:
        policy = {"policy": kubelet.policy}
        if kubelet.options:
            policy["options"] = dict(kubelet.options)
        if kubelet.policy == "static":
            reserved = kubelet.reserved_system_cpus or tuple(
                take_by_topology(topo, math.ceil(kubelet.reserved_cpu_milli / 1000)))
            if reserved:
                policy["reservedCPUs"] = format_cpu_list(reserved)
            allocs = _kubelet_allocs(topo, pods, bad)
    kubelet_cpus = {c for a in allocs for c in parse_cpu_list(a["cpuset"])}

    reservation, reserved_cpus = _node_reservation(topo, node, bad)
    system_qos, system_cpus = _system_qos(node, bad)
    ls_taken, be_taken = set(kubelet_cpus), set(kubelet_cpus)
    for meta in pods:
        cpuset = _resource_status_cpuset(meta, bad)
        ls_taken |= cpuset
        if meta.pod.raw_qos_class == wire.QOS_LSE:
            be_taken |= cpuset
    out_of_pools = reserved_cpus | system_cpus

    annotations = {
        wire.ANNOTATION_CPU_BASIC_INFO: go_json(cpu_basic_info_annotation(topo)),
        wire.ANNOTATION_CPU_TOPOLOGY: go_json(cpu_topology_annotation(topo)),
        wire.ANNOTATION_CPU_SHARED_POOLS: go_json(_pools(cpus, ls_taken | out_of_pools)),
        wire.ANNOTATION_BE_CPU_SHARED_POOLS: go_json(_pools(cpus, be_taken | out_of_pools)),
        wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: go_json(policy),
        wire.ANNOTATION_POD_CPU_ALLOCS: go_json(allocs or None),
        wire.ANNOTATION_NODE_RESERVATION: go_json(reservation),
        wire.ANNOTATION_SYSTEM_QOS_RESOURCE: go_json(system_qos),
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


def _merge_zones(old: Iterable[Mapping[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Zones not in ``new`` are dropped; in the others our resources replace theirs, other resources stay."""
    old_by_name = {z.get("name"): z for z in old if isinstance(z, Mapping)}
    merged = []
    for zone in new:
        resources = {r["name"]: r for r in (old_by_name.get(zone["name"], {}).get("resources") or [])
                     if isinstance(r, Mapping) and "name" in r}
        resources.update({r["name"]: r for r in zone["resources"]})
        merged.append({**old_by_name.get(zone["name"], {}), **zone,
                       "resources": [resources[k] for k in sorted(resources)]})
    return merged


def apply(obj: Mapping[str, Any], status: NRTStatus) -> dict[str, Any]:
    """A copy of ``obj`` with our fields set, everything else as it was."""
    out = json.loads(json.dumps(obj))
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **status.annotations}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in MANAGED_LABELS}
    meta["labels"] = {**labels, **status.labels}
    out["topologyPolicies"] = [status.topology_policy]
    out["zones"] = _merge_zones(out.get("zones") or [], status.zones)
    return out


def _json_value(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return text


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
        if _json_value(annotations.get(key)) != _json_value(status.annotations.get(key)):
            return f"annotation {key}"
    labels = meta.get("labels") or {}
    for key in MANAGED_LABELS:
        if labels.get(key) != status.labels.get(key):
            return f"label {key}"
    zones = obj.get("zones") or []
    if [(z.get("name"), z.get("type")) for z in zones] != [(z["name"], z["type"]) for z in status.zones]:
        return "zones"
    for old, new in zip(zones, status.zones):
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
