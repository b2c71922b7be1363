"""NodeSLO: the spec model, the koordlet's defaults and merge, and a local file source for standalone/host mode.

Upstream facts (koordinator-sh/koordinator a7a1b76: ``pkg/koordlet/statesinformer/impl/states_nodeslo.go``,
``pkg/util/sloconfig/nodeslo_config.go``, ``apis/slo/v1alpha1/nodeslo_types.go``):

- The koordlet never uses a received ``NodeSLO.spec`` as is. Per section (threshold, QoS strategy, CPU burst,
  system, extensions) it marshals the received value and unmarshals it onto a fresh copy of
  ``sloconfig.DefaultNodeSLOSpecConfig()`` (``statesinformer/impl/states_nodeslo.go``). With Go's encoding/json
  that means: present keys override, nested objects merge, arrays and scalars replace, maps merge key by key.
  Because the received object is first decoded into typed Go structs and re-marshalled with ``omitempty``, an
  explicit ``null``, an empty list, an empty map and (for non-pointer strings) ``""`` all behave as *absent*.
  ``hostApplications`` is taken as is.
- After the merge, for the LSR, LS and BE classes (not SYSTEM), a cpuQOS / resctrlQOS / memoryQOS whose ``enable``
  is false gets its parameters replaced by the "None" values (``mergeNoneResourceQOSIfDisabled``). Since every
  default has ``enable: false``, an empty spec yields the None values for those features; the recommended
  defaults (group identity 2/2/-1, BE L3 0-30%, ...) show through only once a feature is enabled.
- Validation follows the ``validate:`` tags (checked upstream by the ConfigMap webhook) and the kubebuilder markers
  (checked by the API server) of ``apis/slo/v1alpha1/nodeslo_types.go``, plus the enum values the code knows.

Beyond upstream (documented differences):

- A malformed section (wrong type, out of range, unknown enum) falls back to its defaults with one error naming
  the NodeSLO, the field path and the problem; every other section still applies. Upstream either rejects the
  whole ConfigMap key (webhook / controller) or silently keeps half-decoded values.
- Paired limits (``*LowerPercent`` < ``*ThresholdPercent``, ``catRangeStartPercent`` < ``catRangeEndPercent``) are
  compared after the merge, only when both are set. The webhook also rejects one of a pair given alone, which
  would reject upstream's own defaults (``memoryEvictThresholdPercent`` 70 without a lower bound).
- ``spec.extensions`` (wire shape ``{"Object": {...}}``: ``ExtensionsMap`` is tagged ``json:",inline"``, which
  encoding/json ignores on a named map field) is passed through. Upstream keeps only keys that a plugin registered
  defaults for, and none are registered, so the Go koordlet drops them all.
- Host applications with an unknown ``qos`` / ``priority`` / ``cgroupPath.base`` are dropped with an error.
- ``to_wire()`` keeps quantities as written ("1000M"); Go would canonicalise them ("1G").
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import re
import reprlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeVar, overload

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.base.yamlfile import load_yaml
from koordlet.states import decode

log = logging.getLogger(__name__)

__all__ = [
    "CPUQOSCfg", "MemoryQOSCfg", "ResctrlQOSCfg", "IOCfg", "BlockCfg", "BlkIOQOSCfg", "NetworkQOSCfg",
    "ResourceQOS", "ResourceQOSPolicies", "ResourceQOSStrategy", "ResourceThresholdStrategy", "CPUBurstStrategy",
    "SystemStrategy", "CgroupPath", "HostApplicationStrategy", "HostApplicationSpec", "NodeSLOSpec",
    "default_node_slo_spec", "merge_node_slo_spec", "node_slo_from_object", "match_label_selector",
    "SLOControllerConfig", "NodeSLOFile", "NodeSLOFileError",
]

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)


class _Absent:
    """Marker: 'leave the base value alone' (absent, null, empty, or rejected)."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Any = _Absent()


_Kind = Literal["int", "bool", "str", "enum", "quantity", "intorstr", "boolmap", "ext", "obj", "list"]
_T = TypeVar("_T")


@dataclass(frozen=True)
class _W:
    """How one field travels on the wire and how upstream checks it."""
    wire: str
    kind: _Kind
    lo: int | None = None          # inclusive bounds (validate min/max, kubebuilder Minimum/Maximum)
    hi: int | None = None
    gt: int | None = None          # exclusive lower bound (validate gt)
    int32: bool = False
    enum: tuple[str, ...] = ()
    cls: Any = None                # element / nested type for obj and list
    empty_absent: bool = False     # Go non-pointer string with omitempty: "" is the same as unset


# _f declares a field (default None = unset) with its wire schema. The overloads give each kind the Python type
# it decodes to, so mypy checks every field's annotation against its kind (an "int" field typed str, or an "obj"
# of another class, is an error). "list" fields use field(default=()) with an explicit _W.
@overload
def _f(wire_name: str, kind: Literal["int"], *, lo: int | None = None, hi: int | None = None,
       gt: int | None = None, int32: bool = False) -> int | None: ...
@overload
def _f(wire_name: str, kind: Literal["bool"]) -> bool | None: ...
@overload
def _f(wire_name: str, kind: Literal["str", "quantity"], *, empty_absent: bool = False) -> str | None: ...
@overload
def _f(wire_name: str, kind: Literal["enum"], *, enum: tuple[str, ...], empty_absent: bool = False) -> str | None: ...
@overload
def _f(wire_name: str, kind: Literal["intorstr"]) -> int | str | None: ...
@overload
def _f(wire_name: str, kind: Literal["boolmap"]) -> Mapping[str, bool] | None: ...
@overload
def _f(wire_name: str, kind: Literal["ext"]) -> Mapping[str, Any] | None: ...
@overload
def _f(wire_name: str, kind: Literal["obj"], *, cls: type[_T]) -> _T | None: ...
def _f(wire_name: str, kind: _Kind, **kw: Any) -> Any:
    return field(default=None, metadata={"w": _W(wire_name, kind, **kw)})


_SCHEMAS: dict[type, tuple[tuple[str, _W], ...]] = {}
_BY_WIRE: dict[type, dict[str, tuple[str, _W]]] = {}


class _Wire:
    """Base of every spec type: declarative wire schema, ``to_wire`` with Go ``omitempty`` semantics."""

    # A section is the unit of fallback: one bad field inside it sends the whole section back to its defaults.
    _section: ClassVar[bool] = False
    # (lower attr, upper attr): lower < upper when both are set (validate ltfield/gtfield).
    _pairs: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def _schema(cls) -> tuple[tuple[str, _W], ...]:
        s = _SCHEMAS.get(cls)
        if s is None:
            s = _SCHEMAS[cls] = tuple((f.name, f.metadata["w"]) for f in fields(cls))  # type: ignore[arg-type]
            _BY_WIRE[cls] = {w.wire: (name, w) for name, w in s}
        return s

    @classmethod
    def _by_wire(cls) -> dict[str, tuple[str, _W]]:
        cls._schema()
        return _BY_WIRE[cls]

    @classmethod
    def _wire_name(cls, attr: str) -> str:
        return next(w.wire for name, w in cls._schema() if name == attr)

    def to_wire(self) -> dict[str, Any]:
        """The upstream JSON shape (camelCase keys); unset fields are omitted as Go's ``omitempty`` does."""
        out: dict[str, Any] = {}
        for name, w in self._schema():
            value = _value_to_wire(w, getattr(self, name))
            if value is not _ABSENT:
                out[w.wire] = value
        return out


