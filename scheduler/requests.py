"""What a pod asks of a node's devices: its summed requests, the per-type device request koord-scheduler derives
from them, and the pod's DeviceShare annotations (hints, joint allocation, partition spec).

Facts: koord-scheduler's ``pkg/scheduler/plugins/deviceshare/utils.go`` (``ValidateDeviceRequest``,
``ConvertDeviceRequest``: the allowed combinations), ``devicehandler_gpu.go: calcDesiredRequestsAndCountForGPU`` (GPU
count and per-card request), ``devicehandler_default.go`` (RDMA/FPGA counts) and ``apis/extension/device_share.go`` (the
hint, joint-allocate and partition-spec annotations). Everything here is pure: a pod in, a :class:`PodDeviceRequest` or
a :class:`RequestError` out. Annotations come from tenants and are decoded through :mod:`koordlet.states.decode`
(bounded); a bad one makes only this pod unschedulable, with a reason that names the annotation. """

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from koordlet.base import wire
from koordlet.base.quantity import parse_quantity
from koordlet.states import decode
from koordlet.states.decode import DecodeError
from koordlet.states.deviceallocation import resource_name

GPU, RDMA, FPGA = wire.DEVICE_GPU, wire.DEVICE_RDMA, wire.DEVICE_FPGA
NPU_CORE, NPU_CPU, NPU_DVPP = "huawei.com/npu-core", "huawei.com/npu-cpu", "huawei.com/npu-dvpp"
CORE, MEMORY, RATIO = wire.RESOURCE_GPU_CORE, wire.RESOURCE_GPU_MEMORY, wire.RESOURCE_GPU_MEMORY_RATIO
SHARED, KOORD_GPU = wire.RESOURCE_GPU_SHARED, wire.RESOURCE_GPU

ANNOTATION_HINT = "scheduling.koordinator.sh/device-allocate-hint"
ANNOTATION_JOINT = "scheduling.koordinator.sh/device-joint-allocate"
ANNOTATION_PARTITION_SPEC = "scheduling.koordinator.sh/gpu-partition-spec"

APPLY_FOR_ALL, REQUESTS_AS_COUNT = "ApplyForAll", "RequestsAsCount"
EXCLUSIVE_DEVICE, EXCLUSIVE_PCIE = "DeviceLevel", "PCIeLevel"
SAME_PCIE = "SamePCIe"
SCOPE_LEVELS = {"Device": 4, "PCIe": 3, "NUMANode": 2, "Node": 1}   # no Socket scope upstream
RESTRICTED, BEST_EFFORT = "Restricted", "BestEffort"

# the device types and the resource names of each (upstream's DeviceResourceNames), after the deprecated rename
TYPE_RESOURCES: dict[str, tuple[str, ...]] = {
    GPU: (*wire.WHOLE_GPU_RESOURCES, KOORD_GPU, SHARED, CORE, MEMORY, RATIO, NPU_CORE, NPU_CPU, NPU_DVPP),
    RDMA: (wire.RESOURCE_RDMA,),
    FPGA: (wire.RESOURCE_FPGA,),
}


class RequestError(ValueError):
    """The pod's device request can never be met as written (kube's UnschedulableAndUnresolvable)."""


# --- the pod's summed requests -------------------------------------------------------------------------------------

def _container_requests(c: Mapping[str, Any]) -> dict[str, Fraction]:
    """A container's requests, a missing request taking its limit (the API server's defaulting)."""
    res = c.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {resource_name(str(k)): parse_quantity(v) for k, v in merged.items()}


def _add(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, Fraction(0)) + v


