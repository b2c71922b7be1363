"""The cluster a trace stands for: per-model GPU profiles, and the Node, Device and Pod objects a trace record
becomes, as the agent would report the machine and as a user would submit the pod.

**GPU profiles.** The trace names only a model per node; the Device object the agent would report also needs each
card's memory and where it sits (PCIe switch, NUMA node) and how the cards are linked. Per model:

=========  ===========  ========  ==========  ========  ===========================================================
model      memory MiB   link      per switch  per NUMA  what it is (memory: ``nvidia-smi``'s total in public logs)
=========  ===========  ========  ==========  ========  ===========================================================
V100M16    16160        NVLink    2           4         Tesla V100-SXM2-16GB; NVLink 2.0 hybrid cube mesh (DGX-1V)
V100M32    32510        NVLink    2           4         Tesla V100-SXM2-32GB; the same mesh
P100       16276        PCIe      2           4         Tesla P100-PCIE-16GB (the trace's P100 nodes hold 1-2 cards)
T4         15360        PCIe      2           4         Tesla T4
A10        23028        PCIe      2           4         NVIDIA A10
G2         24576        PCIe      2           4         undisclosed by the trace: assumed an 8-card PCIe board
G3         81920        NVSwitch  2           4         undisclosed: assumed HGX A100 class, 12 NVLink 3.0 per card
A100       81920        NVSwitch  2           4         A100-SXM4-80GB, 12 NVLink 3.0 links per card to NVSwitches
H100       81559        NVSwitch  2           4         H100 80GB HBM3, 18 NVLink 4.0 links per card
(other)    16384        PCIe      2           4         the default for a model not listed (logged once per model)
=========  ===========  ========  ==========  ========  ===========================================================

A100 and H100 are there for clusters beyond the trace. GPU ``i`` sits behind PCIe switch ``i // per_switch`` on
NUMA node ``i // per_numa``. The hybrid cube mesh is DGX-1V's wiring as ``nvidia-smi topo -m`` prints it (two fully
linked quads 0-3 and 4-7, GPU ``i`` linked to ``i + 4``, six links per card); a board with fewer cards has the
mesh's first ones, more than 8 repeat it per 8. The partition table is what the agent derives from that wiring
(``koordlet.reporters.gpu_partitions``), with NVML's PCIe levels: same switch SINGLE, same NUMA node NODE, else
SYSTEM. The memory sizes only show in the Device's ``gpu-memory``: the trace's requests are shares of a card, turned
into percentages (below).

**Pods.** ``num_gpu`` > 1 or ``gpu_milli`` = 1000 ask ``nvidia.com/gpu`` whole cards; a share of one card
(``gpu_milli`` < 1000) asks ``koordinator.sh/gpu-core`` and ``gpu-memory-ratio`` = ceil(gpu_milli / 10) percent:
koordinator's granularity is 1 % of a card, and rounding up keeps the pod's promise (460 milli -> 46 %, 455 -> 46 %,
5 -> 1 %; 991..999 -> 100 %, the whole of one card). The trace has one number per share and the paper treats a
GPU as one dimension, so the same percentage goes to compute and to memory. ``whole_gpus`` is what a user gets
from kube's default scheduler and the device plugin: every GPU pod asks ``nvidia.com/gpu`` max(num_gpu, 1) whole
cards. ``gpu_spec`` becomes a required node affinity on the ``gpu-model`` label.

Separate because the simulator, the command line and the agent-report reader build the same objects from it, while
the records and the generator know nothing of Kubernetes.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import format_bytes, format_milli
from koordlet.reporters.gpu_partitions import PCIE_NODE, PCIE_SINGLE, PCIE_SYSTEM, GpuLinks, derive_partitions
from koordlet.states.kubeapi import DEVICES
from koordlet.states.topology import go_json
from scheduler.trace.records import TraceNode, TracePod

log = logging.getLogger(__name__)

MIB, GIB = 1 << 20, 1 << 30
SCHEDULER_NAME = "koord-companion"
NAMESPACE = "default"
PODS_PER_NODE = "110"                      # the kubelet's default maxPods
WHOLE_GPU = "nvidia.com/gpu"               # what NVIDIA's device plugin advertises and whole-card pods ask
LINK_NVLINK, LINK_NVSWITCH, LINK_PCIE = wire.GPU_LINK_NVLINK, "NVSwitch", wire.GPU_LINK_PCIE
PARTITION_POLICIES = (wire.PARTITION_POLICY_PREFER, wire.PARTITION_POLICY_HONOR, "none")   # the agent's option
DEVICE_KIND = "Device"
_UIDS = uuid.UUID("6f1c2a4e-5b0d-4c47-9a53-2d9e8f7b1c30")    # namespace of the uuid5 uids and GPU UUIDs made here


# --- GPU profiles and the objects a node stands for --------------------------------------------------------------

@dataclass(frozen=True)
class GpuModel:
    """How one GPU model's cards sit in a node (the module docstring's table). ``switch_links`` and
    ``nvlink_version`` (NVML's nvmlNvlinkVersion_t: 2 = 2.0, 4 = 3.0, 6 = 4.0) describe the NVLinks: per card to the
    NVSwitch fabric for ``NVSwitch``; ``NVLink`` boards are wired as the hybrid cube mesh."""

    name: str
    memory_bytes: int
    per_pcie_switch: int
    per_numa: int
    link: str
    switch_links: int = 0
    nvlink_version: int = 0

    def __post_init__(self) -> None:
        if self.link not in (LINK_NVLINK, LINK_NVSWITCH, LINK_PCIE):
            raise ValueError(f"gpu model {self.name}: link {self.link!r} is not NVLink, NVSwitch or PCIe")
        if self.per_pcie_switch < 1 or self.per_numa < self.per_pcie_switch or self.per_numa % self.per_pcie_switch:
            raise ValueError(f"gpu model {self.name}: a NUMA node holds whole PCIe switches "
                             f"({self.per_numa} per NUMA node, {self.per_pcie_switch} per switch)")
        if (self.link == LINK_NVSWITCH) != (self.switch_links > 0):
            raise ValueError(f"gpu model {self.name}: switch_links go with the NVSwitch link type")
        if (self.link == LINK_PCIE) != (self.nvlink_version == 0):
            raise ValueError(f"gpu model {self.name}: an NVLink generation goes with NVLink and NVSwitch only")


_NVLINK_2_0, _NVLINK_3_0, _NVLINK_4_0 = 2, 4, 6
PROFILES: Mapping[str, GpuModel] = {p.name: p for p in (
    GpuModel("V100M16", 16160 * MIB, 2, 4, LINK_NVLINK, nvlink_version=_NVLINK_2_0),
    GpuModel("V100M32", 32510 * MIB, 2, 4, LINK_NVLINK, nvlink_version=_NVLINK_2_0),
    GpuModel("P100", 16276 * MIB, 2, 4, LINK_PCIE),
    GpuModel("T4", 15360 * MIB, 2, 4, LINK_PCIE),
    GpuModel("A10", 23028 * MIB, 2, 4, LINK_PCIE),
    GpuModel("G2", 24 * GIB, 2, 4, LINK_PCIE),
    GpuModel("G3", 80 * GIB, 2, 4, LINK_NVSWITCH, 12, _NVLINK_3_0),
    GpuModel("A100", 80 * GIB, 2, 4, LINK_NVSWITCH, 12, _NVLINK_3_0),
    GpuModel("H100", 81559 * MIB, 2, 4, LINK_NVSWITCH, 18, _NVLINK_4_0),
)}
DEFAULT_PROFILE = GpuModel("", 16 * GIB, 2, 4, LINK_PCIE)

# DGX-1V's hybrid cube mesh: (GPU a, GPU b) -> NVLinks between them; six per card
HYBRID_CUBE_MESH: Mapping[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1, (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}
_MESH_PEERS: Mapping[int, Mapping[int, int]] = {
    gpu: {b if a == gpu else a: n for (a, b), n in HYBRID_CUBE_MESH.items() if gpu in (a, b)} for gpu in range(8)}

_unknown_models = LogOnce(log, logging.WARNING)


def model_profile(model: str) -> GpuModel:
    """The profile of a model; an unknown one gets :data:`DEFAULT_PROFILE` under its own name (logged once)."""
    known = PROFILES.get(model)
    if known is not None:
        return known
    _unknown_models(model, "gpu model unknown model=%s; using the default profile link=%s memory=%s per_switch=%d "
                    "per_numa=%d", model, DEFAULT_PROFILE.link, format_bytes(DEFAULT_PROFILE.memory_bytes),
                    DEFAULT_PROFILE.per_pcie_switch, DEFAULT_PROFILE.per_numa)
    return replace(DEFAULT_PROFILE, name=model)


def node_json(name: str, cpu_milli: int, memory_bytes: int, gpus: int, labels: Mapping[str, str],
              capacity: tuple[int, int] | None = None) -> dict[str, Any]:
    """A v1.Node with allocatable cpu, memory, pods and the device plugin's ``nvidia.com/gpu`` (koordinator's own
    device resources are left to the extender: ``ignoredByScheduler``, deploy/README.md)."""
    def resources(cpu: int, memory: int) -> dict[str, str]:
        out = {"cpu": format_milli(cpu), "memory": format_bytes(memory), "pods": PODS_PER_NODE}
        if gpus:
            out[WHOLE_GPU] = str(gpus)
        return out

    allocatable = resources(cpu_milli, memory_bytes)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}, "annotations": {}},
            "status": {"allocatable": allocatable,
                       "capacity": resources(*capacity) if capacity else dict(allocatable)}}


def _pcie_place(minor: int, profile: GpuModel) -> tuple[str, str]:
    """(pcieID, busID) of a card: switch ``s`` is root ``pci<domain>:<bus>``, eight switches to a PCI domain."""
    domain, root = divmod(minor // profile.per_pcie_switch, 8)
    root_bus = 0x10 + 0x20 * root
    return f"pci{domain:04x}:{root_bus:02x}", f"{domain:04x}:{root_bus + 1 + minor % profile.per_pcie_switch:02x}:00.0"


def _gpu_devices(node: str, count: int, profile: GpuModel) -> list[dict[str, Any]]:
    """The Device's GPU entries as the agent reports them (the id an NVML-style UUID derived from node and minor)."""
    devices = []
    for minor in range(count):
        root, bus = _pcie_place(minor, profile)
        devices.append({"type": wire.DEVICE_GPU, "id": f"GPU-{uuid.uuid5(_UIDS, f'{node}/gpu/{minor}')}",
                        "minor": minor, "health": True,
                        "resources": {wire.RESOURCE_GPU_CORE: "100",
                                      wire.RESOURCE_GPU_MEMORY: format_bytes(profile.memory_bytes),
                                      wire.RESOURCE_GPU_MEMORY_RATIO: "100"},
                        "topology": {"socketID": -1, "nodeID": minor // profile.per_numa, "pcieID": root,
                                     "busID": bus}})
    return devices