def _value_to_wire(w: _W, v: Any) -> Any:
    if v is None:
        return _ABSENT
    if w.kind == "obj":
        return v.to_wire()
    if w.kind == "list":
        return [e.to_wire() for e in v] if v else _ABSENT
    if w.kind == "boolmap":
        return dict(v) if v else _ABSENT
    if w.kind == "ext":
        return {"Object": copy.deepcopy(dict(v))} if v else _ABSENT
    return v


# --------------------------------------------------------------------------------------------------------------
# The spec types (apis/slo/v1alpha1/nodeslo_types.go). None means "unset" (a nil pointer upstream).

@dataclass(frozen=True)
class CPUQOSCfg(_Wire):
    _section = True
    enable: bool | None = _f("enable", "bool")
    group_identity: int | None = _f("groupIdentity", "int", lo=-1, hi=2)
    sched_idle: int | None = _f("schedIdle", "int", lo=0, hi=1)
    core_expeller: bool | None = _f("coreExpeller", "bool")


@dataclass(frozen=True)
class MemoryQOSCfg(_Wire):
    _section = True
    enable: bool | None = _f("enable", "bool")
    min_limit_percent: int | None = _f("minLimitPercent", "int", lo=0, hi=100)
    low_limit_percent: int | None = _f("lowLimitPercent", "int", lo=0, hi=100)
    throttling_percent: int | None = _f("throttlingPercent", "int", lo=0, hi=100)
    wmark_ratio: int | None = _f("wmarkRatio", "int", lo=0, hi=100)
    wmark_scale_permill: int | None = _f("wmarkScalePermill", "int", lo=1, hi=1000)
    wmark_min_adj: int | None = _f("wmarkMinAdj", "int", lo=-25, hi=50)
    priority_enable: int | None = _f("priorityEnable", "int", lo=0, hi=1)
    priority: int | None = _f("priority", "int", lo=0, hi=12)
    oom_kill_group: int | None = _f("oomKillGroup", "int", lo=0, hi=1)
    page_cache_enable: bool | None = _f("pageCacheEnable", "bool")
    page_cache_limit_percent: int | None = _f("pageCacheLimitPercent", "int", lo=0, hi=100)
    page_cache_limit_size: int | None = _f("pageCacheLimitSize", "int")      # bytes; upstream sets no bound
    page_cache_reclaim_sync: bool | None = _f("pageCacheReclaimSync", "bool")


@dataclass(frozen=True)
class ResctrlQOSCfg(_Wire):
    _section = True
    _pairs = (("cat_range_start_percent", "cat_range_end_percent"),)
    enable: bool | None = _f("enable", "bool")
    cat_range_start_percent: int | None = _f("catRangeStartPercent", "int", lo=0, hi=100)
    cat_range_end_percent: int | None = _f("catRangeEndPercent", "int", lo=0, hi=100)
    mba_percent: int | None = _f("mbaPercent", "int", lo=0, hi=100)


@dataclass(frozen=True)
class IOCfg(_Wire):
    read_iops: int | None = _f("readIOPS", "int", lo=0)
    write_iops: int | None = _f("writeIOPS", "int", lo=0)
    read_bps: int | None = _f("readBPS", "int", lo=0)
    write_bps: int | None = _f("writeBPS", "int", lo=0)
    io_weight_percent: int | None = _f("ioWeightPercent", "int", lo=1, hi=100)
    read_latency: int | None = _f("readLatency", "int")                     # microseconds
    write_latency: int | None = _f("writeLatency", "int")
    read_latency_percent: int | None = _f("readLatencyPercent", "int", lo=0, hi=100)
    write_latency_percent: int | None = _f("writeLatencyPercent", "int", lo=0, hi=100)
    enable_user_model: bool | None = _f("enableUserModel", "bool")
    model_read_bps: int | None = _f("modelReadBPS", "int", lo=1)
    model_write_bps: int | None = _f("modelWriteBPS", "int", lo=1)
    model_read_seq_iops: int | None = _f("modelReadSeqIOPS", "int", lo=1)
    model_write_seq_iops: int | None = _f("modelWriteSeqIOPS", "int", lo=1)
    model_read_rand_iops: int | None = _f("modelReadRandIOPS", "int", lo=1)
    model_write_rand_iops: int | None = _f("modelWriteRandIOPS", "int", lo=1)


@dataclass(frozen=True)
class BlockCfg(_Wire):
    name: str | None = _f("name", "str", empty_absent=True)
    block_type: str | None = _f("type", "enum", empty_absent=True, enum=(
        wire.BLOCK_TYPE_DEVICE, wire.BLOCK_TYPE_VOLUME_GROUP, wire.BLOCK_TYPE_POD_VOLUME))
    io_cfg: IOCfg | None = _f("ioCfg", "obj", cls=IOCfg)


@dataclass(frozen=True)
class BlkIOQOSCfg(_Wire):
    _section = True
    enable: bool | None = _f("enable", "bool")
    blocks: tuple[BlockCfg, ...] = field(default=(), metadata={"w": _W("blocks", "list", cls=BlockCfg)})


@dataclass(frozen=True)
class NetworkQOSCfg(_Wire):
    """Each value is an int (percent of the total bandwidth, 0-100) or a quantity string (bits/s)."""
    _section = True
    enable: bool | None = _f("enable", "bool")
    ingress_request: int | str | None = _f("ingressRequest", "intorstr")
    ingress_limit: int | str | None = _f("ingressLimit", "intorstr")
    egress_request: int | str | None = _f("egressRequest", "intorstr")
    egress_limit: int | str | None = _f("egressLimit", "intorstr")


@dataclass(frozen=True)
class ResourceQOS(_Wire):
    cpu_qos: CPUQOSCfg | None = _f("cpuQOS", "obj", cls=CPUQOSCfg)
    memory_qos: MemoryQOSCfg | None = _f("memoryQOS", "obj", cls=MemoryQOSCfg)
    blkio_qos: BlkIOQOSCfg | None = _f("blkioQOS", "obj", cls=BlkIOQOSCfg)
    resctrl_qos: ResctrlQOSCfg | None = _f("resctrlQOS", "obj", cls=ResctrlQOSCfg)
    network_qos: NetworkQOSCfg | None = _f("networkQOS", "obj", cls=NetworkQOSCfg)


@dataclass(frozen=True)
class ResourceQOSPolicies(_Wire):
    """``""`` is kept as given: the group-identity hook reads it as groupIdentity, the tc hook as "not tc"."""
    _section = True
    cpu_policy: str | None = _f("cpuPolicy", "enum", enum=(
        wire.CPU_POLICY_GROUP_IDENTITY, wire.CPU_POLICY_CORE_SCHED, ""))
    net_qos_policy: str | None = _f("netQOSPolicy", "enum", enum=(
        wire.NET_QOS_POLICY_TC, wire.NET_QOS_POLICY_TERWAY, ""))


