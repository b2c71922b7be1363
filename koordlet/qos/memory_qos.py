"""Memory QoS: memcg protection (min/low), throttling (high), watermarks, priority and page cache limits.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/cgreconcile/cgroup_reconcile.go: cgroupResourcesReconcile`` (gate
``CgroupReconcile``, default off). Every cycle, for every active pod:

- Config: the class's ``memoryQOS`` (LSE shares LSR's; the class comes from the label, else the Kubernetes QoS),
  overridden by the pod annotation ``koordinator.sh/memoryQOS`` = ``{"policy": "default|none|auto", ...fields}``:
  ``none`` gives the None values, ``auto`` the built-in default of the class even when the node disables the
  feature, and the other fields are overlaid. ``enable`` is not checked: a disabled class already carries the
  None values (states.nodeslo), so disabling writes the resets.
- Requests and limits are the native ones, or ``batch-*`` for a (raw) BE pod.
- Pod and container: ``memory.min`` = req·minLimitPercent/100, ``memory.low`` = req·lowLimitPercent/100 (raised
  to min when lower and non-zero), container ``memory.high`` = "max" when throttlingPercent is 0, else
  floor((req + (limit or node allocatable − req)·pct/100) / page)·page, at least min; the watermark, priority
  and oom group files straight from the config; on v2 only, ``memory.pagecache_limit.{enable,size,sync}`` at the
  pod level.
- QoS level: the Burstable and BestEffort directories get min/low = Σ over their pods, the kubepods root
  Σ over all pods; priority / use_priority_oom / oom.group from the class of the directory (Guaranteed→LSR,
  Burstable→LS, BestEffort→BE).
- Applied as one leveled batch (QoS dirs, pods, containers) so min/low/high are raised parent-first and
  lowered child-first.
- v1 has these files only on Anolis kernels; elsewhere the executor finds them missing and counts that quietly.

Differences from upstream (documented): the annotation is checked against the NodeSLO field ranges and an
unknown policy is rejected (the pod then uses the class config, logged once); upstream treats an unknown policy
as ``default`` and writes any number. Pod limits for the page cache limit are summed over the pod's (started)
containers, without init-container or overhead terms. When the node allocatable memory is unknown (standalone),
``memory_total_bytes`` stands in for it; with neither, an unlimited container gets no ``memory.high``.
"""

from __future__ import annotations

import logging
import mmap
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.component import Plugin, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import CgroupVersion, KubeQOS
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.informer import pod_owner
from koordlet.states.nodeslo.decoder import overlay
from koordlet.states.nodeslo.merge import default_node_slo_spec
from koordlet.states.nodeslo.schema import MemoryQOSCfg, ResourceQOSStrategy
from koordlet.states.nodestate import NodeView

if TYPE_CHECKING:
    from koordlet.states.pod import Container, Pod
    from koordlet.writer.executor import Executor, Update

log = logging.getLogger(__name__)

POLICY_DEFAULT, POLICY_NONE, POLICY_AUTO = "default", "none", "auto"
REASON = "cgroup reconcile"
PAGE_SIZE = mmap.PAGESIZE
MAX_INT64 = 9223372036854775807          # "max" for memory.high

# sloconfig.NoneMemoryQOS(): what policy "none" (and a disabled class) resets to.
NONE_MEMORY_QOS = MemoryQOSCfg(enable=False, min_limit_percent=0, low_limit_percent=0, throttling_percent=0,
                               wmark_ratio=0, wmark_scale_permill=50, wmark_min_adj=0, priority_enable=0,
                               priority=0, oom_kill_group=0)

_ACTIVE_PHASES = ("", "Pending", "Running")
_QOS_ORDER = (KubeQOS.GUARANTEED, KubeQOS.BURSTABLE, KubeQOS.BESTEFFORT)     # the root first: it is the parent


