"""Container and pod cgroup resources the agent owns: cpuset (CPUSetAllocator) and batch resources (BatchResource).

Facts: upstream ``pkg/koordlet/runtimehooks/hooks/`` ``batchresource``, ``cpuset`` and ``cpunormalization`` (each
``rule.go`` and hook file). Pure functions of (pod, container, node pools, NodeSLO); the reconciler writes their
answers, and the NRI CreateContainer hook will return the same answers as an adjustment, so a container gets the same
cgroup whether it started before or after the agent.

A field left ``None`` means "not ours for this pod": the agent does not touch that file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.host.cgroup import CgroupWrite, KubeQOS, format_cpu_list
from koordlet.states.pod import Container, Pod, ResourceStatus

if TYPE_CHECKING:
    from koordlet.states.nodeslo.schema import NodeSLOSpec
    from koordlet.states.nodestate import NodeView

CFS_PERIOD_US = 100_000
MIN_SHARES = 2
MIN_QUOTA_US = 1000


@dataclass(frozen=True)
class Settings:
    """Desired values of one pod or container cgroup (None: leave the file alone)."""
    cpuset: str | None = None
    cpu_shares: int | None = None
    cfs_quota: int | None = None          # µs per 100 ms period; -1 unlimited
    memory_limit: int | None = None       # bytes; -1 unlimited


def _pool(pools: Mapping[int, tuple[int, ...]], nodes: tuple[int, ...] | None = None) -> str:
    cpus = {c for n, cs in pools.items() if nodes is None or n in nodes for c in cs}
    return format_cpu_list(sorted(cpus))


def container_cpuset(pod: Pod, status: ResourceStatus, view: NodeView, be_cpu_manager: bool = False) -> str | None:
    """cpuset.cpus of a container (and of the sandbox), upstream's order of precedence.

    None for BestEffort containers (CPU suppress owns them) and, under the kubelet's static policy, for
    Guaranteed/Burstable pods without a koordinator class (the kubelet owns them).
    """
    if status.cpuset:
        return status.cpuset                                   # LSE / LSR pinned by the scheduler
    qos = pod.raw_qos_class
    if status.numa_nodes:
        if qos == wire.QOS_BE and be_cpu_manager:
            return _pool(view.be_pools, status.numa_nodes)
        if qos != wire.QOS_BE:
            return _pool(view.ls_pools, status.numa_nodes)
    if qos == wire.QOS_SYSTEM and view.system_cpus:
        return format_cpu_list(view.system_cpus)
    if qos == wire.QOS_LS:
        return _pool(view.ls_pools)
    if pod.kube_qos is KubeQOS.BESTEFFORT or qos == wire.QOS_BE:
        return None
    if view.cpu_manager_policy == "static":
        return None
    return _pool(view.ls_pools)


def host_app_cpuset(qos: str, view: NodeView) -> str | None:
    """Only LS host applications get the share pools (upstream refuses the other classes)."""
    return _pool(view.ls_pools) if qos == wire.QOS_LS else None


def _shares(milli: int) -> int:
    return max(milli * 1024 // 1000, MIN_SHARES) if milli > 0 else MIN_SHARES


def _quota(milli: int, ratio: float) -> int:
    if milli <= 0:
        return -1
    quota = max(milli * CFS_PERIOD_US // 1000, MIN_QUOTA_US)
    return math.ceil(quota / ratio) if ratio > 1.0 else quota


def normalization_ratio(annotations: Mapping[str, str]) -> tuple[float, str | None]:
    """The node's cpu-normalization-ratio (1.0 when absent) and, when it is malformed, why."""
    raw = annotations.get(wire.ANNOTATION_CPU_NORMALIZATION_RATIO)
    if not raw:
        return 1.0, None
    try:
        ratio = float(raw)
        if not math.isfinite(ratio) or ratio <= 0:
            raise ValueError
    except ValueError:
        return 1.0, f"node annotation {wire.ANNOTATION_CPU_NORMALIZATION_RATIO}={raw!r} is not a positive number"
    return ratio, None