@dataclass(frozen=True)
class ResourceQOSStrategy(_Wire):
    policies: ResourceQOSPolicies | None = _f("policies", "obj", cls=ResourceQOSPolicies)
    lsr: ResourceQOS | None = _f("lsrClass", "obj", cls=ResourceQOS)
    ls: ResourceQOS | None = _f("lsClass", "obj", cls=ResourceQOS)
    be: ResourceQOS | None = _f("beClass", "obj", cls=ResourceQOS)
    system: ResourceQOS | None = _f("systemClass", "obj", cls=ResourceQOS)
    cgroup_root: ResourceQOS | None = _f("cgroupRoot", "obj", cls=ResourceQOS)   # used only for blkioQOS

    def for_qos_class(self, qos: str) -> ResourceQOS | None:
        """Config of a koordinator QoS class; LSE shares LSR's (qosmanager/helpers/property.go)."""
        return {wire.QOS_LSE: self.lsr, wire.QOS_LSR: self.lsr, wire.QOS_LS: self.ls, wire.QOS_BE: self.be,
                wire.QOS_SYSTEM: self.system}.get(qos)

    def for_kube_qos(self, kube_qos: str) -> ResourceQOS | None:
        """Config for a Kubernetes QoS directory: Guaranteed->LSR, Burstable->LS, BestEffort->BE."""
        return {wire.KUBE_GUARANTEED: self.lsr, wire.KUBE_BURSTABLE: self.ls,
                wire.KUBE_BESTEFFORT: self.be}.get(kube_qos)


@dataclass(frozen=True)
class ResourceThresholdStrategy(_Wire):
    _section = True
    _pairs = (("memory_evict_lower_percent", "memory_evict_threshold_percent"),
              ("memory_allocatable_evict_lower_percent", "memory_allocatable_evict_threshold_percent"),
              ("cpu_evict_be_satisfaction_lower_percent", "cpu_evict_be_satisfaction_upper_percent"),
              ("cpu_evict_lower_percent", "cpu_evict_threshold_percent"),
              ("cpu_allocatable_evict_lower_percent", "cpu_allocatable_evict_threshold_percent"))
    enable: bool | None = _f("enable", "bool")
    cpu_suppress_threshold_percent: int | None = _f("cpuSuppressThresholdPercent", "int", lo=0, hi=100)
    cpu_suppress_min_percent: int | None = _f("cpuSuppressMinPercent", "int", lo=0, hi=100)
    cpu_suppress_policy: str | None = _f("cpuSuppressPolicy", "enum", empty_absent=True, enum=(
        wire.CPU_SUPPRESS_CPUSET, wire.CPU_SUPPRESS_CFS_QUOTA))
    memory_evict_threshold_percent: int | None = _f("memoryEvictThresholdPercent", "int", lo=0, hi=100)
    memory_evict_lower_percent: int | None = _f("memoryEvictLowerPercent", "int", lo=0, hi=100)
    memory_allocatable_evict_threshold_percent: int | None = _f(
        "memoryAllocatableEvictThresholdPercent", "int", lo=0)
    memory_allocatable_evict_lower_percent: int | None = _f("memoryAllocatableEvictLowerPercent", "int", lo=0)
    cpu_evict_be_satisfaction_upper_percent: int | None = _f(
        "cpuEvictBESatisfactionUpperPercent", "int", lo=0, hi=100)
    cpu_evict_be_satisfaction_lower_percent: int | None = _f(
        "cpuEvictBESatisfactionLowerPercent", "int", lo=0, hi=100)
    cpu_evict_be_usage_threshold_percent: int | None = _f("cpuEvictBEUsageThresholdPercent", "int", lo=0, hi=100)
    cpu_evict_time_window_seconds: int | None = _f("cpuEvictTimeWindowSeconds", "int", gt=0)
    cpu_evict_threshold_percent: int | None = _f("cpuEvictThresholdPercent", "int", lo=0, hi=100)
    cpu_evict_lower_percent: int | None = _f("cpuEvictLowerPercent", "int", lo=0, hi=100)
    cpu_allocatable_evict_threshold_percent: int | None = _f("cpuAllocatableEvictThresholdPercent", "int", lo=0)
    cpu_allocatable_evict_lower_percent: int | None = _f("cpuAllocatableEvictLowerPercent", "int", lo=0)
    cpu_evict_policy: str | None = _f("cpuEvictPolicy", "enum", empty_absent=True, enum=(
        wire.CPU_EVICT_BY_REAL_LIMIT, wire.CPU_EVICT_BY_ALLOCATABLE))
    evict_enabled_priority_threshold: int | None = _f("evictEnabledPriorityThreshold", "int", int32=True)
    allocatable_evict_priority_threshold: int | None = _f(
        "allocatableEvictPriorityThreshold", "int", int32=True, lo=0, hi=7999)


@dataclass(frozen=True)
class CPUBurstStrategy(_Wire):
    _section = True
    policy: str | None = _f("policy", "enum", empty_absent=True, enum=(
        wire.CPU_BURST_NONE, wire.CPU_BURST_ONLY, wire.CFS_QUOTA_BURST_ONLY, wire.CPU_BURST_AUTO))
    cpu_burst_percent: int | None = _f("cpuBurstPercent", "int", lo=1, hi=10000)
    cfs_quota_burst_percent: int | None = _f("cfsQuotaBurstPercent", "int", lo=100)
    cfs_quota_burst_period_seconds: int | None = _f("cfsQuotaBurstPeriodSeconds", "int", lo=-1)
    share_pool_threshold_percent: int | None = _f("sharePoolThresholdPercent", "int", lo=0, hi=100)


@dataclass(frozen=True)
class SystemStrategy(_Wire):
    _section = True
    min_free_kbytes_factor: int | None = _f("minFreeKbytesFactor", "int", gt=0)
    watermark_scale_factor: int | None = _f("watermarkScaleFactor", "int", gt=0, hi=400)
    memcg_reap_background: int | None = _f("memcgReapBackGround", "int", lo=0, hi=1)
    sched_group_identity_enabled: int | None = _f("schedGroupIdentityEnabled", "int", lo=0, hi=1)
    sched_idle_saver_wmark: int | None = _f("schedIdleSaverWmark", "int")          # nanoseconds
    sched_features: Mapping[str, bool] | None = _f("schedFeatures", "boolmap")
    page_cache_limit_enabled: int | None = _f("pageCacheLimitEnabled", "int", lo=0, hi=1)
    total_network_bandwidth: str | None = _f("totalNetworkBandwidth", "quantity")

    @property
    def total_network_bandwidth_value(self) -> int:
        """``totalNetworkBandwidth`` in base units (rounded down); 0 when unset."""
        if self.total_network_bandwidth is None:
            return 0
        q = parse_quantity(self.total_network_bandwidth)
        return q.numerator // q.denominator


@dataclass(frozen=True)
class CgroupPath(_Wire):
    base: str | None = _f("base", "enum", empty_absent=True, enum=(
        wire.CGROUP_BASE_ROOT, wire.CGROUP_BASE_KUBEPODS, wire.CGROUP_BASE_KUBE_BURSTABLE,
        wire.CGROUP_BASE_KUBE_BESTEFFORT))
    parent_dir: str | None = _f("parentDir", "str", empty_absent=True)
    relative_path: str | None = _f("relativePath", "str", empty_absent=True)


