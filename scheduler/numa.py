"""NodeNUMAResource: koord-scheduler's NUMA-aware placement and CPU pinning, driven by the agent's NRT.

Facts: ``apis/extension/numa_aware.go`` and koord-scheduler's ``plugins/nodenumaresource`` (plugin.go,
topology_hint.go, resource_manager.go, cpu_accumulator.go, scoring.go, node_allocation.go, topology_options.go) and
``frameworkext/topologymanager``. Pure: the caller owns the state (one :class:`NumaUsage` per node, fed with every pod
assigned there, and the parsed :class:`NodeTopology`), and every decision is a function of (pod, topology, usage).

What a pod gets, as upstream decides it:

* **CPU binding** (a cpuset) for LSE/LSR prod pods whose bind policy resolves to FullPCPUs or SpreadByPCPUs, and for
  every pod with a CPU request on a node labelled (or a kubelet configured) to bind; whole cores only.
* **NUMA alignment** when the node's or the pod's NUMA topology policy is set: every NUMA subset is tried, the
  feasible ones become hints, and the hints of every provider (cpu, memory, ... here; devices from DeviceShare through
  ``extra_hints``) are merged the way the kubelet's topology manager merges them.
* The result is written as ``scheduling.koordinator.sh/resource-status`` byte for byte as Go's ``json.Marshal``
  prints it, so the agent's cpuset hook and koord-scheduler itself read it back unchanged.

Where upstream's code has quirks that change the result, they are kept on purpose (same input, same placement):

* The even split over a hint's NUMA nodes orders them with a comparator that indexes the availability map by the
  sort's *positions*, not by the NUMA ids (see :func:`_go_position_sort`).
* The NUMA-level hint score uses ``numaScoringStrategy.type`` with ``scoringStrategy.resources`` as the weights.
* NRT ``topologyPolicies`` values ``RestrictedPodLevel``/``BestEffortPodLevel`` (what koordlet writes) count as no
  policy; only ``Restricted``, ``BestEffort`` and ``SingleNUMANodePodLevel`` are recognized.

Where upstream would crash or drop a whole object on bad input, one bad value costs only itself: a tenant's bad
``resource-spec``/``numa-topology-spec`` makes its pod Unresolvable (upstream: a PreFilter error), an assigned pod's
bad ``resource-status`` counts as holding nothing (as upstream), an assigned pod's bad ``resource-spec`` loses only
its exclusivity (upstream: its cpuset too), a bad NRT annotation reads as absent (as upstream), and an unknown NUMA
policy label reads as absent (upstream: a nil policy and a panic).

Not implemented: reservations and preemption state, designated allocations (scheduling hints), CPU amplification
(``node.koordinator.sh/resource-amplification-ratio``: the extra "Insufficient amplified cpu" check and the amplified
NUMA capacities), pod-level ``spec.resources``, ``maxRefCount`` > 1 (upstream sets it only for tests).
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations, product
from types import MappingProxyType
from typing import Any, NamedTuple

from koordlet.base import wire
from koordlet.base.quantity import format_bytes, format_milli
from koordlet.host.cgroup import format_cpu_list
from koordlet.states import decode
from koordlet.states.topology import go_json
from scheduler.requests import pod_requests

log = logging.getLogger(__name__)

# --- names on the wire (apis/extension/numa_aware.go, node_reservation.go, system_qos.go) -------------------------

ANNOTATION_RESOURCE_SPEC = "scheduling.koordinator.sh/resource-spec"
ANNOTATION_NUMA_TOPOLOGY_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
LABEL_NUMA_TOPOLOGY_POLICY = "node.koordinator.sh/numa-topology-policy"
LABEL_CPU_BIND_POLICY = "node.koordinator.sh/cpu-bind-policy"
LABEL_NUMA_ALLOCATE_STRATEGY = "node.koordinator.sh/numa-allocate-strategy"

FULL_PCPUS, SPREAD_BY_PCPUS, DEFAULT_POLICY = "FullPCPUs", "SpreadByPCPUs", "Default"
CONSTRAINED_BURST = "ConstrainedBurst"
BIND_POLICIES = ("", DEFAULT_POLICY, FULL_PCPUS, SPREAD_BY_PCPUS, CONSTRAINED_BURST)
EXCLUSIVE_NONE, PCPU_LEVEL, NUMA_NODE_LEVEL = "None", "PCPULevel", "NUMANodeLevel"
EXCLUSIVE_POLICIES = ("", EXCLUSIVE_NONE, PCPU_LEVEL, NUMA_NODE_LEVEL)
NODE_FULL_PCPUS_ONLY, NODE_SPREAD_BY_PCPUS, NODE_BIND_NONE = "FullPCPUsOnly", "SpreadByPCPUs", "None"
NUMA_NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE = "", "BestEffort", "Restricted", "SingleNUMANode"
NUMA_POLICIES = (NUMA_NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE)
EXCLUSIVE_REQUIRED, EXCLUSIVE_PREFERRED = "Required", "Preferred"
NUMA_EXCLUSIVES = ("", EXCLUSIVE_REQUIRED, EXCLUSIVE_PREFERRED)
MOST_ALLOCATED, LEAST_ALLOCATED = "MostAllocated", "LeastAllocated"
STATUS_IDLE, STATUS_SHARED, STATUS_SINGLE = "idle", "shared", "single"

# NRT topologyPolicies values koord-scheduler recognizes (topology_options.go convertToNUMATopologyPolicy)
_NRT_POLICIES = {"BestEffort": BEST_EFFORT, "Restricted": RESTRICTED, "SingleNUMANodePodLevel": SINGLE_NUMA_NODE}

# --- reasons, worded as upstream -----------------------------------------------------------------------------------

ERR_NOT_MATCH_NUMA_TOPOLOGY = "node(s) NUMA Topology policy not match"
ERR_INVALID_REQUESTED_CPUS = "the requested CPUs must be integer"
ERR_INVALID_CPU_TOPOLOGY = "node(s) invalid CPU Topology"
ERR_SMT_ALIGNMENT = "node(s) requested cpus not multiple cpus per core"
ERR_CPU_BIND_POLICY_CONFLICT = "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
ERR_NOT_ENOUGH_CPUS = "not enough cpus available to satisfy request"
ERR_FAILED_TO_ALLOCATE_CPUS = "failed to allocate cpus"
ERR_MISSING_NUMA_RESOURCES = "node(s) missing NUMA resources"
ERR_UNSATISFIED_NUMA = "Unsatisfied NUMA {}"
ERR_UNALIGNED_HINT = "Unaligned NUMA Hint cause {}"
ERR_INSUFFICIENT_NUMA = "Insufficient NUMA {}"
ERR_REQUIRED_POLICY = "insufficient CPUs to satisfy required cpu bind policy {}"

MAX_SCORE = 100
MAX_NUMA_ID = 63                  # upstream's NUMA masks are 64-bit: a zone with a larger id cannot be placed
MAX_CPU_ENTRIES = 8192            # cpu-topology entries (koordlet.host.cgroup.MAX_CPUS: no host has more)
MAX_LIST_ENTRIES = 4096           # pod-cpu-allocs entries, resource-status NUMA entries
CPU, MEMORY, EPHEMERAL_STORAGE = "cpu", "memory", "ephemeral-storage"
_INT32 = (1 << 31) - 1


# --- quantities as Go's resource.Quantity carries them --------------------------------------------------------------
# The resource-status annotation prints quantities with their Go format: a quantity keeps the format it was parsed
# with (the pod's request, the NRT's allocatable), so "8Gi" prints "8Gi" and "8G" prints "8G".

_DECIMAL_SI, _BINARY_SI, _DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"
_BINARY_SUFFIX = re.compile(r"[KMGTPE]i$")
_EXPONENT = re.compile(r"[eE][+-]?\d+$")
_EXPONENT_SUFFIX = {"m": "e-3", "k": "e3", "M": "e6", "G": "e9", "T": "e12", "P": "e15", "E": "e18"}


class _Q(NamedTuple):
    """A quantity: its value in milli-units and the Go format it prints in."""

    milli: int
    fmt: str = _DECIMAL_SI


_ZERO = _Q(0)


def _ceil_milli(v: Fraction) -> int:
    q = v * 1000
    return -((-q.numerator) // q.denominator)


def _value(milli: int) -> int:
    """``Quantity.Value()``: base units, rounded up."""
    return -((-milli) // 1000)


def _format_of(raw: object) -> str:
    """The format Go's ``ParseQuantity`` gives a quantity written as ``raw``."""
    text = str(raw).strip()
    if _BINARY_SUFFIX.search(text):
        return _BINARY_SI
    if _EXPONENT.search(text):
        return _DECIMAL_EXPONENT
    return _DECIMAL_SI


