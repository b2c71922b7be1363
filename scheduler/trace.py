"""The simulator's input side: the production trace's CSV files, the cluster objects they stand for, a seeded
workload generator with the trace's marginals, and nodes read back from the agent's own reports.

The trace is Alibaba's ``cluster-trace-gpu-v2023`` (github alibaba/clusterdata, ``openb_node_list_all_node.csv``,
``openb_pod_list_default.csv`` and ``openb_pod_list_gpuspec33.csv``), the one Weng et al., "Beware of Fragmentation"
(USENIX ATC '23) evaluates on.

**CSV.** Nodes ``sn,cpu_milli,memory_mib,gpu,model``; pods ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,
qos,pod_phase,creation_time,deletion_time,scheduled_time``. A header row names the columns (any order; columns
beyond these are ignored). Empty cells mean: no model (a CPU-only node), no ``gpu_spec`` (any model), no
``deletion_time`` / ``scheduled_time`` (the trace's Pending pods have none). ``gpu_spec`` is ``|``-separated;
empty segments are dropped as the trace's own converter does (``pod_csv_to_yaml.py``). Integers may carry a
``.0`` (pandas writes a column with empty cells as floats). The trace's own rules are checked: ``gpu_milli`` is 0
without GPUs, 1..1000 for one GPU and 1000 for several; a GPU node has a model and a CPU-only node none; names are
unique DNS subdomains (they become object names); models and ``gpu_spec`` entries are label values (they are
matched against the ``gpu-model`` label). A bad cell is a ValueError naming the file, line and column.

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

**Generator.** :class:`Marginals` holds its knobs; their defaults and where each number comes from are on the class.

**Agent reports.** :func:`read_report_dir` reads what ``koordlet report --once -o yaml|json`` prints (several
documents, or a JSON List) or what its standalone sink writes into ``report-dir`` (``nodemetric.yaml``,
``noderesourcetopology.yaml``, ``device.yaml``), any number of nodes, in one directory or its subdirectories.
"""

from __future__ import annotations

import csv
import functools
import logging
import math
import os
import random
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import format_bytes, format_milli, milli, parse_quantity
from koordlet.base.yamlfile import loads_yaml
from koordlet.reporters.gpu_partitions import PCIE_NODE, PCIE_SINGLE, PCIE_SYSTEM, GpuLinks, derive_partitions
from koordlet.states.kubeapi import DEVICES, NODE_METRICS, NODE_RESOURCE_TOPOLOGIES
from koordlet.states.topology import go_json

log = logging.getLogger(__name__)

MIB, GIB = 1 << 20, 1 << 30
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
               "creation_time", "deletion_time", "scheduled_time")
SCHEDULER_NAME = "koord-companion"
NAMESPACE = "default"
PODS_PER_NODE = "110"                      # the kubelet's default maxPods
WHOLE_GPU = "nvidia.com/gpu"               # what NVIDIA's device plugin advertises and whole-card pods ask
LINK_NVLINK, LINK_NVSWITCH, LINK_PCIE = wire.GPU_LINK_NVLINK, "NVSwitch", wire.GPU_LINK_PCIE
PARTITION_POLICIES = (wire.PARTITION_POLICY_PREFER, wire.PARTITION_POLICY_HONOR, "none")   # the agent's option
DEVICE_KIND, NRT_KIND, NODE_METRIC_KIND = "Device", "NodeResourceTopology", "NodeMetric"
# koord-manager copies these Device labels onto the Node (pkg/slo-controller/noderesource/plugins/gpudeviceresource)
NODE_LABELS_FROM_DEVICE = (wire.LABEL_GPU_VENDOR, wire.LABEL_GPU_MODEL, wire.LABEL_GPU_DRIVER_VERSION)

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_INTEGER = re.compile(r"([+-]?\d+)(?:\.0*)?")
_UIDS = uuid.UUID("6f1c2a4e-5b0d-4c47-9a53-2d9e8f7b1c30")    # namespace of the uuid5 uids and GPU UUIDs made here


# --- the trace's rows --------------------------------------------------------------------------------------------