@dataclass(frozen=True)
class HostApplicationStrategy(_Wire):
    """Empty upstream (a placeholder struct)."""


@dataclass(frozen=True)
class HostApplicationSpec(_Wire):
    _section = True
    name: str | None = _f("name", "str", empty_absent=True)
    priority: str | None = _f("priority", "enum", empty_absent=True, enum=(
        wire.PRIORITY_PROD, wire.PRIORITY_MID, wire.PRIORITY_BATCH, wire.PRIORITY_FREE))
    qos: str | None = _f("qos", "enum", empty_absent=True, enum=wire.QOS_CLASSES)
    cgroup_path: CgroupPath | None = _f("cgroupPath", "obj", cls=CgroupPath)
    strategy: HostApplicationStrategy | None = _f("strategy", "obj", cls=HostApplicationStrategy)


@dataclass(frozen=True)
class NodeSLOSpec(_Wire):
    """A NodeSLO spec. After ``merge_node_slo_spec`` every section is present (defaults filled in)."""
    resource_threshold: ResourceThresholdStrategy | None = _f(
        "resourceUsedThresholdWithBE", "obj", cls=ResourceThresholdStrategy)
    resource_qos: ResourceQOSStrategy | None = _f("resourceQOSStrategy", "obj", cls=ResourceQOSStrategy)
    cpu_burst: CPUBurstStrategy | None = _f("cpuBurstStrategy", "obj", cls=CPUBurstStrategy)
    system: SystemStrategy | None = _f("systemStrategy", "obj", cls=SystemStrategy)
    extensions: Mapping[str, Any] | None = _f("extensions", "ext")
    host_applications: tuple[HostApplicationSpec, ...] = field(
        default=(), metadata={"w": _W("hostApplications", "list", cls=HostApplicationSpec)})


# --------------------------------------------------------------------------------------------------------------
# Defaults (pkg/util/sloconfig/nodeslo_config.go).

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
_DEFAULT_THRESHOLD = ResourceThresholdStrategy(
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
_DEFAULT_CPU_BURST = CPUBurstStrategy(policy=wire.CPU_BURST_NONE, cpu_burst_percent=1000,
                                      cfs_quota_burst_percent=300, cfs_quota_burst_period_seconds=-1,
                                      share_pool_threshold_percent=50)
# DefaultSystemStrategy(): only totalNetworkBandwidth "0"; every sysctl is left unset.
_DEFAULT_SYSTEM = SystemStrategy(total_network_bandwidth="0")
_DEFAULT_SPEC = NodeSLOSpec(resource_threshold=_DEFAULT_THRESHOLD, resource_qos=_DEFAULT_QOS,
                            cpu_burst=_DEFAULT_CPU_BURST, system=_DEFAULT_SYSTEM,
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


# --------------------------------------------------------------------------------------------------------------
# Decoding: JSON/YAML value merged onto a typed base, Go encoding/json semantics plus upstream's validation.

@dataclass
class _Err:
    path: str
    problem: str
    section: str | None = None
    dropped: bool = False


class _Ctx:
    def __init__(self, check: bool) -> None:
        self.check = check               # False: type errors only (what Go's json.Unmarshal itself rejects)
        self.errors: list[_Err] = []
        self.warnings: list[tuple[str, str]] = []        # (path, reason): ignored, not errors

    def bad(self, path: str, problem: str) -> Any:
        self.errors.append(_Err(path, problem))
        return _ABSENT

    def claim(self, mark: int, section: str) -> None:
        """Errors since ``mark`` not yet owned by an inner section belong to ``section``."""
        for e in self.errors[mark:]:
            if e.section is None:
                e.section = section


_SHOW_NODES = 256            # a value with more nodes than this is shown by a bounded repr, not json.dumps
_SHOW_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHOW_REPR.maxlevel = 3
_SHOW_REPR.maxdict = _SHOW_REPR.maxlist = _SHOW_REPR.maxtuple = _SHOW_REPR.maxset = _SHOW_REPR.maxfrozenset = 4
_SHOW_REPR.maxstring = _SHOW_REPR.maxlong = _SHOW_REPR.maxother = 60
EXT_MAX_DEPTH = 64           # nesting accepted inside spec.extensions.Object (the only raw JSON the spec keeps)


def _nodes_within(v: Any, limit: int) -> bool:
    """Whether ``v`` has at most ``limit`` nodes (values, containers and keys), found by looking at no more."""
    stack, seen = [v], 0
    while stack:
        seen += 1
        if seen > limit:
            return False
        x = stack.pop()
        if isinstance(x, Mapping):
            stack.extend(itertools.islice(itertools.chain.from_iterable(x.items()), limit))
        elif isinstance(x, (list, tuple)):
            stack.extend(x[:limit])
    return True


def _depth_within(v: Any, limit: int) -> bool:
    """Whether ``v`` nests at most ``limit`` lists/objects deep (iterative: a value nested thousands of levels
    deep is answered, not a RecursionError)."""
    stack = [(v, 1)]
    while stack:
        x, level = stack.pop()
        if isinstance(x, Mapping):
            children: Any = x.values()
        elif isinstance(x, (list, tuple)):
            children = x
        else:
            continue
        if level > limit:
            return False
        stack.extend((c, level + 1) for c in children)
    return True


def _show(v: Any) -> str:
    """``<kind> <JSON text>`` cut to 60 characters for an error message; costs little whatever the value's size
    or depth (a large value is rendered by a bounded repr instead of JSON)."""
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object",
            type(None): "null"}.get(type(v), type(v).__name__)
    try:
        text = json.dumps(v) if _nodes_within(v, _SHOW_NODES) else _SHOW_REPR.repr(v)
    except (TypeError, ValueError):            # not JSON (a YAML timestamp, bytes), or an int json cannot print
        try:
            text = _SHOW_REPR.repr(v)
        except ValueError:                      # an int of more digits than str() converts
            text = "..."
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}"