def _quantity(key: str, raw: Any, where: str) -> _Q:
    return _Q(_ceil_milli(decode.quantity(key, raw, where)), _format_of(raw))


def _canonical(q: _Q) -> str:
    """``Quantity.String()``: BinarySI only for whole values of at least 1024, otherwise DecimalSI (or the exponent
    form of DecimalExponent)."""
    if q.fmt == _BINARY_SI and q.milli % 1000 == 0 and abs(q.milli) >= 1024 * 1000:
        return format_bytes(q.milli // 1000)
    text = format_milli(q.milli)
    if q.fmt == _DECIMAL_EXPONENT and text[-1:] in _EXPONENT_SUFFIX:
        return text[:-1] + _EXPONENT_SUFFIX[text[-1]]
    return text


def _units(name: str, milli: int) -> int:
    """The scheduler framework's unit of a resource: milli-cores for cpu, base units (bytes, counts) otherwise."""
    return milli if name == CPU else _value(milli)


# --- configuration: NodeNUMAResourceArgs ------------------------------------------------------------------------------

_SCORING_TYPES = (LEAST_ALLOCATED, MOST_ALLOCATED)
_DEFAULT_WEIGHTS = ((CPU, 1), (MEMORY, 1))


@dataclass(frozen=True)
class ScoringStrategy:
    """``{type, resources: [{name, weight}]}``; upstream defaults the whole strategy, never its parts."""

    type: str = LEAST_ALLOCATED
    resources: tuple[tuple[str, int], ...] = _DEFAULT_WEIGHTS

    @classmethod
    def from_config(cls, where: str, doc: Any) -> ScoringStrategy:
        if not isinstance(doc, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {type(doc).__name__}")
        _known_keys(where, doc, ("type", "resources"))
        kind = doc.get("type", "")
        if kind not in _SCORING_TYPES:
            raise ValueError(f"{where}.type: scoring strategy {kind!r:.40} is not supported "
                             f"(one of {', '.join(_SCORING_TYPES)})")
        raw = doc.get("resources") or []
        if not isinstance(raw, list):
            raise ValueError(f"{where}.resources: expected a list, got {type(raw).__name__}")
        resources = []
        for i, r in enumerate(raw):
            at = f"{where}.resources[{i}]"
            if not isinstance(r, Mapping):
                raise ValueError(f"{at}: expected a mapping, got {type(r).__name__}")
            _known_keys(at, r, ("name", "weight"))
            name, weight = r.get("name", ""), r.get("weight", 0)
            if not isinstance(name, str):
                raise ValueError(f"{at}.name: expected a string, got {name!r:.40}")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 < weight <= 100:
                raise ValueError(f"{at}.weight: resource weight of {name} not in valid range (0, 100]")
            resources.append((name, weight))
        return cls(str(kind), tuple(resources))


def _known_keys(where: str, doc: Mapping[str, Any], known: Iterable[str]) -> None:
    extra = sorted(str(k) for k in set(doc) - set(known))
    if extra:
        raise ValueError(f"{where}: unknown key(s) {', '.join(extra)}")


@dataclass(frozen=True)
class NumaArgs:
    """The subset of upstream's NodeNUMAResourceArgs this plugin uses, with upstream's v1 defaults."""

    default_cpu_bind_policy: str = FULL_PCPUS          # "" means: no binding unless the pod asks
    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)
    numa_scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)

    @classmethod
    def from_config(cls, doc: Mapping[str, Any]) -> NumaArgs:
        """From the camelCase document (``pluginConfig[].args``); ValueError names an unknown key or a bad value."""
        _known_keys("NodeNUMAResourceArgs", doc,
                    ("apiVersion", "kind", "defaultCPUBindPolicy", "scoringStrategy", "numaScoringStrategy"))
        policy = doc.get("defaultCPUBindPolicy", FULL_PCPUS)
        if policy not in ("", FULL_PCPUS, SPREAD_BY_PCPUS):
            raise ValueError(f"defaultCPUBindPolicy: {policy!r:.40}: must specified CPU bind policy FullPCPUs or "
                             "SpreadByPCPUs")
        scoring = (ScoringStrategy.from_config("scoringStrategy", doc["scoringStrategy"])
                   if doc.get("scoringStrategy") is not None else ScoringStrategy())
        numa = (ScoringStrategy.from_config("numaScoringStrategy", doc["numaScoringStrategy"])
                if doc.get("numaScoringStrategy") is not None else ScoringStrategy())
        return cls(str(policy), scoring, numa)


# --- the node: NodeResourceTopology + Node labels -------------------------------------------------------------------

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
    numa_resources: Mapping[int, Mapping[str, _Q]] = field(default_factory=dict)   # NUMA id -> allocatable
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


def _zones(name: str, zones: Any) -> dict[int, dict[str, _Q]]:
    """``node-<id>`` zones of type Node: resource name -> allocatable, as upstream's extractNUMANodeResources."""
    out: dict[int, dict[str, _Q]] = {}
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
        resources: dict[str, _Q] = {}
        for r in z.get("resources") or []:
            if not isinstance(r, Mapping) or not isinstance(r.get("name"), str):
                continue
            try:
                resources[r["name"]] = _quantity("zones", r.get("allocatable", 0), f"{z.get('name')}.{r['name']}")
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
            resources[CPU] = _Q(cpu.milli - 1000 * held, cpu.fmt)
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


# --- tenant annotations -----------------------------------------------------------------------------------------------

def _field(doc: Mapping[str, Any], name: str) -> Any:
    """A field as Go's encoding/json finds it: the exact key, else a key equal to it ignoring case."""
    if name in doc:
        return doc[name]
    folded = name.casefold()
    for k, v in doc.items():
        if str(k).casefold() == folded:
            return v
    return None


def _enum(key: str, doc: Mapping[str, Any], name: str, allowed: Sequence[str]) -> str:
    raw = _field(doc, name)
    if raw is None:
        return ""
    value = decode.string(key, raw, name)
    if value not in allowed:
        raise decode.DecodeError(key, f"{name}: {value!r:.40} is not one of {', '.join(a for a in allowed if a)}")
    return value


