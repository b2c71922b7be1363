"""The koordlet's NodeSLO defaults and the merge that turns a received spec into the effective one.

Upstream (``pkg/util/sloconfig/nodeslo_config.go``, ``pkg/koordlet/statesinformer/impl/states_nodeslo.go``): the
koordlet never uses a received ``NodeSLO.spec`` as is. Per section (threshold, QoS strategy, CPU burst, system,
extensions) it unmarshals the received value onto a fresh copy of ``sloconfig.DefaultNodeSLOSpecConfig()`` (the
overlay rules are ``koordlet.states.nodeslo.decoder``'s); ``hostApplications`` is taken as is. After the merge,
for the LSR, LS and BE classes (not SYSTEM), a cpuQOS / resctrlQOS / memoryQOS whose ``enable`` is false gets its
parameters replaced by the "None" values (``mergeNoneResourceQOSIfDisabled``). Since every default has
``enable: false``, an empty spec yields the None values for those features; the recommended defaults (group
identity 2/2/-1, BE L3 0-30%, ...) show through only once a feature is enabled.

``spec.extensions`` is passed through. Upstream keeps only keys that a plugin registered defaults for, and none
are registered, so the Go koordlet drops them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from koordlet.base import wire
from koordlet.states.nodeslo.decoder import DecodeContext, decode_obj, report
from koordlet.states.nodeslo.schema import (
    ABSENT,
    BlkIOQOSCfg,
    CPUBurstStrategy,
    CPUQOSCfg,
    MemoryQOSCfg,
    NetworkQOSCfg,
    NodeSLOSpec,
    ResctrlQOSCfg,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)

__all__ = [
    "DEFAULT_THRESHOLD", "DEFAULT_CPU_BURST", "DEFAULT_SYSTEM",
    "default_node_slo_spec", "merge_node_slo_spec", "node_slo_from_object", "object_name",
]


def _default_class(gi: int, expeller: bool, cat_end: int, wmark_ratio: int, wmark_scale: int,
                   wmark_min_adj: int) -> ResourceQOS:
    return ResourceQOS(
        cpu_qos=CPUQOSCfg(enable=False, group_identity=gi, sched_idle=0, core_expeller=expeller),
        memory_qos=MemoryQOSCfg(enable=False, min_limit_percent=0, low_limit_percent=0, throttling_percent=0,
                                wmark_ratio=wmark_ratio, wmark_scale_permill=wmark_scale,
                                wmark_min_adj=wmark_min_adj, priority_enable=0, priority=0, oom_kill_group=0),
        blkio_qos=BlkIOQOSCfg(enable=False),
        resctrl_qos=ResctrlQOSCfg(enable=False, cat_range_start_percent=0, cat_range_end_percent=cat_end,
                                  mba_percent=100),
        network_qos=NetworkQOSCfg(enable=False, ingress_request=0, ingress_limit=0, egress_request=0,
                                  egress_limit=0))


# DefaultResourceThresholdStrategy()
DEFAULT_THRESHOLD = ResourceThresholdStrategy(
    enable=False, cpu_suppress_threshold_percent=65, cpu_suppress_policy=wire.CPU_SUPPRESS_CPUSET,
    memory_evict_threshold_percent=70, cpu_evict_policy=wire.CPU_EVICT_BY_REAL_LIMIT)
# DefaultResourceQOSStrategy(): DefaultCPUQOS / DefaultResctrlQOS / DefaultMemoryQOS per class,
# NoneBlkIOQOS and NoneNetworkQOS everywhere, cgroupRoot with blkio only.
_DEFAULT_QOS = ResourceQOSStrategy(
    policies=ResourceQOSPolicies(cpu_policy=wire.CPU_POLICY_GROUP_IDENTITY, net_qos_policy=wire.NET_QOS_POLICY_TC),
    lsr=_default_class(gi=2, expeller=True, cat_end=100, wmark_ratio=95, wmark_scale=20, wmark_min_adj=-25),
    ls=_default_class(gi=2, expeller=True, cat_end=100, wmark_ratio=95, wmark_scale=20, wmark_min_adj=-25),
    be=_default_class(gi=-1, expeller=False, cat_end=30, wmark_ratio=95, wmark_scale=20, wmark_min_adj=50),
    system=_default_class(gi=0, expeller=False, cat_end=100, wmark_ratio=0, wmark_scale=50, wmark_min_adj=0),
    cgroup_root=ResourceQOS(blkio_qos=BlkIOQOSCfg(enable=False)))
# DefaultCPUBurstStrategy()
DEFAULT_CPU_BURST = CPUBurstStrategy(policy=wire.CPU_BURST_NONE, cpu_burst_percent=1000,
                                     cfs_quota_burst_percent=300, cfs_quota_burst_period_seconds=-1,
                                     share_pool_threshold_percent=50)
# DefaultSystemStrategy(): only totalNetworkBandwidth "0"; every sysctl is left unset.
DEFAULT_SYSTEM = SystemStrategy(total_network_bandwidth="0")
_DEFAULT_SPEC = NodeSLOSpec(resource_threshold=DEFAULT_THRESHOLD, resource_qos=_DEFAULT_QOS,
                            cpu_burst=DEFAULT_CPU_BURST, system=DEFAULT_SYSTEM,
                            extensions=MappingProxyType({}), host_applications=())

# NoneCPUQOS / NoneResctrlQOS / NoneMemoryQOS: what a disabled LSR/LS/BE feature is reset to.
def _none_cpu(c: CPUQOSCfg) -> CPUQOSCfg:
    return replace(c, group_identity=0, sched_idle=0, core_expeller=False)


def _none_resctrl(c: ResctrlQOSCfg) -> ResctrlQOSCfg:
    return replace(c, cat_range_start_percent=0, cat_range_end_percent=100, mba_percent=100)


def _none_memory(c: MemoryQOSCfg) -> MemoryQOSCfg:
    return replace(c, min_limit_percent=0, low_limit_percent=0, throttling_percent=0, wmark_ratio=0,
                   wmark_scale_permill=50, wmark_min_adj=0, priority_enable=0, priority=0, oom_kill_group=0,
                   page_cache_enable=None, page_cache_limit_percent=None, page_cache_limit_size=None,
                   page_cache_reclaim_sync=None)


def default_node_slo_spec() -> NodeSLOSpec:
    """Upstream ``DefaultNodeSLOSpecConfig()``: the base every received spec is merged onto (before the
    None substitution; ``merge_node_slo_spec(None)`` gives the effective spec of an empty NodeSLO)."""
    return _DEFAULT_SPEC


def _none_class_if_disabled(c: ResourceQOS | None) -> ResourceQOS | None:
    """One class: each disabled cpu / resctrl / memory QoS replaced by its None values (``c`` itself if none)."""
    if c is None:
        return None
    cpu, resctrl, memory = c.cpu_qos, c.resctrl_qos, c.memory_qos
    if cpu is not None and cpu.enable is False:
        cpu = _none_cpu(cpu)
    if resctrl is not None and resctrl.enable is False:
        resctrl = _none_resctrl(resctrl)
    if memory is not None and memory.enable is False:
        memory = _none_memory(memory)
    if cpu is c.cpu_qos and resctrl is c.resctrl_qos and memory is c.memory_qos:
        return c
    return replace(c, cpu_qos=cpu, resctrl_qos=resctrl, memory_qos=memory)


def _none_if_disabled(rq: ResourceQOSStrategy) -> ResourceQOSStrategy:
    """``mergeNoneResourceQOSIfDisabled``: LSR, LS and BE only; blkio and network are left alone."""
    lsr, ls, be = _none_class_if_disabled(rq.lsr), _none_class_if_disabled(rq.ls), _none_class_if_disabled(rq.be)
    if lsr is rq.lsr and ls is rq.ls and be is rq.be:
        return rq
    return replace(rq, lsr=lsr, ls=ls, be=be)


def merge_node_slo_spec(spec: Any, name: str = "") -> tuple[NodeSLOSpec, list[str]]:
    """The effective spec the koordlet works with, and one error string per rejected field.

    ``spec`` is a NodeSLO ``spec`` as decoded from JSON/YAML (or None). It is merged onto
    ``default_node_slo_spec()`` as upstream's ``mergeNodeSLOSpec`` does, then disabled LSR/LS/BE features get
    the None values. A malformed section is logged once (naming ``name``), falls back to its defaults, and
    leaves every other section applied.
    """
    what = f"NodeSLO {name or '<unnamed>'}"
    ctx = DecodeContext(check=True)
    merged = _DEFAULT_SPEC
    if spec is not None:
        value = decode_obj(NodeSLOSpec, spec, _DEFAULT_SPEC, "spec", ctx)
        if value is not ABSENT:
            merged = value
    if merged.resource_qos is not None:            # always: the defaults have one
        merged = replace(merged, resource_qos=_none_if_disabled(merged.resource_qos))
    return merged, report(ctx, what)


def node_slo_from_object(obj: Mapping[str, Any]) -> tuple[NodeSLOSpec, list[str]]:
    """``merge_node_slo_spec`` for a whole NodeSLO object (named by its ``metadata.name``)."""
    return merge_node_slo_spec(obj.get("spec"), object_name(obj))


def object_name(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` of an object, "" when missing or not a string (a name that is not a string is no name,
    and printing an arbitrary value could cost anything)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""