def _decode_value(w: _W, raw: Any, cur: Any, path: str, ctx: _Ctx) -> Any:
    kind = w.kind
    if kind == "obj":
        return _decode_obj(w.cls, raw, cur, path, ctx)
    if kind == "list":
        return _decode_list(w, raw, path, ctx)
    if kind == "bool":
        if not isinstance(raw, bool):
            return ctx.bad(path, f"expected true or false, got {_show(raw)}")
        return raw
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            return ctx.bad(path, f"expected an integer, got {_show(raw)}")
        lo, hi = _INT32 if w.int32 else _INT64
        if not lo <= raw <= hi:
            return ctx.bad(path, f"{raw} does not fit in {'int32' if w.int32 else 'int64'}")
        if ctx.check:
            if w.lo is not None and w.hi is not None and not w.lo <= raw <= w.hi:
                return ctx.bad(path, f"must be between {w.lo} and {w.hi}, got {raw}")
            if w.lo is not None and raw < w.lo:
                return ctx.bad(path, f"must be at least {w.lo}, got {raw}")
            if w.hi is not None and raw > w.hi:
                return ctx.bad(path, f"must be at most {w.hi}, got {raw}")
            if w.gt is not None and raw <= w.gt:
                return ctx.bad(path, f"must be greater than {w.gt}, got {raw}")
        return raw
    if kind in ("str", "enum"):
        if not isinstance(raw, str):
            return ctx.bad(path, f"expected a string, got {_show(raw)}")
        if raw == "" and w.empty_absent:
            return _ABSENT
        if kind == "enum" and ctx.check and raw not in w.enum:
            allowed = ", ".join(repr(e) for e in w.enum)
            return ctx.bad(path, f"unknown value {raw!r:.80}, expected one of {allowed}")
        return raw
    if kind == "quantity":
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            return ctx.bad(path, f"expected a quantity such as \"10G\", got {_show(raw)}")
        try:
            parse_quantity(raw)
        except ValueError as e:
            return ctx.bad(path, str(e))
        return str(raw)
    if kind == "intorstr":
        if isinstance(raw, str):
            if ctx.check:
                try:
                    parse_quantity(raw)
                except ValueError as e:
                    return ctx.bad(path, str(e))
            return raw
        if isinstance(raw, bool) or not isinstance(raw, int):
            return ctx.bad(path, f"expected a percent (integer) or a quantity string, got {_show(raw)}")
        if not _INT32[0] <= raw <= _INT32[1]:
            return ctx.bad(path, f"{raw} does not fit in int32")
        if ctx.check and not 0 <= raw <= 100:
            return ctx.bad(path, f"an integer is a percentage and must be between 0 and 100, got {raw}")
        return raw
    if kind == "boolmap":
        if not isinstance(raw, Mapping):
            return ctx.bad(path, f"expected an object of name: true|false, got {_show(raw)}")
        merged = dict(cur or {})
        ok = True
        for k, v in raw.items():
            if not isinstance(k, str) or not isinstance(v, bool):
                ctx.bad(f"{path}.{k}", f"expected true or false, got {_show(v)}")
                ok = False
            else:
                merged[k] = v
        if not ok:
            return _ABSENT
        return MappingProxyType(merged) if raw else _ABSENT
    if kind == "ext":
        if not isinstance(raw, Mapping):
            return ctx.bad(path, f"expected an object, got {_show(raw)}")
        for k in raw:
            if k != "Object":
                ctx.warnings.append((f"{path}.{k}", "unknown field; extensions travel under \"Object\""))
        obj = raw.get("Object")
        if obj is None:
            return _ABSENT
        if not isinstance(obj, Mapping):
            return ctx.bad(f"{path}.Object", f"expected an object, got {_show(obj)}")
        if not obj:
            return _ABSENT
        if not _depth_within(obj, EXT_MAX_DEPTH):     # copied and compared recursively below and later
            return ctx.bad(f"{path}.Object", f"nested deeper than {EXT_MAX_DEPTH} levels")
        merged = dict(cur or {})
        merged.update(copy.deepcopy(dict(obj)))
        return MappingProxyType(merged)
    raise AssertionError(f"unknown field kind {kind}")


def _decode_list(w: _W, raw: Any, path: str, ctx: _Ctx) -> Any:
    """Arrays replace the base; an element section that is bad is dropped, a bad plain element fails the list."""
    if not isinstance(raw, list):
        return ctx.bad(path, f"expected a list, got {_show(raw)}")
    if not raw:
        return _ABSENT
    items = []
    for i, element in enumerate(raw):
        sub = f"{path}[{i}]"
        mark = len(ctx.errors)
        value = _decode_obj(w.cls, element, None, sub, ctx)
        if w.cls._section and len(ctx.errors) > mark:
            for e in ctx.errors[mark:]:          # the element is the section: it is dropped, not defaulted
                e.section, e.dropped = sub, True
            continue
        if value is not _ABSENT:
            items.append(value)
    return tuple(items)


def _decode_obj(cls: Any, raw: Any, cur: Any, path: str, ctx: _Ctx) -> Any:
    """``raw`` merged onto ``cur`` (or onto an empty ``cls``); _ABSENT when rejected, so the caller keeps
    ``cur``: a section with any bad field falls back as a whole."""
    if not isinstance(raw, Mapping):
        return ctx.bad(path, f"expected an object, got {_show(raw)}")
    base = cur if cur is not None else cls()
    mark = len(ctx.errors)
    changes: dict[str, Any] = {}
    by_wire = cls._by_wire()
    for key, value in raw.items():
        entry = by_wire.get(key)
        if entry is None:
            ctx.warnings.append((f"{path}.{key}", "unknown field"))
            continue
        if value is None:                      # null is the same as absent (see the module docstring)
            continue
        name, w = entry
        new = _decode_value(w, value, getattr(base, name), f"{path}.{key}", ctx)
        if new is not _ABSENT:
            changes[name] = new
    out = replace(base, **changes) if changes else base
    if ctx.check and len(ctx.errors) == mark:
        for lower, upper in cls._pairs:
            lv, uv = getattr(out, lower), getattr(out, upper)
            if lv is not None and uv is not None and not lv < uv:
                ctx.bad(f"{path}.{cls._wire_name(lower)}",
                        f"must be less than {cls._wire_name(upper)} ({uv}), got {lv}")
    if cls._section and len(ctx.errors) > mark:
        ctx.claim(mark, path)
        return _ABSENT
    return out


def _report(ctx: _Ctx, what: str) -> list[str]:
    """One log line per rejected section (and per ignored field); one error string per problem."""
    for path, reason in ctx.warnings:
        log.warning("%s field ignored path=%s reason=%s", what, path, reason)
    errors: list[str] = []
    by_section: dict[str, list[_Err]] = {}
    for e in ctx.errors:
        if e.section is None:
            e.section = e.path
        by_section.setdefault(e.section, []).append(e)
        outcome = "entry dropped" if e.dropped else f"{e.section} falls back to its defaults"
        errors.append(f"{what}: {e.path}: {e.problem}; {outcome}")
    for section, errs in by_section.items():
        outcome = "entry dropped" if errs[0].dropped else "using its defaults"
        log.error("%s section rejected section=%s problems=%s; %s", what, section,
                  "; ".join(f"{e.path}: {e.problem}" for e in errs), outcome)
    return errors


def merge_node_slo_spec(spec: Any, name: str = "") -> tuple[NodeSLOSpec, list[str]]:
    """The effective spec the koordlet works with, and one error string per rejected field.

    ``spec`` is a NodeSLO ``spec`` as decoded from JSON/YAML (or None). It is merged onto
    ``default_node_slo_spec()`` as upstream's ``mergeNodeSLOSpec`` does, then disabled LSR/LS/BE features get
    the None values. A malformed section is logged once (naming ``name``), falls back to its defaults, and
    leaves every other section applied.
    """
    what = f"NodeSLO {name or '<unnamed>'}"
    ctx = _Ctx(check=True)
    merged = _DEFAULT_SPEC
    if spec is not None:
        value = _decode_obj(NodeSLOSpec, spec, _DEFAULT_SPEC, "spec", ctx)
        if value is not _ABSENT:
            merged = value
    if merged.resource_qos is not None:            # always: the defaults have one
        merged = replace(merged, resource_qos=_none_if_disabled(merged.resource_qos))
    return merged, _report(ctx, what)


