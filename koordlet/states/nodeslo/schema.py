"""The NodeSLO spec types (``apis/slo/v1alpha1/nodeslo_types.go``) and the wire schema each field declares.

Every spec type is a frozen dataclass whose fields carry a :class:`WireField`: the camelCase JSON name, the kind of
value, and the checks upstream makes on it (the ``validate:`` tags the ConfigMap webhook checks, the kubebuilder
markers the API server checks, the enum values the code knows). ``koordlet.states.nodeslo.decoder`` reads the
schema to decode and validate a received value; ``to_wire()`` writes it back with Go's ``omitempty``. A field
left at None is unset (a nil pointer upstream). ``to_wire()`` keeps quantities as written ("1000M"); Go would
canonicalise them ("1G"). ``spec.extensions`` travels as ``{"Object": {...}}``: ``ExtensionsMap`` is tagged
``json:",inline"``, which encoding/json ignores on a named map field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeVar, overload

from koordlet.base import wire
from koordlet.base.quantity import parse_quantity

__all__ = [
    "ABSENT", "WireField",
    "CPUQOSCfg", "MemoryQOSCfg", "ResctrlQOSCfg", "IOCfg", "BlockCfg", "BlkIOQOSCfg", "NetworkQOSCfg",
    "ResourceQOS", "ResourceQOSPolicies", "ResourceQOSStrategy", "ResourceThresholdStrategy", "CPUBurstStrategy",
    "SystemStrategy", "CgroupPath", "HostApplicationStrategy", "HostApplicationSpec", "NodeSLOSpec",
]


class _Absent:
    """Marker: 'leave the base value alone' (absent, null, empty, or rejected)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()


_Kind = Literal["int", "bool", "str", "enum", "quantity", "intorstr", "boolmap", "ext", "obj", "list"]
_T = TypeVar("_T")


@dataclass(frozen=True)
class WireField:
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
# of another class, is an error). "list" fields use field(default=()) with an explicit WireField.
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
    return field(default=None, metadata={"w": WireField(wire_name, kind, **kw)})


_SCHEMAS: dict[type, tuple[tuple[str, WireField], ...]] = {}
_BY_WIRE: dict[type, dict[str, tuple[str, WireField]]] = {}


class _Wire:
    """Base of every spec type: declarative wire schema, ``to_wire`` with Go ``omitempty`` semantics."""

    # A section is the unit of fallback: one bad field inside it sends the whole section back to its defaults.
    _section: ClassVar[bool] = False
    # (lower attr, upper attr): lower < upper when both are set (validate ltfield/gtfield).
    _pairs: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def _schema(cls) -> tuple[tuple[str, WireField], ...]:
        s = _SCHEMAS.get(cls)
        if s is None:
            s = _SCHEMAS[cls] = tuple((f.name, f.metadata["w"]) for f in fields(cls))  # type: ignore[arg-type]
            _BY_WIRE[cls] = {w.wire: (name, w) for name, w in s}
        return s

    @classmethod
    def _by_wire(cls) -> dict[str, tuple[str, WireField]]:
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
            if value is not ABSENT:
                out[w.wire] = value
        return out


def _value_to_wire(w: WireField, v: Any) -> Any:
    if v is None:
        return ABSENT
    if w.kind == "obj":
        return v.to_wire()
    if w.kind == "list":
        return [e.to_wire() for e in v] if v else ABSENT
    if w.kind == "boolmap":
        return dict(v) if v else ABSENT
    if w.kind == "ext":
        return {"Object": copy.deepcopy(dict(v))} if v else ABSENT
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
    blocks: tuple[BlockCfg, ...] = field(default=(), metadata={"w": WireField("blocks", "list", cls=BlockCfg)})


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
        default=(), metadata={"w": WireField("hostApplications", "list", cls=HostApplicationSpec)})
