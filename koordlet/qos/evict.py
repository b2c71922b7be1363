"""Evictions under CPU and memory pressure: BECPUEvict, CPUAllocatableEvict, CPUEvict, BEMemoryEvict,
MemoryAllocatableEvict, MemoryEvict.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict.go: cpuEvictor``, ``memoryevict/memory_evict.go:
memoryEvictor`` and ``util/evict.go``; the eviction metadata from ``apis/extension/constants.go``:

- Every gate also needs ``resourceUsedThresholdWithBE.enable``. Memory runs BEMemoryEvict, MemoryAllocatableEvict
  then MemoryEvict with a 4 s cool-down after an eviction (none at start); CPU runs BECPUEvict,
  CPUAllocatableEvict then CPUEvict with a 20 s cool-down that also starts when the agent starts. Victims of all
  tasks of one cycle share one release account: a pod counted for one task is not picked again, and a pod
  evicted earlier that is still there counts as pending release.
- BECPUEvict: BE satisfaction = BE real limit (or the node's batch-cpu allocatable with ``evictByAllocatable``) /
  BE request, over the time window (average) and on the newest sample; it evicts when BE usage is ≥ the usage
  threshold (90%) of the limit and satisfaction < lower%, releasing request·(upper% − satisfaction) of batch-cpu
  requests, the smaller of the two estimates. Victims: raw-BE pods by spec.priority, then usage/request desc.
- CPUEvict: node usage% (window average) ≥ threshold releases capacity·(usage% − lower%) of pod usage. Victims:
  active pods with priority ≤ ``evictEnabledPriorityThreshold`` and the ``koordinator.sh/eviction-enabled=true``
  label, by eviction-priority, priority, the ``koordinator.sh/priority`` label, then usage desc.
- CPUAllocatableEvict / MemoryAllocatableEvict (``{cpu,memory}AllocatableEvict{Threshold,Lower}Percent`` and
  ``allocatableEvictPriorityThreshold`` ≤ 7999, all required): the requests of the pods whose priority (with
  default) is at most the threshold are summed per resource name (``kubernetes.io/batch-*`` for koord-batch pods,
  ``mid-*`` for koord-mid, native for the rest; containers and sidecars) and compared with the node's allocatable
  of that name; above threshold%, request − lower%·allocatable is released (all of it when the node has none of
  that resource). Victims as CPUEvict's, with priority ≤ ``allocatableEvictPriorityThreshold`` and largest
  request first; a victim releases its request of the resource it is over on.
- BEMemoryEvict / MemoryEvict: node memory% (newest sample) ≥ threshold (70) releases capacity·(usage% − lower%),
  lower defaulting to threshold − 2. BE victims by priority, then usage desc (pods without a sample last, by name
  desc); MemoryEvict victims as CPUEvict's, by memory usage.
- ``koordinator.sh/eviction-policy`` (a JSON list of gate names) restricts which gates may evict the pod; a value
  that does not parse means never.
- Action with a cluster: ``policy/v1`` Eviction with a UID precondition, then a Warning Event ``evictPodSuccess`` /
  ``evictPodFail`` from ``koordlet-qosManager`` whose message carries "trigger by koordlet feature <Gate>".
  A pod evicted is remembered for 2 min (upstream's cache) and while it is terminating, and not evicted again.

Beyond upstream (documented differences):

- Standalone (no API server): one log line and a counter per victim; processes are SIGKILLed only when
  ``kill_standalone`` is set, otherwise the line says "would evict" (a dry run that still honours cool-downs and
  the release account, so it shows what the cluster path would do). Upstream's default CRI StopContainer path
  is not implemented: with a cluster we always use the Eviction API (upstream's ``--only-evict-by-api``).
- [quirk fixed] Upstream's MemoryEvict stores each pod's memory usage ×1000, so the first victim always "covers"
  the release and one pod goes per cool-down. We account real bytes, so as many pods go as the release needs.
- A terminating pod (deletionTimestamp set) counts as already evicted, also for the BE victim lists.
- Standalone capacities: the online CPUs, and Σ NUMA MemTotal.
- Allocatable evictions: only the batch-*/mid-* resources are released. Upstream also sums native cpu/memory
  (pods below the priority threshold whose class is prod, e.g. spec.priority 1000), but its victims release
  nothing toward them, so a native overage makes upstream evict every candidate; here it is logged once and left.
  Only pods of a class that is over are candidates (upstream evicts, say, a koord-batch pod for a mid-cpu
  overage: it comes first by priority but releases nothing toward it). Pods that have finished (Succeeded/Failed)
  are not summed (upstream sums every pod the kubelet lists). A node
  whose allocatable is unknown (standalone, no Node object) is skipped instead of "has none of anything".
- Every eviction is an event of the audit log at verbosity 0 (gate AuditEvents), as upstream's evictor writes it:
  the pod, reason ``evicted``, message ``trigger by koordlet feature <Gate>, kill pod: <name>``.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.component import Context, Plugin, collecting
from koordlet.host.procfs import kill_cgroup_processes
from koordlet.metriccache import EmptyError, MetricCache
from koordlet.ops.audit import V_EVICT
from koordlet.ops.audit import Event as AuditEvent
from koordlet.qos.cpu_suppress import capacity_milli
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.nodestate import NodeView

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.kubeapi import KubeApi
    from koordlet.states.nodeslo.schema import ResourceThresholdStrategy
    from koordlet.states.pod import Pod
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

# Wire names (the feature gates of upstream pkg/features/koordlet_features.go); not yet in koordlet/base/wire.py.

BE_CPU_EVICT, CPU_EVICT, CPU_ALLOCATABLE_EVICT = "BECPUEvict", "CPUEvict", "CPUAllocatableEvict"
BE_MEMORY_EVICT, MEMORY_EVICT, MEMORY_ALLOCATABLE_EVICT = "BEMemoryEvict", "MemoryEvict", "MemoryAllocatableEvict"
CPU_GATES = (BE_CPU_EVICT, CPU_ALLOCATABLE_EVICT, CPU_EVICT)              # upstream order
MEMORY_GATES = (BE_MEMORY_EVICT, MEMORY_ALLOCATABLE_EVICT, MEMORY_EVICT)
PRIORITY_MID_MAX = 7999                             # allocatableEvictPriorityThreshold: koord-prod never goes
# the resources whose requests an allocatable eviction can release, and the class holding them (upstream's
# ReverseResourceNameMap)
RELEASABLE = {wire.BATCH_CPU: wire.PRIORITY_BATCH, wire.BATCH_MEMORY: wire.PRIORITY_BATCH,
              wire.MID_CPU: wire.PRIORITY_MID, wire.MID_MEMORY: wire.PRIORITY_MID}

EVICT_REASON_PREFIX = "trigger by koordlet feature "
EVICTED = "evicted"
EVENT_SUCCESS, EVENT_FAIL = "evictPodSuccess", "evictPodFail"
EVENT_COMPONENT = "koordlet-qosManager"

CPU_COOL_DOWN, MEMORY_COOL_DOWN = 20.0, 4.0        # -cpu-evict-cool-time-seconds, -memory-evict-cool-time-seconds
EVICTED_TTL = 120.0                                 # upstream's expiring "pods evicted" cache

BE_CPU_SATISFACTION_LOW_MAX = 60
BE_CPU_SATISFACTION_UPPER_MAX = 100
BE_CPU_USAGE_THRESHOLD = 90
MIN_ALLOCATABLE_BATCH_MILLI = 1
CPU_RELEASE_BUFFER = 2
MEMORY_RELEASE_BUFFER = 2
PRIORITY_DEFAULTS = {wire.PRIORITY_PROD: 9500, wire.PRIORITY_MID: 7500, wire.PRIORITY_BATCH: 5500,
                     wire.PRIORITY_FREE: 3500}

TARGET_USED, TARGET_REQUEST = "podUsed", "podResourceRequest"
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


# --------------------------------------------------------------------------------------------------
# how much to release
# --------------------------------------------------------------------------------------------------

def check_be_cpu_config(t: ResourceThresholdStrategy) -> str | None:
    low, up = t.cpu_evict_be_satisfaction_lower_percent, t.cpu_evict_be_satisfaction_upper_percent
    if low is None or up is None:
        return "cpuEvictBESatisfactionLowerPercent or cpuEvictBESatisfactionUpperPercent not set"
    if low > BE_CPU_SATISFACTION_LOW_MAX or low <= 0:
        return f"cpuEvictBESatisfactionLowerPercent {low} must be in (0,{BE_CPU_SATISFACTION_LOW_MAX}]"
    if up >= BE_CPU_SATISFACTION_UPPER_MAX or up <= 0:
        return f"cpuEvictBESatisfactionUpperPercent {up} must be in (0,{BE_CPU_SATISFACTION_UPPER_MAX})"
    if up < low:
        return f"cpuEvictBESatisfactionUpperPercent {up} < cpuEvictBESatisfactionLowerPercent {low}"
    return None


def check_cpu_config(t: ResourceThresholdStrategy) -> str | None:
    if t.cpu_evict_threshold_percent is None:
        return "cpuEvictThresholdPercent not set"
    if t.cpu_evict_threshold_percent < 0:
        return f"cpuEvictThresholdPercent {t.cpu_evict_threshold_percent} < 0"
    lower = t.cpu_evict_lower_percent
    if lower is None:
        lower = t.cpu_evict_threshold_percent - CPU_RELEASE_BUFFER
    if lower >= t.cpu_evict_threshold_percent:
        return f"cpuEvictLowerPercent {lower} must be below cpuEvictThresholdPercent {t.cpu_evict_threshold_percent}"
    if t.evict_enabled_priority_threshold is None:
        return "evictEnabledPriorityThreshold not set"
    return None


def check_memory_config(t: ResourceThresholdStrategy, needs_priority: bool) -> str | None:
    threshold = t.memory_evict_threshold_percent
    if threshold is None:
        return "memoryEvictThresholdPercent not set"
    if threshold < 0:
        return f"memoryEvictThresholdPercent {threshold} < 0"
    lower = t.memory_evict_lower_percent if t.memory_evict_lower_percent is not None \
        else threshold - MEMORY_RELEASE_BUFFER
    if lower >= threshold:
        return f"memoryEvictLowerPercent {lower} must be below memoryEvictThresholdPercent {threshold}"
    if needs_priority and t.evict_enabled_priority_threshold is None:
        return "evictEnabledPriorityThreshold not set"
    return None


def check_allocatable_config(t: ResourceThresholdStrategy, resource: str) -> str | None:
    """Upstream's isAllocatableThresholdConfigValid for ``resource`` "cpu" or "memory"."""
    if resource == RES_CPU:
        names = ("cpuAllocatableEvictThresholdPercent", "cpuAllocatableEvictLowerPercent")
        threshold, lower = t.cpu_allocatable_evict_threshold_percent, t.cpu_allocatable_evict_lower_percent
    else:
        names = ("memoryAllocatableEvictThresholdPercent", "memoryAllocatableEvictLowerPercent")
        threshold, lower = t.memory_allocatable_evict_threshold_percent, t.memory_allocatable_evict_lower_percent
    if threshold is None:
        return f"{names[0]} not set"
    if threshold < 0:
        return f"{names[0]} {threshold} < 0"
    if lower is None:
        return f"{names[1]} not set"
    if lower >= threshold:
        return f"{names[1]} {lower} must be below {names[0]} {threshold}"
    if t.allocatable_evict_priority_threshold is None:
        return "allocatableEvictPriorityThreshold not set"
    if t.allocatable_evict_priority_threshold > PRIORITY_MID_MAX:
        return (f"allocatableEvictPriorityThreshold {t.allocatable_evict_priority_threshold} above "
                f"{PRIORITY_MID_MAX}: koord-prod pods must not be evicted")
    return None