class _FieldError(ValueError):
    """A value that breaks the trace's rules; ``field`` names the dataclass field (or the CSV column)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _check_name(field: str, name: str) -> None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise _FieldError(field, f"{name!r:.80} is not a valid object name (a DNS subdomain: lowercase letters, "
                                 "digits, '-' and '.')")


def _check_label_value(field: str, value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise _FieldError(field, f"{value!r:.80} is not a label value (at most 63 letters, digits, '-', '_', '.')")


def _check_at_least(field: str, value: int, low: int) -> None:
    if value < low:
        raise _FieldError(field, f"{value} is below {low}")


@dataclass(frozen=True)
class TraceNode:
    """One row of the nodes CSV; the rules of the module docstring are checked on construction."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        _check_at_least("cpu_milli", self.cpu_milli, 0)
        _check_at_least("memory_mib", self.memory_mib, 0)
        _check_at_least("gpus", self.gpus, 0)
        if self.gpus and not self.model:
            raise _FieldError("model", "a node with GPUs needs its GPU model")
        if self.model and not self.gpus:
            raise _FieldError("model", f"{self.model!r:.40} given for a node without GPUs (leave it empty)")
        if self.model:
            _check_label_value("model", self.model)


@dataclass(frozen=True)
class TracePod:
    """One row of the pods CSV (``phase`` is the ``pod_phase`` column); checked on construction."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    phase: str
    creation_time: int
    deletion_time: int | None
    scheduled_time: int | None

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        _check_at_least("cpu_milli", self.cpu_milli, 0)
        _check_at_least("memory_mib", self.memory_mib, 0)
        _check_at_least("num_gpu", self.num_gpu, 0)
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise _FieldError("gpu_milli", f"{self.gpu_milli} for a pod without GPUs (num_gpu 0): must be 0")
        if self.num_gpu == 1 and not 1 <= self.gpu_milli <= 1000:
            raise _FieldError("gpu_milli", f"{self.gpu_milli} for one GPU: must be 1..1000")
        if self.num_gpu > 1 and self.gpu_milli != 1000:
            raise _FieldError("gpu_milli", f"{self.gpu_milli} for {self.num_gpu} GPUs: only one GPU can be shared, "
                                           "several are whole (1000)")
        if self.gpu_spec and not self.num_gpu:
            raise _FieldError("gpu_spec", "a GPU model constraint on a pod without GPUs")
        for model in self.gpu_spec:
            _check_label_value("gpu_spec", model)
        if not self.qos:
            raise _FieldError("qos", "empty")
        if not self.phase:
            raise _FieldError("phase", "empty")


_NODE_FIELD_COLUMNS = {"name": "sn", "gpus": "gpu"}
_POD_FIELD_COLUMNS = {"phase": "pod_phase"}


def _integer(column: str, text: str) -> int:
    m = _INTEGER.fullmatch(text.strip())
    if not m:
        raise _FieldError(column, f"{text!r:.40} is not an integer" if text.strip() else "empty (an integer is due)")
    return int(m.group(1))


def _optional_integer(column: str, text: str) -> int | None:
    return _integer(column, text) if text.strip() else None


def _node_row(cells: Mapping[str, str]) -> TraceNode:
    return TraceNode(cells["sn"].strip(), _integer("cpu_milli", cells["cpu_milli"]),
                     _integer("memory_mib", cells["memory_mib"]), _integer("gpu", cells["gpu"]),
                     cells["model"].strip())


def _pod_row(cells: Mapping[str, str]) -> TracePod:
    spec = tuple(m.strip() for m in cells["gpu_spec"].split("|") if m.strip())
    return TracePod(cells["name"].strip(), _integer("cpu_milli", cells["cpu_milli"]),
                    _integer("memory_mib", cells["memory_mib"]), _integer("num_gpu", cells["num_gpu"]),
                    _integer("gpu_milli", cells["gpu_milli"]), spec, cells["qos"].strip(), cells["pod_phase"].strip(),
                    _integer("creation_time", cells["creation_time"]),
                    _optional_integer("deletion_time", cells["deletion_time"]),
                    _optional_integer("scheduled_time", cells["scheduled_time"]))


Row = TypeVar("Row", TraceNode, TracePod)


def _read_csv(path: str, columns: Sequence[str], build: Callable[[Mapping[str, str]], Row],
              field_columns: Mapping[str, str]) -> list[Row]:
    """Rows of a trace CSV; ValueError "<path>: line L, column C (<name>): <problem>" for the first bad cell."""
    out: list[Row] = []
    reader = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            if not any(header):
                raise ValueError(f"{path}: line 1: no header row (expected {','.join(columns)})")
            index: dict[str, int] = {}
            for i, name in enumerate(header):
                if name in index:
                    raise ValueError(f"{path}: line 1, column {i + 1}: column {name!r:.40} appears twice")
                index[name] = i
            for name in columns:
                if name not in index:
                    raise ValueError(f"{path}: line 1: the header has no column {name!r} "
                                     f"(expected {','.join(columns)})")
            first_seen: dict[str, int] = {}
            for row in reader:
                line = reader.line_num
                if not any(cell.strip() for cell in row):
                    continue                                   # a blank line
                if len(row) != len(header):
                    raise ValueError(f"{path}: line {line}, column {min(len(row), len(header)) + 1}: {len(row)} "
                                     f"cells where the header has {len(header)}")
                try:
                    item = build({name: row[index[name]] for name in columns})
                except _FieldError as e:
                    column = field_columns.get(e.field, e.field)
                    raise ValueError(f"{path}: line {line}, column {index[column] + 1} ({column}): "
                                     f"{e.message}") from None
                if item.name in first_seen:
                    column = field_columns.get("name", "name")
                    raise ValueError(f"{path}: line {line}, column {index[column] + 1} ({column}): {item.name!r} "
                                     f"again (first on line {first_seen[item.name]})")
                first_seen[item.name] = line
                out.append(item)
    except csv.Error as e:
        raise ValueError(f"{path}: line {reader.line_num if reader else 1}: not CSV: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text: {e.reason}") from None
    return out


def read_nodes(path: str) -> list[TraceNode]:
    """The nodes CSV (``openb_node_list_*.csv``), in file order."""
    return _read_csv(path, NODE_COLUMNS, _node_row, _NODE_FIELD_COLUMNS)


def read_pods(path: str) -> list[TracePod]:
    """The pods CSV (``openb_pod_list_*.csv``), in file order (the trace's is arrival order)."""
    return _read_csv(path, POD_COLUMNS, _pod_row, _POD_FIELD_COLUMNS)


def _write_csv(path: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(["" if cell is None else cell for cell in row] for row in rows)


def write_nodes(path: str, nodes: Sequence[TraceNode]) -> None:
    """The nodes CSV as the trace writes it (empty model for a CPU-only node)."""
    _write_csv(path, NODE_COLUMNS, ((n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model) for n in nodes))


def write_pods(path: str, pods: Sequence[TracePod]) -> None:
    """The pods CSV as the trace writes it (empty cells for no gpu_spec and missing times)."""
    _write_csv(path, POD_COLUMNS, ((p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, "|".join(p.gpu_spec),
                                    p.qos, p.phase, p.creation_time, p.deletion_time, p.scheduled_time)
                                   for p in pods))


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


def _node_json(name: str, cpu_milli: int, memory_bytes: int, gpus: int, labels: Mapping[str, str],
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
        return _node_json(node.name, node.cpu_milli, node.memory_mib * MIB, 0, {}), None
    profile = model_profile(node.model)
    labels = {wire.LABEL_GPU_VENDOR: wire.GPU_VENDOR_NVIDIA, wire.LABEL_GPU_MODEL: node.model}
    meta: dict[str, Any] = {"name": node.name, "labels": dict(labels)}
    if partition_policy != "none":
        meta["labels"][wire.LABEL_GPU_PARTITION_POLICY] = partition_policy
        meta["annotations"] = {wire.ANNOTATION_GPU_PARTITIONS: partition_table(profile, node.gpus)}
    device = {"apiVersion": DEVICES.api_version, "kind": DEVICE_KIND, "metadata": meta,
              "spec": {"devices": _gpu_devices(node.name, node.gpus, profile)}}
    return _node_json(node.name, node.cpu_milli, node.memory_mib * MIB, node.gpus, labels), device


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


# --- the workload generator --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeShape:
    model: str                 # "" for a CPU-only node
    gpus: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True)
class PodShape:
    cpu_milli: int
    memory_mib: int


Weighted = tuple[tuple[Any, float], ...]

# Counts in openb_node_list_all_node.csv (1,523 nodes: 1,213 with 6,212 GPUs, 310 CPU-only).
TRACE_GPU_NODES: tuple[tuple[NodeShape, float], ...] = (
    (NodeShape("G2", 8, 96000, 393216), 549), (NodeShape("T4", 2, 104000, 524288), 387),
    (NodeShape("P100", 2, 16000, 122880), 107), (NodeShape("G3", 8, 128000, 786432), 39),
    (NodeShape("V100M16", 4, 32000, 131072), 28), (NodeShape("P100", 2, 64000, 262144), 22),
    (NodeShape("V100M32", 8, 96000, 786432), 21), (NodeShape("V100M16", 1, 8000, 32768), 19),
    (NodeShape("T4", 4, 96000, 393216), 17), (NodeShape("V100M32", 4, 48000, 376832), 9),
    (NodeShape("V100M16", 8, 64000, 262144), 7), (NodeShape("P100", 1, 8000, 61440), 3),
    (NodeShape("P100", 2, 8000, 61440), 2), (NodeShape("A10", 1, 128000, 1048576), 2),
    (NodeShape("V100M16", 8, 82000, 344064), 1))
TRACE_CPU_NODES: tuple[tuple[NodeShape, float], ...] = (
    (NodeShape("", 0, 32000, 262144), 129), (NodeShape("", 0, 96000, 524288), 59),
    (NodeShape("", 0, 96000, 393216), 30), (NodeShape("", 0, 32000, 131072), 23),
    (NodeShape("", 0, 64000, 524288), 22), (NodeShape("", 0, 104000, 524288), 20),
    (NodeShape("", 0, 32000, 65536), 10), (NodeShape("", 0, 64000, 262144), 8),
    (NodeShape("", 0, 64000, 131072), 4), (NodeShape("", 0, 104000, 786432), 3),
    (NodeShape("", 0, 104000, 196608), 1), (NodeShape("", 0, 96000, 786432), 1))
# openb_pod_list_default.csv (8,152 pods): every gpu_milli below 1000 with its count (3,078 shared-GPU pods)
TRACE_SHARE_MILLI: tuple[tuple[int, float], ...] = (
    (810, 1078), (470, 750), (320, 328), (650, 253), (230, 140), (460, 128), (590, 75), (160, 74), (550, 72),
    (220, 62), (370, 47), (110, 24), (480, 19), (50, 7), (330, 7), (350, 6), (270, 4), (440, 2), (140, 1), (290, 1))
# (cpu_milli, memory_mib) pairs of the same file with their counts, the rarest left out (coverage in brackets)
TRACE_CPU_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (       # CPU-only pods (96 % of 1,088)
    (PodShape(12500, 57344), 364), (PodShape(32000, 49152), 284), (PodShape(8000, 30517), 163),
    (PodShape(15400, 51200), 120), (PodShape(16500, 51200), 95), (PodShape(11400, 57344), 11),
    (PodShape(8000, 15625), 11))
TRACE_SHARE_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (     # shared-GPU pods (98 % of 3,078)
    (PodShape(3152, 5600), 1122), (PodShape(11908, 47104), 625), (PodShape(8000, 30517), 486),
    (PodShape(4000, 22888), 189), (PodShape(4000, 15258), 182), (PodShape(4152, 10600), 152),
    (PodShape(4000, 30517), 136), (PodShape(6000, 6144), 51), (PodShape(6000, 12288), 29),
    (PodShape(6000, 22888), 28), (PodShape(1000, 2048), 26))
TRACE_WHOLE_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (     # one whole GPU (94 % of 3,911)
    (PodShape(11300, 49152), 857), (PodShape(11400, 48128), 534), (PodShape(3152, 5600), 470),
    (PodShape(18708, 64512), 255), (PodShape(9810, 41560), 195), (PodShape(12000, 24576), 158),
    (PodShape(15700, 58368), 158), (PodShape(11908, 47104), 153), (PodShape(16000, 32768), 108),
    (PodShape(8000, 16384), 104), (PodShape(4000, 24576), 104), (PodShape(12000, 16384), 99),
    (PodShape(14200, 58368), 93), (PodShape(24200, 93184), 84), (PodShape(11400, 77824), 65),
    (PodShape(8000, 32768), 55), (PodShape(11900, 77824), 51), (PodShape(12000, 15360), 44),
    (PodShape(8200, 33792), 41), (PodShape(4000, 31250), 40))
TRACE_MULTI_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (     # several GPUs, per GPU (all 75 pods)
    (PodShape(11000, 40960), 18), (PodShape(8025, 32896), 18), (PodShape(8050, 33024), 9), (PodShape(8100, 33280), 7),
    (PodShape(8000, 32768), 6), (PodShape(15000, 92160), 3), (PodShape(3000, 32768), 3), (PodShape(15100, 80384), 3),
    (PodShape(15050, 80128), 3), (PodShape(8700, 21504), 2), (PodShape(15025, 80000), 2), (PodShape(7000, 30000), 1))
# openb_pod_list_gpuspec33.csv: the gpu_spec sets of its 2,388 constrained GPU pods (a repeated model merged)
TRACE_GPU_SPECS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("T4",), 1291), (("G2",), 331), (("P100",), 279), (("V100M16", "V100M32"), 163),
    (("P100", "V100M16", "V100M32"), 103), (("G3",), 86), (("G2", "P100", "T4", "V100M16", "V100M32"), 39),
    (("P100", "T4", "V100M16", "V100M32"), 33), (("A10", "G2", "T4", "V100M16", "V100M32"), 24),
    (("V100M32",), 20), (("A10", "T4"), 6), (("P100", "V100M16"), 4),
    (("A10", "G2", "P100", "T4", "V100M16", "V100M32"), 3), (("T4", "V100M16", "V100M32"), 3), (("V100M16",), 3))
