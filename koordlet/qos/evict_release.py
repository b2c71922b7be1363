"""How much an eviction gate must release, and the account of what a round of evictions released (the behaviour
is described in :mod:`koordlet.qos.evict`): pure functions of the NodeSLO thresholds, the node's capacity or
allocatable and the metric cache's values.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict.go: cpuEvictor``,
``memoryevict/memory_evict.go: memoryEvictor`` (the thresholds and release amounts) and ``util/evict.go``
(the release account shared by a round's tasks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.quantity import parse_quantity
from koordlet.qos.evict_victims import RES_CPU, PodEvictInfo, pod_request, priority_value

if TYPE_CHECKING:
    from koordlet.states.nodeslo.schema import ResourceThresholdStrategy
    from koordlet.states.pod import Pod

PRIORITY_MID_MAX = 7999                             # allocatableEvictPriorityThreshold: koord-prod never goes
# the resources whose requests an allocatable eviction can release, and the class holding them (upstream's
# ReverseResourceNameMap)
RELEASABLE = {wire.BATCH_CPU: wire.PRIORITY_BATCH, wire.BATCH_MEMORY: wire.PRIORITY_BATCH,
              wire.MID_CPU: wire.PRIORITY_MID, wire.MID_MEMORY: wire.PRIORITY_MID}
EVICT_REASON_PREFIX = "trigger by koordlet feature "

BE_CPU_SATISFACTION_LOW_MAX = 60
BE_CPU_SATISFACTION_UPPER_MAX = 100
BE_CPU_USAGE_THRESHOLD = 90
CPU_RELEASE_BUFFER = 2
MEMORY_RELEASE_BUFFER = 2

TARGET_USED, TARGET_REQUEST = "podUsed", "podResourceRequest"


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


def remaining(want: Mapping[str, float], got: Mapping[str, float]) -> dict[str, float]:
    """What of ``want`` is not yet covered by ``got`` (resource -> amount still to release)."""
    return {r: q - got.get(r, 0) for r, q in want.items() if q > got.get(r, 0)}


def kill_and_evict(tasks: Sequence[EvictTask], is_evicted: Callable[[PodEvictInfo], bool],
                   evict: Callable[[PodEvictInfo, EvictTask], bool],
                   spare: Callable[[PodEvictInfo, EvictTask, Resources], Resources] | None = None
                   ) -> tuple[dict[str, Resources], bool]:
    """Upstream's KillAndEvictPods: walk each task's victims until its release is covered by what all tasks
    released so far. Returns (released per target, whether a new eviction happened).

    ``spare(victim, task, still needed)`` is asked first for each victim to release what the task still needs
    without evicting the pod (a NodeManager pod's YARN containers, through the copilot agent); what it releases
    counts toward the task's target, and the pod is evicted only when that was not enough."""
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
        if not remaining(task.to_release, released.get(task.target, {})):
            continue
        for info in task.victims:
            uid = info.pod.uid
            if uid in picked:
                continue
            if is_evicted(info):
                picked.add(uid)
                add(info)
                if not remaining(task.to_release, released.get(task.target, {})):
                    break
                continue
            if spare is not None:
                freed = spare(info, task, remaining(task.to_release, released.get(task.target, {})))
                if freed:
                    newly = True
                    into = released.setdefault(task.target, {})
                    for r, q in freed.items():
                        into[r] = into.get(r, 0) + q
                    if not remaining(task.to_release, into):
                        break
            if evict(info, task):
                picked.add(uid)
                newly = True
                add(info)
                if not remaining(task.to_release, released.get(task.target, {})):
                    break
    return released, newly