def normalization_rule(annotations: Mapping[str, str]) -> tuple[float | None, str | None]:
    """The ratio the CPUNormalization gate applies to cpu-share pods: None when the node has no valid
    ``node.koordinator.sh/cpu-normalization-ratio`` (upstream's rule is off then), and why when it is malformed."""
    if not annotations.get(wire.ANNOTATION_CPU_NORMALIZATION_RATIO):
        return None, None
    ratio, problem = normalization_ratio(annotations)
    return (None, problem) if problem else (ratio, None)


def cpu_share_pod(pod: Pod, status: ResourceStatus) -> bool:
    """The pods CPUNormalization scales (upstream's isPodCPUShare / PodQOSFilter): raw class LS, or no class and
    no CPUs pinned by the scheduler."""
    qos = pod.raw_qos_class
    if qos == wire.QOS_NONE:
        return not status.cpuset
    return qos == wire.QOS_LS


def normalized_quota(cpu_limit_milli: int, ratio: float) -> int:
    """The cfs quota of a cpu limit on a node whose CPUs are ``ratio`` times the reference CPU: the kubelet's
    quota (MilliCPUToQuota) divided by the ratio, rounded up, when the ratio is above 1; -1 without a limit."""
    return _quota(cpu_limit_milli, ratio)


def normalized_pod_quota(pod: Pod, ratio: float) -> int | None:
    """The pod-level quota under CPUNormalization: the kubelet's pod quota (Σ of the containers' limits, set only
    when every container has one) divided by the ratio; None when the pod has no quota or its containers cannot
    be told (unnamed dirs, sidecars whose limits the pod model does not carry)."""
    containers = pod.containers
    if not containers or any(not c.known or c.resources.cpu_limit <= 0 for c in containers):
        return None
    if any(s.sidecar for s in pod.spec_containers):
        return None
    return normalized_quota(sum(c.resources.cpu_limit for c in containers), ratio)


def batch_container(pod: Pod, container: Container, quota_enabled: bool = True, ratio: float = 1.0) -> Settings:
    """BE pods run on batch-* resources: shares from the request, quota and memory limit from the limits.
    A container nobody has named is left alone: its resources are unknown, not zero."""
    if pod.raw_qos_class != wire.QOS_BE or not container.known:
        return Settings()
    r = container.resources
    return Settings(cpu_shares=_shares(r.batch_cpu_request),
                    cfs_quota=_quota(r.batch_cpu_limit, ratio) if quota_enabled else -1,
                    memory_limit=r.batch_memory_limit if r.batch_memory_limit > 0 else -1)


def app_containers(pod: Pod, containers: tuple[Container, ...]) -> tuple[Container, ...] | None:
    """The containers whose resources make the pod's sums, or None when they cannot be told.

    An unnamed cgroup dir under the pod may be the sandbox (pause) container, an init container that has
    finished, or an application container the agent has no resources for. It is ignored when the pod's spec is
    known and every regular container of it is among the named ones (then it is not an application container);
    otherwise the sums would be guesses, and a guess of "no limit" loosens what the runtime hook has set.
    """
    known = tuple(c for c in containers if c.known)
    if len(known) == len(containers):
        return known
    regular = {s.name for s in pod.spec_containers if not s.sidecar}
    return known if regular and regular <= {c.name for c in known} else None


def batch_pod(pod: Pod, containers: tuple[Container, ...], quota_enabled: bool = True,
              ratio: float = 1.0) -> Settings:
    """Pod level: Σ of the containers; unlimited as soon as one container is unlimited; left alone when the
    application containers cannot be told (:func:`app_containers`)."""
    apps = app_containers(pod, containers)
    if pod.raw_qos_class != wire.QOS_BE or apps is None:
        return Settings()
    containers = apps
    request = sum(c.resources.batch_cpu_request for c in containers)
    cpu_limited = bool(containers) and all(c.resources.batch_cpu_limit > 0 for c in containers)
    mem_limited = bool(containers) and all(c.resources.batch_memory_limit > 0 for c in containers)
    cpu_limit = sum(c.resources.batch_cpu_limit for c in containers) if cpu_limited else 0
    return Settings(cpu_shares=_shares(request), cfs_quota=_quota(cpu_limit, ratio) if quota_enabled else -1,
                    memory_limit=sum(c.resources.batch_memory_limit for c in containers) if mem_limited else -1)