def allocatable_value(name: str, raw: str) -> int:
    """A node allocatable quantity in the unit requests are summed in: milli-cores for ``cpu`` (Go's
    MilliValue), the integer value for the rest (Value(): batch-/mid-cpu are already milli-cores), rounded up."""
    q = parse_quantity(raw)
    return math.ceil(q * 1000) if name == RES_CPU else math.ceil(q)


def allocatable_release(pods: Iterable[Pod], allocatable: Mapping[str, int], threshold_percent: int,
                        lower_percent: int, priority_threshold: int, resource: str
                        ) -> tuple[dict[str, int], dict[str, int]]:
    """(releasable, not releasable) per resource name: requests summed over the pods with priority ≤
    ``priority_threshold``; a name whose sum is above threshold% of the node's allocatable (or that the node has
    none of) releases sum − lower%·allocatable. Only batch-*/mid-* can be released by eviction (:data:`RELEASABLE`);
    a native overage is returned apart."""
    requested: dict[str, int] = {}
    for pod in pods:
        if pod.phase in ("Succeeded", "Failed") or priority_value(pod) > priority_threshold:
            continue
        name, value = pod_request(pod, resource)
        requested[name] = requested.get(name, 0) + max(value, 0)
    release: dict[str, int] = {}
    for name, rq in requested.items():
        total = allocatable.get(name, 0)
        if total <= 0:
            amount = rq
        elif rq / total > threshold_percent / 100:
            amount = int(rq - lower_percent / 100 * total)
        else:
            continue
        if amount > 0:
            release[name] = amount
    return ({n: a for n, a in release.items() if n in RELEASABLE},
            {n: a for n, a in release.items() if n not in RELEASABLE})


