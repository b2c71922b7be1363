"""One node's devices as koord-scheduler's device cache holds them: what the Device CR offers, what assigned pods'
``device-allocated`` annotations use, and what is free.

Facts: ``apis/scheduling/v1alpha1/device_types.go`` (the CR), ``apis/extension/device_share.go`` (the annotation,
the partition table and policy: ``GetGPUPartitionTable``, ``GetGPUPartitionPolicy``), and koord-scheduler's
``pkg/scheduler/plugins/deviceshare/device_cache.go`` and ``allocator_gpu_helper.go``.

* **total** per type and minor comes from healthy devices only; an unhealthy device keeps its place in the topology
  but offers nothing, and a deleted CR offers nothing at all (every device unhealthy, as upstream).
* **used** is the sum over assigned pods of their annotations (per card), **free** = max(0, total − used) per
  resource name; VFs in use are kept per PF. State is rebuilt from the CR plus the pods, so a restart of the
  extender loses nothing.
* A GPU the agent reports in MIG mode (label :data:`LABEL_MIG`) offers nothing: a MIG card is split by the driver
  into instances this allocator does not model, and a whole-card request on it would not get a whole card.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeVar, cast

from koordlet.base import wire
from koordlet.states import decode
from koordlet.states.decode import DecodeError
from koordlet.states.deviceallocation import DeviceAllocation, VirtualFunction, parse_device_allocated, resource_name
from scheduler.requests import GPU, SCOPE_LEVELS, value

log = logging.getLogger(__name__)

LABEL_MIG = wire.LABEL_GPU_MIG       # "enabled" on a GPU device in MIG mode (koordlet-py's Device report)
LABEL_SECONDARY_WELL_PLANNED = "node.koordinator.sh/secondary-device-well-planned"
HOPPER_MODELS = ("H100", "H800", "H20")
_MEMO = 256                 # remembered answers per node (cleared when full)
T = TypeVar("T")


@dataclass(frozen=True)
class VFGroup:
    labels: Mapping[str, str]
    vfs: tuple[VirtualFunction, ...]


@dataclass(frozen=True)
class DeviceInfo:
    """One device of the CR. ``total`` is empty for an unhealthy (or MIG) device: it is never allocatable."""

    type: str
    minor: int
    id: str
    total: Mapping[str, int]
    numa: int | None = None                 # topology.nodeID; None without topology
    pcie: str | None = None                 # topology.pcieID
    labels: Mapping[str, str] = field(default_factory=dict)
    vf_groups: tuple[VFGroup, ...] = ()


@dataclass(frozen=True)
class Partition:
    minors: tuple[int, ...]
    mask: int                               # bit per minor
    bandwidth: Fraction | None
    score: int


def mask_of(minors: Iterable[int]) -> int:
    m = 0
    for minor in minors:
        m |= 1 << minor
    return m


# card count -> groups of partitions in ascending allocationScore (what koord-scheduler's indexer walks)
PartitionIndex = Mapping[int, tuple[tuple[Partition, ...], ...]]


def _index(table: Mapping[int, list[Partition]]) -> PartitionIndex:
    out: dict[int, tuple[tuple[Partition, ...], ...]] = {}
    for count, partitions in table.items():
        by_score: dict[int, list[Partition]] = {}
        for p in partitions:
            by_score.setdefault(p.score, []).append(p)
        out[count] = tuple(tuple(by_score[s]) for s in sorted(by_score))
    return out


HOPPER_INDEX: PartitionIndex = _index({
    n: [Partition(tuple(range(i, i + n)), mask_of(range(i, i + n)), None, 1) for i in range(0, 8, n)]
    for n in (1, 2, 4, 8)})


# --- the GPU topology scope tree: Node -> NUMA node -> PCIe switch -------------------------------------------------

@dataclass(frozen=True)
class Scope:
    """One scope of the GPU topology tree (koord-scheduler's GPUTopologyScope): its level (Node 1, NUMA 2, PCIe 3),
    its minors in ascending order, and its children sorted by id."""

    level: int
    minors: tuple[int, ...]
    mask: int
    children: tuple[Scope, ...] = ()


def scope_tree(devices: Mapping[int, DeviceInfo]) -> Scope | None:
    """None when any GPU lacks topology (upstream builds no tree then)."""
    if not devices or any(d.numa is None for d in devices.values()):
        return None
    by_numa: dict[int, dict[str, list[int]]] = {}
    for minor, d in devices.items():
        assert d.numa is not None
        by_numa.setdefault(d.numa, {}).setdefault(d.pcie or "", []).append(minor)
    numas = []
    for numa in sorted(by_numa):
        pcies = tuple(Scope(SCOPE_LEVELS["PCIe"], tuple(sorted(ms)), mask_of(ms))
                      for _, ms in sorted(by_numa[numa].items()))
        minors = tuple(sorted(m for p in pcies for m in p.minors))
        numas.append(Scope(SCOPE_LEVELS["NUMANode"], minors, mask_of(minors), pcies))
    minors = tuple(sorted(devices))
    return Scope(SCOPE_LEVELS["Node"], minors, mask_of(minors), tuple(numas))


@dataclass(frozen=True)
class Inventory:
    """What the Device CR offers, parsed once per resourceVersion."""

    devices: Mapping[str, Mapping[int, DeviceInfo]]          # type -> minor -> device
    partitions: PartitionIndex | None = None
    honor_partitions: bool = False
    secondary_well_planned: bool = False
    gpu_scopes: Scope | None = None                          # built once per CR; None without full topology
    _totals: dict[str, Mapping[int, Mapping[str, int]]] = field(default_factory=dict, compare=False, repr=False)

    def total(self, dtype: str) -> Mapping[int, Mapping[str, int]]:
        """The allocatable devices of a type: minor -> total resources (healthy ones only); computed once."""
        known = self._totals.get(dtype)
        if known is None:
            known = self._totals[dtype] = {m: d.total for m, d in self.devices.get(dtype, {}).items() if d.total}
        return known


EMPTY = Inventory({})


def _resources(key: str, raw: Any, where: str) -> dict[str, int]:
    return {resource_name(str(k)): value(decode.quantity(key, v, f"{where}[{k}]"))
            for k, v in decode.obj(key, raw, where).items()}


def _partition_index(raw: str) -> PartitionIndex:
    key = wire.ANNOTATION_GPU_PARTITIONS
    table: dict[int, list[Partition]] = {}
    for count, entries in decode.json_object(key, raw).items():
        if not str(count).isdigit():
            raise DecodeError(key, f"[{count!r:.20}]: the key is a card count")
        for i, e in enumerate(decode.array(key, entries, f"[{count}]", max_items=256)):
            at = f"[{count}][{i}]"
            e = decode.obj(key, e, at, null=False)
            minors = tuple(decode.integer(key, m, f"{at}.minors", 0, 62)
                           for m in decode.array(key, e.get("minors"), f"{at}.minors", max_items=64))
            bw = e.get("ringBusBandwidth")
            table.setdefault(int(count), []).append(Partition(
                minors, mask_of(minors), decode.quantity(key, bw, f"{at}.ringBusBandwidth") if bw is not None else None,
                decode.integer(key, e.get("allocationScore", 0), f"{at}.allocationScore")))
    return _index(table)


def parse_device(cr: Mapping[str, Any] | None, node: Mapping[str, Any] | None = None) -> Inventory:
    """The Inventory of a Device CR (None: deleted or never reported, nothing offered). A malformed device entry is
    logged and left out; the rest of the node stays usable."""
    if cr is None:
        return EMPTY
    meta = cr.get("metadata") or {}
    name = str(meta.get("name", ""))
    key = "Device"
    devices: dict[str, dict[int, DeviceInfo]] = {}
    for i, d in enumerate((cr.get("spec") or {}).get("devices") or []):
        try:
            info = _device(key, d, f"spec.devices[{i}]")
        except (DecodeError, ValueError) as e:
            log.warning("device entry skipped node=%s error=%s", name, e)
            continue
        devices.setdefault(info.type, {})[info.minor] = info
    labels: Mapping[str, str] = meta.get("labels") or {}
    node_labels: Mapping[str, str] = ((node or {}).get("metadata") or {}).get("labels") or {}
    raw_table = (meta.get("annotations") or {}).get(wire.ANNOTATION_GPU_PARTITIONS)
    partitions: PartitionIndex | None = None
    policy_labels = labels
    if raw_table:
        try:
            partitions = _partition_index(raw_table)
        except DecodeError as e:
            log.warning("gpu partition table ignored node=%s error=%s", name, e)
    if partitions is None:
        # no table on the CR: the Node's labels decide, with the built-in Hopper table (allocator_gpu_helper.go)
        policy_labels = node_labels
        vendor = node_labels.get(wire.LABEL_GPU_VENDOR, "")
        if vendor in ("", wire.GPU_VENDOR_NVIDIA) and node_labels.get(wire.LABEL_GPU_MODEL) in HOPPER_MODELS:
            partitions = HOPPER_INDEX
    honor = policy_labels.get(wire.LABEL_GPU_PARTITION_POLICY) == wire.PARTITION_POLICY_HONOR
    return Inventory(devices, partitions, honor, labels.get(LABEL_SECONDARY_WELL_PLANNED) == "true",
                     scope_tree(devices.get(GPU, {})))


def _device(key: str, d: Any, at: str) -> DeviceInfo:
    d = decode.obj(key, d, at, null=False)
    dtype = decode.string(key, d.get("type"), f"{at}.type")
    minor = decode.integer(key, d.get("minor", 0), f"{at}.minor", 0, 1 << 20)
    labels = {str(k): str(v) for k, v in decode.obj(key, d.get("labels"), f"{at}.labels").items()}
    total = _resources(key, d.get("resources"), f"{at}.resources")
    if d.get("health") is not True or labels.get(LABEL_MIG) == "enabled":
        total = {}
    topo = decode.obj(key, d.get("topology"), f"{at}.topology")
    groups = []
    for j, g in enumerate(decode.array(key, d.get("vfGroups"), f"{at}.vfGroups", max_items=64)):
        g = decode.obj(key, g, f"{at}.vfGroups[{j}]", null=False)
        vfs = tuple(VirtualFunction(int(vf.get("minor", 0) or 0), str(vf.get("busID", "")))
                    for vf in decode.array(key, g.get("vfs"), f"{at}.vfGroups[{j}].vfs", max_items=4096)
                    if isinstance(vf, dict))
        groups.append(VFGroup({str(k): str(v) for k, v in decode.obj(key, g.get("labels"), "labels").items()}, vfs))
    return DeviceInfo(dtype, minor, str(d.get("id", "")), total,
                      decode.integer(key, topo["nodeID"], f"{at}.topology.nodeID") if "nodeID" in topo else None,
                      str(topo["pcieID"]) if "pcieID" in topo else None, labels, tuple(groups))


def _add_into(into: dict[str, int], res: Mapping[str, Fraction], sign: int) -> None:
    for k, v in res.items():
        into[k] = into.get(k, 0) + sign * value(v)


class NodeDevices:
    """One node's device state: the inventory plus the allocations of its assigned pods (by pod UID).

    Not thread-safe by itself: the cache serializes writers and readers of one node.
    """

    def __init__(self, inventory: Inventory = EMPTY) -> None:
        self.inventory = inventory
        self.used: dict[str, dict[int, dict[str, int]]] = {}
        self.used_vfs: dict[str, dict[int, set[str]]] = {}
        self._pods: dict[str, dict[str, list[DeviceAllocation]]] = {}
        self.generation = 0                 # bumped on every change: summaries and memos key on it
        self._memo: dict[Hashable, tuple[int, Any]] = {}
        self._free: dict[str, tuple[int, dict[int, dict[str, int]]]] = {}

    @classmethod
    def build(cls, cr: Mapping[str, Any] | None, node: Mapping[str, Any] | None = None) -> NodeDevices:
        return cls(parse_device(cr, node))

    def set_inventory(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.generation += 1

    # --- usage -----------------------------------------------------------------------------------------------------

    def add_pod(self, pod: Mapping[str, Any]) -> bool:
        """Count an assigned pod's ``device-allocated`` annotation (replacing what it held before). A malformed one
        is logged and counted as nothing. Returns whether the pod holds devices."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        raw = (meta.get("annotations") or {}).get(wire.ANNOTATION_DEVICE_ALLOCATED)
        allocations: dict[str, list[DeviceAllocation]] = {}
        if raw:
            try:
                allocations = parse_device_allocated(raw)
            except DecodeError as e:
                log.warning("device allocation ignored pod=%s/%s error=%s", meta.get("namespace"), meta.get("name"), e)
        self.assign(uid, allocations)
        return bool(allocations)

    def assign(self, uid: str, allocations: Mapping[str, list[DeviceAllocation]]) -> None:
        self.remove(uid)
        if not allocations:
            return
        self._pods[uid] = {t: list(a) for t, a in allocations.items()}
        for dtype, entries in allocations.items():
            for a in entries:
                _add_into(self.used.setdefault(dtype, {}).setdefault(a.minor, {}), a.resources, 1)
                for vf in a.vfs:
                    self.used_vfs.setdefault(dtype, {}).setdefault(a.minor, set()).add(vf.bus_id)
        self.generation += 1

    def remove(self, uid: str) -> None:
        held = self._pods.pop(uid, None)
        if held is None:
            return
        for dtype, entries in held.items():
            for a in entries:
                used = self.used[dtype][a.minor]
                _add_into(used, a.resources, -1)
                if all(v <= 0 for v in used.values()):
                    del self.used[dtype][a.minor]
                for vf in a.vfs:
                    self.used_vfs.get(dtype, {}).get(a.minor, set()).discard(vf.bus_id)
        self.generation += 1

    def holds(self, uid: str) -> bool:
        return uid in self._pods

    # --- views -----------------------------------------------------------------------------------------------------

    def free(self, dtype: str) -> Mapping[int, Mapping[str, int]]:
        """minor -> free resources (max(0, total − used) per name) of the allocatable devices of a type; computed
        once per generation (callers only read it)."""
        known = self._free.get(dtype)
        if known is not None and known[0] == self.generation:
            return known[1]
        value = self._compute_free(dtype)
        self._free[dtype] = (self.generation, value)
        return value

    def _compute_free(self, dtype: str) -> dict[int, dict[str, int]]:
        used = self.used.get(dtype, {})
        out = {}
        for minor, total in self.inventory.total(dtype).items():
            u = used.get(minor)
            out[minor] = {k: max(0, v - u.get(k, 0)) for k, v in total.items()} if u else dict(total)
        return out

    def used_minors(self, dtype: str) -> set[int]:
        return {m for m, u in self.used.get(dtype, {}).items() if any(v > 0 for v in u.values())}

    def device(self, dtype: str, minor: int) -> DeviceInfo | None:
        return self.inventory.devices.get(dtype, {}).get(minor)

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, remembered for this generation of the node: many pods ask the same thing of a node that
        has not changed since (only the node a pod lands on changes)."""
        known = self._memo.get(key)
        if known is not None and known[0] == self.generation:
            return cast(T, known[1])
        value = compute()
        if len(self._memo) >= _MEMO:
            self._memo.clear()
        self._memo[key] = (self.generation, value)
        return value

    def fitting(self, dtype: str, per_device: Mapping[str, int]) -> int:
        """How many devices of a type could take ``per_device`` each: the node summary filter checks before running
        the allocator."""
        def count() -> int:
            return sum(1 for f in self.free(dtype).values() if all(v <= f.get(k, 0) for k, v in per_device.items()))
        return self.memo(("fitting", dtype, tuple(sorted(per_device.items()))), count)