@decode.decoder(ANNOTATION_RESOURCE_SPEC)
def resource_spec(annotations: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(requiredCPUBindPolicy, preferredCPUBindPolicy, preferredCPUExclusivePolicy)``; DecodeError when bad."""
    raw = annotations.get(ANNOTATION_RESOURCE_SPEC)
    if raw is None:
        return "", "", ""
    doc = decode.json_object(ANNOTATION_RESOURCE_SPEC, raw)
    key = ANNOTATION_RESOURCE_SPEC
    return (_enum(key, doc, "requiredCPUBindPolicy", BIND_POLICIES),
            _enum(key, doc, "preferredCPUBindPolicy", BIND_POLICIES),
            _enum(key, doc, "preferredCPUExclusivePolicy", EXCLUSIVE_POLICIES))


@decode.decoder(ANNOTATION_NUMA_TOPOLOGY_SPEC)
def numa_topology_spec(annotations: Mapping[str, Any]) -> tuple[str, str]:
    """``(numaTopologyPolicy, singleNUMANodeExclusive)``; DecodeError when bad."""
    raw = annotations.get(ANNOTATION_NUMA_TOPOLOGY_SPEC)
    if raw is None:
        return "", ""
    key = ANNOTATION_NUMA_TOPOLOGY_SPEC
    doc = decode.json_object(key, raw)
    return (_enum(key, doc, "numaTopologyPolicy", NUMA_POLICIES),
            _enum(key, doc, "singleNUMANodeExclusive", NUMA_EXCLUSIVES))


@decode.decoder(wire.ANNOTATION_RESOURCE_STATUS)
def resource_status(annotations: Mapping[str, Any]) -> tuple[frozenset[int], dict[int, dict[str, int]]]:
    """An assigned pod's ``(cpuset, {NUMA node: {resource: milli}})``; DecodeError when bad."""
    raw = annotations.get(wire.ANNOTATION_RESOURCE_STATUS)
    if raw is None:
        return frozenset(), {}
    key = wire.ANNOTATION_RESOURCE_STATUS
    doc = decode.json_object(key, raw)
    cpus = frozenset(decode.cpu_list(key, _field(doc, "cpuset") or "", "cpuset"))
    numa: dict[int, dict[str, int]] = {}
    entries = decode.array(key, _field(doc, "numaNodeResources"), "numaNodeResources", max_items=MAX_LIST_ENTRIES)
    for i, e in enumerate(entries):
        at = f"numaNodeResources[{i}]"
        e = decode.obj(key, e, at, null=False)
        raw_node = _field(e, "node")
        node = decode.integer(key, 0 if raw_node is None else raw_node, f"{at}.node", 0, MAX_LIST_ENTRIES)
        resources = numa.setdefault(node, {})
        for name, q in decode.obj(key, _field(e, "resources"), f"{at}.resources").items():
            resources[name] = resources.get(name, 0) + _quantity(key, q, f"{at}.resources[{name}]").milli
    return cpus, numa


# --- what the node's assigned pods hold -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Held:
    cpus: frozenset[int]
    exclusive: str
    numa: Mapping[int, Mapping[str, int]]      # milli-units
    requests: Mapping[str, int]                # framework units (cpu milli, others base units)


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class NumaUsage:
    """What the pods assigned to one node hold: their cpusets, NUMA shares and exclusivity (from ``resource-status``
    and ``resource-spec``), and their summed requests (the node-level score). Feed it every pod assigned to the node;
    owned and locked by the caller."""

    def __init__(self) -> None:
        self._pods: dict[str, _Held] = {}
        self._cpu_refs: dict[int, int] = {}
        self._cpu_policy: dict[int, str] = {}
        self._numa: dict[int, dict[str, int]] = {}
        self._requested: dict[str, int] = {}

    def add(self, pod: Mapping[str, Any]) -> None:
        """Count ``pod`` (keyed by its uid; adding it again replaces it). A terminated pod is removed. A bad
        annotation is logged and counts as nothing held; the pod's requests still count."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        self.remove(uid)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        annotations = meta.get("annotations") or {}
        try:
            requests = {k: _units(k, _ceil_milli(v)) for k, v in pod_requests(pod.get("spec") or {}).items()}
        except ValueError as e:
            log.warning("pod requests ignored pod=%s uid=%s problem=%s", _pod_key(pod), uid, e)
            requests = {}
        cpus: frozenset[int] = frozenset()
        numa: dict[int, dict[str, int]] = {}
        exclusive = ""
        try:
            cpus, numa = resource_status(annotations)
        except decode.DecodeError as e:
            log.warning("pod NUMA allocation ignored pod=%s uid=%s key=%s problem=%s", _pod_key(pod), uid, e.key,
                        e.problem)
        try:
            exclusive = resource_spec(annotations)[2]
        except decode.DecodeError as e:
            log.warning("pod CPU exclusivity ignored pod=%s uid=%s key=%s problem=%s", _pod_key(pod), uid, e.key,
                        e.problem)
        held = _Held(cpus, exclusive, numa, requests)
        self._pods[uid] = held
        for c in cpus:
            self._cpu_refs[c] = self._cpu_refs.get(c, 0) + 1
            self._cpu_policy[c] = exclusive
        for node, resources in numa.items():
            into = self._numa.setdefault(node, {})
            for k, v in resources.items():
                into[k] = into.get(k, 0) + v
        for k, v in requests.items():
            self._requested[k] = self._requested.get(k, 0) + v

    def remove(self, uid: str) -> None:
        held = self._pods.pop(uid, None)
        if held is None:
            return
        for c in held.cpus:
            left = self._cpu_refs.get(c, 0) - 1
            if left > 0:
                self._cpu_refs[c] = left
            else:
                self._cpu_refs.pop(c, None)
                self._cpu_policy.pop(c, None)
        for node, resources in held.numa.items():
            into = self._numa.get(node, {})
            for k, v in resources.items():
                into[k] = max(into.get(k, 0) - v, 0)
        for k, v in held.requests.items():
            self._requested[k] = self._requested.get(k, 0) - v

    def allocated_cpus(self) -> Mapping[int, str]:
        """CPU -> the exclusive policy of the (last) pod holding it."""
        return self._cpu_policy

    def numa_allocated(self) -> Mapping[int, Mapping[str, int]]:
        """NUMA node -> resource -> milli-units held."""
        return self._numa

    def requested(self) -> Mapping[str, int]:
        """The node's summed pod requests in framework units (kube's NodeInfo.Requested)."""
        return self._requested

    def numa_status(self, topo: NodeTopology, count: int) -> list[str]:
        """Per NUMA id 0..count-1: ``single`` when only pods pinned inside that one node use it, ``shared`` when a
        pod's cpuset spans it and another node, else ``idle`` (only cpusets count, as upstream)."""
        single: set[int] = set()
        shared: set[int] = set()
        for held in self._pods.values():
            nodes = {topo.cpus[c].node for c in held.cpus if c in topo.cpus}
            (shared if len(nodes) > 1 else single).update(nodes)
        return [STATUS_SHARED if n in shared else STATUS_SINGLE if n in single else STATUS_IDLE for n in range(count)]


# --- the CPU accumulator (cpu_accumulator.go) -------------------------------------------------------------------------

class _Unfit(Exception):
    """The pod does not fit; the message is upstream's reason."""