@dataclass(frozen=True)
class BECPUSample:
    """node_be cpu values (milli-cores) over a window, and how many points each aggregate saw (the least)."""
    usage: float
    request: float
    real_limit: float
    count: int = 0


def be_usage_high_enough(usage: float, limit: float, threshold_percent: int | None) -> bool:
    if limit <= 0:
        return False
    if limit < 1000:                      # below one core: always considered saturated (upstream)
        return True
    threshold = BE_CPU_USAGE_THRESHOLD if threshold_percent is None else threshold_percent
    return usage / limit >= threshold / 100


def release_by_satisfaction(request: float, limit: float, lower_percent: int, upper_percent: int) -> int:
    """request·(upper% − limit/request) when the satisfaction limit/request is at or below lower%, else 0."""
    if request <= 0:
        return 0
    rate = limit / request
    if rate > lower_percent / 100:
        return 0
    gap = upper_percent / 100 - rate
    if gap <= 0:
        return 0
    return int(request * gap)


def be_cpu_release_milli(avg: BECPUSample, last: BECPUSample, t: ResourceThresholdStrategy,
                         batch_allocatable_milli: float, window_seconds: int, interval_seconds: int) -> int:
    """batch-cpu (milli) BECPUEvict wants released: min of the window-average and newest estimates, 0 for none."""
    by_allocatable = t.cpu_evict_policy == wire.CPU_EVICT_BY_ALLOCATABLE
    lower = t.cpu_evict_be_satisfaction_lower_percent or 0
    upper = t.cpu_evict_be_satisfaction_upper_percent or 0
    limit = batch_allocatable_milli if by_allocatable else avg.real_limit
    if avg.count * interval_seconds < window_seconds // 3:
        return 0                          # too few points in the window
    if not be_usage_high_enough(avg.usage, limit, t.cpu_evict_be_usage_threshold_percent):
        return 0
    release = release_by_satisfaction(avg.request, limit, lower, upper)
    if release <= 0:
        return 0
    current_limit = batch_allocatable_milli if by_allocatable else last.real_limit
    if not be_usage_high_enough(last.usage, current_limit, t.cpu_evict_be_usage_threshold_percent):
        return 0
    if last.request == avg.request and current_limit == limit:
        return release
    current = release_by_satisfaction(last.request, current_limit, lower, upper)
    if current <= 0:
        return 0
    return min(release, current)