@dataclass(frozen=True)
class MemorySettings:
    """Values for one cgroup; None = leave the file alone."""
    min: int | None = None
    low: int | None = None
    high: int | None = None
    wmark_ratio: int | None = None
    wmark_scale_factor: int | None = None
    wmark_min_adj: int | None = None
    priority: int | None = None
    use_priority_oom: int | None = None
    oom_group: int | None = None
    pagecache_enable: int | None = None      # v2 only
    pagecache_size: int | None = None
    pagecache_sync: int | None = None

    def updates(self, executor: Executor, rel: str, owner: str) -> list[Update | None]:
        """In upstream's order; the page cache files exist only in the v2 registry."""
        v2 = executor.cgroups.version is CgroupVersion.V2
        out: list[Update | None] = []
        for f in fields(self):
            value = getattr(self, f.name)
            resource = _RESOURCE[f.name]
            if value is None or (resource.startswith("memory.pagecache_limit.") and not v2):
                continue
            out.append(executor.cgroup(rel, resource, value, owner, REASON))
        return out


_RESOURCE = {"min": "memory.min", "low": "memory.low", "high": "memory.high",
             "wmark_ratio": "memory.wmark_ratio", "wmark_scale_factor": "memory.wmark_scale_factor",
             "wmark_min_adj": "memory.wmark_min_adj", "priority": "memory.priority",
             "use_priority_oom": "memory.use_priority_oom", "oom_group": "memory.oom.group",
             "pagecache_enable": "memory.pagecache_limit.enable", "pagecache_size": "memory.pagecache_limit.size",
             "pagecache_sync": "memory.pagecache_limit.sync"}


# --------------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------------

def class_memory_qos(strategy: ResourceQOSStrategy, qos_class: str) -> MemoryQOSCfg:
    rq = strategy.for_qos_class(qos_class)
    return rq.memory_qos if rq is not None and rq.memory_qos is not None else MemoryQOSCfg()


@decoder(wire.ANNOTATION_POD_MEMORY_QOS)
def pod_memory_qos(pod: Pod, strategy: ResourceQOSStrategy) -> MemoryQOSCfg:
    """The pod's memory QoS config; DecodeError when the annotation is rejected (the caller then uses
    :func:`class_memory_qos`)."""
    key = wire.ANNOTATION_POD_MEMORY_QOS
    node_cfg = class_memory_qos(strategy, pod.qos_class)
    text = pod.annotations.get(key)
    if text is None:
        return node_cfg
    raw = decode.json_object(key, text)
    policy = raw.get("policy")
    if policy is None or policy == "":
        policy = POLICY_DEFAULT
    if policy not in (POLICY_DEFAULT, POLICY_NONE, POLICY_AUTO):
        raise DecodeError(key, f"policy {policy!r:.80} is not one of default, none, auto")
    # PodMemoryQOSConfig carries the MemoryQOS fields only: "enable" is node-level and ignored here
    overrides = {k: v for k, v in raw.items() if k not in ("policy", "enable")}
    base = node_cfg
    if policy == POLICY_AUTO:
        base = replace(class_memory_qos(default_node_slo_spec().resource_qos or ResourceQOSStrategy(), pod.qos_class),
                       enable=node_cfg.enable)
    merged, problem = overlay(MemoryQOSCfg, overrides, base, key)
    if problem is not None:
        raise DecodeError(key, problem)
    return NONE_MEMORY_QOS if policy == POLICY_NONE else merged


# --------------------------------------------------------------------------------------------------
# requests and limits
# --------------------------------------------------------------------------------------------------

def _is_be(pod: Pod) -> bool:
    return pod.raw_qos_class == wire.QOS_BE


def pod_request_bytes(pod: Pod) -> int:
    """Native pod memory request, or Σ batch-memory requests of a BE pod (unset counts as 0)."""
    if not _is_be(pod):
        return pod.memory_request_bytes
    return sum(c.resources.batch_memory_request for c in pod.containers if c.resources.batch_memory_request > 0)


