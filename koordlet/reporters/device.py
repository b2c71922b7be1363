"""The Device object (``scheduling.koordinator.sh/v1alpha1``, cluster-scoped, named after the node).

Facts: upstream ``pkg/koordlet/statesinformer/impl/states_device_linux.go`` (``statesInformer.reportDevice``,
``buildGPUDevice``, ``buildRDMADevice``, ``buildXPUDevice``) and ``apis/scheduling/v1alpha1/device_types.go``:
* GPUs: ``{type: gpu, id: <NVML UUID>, minor, health, resources: {gpu-core: 100, gpu-memory: <bytes>,
  gpu-memory-ratio: 100}, topology: {socketID: -1, nodeID, pcieID, busID}}``; topology only with a PCIe root and
  bus id; NUMA node -1 is reported as 0 (upstream's helper does the same). A ``Healthy`` condition only once a
  GPU is unhealthy (False, reason ``Xid<N>`` / ``DeviceHealthCheckNotSupported`` / our ``GPULost``).
* RDMA: ``{type: rdma, id: <PF BDF>, minor, health, resources: {rdma: 100}, topology, vfGroups: [{vfs: [{minor:
  -1, busID}]}]}``, VFs sorted by bus id, only when SR-IOV VFs are configured.
* Labels ``gpu-vendor: nvidia``, ``gpu-model`` (uniform names only), ``gpu-driver-version``; koordlet owns labels
  and annotations and replaces them wholesale on update; ``spec.devices`` likewise. ``status`` (the scheduler's
  allocations; the CRD has no status subresource) is kept from the live object.
* Devices sorted by (type, minor); an update only when devices, labels or annotations differ semantically.
* XPUs (non-NVIDIA accelerators) from the device-info files of ``xpu-device-infos-dir``
  (``reporters.xpu``): when there are any, they are the node's GPUs and NVML's are left out, and the labels and
  annotations are theirs, as upstream.

Beyond upstream:
* the ``scheduling.koordinator.sh/gpu-partitions`` table derived from the real NVLink/PCIe topology
  (``reporters.gpu_partitions``) and the ``gpu-partition-policy`` label from config (policy ``none`` leaves both
  out, which is what upstream sends for NVIDIA GPUs);
* a condition's ``lastTransitionTime`` is carried over from the live object *before* comparing, so an unhealthy
  GPU does not cause an update every cycle (upstream stamps "now" and therefore always differs);
* a GPU that fell off the bus is still listed (minor and UUID from the driver's /proc file), unhealthy, so the
  scheduler stops placing pods on it instead of seeing the minor vanish.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import format_bytes, parse_quantity
from koordlet.component import Context, Plugin
from koordlet.host.nvml import Gpu, GpuInventory
from koordlet.host.rdma import RdmaDevice
from koordlet.reporters.cluster import ObjectWriter
from koordlet.reporters.gpu_partitions import GpuLinks, derive_partitions
from koordlet.reporters.xpu import XpuDevice, XpuSource, xpu_annotations, xpu_devices, xpu_labels
from koordlet.states.decode import json_value
from koordlet.states.node import NodeInfo
from koordlet.states.topology import go_json

log = logging.getLogger(__name__)

API_VERSION = "scheduling.koordinator.sh/v1alpha1"
KIND = "Device"
PARTITION_POLICIES = (wire.PARTITION_POLICY_PREFER, wire.PARTITION_POLICY_HONOR, "none")

Health = Callable[[str], "tuple[str, str] | None"]      # bus id -> (reason, message) when unhealthy


def _time(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _topology(numa_node: int, root: str, bus_id: str) -> dict[str, Any] | None:
    if not root or not bus_id:
        return None
    return {"socketID": -1, "nodeID": max(numa_node, 0), "pcieID": root, "busID": bus_id}


def gpu_device(gpu: Gpu, unhealthy: tuple[str, str] | None, now: float) -> dict[str, Any]:
    device: dict[str, Any] = {"type": wire.DEVICE_GPU, "id": gpu.uuid, "minor": gpu.minor,
                              "health": unhealthy is None and not gpu.lost,
                              "resources": {wire.RESOURCE_GPU_CORE: "100",
                                            wire.RESOURCE_GPU_MEMORY: format_bytes(gpu.memory_total),
                                            wire.RESOURCE_GPU_MEMORY_RATIO: "100"}}
    if gpu.lost:      # its memory size is unknown: no resources, as the scheduler treats unhealthy devices anyway
        device["resources"] = {}
    if gpu.mig_enabled:    # split into MIG instances by the driver: the companion scheduler does not place on it
        device["labels"] = {wire.LABEL_GPU_MIG: "enabled"}
    topology = _topology(gpu.numa_node, gpu.pcie_root, gpu.bus_id)
    if topology:
        device["topology"] = topology
    if unhealthy is not None:
        device["conditions"] = [{"type": wire.CONDITION_HEALTHY, "status": "False", "lastTransitionTime": _time(now),
                                 "reason": unhealthy[0], "message": unhealthy[1] or "device is unhealthy"}]
    return device


def rdma_device(nic: RdmaDevice) -> dict[str, Any]:
    device: dict[str, Any] = {"type": wire.DEVICE_RDMA, "id": nic.bus_id, "minor": nic.minor, "health": nic.health,
                              "resources": {wire.RESOURCE_RDMA: "100"}}
    topology = _topology(nic.placement.numa_node, nic.placement.root, nic.bus_id)
    if topology:
        device["topology"] = topology
    if nic.vf_enabled and nic.vfs:
        device["vfGroups"] = [{"vfs": [{"minor": -1, "busID": vf} for vf in sorted(nic.vfs)]}]
    return device


def partition_inputs(gpus: Sequence[Gpu]) -> list[GpuLinks]:
    """The NVLink wiring of each GPU as the partition rule reads it (lost GPUs take no part)."""
    out = []
    for gpu in gpus:
        if gpu.lost:
            continue
        peers: dict[str, int] = {}
        switch = 0
        for link in gpu.nvlinks:
            if link.remote_type == "switch":
                switch += 1
            elif link.remote_type == "gpu" and link.remote_bus_id:
                peers[link.remote_bus_id] = peers.get(link.remote_bus_id, 0) + 1
        versions = {link.version for link in gpu.nvlinks}
        out.append(GpuLinks(gpu.minor, gpu.bus_id, peers, switch, versions.pop() if len(versions) == 1 else 0))
    return out


def desired(node: NodeInfo, gpus: GpuInventory | None, health: Health, rdma: Sequence[RdmaDevice],
            partition_policy: str, now: float, xpus: Sequence[XpuDevice] = ()) -> dict[str, Any]:
    """The object this agent wants (no resourceVersion): what a create sends and what an update compares."""
    devices: list[dict[str, Any]] = xpu_devices(xpus, now)
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if devices:                 # XPUs first; NVML's GPUs only without them (upstream's reportDevice)
        labels, annotations = xpu_labels(xpus), xpu_annotations(xpus)
    elif gpus is not None and gpus.gpus:
        devices += [gpu_device(g, health(g.bus_id), now) for g in gpus.gpus]
        labels[wire.LABEL_GPU_VENDOR] = wire.GPU_VENDOR_NVIDIA
        if gpus.model:
            labels[wire.LABEL_GPU_MODEL] = gpus.model
        if gpus.driver_version:
            labels[wire.LABEL_GPU_DRIVER_VERSION] = gpus.driver_version
        if partition_policy != "none":
            table = derive_partitions(partition_inputs(gpus.gpus), gpus.pcie_levels)
            if table:
                annotations[wire.ANNOTATION_GPU_PARTITIONS] = go_json(table)
                labels[wire.LABEL_GPU_PARTITION_POLICY] = partition_policy
    devices += [rdma_device(nic) for nic in rdma]
    devices.sort(key=lambda d: (d["type"], d["minor"]))
    meta: dict[str, Any] = {"name": node.name}
    if node.uid:
        meta["ownerReferences"] = node.owner_references()
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
            "spec": {"devices": devices} if devices else {}}


def _carry_transition_times(devices: list[dict[str, Any]], live: Sequence[Any]) -> None:
    """Keep a condition's lastTransitionTime when its status did not change (matched by device id and type)."""
    old = {(d.get("id"), c.get("type")): c for d in live if isinstance(d, Mapping)
           for c in (d.get("conditions") or ()) if isinstance(c, Mapping)}
    for device in devices:
        for cond in device.get("conditions", ()):
            prev = old.get((device.get("id"), cond["type"]))
            if prev is not None and prev.get("status") == cond["status"] and prev.get("lastTransitionTime"):
                cond["lastTransitionTime"] = prev["lastTransitionTime"]


