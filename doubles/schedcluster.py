"""Cluster objects for the companion scheduler's tests and benchmarks: Nodes, Device CRs shaped as the agent reports
them (``koordlet/reporters/device.py``), NodeMetrics, and pods with device requests.

Kept pytest-free and outside tests/ so bench/ can build the same clusters. The Device CRs follow the agent's format
exactly (resources as quantity strings, ``topology.socketID`` -1, RDMA VFs in one unlabeled group with minor -1);
the closed-loop test feeds the agent's *real* report instead, so nothing here stands in for the agent's output
where the agent itself can run.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from koordlet.base.quantity import format_bytes

GIB = 1 << 30


def node(name: str, *, cpu: str = "64", memory: str = "512Gi", labels: Mapping[str, str] | None = None,
         annotations: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         "annotations": dict(annotations or {})},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable)}}


def gpu(minor: int, *, numa: int = 0, pcie: str = "pci0000:00", memory: int = 80 * GIB, healthy: bool = True,
        node_name: str = "n") -> dict[str, Any]:
    return {"type": "gpu", "id": f"GPU-{node_name}-{minor:02d}", "minor": minor, "health": healthy,
            "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": format_bytes(memory),
                          "koordinator.sh/gpu-memory-ratio": "100"},
            "topology": {"socketID": -1, "nodeID": numa, "pcieID": pcie, "busID": f"0000:{0x18 + minor:02x}:00.0"}}


def rdma(minor: int, *, numa: int = 0, pcie: str = "pci0000:00", vfs: int = 4) -> dict[str, Any]:
    bus = f"0000:{0x50 + minor:02x}:00"
    device: dict[str, Any] = {"type": "rdma", "id": f"{bus}.0", "minor": minor, "health": True,
                              "resources": {"koordinator.sh/rdma": "100"},
                              "topology": {"socketID": -1, "nodeID": numa, "pcieID": pcie, "busID": f"{bus}.0"}}
    if vfs:
        device["vfGroups"] = [{"vfs": [{"minor": -1, "busID": f"{bus}.{i + 1}"} for i in range(vfs)]}]
    return device


def device_cr(name: str, devices: Sequence[Mapping[str, Any]], *, labels: Mapping[str, str] | None = None,
              annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": {"devices": [dict(d) for d in devices]}}


def gpu_board(name: str, gpus: int = 8, *, per_switch: int = 2, per_numa: int = 4, nics: int = 0,
              memory: int = 80 * GIB) -> dict[str, Any]:
    """An HGX-like node: ``gpus`` GPUs, ``per_switch`` per PCIe switch, ``per_numa`` per NUMA node, and optionally
    one RDMA NIC per switch (with VFs), as the agent reports such a machine."""
    devices = [gpu(i, numa=i // per_numa, pcie=f"pci{i // per_switch}", memory=memory, node_name=name)
               for i in range(gpus)]
    devices += [rdma(i, numa=(i * per_switch) // per_numa, pcie=f"pci{i}") for i in range(nics)]
    return device_cr(name, devices, labels={"node.koordinator.sh/gpu-vendor": "nvidia"})


def pod(name: str, requests: Mapping[str, str] | None = None, *, namespace: str = "default",
        annotations: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
        node_name: str = "", priority: int = 0, uid: str | None = None) -> dict[str, Any]:
    resources = {"requests": dict(requests or {}), "limits": dict(requests or {})}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", "resources": resources}],
                            "priority": priority, "schedulerName": "koord-companion"}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4()),
                         "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}