def containers_total(spec: Mapping[str, Any],
                     of: Callable[[int, str, Mapping[str, Any]], Mapping[str, Fraction]]) -> dict[str, Fraction]:
    """Kubernetes' PodRequests / PodLimits over the containers, for the amounts ``of(i, section, container)`` gives
    (``section`` "containers" or "initContainers"): app containers add up; restartable init containers (sidecars)
    run beside them and add up too; each plain init container runs alone beside the sidecars started before it,
    so the pod needs at least that. Overhead and pod-level resources are the caller's."""
    total: dict[str, Fraction] = {}
    for i, c in enumerate(spec.get("containers") or []):
        _add(total, of(i, "containers", c))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for i, c in enumerate(spec.get("initContainers") or []):
        own = of(i, "initContainers", c)
        if c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            step = dict(sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
        for k, v in step.items():
            init_peak[k] = max(init_peak.get(k, Fraction(0)), v)
    for k, v in init_peak.items():
        total[k] = max(total.get(k, Fraction(0)), v)
    return total


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """Every resource the pod requests, summed as Kubernetes' ``PodRequests`` does (:func:`containers_total`, a
    missing request taking its limit), plus ``overhead``; zero values dropped. ValueError for a quantity that does
    not parse."""
    total = containers_total(spec, lambda _i, _section, c: _container_requests(c))
    _add(total, {resource_name(str(k)): parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    return {k: v for k, v in total.items() if v != 0}


def value(q: Fraction) -> int:
    """Kubernetes' ``Quantity.Value()``: rounded up to an integer."""
    return math.ceil(q)


# --- the device request --------------------------------------------------------------------------------------------

def _percentage_ok(v: int) -> bool:
    """At most one card (<= 100) or whole cards (a multiple of 100): upstream's ValidatePercentageResource."""
    return v <= 100 or v % 100 == 0


def _shared_ok(r: Mapping[str, int]) -> bool:
    shared = r.get(SHARED)
    if not shared:
        return False
    return all(name not in r or (r[name] % shared == 0 and r[name] // shared <= 100) for name in (CORE, RATIO))


def _npu_shared_ok(r: Mapping[str, int]) -> bool:
    return SHARED in r and r[SHARED] <= 1 and r.get(NPU_DVPP, 0) <= 100


def _percentages_ok(r: Mapping[str, int]) -> bool:
    return all(_percentage_ok(r[name]) for name in (CORE, RATIO) if name in r)


# the allowed combinations of resource names per type (upstream's ValidDeviceResourceCombinations), each with its
# validity check and the normalized request it turns into
_WHOLE = frozenset(wire.WHOLE_GPU_RESOURCES)
Check = Callable[[Mapping[str, int]], bool]
Normalize = Callable[[Mapping[str, int]], dict[str, int]]


def _always(r: Mapping[str, int]) -> bool:
    return True


def _cards(name: str) -> Normalize:
    """A percentage of one card (koordinator.sh/gpu) or whole cards (nvidia.com/gpu: × 100) as core + ratio."""
    scale = 1 if name == KOORD_GPU else 100
    return lambda r: {CORE: r[name] * scale, RATIO: r[name] * scale}


_COMBINATIONS: dict[frozenset[str], tuple[Check, Normalize]] = {
    **{frozenset({n}): (_always, _cards(n)) for n in (*_WHOLE, KOORD_GPU)},
    frozenset({MEMORY}): (_percentages_ok, dict),
    frozenset({RATIO}): (_percentages_ok, dict),
    frozenset({CORE, MEMORY}): (_percentages_ok, dict),
    frozenset({CORE, RATIO}): (_percentages_ok, dict),
    frozenset({NPU_CORE, RATIO}): (_percentages_ok, dict),
    frozenset({SHARED, MEMORY}): (_shared_ok, dict),
    frozenset({SHARED, RATIO}): (_shared_ok, dict),
    frozenset({SHARED, CORE, MEMORY}): (_shared_ok, dict),
    frozenset({SHARED, CORE, RATIO}): (_shared_ok, dict),
    frozenset({SHARED, NPU_CORE, NPU_CPU, MEMORY}): (_npu_shared_ok, dict),
    frozenset({SHARED, NPU_CORE, NPU_CPU, NPU_DVPP, MEMORY}): (_npu_shared_ok, dict),
    frozenset({wire.RESOURCE_RDMA}): (_always, dict),
    frozenset({wire.RESOURCE_FPGA}): (_always, dict),
}
_UNIT_CHECKED = (KOORD_GPU, wire.RESOURCE_RDMA, wire.RESOURCE_FPGA)   # upstream's DeviceResourceValidators


def normalize(dtype: str, requested: Mapping[str, int]) -> dict[str, int]:
    """The normalized per-pod request of one device type; RequestError worded as upstream's."""
    for name in _UNIT_CHECKED:
        if name in requested and not _percentage_ok(requested[name]):
            raise RequestError(f"invalid resource unit {name}: {requested[name]}")
    combination = _COMBINATIONS.get(frozenset(requested))
    if combination is None or not combination[0](requested):
        raise RequestError(f"invalid resource device requests: [{' '.join(sorted(requested))}]")
    return combination[1](requested)


@dataclass(frozen=True)
class GpuRequirements:
    """The per-card request and the card count (upstream's calcDesiredRequestsAndCountForGPU)."""

    per_gpu: Mapping[str, int]
    count: int
    shared: bool              # a fraction of one card: the device scorer picks the card


def gpu_requirements(request: Mapping[str, int]) -> GpuRequirements:
    count = 1
    if request.get(SHARED, 0) > 0:
        count = request[SHARED]
    elif request.get(RATIO, 0) > 100 and request[RATIO] % 100 == 0:
        count = request[RATIO] // 100
    per: dict[str, int] = {}
    for name in (CORE, NPU_CORE, NPU_CPU, NPU_DVPP):
        if name in request:
            per[name] = request[name] // count
    shared = False
    if RATIO in request:
        per[RATIO] = request[RATIO] // count
        shared = per[RATIO] < 100
    elif MEMORY in request:
        per[MEMORY] = request[MEMORY] // count
        shared = True
    return GpuRequirements(per, count, shared)


# --- the pod's DeviceShare annotations -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: every matchLabels pair and every expression must hold."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for key, op, values in self.expressions:
            present = key in labels
            if (op == "In" and (not present or labels[key] not in values)) \
                    or (op == "NotIn" and present and labels[key] in values) \
                    or (op == "Exists" and not present) or (op == "DoesNotExist" and present):
                return False
        return True


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _selector(key: str, raw: Any, where: str) -> LabelSelector | None:
    if raw is None:
        return None
    doc = decode.obj(key, raw, where)
    labels = {str(k): decode.string(key, v, f"{where}.matchLabels[{k}]")
              for k, v in decode.obj(key, doc.get("matchLabels"), f"{where}.matchLabels").items()}
    expressions = []
    for i, e in enumerate(decode.array(key, doc.get("matchExpressions"), f"{where}.matchExpressions", max_items=64)):
        at = f"{where}.matchExpressions[{i}]"
        e = decode.obj(key, e, at, null=False)
        op = decode.string(key, e.get("operator"), f"{at}.operator")
        if op not in _OPERATORS:
            raise DecodeError(key, f"{at}.operator: {op!r:.40} is not one of {', '.join(_OPERATORS)}")
        values = frozenset(decode.string(key, v, f"{at}.values")
                           for v in decode.array(key, e.get("values"), f"{at}.values", max_items=256))
        if (op in ("In", "NotIn")) != bool(values):
            raise DecodeError(key, f"{at}.values: {op} takes {'a non-empty list' if op in ('In', 'NotIn') else 'none'}")
        expressions.append((decode.string(key, e.get("key"), f"{at}.key"), op, values))
    return LabelSelector(labels, tuple(expressions))


@dataclass(frozen=True)
class DeviceHint:
    selector: LabelSelector | None = None
    vf_selector: LabelSelector | None = None        # present (even empty) = the pod must get a VF
    allocate_strategy: str = ""
    required_scope: str = ""
    exclusive_policy: str = ""

    @property
    def needs_vf(self) -> bool:
        return self.vf_selector is not None


def _hints(raw: str) -> dict[str, DeviceHint]:
    key = ANNOTATION_HINT
    out = {}
    for dtype, h in decode.json_object(key, raw).items():
        h = decode.obj(key, h, dtype)
        strategy = decode.string(key, h.get("allocateStrategy", ""), f"{dtype}.allocateStrategy")
        scope = decode.string(key, h.get("requiredTopologyScope", ""), f"{dtype}.requiredTopologyScope")
        exclusive = decode.string(key, h.get("exclusivePolicy", ""), f"{dtype}.exclusivePolicy")
        if strategy not in ("", APPLY_FOR_ALL, REQUESTS_AS_COUNT):
            raise DecodeError(key, f"{dtype}.allocateStrategy: unknown {strategy!r:.40}")
        if scope and scope not in SCOPE_LEVELS:
            raise DecodeError(key, f"{dtype}.requiredTopologyScope: unknown {scope!r:.40}")
        vf_raw = h.get("vfSelector")
        vf = _selector(key, vf_raw, f"{dtype}.vfSelector") if vf_raw is not None else None
        if vf_raw is not None and vf is None:
            vf = LabelSelector()
        out[str(dtype)] = DeviceHint(_selector(key, h.get("selector"), f"{dtype}.selector"), vf,
                                     strategy, scope, exclusive)
    return out


@dataclass(frozen=True)
class JointAllocate:
    device_types: tuple[str, ...]
    required_scope: str = ""


def _joint(raw: str) -> JointAllocate:
    key = ANNOTATION_JOINT
    doc = decode.json_object(key, raw)
    types = tuple(decode.string(key, t, "deviceTypes")
                  for t in decode.array(key, doc.get("deviceTypes"), "deviceTypes", max_items=8))
    scope = decode.string(key, doc.get("requiredScope", ""), "requiredScope")
    if scope not in ("", SAME_PCIE):
        raise DecodeError(key, f"requiredScope: unknown {scope!r:.40} (only {SAME_PCIE})")
    return JointAllocate(types, scope)


@dataclass(frozen=True)
class PartitionSpec:
    restricted: bool
    ring_bus_bandwidth: Fraction | None


def _partition_spec(raw: str) -> PartitionSpec:
    key = ANNOTATION_PARTITION_SPEC
    doc = decode.json_object(key, raw)
    policy = decode.string(key, doc.get("allocatePolicy", ""), "allocatePolicy")
    if policy not in ("", RESTRICTED, BEST_EFFORT):
        raise DecodeError(key, f"allocatePolicy: unknown {policy!r:.40}")
    bw = doc.get("ringBusBandwidth")
    return PartitionSpec(policy == RESTRICTED,
                         decode.quantity(key, bw, "ringBusBandwidth") if bw is not None else None)


# --- everything together -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodDeviceRequest:
    """A pod's device request as the allocator takes it; ``requests`` is empty when it asks for no device."""

    requests: Mapping[str, Mapping[str, int]]        # device type -> normalized per-pod request
    gpu: GpuRequirements | None = None
    hints: Mapping[str, DeviceHint] = field(default_factory=dict)
    joint: JointAllocate | None = None
    partition: PartitionSpec | None = None

    def __bool__(self) -> bool:
        return bool(self.requests)

    def key(self) -> Hashable | None:
        """What the request's allocation outcome on a node depends on, hashable; None when it has annotations
        (hints, joint allocation, partition spec), which are not worth keying."""
        if self.hints or self.joint or self.partition:
            return None
        return tuple(sorted((t, tuple(sorted(r.items()))) for t, r in self.requests.items()))


_IDENTITY = frozenset(("name", "generateName", "uid", "resourceVersion", "creationTimestamp", "managedFields"))
_KOORDINATOR_DOMAIN = "koordinator.sh"


def is_koordinator_key(key: str) -> bool:
    """A label or annotation key in Koordinator's domain or one of its subdomains (``koordinator.sh/…``,
    ``scheduling.koordinator.sh/…``): the only pod labels and annotations the placement decisions read."""
    prefix, slash, _ = key.partition("/")
    return bool(slash) and (prefix == _KOORDINATOR_DOMAIN or prefix.endswith("." + _KOORDINATOR_DOMAIN))


def _koordinator_only(keyed: Any) -> Any:
    return {k: v for k, v in keyed.items() if isinstance(k, str) and is_koordinator_key(k)} \
        if isinstance(keyed, Mapping) else keyed


def _owner_kinds(refs: Any) -> Any:
    return [{"kind": r.get("kind"), "controller": r.get("controller")} if isinstance(r, Mapping) else r
            for r in refs] if isinstance(refs, list) else refs


def pod_key(pod: Mapping[str, Any]) -> str:
    """The pod as the placement decisions read it, as one string, so that the pods of one workload share the
    answers a node gives them, and so do those of workloads alike. Left out: what only tells pods apart (name,
    uid, resourceVersion, creation time), the status conditions (a pending pod's change at every attempt), the
    labels and annotations outside Koordinator's domain (a Job's controller-uid and job-name, a ReplicaSet's
    pod-template-hash, an indexed Job's completion index: no decision reads them, :func:`is_koordinator_key`) and
    of the owners all but their kinds (LoadAware lets a DaemonSet's pods pass)."""
    meta: dict[str, Any] = {k: v for k, v in (pod.get("metadata") or {}).items() if k not in _IDENTITY}
    for field_name, narrow in (("labels", _koordinator_only), ("annotations", _koordinator_only),
                               ("ownerReferences", _owner_kinds)):
        if field_name in meta:
            meta[field_name] = narrow(meta[field_name])
    status = {k: v for k, v in (pod.get("status") or {}).items() if k != "conditions"}
    return json.dumps({**pod, "metadata": meta, "status": status}, sort_keys=True, separators=(",", ":"))


def pod_device_request(pod: Mapping[str, Any]) -> PodDeviceRequest:
    """The pod's device request; RequestError (unresolvable on every node) for what can never be allocated."""
    spec = pod.get("spec") or {}
    try:
        summed = pod_requests(spec)
    except ValueError as e:
        raise RequestError(f"invalid resource quantity: {e}") from None
    requests: dict[str, dict[str, int]] = {}
    for dtype, names in TYPE_RESOURCES.items():
        of_type = {n: value(summed[n]) for n in names if n in summed}
        if of_type:
            requests[dtype] = normalize(dtype, of_type)
    if not requests:
        return PodDeviceRequest({})
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        hints = _hints(annotations[ANNOTATION_HINT]) if ANNOTATION_HINT in annotations else {}
        joint = _joint(annotations[ANNOTATION_JOINT]) if ANNOTATION_JOINT in annotations else None
        partition = (_partition_spec(annotations[ANNOTATION_PARTITION_SPEC])
                     if ANNOTATION_PARTITION_SPEC in annotations else None)
    except DecodeError as e:
        raise RequestError(str(e)) from None
    if joint is not None:
        # types asked for ApplyForAll or not requested at all take no part; the first one left is the primary
        joint = JointAllocate(tuple(t for t in joint.device_types if t in requests
                                    and (t not in hints or hints[t].allocate_strategy != APPLY_FOR_ALL)),
                              joint.required_scope)
    gpu = gpu_requirements(requests[GPU]) if GPU in requests else None
    # a device-allocated annotation the pod carries before it is scheduled is not honoured: koord-scheduler's
    # PreFilter drops it too (outside its own scheduling hints), so a pod copied from a bound one is placed afresh
    return PodDeviceRequest(requests, gpu, hints, joint, partition)