class _Accumulator:
    """Takes CPUs for one pod out of ``free``, preferring whole cores, one NUMA node, one socket, as upstream."""

    def __init__(self, topo: NodeTopology, available: Iterable[int], allocated: Mapping[int, str], needed: int,
                 exclusive: str, strategy: str) -> None:
        self.topo = topo
        self.free = {c: topo.cpus[c] for c in available if c in topo.cpus}
        self.excl_cores = {topo.cpus[c].core for c, p in allocated.items() if p == PCPU_LEVEL and c in topo.cpus}
        self.excl_nodes = {topo.cpus[c].node for c, p in allocated.items() if p == NUMA_NODE_LEVEL and c in topo.cpus}
        self.exclusive = exclusive
        self.most = strategy == MOST_ALLOCATED
        self.needed = needed
        self.result: set[int] = set()

    def order(self, free: int) -> int:
        """Sort key for a free count: fewest first under MostAllocated, most first otherwise."""
        return free if self.most else -free

    def take(self, cpus: Iterable[int]) -> None:
        for c in cpus:
            self.result.add(c)
            info = self.free.pop(c, None) or self.topo.cpus[c]
            if self.exclusive == PCPU_LEVEL:
                self.excl_cores.add(info.core)
            elif self.exclusive == NUMA_NODE_LEVEL:
                self.excl_nodes.add(info.node)
            self.needed -= 1

    def needs(self, n: int) -> bool:
        return self.needed >= n

    def satisfied(self) -> bool:
        return self.needed < 1

    def _excl_pcpu(self, info: CPUInfo) -> bool:
        return self.exclusive == PCPU_LEVEL and info.core in self.excl_cores

    def _excl_numa(self, info: CPUInfo) -> bool:
        return self.exclusive == NUMA_NODE_LEVEL and info.node in self.excl_nodes

    def _cores(self, skip: Callable[[CPUInfo], bool]) -> dict[int, list[int]]:
        cores: dict[int, list[int]] = defaultdict(list)
        for c, info in self.free.items():
            if not skip(info):
                cores[info.core].append(c)
        return cores

    def _by_group(self, cores: Mapping[int, list[int]], group: Callable[[CPUInfo], int],
                  full_only: bool) -> dict[int, list[int]]:
        """Group -> its (whole, when ``full_only``) cores' CPUs, cores with the most free CPUs first, then by id."""
        grouped: dict[int, list[int]] = defaultdict(list)
        for core, cpus in cores.items():
            if not full_only or len(cpus) == self.topo.cpus_per_core:
                grouped[group(self.free[min(cpus)])].append(core)
        return {g: [c for core in sorted(cs, key=lambda k: (-len(cores[k]), k)) for c in sorted(cores[core])]
                for g, cs in grouped.items()}

    def free_cores_in_node(self, full_only: bool, filter_exclusive: bool) -> list[list[int]]:
        cores = self._cores(lambda i: filter_exclusive and self._excl_numa(i))
        socket_free = Counter(self.free[c].socket for cs in cores.values() for c in cs)
        lists = self._by_group(cores, lambda i: i.node, full_only)
        return [lists[n] for n in sorted(lists, key=lambda n: (
            self.order(len(lists[n])), self.order(socket_free[self.free[lists[n][0]].socket]), n))]

    def free_cores_in_socket(self, full_only: bool) -> list[list[int]]:
        lists = self._by_group(self._cores(lambda i: False), lambda i: i.socket, full_only)
        return [lists[s] for s in sorted(lists, key=lambda s: (self.order(len(lists[s])), s))]

    def extract(self, cpus: list[int]) -> list[int]:
        """The first CPU of each core, in order."""
        seen: set[int] = set()
        out = []
        for c in cpus:
            core = self.topo.cpus[c].core
            if core not in seen:
                seen.add(core)
                out.append(c)
        return out

    def free_cpus_in_node(self, filter_exclusive: bool) -> list[list[int]]:
        nodes: dict[int, list[int]] = defaultdict(list)
        node_free: Counter[int] = Counter()
        socket_free: Counter[int] = Counter()
        for c, info in self.free.items():
            if filter_exclusive and (self._excl_pcpu(info) or self._excl_numa(info)):
                continue
            nodes[info.node].append(c)
            node_free[info.node] += 1
            socket_free[info.socket] += 1
        lists = {n: self.extract(sorted(cs)) if filter_exclusive else sorted(cs) for n, cs in nodes.items()}
        return [lists[n] for n in sorted(lists, key=lambda n: (
            self.order(node_free[n]), self.order(socket_free[self.free[lists[n][0]].socket]), n))]

    def free_cpus_in_socket(self, filter_exclusive: bool) -> list[list[int]]:
        sockets: dict[int, list[int]] = defaultdict(list)
        for c, info in self.free.items():
            if not (filter_exclusive and self._excl_pcpu(info)):
                sockets[info.socket].append(c)
        lists = {s: self.extract(sorted(cs)) if filter_exclusive else sorted(cs) for s, cs in sockets.items()}
        return [lists[s] for s in sorted(lists, key=lambda s: (self.order(len(lists[s])), s))]

    def free_cpus(self, filter_exclusive: bool) -> list[int]:
        """Every free CPU, core by core: sockets already used by the result first, then by free CPUs per socket and
        per NUMA node (strategy order), cores with fewer free CPUs first, then socket and core id."""
        cores = self._cores(lambda i: filter_exclusive and (self._excl_pcpu(i) or self._excl_numa(i)))
        node_free = Counter(self.free[c].node for cs in cores.values() for c in cs)
        socket_free = Counter(self.free[c].socket for cs in cores.values() for c in cs)
        colo = {s: len(self.topo.cpus_in_socket.get(s, frozenset()) & self.result) for s in socket_free}

        def key(core: int) -> tuple[int, ...]:
            info = self.free[cores[core][0]]
            return (-colo[info.socket], self.order(socket_free[info.socket]), self.order(node_free[info.node]),
                    len(cores[core]), info.socket, core)
        return [c for core in sorted(cores, key=key) for c in sorted(cores[core])]

    def spread(self, cpus: list[int]) -> list[int]:
        """One CPU per core in order, then the second CPUs, ... (SMT siblings last)."""
        if len(cpus) <= self.topo.cpus_per_core:
            return cpus
        out: list[int] = []
        rest = cpus
        while rest:
            seen: set[int] = set()
            later = []
            for c in rest:
                core = self.topo.cpus[c].core
                if core in seen:
                    later.append(c)
                else:
                    seen.add(core)
                    out.append(c)
            rest = later
        return out


def take_cpus(topo: NodeTopology, available: Iterable[int], allocated: Mapping[int, str], needed: int,
              bind_policy: str, exclusive: str, strategy: str) -> frozenset[int]:
    """``needed`` CPUs out of ``available`` as upstream's takeCPUs picks them; ``allocated`` (CPU -> exclusive policy
    of its holder) feeds the PCPULevel/NUMANodeLevel exclusivity. Raises :class:`_Unfit` when they cannot be found."""
    acc = _Accumulator(topo, available, allocated, needed, exclusive, strategy)
    if acc.satisfied():
        return frozenset()
    if acc.needed > len(acc.free):
        raise _Unfit(ERR_NOT_ENOUGH_CPUS)
    full = bind_policy == FULL_PCPUS
    per_core = topo.cpus_per_core
    if full or per_core == 1:
        # whole free cores in one NUMA node, then in one socket (strategy order)
        if acc.needed <= topo.cpus_per_node:
            for filter_exclusive in (True, False):
                for cpus in acc.free_cores_in_node(True, filter_exclusive):
                    if len(cpus) >= acc.needed:
                        acc.take(cpus[:acc.needed])
                        return frozenset(acc.result)
        if acc.needed <= topo.cpus_per_socket:
            for cpus in acc.free_cores_in_socket(True):
                if len(cpus) >= acc.needed:
                    acc.take(cpus[:acc.needed])
                    return frozenset(acc.result)
        # every socket whose free whole cores all fit, most free first; then core by core from the fewest
        unsatisfied = []
        for cpus in sorted(acc.free_cores_in_socket(True), key=len, reverse=True):
            if not acc.needs(len(cpus)):
                unsatisfied.append(cpus)
            else:
                acc.take(cpus)
                if acc.satisfied():
                    return frozenset(acc.result)
        if acc.needs(per_core):
            for cpus in sorted(unsatisfied, key=len):
                for i in range(0, len(cpus), per_core):
                    acc.take(cpus[i:i + per_core])
                    if acc.satisfied():
                        return frozenset(acc.result)
                    if not acc.needs(per_core):
                        break
    if not full:
        # one NUMA node, then one socket, spreading over cores, even when the spread cannot be kept
        if acc.needed <= topo.cpus_per_node:
            for filter_exclusive in (True, False):
                for cpus in acc.free_cpus_in_node(filter_exclusive):
                    if len(cpus) >= acc.needed:
                        acc.take(acc.spread(cpus)[:acc.needed])
                        return frozenset(acc.result)
        if acc.needed <= topo.cpus_per_socket:
            for filter_exclusive in (True, False):
                for cpus in acc.free_cpus_in_socket(filter_exclusive):
                    if len(cpus) >= acc.needed:
                        acc.take(acc.spread(cpus)[:acc.needed])
                        return frozenset(acc.result)
    for filter_exclusive in (True, False):
        for c in acc.spread(acc.free_cpus(filter_exclusive)):
            if acc.needs(1):
                acc.take((c,))
            if acc.satisfied():
                return frozenset(acc.result)
    raise _Unfit(ERR_FAILED_TO_ALLOCATE_CPUS)


def _cores_of(topo: NodeTopology, cpus: Iterable[int]) -> dict[int, list[int]]:
    cores: dict[int, list[int]] = defaultdict(list)
    for c in cpus:
        if c in topo.cpus:
            cores[topo.cpus[c].core].append(c)
    return cores


def _filter_by_policy(topo: NodeTopology, policy: str, cpus: Iterable[int]) -> frozenset[int]:
    """What a required policy can use: whole free cores (FullPCPUs) or one CPU per core (SpreadByPCPUs)."""
    cores = _cores_of(topo, cpus)
    if policy == FULL_PCPUS:
        return frozenset(c for cs in cores.values() if len(cs) == topo.cpus_per_core for c in cs)
    if policy == SPREAD_BY_PCPUS:
        return frozenset(min(cs) for cs in cores.values())
    return frozenset(cpus)


def _satisfies(topo: NodeTopology, policy: str, cpus: frozenset[int]) -> bool:
    cores = len(_cores_of(topo, cpus))
    if policy == FULL_PCPUS:
        return cores * topo.cpus_per_core == len(cpus)
    if policy == SPREAD_BY_PCPUS:
        return cores == len(cpus)
    return True