def cpu_usage_release_milli(node_used_cores: float, cap_milli: int, t: ResourceThresholdStrategy) -> int:
    """CPUEvict: capacity·(usage% − lower%) in milli-cores once usage% ≥ threshold, else 0 (integer percents)."""
    threshold = t.cpu_evict_threshold_percent or 0
    usage = int(node_used_cores * 1000) * 100 // cap_milli
    if usage < threshold:
        return 0
    lower = t.cpu_evict_lower_percent if t.cpu_evict_lower_percent is not None else threshold - CPU_RELEASE_BUFFER
    return cap_milli * (usage - lower) // 100


def memory_release_bytes(node_used_bytes: float, capacity_bytes: int, t: ResourceThresholdStrategy) -> int:
    """Memory evict: capacity·(usage% − lower%) once usage% ≥ threshold, else 0 (integer percents)."""
    threshold = t.memory_evict_threshold_percent or 0
    usage = int(node_used_bytes) * 100 // capacity_bytes
    if usage < threshold:
        return 0
    lower = t.memory_evict_lower_percent if t.memory_evict_lower_percent is not None \
        else threshold - MEMORY_RELEASE_BUFFER
    return capacity_bytes * (usage - lower) // 100


# --------------------------------------------------------------------------------------------------
# one round of evictions over several tasks
# --------------------------------------------------------------------------------------------------

Resources = dict[str, float]


@dataclass(frozen=True)
class EvictTask:
    gate: str
    victims: tuple[PodEvictInfo, ...]
    to_release: Mapping[str, float]                   # resource -> amount (cpu milli, batch-cpu milli, bytes)
    target: str                                       # TARGET_USED | TARGET_REQUEST
    pod_resource: Callable[[PodEvictInfo], Resources]  # what evicting one pod releases toward the target

    @property
    def reason(self) -> str:
        return EVICT_REASON_PREFIX + self.gate


def _remaining(want: Mapping[str, float], got: Mapping[str, float]) -> dict[str, float]:
    return {r: q - got.get(r, 0) for r, q in want.items() if q > got.get(r, 0)}


