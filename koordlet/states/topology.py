"""Presenting a host ``Topology``: plain dicts for JSON/YAML, a text table, and the upstream annotation values.

Pure functions of a ``koordlet.host.topology.Topology``; reading the host is ``read_topology``'s job. The two annotation
builders produce exactly what upstream koordlet writes on the NodeResourceTopology object
(``apis/extension/numa_aware.go``, ``cpu_normalization.go``), so the NRT reporter and ``koordlet topology`` cannot
disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from koordlet.host.cgroup import format_cpu_list
from koordlet.host.topology import Topology

if TYPE_CHECKING:
    from koordlet.host.nvml import GpuInventory
    from koordlet.host.rdma import RdmaDevice

# Annotation keys on the NodeResourceTopology object (upstream apis/extension/numa_aware.go, cpu_normalization.go).
from koordlet.base.wire import ANNOTATION_CPU_BASIC_INFO, ANNOTATION_CPU_TOPOLOGY

OUTPUTS = ("table", "json", "yaml")


def go_json(value: Any) -> str:
    """JSON as Go's encoding/json.Marshal writes it: compact, UTF-8, with <, >, & and U+2028/9 escaped.

    Byte-identical annotation values keep the NRT change detection from seeing a difference where there is none.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def cpu_topology_annotation(topo: Topology) -> dict[str, Any]:
    """``{"detail": [{"id", "core", "socket", "node"}, ...]}`` sorted by CPU id; ``{}`` when empty (omitempty).

    Like upstream (which drops lscpu rows whose SOCKET or CORE is "-"), CPUs without topology files are left out.
    Beyond upstream: offline CPUs are left out too even where sysfs still describes them (arm64), because
    koord-scheduler allocates cpusets from this list and an offline CPU cannot be put in one. A CPU that no NUMA
    node lists reports node 0, as upstream's parse of lscpu's "-" does.
    """
    detail = [{"id": c.id, "core": c.core, "socket": c.socket, "node": c.node if c.node is not None else 0}
              for c in topo.cpus if c.online and c.core is not None and c.socket is not None]
    detail.sort(key=lambda d: d["id"])
    return {"detail": detail} if detail else {}


def cpu_basic_info_annotation(topo: Topology) -> dict[str, Any]:
    """``{cpuModel, hyperThreadEnabled, turboEnabled, catL3CbmMask, vendorID}``, every field omitempty."""
    b = topo.basic
    fields = (("cpuModel", b.cpu_model), ("hyperThreadEnabled", b.hyper_thread_enabled),
              ("turboEnabled", b.turbo_enabled), ("catL3CbmMask", b.cat_l3_cbm_mask), ("vendorID", b.vendor_id))
    return {k: v for k, v in fields if v}


def topology_annotations(topo: Topology) -> dict[str, str]:
    """Annotation key -> value string, as they go on the NodeResourceTopology object."""
    return {ANNOTATION_CPU_TOPOLOGY: go_json(cpu_topology_annotation(topo)),
            ANNOTATION_CPU_BASIC_INFO: go_json(cpu_basic_info_annotation(topo))}


def to_dict(topo: Topology) -> dict[str, Any]:
    """Everything, as JSON/YAML-ready plain data (CPU sets in kernel list format, memory in kB as the kernel
    prints it plus ``memTotalBytes``)."""
    fl = format_cpu_list
    state = topo.cpu_manager
    return {
        "summary": {"sockets": len(topo.packages), "numaNodes": len(topo.nodes), "cores": len(topo.cores),
                    "cpus": len(topo.cpus), "onlineCPUs": len(topo.online), "threadsPerCore": topo.threads_per_core,
                    "l3Groups": len(topo.l3_groups), "numaFromSysfs": topo.numa_from_sysfs},
        "cpuSets": {"present": fl(topo.present), "online": fl(topo.online), "offline": fl(topo.offline),
                    "possible": fl(topo.possible)},
        "basicInfo": {"cpuModel": topo.basic.cpu_model, "vendorID": topo.basic.vendor_id,
                      "hyperThreadEnabled": topo.basic.hyper_thread_enabled,
                      "turboEnabled": topo.basic.turbo_enabled, "catL3CbmMask": topo.basic.cat_l3_cbm_mask},
        "numaNodes": [{"id": n.id, "cpus": fl(n.cpus), "memTotalBytes": n.mem_total_bytes,
                       "gpuMemory": n.gpu_memory, "meminfoKB": dict(n.meminfo),
                       "hugepages": {f"{size}kB": count for size, count in n.hugepages.items()}}
                      for n in topo.nodes],
        "sockets": [{"socket": p.socket, "physicalID": p.physical_id, "cpus": fl(p.cpus), "numaNodes": list(p.nodes)}
                    for p in topo.packages],
        "cores": [{"core": c.core, "coreID": c.core_id, "socket": c.socket, "node": c.node, "cpus": fl(c.cpus)}
                  for c in topo.cores],
        "caches": [{"name": c.name, "id": c.id, "level": c.level, "type": c.type, "sizeKB": c.size_kb,
                    "cpus": fl(c.cpus)} for c in topo.caches],
        "cpus": [{"cpu": c.id, "online": c.online, "node": c.node, "socket": c.socket, "core": c.core,
                  "physicalPackageID": c.physical_package_id, "coreID": c.core_id, "siblings": fl(c.siblings),
                  "caches": dict(c.caches)} for c in topo.cpus],
        "kubeletCPUManager": None if state is None else {
            "policyName": state.policy_name, "defaultCpuSet": fl(state.default_cpu_set),
            "entries": {uid: {name: fl(cpus) for name, cpus in containers.items()}
                        for uid, containers in state.entries.items()},
            "checksum": state.checksum},
        "kubeletCPUManagerError": topo.cpu_manager_error,
        "annotations": topology_annotations(topo),
        "problems": list(topo.problems),
    }