TRACE_QOS: tuple[tuple[str, float], ...] = (("LS", 4647), ("BE", 3398), ("Burstable", 100), ("Guaranteed", 7))


@dataclass(frozen=True)
class Marginals:
    """The generator's knobs. Defaults are the production trace's (openb_*_default / all_node, counted):

    * nodes: ``cpu_node_share`` 310 / 1,523 CPU-only; the GPU nodes' shapes (model, GPUs, cpu, memory) weighted by
      their counts (G2 8-GPU boards hold 4,392 of the 6,212 GPUs). Nodes are apportioned, not drawn: 1,523 nodes
      give exactly the trace's population, in a seeded order.
    * pod kinds, drawn per pod (shares are normalized by their sum): CPU-only 13.35 % (1,088 of 8,152), a share of
      one GPU 37.76 % (3,078), one whole GPU 47.98 % (3,911), 2 / 4 / 8 GPUs 0.20 / 0.18 / 0.54 % (16 / 15 / 44).
    * ``share_milli``: the trace's 20 gpu_milli values below 1000 with their counts (810 milli is 35 % of them,
      470 milli 24 %); drawn independently of the pod's cpu and memory.
    * cpu and memory: the trace's most common (cpu_milli, memory_mib) pairs per kind with their counts, the rare
      tail left out (the tables above say how much they cover); for multi-GPU pods the pair is per GPU.
    * ``gpu_spec_share`` 0: the default trace has no model constraints, and it is the workload on which the paper
      reports its headline result. Production has about a third (the trace's gpuspec33 variant: 2,388 of 7,064 GPU
      pods, 0.338); ``gpu_specs`` are that variant's sets with their counts.
    * ``qos``: LS / BE / Burstable / Guaranteed as counted (the simulator does not read it).
    * arrivals: exponential gaps with the trace's mean (1,583 s over 8,152 pods; its median is 161 s, bursty, which
      an arrival-order simulation does not see); lifetimes lognormal with the trace's median 540 s and log-sd 1.88.

    Every generated pod fits some generated node while the cluster is empty: table entries (a kind, a pod shape, a
    gpu_spec set) that fit no node are left out of that draw, so on a tiny cluster the shares shift accordingly.
    """

    cpu_node_share: float = 310 / 1523
    gpu_nodes: tuple[tuple[NodeShape, float], ...] = TRACE_GPU_NODES
    cpu_nodes: tuple[tuple[NodeShape, float], ...] = TRACE_CPU_NODES
    cpu_pod_share: float = 0.1335
    share_pod_share: float = 0.3776
    whole_pod_share: float = 0.4798
    multi_gpu_pod_shares: tuple[tuple[int, float], ...] = ((2, 0.0020), (4, 0.0018), (8, 0.0054))
    share_milli: tuple[tuple[int, float], ...] = TRACE_SHARE_MILLI
    cpu_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_CPU_POD_SHAPES
    share_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_SHARE_POD_SHAPES
    whole_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_WHOLE_POD_SHAPES
    multi_gpu_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_MULTI_POD_SHAPES
    gpu_spec_share: float = 0.0
    gpu_specs: tuple[tuple[tuple[str, ...], float], ...] = TRACE_GPU_SPECS
    qos: tuple[tuple[str, float], ...] = TRACE_QOS
    mean_interarrival_s: float = 1583.0
    lifetime_median_s: float = 540.0
    lifetime_log_sd: float = 1.88

    def __post_init__(self) -> None:
        for name in ("cpu_node_share", "gpu_spec_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"marginals: {name} {getattr(self, name)} is not a share in 0..1")
        if min(self.cpu_pod_share, self.share_pod_share, self.whole_pod_share) < 0 or sum(self.pod_kinds()[1]) <= 0:
            raise ValueError("marginals: the pod kind shares must be non-negative, and not all 0")
        for name in ("gpu_nodes", "cpu_nodes", "share_milli", "cpu_pod_shapes", "share_pod_shapes",
                     "whole_pod_shapes", "multi_gpu_pod_shapes", "gpu_specs", "qos", "multi_gpu_pod_shares"):
            table: Weighted = getattr(self, name)
            if any(w < 0 for _, w in table) or (name != "multi_gpu_pod_shares" and sum(w for _, w in table) <= 0):
                raise ValueError(f"marginals: {name} needs non-negative weights, not all 0")
        if any(not 1 <= m <= 999 for m, _ in self.share_milli):
            raise ValueError("marginals: share_milli values are shares of one GPU, 1..999")
        if any(n < 2 for n, _ in self.multi_gpu_pod_shares):
            raise ValueError("marginals: multi_gpu_pod_shares are for 2 GPUs or more")
        if any(s.gpus < 1 or not s.model for s, _ in self.gpu_nodes) or any(s.gpus for s, _ in self.cpu_nodes):
            raise ValueError("marginals: gpu_nodes have a model and GPUs, cpu_nodes have neither")
        for name in ("mean_interarrival_s", "lifetime_median_s", "lifetime_log_sd"):
            if not getattr(self, name) > 0:
                raise ValueError(f"marginals: {name} must be positive")

    def pod_kinds(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(GPUs per kind, share per kind): 0 CPU-only, -1 a share of one GPU, 1 one whole GPU, n > 1 several."""
        kinds = (0, -1, 1, *(n for n, _ in self.multi_gpu_pod_shares))
        shares = (self.cpu_pod_share, self.share_pod_share, self.whole_pod_share,
                  *(s for _, s in self.multi_gpu_pod_shares))
        return kinds, shares


def _apportion(total: int, table: Sequence[tuple[NodeShape, float]]) -> list[NodeShape]:
    """``total`` shapes in proportion to the weights (largest remainder; ties to the earlier entry)."""
    weight = sum(w for _, w in table)
    exact = [total * w / weight for _, w in table]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(table)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[:total - sum(counts)]:
        counts[i] += 1
    return [shape for (shape, _), n in zip(table, counts, strict=True) for _ in range(n)]


def _gpus_of(kind: int) -> tuple[int, int]:
    """(GPUs, the factor on the pod shape) of a pod kind: multi-GPU pods' cpu and memory are per GPU."""
    gpus = max(kind, 1) if kind else 0
    return gpus, gpus if kind > 1 else 1


def _fits(node: NodeShape, gpus: int, cpu_milli: int, memory_mib: int) -> bool:
    return node.gpus >= gpus and node.cpu_milli >= cpu_milli and node.memory_mib >= memory_mib


class _Draw:
    """Weighted choices over a fixed table (cumulative weights computed once)."""

    def __init__(self, table: Sequence[tuple[Any, float]]) -> None:
        kept = [(item, w) for item, w in table if w > 0]
        self.items = [item for item, _ in kept]
        self._cum: list[float] = []
        total = 0.0
        for _, w in kept:
            total += w
            self._cum.append(total)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __call__(self, rng: random.Random) -> Any:
        return rng.choices(self.items, cum_weights=self._cum)[0]


def generate(seed: int, nodes: int, pods: int, marginals: Marginals = Marginals()
             ) -> tuple[list[TraceNode], list[TracePod]]:
    """A cluster of ``nodes`` nodes and ``pods`` pods in arrival order (creation_time strictly increasing from 0),
    the same for the same arguments. Names as the trace's (``openb-node-0000``, ``openb-pod-0000``). Pods are
    what has not happened yet: phase Pending, no scheduled_time; deletion_time is creation + a drawn lifetime."""
    if nodes < 1 or pods < 0:
        raise ValueError(f"generate: {nodes} nodes and {pods} pods (at least one node, no negative count)")
    m = marginals
    rng = random.Random(seed)
    cpu_count = round(nodes * m.cpu_node_share)
    shapes = _apportion(cpu_count, m.cpu_nodes) + _apportion(nodes - cpu_count, m.gpu_nodes)
    rng.shuffle(shapes)
    width = max(4, len(str(max(nodes, pods) - 1)))
    node_list = [TraceNode(f"openb-node-{i:0{width}d}", s.cpu_milli, s.memory_mib, s.gpus, s.model)
                 for i, s in enumerate(shapes)]

    tables = {0: m.cpu_pod_shapes, -1: m.share_pod_shapes, 1: m.whole_pod_shapes}
    distinct = set(shapes)
    shape_draws: dict[int, _Draw] = {}
    spec_draws: dict[tuple[int, PodShape], _Draw] = {}
    kinds, shares = m.pod_kinds()
    kind_table = []
    for kind, share in zip(kinds, shares, strict=True):
        gpus, per = _gpus_of(kind)
        fitting = [(s, w) for s, w in tables.get(kind, m.multi_gpu_pod_shapes)
                   if any(_fits(n, gpus, s.cpu_milli * per, s.memory_mib * per) for n in distinct)]
        shape_draws[kind] = _Draw(fitting)
        kind_table.append((kind, share if shape_draws[kind] else 0.0))
        for s, _ in fitting if gpus else ():
            models = {n.model for n in distinct if _fits(n, gpus, s.cpu_milli * per, s.memory_mib * per)}
            spec_draws[(kind, s)] = _Draw([(spec, w) for spec, w in m.gpu_specs if models & set(spec)])
    kind_draw = _Draw(kind_table)
    if pods and not kind_draw:
        raise ValueError("generate: no pod of the marginals fits any generated node")
    milli_draw, qos_draw = _Draw(m.share_milli), _Draw(m.qos)

    pod_list = []
    now = 0
    for i in range(pods):
        drawn: int = kind_draw(rng)
        shape: PodShape = shape_draws[drawn](rng)
        gpus, per = _gpus_of(drawn)
        gpu_milli = 0 if not gpus else milli_draw(rng) if drawn == -1 else 1000
        spec: tuple[str, ...] = ()
        if gpus and rng.random() < m.gpu_spec_share and spec_draws[(drawn, shape)]:
            spec = spec_draws[(drawn, shape)](rng)
        if i:
            now += max(1, round(rng.expovariate(1 / m.mean_interarrival_s)))
        lifetime = max(1, round(rng.lognormvariate(math.log(m.lifetime_median_s), m.lifetime_log_sd)))
        pod_list.append(TracePod(f"openb-pod-{i:0{width}d}", shape.cpu_milli * per, shape.memory_mib * per, gpus,
                                 gpu_milli, spec, qos_draw(rng), "Pending", now, now + lifetime, None))
    return node_list, pod_list


# --- nodes from the agent's reports ------------------------------------------------------------------------------

_REPORT_SUFFIXES = (".yaml", ".yml", ".json")
_DOCUMENT_START = re.compile(r"^---(?=\s|$)", re.MULTILINE)
_REPORT_KINDS = {DEVICE_KIND: DEVICES.api_version, NRT_KIND: NODE_RESOURCE_TOPOLOGIES.api_version,
                 NODE_METRIC_KIND: NODE_METRICS.api_version}


def _documents(path: str) -> list[Any]:
    """Every document of a YAML stream (``report --once`` separates them with ``---`` lines), each read with the
    agent's bounded loader; a JSON List's items count as documents."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"report {path}: not UTF-8 text: {e.reason}") from None
    out: list[Any] = []
    for n, chunk in enumerate(_DOCUMENT_START.split(text), start=1):
        doc = loads_yaml(chunk, f"report {path} (document {n})")
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        elif doc is not None:
            out.append(doc)
    return out


def _zone_totals(nrt: Mapping[str, Any], where: str) -> tuple[dict[str, int], dict[str, int]]:
    """Allocatable and capacity of cpu (milli) and memory (bytes) summed over the NUMA zones."""
    allocatable = {"cpu": 0, "memory": 0}
    capacity = {"cpu": 0, "memory": 0}
    seen = set()
    for zone in nrt.get("zones") or []:
        if not isinstance(zone, Mapping) or zone.get("type") != "Node":
            continue
        for r in zone.get("resources") or []:
            name = r.get("name") if isinstance(r, Mapping) else None
            if name not in allocatable:
                continue
            try:
                for into, key in ((allocatable, "allocatable"), (capacity, "capacity")):
                    raw = r.get(key, r.get("allocatable"))
                    into[name] += milli(raw) if name == "cpu" else math.ceil(parse_quantity(raw))
            except ValueError as e:
                raise ValueError(f"{where}: zone {zone.get('name')} {name}: {e}") from None
            seen.add(name)
    missing = sorted(set(allocatable) - seen)
    if missing:
        raise ValueError(f"{where}: no {' or '.join(missing)} in any zone of type Node")
    return allocatable, capacity


def read_report_dir(path: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(Node, Device or None) per node name, sorted by name, from the agent's report objects under ``path``.

    The Node's cpu and memory are the NodeResourceTopology's zones summed (allocatable and capacity), its labels
    the Device's vendor, model and driver labels (what koord-manager copies) and its ``nvidia.com/gpu`` the healthy
    GPUs; the Device is returned as reported (None when the node has none). NodeMetrics are accepted and not used.
    Every node needs a NodeResourceTopology; an object of another kind, one without a name, or a second object of
    the same kind for a node is a ValueError naming the file.
    """
    if not os.path.isdir(path):
        raise ValueError(f"report directory {path}: not a directory")
    found: dict[str, dict[str, tuple[Mapping[str, Any], str]]] = {}
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for file in sorted(files):
            if file.startswith(".") or not file.endswith(_REPORT_SUFFIXES):
                continue                          # the sink's temporary files, anything not a report
            full = os.path.join(root, file)
            for n, obj in enumerate(_documents(full), start=1):
                where = f"report {full} (object {n})"
                kind = obj.get("kind") if isinstance(obj, Mapping) else None
                if kind not in _REPORT_KINDS or obj.get("apiVersion") != _REPORT_KINDS[kind]:
                    raise ValueError(f"{where}: not an object the agent reports (kinds "
                                     f"{', '.join(_REPORT_KINDS)}), got kind {kind!r:.40}")
                name = (obj.get("metadata") or {}).get("name")
                if not isinstance(name, str) or not name:
                    raise ValueError(f"{where}: {kind} without metadata.name")
                earlier = found.setdefault(name, {}).get(kind)
                if earlier is not None:
                    raise ValueError(f"{where}: a second {kind} for node {name} (the first in {earlier[1]})")
                found[name][kind] = (obj, where)
    out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for name in sorted(found):
        objects = found[name]
        if NRT_KIND not in objects:
            raise ValueError(f"report directory {path}: node {name} has no NodeResourceTopology (its cpu and memory "
                             "come from the zones; the agent reports it unless node-topology-sync-interval is 0)")
        nrt, where = objects[NRT_KIND]
        allocatable, capacity = _zone_totals(nrt, where)
        device = dict(objects[DEVICE_KIND][0]) if DEVICE_KIND in objects else None
        labels: dict[str, str] = {}
        gpus = 0
        if device is not None:
            device_labels = (device.get("metadata") or {}).get("labels") or {}
            labels = {k: str(device_labels[k]) for k in NODE_LABELS_FROM_DEVICE if k in device_labels}
            gpus = sum(1 for d in (device.get("spec") or {}).get("devices") or []
                       if isinstance(d, Mapping) and d.get("type") == wire.DEVICE_GPU and d.get("health") is True)
        out.append((_node_json(name, allocatable["cpu"], allocatable["memory"], gpus, labels,
                               (capacity["cpu"], capacity["memory"])), device))
    return out