def within_pod(container: Settings, pod: Settings) -> Settings:
    """A YARN container's settings no looser than its NodeManager pod's: its cfs quota and memory limit at most the
    pod's where the pod has one (an unlimited container gets the pod's). Its own come from the copilot's
    resources, which the pod's batch request does not cover; a child above its parent is also what a v1 kernel
    refuses for the quota."""
    def capped(own: int | None, cap: int | None) -> int | None:
        if own is None or cap is None or cap <= 0:
            return own
        return cap if own <= 0 or own > cap else own

    return replace(container, cfs_quota=capped(container.cfs_quota, pod.cfs_quota),
                   memory_limit=capped(container.memory_limit, pod.memory_limit))


def batch_quota_enabled(slo: NodeSLOSpec) -> bool:
    """BE cfs quota comes from batch-cpu limits unless CPU suppress runs in cfsQuota mode (it owns the quota)."""
    threshold = slo.resource_threshold
    return not (threshold is not None and threshold.enable
                and threshold.cpu_suppress_policy == wire.CPU_SUPPRESS_CFS_QUOTA)


@dataclass(frozen=True)
class SettingsRule:
    """Which resources the agent owns (feature gates) and the node-wide inputs of the batch rule."""
    cpuset: bool = True          # CPUSetAllocator
    batch: bool = True           # BatchResource
    quota_on: bool = True        # batch_quota_enabled(slo)
    ratio: float = 1.0           # normalization_ratio(node annotations)


def container_settings(rule: SettingsRule, pod: Pod, container: Container, status: ResourceStatus,
                       view: NodeView | None) -> Settings:
    """Everything the agent sets on one container's cgroup; without a view (pools unknown) no cpuset.

    Pods pinned by the scheduler must not be throttled (upstream #489): their quota is unlimited.
    """
    cpuset = container_cpuset(pod, status, view) if rule.cpuset and view is not None else None
    s = batch_container(pod, container, rule.quota_on, rule.ratio) if rule.batch else Settings()
    unset_quota = rule.cpuset and bool(status.cpuset)
    return Settings(cpuset or None, s.cpu_shares, -1 if unset_quota else s.cfs_quota, s.memory_limit)


def pod_settings(rule: SettingsRule, pod: Pod, containers: tuple[Container, ...], status: ResourceStatus) -> Settings:
    """The pod cgroup's settings: the batch sums, and unlimited quota for pinned pods."""
    s = batch_pod(pod, containers, rule.quota_on, rule.ratio) if rule.batch else Settings()
    if rule.cpuset and status.cpuset:
        return Settings(s.cpuset, s.cpu_shares, -1, s.memory_limit)
    return s


REASON_CPUSET, REASON_BATCH = "cpuset", "batch-resource"
REASON_NORMALIZATION = "CPUNormalization"          # upstream's hook name, the reason of its writes


def cgroup_writes(rel: str, s: Settings, reason: str) -> list[CgroupWrite]:
    """The desired writes of one cgroup's settings (the cpuset under its own audit reason)."""
    out = []
    if s.cpuset is not None:
        out.append(CgroupWrite(rel, "cpuset.cpus", s.cpuset, REASON_CPUSET))
    if s.cpu_shares is not None:
        out.append(CgroupWrite(rel, "cpu.shares", s.cpu_shares, reason))
    if s.cfs_quota is not None:
        out.append(CgroupWrite(rel, "cpu.cfs_quota_us", s.cfs_quota, reason))
    if s.memory_limit is not None:
        out.append(CgroupWrite(rel, "memory.limit_in_bytes", s.memory_limit, reason))
    return out