def kill_and_evict(tasks: Sequence[EvictTask], is_evicted: Callable[[PodEvictInfo], bool],
                   evict: Callable[[PodEvictInfo, EvictTask], bool]) -> tuple[dict[str, Resources], bool]:
    """Upstream's KillAndEvictPods: walk each task's victims until its release is covered by what all tasks
    released so far. Returns (released per target, whether a new eviction happened)."""
    released: dict[str, Resources] = {}
    funcs: list[tuple[str, Callable[[PodEvictInfo], Resources]]] = []
    targets: set[str] = set()
    for task in tasks:
        for q in task.to_release.values():
            if q > 0:
                targets.add(task.target)
                released.setdefault(task.target, {})
        if task.target in targets:
            funcs.append((task.target, task.pod_resource))

    def add(info: PodEvictInfo) -> None:
        merged: dict[str, Resources] = {}
        for target, f in funcs:            # the same resource counted by two tasks: the larger value, once
            into = merged.setdefault(target, {})
            for r, q in f(info).items():
                if into.get(r, 0) < q:
                    into[r] = q
        for target, rl in merged.items():
            into = released.setdefault(target, {})
            for r, q in rl.items():
                into[r] = into.get(r, 0) + q

    picked: set[str] = set()
    newly = False
    for task in tasks:
        if not _remaining(task.to_release, released.get(task.target, {})):
            continue
        for info in task.victims:
            uid = info.pod.uid
            if uid in picked:
                continue
            if is_evicted(info):
                picked.add(uid)
                add(info)
                if not _remaining(task.to_release, released.get(task.target, {})):
                    break
                continue
            if evict(info, task):
                picked.add(uid)
                newly = True
                add(info)
                if not _remaining(task.to_release, released.get(task.target, {})):
                    break
    return released, newly


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------

@dataclass
class _Remembered:
    at: float