def node_slo_from_object(obj: Mapping[str, Any]) -> tuple[NodeSLOSpec, list[str]]:
    """``merge_node_slo_spec`` for a whole NodeSLO object (named by its ``metadata.name``)."""
    return merge_node_slo_spec(obj.get("spec"), _object_name(obj))


def _object_name(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` of an object, "" when missing or not a string (a name that is not a string is no name,
    and printing an arbitrary value could cost anything)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


# --------------------------------------------------------------------------------------------------------------
# Label selectors (metav1.LabelSelectorAsSelector + labels.Selector.Matches).

_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def overlay(cls: type[_T], raw: Mapping[str, Any], base: _T, path: str) -> tuple[_T, str | None]:
    """``raw`` (a decoded JSON object) overlaid on ``base`` with the NodeSLO decoder's rules and range checks, as
    the pod-level overrides (``koordinator.sh/cpuBurst``, ``memoryQOS``) are: (value, None), or (base, problem)."""
    ctx = _Ctx(check=True)
    value: _T = _decode_obj(cls, raw, base, path, ctx)
    if ctx.errors:
        return base, "; ".join(f"{e.path}: {e.problem}" for e in ctx.errors)
    return value, None


def _check_label_key(key: str) -> None:
    parts = key.split("/")
    if len(parts) > 2:
        raise ValueError(f"label key {key!r}: at most one '/' allowed")
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            raise ValueError(f"label key {key!r}: prefix must be a DNS subdomain")
    name = parts[-1]
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"label key {key!r}: name must be 1-63 alphanumerics, '-', '_' or '.', "
                         "starting and ending with an alphanumeric")


def _check_label_value(key: str, value: str) -> None:
    if len(value) > 63 or (value and not _LABEL_NAME.fullmatch(value)):
        raise ValueError(f"label {key!r}: invalid value {value!r}")


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a metav1.LabelSelector. Like upstream, a missing (None) selector matches
    nothing and an empty one matches everything. ValueError for an invalid selector (upstream skips such a
    strategy)."""
    if selector is None:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    ok = True
    for key, value in match_labels.items():
        _check_label_key(key)
        _check_label_value(key, value)
        ok = ok and labels.get(key) == value
    for expr in expressions:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        _check_label_key(key)
        if op not in _OPERATORS:
            raise ValueError(f"{op!r} is not a valid label selector operator (expected one of "
                             f"{', '.join(_OPERATORS)})")
        if op in ("In", "NotIn"):
            if not values:
                raise ValueError(f"label {key!r}: operator {op} needs at least one value")
            for v in values:
                _check_label_value(key, v)
        elif values:
            raise ValueError(f"label {key!r}: operator {op} takes no values")
        if op == "In":
            ok = ok and key in labels and labels[key] in values
        elif op == "NotIn":
            ok = ok and (key not in labels or labels[key] not in values)
        elif op == "Exists":
            ok = ok and key in labels
        else:
            ok = ok and key not in labels
    return ok


def _check_selector_types(sel: Any, path: str, ctx: _Ctx) -> None:
    """The type checks Go's json.Unmarshal does on a metav1.LabelSelector (a failure rejects the whole key)."""
    if sel is None:
        return
    if not isinstance(sel, Mapping):
        ctx.bad(path, f"expected an object, got {_show(sel)}")
        return
    for k in sel:
        if k not in ("matchLabels", "matchExpressions"):
            ctx.warnings.append((f"{path}.{k}", "unknown field"))
    labels = sel.get("matchLabels")
    if labels is not None:
        if not isinstance(labels, Mapping):
            ctx.bad(f"{path}.matchLabels", f"expected an object, got {_show(labels)}")
        else:
            for k, v in labels.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    ctx.bad(f"{path}.matchLabels.{k}", f"expected a string, got {_show(v)}")
    exprs = sel.get("matchExpressions")
    if exprs is None:
        return
    if not isinstance(exprs, list):
        ctx.bad(f"{path}.matchExpressions", f"expected a list, got {_show(exprs)}")
        return
    for i, e in enumerate(exprs):
        p = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            ctx.bad(p, f"expected an object, got {_show(e)}")
            continue
        for k in ("key", "operator"):
            if not isinstance(e.get(k, ""), str):
                ctx.bad(f"{p}.{k}", f"expected a string, got {_show(e.get(k))}")
        values = e.get("values")
        if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
            ctx.bad(f"{p}.values", f"expected a list of strings, got {_show(values)}")


# --------------------------------------------------------------------------------------------------------------
# slo-controller-config ConfigMap -> NodeSLO spec (pkg/slo-controller/nodeslo/*).

@dataclass(frozen=True)
class _NodeStrategy:
    name: str
    selector: Mapping[str, Any] | None
    value: Any                     # strategy pre-merged over the cluster strategy; host apps: tuple of specs


@dataclass(frozen=True)
class _KeyConfig:
    cluster: Any
    nodes: tuple[_NodeStrategy, ...] = ()


# ConfigMap key -> (NodeSLO spec field, type, the controller's default cluster strategy). resource-qos defaults
# to an empty strategy (the koordlet fills it); system to totalNetworkBandwidth "0" (DefaultSLOCfg()).
_STRATEGY_KEYS: dict[str, tuple[str, Any, Any]] = {
    wire.SLO_CFG_RESOURCE_THRESHOLD: ("resourceUsedThresholdWithBE", ResourceThresholdStrategy, _DEFAULT_THRESHOLD),
    wire.SLO_CFG_RESOURCE_QOS: ("resourceQOSStrategy", ResourceQOSStrategy, ResourceQOSStrategy()),
    wire.SLO_CFG_CPU_BURST: ("cpuBurstStrategy", CPUBurstStrategy, _DEFAULT_CPU_BURST),
    wire.SLO_CFG_SYSTEM: ("systemStrategy", SystemStrategy, _DEFAULT_SYSTEM),
}
_HOST_APPS_WIRE = _W("applications", "list", cls=HostApplicationSpec)


CONFIGMAP_MAX_BYTES = 1024 * 1024      # the API server's limit on a whole ConfigMap


class _KeyRejected(ValueError):
    pass


def _load_key(text: Any) -> Any:
    """A ConfigMap key's JSON, bounded by the decoder (size: what a ConfigMap can hold at all)."""
    if isinstance(text, str):
        try:
            return decode.loads("", text, max_bytes=CONFIGMAP_MAX_BYTES)
        except decode.DecodeError as e:
            raise _KeyRejected(f"not valid JSON: {e.problem}") from None
    return text          # a local-file convenience: the value written as a YAML mapping instead of a string


def _rejected(ctx: _Ctx) -> _KeyRejected:
    return _KeyRejected("; ".join(f"{e.path}: {e.problem}" for e in ctx.errors))


def _node_entries(raw: Mapping[str, Any], key: str, ctx: _Ctx) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """The per-node entries of a ConfigMap key (``nodeStrategies`` / ``nodeConfigs``): (path, entry, name), with
    the list, entry, name and nodeSelector shapes checked (problems go to ``ctx``; a non-object entry is skipped)."""
    entries = raw.get(key)
    if entries is not None and not isinstance(entries, list):
        ctx.bad(key, f"expected a list, got {_show(entries)}")
        return
    for i, item in enumerate(entries or ()):
        path = f"{key}[{i}]"
        if not isinstance(item, Mapping):
            ctx.bad(path, f"expected an object, got {_show(item)}")
            continue
        name = item.get("name")
        if name is not None and not isinstance(name, str):
            ctx.bad(f"{path}.name", f"expected a string, got {_show(name)}")
        _check_selector_types(item.get("nodeSelector"), f"{path}.nodeSelector", ctx)
        yield path, item, name if isinstance(name, str) else ""


def _parse_strategy_key(text: Any, cls: Any, default: Any) -> tuple[_KeyConfig, list[tuple[str, str]]]:
    raw = _load_key(text)
    if raw is None:
        return _KeyConfig(default), []
    if not isinstance(raw, Mapping):
        raise _KeyRejected(f"expected a JSON object with clusterStrategy/nodeStrategies, got {_show(raw)}")
    ctx = _Ctx(check=False)
    for k in raw:
        if k not in ("clusterStrategy", "nodeStrategies"):
            ctx.warnings.append((str(k), "unknown field"))
    cluster = default
    if raw.get("clusterStrategy") is not None:
        value = _decode_obj(cls, raw["clusterStrategy"], default, "clusterStrategy", ctx)
        if value is not _ABSENT:
            cluster = value
    nodes = []
    for path, item, name in _node_entries(raw, "nodeStrategies", ctx):
        rest = {k: v for k, v in item.items() if k not in ("name", "nodeSelector")}
        value = _decode_obj(cls, rest, cluster, path, ctx)
        nodes.append(_NodeStrategy(name, item.get("nodeSelector"), cluster if value is _ABSENT else value))
    if ctx.errors:
        raise _rejected(ctx)
    return _KeyConfig(cluster, tuple(nodes)), ctx.warnings


def _parse_host_apps_key(text: Any) -> tuple[_KeyConfig, list[tuple[str, str]]]:
    raw = _load_key(text)
    if raw is None:
        return _KeyConfig(()), []
    if not isinstance(raw, Mapping):
        raise _KeyRejected(f"expected a JSON object with applications/nodeConfigs, got {_show(raw)}")
    ctx = _Ctx(check=False)
    for k in raw:
        if k not in ("applications", "nodeConfigs"):
            ctx.warnings.append((str(k), "unknown field"))

    def apps(value: Any, path: str) -> tuple[HostApplicationSpec, ...]:
        if value is None:
            return ()
        decoded = _decode_value(_HOST_APPS_WIRE, value, None, path, ctx)
        return () if decoded is _ABSENT else decoded

    cluster = apps(raw.get("applications"), "applications")
    nodes = []
    for path, item, name in _node_entries(raw, "nodeConfigs", ctx):
        for k in item:
            if k not in ("name", "nodeSelector", "applications"):
                ctx.warnings.append((f"{path}.{k}", "unknown field"))
        nodes.append(_NodeStrategy(name, item.get("nodeSelector"),
                                   apps(item.get("applications"), f"{path}.applications")))
    if ctx.errors:
        raise _rejected(ctx)
    return _KeyConfig(cluster, tuple(nodes)), ctx.warnings


_DEFAULT_KEYS: dict[str, _KeyConfig] = {
    **{key: _KeyConfig(default) for key, (_, _, default) in _STRATEGY_KEYS.items()},
    wire.SLO_CFG_HOST_APPLICATION: _KeyConfig(()),
}


class SLOControllerConfig:
    """The ``slo-controller-config`` ConfigMap as koord-manager's slo-controller digests it.

    Upstream rules (``nodeslo_cm_event_handler.go``, ``resource_strategy.go``, ``nodeslo_controller.go``):

    - Keys used: resource-threshold-config, resource-qos-config, cpu-burst-config, system-config (each
      ``{"clusterStrategy": {...}, "nodeStrategies": [{"name", "nodeSelector", ...strategy fields inline}]}``)
      and host-application-config (``{"applications": [...], "nodeConfigs": [{"name", "nodeSelector",
      "applications"}]}``). colocation-config, cpu-normalization-config and resource-amplification-config do
      not feed NodeSLO; plugin extension keys are not read (upstream registers no extension plugin).
    - The cluster strategy is merged onto the controller default (threshold, cpu-burst and system defaults as
      in the koordlet; resource-qos ``{}``). Each node strategy is merged onto a copy of the merged cluster
      strategy (JSON overlay: present fields override, nested objects merge, arrays replace).
    - For a node, the **first** node strategy whose ``nodeSelector`` matches its labels is used as a whole
      (already merged over the cluster strategy); with no match, the cluster strategy. A nodeSelector that
      does not parse skips that entry. A missing selector matches nothing, an empty one everything.
    - host-application-config: the first matching ``nodeConfigs[].applications`` replaces (is not merged
      with) the top-level ``applications``.
    - A missing key gives the defaults; a key whose JSON does not decode (bad JSON or a wrong type) keeps
      that key's previous result (``previous``), or the defaults when there is none.
    - The node annotation ``node.koordinator.sh/network-bandwidth`` overrides
      ``systemStrategy.totalNetworkBandwidth``.

    Differences: upstream re-marshals each node strategy with Go's non-omitted ``totalNetworkBandwidth``
    (a struct), so a node strategy that does not set it resets the cluster's value to "0"; here it inherits
    the cluster's value. An unparseable bandwidth annotation is reported and ignored; upstream drops the whole
    systemStrategy for that node (the koordlet then uses its defaults).
    """

    def __init__(self, keys: Mapping[str, _KeyConfig] | None = None) -> None:
        self._keys = dict(_DEFAULT_KEYS)
        self._keys.update(keys or {})

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None, previous: SLOControllerConfig | None = None,
              source: str = "slo-controller-config") -> tuple[SLOControllerConfig, list[str]]:
        """(config, one error per rejected key) from a ConfigMap's ``data``."""
        data = data or {}
        keys: dict[str, _KeyConfig] = {}
        errors: list[str] = []
        for key in (*_STRATEGY_KEYS, wire.SLO_CFG_HOST_APPLICATION):
            if key not in data:
                continue
            try:
                if key == wire.SLO_CFG_HOST_APPLICATION:
                    keys[key], warnings = _parse_host_apps_key(data[key])
                else:
                    _, type_, default = _STRATEGY_KEYS[key]
                    keys[key], warnings = _parse_strategy_key(data[key], type_, default)
            except _KeyRejected as e:
                kept = previous._keys[key] if previous is not None else _DEFAULT_KEYS[key]
                keys[key] = kept
                text = (f"{source}: key {key}: {e}; keeping the "
                        f"{'previous' if previous is not None else 'default'} {key}")
                log.error("ConfigMap key rejected source=%s key=%s problem=%s; keeping %s", source, key, e,
                          "previous" if previous is not None else "defaults")
                errors.append(text)
                continue
            for path, reason in warnings:
                log.warning("ConfigMap field ignored source=%s key=%s path=%s reason=%s", source, key, path, reason)
        return cls(keys), errors

    def node_slo_spec(self, labels: Mapping[str, str] | None = None,
                      annotations: Mapping[str, str] | None = None,
                      source: str = "slo-controller-config") -> tuple[dict[str, Any], list[str]]:
        """(NodeSLO ``spec`` in wire shape as koord-manager would write it for this node, errors)."""
        labels = labels or {}
        annotations = annotations or {}
        errors: list[str] = []
        spec: dict[str, Any] = {}

        def pick(key: str) -> Any:
            config = self._keys[key]
            for i, node in enumerate(config.nodes):
                try:
                    if match_label_selector(node.selector, labels):
                        return node.value
                except ValueError as e:
                    label = node.name or f"#{i}"
                    errors.append(f"{source}: key {key}: node strategy {label}: invalid nodeSelector: {e}; skipped")
                    log.error("ConfigMap node strategy skipped source=%s key=%s strategy=%s problem=%s",
                              source, key, label, e)
            return config.cluster

        for key, (spec_field, _, _) in _STRATEGY_KEYS.items():
            chosen = pick(key)
            if key == wire.SLO_CFG_SYSTEM and wire.ANNOTATION_NODE_NETWORK_BANDWIDTH in annotations:
                value = annotations[wire.ANNOTATION_NODE_NETWORK_BANDWIDTH]
                try:
                    parse_quantity(value)
                    chosen = replace(chosen, total_network_bandwidth=str(value))
                except ValueError as e:
                    errors.append(f"node annotation {wire.ANNOTATION_NODE_NETWORK_BANDWIDTH}: {e}; ignored")
                    log.error("node annotation ignored annotation=%s problem=%s",
                              wire.ANNOTATION_NODE_NETWORK_BANDWIDTH, e)
            spec[spec_field] = chosen.to_wire()
        apps = pick(wire.SLO_CFG_HOST_APPLICATION)
        if apps:
            spec["hostApplications"] = [a.to_wire() for a in apps]
        return spec, errors


# --------------------------------------------------------------------------------------------------------------
# Local file source.

class NodeSLOFileError(ValueError):
    pass


_OBJECT_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}


class NodeSLOFile:
    """NodeSLO for standalone / host mode, read from a local YAML file.

    The file holds one of:
    - a NodeSLO object (``kind: NodeSLO`` with ``spec``);
    - a bare spec mapping (``resourceQOSStrategy: ...`` at the top level);
    - the ``slo-controller-config`` ConfigMap (``kind: ConfigMap`` with ``data``), turned into this node's spec
      from ``node_labels`` / ``node_annotations`` as koord-manager would (see ``SLOControllerConfig``).

    The result is merged onto the koordlet defaults (``merge_node_slo_spec``). ``refresh()`` re-reads the file
    when its mtime (or size or inode) changed. A file that cannot be read or parsed keeps the last good spec
    (the defaults before the first good read) and logs one error; so does a deleted file (a NodeSLO
    deletion does not reset the Go koordlet either). A bad ConfigMap key keeps that key's previous value.
    """

    def __init__(self, path: str, node_name: str = "", node_labels: Mapping[str, str] | None = None,
                 node_annotations: Mapping[str, str] | None = None) -> None:
        self._path = path
        self._node = node_name
        self._labels = dict(node_labels or {})
        self._annotations = dict(node_annotations or {})
        self._sig: tuple[int, int, int] | None = None
        self._content: tuple[str, Any] | None = None    # ("spec", (raw spec, name)) | ("configmap", config)
        self._load_errors: list[str] = []                # ConfigMap keys rejected by the latest good read
        self._spec, _ = merge_node_slo_spec(None, self._what())
        self._errors: list[str] = []
        self._bad = LogOnce(log, logging.ERROR)
        self.refresh()

    @property
    def spec(self) -> NodeSLOSpec:
        return self._spec

    @property
    def errors(self) -> list[str]:
        """Problems found by the latest read: file, ConfigMap keys and rejected sections."""
        return list(self._errors)

    def _what(self, name: str = "") -> str:
        return f"{name or self._node or 'local'} (file {self._path})"

    def refresh(self) -> bool:
        """Re-read the file if it changed; True when the effective spec changed."""
        try:
            st = os.stat(self._path)
        except OSError as e:
            problem = f"NodeSLO file {self._path}: cannot read: {e.strerror or e}; keeping the last good spec"
            self._bad(self._path, "NodeSLO file unreadable path=%s error=%s; keeping the last good spec",
                      self._path, e.strerror or e)
            self._sig, self._errors = None, [problem]
            return False
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        if sig == self._sig:
            return False
        self._sig = sig
        try:
            content, self._load_errors = self._load()
        except NodeSLOFileError as e:
            self._bad(self._path, "%s; keeping the last good spec", e)
            self._errors = [f"{e}; keeping the last good spec"]
            return False
        if self._bad.forget(self._path):
            log.info("NodeSLO file readable again path=%s", self._path)
        self._content = content
        changed = self._apply()
        log.info("NodeSLO file loaded path=%s kind=%s changed=%s errors=%d", self._path, content[0], changed,
                 len(self._errors))
        return changed

    def set_node(self, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> bool:
        """New node labels/annotations (they choose the ConfigMap node strategy); True when the spec changed."""
        self._labels = dict(labels)
        self._annotations = dict(annotations or {})
        return self._apply() if self._content is not None else False

    def _load(self) -> tuple[tuple[str, Any], list[str]]:
        doc = load_yaml(self._path, "NodeSLO file", NodeSLOFileError)
        if doc is None:
            return ("spec", (None, "")), []
        if not isinstance(doc, Mapping):
            raise NodeSLOFileError(f"NodeSLO file {self._path}: expected a mapping (a NodeSLO, its spec or the "
                                   f"slo-controller-config ConfigMap), got {_show(doc)}")
        kind = doc.get("kind")
        if kind == "ConfigMap":
            data = doc.get("data")
            if data is not None and not isinstance(data, Mapping):
                raise NodeSLOFileError(f"NodeSLO file {self._path}: ConfigMap data must be a mapping")
            previous = self._content[1] if self._content and self._content[0] == "configmap" else None
            source = f"ConfigMap file {self._path}"
            config, errors = SLOControllerConfig.parse(data, previous, source)
            return ("configmap", config), errors
        if kind == wire.NODESLO_KIND or (kind is None and "spec" in doc and set(doc) <= _OBJECT_KEYS):
            return ("spec", (doc.get("spec"), _object_name(doc))), []
        if kind is not None:
            raise NodeSLOFileError(f"NodeSLO file {self._path}: kind {kind!r} is neither NodeSLO nor ConfigMap")
        return ("spec", (doc, "")), []

    def _apply(self) -> bool:
        assert self._content is not None
        form, payload = self._content
        errors = list(self._load_errors)
        if form == "configmap":
            raw, more = payload.node_slo_spec(self._labels, self._annotations, f"ConfigMap file {self._path}")
            errors += more
            spec, more = merge_node_slo_spec(raw, self._what())
        else:
            raw, name = payload
            spec, more = merge_node_slo_spec(raw, self._what(name))
        errors += more
        self._errors = errors
        changed = spec != self._spec
        self._spec = spec
        return changed
