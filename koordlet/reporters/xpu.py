"""Non-NVIDIA accelerators ("XPUs") in the Device object, from the device-info files (``koordlet.host.xpu``).

Facts, from upstream koordlet (pkg/koordlet/util/device.go ``XPUDeviceInfo``; pkg/koordlet/statesinformer/impl/
states_device_linux.go ``reportDevice``, ``buildXPUDevice``, ``buildXPUDeviceLabels``,
``buildXPUDeviceAnnotations``, ``getXPUDeviceTopology``, ``getXPUDeviceConditions``):

* a file holds a JSON array of ``{vendor, model, uuid, minor (a string), resources {name: quantity string},
  topology {p2pLinks [{peerMinor ("1,2,3"), type}], mustHonorPartition, socketID, nodeID, pcieID, busID (strings)},
  status {healthy, errCode, errMessage}}``; ``null`` and ``[]`` files add nothing;
* when any device is listed, they are the node's GPUs: NVML's are not reported at all, and the object's labels and
  annotations are the XPU ones (replacing ours, as koordlet owns them);
* each device is ``{type: gpu, id: uuid, minor, health: status.healthy (true without a status), resources:
  {koordinator.sh/gpu-memory-ratio: 100} plus every resource that parses as a quantity (``gpu-core`` and
  ``gpu-memory`` get the ``koordinator.sh/`` prefix, other names are kept), topology: {socketID: -1, nodeID
  (-1 when empty), pcieID, busID} when the file has a topology, conditions: one ``Healthy`` condition when it has a
  status}``; a minor or nodeID that is not an integer becomes 0, one outside int32 the nearest int32 (what Go's
  ParseInt returns with its error), logged;
* labels from the *first* device read: ``gpu-model`` and ``gpu-vendor``; with p2p links (even an empty list)
  ``gpu-partition-policy: Prefer``, or ``Honor`` when ``mustHonorPartition``;
* annotation ``scheduling.koordinator.sh/gpu-partitions``: for each device and each of its links with a peer and a
  type, the set {peers} ∪ {own minor} (entries that are not integers dropped), sorted, once per distinct set,
  ``{minors, gpuLinkType, allocationScore: 1}`` under the set's size; no annotation when there is none.

When a file cannot be read or decoded, upstream keeps the devices of its last good read (its cache entry is not
replaced); so does :class:`XpuSource`. Two differences: keys are matched as written (Go's JSON decoding also takes
``UUID`` for ``uuid``), and a quantity is sent as the file writes it (Go re-prints it in canonical form, e.g.
``1024Mi`` as ``1Gi``; the scheduler parses both the same).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.host.xpu import MAX_FILE_BYTES, read_device_info_files
from koordlet.states import decode
from koordlet.states.topology import go_json

log = logging.getLogger(__name__)
_once = LogOnce(log)          # a bad field is reported once, not at every Device report (every 3 s)

_INT = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(2**31), 2**31 - 1)
_DOMAIN = "koordinator.sh/"                  # upstream's extension.DomainPrefix
_PREFIXED = ("gpu-core", "gpu-memory")       # resource names upstream puts under it


@dataclass(frozen=True)
class P2PLink:
    peer_minor: str           # "1" or "1,2,3"
    type: str                 # "NVLink", "HCCS", ...


@dataclass(frozen=True)
class XpuTopology:
    p2p_links: tuple[P2PLink, ...] | None       # None: absent or null (no partition policy label)
    must_honor_partition: bool
    socket_id: str
    node_id: str
    pcie_id: str
    bus_id: str


@dataclass(frozen=True)
class XpuStatus:
    healthy: bool
    err_code: str
    err_message: str


@dataclass(frozen=True)
class XpuDevice:
    vendor: str
    model: str
    uuid: str
    minor: str
    resources: tuple[tuple[str, str], ...]
    topology: XpuTopology | None
    status: XpuStatus | None


def _str(key: str, value: Any, where: str) -> str:
    """A JSON string; null is "" (Go leaves the field empty)."""
    return "" if value is None else decode.string(key, value, where)


def _bool(key: str, value: Any, where: str) -> bool:
    return False if value is None else decode.boolean(key, value, where)


@decode.decoder("xpu device-info file")
def decode_device_infos(text: str) -> list[XpuDevice]:
    """The devices of one file (see the module docstring); DecodeError for anything else."""
    key = "xpu device-info file"
    doc = decode.loads(key, text, max_bytes=MAX_FILE_BYTES)
    out = []
    for i, raw in enumerate(decode.array(key, doc)):
        at = f"[{i}]"
        d = decode.obj(key, raw, at, null=False)
        resources = decode.obj(key, d.get("resources"), f"{at}.resources")
        topo_raw = d.get("topology")
        topology = None
        if topo_raw is not None:
            t = decode.obj(key, topo_raw, f"{at}.topology", null=False)
            links_raw = t.get("p2pLinks")
            links = None
            if links_raw is not None:
                links = tuple(P2PLink(_str(key, lk.get("peerMinor"), f"{at}.topology.p2pLinks[{j}].peerMinor"),
                                      _str(key, lk.get("type"), f"{at}.topology.p2pLinks[{j}].type"))
                              for j, lk in ((j, decode.obj(key, lk, f"{at}.topology.p2pLinks[{j}]", null=False))
                                            for j, lk in enumerate(decode.array(key, links_raw))))
            socket_id, node_id, pcie_id, bus_id = (_str(key, t.get(f), f"{at}.topology.{f}")
                                                   for f in ("socketID", "nodeID", "pcieID", "busID"))
            topology = XpuTopology(links, _bool(key, t.get("mustHonorPartition"), f"{at}.topology"), socket_id,
                                   node_id, pcie_id, bus_id)
        status_raw = d.get("status")
        status = None
        if status_raw is not None:
            s = decode.obj(key, status_raw, f"{at}.status", null=False)
            status = XpuStatus(_bool(key, s.get("healthy"), f"{at}.status.healthy"),
                               _str(key, s.get("errCode"), f"{at}.status.errCode"),
                               _str(key, s.get("errMessage"), f"{at}.status.errMessage"))
        vendor, model, uuid, minor = (_str(key, d.get(f), f"{at}.{f}") for f in ("vendor", "model", "uuid", "minor"))
        out.append(XpuDevice(vendor, model, uuid, minor,
                             tuple((str(k), _str(key, v, f"{at}.resources.{k}")) for k, v in resources.items()),
                             topology, status))
    return out


class XpuSource:
    """The devices of the device-info directory, read on demand; the last good read when a read fails."""

    def __init__(self, directory: str) -> None:
        self._dir = directory
        self._last: list[XpuDevice] = []
        self._absent = LogOnce(log, logging.INFO)    # the usual case on a node without a vendor agent
        self._bad = LogOnce(log)

    def read(self) -> list[XpuDevice]:
        devices: list[XpuDevice] = []
        try:
            for name, text in read_device_info_files(self._dir):
                try:
                    devices += decode_device_infos(text)
                except decode.DecodeError as e:
                    raise ValueError(f"{name}: {e.problem}") from None
        except FileNotFoundError:
            self._absent("absent", "xpu device-info directory %s absent: no XPU devices from files%s", self._dir,
                         "; keeping the last ones read" if self._last else "")
            return self._last
        except (OSError, ValueError) as e:
            self._bad("error", "xpu device-info files unreadable dir=%s error=%s; %s", self._dir, e,
                      "keeping the last devices read" if self._last else "no XPU devices reported")
            return self._last
        self._absent.forget("absent")
        self._bad.forget("error")
        self._last = devices
        return devices


def _int32(value: str, what: str, uuid: str) -> int:
    """Go's strconv.ParseInt(value, 10, 32) with what it returns on error (0 for a non-number, the nearest int32
    when out of range), logged."""
    if not _INT.fullmatch(value):
        _once(f"{uuid} {what}", "xpu device %s: %s %r is not an integer; reporting 0 as upstream", uuid, what, value)
        return 0
    n = int(value)
    if not _INT32[0] <= n <= _INT32[1]:
        _once(f"{uuid} {what}", "xpu device %s: %s %s is outside int32; reporting the nearest int32 as upstream", uuid,
              what, n)
    return min(max(n, _INT32[0]), _INT32[1])


def _now(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def xpu_device(xpu: XpuDevice, now: float) -> dict[str, Any]:
    """One XPU as a Device ``spec.devices`` entry (module docstring)."""
    resources = {wire.RESOURCE_GPU_MEMORY_RATIO: "100"}
    for name, value in xpu.resources:
        try:
            decode.quantity("xpu resources", value)
        except decode.DecodeError as e:
            _once(f"{xpu.uuid} {name}", "xpu device %s: resource %s skipped: %s", xpu.uuid, name, e.problem)
            continue
        resources[_DOMAIN + name if name in _PREFIXED else name] = value
    device: dict[str, Any] = {"type": wire.DEVICE_GPU, "id": xpu.uuid, "minor": _int32(xpu.minor, "minor", xpu.uuid),
                              "health": xpu.status.healthy if xpu.status is not None else True,
                              "resources": resources}
    t = xpu.topology
    if t is not None:
        topology: dict[str, Any] = {"socketID": -1, "nodeID": _int32(t.node_id, "nodeID", xpu.uuid)
                                    if t.node_id else -1, "pcieID": t.pcie_id}
        if t.bus_id:
            topology["busID"] = t.bus_id
        device["topology"] = topology
    s = xpu.status
    if s is not None:
        condition = {"type": wire.CONDITION_HEALTHY, "status": "True", "lastTransitionTime": _now(now),
                     "reason": "DeviceHealthy", "message": "device is healthy"}
        if not s.healthy:
            condition.update(status="False", reason=s.err_code or "Unknown",
                             message=s.err_message or "device is unhealthy")
        device["conditions"] = [condition]
    return device


def xpu_devices(xpus: Sequence[XpuDevice], now: float) -> list[dict[str, Any]]:
    """All XPUs as device entries, by uuid (the Device report then sorts every device by type and minor)."""
    return sorted((xpu_device(x, now) for x in xpus), key=lambda d: str(d["id"]))


def xpu_labels(xpus: Sequence[XpuDevice]) -> dict[str, str]:
    """The Device labels from the first device read (module docstring)."""
    if not xpus:
        return {}
    first = xpus[0]
    labels = {wire.LABEL_GPU_MODEL: first.model, wire.LABEL_GPU_VENDOR: first.vendor}
    if first.topology is not None and first.topology.p2p_links is not None:
        labels[wire.LABEL_GPU_PARTITION_POLICY] = (wire.PARTITION_POLICY_HONOR if first.topology.must_honor_partition
                                                   else wire.PARTITION_POLICY_PREFER)
    return labels


def xpu_partitions(xpus: Sequence[XpuDevice]) -> dict[str, list[dict[str, Any]]]:
    """The gpu-partitions table from the p2p links, keys as Go's JSON writes a map[int] (sorted as strings)."""
    table: dict[int, list[dict[str, Any]]] = {}
    seen: set[tuple[int, ...]] = set()
    for xpu in xpus:
        if xpu.topology is None or not xpu.topology.p2p_links:
            continue
        for link in xpu.topology.p2p_links:
            if not link.peer_minor or not link.type:
                _once(f"{xpu.uuid} {link}", "xpu %s-%s-%s has an invalid p2p link %s; skipped", xpu.vendor,
                      xpu.model, xpu.minor, link)
                continue
            minors = set()
            for raw in [*link.peer_minor.split(","), xpu.minor]:
                if _INT.fullmatch(raw):
                    minors.add(int(raw))
                else:
                    _once(f"{xpu.uuid} {link} {raw}", "xpu %s: peer minor %r of %r is not an integer; left out",
                          xpu.uuid, raw, link.peer_minor)
            group = tuple(sorted(minors))
            if group in seen:
                continue
            seen.add(group)
            table.setdefault(len(group), []).append({"minors": list(group), "gpuLinkType": link.type,
                                                     "allocationScore": 1})
    return {str(k): table[k] for k in sorted(table, key=str)}


def xpu_annotations(xpus: Sequence[XpuDevice]) -> dict[str, str]:
    table = xpu_partitions(xpus)
    return {wire.ANNOTATION_GPU_PARTITIONS: go_json(table)} if table else {}