@dataclass
class Evictor:
    """Strategy ``evict``: memory then CPU evictions each cycle, for the enabled gates only.

    ``api`` given: the cluster path (Eviction API + Event). None: standalone (log + counter, kill if
    ``kill_standalone``). ``clock`` is monotonic seconds (cool-downs); metric windows use ``NodeView.now``.
    """

    cache: MetricCache
    collect_interval: float
    metrics: AgentMetrics | None = None
    gates: Iterable[str] = ()
    api: KubeApi | None = None
    node_name: str = ""
    kill_standalone: bool = False
    cpu_cool_down: float = CPU_COOL_DOWN
    memory_cool_down: float = MEMORY_COOL_DOWN
    evicted_ttl: float = EVICTED_TTL
    clock: Callable[[], float] = time.monotonic
    name: str = field(default="evict", init=False)
    _enabled: frozenset[str] = field(init=False)
    _last_cpu: float = field(init=False)
    _last_memory: float = field(init=False, default=-math.inf)
    _evicted: dict[str, _Remembered] = field(init=False, default_factory=dict)
    _bad: LogOnce = field(init=False, default_factory=lambda: LogOnce(log, logging.WARNING))

    def __post_init__(self) -> None:
        self._enabled = frozenset(self.gates)
        self._last_cpu = self.clock()          # upstream: the CPU cool-down also runs from start

    # --- cycle ---------------------------------------------------------------------------------------

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        now = self.clock()
        present = {m.pod.uid for m in view.pods}
        self._evicted = {uid: r for uid, r in self._evicted.items()
                         if uid in present and now - r.at < self.evicted_ttl}
        threshold = view.slo.resource_threshold
        if threshold is None or threshold.enable is None:
            self._bad("slo", "evictions skipped: NodeSLO has no resourceUsedThresholdWithBE.enable")
            return
        if not threshold.enable:
            return
        if self._enabled & set(MEMORY_GATES) and now >= self._last_memory + self.memory_cool_down:
            self._memory_round(view, executor, threshold, now)
        if self._enabled & set(CPU_GATES) and now - self._last_cpu >= self.cpu_cool_down:
            self._cpu_round(view, executor, threshold, now)

    def _memory_round(self, view: NodeView, executor: Executor, t: ResourceThresholdStrategy,
                      now: float) -> None:
        capacity = self._memory_capacity(view)
        if capacity <= 0:
            self._bad("memory-capacity", "memory evict skipped: node memory capacity unknown")
            return
        wall = view.now or time.time()
        tasks = []
        for gate in MEMORY_GATES:
            if gate not in self._enabled:
                continue
            if gate == MEMORY_ALLOCATABLE_EVICT:
                task = self._allocatable_task(gate, view, t, RES_MEMORY, wall)
                if task is not None:
                    tasks.append(task)
                continue
            problem = check_memory_config(t, needs_priority=gate == MEMORY_EVICT)
            if problem:
                self._bad(f"config/{gate}", "%s skipped: invalid NodeSLO config: %s", gate, problem)
                continue
            self._bad.forget(f"config/{gate}")
            used = self._last("node_memory_usage", None, wall)
            if used is None:
                self._bad(f"metrics/{gate}", "%s skipped: no node_memory_usage sample", gate)
                continue
            self._bad.forget(f"metrics/{gate}")
            release = memory_release_bytes(used, capacity, t)
            if release <= 0:
                continue
            pod_used = self._pod_values("pod_memory_usage", view, wall, 1)
            if gate == BE_MEMORY_EVICT:
                victims = be_memory_victims(view.pods, pod_used, gate, self._bad)
            else:
                victims = priority_victims(view.pods, gate, t.evict_enabled_priority_threshold or 0, pod_used,
                                           RES_MEMORY, self._bad)
            log.debug("%s: node memory %d%% of %d bytes, releasing %d bytes from %d candidates", gate,
                     int(used) * 100 // capacity, capacity, release, len(victims))
            tasks.append(EvictTask(gate, tuple(victims), {RES_MEMORY: release}, TARGET_USED,
                                   lambda i: {RES_MEMORY: i.memory_used}))
        if self._run(tasks, view, executor):
            self._last_memory = now

    def _cpu_round(self, view: NodeView, executor: Executor, t: ResourceThresholdStrategy,
                   now: float) -> None:
        cap = capacity_milli(view)
        if cap <= 0:
            self._bad("cpu-capacity", "cpu evict skipped: node cpu capacity unknown")
            return
        wall = view.now or time.time()
        interval = int(self.collect_interval)
        window = interval
        if t.cpu_evict_time_window_seconds is not None and t.cpu_evict_time_window_seconds > window:
            window = t.cpu_evict_time_window_seconds
        tasks = []
        for gate in CPU_GATES:
            if gate not in self._enabled:
                continue
            if gate == CPU_ALLOCATABLE_EVICT:
                task = self._allocatable_task(gate, view, t, RES_CPU, wall)
                if task is not None:
                    tasks.append(task)
                continue
            problem = check_be_cpu_config(t) if gate == BE_CPU_EVICT else check_cpu_config(t)
            if problem:
                self._bad(f"config/{gate}", "%s skipped: invalid NodeSLO config: %s", gate, problem)
                continue
            self._bad.forget(f"config/{gate}")
            if gate == BE_CPU_EVICT:
                release = be_cpu_release_milli(self._be_sample(wall - window, wall, "avg"),
                                               self._be_sample(wall - 2 * self.collect_interval, wall, "last"),
                                               t, self._batch_allocatable(view), window, interval)
                if release <= 0:
                    continue
                victims = be_cpu_victims(view.pods, self._pod_values("pod_cpu_usage", view, wall, 1000), gate,
                                         self._bad)
                log.debug("%s: BE satisfaction low, releasing %dm batch-cpu requests from %d candidates", gate,
                         release, len(victims))
                tasks.append(EvictTask(gate, tuple(victims), {RES_BATCH_CPU: release}, TARGET_REQUEST,
                                       lambda i: {RES_BATCH_CPU: i.milli_cpu_request}))
            else:
                try:
                    used = self.cache.query("node_cpu_usage", None, wall - window, wall).value("avg")
                except EmptyError:
                    self._bad(f"metrics/{gate}", "%s skipped: no node_cpu_usage sample", gate)
                    continue
                self._bad.forget(f"metrics/{gate}")
                release = cpu_usage_release_milli(used, cap, t)
                if release <= 0:
                    continue
                victims = priority_victims(view.pods, gate, t.evict_enabled_priority_threshold or 0,
                                           self._pod_values("pod_cpu_usage", view, wall, 1000), RES_CPU, self._bad)
                log.debug("%s: node cpu %.2f of %dm cores, releasing %dm from %d candidates", gate, used, cap,
                         release, len(victims))
                tasks.append(EvictTask(gate, tuple(victims), {RES_CPU: release}, TARGET_USED,
                                       lambda i: {RES_CPU: i.milli_cpu_used}))
        if self._run(tasks, view, executor):
            self._last_cpu = now

    def _allocatable_task(self, gate: str, view: NodeView, t: ResourceThresholdStrategy, resource: str,
                          wall: float) -> EvictTask | None:
        """CPUAllocatableEvict / MemoryAllocatableEvict: the requests of low-priority pods against the node's
        allocatable (no usage threshold: the node is over-committed, not busy)."""
        problem = check_allocatable_config(t, resource)
        if problem:
            self._bad(f"config/{gate}", "%s skipped: invalid NodeSLO config: %s", gate, problem)
            return None
        self._bad.forget(f"config/{gate}")
        if not view.node.allocatable:
            self._bad(f"allocatable/{gate}", "%s skipped: the node's allocatable is unknown (no Node object)", gate)
            return None
        allocatable: dict[str, int] = {}
        for name, raw in view.node.allocatable.items():
            try:
                allocatable[name] = allocatable_value(name, raw)
            except ValueError:
                self._bad(f"quantity/{name}", "node allocatable %s=%r unreadable; treated as none", name, raw)
        if resource == RES_CPU:
            threshold = t.cpu_allocatable_evict_threshold_percent or 0
            lower = t.cpu_allocatable_evict_lower_percent or 0
        else:
            threshold = t.memory_allocatable_evict_threshold_percent or 0
            lower = t.memory_allocatable_evict_lower_percent or 0
        priority_threshold = t.allocatable_evict_priority_threshold or 0
        release, stuck = allocatable_release((m.pod for m in view.pods), allocatable, threshold, lower,
                                             priority_threshold, resource)
        if stuck:
            self._bad(f"native/{gate}", "%s: requests of %s above their allocatable threshold cannot be released by "
                      "evicting batch or mid pods; left alone", gate, sorted(stuck))
        else:
            self._bad.forget(f"native/{gate}")
        if not release:
            return None
        classes = {RELEASABLE[name] for name in release}
        used = self._pod_values("pod_cpu_usage" if resource == RES_CPU else "pod_memory_usage", view, wall,
                                1000 if resource == RES_CPU else 1)
        # only pods of a class that is over: upstream walks every candidate and evicts a lower-priority pod that
        # releases nothing toward the overage before the pods that do
        victims = [v for v in priority_victims(view.pods, gate, priority_threshold, used, resource, self._bad,
                                               by_request=True) if v.pod.priority_class in classes]

        def released_by(info: PodEvictInfo) -> Resources:
            if info.pod.priority_class not in classes:
                return {}
            name, value = pod_request(info.pod, resource)
            return {name: value}

        log.debug("%s: requests over the allocatable threshold, releasing %s from %d candidates", gate, release,
                  len(victims))
        return EvictTask(gate, tuple(victims), {n: float(a) for n, a in release.items()}, TARGET_REQUEST,
                         released_by)

    def _run(self, tasks: list[EvictTask], view: NodeView, executor: Executor) -> bool:
        if not tasks:
            return False
        released, newly = kill_and_evict(tasks, self._is_evicted,
                                         lambda info, task: self._evict(info, task, executor))
        for task in tasks:
            left = _remaining(task.to_release, released.get(task.target, {}))
            if left:       # under pressure with nothing (more) to evict: said once, not every cycle
                self._bad(f"short/{task.gate}", "%s cannot release enough: every one of its %d candidates is "
                          "evicted or failed (still missing %s)", task.gate, len(task.victims), sorted(left))
            elif self._bad.forget(f"short/{task.gate}"):
                log.info("%s released what it wanted", task.gate)
        return newly

    # --- inputs ---------------------------------------------------------------------------------------

    def _last(self, name: str, labels: Mapping[str, str] | None, now: float) -> float | None:
        try:
            return self.cache.query(name, labels, now - 2 * self.collect_interval, now).value("last")
        except EmptyError:
            return None

    def _pod_values(self, name: str, view: NodeView, now: float, scale: int) -> dict[str, int]:
        """Newest sample per pod (scaled to an int: cores ×1000 -> milli-cores); pods without one are absent."""
        out = {}
        for meta in view.pods:
            value = self._last(name, {"pod_uid": meta.pod.uid}, now)
            if value is not None:
                out[meta.pod.uid] = int(value * scale)
        return out

    def _be_sample(self, start: float, end: float, kind: str) -> BECPUSample:
        values, counts = [], []
        for allocation in ("usage", "request", "real-limit"):
            result = self.cache.query("node_be", {"be_resource": "cpu", "be_allocation": allocation}, start, end)
            try:
                values.append(result.value(kind))
                counts.append(result.count())
            except EmptyError:
                values.append(0.0)
                counts.append(0)
        return BECPUSample(values[0], values[1], values[2], min(counts))

    @staticmethod
    def _batch_allocatable(view: NodeView) -> float:
        """The node's batch-cpu allocatable (milli); -1 when unknown, 1 when zero (upstream)."""
        raw = view.node.allocatable.get(wire.BATCH_CPU)
        if raw is None:
            return -1
        try:
            q = parse_quantity(raw)
        except ValueError:
            return -1
        value = math.ceil(q)
        if value < 0:
            return -1
        return MIN_ALLOCATABLE_BATCH_MILLI if value == 0 else float(value)

    def _memory_capacity(self, view: NodeView) -> int:
        raw = view.node.capacity.get("memory")
        if raw is not None:
            try:
                return math.ceil(parse_quantity(raw))
            except ValueError:
                self._bad("memory-quantity", "node memory capacity %r unreadable; using the NUMA total", raw)
        return sum(n.mem_total_bytes for n in view.topology.nodes)

    # --- acting ---------------------------------------------------------------------------------------

    def _is_evicted(self, info: PodEvictInfo) -> bool:
        return info.pod.uid in self._evicted or info.pod.terminating

    def _count(self, gate: str, result: str, pod: Pod | None = None) -> None:
        """Every attempt in our family; ``pod`` when the eviction happened, for upstream's two families (their
        reason label is upstream's release reason, always "evicted")."""
        if self.metrics is not None:
            self.metrics.pod_eviction_attempts.labels(self.metrics.node, gate, result).inc()
            if pod is not None:
                self.metrics.evicted(pod.namespace, pod.name, EVICTED)

    def _evict(self, info: PodEvictInfo, task: EvictTask, executor: Executor) -> bool:
        pod = info.pod
        message = f"{task.reason}, kill pod: {pod.name}"
        detail = f"evict Pod:{pod.namespace}/{pod.name}, reason: {EVICTED}, message: {message}"
        if self.api is not None:
            self._audit(executor, pod, message)
            return self._evict_by_api(info, task, message, detail)
        if not self.kill_standalone:
            log.warning("would evict pod=%s uid=%s reason=%r (standalone, kill_standalone off)", pod.key, pod.uid,
                        task.reason)
            self._count(task.gate, "would_evict")
            self._evicted[pod.uid] = _Remembered(self.clock())
            return True
        self._audit(executor, pod, message)
        cgroup_dir = executor.cgroups.listing_dir(info.meta.cgroup_dir)
        try:
            signalled, problems = kill_cgroup_processes(cgroup_dir)
        except OSError as e:
            signalled, problems = 0, [str(e)]
        if problems and not signalled:
            log.error("evict pod=%s uid=%s reason=%r result=kill_failed cgroup=%s error=%s", pod.key, pod.uid,
                      task.reason, cgroup_dir, "; ".join(problems))
            self._count(task.gate, "kill_failed")
            return False
        log.warning("evict pod=%s uid=%s reason=%r result=killed processes=%d cgroup=%s%s", pod.key, pod.uid,
                    task.reason, signalled, cgroup_dir, f" problems={'; '.join(problems)}" if problems else "")
        self._count(task.gate, "killed", pod)
        self._evicted[pod.uid] = _Remembered(self.clock())
        return True

    @staticmethod
    def _audit(executor: Executor, pod: Pod, message: str) -> None:
        """Upstream's evictor logs every eviction it attempts to the audit log at verbosity 0."""
        if executor.audit_log is not None:
            executor.audit_log.log(V_EVICT, AuditEvent(time.time(), "pod", pod.namespace, pod.name,
                                                       reason=EVICTED, message=message))

    def _evict_by_api(self, info: PodEvictInfo, task: EvictTask, message: str, detail: str) -> bool:
        from koordlet.states.kubeapi import ApiError

        assert self.api is not None
        pod = info.pod
        try:
            self.api.evict_pod(pod.namespace, pod.name, pod.uid)
        except ApiError as e:
            log.error("evict pod=%s uid=%s reason=%r result=failed error=%s", pod.key, pod.uid, task.reason, e)
            self._count(task.gate, "failed")
            self._event(pod, EVENT_FAIL, f"{detail}, error {e}")
            return False
        log.warning("evict pod=%s uid=%s reason=%r result=evicted message=%r", pod.key, pod.uid, task.reason,
                    message)
        self._count(task.gate, "evicted", pod)
        self._evicted[pod.uid] = _Remembered(self.clock())
        self._event(pod, EVENT_SUCCESS, detail)
        return True

    def _event(self, pod: Pod, reason: str, message: str) -> None:
        from koordlet.states.kubeapi import ApiError

        assert self.api is not None
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                               "uid": pod.uid},
            "reason": reason, "message": message, "type": "Warning",
            "source": {"component": EVENT_COMPONENT, **({"host": self.node_name} if self.node_name else {})},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": EVENT_COMPONENT, "reportingInstance": self.node_name,
        }
        try:
            self.api.create_event(pod.namespace, event)
            self._bad.forget("event")
        except ApiError as e:
            self._bad("event", "eviction event for pod %s not recorded: %s", pod.key, e)


GATES = ("BECPUEvict", "CPUEvict", "BEMemoryEvict", "MemoryEvict", "CPUAllocatableEvict", "MemoryAllocatableEvict")


def _build(ctx: Context) -> Evictor:
    cluster = ctx.node.cluster
    return Evictor(ctx.cache, ctx.config.collect_res_used_interval, ctx.metrics,
                   gates={g for g in GATES if ctx.config.gate(g)}, api=cluster.api if cluster else None,
                   node_name=ctx.config.node_name, kill_standalone=ctx.config.evict_standalone_kill)


PLUGIN = Plugin("evict", _build, gates=GATES, when=collecting)
