"""Who an eviction may take, and in which order: the pod metadata the eviction gates read and the victim lists of
each gate (the behaviour is described in :mod:`koordlet.qos.evict`).

Facts: upstream ``apis/extension/constants.go`` and ``priority_utils.go`` (the eviction metadata, priority
defaults), ``pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict.go: cpuEvictor`` and
``memoryevict/memory_evict.go: memoryEvictor`` (the victim orders).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder

if TYPE_CHECKING:
    from koordlet.states.informer import PodMeta
    from koordlet.states.pod import Pod

# Wire names (the feature gates of upstream pkg/features/koordlet_features.go, also what a pod's
# koordinator.sh/eviction-policy lists); not yet in koordlet/base/wire.py.

BE_CPU_EVICT, CPU_EVICT, CPU_ALLOCATABLE_EVICT = "BECPUEvict", "CPUEvict", "CPUAllocatableEvict"
BE_MEMORY_EVICT, MEMORY_EVICT, MEMORY_ALLOCATABLE_EVICT = "BEMemoryEvict", "MemoryEvict", "MemoryAllocatableEvict"
PRIORITY_DEFAULTS = {wire.PRIORITY_PROD: 9500, wire.PRIORITY_MID: 7500, wire.PRIORITY_BATCH: 5500,
                     wire.PRIORITY_FREE: 3500}
RES_CPU, RES_MEMORY, RES_BATCH_CPU = "cpu", "memory", wire.BATCH_CPU

_ATOI = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(1 << 31), (1 << 31) - 1)


# --------------------------------------------------------------------------------------------------
# pod metadata (upstream apis/extension/constants.go, priority_utils.go)
# --------------------------------------------------------------------------------------------------

@decoder(wire.ANNOTATION_EVICTION_POLICY)
def eviction_policy_allows(pod: Pod, gate: str) -> bool:
    """Whether ``gate`` may evict the pod; raises DecodeError when the annotation does not parse (the caller
    logs it and treats the pod as never evictable)."""
    key = wire.ANNOTATION_EVICTION_POLICY
    raw = pod.annotations.get(key)
    if raw is None:
        return True
    policies = decode.loads(key, raw)
    if policies is None:                       # Go: unmarshalling null gives an empty list
        return False
    if not isinstance(policies, list) or not all(isinstance(p, str) for p in policies):
        raise DecodeError(key, "expected a JSON list of feature gate names")
    return gate in policies


@decoder(wire.ANNOTATION_EVICTION_PRIORITY)
def eviction_priority(pod: Pod) -> int:
    """``koordinator.sh/eviction-priority`` (int32, lower goes first); 0 when absent. DecodeError when bad."""
    key = wire.ANNOTATION_EVICTION_PRIORITY
    raw = pod.annotations.get(key)
    if raw is None:
        return 0
    if len(raw) > 11 or not _ATOI.fullmatch(raw) or not _INT32[0] <= int(raw) <= _INT32[1]:
        raise DecodeError(key, f"{raw!r:.40} is not an int32")
    return int(raw)


def label_priority(pod: Pod, default: int) -> int:
    """``koordinator.sh/priority`` parsed as Go's Atoi; ``default`` when absent or not a number."""
    raw = pod.labels.get(wire.LABEL_POD_PRIORITY)
    if raw is None or len(raw) > 20 or not _ATOI.fullmatch(raw):
        return default
    value = int(raw)
    return value if -(1 << 63) <= value < (1 << 63) else default


def priority_value(pod: Pod) -> int:
    """A non-zero spec.priority, else the default value of the pod's priority class (with QoS default)."""
    if pod.priority:
        return pod.priority
    return PRIORITY_DEFAULTS.get(pod.priority_class, 0)


def is_active(pod: Pod) -> bool:
    """Pending or Running (upstream's IsPodInactive, negated)."""
    return pod.phase in ("Pending", "Running")


def pod_request(pod: Pod, resource: str) -> tuple[str, int]:
    """(resource name, request) as upstream's GetRequestTypeAndValueFromPod: batch-* for koord-batch pods, mid-*
    for koord-mid (Σ over containers and sidecars), native otherwise (the scheduler's pod request; cpu milli,
    memory bytes)."""
    cls = pod.priority_class
    if cls in (wire.PRIORITY_BATCH, wire.PRIORITY_MID):
        batch = cls == wire.PRIORITY_BATCH
        name = (wire.BATCH_CPU if batch else wire.MID_CPU) if resource == RES_CPU else \
            (wire.BATCH_MEMORY if batch else wire.MID_MEMORY)
        return name, pod.extended_requests.get(name, 0)
    return resource, pod.cpu_request_milli if resource == RES_CPU else pod.memory_request_bytes


# --------------------------------------------------------------------------------------------------
# victims
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodEvictInfo:
    meta: PodMeta
    milli_cpu_request: int = 0
    milli_cpu_used: int = 0
    cpu_usage: float = 0.0          # used / request (BE CPU)
    memory_request: int = 0
    memory_used: int = 0
    priority: int = 0
    label_priority: int = 0
    eviction_priority: int = 0

    @property
    def pod(self) -> Pod:
        return self.meta.pod