# --- the pod (PreFilter) ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _PodSpec:
    """What PreFilter derives from the pod once."""

    requests: Mapping[str, _Q]
    cpu_milli: int
    bind: bool                 # the pod itself asks for a cpuset (LSE/LSR prod with FullPCPUs/SpreadByPCPUs)
    required: str              # required bind policy ("" when none)
    preferred: str             # the bind policy it would use without a node policy
    exclusive: str             # preferredCPUExclusivePolicy
    numa_policy: str
    numa_exclusive: str


def _request_formats(spec: Mapping[str, Any]) -> dict[str, str]:
    """Per resource, the format of the first container request naming it (app, then init containers, then
    overhead): the format Go's summed ResourceList keeps for it in the common cases."""
    formats: dict[str, str] = {}
    sources: list[Any] = []
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = (c.get("resources") or {}) if isinstance(c, Mapping) else {}
        sources += [resources.get("requests") or {}, resources.get("limits") or {}]
    sources.append(spec.get("overhead") or {})
    for requests in sources:
        if isinstance(requests, Mapping):
            for k, v in requests.items():
                formats.setdefault(str(k), _format_of(v))
    return formats


def _priority_class(pod: Mapping[str, Any]) -> str:
    """``GetPodPriorityClassRaw``: the label (an unknown value reads as none), else the priority's range."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if wire.LABEL_PRIORITY_CLASS in labels:
        value = labels[wire.LABEL_PRIORITY_CLASS]
        return value if value in (p for p, _, _ in wire.PRIORITY_RANGES) else wire.PRIORITY_NONE
    priority = (pod.get("spec") or {}).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        for name, lo, hi in wire.PRIORITY_RANGES:
            if lo <= priority <= hi:
                return name
    return wire.PRIORITY_NONE


def allow_cpuset(pod: Mapping[str, Any]) -> bool:
    """``AllowUseCPUSet``: LSE or LSR by the raw qosClass label, and prod priority (LSE/LSR default to prod)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(wire.LABEL_QOS_CLASS) not in (wire.QOS_LSE, wire.QOS_LSR):
        return False
    return _priority_class(pod) in (wire.PRIORITY_NONE, wire.PRIORITY_PROD)


# --- hints and their merge (frameworkext/topologymanager) -------------------------------------------------------------

@dataclass(frozen=True)
class Hint:
    """A NUMA affinity one provider can live with for one resource. An empty mask means "no preference" (upstream's
    nil affinity)."""

    mask: frozenset[int]
    preferred: bool
    score: int = 0


class _H(NamedTuple):
    mask: frozenset[int] | None           # None: no preference
    preferred: bool
    unsatisfied: bool = False
    score: int = 0


_NO_HINTS: Mapping[str, Sequence[Hint]] = MappingProxyType({})
_DONT_CARE = _H(None, True)


def _mask_text(mask: frozenset[int] | None) -> str:
    """A mask as upstream's BitMask.String() prints it in reasons ("01" is NUMA node 0, "10" node 1)."""
    v = sum(1 << b for b in mask or ())
    for shift in range(62, 0, -2):
        if v > 1 << shift:
            return format(v, f"0{shift + 2}b")
    return format(v, "02b")


def _narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """Fewer NUMA nodes, or as many with lower-numbered ones (``IsNarrowerThan``)."""
    if len(a) == len(b):
        return sum(1 << x for x in a) < sum(1 << x for x in b)
    return len(a) < len(b)


def _filter_providers(providers: Sequence[Mapping[str, Sequence[_H]]]) -> tuple[list[list[_H]], list[str]]:
    """Per provider and resource the hint list to merge; a resource with none becomes an unsatisfied entry and a
    reason."""
    lists: list[list[_H]] = []
    reasons: list[str] = []
    for hints in providers:
        if not hints:
            lists.append([_DONT_CARE])
            continue
        for resource in sorted(hints):
            entries = list(hints[resource])
            if not entries:
                lists.append([_H(None, False, unsatisfied=True)])
                reasons.append(ERR_UNSATISFIED_NUMA.format(resource))
                continue
            lists.append(entries)
    return lists, reasons


def _summary(providers: Sequence[Mapping[str, Sequence[_H]]], sep: str) -> str:
    """The per-resource "prefer [...] among [...]" of the reason for an unaligned hint (only built on rejection)."""
    summary = []
    for hints in providers:
        for resource, entries in hints.items():
            usable = [h for h in entries if not h.unsatisfied]
            if usable:
                summary.append(f"{resource} prefer [{' '.join(_mask_text(h.mask) for h in usable if h.preferred)}] "
                               f"among [{' '.join(_mask_text(h.mask) for h in usable)}]")
    return ERR_UNALIGNED_HINT.format(sep.join(sorted(summary)))


def _exclusive_ok(mask: frozenset[int] | None, exclusive: str, status: Sequence[str]) -> bool:
    """Required exclusivity: a multi-NUMA placement avoids nodes held by single-NUMA pods, and the reverse."""
    if mask is None:
        return False
    if exclusive == EXCLUSIVE_REQUIRED:
        def of(n: int) -> str:
            return status[n] if 0 <= n < len(status) else STATUS_IDLE
        if len(mask) > 1:
            return all(of(n) != STATUS_SINGLE for n in mask)
        return of(next(iter(mask))) != STATUS_SHARED
    return True


def _merge_lists(numa_nodes: Sequence[int], lists: Sequence[Sequence[_H]], exclusive: str,
                 status: Sequence[str]) -> _H:
    """The best of every combination of one hint per list (``mergeFilteredHints``)."""
    default = frozenset(numa_nodes)
    best = _H(default, False)
    for combo in product(*lists):
        masks = [h.mask for h in combo if h.mask is not None]
        merged = default.intersection(*masks)
        if not merged:
            continue
        preferred = all(h.preferred for h in combo) and all(m == masks[0] for m in masks)
        satisfied = (not masks or max(len(m) for m in masks) == len(merged)) and not any(h.unsatisfied for h in combo)
        if not _exclusive_ok(merged, exclusive, status):
            preferred = False
        score = sum(h.score for h in combo if h.mask is not None and h.mask == merged)
        hint = _H(merged, preferred, not satisfied, score)
        if hint.preferred != best.preferred:
            if hint.preferred:
                best = hint
            continue
        assert best.mask is not None
        if not _narrower(merged, best.mask):
            if len(merged) == len(best.mask) and score > best.score:
                best = hint
            continue
        best = hint
    return best


def merge_hints(policy: str, numa_nodes: Sequence[int], providers: Sequence[Mapping[str, Sequence[_H]]],
                exclusive: str, status: Sequence[str]) -> tuple[_H, bool, list[str]]:
    """``Policy.Merge`` for BestEffort, Restricted and SingleNUMANode: the best hint, whether the pod is admitted,
    and upstream's reasons when it is not."""
    lists, reasons = _filter_providers(providers)
    default = frozenset(numa_nodes)
    if policy == BEST_EFFORT:
        best = _merge_lists(numa_nodes, lists, exclusive, status)
        return (_H(default, False) if best.unsatisfied else best), True, []
    if policy == RESTRICTED:
        if reasons:
            return _H(default, False), False, reasons
        best = _merge_lists(numa_nodes, lists, exclusive, status)
        if not best.preferred:
            return best, False, [_summary(providers, " & ")]
        return best, True, []
    if reasons:
        return _H(None, False), False, reasons
    single = [[h for h in hs if h.preferred and (h.mask is None or len(h.mask) == 1)] for hs in lists]
    best = _merge_lists(numa_nodes, single, exclusive, status)
    if best.mask == default:
        best = _H(None, best.preferred)
    if not best.preferred:
        return best, False, [_summary(providers, ",")]
    return best, True, []


# --- scoring (scoring.go, least_allocated.go, most_allocated.go) ------------------------------------------------------