def pod_limit_bytes(pod: Pod) -> int:
    """Pod memory limit, -1 when unlimited (BE: any container without a batch-memory limit)."""
    if _is_be(pod):
        limits = [c.resources.batch_memory_limit for c in pod.containers]
        if not limits or any(v <= 0 for v in limits):
            return -1
        return sum(limits)
    total = sum(c.resources.memory_limit for c in pod.containers if c.resources.memory_limit > 0)
    return total if total > 0 else -1


def container_request_limit(pod: Pod, container: Container) -> tuple[int, int]:
    """(request ≥ 0, limit or -1)."""
    r = container.resources
    req, limit = (r.batch_memory_request, r.batch_memory_limit) if _is_be(pod) else (r.memory_request,
                                                                                    r.memory_limit)
    return max(req, 0), (limit if limit > 0 else -1)


def _godiv(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _percent(value: int, pct: int | None) -> int | None:
    return None if pct is None else _godiv(value * pct, 100)


# --------------------------------------------------------------------------------------------------
# the rules (pure)
# --------------------------------------------------------------------------------------------------

def _static(cfg: MemoryQOSCfg) -> dict[str, int | None]:
    return dict(wmark_ratio=cfg.wmark_ratio, wmark_scale_factor=cfg.wmark_scale_permill,
                wmark_min_adj=cfg.wmark_min_adj, use_priority_oom=cfg.priority_enable, priority=cfg.priority,
                oom_group=cfg.oom_kill_group)


def _raise_low(min_: int | None, low: int | None) -> int | None:
    if min_ is not None and low is not None and 0 < low < min_:
        return min_
    return low


def pod_settings(pod: Pod, cfg: MemoryQOSCfg) -> MemorySettings:
    req = pod_request_bytes(pod)
    min_ = _percent(req, cfg.min_limit_percent)
    low = _raise_low(min_, _percent(req, cfg.low_limit_percent))
    limit = pod_limit_bytes(pod)
    size: int | None = None
    if cfg.page_cache_limit_size is not None:
        size = cfg.page_cache_limit_size
        if 0 < limit < size:                                  # the kernel wants size within [0, limit]
            size = limit
    elif cfg.page_cache_limit_percent is not None and limit > 0:
        size = _godiv(limit * cfg.page_cache_limit_percent, 100)
    enable = pc_size = sync = None
    if size is not None:
        if size > 0:
            enable, pc_size, sync = 1, size, 1 if cfg.page_cache_reclaim_sync else 0
        else:
            enable, pc_size = 0, 0
    if cfg.page_cache_enable is not None:
        enable = 1 if cfg.page_cache_enable else 0
    return MemorySettings(min=min_, low=low, pagecache_enable=enable, pagecache_size=pc_size,
                          pagecache_sync=sync, **_static(cfg))


def container_settings(pod: Pod, container: Container, cfg: MemoryQOSCfg,
                       node_memory: int) -> MemorySettings:
    """``node_memory``: the node's allocatable memory (bytes), used for the high of an unlimited container; 0 =
    unknown (no memory.high for an unlimited container)."""
    req, limit = container_request_limit(pod, container)
    min_ = _percent(req, cfg.min_limit_percent)
    low = _raise_low(min_, _percent(req, cfg.low_limit_percent))
    high: int | None = None
    pct = cfg.throttling_percent
    if pct is not None:
        if pct == 0:
            high = MAX_INT64
        else:
            ceiling = limit if limit > 0 else node_memory
            if ceiling > 0:
                high = _godiv(req + _godiv((ceiling - req) * pct, 100), PAGE_SIZE) * PAGE_SIZE
    if high is not None and min_ is not None and 0 < high < min_:
        high = min_
    return MemorySettings(min=min_, low=low, high=high, **_static(cfg))


def qos_settings(pods: list[tuple[Pod, MemoryQOSCfg]],
                 strategy: ResourceQOSStrategy) -> dict[KubeQOS, MemorySettings]:
    """QoS directories: Burstable/BestEffort min/low = Σ their pods, the root (Guaranteed dir) Σ all pods."""
    sums: dict[KubeQOS, list[int | None]] = {q: [None, None] for q in _QOS_ORDER}
    for pod, cfg in pods:
        req = pod_request_bytes(pod)
        acc = sums[pod.kube_qos]
        for i, pct in enumerate((cfg.min_limit_percent, cfg.low_limit_percent)):
            if pct is not None:
                acc[i] = (acc[i] or 0) + _godiv(req * pct, 100)
    for i in (0, 1):
        parts = [sums[q][i] for q in _QOS_ORDER if sums[q][i] is not None]
        if parts:
            sums[KubeQOS.GUARANTEED][i] = sum(parts)     # type: ignore[arg-type]
    out = {}
    for q in _QOS_ORDER:
        rq = strategy.for_kube_qos(q.value)
        cls = rq.memory_qos if rq is not None and rq.memory_qos is not None else MemoryQOSCfg()
        out[q] = MemorySettings(min=sums[q][0], low=sums[q][1], priority=cls.priority,
                                use_priority_oom=cls.priority_enable, oom_group=cls.oom_kill_group)
    return out


def node_allocatable_memory(allocatable: dict[str, str] | Any) -> int:
    raw = allocatable.get("memory") if allocatable else None
    if raw is None:
        return 0
    try:
        return int(parse_quantity(raw))
    except ValueError:
        return 0


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------

class MemoryQOS:
    """Upstream CgroupReconcile (memory QoS part)."""

    name = "memory-qos"

    def __init__(self, memory_total_bytes: int = 0) -> None:
        self._memory_total = memory_total_bytes
        self._bad = LogOnce(log, logging.WARNING)
        self._once = LogOnce(log, logging.INFO)

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        strategy = view.slo.resource_qos
        if strategy is None:
            self._once("no-config", "memory qos skipped: NodeSLO has no resourceQOSStrategy")
            return
        node_memory = node_allocatable_memory(view.node.allocatable) or self._memory_total
        if node_memory <= 0:
            self._once("no-memory", "memory qos: node allocatable memory unknown; containers without a memory "
                       "limit get no memory.high")
        layout = executor.cgroups.layout
        active: list[tuple[Pod, MemoryQOSCfg]] = []
        pod_level: list[Update | None] = []
        container_level: list[Update | None] = []
        bad: list[str] = []
        for meta in view.pods:
            pod = meta.pod
            if pod.phase not in _ACTIVE_PHASES:
                continue
            try:
                cfg = pod_memory_qos(pod, strategy)
            except DecodeError as e:
                cfg = class_memory_qos(strategy, pod.qos_class)
                bad.append(pod.uid)
                self._bad(pod.uid, "memory qos annotation ignored pod=%s annotation=%s problem=%s; using the %s "
                          "class config", pod.key, e.key, e.problem, pod.qos_class)
            active.append((pod, cfg))
            pod_level += pod_settings(pod, cfg).updates(executor, meta.cgroup_dir, pod_owner(meta))
            for container, rel in meta.containers:
                container_level += container_settings(pod, container, cfg, node_memory).updates(
                    executor, rel, f"container {pod.key}/{container.name}")
        self._bad.keep_only(bad)
        qos_level: list[Update | None] = []
        for q, settings in qos_settings(active, strategy).items():
            qos_level += settings.updates(executor, layout.qos_dir(q), f"qos {q.value.lower()}")
        executor.update_leveled([qos_level, pod_level, container_level])


__all__ = ["MemoryQOS", "MemorySettings", "NONE_MEMORY_QOS", "container_settings",
           "pod_memory_qos", "pod_settings", "qos_settings"]


PLUGIN = Plugin("memory-qos", lambda ctx: MemoryQOS(ctx.node.memory_bytes()), gates=("CgroupReconcile",),
                probe=host_probe(probes.memory_qos))