def _cmp(less: Callable[[PodEvictInfo, PodEvictInfo], bool]) -> Callable[[PodEvictInfo, PodEvictInfo], int]:
    return lambda a, b: -1 if less(a, b) else (1 if less(b, a) else 0)


def _allowed(meta: PodMeta, gate: str, bad: LogOnce | None) -> bool:
    try:
        allowed = eviction_policy_allows(meta.pod, gate)
    except DecodeError as e:
        if bad is not None:
            bad(f"policy/{meta.pod.uid}", "pod %s annotation %s; the pod is never evicted", meta.pod.key, e)
        return False
    return allowed


def be_cpu_victims(pods: Iterable[PodMeta], used_milli: Mapping[str, int], gate: str = BE_CPU_EVICT,
                   bad: LogOnce | None = None) -> list[PodEvictInfo]:
    """Raw-BE pods the gate may evict: spec.priority ascending, then usage/request descending (a pod without
    spec.priority compares by usage only, as upstream)."""
    infos = []
    for meta in pods:
        if meta.pod.raw_qos_class != wire.QOS_BE or not _allowed(meta, gate, bad):
            continue
        used = used_milli.get(meta.pod.uid, 0)
        request = meta.pod.batch_cpu_request_milli
        infos.append(PodEvictInfo(meta, milli_cpu_request=request, milli_cpu_used=used,
                                  cpu_usage=used / request if request > 0 else 0.0))

    def less(a: PodEvictInfo, b: PodEvictInfo) -> bool:
        pa, pb = a.pod.priority, b.pod.priority
        if pa is None or pb is None or pa == pb:
            return a.cpu_usage > b.cpu_usage
        return pa < pb

    return sorted(infos, key=functools.cmp_to_key(_cmp(less)))


def be_memory_victims(pods: Iterable[PodMeta], used_bytes: Mapping[str, int], gate: str = BE_MEMORY_EVICT,
                      bad: LogOnce | None = None) -> list[PodEvictInfo]:
    """Raw-BE pods the gate may evict: spec.priority ascending (when both set), then usage descending; pods
    without a sample after those with one, by name descending."""
    infos = [PodEvictInfo(m, memory_used=used_bytes.get(m.pod.uid, 0)) for m in pods
             if m.pod.raw_qos_class == wire.QOS_BE and _allowed(m, gate, bad)]

    def less(a: PodEvictInfo, b: PodEvictInfo) -> bool:
        pa, pb = a.pod.priority, b.pod.priority
        if pa is not None and pb is not None and pa != pb:
            return pa < pb
        if a.memory_used != 0 and b.memory_used != 0:
            return a.memory_used > b.memory_used
        if a.memory_used == 0 and b.memory_used == 0:
            return a.pod.name > b.pod.name
        return b.memory_used == 0

    return sorted(infos, key=functools.cmp_to_key(_cmp(less)))


def priority_victims(pods: Iterable[PodMeta], gate: str, priority_threshold: int, used: Mapping[str, int],
                     resource: str, bad: LogOnce | None = None, by_request: bool = False) -> list[PodEvictInfo]:
    """Victims of CPUEvict / CPUAllocatableEvict (``resource`` "cpu", used in milli-cores) or MemoryEvict /
    MemoryAllocatableEvict ("memory", bytes).

    Kept: active pods the gate may evict, priority (with default) ≤ threshold, label eviction-enabled=true,
    a usage sample. Order: eviction-priority, priority, label priority, then usage descending (the allocatable
    gates, ``by_request``: request descending).
    """
    infos = []
    for meta in pods:
        pod = meta.pod
        if not is_active(pod) or not _allowed(meta, gate, bad):
            continue
        priority = priority_value(pod)
        if priority > priority_threshold or pod.labels.get(wire.LABEL_EVICTION_ENABLED) != "true":
            continue
        try:
            evict_priority = eviction_priority(pod)
        except DecodeError as e:
            evict_priority = 0
            if bad is not None:
                bad(f"priority/{pod.uid}", "pod %s: %s; using 0", pod.key, e)
        if pod.uid not in used:
            continue
        _, request = pod_request(pod, resource)
        common = dict(priority=priority, label_priority=label_priority(pod, priority),
                      eviction_priority=evict_priority)
        if resource == RES_CPU:
            infos.append(PodEvictInfo(meta, milli_cpu_used=used[pod.uid], milli_cpu_request=request, **common))
        else:
            infos.append(PodEvictInfo(meta, memory_used=used[pod.uid], memory_request=request, **common))
    def heaviest_first(info: PodEvictInfo) -> float:
        if by_request:
            return -info.milli_cpu_request if resource == RES_CPU else -info.memory_request
        return -info.milli_cpu_used if resource == RES_CPU else -info.memory_used

    return sorted(infos, key=lambda i: (i.eviction_priority, i.priority, i.label_priority, heaviest_first(i)))