@functools.lru_cache(maxsize=256)
def partition_table(profile: GpuModel, count: int) -> str:
    """The ``gpu-partitions`` annotation the agent derives for ``count`` cards of a profile: the NVLink wiring and
    NVML's PCIe level of each pair handed to its own rule. Remembered per board, since the rule tries every ring
    and matching (milliseconds for 8 cards) and a cluster has a handful of boards."""
    buses = [_pcie_place(minor, profile)[1] for minor in range(count)]
    links = []
    for minor in range(count):
        base = minor - minor % 8
        peers = {buses[base + peer]: n for peer, n in _MESH_PEERS[minor % 8].items()
                 if base + peer < count} if profile.link == LINK_NVLINK else {}
        links.append(GpuLinks(minor, buses[minor], peers, profile.switch_links, profile.nvlink_version))
    levels = {frozenset((buses[a], buses[b])):
              PCIE_SINGLE if a // profile.per_pcie_switch == b // profile.per_pcie_switch
              else PCIE_NODE if a // profile.per_numa == b // profile.per_numa else PCIE_SYSTEM
              for a in range(count) for b in range(a + 1, count)}
    return go_json(derive_partitions(links, levels))


def node_objects(node: TraceNode, *, partition_policy: str = wire.PARTITION_POLICY_PREFER
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The Node and the Device object the agent would report for such a machine (None for a CPU-only node).

    ``partition_policy`` is the agent's ``gpu-partition-policy`` option: ``Prefer`` (its default) and ``Honor``
    publish the partition table derived from the profile's wiring with that policy label; ``none`` publishes
    neither, as upstream koordlet does for NVIDIA GPUs. The agent derives a table for PCIe boards too (pairs behind
    one switch), so every GPU node has one unless the policy is ``none``.
    """
    if partition_policy not in PARTITION_POLICIES:
        raise ValueError(f"partition policy {partition_policy!r}: expected one of {', '.join(PARTITION_POLICIES)}")
    if not node.gpus:
        return node_json(node.name, node.cpu_milli, node.memory_mib * MIB, 0, {}), None
    profile = model_profile(node.model)
    labels = {wire.LABEL_GPU_VENDOR: wire.GPU_VENDOR_NVIDIA, wire.LABEL_GPU_MODEL: node.model}
    meta: dict[str, Any] = {"name": node.name, "labels": dict(labels)}
    if partition_policy != "none":
        meta["labels"][wire.LABEL_GPU_PARTITION_POLICY] = partition_policy
        meta["annotations"] = {wire.ANNOTATION_GPU_PARTITIONS: partition_table(profile, node.gpus)}
    device = {"apiVersion": DEVICES.api_version, "kind": DEVICE_KIND, "metadata": meta,
              "spec": {"devices": _gpu_devices(node.name, node.gpus, profile)}}
    return node_json(node.name, node.cpu_milli, node.memory_mib * MIB, node.gpus, labels), device


# --- pods --------------------------------------------------------------------------------------------------------

def gpu_request_milli(pod: TracePod) -> int:
    """The pod's GPU request in milli-GPUs: whole cards × 1000, or the share of one card."""
    if pod.num_gpu == 0:
        return 0
    return pod.gpu_milli if pod.num_gpu == 1 else pod.num_gpu * 1000


def share_percent(gpu_milli: int) -> int:
    """A share of one card in koordinator's 1 % steps, rounded up so the pod gets at least what it asked."""
    return -(-gpu_milli // 10)


def pod_object(pod: TracePod, *, whole_gpus: bool = False) -> dict[str, Any]:
    """The v1.Pod the trace row stands for, pending for the companion scheduler (requests == limits; the module
    docstring says how the GPU request is written). The uid is derived from the name, so it is unique within a
    trace (names are) and the same in every run."""
    requests = {"cpu": format_milli(pod.cpu_milli), "memory": format_bytes(pod.memory_mib * MIB)}
    if pod.num_gpu and (whole_gpus or gpu_request_milli(pod) >= 1000):
        requests[WHOLE_GPU] = str(pod.num_gpu)
    elif pod.num_gpu:
        percent = str(share_percent(pod.gpu_milli))
        requests[wire.RESOURCE_GPU_CORE] = percent
        requests[wire.RESOURCE_GPU_MEMORY_RATIO] = percent
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trace",
                                            "resources": {"requests": requests, "limits": dict(requests)}}],
                            "schedulerName": SCHEDULER_NAME, "priority": 0}
    if pod.gpu_spec:
        models = list(dict.fromkeys(pod.gpu_spec))        # the trace repeats a model now and then
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": wire.LABEL_GPU_MODEL, "operator": "In", "values": models}]}]}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": NAMESPACE, "uid": str(uuid.uuid5(_UIDS, f"pod/{pod.name}")),
                         "labels": {}, "annotations": {}},
            "spec": spec, "status": {"phase": "Pending"}}
