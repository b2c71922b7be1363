"""The agent's view of a pod: the few fields it acts on, parsed once from the Kubernetes JSON object.

Class rules follow upstream ``apis/extension/qos_utils.go``, ``priority_utils.go`` and ``resource.go``: the koordinator
QoS class comes from the ``koordinator.sh/qosClass`` label, else from the Kubernetes QoS class; the priority class from
the ``koordinator.sh/priority-class`` label, else ``spec.priority`` ranges, else the QoS class.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, TypeVar

from koordlet.base import wire
from koordlet.base.quantity import parse_quantity
from koordlet.host.cgroup import KubeQOS, check_pod_uid, format_cpu_list, parse_container_id
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.deviceallocation import resource_name

T = TypeVar("T")
MAX_NUMA_NODES = 1024    # the kernel's MAX_NUMNODES at its largest (NODES_SHIFT 10): more entries name nothing

_KUBE_TO_KOORD = {KubeQOS.GUARANTEED: wire.QOS_LSR, KubeQOS.BURSTABLE: wire.QOS_LS,
                  KubeQOS.BESTEFFORT: wire.QOS_BE}


@dataclass(frozen=True, slots=True)
class Resources:
    """A container's requests and limits as the enforcement rules need them (0 = not set).

    cpu in milli-cores, memory in bytes; batch_* are the ``kubernetes.io/batch-*`` extended resources (their
    quantity's integer value is already milli-cores for cpu, as ``apis/extension/resource.go`` defines it); mid_*
    the ``kubernetes.io/mid-*`` ones (only reported, as upstream's ``container_resource_requests`` / ``_limits``).
    """
    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0
    batch_cpu_request: int = 0
    batch_cpu_limit: int = 0
    batch_memory_request: int = 0
    batch_memory_limit: int = 0
    mid_cpu_request: int = 0
    mid_cpu_limit: int = 0
    mid_memory_request: int = 0
    mid_memory_limit: int = 0


NO_RESOURCES = Resources()


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    runtime: str      # "containerd", "docker", "cri-o", "pouch"; "" when discovered from a cgroupfs dir name
    id: str           # bare id; "" before the container has started
    resources: Resources = NO_RESOURCES
    known: bool = True    # False: a cgroup dir nobody has named (resources unknown; it may be the sandbox's)
    yarn: bool = False    # a YARN container of this (NodeManager) pod, named by the copilot agent (states.yarn)


@dataclass(frozen=True, slots=True)
class SpecContainer:
    """A container of the pod spec as the kubelet lists it in PodResources: restartable init containers
    (sidecars) first, then the regular ones; ``devices`` are its device resources (limits over requests)."""
    name: str
    sidecar: bool = False
    devices: Mapping[str, Fraction] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pod:
    uid: str
    name: str
    namespace: str
    kube_qos: KubeQOS
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None
    phase: str = ""
    containers: tuple[Container, ...] = ()
    batch_cpu_request_milli: int = 0      # Σ kubernetes.io/batch-cpu requests (BE accounting)
    cpu_request_milli: int = 0            # the pod's effective cpu request (see pod_requests)
    memory_request_bytes: int = 0
    created: float = 0.0                  # metadata.creationTimestamp, Unix seconds (0: unknown)
    terminating: bool = False             # deletionTimestamp set, or phase Succeeded / Failed
    pod_ip: str = ""                      # status.podIP (net QoS classifies egress by source address)
    host_network: bool = False            # spec.hostNetwork
    spec_containers: tuple[SpecContainer, ...] = ()   # sidecars then regular containers, started or not
    # Σ batch-*/mid-* requests of the containers and sidecars (upstream's GetRequestTypeAndValueFromPod): cpu in
    # milli-cores, memory in bytes; keyed by the resource name (wire.BATCH_CPU, ...), absent when 0
    extended_requests: Mapping[str, int] = field(default_factory=dict)
    # decoded annotations of this version of the pod (see decoded): not part of what the pod is
    _decoded: dict[Callable[[Pod], object], object] = field(default_factory=dict, init=False, repr=False,
                                                            compare=False)

    def decoded(self, decoder: Callable[[Pod], T]) -> T:
        """``decoder(self)``, decoded once for this version of the pod.

        A Pod is one version of a pod: the pod sources make a new object when the pod changes and keep the old one
        while it does not, so the strategies that read an annotation every cycle, and the NRI hooks between
        cycles, share one decoding of it. A refused annotation's DecodeError is kept too and raised again each
        time (the caller logs it once and drops that part of the pod)."""
        memo = self._decoded
        try:
            found = memo[decoder]
        except KeyError:
            try:
                found = decoder(self)
            except DecodeError as e:
                found = e
            memo[decoder] = found
        if isinstance(found, DecodeError):
            raise found.with_traceback(None)
        return found  # type: ignore[return-value]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def raw_qos_class(self) -> str:
        value = self.labels.get(wire.LABEL_QOS_CLASS, "")
        return value if value in wire.QOS_CLASSES else wire.QOS_NONE

    @property
    def qos_class(self) -> str:
        """Koordinator class with default (LSR/LS/BE from the Kubernetes class)."""
        return self.raw_qos_class or _KUBE_TO_KOORD[self.kube_qos]

    @property
    def priority_class(self) -> str:
        label = self.labels.get(wire.LABEL_PRIORITY_CLASS)
        if label is not None:
            known = {c for c, _, _ in wire.PRIORITY_RANGES}
            if label in known:
                return label
        elif self.priority is not None:
            for cls, lo, hi in wire.PRIORITY_RANGES:
                if lo <= self.priority <= hi:
                    return cls
        qos = self.qos_class
        if qos in (wire.QOS_SYSTEM, wire.QOS_LSE, wire.QOS_LSR, wire.QOS_LS):
            return wire.PRIORITY_PROD
        return wire.PRIORITY_BATCH if qos == wire.QOS_BE else wire.PRIORITY_NONE


def kube_qos_of(spec: Mapping[str, Any]) -> KubeQOS:
    """The kubelet's QoS rule over cpu/memory requests and limits (used when status.qosClass is empty)."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        limits = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        any_set = any_set or bool(requests) or bool(limits)
        if set(limits) != {"cpu", "memory"}:
            guaranteed = False
            continue
        for k, v in requests.items():
            if parse_quantity(v) != parse_quantity(limits[k]):
                guaranteed = False
    if not any_set:
        return KubeQOS.BESTEFFORT
    return KubeQOS.GUARANTEED if guaranteed else KubeQOS.BURSTABLE


def _batch_cpu(spec: Mapping[str, Any]) -> int:
    return sum(_extended((c.get("resources") or {}).get("requests") or {}, wire.BATCH_CPU, wire.DEPRECATED_BATCH_CPU)
               for c in spec.get("containers") or [])


def pod_requests(spec: Mapping[str, Any]) -> tuple[int, int]:
    """(cpu milli, memory bytes) the scheduler accounts for the pod, as Kubernetes' PodRequests does: the sum
    over containers, at least each init container's request (they run one at a time), plus ``spec.overhead``."""
    def request(c: Mapping[str, Any], name: str) -> Any:
        return ((c.get("resources") or {}).get("requests") or {}).get(name, 0)

    out = []
    for name in ("cpu", "memory"):
        total = sum(parse_quantity(request(c, name)) for c in spec.get("containers") or [])
        for init in spec.get("initContainers") or []:
            total = max(total, parse_quantity(request(init, name)))
        total += parse_quantity((spec.get("overhead") or {}).get(name, 0))
        out.append(math.ceil(total * 1000) if name == "cpu" else math.ceil(total))
    return out[0], out[1]


def extended_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Σ of the batch-* and mid-* requests (a request defaults to its limit) over the containers and the sidecars
    (restartable init containers run alongside them), as upstream's eviction accounting sums them."""
    containers = list(spec.get("containers") or [])
    containers += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    out: dict[str, int] = {}
    for c in containers:
        r = container_resources(c)
        for name, value in ((wire.BATCH_CPU, r.batch_cpu_request), (wire.BATCH_MEMORY, r.batch_memory_request),
                            (wire.MID_CPU, r.mid_cpu_request), (wire.MID_MEMORY, r.mid_memory_request)):
            if value > 0:
                out[name] = out.get(name, 0) + value
    return out


def _extended(section: Mapping[str, Any], name: str, deprecated: str = "") -> int:
    raw = section.get(name, section.get(deprecated) if deprecated else None)
    return math.ceil(parse_quantity(raw)) if raw is not None else 0


def container_resources(c: Mapping[str, Any]) -> Resources:
    """Requests/limits of one spec container (a missing request defaults to the limit, as the API server does)."""
    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}

    def cpu(section: Mapping[str, Any]) -> int:
        return math.ceil(parse_quantity(section["cpu"]) * 1000) if "cpu" in section else 0

    def mem(section: Mapping[str, Any]) -> int:
        return math.ceil(parse_quantity(section["memory"])) if "memory" in section else 0

    cpu_limit, memory_limit = cpu(lim), mem(lim)
    batch_cpu_limit = _extended(lim, wire.BATCH_CPU, wire.DEPRECATED_BATCH_CPU)
    batch_memory_limit = _extended(lim, wire.BATCH_MEMORY, wire.DEPRECATED_BATCH_MEMORY)
    mid_cpu_limit, mid_memory_limit = _extended(lim, wire.MID_CPU), _extended(lim, wire.MID_MEMORY)
    return Resources(cpu_request=cpu(req) if "cpu" in req else cpu_limit, cpu_limit=cpu_limit,
                     memory_request=mem(req) if "memory" in req else memory_limit, memory_limit=memory_limit,
                     batch_cpu_request=_extended(req, wire.BATCH_CPU, wire.DEPRECATED_BATCH_CPU) or batch_cpu_limit,
                     batch_cpu_limit=batch_cpu_limit,
                     batch_memory_request=_extended(req, wire.BATCH_MEMORY, wire.DEPRECATED_BATCH_MEMORY)
                     or batch_memory_limit,
                     batch_memory_limit=batch_memory_limit,
                     mid_cpu_request=_extended(req, wire.MID_CPU) or mid_cpu_limit,
                     mid_cpu_limit=mid_cpu_limit,
                     mid_memory_request=_extended(req, wire.MID_MEMORY) or mid_memory_limit,
                     mid_memory_limit=mid_memory_limit)


@decoder(wire.ANNOTATION_EXTENDED_RESOURCE_SPEC)
def extended_resource_spec(annotations: Mapping[str, str]) -> dict[str, Resources]:
    """Per-container resources from ``node.koordinator.sh/extended-resource-spec`` ({} when absent).

    The runtime hooks see no pod spec, so koord-manager's webhook copies the containers' extended resources here.
    DecodeError names what is wrong; the caller logs it and leaves the batch settings alone.
    """
    raw = annotations.get(wire.ANNOTATION_EXTENDED_RESOURCE_SPEC)
    return dict(_extended_resource_spec(raw)) if raw else {}


@decode.per_text()
def _extended_resource_spec(raw: str) -> tuple[tuple[str, Resources], ...]:
    key = wire.ANNOTATION_EXTENDED_RESOURCE_SPEC
    doc = decode.json_object(key, raw)
    containers = decode.obj(key, doc.get("containers"), "containers", null=False)
    out = {}
    for name, spec in containers.items():
        where = f"containers[{name}]"
        spec = decode.obj(key, spec, where, null=False)
        for section in ("requests", "limits"):
            decode.obj(key, spec.get(section) or None, f"{where}.{section}")
        try:
            out[name] = container_resources({"resources": spec})
        except ValueError as e:
            raise decode.DecodeError(key, f"{where}: {e}") from None
    return tuple(out.items())


@dataclass(frozen=True, slots=True)
class ResourceStatus:
    """The scheduler's ``scheduling.koordinator.sh/resource-status`` annotation (koord-scheduler's
    ``pkg/scheduler/plugins/nodenumaresource``: ``ResourceStatus``), as enforcement needs it."""
    cpuset: str = ""                      # the CPUs it pinned, in the kernel's list format ("" for none)
    cpus: tuple[int, ...] = ()
    numa_nodes: tuple[int, ...] = ()      # NUMA nodes holding a CPU allocation (NUMA-aware share pools)
    pinned: bool = False                  # a cpuset or any NUMA node resources at all


NOT_PINNED = ResourceStatus()


@decoder(wire.ANNOTATION_RESOURCE_STATUS)
def resource_status(pod: Pod) -> ResourceStatus:
    """The pod's resource-status (NOT_PINNED when absent); DecodeError names what is wrong, and the caller treats
    the pod as not pinned. Read it through ``pod.decoded(resource_status)``: once per pod version."""
    raw = pod.annotations.get(wire.ANNOTATION_RESOURCE_STATUS)
    return _resource_status(raw) if raw else NOT_PINNED


@decode.per_text()
def _resource_status(raw: str) -> ResourceStatus:
    key = wire.ANNOTATION_RESOURCE_STATUS
    doc = decode.json_object(key, raw)
    cpus = tuple(sorted(set(decode.cpu_list(key, doc.get("cpuset") or "", "cpuset"))))
    nodes = []
    entries = decode.array(key, doc.get("numaNodeResources") or None, "numaNodeResources", max_items=MAX_NUMA_NODES)
    for i, entry in enumerate(entries):
        where = f"numaNodeResources[{i}]"
        entry = decode.obj(key, entry, where, null=False)
        node = decode.integer(key, entry.get("node"), f"{where}.node")
        res = decode.obj(key, entry.get("resources") or None, f"{where}.resources")
        if any(decode.quantity(key, res.get(k) or 0, f"{where}.resources[{k}]") > 0 for k in ("cpu", wire.BATCH_CPU)):
            nodes.append(node)
    return ResourceStatus(format_cpu_list(cpus) if cpus else "", cpus, tuple(nodes), bool(cpus) or bool(entries))


def spec_containers(spec: Mapping[str, Any]) -> tuple[SpecContainer, ...]:
    """The containers the kubelet reports for a pod, in its order, with what each asks of each device type."""
    def devices(c: Mapping[str, Any]) -> dict[str, Fraction]:
        res = c.get("resources") or {}
        merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        out = {}
        for name, qty in merged.items():
            name = resource_name(str(name))
            if name in wire.DEVICE_RESOURCES:
                out[name] = parse_quantity(qty)
        return out

    sidecars = [SpecContainer(str(c.get("name", "")), True, MappingProxyType(devices(c)))
                for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return tuple(sidecars) + tuple(SpecContainer(str(c.get("name", "")), False, MappingProxyType(devices(c)))
                                   for c in spec.get("containers") or [])


def _timestamp(raw: Any, what: str) -> float:
    if not raw:
        return 0.0
    try:
        return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"{what} {raw!r} is not an RFC 3339 time") from None


def _str_map(value: Any, what: str) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{what} must be a map of strings")
    return MappingProxyType(dict(value))


def pod_from_k8s(obj: Any) -> Pod:
    """Parse a Pod object (Kubernetes JSON); ValueError names the pod and the field that is wrong."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a Pod object (mapping), got {type(obj).__name__}")
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"metadata is not a mapping: {type(meta).__name__}")
    name = meta.get("name") or "?"
    namespace = meta.get("namespace") or "default"
    # only strings in the message: str() of an arbitrary value can fail (RecursionError) or cost anything
    where = f"pod {namespace if isinstance(namespace, str) else '?'}/{name if isinstance(name, str) else '?'}"
    try:
        if not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ValueError("metadata.name is required")
        if not isinstance(namespace, str):
            raise ValueError("metadata.namespace must be a string")
        uid = check_pod_uid(str(meta.get("uid") or ""))
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        qos_raw = status.get("qosClass")
        kube_qos = KubeQOS(qos_raw) if qos_raw else kube_qos_of(spec)
        priority = spec.get("priority")
        if priority is not None and not isinstance(priority, int):
            raise ValueError(f"spec.priority {priority!r} is not an integer")
        cpu_request, memory_request = pod_requests(spec)
        phase = str(status.get("phase") or "")
        resources = {str(c.get("name", "")): container_resources(c) for c in spec.get("containers") or []}
        containers = []
        for cs in status.get("containerStatuses") or []:
            raw_id = cs.get("containerID") or ""
            runtime, cid = parse_container_id(raw_id) if raw_id else ("", "")
            name = str(cs.get("name", ""))
            containers.append(Container(name=name, runtime=runtime, id=cid,
                                        resources=resources.get(name, NO_RESOURCES)))
        return Pod(uid=uid, name=meta["name"], namespace=namespace, kube_qos=kube_qos,
                   labels=_str_map(meta.get("labels"), "metadata.labels"),
                   annotations=_str_map(meta.get("annotations"), "metadata.annotations"),
                   priority=priority, phase=phase,
                   containers=tuple(containers), batch_cpu_request_milli=_batch_cpu(spec),
                   cpu_request_milli=cpu_request, memory_request_bytes=memory_request,
                   created=_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
                   terminating=bool(meta.get("deletionTimestamp")) or phase in ("Succeeded", "Failed"),
                   pod_ip=str(status.get("podIP") or ""), host_network=bool(spec.get("hostNetwork")),
                   spec_containers=spec_containers(spec),
                   extended_requests=MappingProxyType(extended_requests(spec)))
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"{where}: {e}") from None
    except RecursionError:             # str()/repr() of a value nested ~1,000 levels (json.loads still gives those)
        raise ValueError(f"{where}: a field holds a value nested too deep to read") from None