def _canonical(value: Any) -> Any:
    """For semantic comparison: nulls and empty values are the same as absent (Go's omitempty)."""
    if isinstance(value, Mapping):
        return {k: _canonical(v) for k, v in value.items() if v not in (None, {}, [], "")}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _devices_key(devices: Sequence[Any]) -> list[Any]:
    out = []
    for d in devices:
        if not isinstance(d, Mapping):
            out.append(d)
            continue
        d = dict(d)
        try:
            d["resources"] = {k: parse_quantity(v) for k, v in (d.get("resources") or {}).items()}
        except ValueError:
            pass                   # someone wrote garbage: it will compare unequal and be replaced
        d.setdefault("health", False)
        out.append(_canonical(d))
    return sorted(out, key=lambda d: (str(d.get("type")), d.get("minor", -1)) if isinstance(d, dict) else ("", -1))


def _annotations_key(annotations: Mapping[str, Any]) -> dict[str, Any]:
    return {k: json_value(v) if isinstance(v, str) and v[:1] in "{[" else v for k, v in annotations.items()}


def merge(live: Mapping[str, Any], want: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The live object with our devices, labels and annotations in it, or (None, "") when nothing differs.

    Everything else on the live object (status allocations, other metadata, resourceVersion) is kept.
    """
    live_meta = live.get("metadata") or {}
    devices = json.loads(json.dumps((want.get("spec") or {}).get("devices", [])))
    live_devices = (live.get("spec") or {}).get("devices") or []
    _carry_transition_times(devices, live_devices)
    labels = (want.get("metadata") or {}).get("labels") or {}
    annotations = (want.get("metadata") or {}).get("annotations") or {}
    reasons = []
    if _devices_key(devices) != _devices_key(live_devices):
        reasons.append("devices")
    if dict(labels) != dict(live_meta.get("labels") or {}):
        reasons.append("labels")
    if _annotations_key(annotations) != _annotations_key(live_meta.get("annotations") or {}):
        reasons.append("annotations")
    if not reasons:
        return None, ""
    meta = {k: v for k, v in live_meta.items() if k not in ("labels", "annotations")}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    spec = {**(live.get("spec") or {}), "devices": devices}
    if not devices:
        spec.pop("devices")
    return {**live, "metadata": meta, "spec": spec}, ",".join(reasons)


def write_device(writer: ObjectWriter, want: dict[str, Any]) -> str:
    """The Device object: devices, labels and annotations replaced wholesale, the scheduler's status kept."""
    name = want["metadata"]["name"]

    def update(obj: dict[str, Any]) -> dict[str, Any] | None:
        merged, reason = merge(obj, want)
        if merged is not None:
            log.info("Device update node=%s changed=%s", name, reason)
        return merged

    return writer.write(name, lambda: want, update)


# --- the report (koordlet.component) ------------------------------------------------------------------------------


def device_object(ctx: Context, now: float | None = None, xpus: XpuSource | None = None) -> dict[str, Any]:
    """The Device object this agent wants (GPUs and XPUs with the Accelerators gate, RDMA NICs with both gates:
    upstream's RDMA rides the GPU reporter). ``xpus``: the report's source, which keeps the last good read; without
    it the device-info files are read now."""
    gpus = ctx.node.gpus
    accelerators = ctx.config.gate("Accelerators")
    rdma = ctx.node.rdma if accelerators else None
    source = xpus if xpus is not None else XpuSource(ctx.config.xpu_device_infos_dir)
    return desired(ctx.node.node_info(), gpus.inventory if gpus else None,
                   gpus.health.get if gpus else (lambda bus_id: None), rdma or [], ctx.config.gpu_partition_policy,
                   time.time() if now is None else now, source.read() if accelerators else ())


class DeviceReport:
    """The Device object every node-topology-sync-interval, created owned by the Node."""

    kind = "device"
    wait_first = False

    def __init__(self, ctx: Context) -> None:
        from koordlet.states.kubeapi import DEVICES
        cluster = ctx.node.cluster
        assert cluster is not None and cluster.device is not None
        self._ctx, self._watcher = ctx, cluster.device
        self._writer = ObjectWriter(cluster.api, cluster.device, DEVICES)
        self._bad = LogOnce(log, logging.ERROR)
        self._xpus = XpuSource(ctx.config.xpu_device_infos_dir)

    def interval(self) -> float:
        return self._ctx.config.node_topology_sync_interval

    def ready(self) -> bool:
        from koordlet.reporters.nrt import node_known
        return self._watcher.synced.is_set() and node_known(self._ctx, self._bad, "Device")

    def send(self, stop: threading.Event) -> str:
        return write_device(self._writer, device_object(self._ctx, xpus=self._xpus))


PLUGIN = Plugin("device", lambda ctx: DeviceReport(ctx) if ctx.node.cluster and ctx.node.cluster.device else None,
                gates=("Accelerators",), when=lambda c: c.node_topology_sync_interval > 0, cluster=True)