def _score(kind: str, weights: Sequence[tuple[str, int]], requested: Mapping[str, int],
           allocatable: Mapping[str, int], pod: Mapping[str, int]) -> int:
    """LeastAllocated/MostAllocated over the weighted resources, in framework units; 0..100."""
    total = weight_sum = 0
    for name, weight in dict(weights).items():
        ask = pod.get(name, 0)
        if name not in (CPU, MEMORY, EPHEMERAL_STORAGE) and (ask == 0 or name not in allocatable):
            continue                            # scalar resources count only when the pod asks for them
        cap, used = allocatable.get(name, 0), requested.get(name, 0) + ask
        if cap == 0:
            continue
        if kind == MOST_ALLOCATED:
            total += min(used, cap) * MAX_SCORE // cap * weight
        else:
            total += ((cap - used) * MAX_SCORE // cap if used <= cap else 0) * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0


def _framework(resources: Mapping[str, _Q] | Mapping[str, int]) -> dict[str, int]:
    """Milli-unit values (or quantities) in framework units."""
    return {k: _units(k, v.milli if isinstance(v, _Q) else v) for k, v in resources.items()}


def _node_allocatable(node: Mapping[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in (((node or {}).get("status") or {}).get("allocatable") or {}).items():
        try:
            out[str(k)] = _units(str(k), _quantity("status.allocatable", v, str(k)).milli)
        except decode.DecodeError:
            continue
    return out


# --- allocation on one node (resource_manager.go) ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Options:
    requests: Mapping[str, _Q]
    num_cpus: int
    bind: bool                 # requestCPUBind on this node
    policy: str                # the CPU bind policy used
    required: bool             # the policy is required (the pod's, or the node's)
    exclusive: str
    strategy: str              # NUMA allocate strategy


class _Alloc(NamedTuple):
    numa: dict[int, dict[str, _Q]]
    cpus: frozenset[int]


def _go_position_sort(nodes: Sequence[int], available_at: Sequence[int]) -> list[int]:
    """Upstream's ``sort.Slice`` in tryBestToDistributeEvenly compares ``totalAvailable[i]`` and
    ``totalAvailable[j]`` with i and j the *positions* being compared, not the NUMA ids there. Go sorts up to 12
    elements by insertion sort, so the swaps are fully determined by the availability of NUMA ids 0, 1, ...; this
    replays them (``available_at[i]``: what NUMA id i has free). Only for the mask {0, 1} is it the intended sort
    by availability."""
    out = list(nodes)
    for i in range(1, len(out)):
        j = i
        while j > 0 and available_at[j] < available_at[j - 1]:
            out[j], out[j - 1] = out[j - 1], out[j]
            j -= 1
    return out


class _Node:
    """One node's state for one pod's decision: what is free, and how to allocate from it."""

    def __init__(self, topo: NodeTopology, usage: NumaUsage, opts: _Options) -> None:
        self.topo, self.opts = topo, opts
        self.allocated = usage.allocated_cpus()
        self.free_cpus = frozenset(c for c in topo.cpus if c not in self.allocated and c not in topo.reserved)
        self.held = usage.numa_allocated()
        self.numa_free = self._numa_free()
        self.numa_names = {k for free in self.numa_free.values() for k in free}
        # a NUMA node's take depends only on (node, count) within one decision: the hints try every NUMA subset
        self._taken: dict[tuple[int, int], frozenset[int] | _Unfit] = {}

    def _numa_free(self) -> dict[int, dict[str, _Q]]:
        """Per NUMA node: allocatable less what pods hold (never below zero), cpu trimmed to what a required bind
        policy could use there."""
        out: dict[int, dict[str, _Q]] = {}
        for numa, allocatable in self.topo.numa_resources.items():
            held = self.held.get(numa, {})
            free = {}
            for k, q in allocatable.items():
                left = q.milli - held.get(k, 0)
                free[k] = _Q(left, q.fmt) if left > 0 else _ZERO
            for k in held:
                free.setdefault(k, _ZERO)
            out[numa] = free
        if self.opts.required:
            for numa, free in out.items():
                cpu = free.get(CPU, _ZERO)
                if cpu.milli == 0:
                    continue
                usable = _filter_by_policy(self.topo, self.opts.policy,
                                           self.free_cpus & self.topo.cpus_in_numa.get(numa, frozenset()))
                if 1000 * len(usable) < cpu.milli:
                    free[CPU] = _Q(1000 * len(usable), cpu.fmt)
        return out

    def _split(self, name: str, remaining: _Q, parts: int) -> _Q:
        """A NUMA node's share of what is left (``splitQuantity``)."""
        if name != CPU:
            return _Q(_value(remaining.milli) // parts * 1000, remaining.fmt)
        if not self.opts.bind:
            return _Q(remaining.milli // parts, remaining.fmt)
        if self.opts.required and self.opts.policy == FULL_PCPUS:
            per_core = self.topo.cpus_per_core
            return _Q(_value(remaining.milli) // per_core // parts * per_core * 1000, remaining.fmt)
        return _Q(_value(remaining.milli) // parts * 1000, remaining.fmt)

    def distribute(self, mask: frozenset[int]) -> dict[int, dict[str, _Q]]:
        """Each requested resource spread over the mask's NUMA nodes, the least available first, each taking at
        most an even share of what is left (``tryBestToDistributeEvenly``); _Unfit when some is left over."""
        bits = sorted(mask)
        out: dict[int, dict[str, _Q]] = {}
        short = []
        for name in sorted(self.opts.requests):
            if name not in self.numa_names:
                continue
            remaining = self.opts.requests[name]
            order = _go_position_sort(bits, [self.numa_free.get(i, {}).get(name, _ZERO).milli
                                             for i in range(len(bits))])
            for i, numa in enumerate(order):
                share = self._split(name, remaining, len(bits) - i)
                free = self.numa_free.get(numa, {}).get(name, _ZERO)
                taken = share if free.milli > share.milli else free
                if taken.milli != 0:
                    out.setdefault(numa, {})[name] = taken
                    remaining = _Q(remaining.milli - taken.milli, remaining.fmt)
            if remaining.milli != 0:
                short.append(ERR_INSUFFICIENT_NUMA.format(name))
        if short:
            raise _Unfit(", ".join(short))
        return {k: out[k] for k in sorted(out)}

    def cpuset(self, numa: Mapping[int, Mapping[str, _Q]]) -> frozenset[int]:
        """The pod's CPUs: each NUMA node's cpu share taken there, or all from the node (``allocateCPUSet``)."""
        opts, topo = self.opts, self.topo
        free = self.free_cpus
        if opts.required:
            free = _filter_by_policy(topo, opts.policy, free)
        if len(free) < opts.num_cpus:
            raise _Unfit(ERR_NOT_ENOUGH_CPUS)
        result: frozenset[int] = frozenset()
        needed = opts.num_cpus
        if numa:
            for node in sorted(numa):
                result |= self._take_in(node, numa[node].get(CPU, _ZERO).milli // 1000, free)
            needed -= len(result)
            if needed != 0:
                raise _Unfit(ERR_NOT_ENOUGH_CPUS)
        if needed > 0:
            result |= take_cpus(topo, free - result, self.allocated, needed, opts.policy, opts.exclusive,
                                opts.strategy)
        if opts.required and not _satisfies(topo, opts.policy, result):
            raise _Unfit(ERR_REQUIRED_POLICY.format(opts.policy))
        return result

    def _take_in(self, node: int, share: int, free: frozenset[int]) -> frozenset[int]:
        """The CPUs of one NUMA node's share (at most what is free there)."""
        here = free & self.topo.cpus_in_numa.get(node, frozenset())
        count = min(share, len(here))
        taken = self._taken.get((node, count))
        if taken is None:
            opts = self.opts
            try:
                taken = take_cpus(self.topo, here, self.allocated, count, opts.policy, opts.exclusive, opts.strategy)
            except _Unfit as e:
                taken = e
            self._taken[(node, count)] = taken
        if isinstance(taken, _Unfit):
            raise taken
        return taken

    def allocate(self, mask: frozenset[int] | None) -> _Alloc:
        """NUMA shares within ``mask`` (none when None) and the cpuset when binding; _Unfit when it does not fit."""
        numa = self.distribute(mask) if mask is not None else {}
        return _Alloc(numa, self.cpuset(numa) if self.opts.bind else frozenset())

    def hints(self, policy: str, kind: str, weights: Sequence[tuple[str, int]],
              max_size: int | None = None) -> dict[str, list[_H]]:
        """Per requested NRT resource, every NUMA subset (of at most ``max_size`` nodes) the pod fits in
        (``generateResourceHints``)."""
        zones = self.topo.numa_resources
        names = {k for r in zones.values() for k in r}
        lacking = {k: {n for n, free in self.numa_free.items() if free.get(k, _ZERO).milli == 0} for k in names}
        smallest = dict.fromkeys(self.opts.requests, len(zones))
        found: dict[str, list[tuple[frozenset[int], int]]] = {}
        requested_names: set[str] = set()
        pod = _framework(self.opts.requests)
        for size in range(1, min(len(zones), max_size or len(zones)) + 1):
            for combo in combinations(sorted(zones), size):
                mask = frozenset(combo)
                total: dict[str, int] = {}
                free: dict[str, int] = {}
                for n in combo:
                    for k, q in zones[n].items():
                        total[k] = total.get(k, 0) + q.milli
                    for k, q in self.numa_free[n].items():
                        free[k] = free.get(k, 0) + q.milli
                requested_names.update(k for k in self.opts.requests if k in total)
                used = {k: max(total.get(k, 0) - free.get(k, 0), 0) for k in total.keys() | free.keys()}
                score = _score(kind, weights, _framework(used), _framework(total), pod)
                try:
                    self.allocate(mask)
                except _Unfit:
                    continue
                for k in sorted(requested_names):
                    if mask & lacking.get(k, set()):
                        continue
                    smallest[k] = min(smallest[k], size)
                    found.setdefault(k, []).append((mask, score))
        out: dict[str, list[_H]] = {}
        for k in requested_names:
            out[k] = [_H(m, len(m) == smallest[k] or policy == RESTRICTED, False, s) for m, s in found.get(k, [])]
        return out


# --- the plugin -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NumaResult:
    """What NodeNUMAResource allocated to a pod on a node. ``numa_resources`` is in milli-cores for cpu and base
    units otherwise; ``quantities`` holds the same values as upstream prints them in ``resource-status``;
    ``affinity`` is the chosen NUMA mask (None: no NUMA alignment), for DeviceShare to allocate within."""

    cpuset: frozenset[int]
    numa_resources: Mapping[int, Mapping[str, int]]
    bind_policy: str                      # the CPU bind policy used; "" when the pod gets no cpuset
    required: bool = False                # bind_policy was required (by the pod or by the node)
    affinity: frozenset[int] | None = None
    quantities: Mapping[int, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The pod does not fit the node, with upstream's reason; ``unresolvable`` as kube's
    UnschedulableAndUnresolvable (no preemption can help)."""

    reason: str
    unresolvable: bool


class NodeNUMAResource:
    """koord-scheduler's NodeNUMAResource plugin as pure decisions: filter, allocate (Reserve), score, annotations
    (PreBind)."""

    def __init__(self, args: NumaArgs) -> None:
        self.args = args
        # one extender call asks about one pod on hundreds of nodes: its spec is read once per pod object, and each
        # Node's allocatable once per Node object (compared by identity while the memo holds the reference)
        self._last_spec: tuple[Mapping[str, Any], _PodSpec | Verdict | None] | None = None
        self._allocatable: dict[str, tuple[Mapping[str, Any], dict[str, int]]] = {}

    # -- PreFilter --

    def _spec(self, pod: Mapping[str, Any]) -> _PodSpec | Verdict | None:
        """The pod's requests and policies; None when it requests nothing (upstream skips it)."""
        last = self._last_spec
        if last is not None and last[0] is pod:
            return last[1]
        spec = self._read_spec(pod)
        self._last_spec = (pod, spec)
        return spec

    def _node_allocatable(self, node: Mapping[str, Any] | None) -> dict[str, int]:
        if node is None:
            return {}
        name = str((node.get("metadata") or {}).get("name", ""))
        known = self._allocatable.get(name)
        if known is not None and known[0] is node:
            return known[1]
        value = _node_allocatable(node)
        self._allocatable[name] = (node, value)
        return value

    def _read_spec(self, pod: Mapping[str, Any]) -> _PodSpec | Verdict | None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            required, preferred, exclusive = resource_spec(annotations)
            numa_policy, numa_exclusive = numa_topology_spec(annotations)
        except decode.DecodeError as e:
            return Verdict(str(e), True)
        spec = pod.get("spec") or {}
        try:
            summed = pod_requests(spec)
        except ValueError as e:
            return Verdict(f"pod requests: {e}", True)
        if not summed:
            return None
        formats = _request_formats(spec)
        requests = {k: _Q(_ceil_milli(v), formats.get(k, _DECIMAL_SI)) for k, v in summed.items()}
        cpu = requests.get(CPU, _ZERO).milli
        bind, state_required, state_preferred, state_exclusive = False, "", "", ""
        if allow_cpuset(pod):
            policy = preferred if preferred not in ("", DEFAULT_POLICY) else self.args.default_cpu_bind_policy
            if required == DEFAULT_POLICY:
                required = self.args.default_cpu_bind_policy
            if required:
                policy = required
            if policy in (FULL_PCPUS, SPREAD_BY_PCPUS):
                if cpu % 1000:
                    return Verdict(ERR_INVALID_REQUESTED_CPUS, True)
                if cpu > 0:
                    bind, state_required, state_preferred, state_exclusive = True, required, policy, exclusive
        return _PodSpec(MappingProxyType(requests), cpu, bind, state_required, state_preferred, state_exclusive,
                        numa_policy, numa_exclusive)

    # -- per node --

    @staticmethod
    def _policy(spec: _PodSpec, topo: NodeTopology | None) -> str | Verdict:
        node = topo.numa_policy if topo is not None else NUMA_NONE
        if node and spec.numa_policy and node != spec.numa_policy:
            return Verdict(ERR_NOT_MATCH_NUMA_TOPOLOGY, True)
        return spec.numa_policy or node

    @staticmethod
    def _bind(spec: _PodSpec, topo: NodeTopology | None) -> bool | Verdict:
        """``requestCPUBind``: the pod asks, or the node binds every pod with a CPU request (whole cores only)."""
        if spec.bind:
            return True
        if spec.cpu_milli == 0:
            return False
        node = topo.cpu_bind_policy if topo is not None else NODE_BIND_NONE
        if node != NODE_BIND_NONE:
            if spec.cpu_milli % 1000:
                return Verdict(ERR_INVALID_REQUESTED_CPUS, True)
            return True
        return False

    def _options(self, spec: _PodSpec, topo: NodeTopology, bind: bool) -> _Options:
        """``getResourceOptions``: the pod's required policy, else the node's (required), else its preferred one."""
        policy, required = spec.required, bool(spec.required)
        if not required:
            policy = spec.preferred
            node = topo.cpu_bind_policy
            if node == NODE_SPREAD_BY_PCPUS:
                policy, required = SPREAD_BY_PCPUS, True
            elif node == NODE_FULL_PCPUS_ONLY:
                policy, required = FULL_PCPUS, True
        strategy = topo.numa_allocate_strategy or (
            MOST_ALLOCATED if self.args.numa_scoring_strategy.type == MOST_ALLOCATED else LEAST_ALLOCATED)
        return _Options(spec.requests, spec.cpu_milli // 1000, bind, policy, required, spec.exclusive, strategy)

    def _admit(self, spec: _PodSpec, topo: NodeTopology | None, usage: NumaUsage, policy: str,
               extra: Mapping[str, Sequence[Hint]]) -> tuple[frozenset[int] | None, _Alloc] | Verdict:
        """The topology manager's Admit: merge the hints, then allocate within the best one."""
        if topo is None or not topo.numa_resources:
            return Verdict(ERR_MISSING_NUMA_RESOURCES, True)
        bind = self._bind(spec, topo)
        if isinstance(bind, Verdict):
            return bind
        node = _Node(topo, usage, self._options(spec, topo, bind))
        exclusive = spec.numa_exclusive or (EXCLUSIVE_REQUIRED if spec.numa_policy else "")
        status = usage.numa_status(topo, len(topo.numa_resources))
        others = [{k: [_H(h.mask or None, h.preferred, False, h.score) for h in v] for k, v in extra.items()}
                  ] if extra else []

        def merged(max_size: int | None) -> tuple[dict[str, list[_H]], tuple[_H, bool, list[str]]]:
            hints = node.hints(policy, self.args.numa_scoring_strategy.type, self.args.scoring_strategy.resources,
                               max_size)
            return hints, merge_hints(policy, topo.numa_nodes, [hints, *others], exclusive, status)
        # SingleNUMANode admits single-node hints only: when every resource has one and the pod is admitted, the
        # larger subsets (2^n of them) cannot change the outcome; otherwise they are needed (upstream's reason
        # lists them all)
        hints, (best, admit, reasons) = merged(1 if policy == SINGLE_NUMA_NODE else None)
        if policy == SINGLE_NUMA_NODE and not (admit and all(hints.values())):
            _, (best, admit, reasons) = merged(None)
        if not admit and reasons:
            return Verdict(", ".join(reasons), False)
        try:
            return best.mask, node.allocate(best.mask)
        except _Unfit as e:
            return Verdict(str(e), False)

    def _resolve(self, pod: Mapping[str, Any], topo: NodeTopology | None
                 ) -> tuple[_PodSpec, str, bool] | Verdict | None:
        """The pod's spec, the NUMA policy that applies on this node and whether it binds CPUs; a Verdict when they
        conflict, None when the pod requests nothing."""
        spec = self._spec(pod)
        if not isinstance(spec, _PodSpec):
            return spec
        policy = self._policy(spec, topo)
        if isinstance(policy, Verdict):
            return policy
        bind = self._bind(spec, topo)
        if isinstance(bind, Verdict):
            return bind
        return spec, policy, bind

    def filter(self, pod: Mapping[str, Any], topo: NodeTopology | None, usage: NumaUsage,
               extra_hints: Mapping[str, Sequence[Hint]] = _NO_HINTS) -> Verdict | None:
        """Upstream's Filter: None when the pod fits the node. ``extra_hints``: other providers' NUMA hints
        (DeviceShare's, by device type) merged with ours; their own allocation within the chosen mask is theirs."""
        resolved = self._resolve(pod, topo)
        if not isinstance(resolved, tuple):
            return resolved
        spec, policy, bind = resolved
        if bind:
            if topo is None or not topo.valid:
                return Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
            required = spec.required
            if topo.cpu_bind_policy == NODE_FULL_PCPUS_ONLY:
                required = FULL_PCPUS
            elif topo.cpu_bind_policy == NODE_SPREAD_BY_PCPUS:
                required = SPREAD_BY_PCPUS
            if spec.required and spec.required != required:
                return Verdict(ERR_CPU_BIND_POLICY_CONFLICT, True)
            if required == FULL_PCPUS and (spec.cpu_milli // 1000) % topo.cpus_per_core:
                return Verdict(ERR_SMT_ALIGNMENT, True)
            if required and policy == NUMA_NONE:
                try:
                    _Node(topo, usage, self._options(spec, topo, True)).allocate(None)
                except _Unfit as e:
                    return Verdict(str(e), False)
                return None
        if policy in (RESTRICTED, SINGLE_NUMA_NODE):
            admitted = self._admit(spec, topo, usage, policy, extra_hints)
            return admitted if isinstance(admitted, Verdict) else None
        return None

    def allocate(self, pod: Mapping[str, Any], topo: NodeTopology | None, usage: NumaUsage,
                 extra_hints: Mapping[str, Sequence[Hint]] = _NO_HINTS) -> NumaResult | Verdict | None:
        """Upstream's Reserve: the cpuset and NUMA shares for the pod on this node; None when it needs neither."""
        resolved = self._resolve(pod, topo)
        if not isinstance(resolved, tuple):
            return resolved
        spec, policy, bind = resolved
        if policy == NUMA_NONE:
            if not bind:
                return None
            if topo is None or not topo.valid:
                return Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
            opts = self._options(spec, topo, bind)
            try:
                return self._result(opts, None, _Node(topo, usage, opts).allocate(None))
            except _Unfit as e:
                return Verdict(str(e), False)
        if bind and topo is not None and not topo.valid:
            return Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
        admitted = self._admit(spec, topo, usage, policy, extra_hints)
        if isinstance(admitted, Verdict):
            return admitted
        assert topo is not None
        return self._result(self._options(spec, topo, bind), *admitted)

    @staticmethod
    def _result(opts: _Options, mask: frozenset[int] | None, alloc: _Alloc) -> NumaResult:
        return NumaResult(
            cpuset=alloc.cpus,
            numa_resources=MappingProxyType({n: MappingProxyType({k: _units(k, q.milli) for k, q in r.items()})
                                             for n, r in alloc.numa.items()}),
            bind_policy=opts.policy if opts.bind else "",
            required=opts.required if opts.bind else False,
            affinity=mask,
            quantities=MappingProxyType({n: MappingProxyType({k: _canonical(q) for k, q in r.items()})
                                         for n, r in alloc.numa.items()}))

    def score(self, pod: Mapping[str, Any], node: Mapping[str, Any] | None, topo: NodeTopology | None,
              usage: NumaUsage, extra_hints: Mapping[str, Sequence[Hint]] = _NO_HINTS) -> int:
        """Upstream's Score (0..100, not normalized): the node's allocation with no NUMA policy, else the chosen NUMA
        nodes' allocatable and allocated (pinned CPUs counting as whole cores)."""
        spec = self._spec(pod)
        if not isinstance(spec, _PodSpec):
            return 0
        policy = self._policy(spec, topo)
        bind = self._bind(spec, topo)
        if isinstance(bind, Verdict) or (bind and (topo is None or not topo.valid)):
            return 0
        strategy = self.args.scoring_strategy
        pod_units = _framework(spec.requests)
        if isinstance(policy, Verdict) or policy == NUMA_NONE or topo is None:
            return _score(strategy.type, strategy.resources, usage.requested(), self._node_allocatable(node),
                          pod_units)
        if policy in (RESTRICTED, SINGLE_NUMA_NODE):
            admitted = self._admit(spec, topo, usage, policy, extra_hints)
            if isinstance(admitted, Verdict):
                return 0
            alloc = admitted[1]
        else:                   # BestEffort: no affinity is chosen before Reserve upstream
            try:
                alloc = _Node(topo, usage, self._options(spec, topo, bind)).allocate(None)
            except _Unfit:
                return 0
        if alloc.numa:
            held = usage.numa_allocated()
            requested: dict[str, int] = {}
            allocatable: dict[str, int] = {}
            for n in alloc.numa:
                for k, v in held.get(n, {}).items():
                    requested[k] = requested.get(k, 0) + v
                for k, q in topo.numa_resources.get(n, {}).items():
                    allocatable[k] = allocatable.get(k, 0) + q.milli
            requested_units, allocatable_units = _framework(requested), _framework(allocatable)
        else:
            requested_units, allocatable_units = dict(usage.requested()), dict(self._node_allocatable(node))
        if alloc.cpus:
            requested_units[CPU] = 1000 * len(usage.allocated_cpus())
        return _score(strategy.type, strategy.resources, requested_units, allocatable_units, pod_units)

    def annotations(self, pod: Mapping[str, Any], result: NumaResult) -> dict[str, str]:
        """PreBind's annotations: ``resource-status`` (cpuset, numaNodeResources) exactly as upstream marshals it,
        and ``resource-spec`` filled with the bind policy used when the pod gave none or ``Default``."""
        status: dict[str, Any] = {}
        if result.cpuset:
            status["cpuset"] = format_cpu_list(sorted(result.cpuset))
        if result.quantities:
            status["numaNodeResources"] = [
                {"node": n, "resources": {k: result.quantities[n][k] for k in sorted(result.quantities[n])}}
                for n in sorted(result.quantities)]
        out = {wire.ANNOTATION_RESOURCE_STATUS: go_json(status)}
        if result.bind_policy:
            spec = self._written_spec(pod, result)
            if spec is not None:
                out[ANNOTATION_RESOURCE_SPEC] = spec
        return out

    @staticmethod
    def _written_spec(pod: Mapping[str, Any], result: NumaResult) -> str | None:
        """``appendResourceSpecIfMissed``: the pod's resource-spec with the policy used filled in, or None when it
        already says it."""
        try:
            required, preferred, exclusive = resource_spec((pod.get("metadata") or {}).get("annotations") or {})
        except decode.DecodeError:
            required, preferred, exclusive = "", "", ""
        write = False
        if result.required and required in ("", DEFAULT_POLICY):
            required, write = result.bind_policy, True
        if preferred == DEFAULT_POLICY:
            preferred, write = result.bind_policy, True
        if not required and not preferred:
            preferred, write = result.bind_policy, True
        if not write:
            return None
        spec = {"requiredCPUBindPolicy": required, "preferredCPUBindPolicy": preferred,
                "preferredCPUExclusivePolicy": exclusive}
        return go_json({k: v for k, v in spec.items() if v})