def _table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [list(map(str, header))] + [["-" if c is None or c == "" else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _mib(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.0f}"


def render_table(topo: Topology) -> str:
    """Human view: summary, NUMA nodes, sockets, one row per CPU (like ``lscpu -e``), kubelet CPU manager."""
    fl = format_cpu_list
    b = topo.basic
    cache_names = sorted({name for c in topo.cpus for name in c.caches})
    lines = [
        (f"{len(topo.packages)} socket(s), {len(topo.nodes)} NUMA node(s), {len(topo.cores)} core(s), "
         f"{len(topo.cpus)} CPU(s) ({len(topo.online)} online), {topo.threads_per_core} thread(s) per core")
        + ("" if topo.numa_from_sysfs else "  [no NUMA in sysfs: one node 0]"),
        (f"model: {b.cpu_model or '-'}  vendor: {b.vendor_id or '-'}  hyper-threading: "
         f"{'yes' if b.hyper_thread_enabled else 'no'}  turbo: {'yes' if b.turbo_enabled else 'no'}  "
         f"CAT L3 mask: {b.cat_l3_cbm_mask or '-'}"),
        (f"present: {fl(topo.present) or '-'}  online: {fl(topo.online) or '-'}  "
         f"offline: {fl(topo.offline) or '-'}  possible: {fl(topo.possible) or '-'}"),
        "",
        _table([(n.id, fl(n.cpus), _mib(n.meminfo.get("MemTotal")), _mib(n.meminfo.get("MemFree")),
                 _mib(n.meminfo.get("FilePages")),
                 ",".join(f"{s}kB:{c}" for s, c in n.hugepages.items()), "gpu-memory" if n.gpu_memory else "")
                for n in topo.nodes],
               ("NODE", "CPUS", "MEMTOTAL(MiB)", "MEMFREE(MiB)", "FILEPAGES(MiB)", "HUGEPAGES", "NOTE")),
        "",
        _table([(p.socket, p.physical_id, ",".join(map(str, p.nodes)), fl(p.cpus),
                 sum(1 for c in topo.cores if c.socket == p.socket)) for p in topo.packages],
               ("SOCKET", "PHYSICAL-ID", "NODES", "CPUS", "CORES")),
        "",
        _table([(c.id, c.node, c.socket, c.core, ":".join(str(c.caches[n]) for n in cache_names if n in c.caches),
                 "yes" if c.online else "no") for c in topo.cpus],
               ("CPU", "NODE", "SOCKET", "CORE", ":".join(cache_names) or "CACHE", "ONLINE")),
    ]
    state = topo.cpu_manager
    if state is not None:
        lines += ["", (f"kubelet CPU manager: policy={state.policy_name}  "
                       f"defaultCpuSet={fl(state.default_cpu_set) or '-'}")]
        rows = [(uid, name, fl(cpus)) for uid, cs in sorted(state.entries.items()) for name, cpus in sorted(cs.items())]
        if rows:
            lines.append(_table(rows, ("POD-UID", "CONTAINER", "CPUSET")))
    elif topo.cpu_manager_error:
        lines += ["", f"kubelet CPU manager: {topo.cpu_manager_error}"]
    if topo.problems:
        lines += ["", "skipped malformed files:"] + [f"  {p}" for p in topo.problems]
    return "\n".join(lines)


@dataclass(frozen=True)
class Devices:
    """The node's GPUs and RDMA NICs as ``koordlet topology`` shows them."""

    gpus: GpuInventory
    rdma: Sequence[RdmaDevice] = ()
    rdma_problems: Sequence[str] = ()
    partitions: dict[str, Any] = field(default_factory=dict)      # the derived gpu-partitions table


def _nvlink_summary(gpu: Any, minors: dict[str, int]) -> str:
    """"18 to NVSwitch" / "2 to GPU1, 2 to GPU3" / "-"."""
    counts: dict[str, int] = {}
    for link in gpu.nvlinks:
        if link.remote_type == "switch":
            key = "NVSwitch"
        elif link.remote_bus_id in minors:
            key = f"GPU{minors[link.remote_bus_id]}"
        else:
            key = link.remote_bus_id or "?"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} to {k}" for k, n in sorted(counts.items())) or "-"


def devices_to_dict(devices: Devices) -> dict[str, Any]:
    inv = devices.gpus
    minors = {g.bus_id: g.minor for g in inv.gpus}
    return {
        "gpus": {"driverVersion": inv.driver_version, "cudaVersion": inv.cuda_version, "model": inv.model,
                 "unavailable": inv.error, "problems": list(inv.problems),
                 "devices": [{"minor": g.minor, "uuid": g.uuid, "name": g.name, "busID": g.bus_id,
                              "numaNode": g.numa_node, "pcieRoot": g.pcie_root, "memoryBytes": g.memory_total,
                              "migEnabled": g.mig_enabled, "lost": g.lost, "nvlinks": _nvlink_summary(g, minors)}
                             for g in inv.gpus],
                 "pcieLevels": [{"a": minors.get(a), "b": minors.get(b), "level": level}
                                for (a, b), level in sorted(((tuple(sorted(k)), v) for k, v in
                                                             inv.pcie_levels.items()), key=lambda kv: kv[0])],
                 "partitions": devices.partitions},
        "rdma": [{"minor": n.minor, "busID": n.bus_id, "ibDevices": list(n.ib_devices), "numaNode":
                  n.placement.numa_node, "pcieRoot": n.placement.root, "health": n.health, "vendor": n.vendor,
                  "device": n.device, "vfs": list(n.vfs)} for n in devices.rdma],
        "rdmaProblems": list(devices.rdma_problems),
    }


_LEVELS = {0: "SELF", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}   # nvidia-smi topo -m names


def render_devices(devices: Devices) -> str:
    inv = devices.gpus
    lines = []
    if inv.error:
        lines.append(f"GPUs: none ({inv.error})")
    elif not inv.gpus:
        lines.append("GPUs: none")
    else:
        lines.append(f"GPUs: {len(inv.gpus)}  driver {inv.driver_version or '-'}  CUDA {inv.cuda_version or '-'}  "
                     f"model {inv.model or 'mixed'}")
        minors = {g.bus_id: g.minor for g in inv.gpus}
        lines.append(_table([(g.minor, g.bus_id, g.numa_node, g.pcie_root, g.name or "?",
                              f"{g.memory_total / 2**20:.0f}" if g.memory_total else "?",
                              {None: "-", True: "on", False: "off"}[g.mig_enabled],
                              _nvlink_summary(g, minors), "LOST" if g.lost else "")
                             for g in inv.gpus],
                            ("GPU", "BUS-ID", "NUMA", "PCIE-ROOT", "NAME", "MEMORY(MiB)", "MIG", "NVLINK", "NOTE")))
        live = [g for g in inv.gpus if not g.lost]
        if len(live) > 1:       # the PCIe part of `nvidia-smi topo -m`
            rows = [[f"GPU{a.minor}"] + [("X" if a is b else _LEVELS.get(
                inv.pcie_levels.get(frozenset((a.bus_id, b.bus_id)), -1), "?")) for b in live] for a in live]
            lines += ["", "PCIe paths (nvidia-smi topo -m):",
                      _table(rows, [""] + [f"GPU{g.minor}" for g in live])]
        if devices.partitions:
            lines += ["", "GPU partitions (size: minors/link/ring bandwidth/score):"]
            for size, parts in devices.partitions.items():
                lines.append(f"  {size}: " + "  ".join(
                    f"{','.join(map(str, p['minors']))}/{p['gpuLinkType']}/{p.get('ringBusBandwidth', '-')}/"
                    f"{p['allocationScore']}" for p in parts))
    lines += [f"  skipped: {p}" for p in inv.problems]
    lines.append("")
    if devices.rdma:
        lines.append(f"RDMA NICs: {len(devices.rdma)}")
        lines.append(_table([(n.minor, n.bus_id, ",".join(n.ib_devices), n.placement.numa_node,
                              n.placement.root, len(n.vfs) if n.vf_enabled else 0, "yes" if n.health else "no")
                             for n in devices.rdma],
                            ("RDMA", "BUS-ID", "IB-DEVICES", "NUMA", "PCIE-ROOT", "VFS", "ACTIVE")))
    else:
        lines.append("RDMA NICs: none")
    lines += [f"  skipped: {p}" for p in devices.rdma_problems]
    return "\n".join(lines)


def render(topo: Topology, output: str = "table", devices: Devices | None = None) -> str:
    """``output`` is one of OUTPUTS; ValueError otherwise. ``devices`` adds the GPU/RDMA view."""
    if output == "table":
        text = render_table(topo)
        return text + "\n\n" + render_devices(devices) if devices is not None else text
    data = to_dict(topo)
    if devices is not None:
        data["devices"] = devices_to_dict(devices)
    if output == "json":
        return json.dumps(data, indent=2)
    if output == "yaml":
        import yaml  # lazily: only this output needs it
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    raise ValueError(f"unknown output {output!r}: expected one of {', '.join(OUTPUTS)}")
