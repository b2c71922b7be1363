"""CPU / NUMA topology of the host, read from sysfs and procfs into plain dataclasses.

Upstream koordlet runs ``lscpu -e=CPU,NODE,SOCKET,CORE,CACHE,ONLINE`` (``pkg/koordlet/util/cpuinfo.go:
GetLocalCPUInfo``); we read the same sysfs files lscpu reads, without a subprocess, so a DaemonSet with ``/host-sys``
and a test with a dumped tree work the same way. Numbering follows lscpu, because koord-scheduler consumes these numbers
through the ``node.koordinator.sh/cpu-topology`` annotation:

* ``socket`` is lscpu's SOCKET: a logical index of the package, in order of each package's lowest CPU (not the raw
  ``physical_package_id``, which can be sparse: 0 and 8 on a POWER9).
* ``core`` is lscpu's CORE: a node-wide logical index of the SMT sibling set (``thread_siblings``), in order of each
  core's lowest CPU. The raw ``topology/core_id`` repeats in every package (hwloc prints it as ``Core P#0`` in each
  package of the dumps in fixtures/sysfs-hwloc) and can be sparse, so two CPUs of different sockets would look like
  SMT siblings if it were used directly. Where CPUs are numbered package by package this index equals hwloc's
  ``Core L#``; where packages interleave (cpu0 on package 0, cpu1 on package 1) it does not: lscpu and we count
  by CPU number, hwloc by tree position.
* cache ids are sysfs ``cache/indexN/id`` when the kernel has it, otherwise (like lscpu) the order in which each
  distinct shared-CPU set first appears.

Nothing here formats output (that is ``koordlet.states.topology``) and ``read_topology`` never raises for a missing or
odd file: the absent part is left empty and a malformed one is named in ``Topology.problems``, so one bad sysfs
attribute never costs the agent its whole topology. ``read_node_meminfo`` (also read every cycle by the NUMA usage
collector) does raise, so that collector can count and log the node it could not read. """

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from koordlet.host.cgroup import parse_cpu_list
from koordlet.host.fs import read_bytes, read_text
from koordlet.host.paths import HostPaths

CPU_MANAGER_STATE_FILE = "cpu_manager_state"


@dataclass(frozen=True)
class CPU:
    """One present logical CPU (a PU in hwloc's words)."""
    id: int
    online: bool
    node: int | None                 # NUMA node (None: listed by no node's cpulist)
    socket: int | None               # lscpu SOCKET: logical package index, None without topology files
    core: int | None                 # lscpu CORE: node-wide logical core index, None without topology files
    physical_package_id: int | None  # raw sysfs value
    core_id: int | None              # raw sysfs value: repeats per package
    siblings: tuple[int, ...] = ()   # SMT siblings including itself (thread_siblings_list)
    caches: dict[str, int] = field(default_factory=dict)  # lscpu cache name ("L1d", "L1i", "L2", "L3") -> id

    @property
    def l3(self) -> int | None:
        return self.caches.get("L3")


@dataclass(frozen=True)
class Core:
    core: int                        # logical index, unique on the node
    core_id: int | None              # raw sysfs core_id (hwloc's Core P#)
    socket: int | None
    node: int | None
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Package:
    socket: int                      # logical index (lscpu SOCKET, hwloc Package L#)
    physical_id: int                 # physical_package_id (hwloc Package P#)
    cpus: tuple[int, ...]
    nodes: tuple[int, ...]           # NUMA nodes of its CPUs


@dataclass(frozen=True)
class Cache:
    name: str                        # "L1d", "L1i", "L2", "L3" (lscpu naming)
    level: int
    type: str                        # "Data", "Instruction", "Unified"
    id: int
    size_kb: int | None
    cpus: tuple[int, ...]            # present CPUs that reported this cache


@dataclass(frozen=True)
class NUMANode:
    id: int
    cpus: tuple[int, ...]            # present CPUs only (nodeN/cpulist may also list absent ones)
    meminfo: dict[str, int]          # nodeN/meminfo as printed: kB, except the HugePages_* counts
    hugepages: dict[int, int]        # page size in kB -> nr_hugepages
    gpu_memory: bool = False         # NVIDIA GPU memory onlined as a CPU-less node (see _nvidia_gpu_nodes)

    @property
    def mem_total_bytes(self) -> int:
        return self.meminfo.get("MemTotal", 0) * 1024

    @property
    def hugepages_bytes(self) -> int:
        return sum(size_kb * 1024 * n for size_kb, n in self.hugepages.items())


@dataclass(frozen=True)
class CPUBasicInfo:
    """What upstream puts in the ``cpu-basic-info`` annotation; empty strings / False when unknown."""
    cpu_model: str = ""
    vendor_id: str = ""
    hyper_thread_enabled: bool = False
    turbo_enabled: bool = False
    cat_l3_cbm_mask: str = ""


@dataclass(frozen=True)
class CPUManagerState:
    """kubelet's ``cpu_manager_state`` checkpoint (v2 format, kubelet >= 1.18).

    ``checksum`` is kept as written; it is not verified (kubelet hashes a Go-specific dump of the struct).
    """
    policy_name: str
    default_cpu_set: tuple[int, ...]
    entries: dict[str, dict[str, tuple[int, ...]]]   # pod UID -> container name -> CPUs
    checksum: int | None = None


@dataclass(frozen=True)
class Topology:
    cpus: tuple[CPU, ...]            # present CPUs by id, offline ones included (online=False)
    nodes: tuple[NUMANode, ...]      # by id, CPU-less nodes included
    packages: tuple[Package, ...]    # by socket index
    cores: tuple[Core, ...]          # by core index
    caches: tuple[Cache, ...]        # every distinct cache, by (name, id)
    online: tuple[int, ...]
    offline: tuple[int, ...]         # the kernel's ``offline``: possible but not online (absent CPUs included)
    present: tuple[int, ...]
    possible: tuple[int, ...]
    numa_from_sysfs: bool            # False: no node dirs, one node 0 was made up from /proc/meminfo
    basic: CPUBasicInfo
    cpu_manager: CPUManagerState | None = None
    cpu_manager_error: str = ""      # set when the checkpoint exists but cannot be read or parsed
    problems: tuple[str, ...] = ()   # malformed sysfs/procfs files that were skipped

    @property
    def l3_groups(self) -> tuple[Cache, ...]:
        return tuple(c for c in self.caches if c.level == 3)

    @property
    def threads_per_core(self) -> int:
        return max((len(c.cpus) for c in self.cores), default=0)

    def cpu(self, cpu_id: int) -> CPU | None:
        for c in self.cpus:
            if c.id == cpu_id:
                return c
        return None


# ---------------------------------------------------------------------------------------------------------------
# small readers: None for an absent file, a note in `problems` for a malformed one


def _text(path: str) -> str | None:
    try:
        return read_text(path).strip()
    except OSError:
        return None


def _int(path: str, problems: list[str]) -> int | None:
    text = _text(path)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        problems.append(f"{path}: not an integer: {text[:40]!r}")
        return None


def _cpu_list(path: str, problems: list[str]) -> list[int] | None:
    text = _text(path)
    if text is None:
        return None
    try:
        return parse_cpu_list(text)
    except ValueError:
        problems.append(f"{path}: not a CPU list: {text[:40]!r}")
        return None


def _cpu_mask(path: str, problems: list[str]) -> list[int] | None:
    text = _text(path)
    if text is None:
        return None
    try:
        return parse_cpu_mask(text)
    except ValueError:
        problems.append(f"{path}: not a CPU mask: {text[:40]!r}")
        return None


def parse_cpu_mask(text: str) -> list[int]:
    """Kernel cpumask format ("00000000,0000000f", most significant 32-bit word first) to sorted CPU ids."""
    digits = text.strip().replace(",", "")
    value = int(digits, 16) if digits else 0
    bits = bin(value)[:1:-1]              # least significant bit first
    return [i for i, b in enumerate(bits) if b == "1"]


def _size_kb(text: str | None) -> int | None:
    """sysfs cache size ("32K", "10240K", "1M") in kB."""
    if not text:
        return None
    unit = text[-1].upper()
    scale = {"K": 1, "M": 1024, "G": 1024 * 1024}.get(unit)
    try:
        return int(text[:-1]) * scale if scale else int(text) // 1024
    except ValueError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _numbered(names: list[str], prefix: str) -> list[int]:
    n = len(prefix)
    return sorted(int(x[n:]) for x in names if x.startswith(prefix) and x[n:].isdigit())


# ---------------------------------------------------------------------------------------------------------------
# CPUs


def _cpu_sets(paths: HostPaths, problems: list[str]) -> tuple[list[int], list[int], list[int], list[int]]:
    """(present, online, offline, possible), each falling back sensibly when its file is missing."""
    base = paths.sys("devices", "system", "cpu")
    present = _cpu_list(os.path.join(base, "present"), problems)
    online = _cpu_list(os.path.join(base, "online"), problems)
    possible = _cpu_list(os.path.join(base, "possible"), problems)
    offline = _cpu_list(os.path.join(base, "offline"), problems)
    if present is None:
        present = _numbered(_listdir(base), "cpu") or list(online or [])
    if online is None:
        online = list(present)
    if possible is None:
        possible = sorted(set(present) | set(online))
    if offline is None:
        offline = sorted(set(possible) - set(online))
    return present, online, offline, possible


def _siblings(topo_dir: str, problems: list[str]) -> list[int] | None:
    for name in ("thread_siblings_list", "core_cpus_list"):
        cpus = _cpu_list(os.path.join(topo_dir, name), problems)
        if cpus is not None:
            return cpus
    for name in ("thread_siblings", "core_cpus"):
        cpus = _cpu_mask(os.path.join(topo_dir, name), problems)
        if cpus is not None:
            return cpus
    return None


_CACHE_SUFFIX = {"Data": "d", "Instruction": "i"}


class _CacheTable:
    """Distinct caches as lscpu identifies them: (type, level, id), the id synthesized when sysfs has none."""

    def __init__(self) -> None:
        self.caches: dict[tuple[str, int], dict[str, Any]] = {}        # (name, id) -> fields + cpu list
        self._synth: dict[tuple[str, int], dict[frozenset[int], int]] = {}

    def add(self, cpu: int, index_dir: str, problems: list[str]) -> tuple[str, int] | None:
        level = _int(os.path.join(index_dir, "level"), problems)
        ctype = _text(os.path.join(index_dir, "type"))
        if level is None or not ctype:
            return None
        name = f"L{level}{_CACHE_SUFFIX.get(ctype, '')}"
        cid = _int(os.path.join(index_dir, "id"), problems)
        if cid is None:
            shared = (_cpu_list(os.path.join(index_dir, "shared_cpu_list"), problems)
                      or _cpu_mask(os.path.join(index_dir, "shared_cpu_map"), problems) or [cpu])
            seen = self._synth.setdefault((name, level), {})
            key = frozenset(shared)
            cid = seen.setdefault(key, len(seen))
        entry = self.caches.get((name, cid))
        if entry is None:
            entry = {"level": level, "type": ctype, "cpus": [],
                     "size_kb": _size_kb(_text(os.path.join(index_dir, "size")))}
            self.caches[(name, cid)] = entry
        entry["cpus"].append(cpu)
        return name, cid

    def result(self) -> tuple[Cache, ...]:
        return tuple(Cache(name, e["level"], e["type"], cid, e["size_kb"], tuple(sorted(e["cpus"])))
                     for (name, cid), e in sorted(self.caches.items()))


def _read_cpus(paths: HostPaths, present: list[int], online: set[int], node_of: dict[int, int],
               problems: list[str]) -> tuple[list[CPU], tuple[Cache, ...]]:
    base = paths.sys("devices", "system", "cpu")
    present_set = set(present)
    socket_index: dict[int, int] = {}
    core_index: dict[object, int] = {}
    table = _CacheTable()
    cpus: list[CPU] = []
    for cpu in present:
        cpu_dir = os.path.join(base, f"cpu{cpu}")
        topo_dir = os.path.join(cpu_dir, "topology")
        pkg = _int(os.path.join(topo_dir, "physical_package_id"), problems)
        core_id = _int(os.path.join(topo_dir, "core_id"), problems)
        sib = _siblings(topo_dir, problems)
        socket = socket_index.setdefault(pkg, len(socket_index)) if pkg is not None else None
        # lscpu keys a core by its sibling mask, and a CPU missing from its own mask (offline, empty file) gets
        # no core; only a kernel without any sibling file falls back to (package, core_id)
        key: object = frozenset(sib) if sib and cpu in sib else (
            ("id", pkg, core_id) if sib is None and pkg is not None and core_id is not None else None)
        core = core_index.setdefault(key, len(core_index)) if key is not None else None
        caches: dict[str, int] = {}
        cache_dir = os.path.join(cpu_dir, "cache")
        for idx in _numbered(_listdir(cache_dir), "index"):
            got = table.add(cpu, os.path.join(cache_dir, f"index{idx}"), problems)
            if got is not None:
                caches[got[0]] = got[1]
        siblings = tuple(c for c in (sib or [cpu]) if c in present_set)
        cpus.append(CPU(cpu, cpu in online, node_of.get(cpu), socket, core, pkg, core_id, siblings, caches))
    return cpus, table.result()


def _group_cores(cpus: list[CPU]) -> tuple[Core, ...]:
    groups: dict[int, list[CPU]] = {}
    for c in cpus:
        if c.core is not None:
            groups.setdefault(c.core, []).append(c)
    return tuple(Core(idx, g[0].core_id, g[0].socket, g[0].node, tuple(c.id for c in g))
                 for idx, g in sorted(groups.items()))


def _group_packages(cpus: list[CPU]) -> tuple[Package, ...]:
    groups: dict[int, list[CPU]] = {}
    for c in cpus:
        if c.socket is not None:
            groups.setdefault(c.socket, []).append(c)
    return tuple(Package(idx, g[0].physical_package_id or 0, tuple(c.id for c in g),
                         tuple(sorted({c.node for c in g if c.node is not None})))
                 for idx, g in sorted(groups.items()))


# ---------------------------------------------------------------------------------------------------------------
# NUMA


def parse_node_meminfo(text: str) -> dict[str, int]:
    """``Node 0 MemTotal:  8386704 kB`` lines (nodeN/meminfo) or ``MemTotal:  8386704 kB`` (/proc/meminfo).

    Values stay as printed: kB for sizes, plain counts for HugePages_Total/Free/Surp. Unparsable lines are skipped.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "Node":
            parts = parts[2:]
        if len(parts) >= 2 and parts[0].endswith(":"):
            try:
                out[parts[0][:-1]] = int(parts[1])
            except ValueError:
                continue
    return out


def read_node_meminfo(paths: HostPaths, node: int) -> dict[str, int]:
    """``nodeN/meminfo`` as {field: kB}; OSError when the node has no such file.

    The topology reads it once; the NUMA usage collector reads it every cycle.
    """
    return parse_node_meminfo(read_text(paths.sys("devices", "system", "node", f"node{node}", "meminfo")))


def numa_memory_used_bytes(meminfo: dict[str, int]) -> int:
    """Upstream's per-NUMA usage (``MemInfo.NUMAMemUsageBytes``): MemTotal − estimated available, × 1024, ≥ 0.

    A node's meminfo has no MemAvailable, so available is estimated as MemFree + Active(file) + Inactive(file)
    + SReclaimable (the kernel's si_mem_available without the watermark corrections); the per-node numbers can
    therefore sum to a little more or less than the node's ``node_memory_usage``. KeyError names a missing field.
    """
    available = (meminfo["MemFree"] + meminfo["Active(file)"] + meminfo["Inactive(file)"]
                 + meminfo["SReclaimable"])
    return max(meminfo["MemTotal"] - available, 0) * 1024


def _hugepages(node_dir: str, problems: list[str]) -> dict[int, int]:
    hp_dir = os.path.join(node_dir, "hugepages")
    out: dict[int, int] = {}
    for name in _listdir(hp_dir):
        if not (name.startswith("hugepages-") and name.endswith("kB")):
            continue
        try:
            size_kb = int(name[len("hugepages-"):-2])
        except ValueError:
            continue
        n = _int(os.path.join(hp_dir, name, "nr_hugepages"), problems)
        if n is not None:
            out[size_kb] = n
    return dict(sorted(out.items()))


def _nvidia_gpu_nodes(paths: HostPaths) -> set[int]:
    """NUMA nodes that are NVIDIA GPU memory (NVLink-coherent GPUs, e.g. POWER9 + V100, Grace Hopper).

    The driver names them in ``/proc/driver/nvidia/gpus/<bus id>/numa_status`` (``Node: 255``); hwloc hides them
    unless HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1. We keep them (their memory is real) and mark them.
    """
    base = paths.proc("driver", "nvidia", "gpus")
    nodes: set[int] = set()
    for gpu in _listdir(base):
        text = _text(os.path.join(base, gpu, "numa_status")) or ""
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Node":
                try:
                    nodes.add(int(value))
                except ValueError:
                    pass
    return nodes


def _read_nodes(paths: HostPaths, present: list[int], problems: list[str]) -> tuple[list[NUMANode], bool]:
    base = paths.sys("devices", "system", "node")
    ids = _numbered(_listdir(base), "node")
    if not ids:
        meminfo = parse_node_meminfo(_text(paths.proc("meminfo")) or "")
        return [NUMANode(0, tuple(present), meminfo, {})], False
    gpu_nodes = _nvidia_gpu_nodes(paths)
    present_set = set(present)
    nodes = []
    for nid in ids:
        node_dir = os.path.join(base, f"node{nid}")
        cpus = _cpu_list(os.path.join(node_dir, "cpulist"), problems)
        if cpus is None:
            cpus = _cpu_mask(os.path.join(node_dir, "cpumap"), problems) or []
        try:
            meminfo = read_node_meminfo(paths, nid)
        except OSError:
            meminfo = {}
        nodes.append(NUMANode(nid, tuple(c for c in cpus if c in present_set), meminfo,
                              _hugepages(node_dir, problems), nid in gpu_nodes))
    return nodes, True


# ---------------------------------------------------------------------------------------------------------------
# basic info and kubelet state


def _cpuinfo_fields(text: str) -> tuple[str, str]:
    """(model, vendor) from /proc/cpuinfo: ``model name`` (``cpu`` on POWER, as lscpu and hwloc do) and
    ``vendor_id``; the first occurrence wins."""
    model = vendor = power_cpu = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "cpu" and not power_cpu:
            power_cpu = value.strip()
        if model and vendor:
            break
    return model or power_cpu, vendor


def _read_basic(paths: HostPaths, threads_per_core: int) -> CPUBasicInfo:
    model, vendor = _cpuinfo_fields(_text(paths.proc("cpuinfo")) or "")
    smt = _text(paths.sys("devices", "system", "cpu", "smt", "active"))
    # upstream falls back to `lscpu -y` "Thread(s) per core" > 1, which is the widest sibling set
    ht = smt == "1" if smt in ("0", "1") else threads_per_core > 1
    no_turbo = _text(paths.sys("devices", "system", "cpu", "intel_pstate", "no_turbo"))
    cbm = _text(paths.sys_fs("resctrl", "info", "L3", "cbm_mask")) or ""
    return CPUBasicInfo(model, vendor, ht, no_turbo == "0", cbm)


def parse_cpu_manager_state(data: bytes) -> CPUManagerState:
    """kubelet's checkpoint JSON; ValueError naming the problem when it is not a v2 checkpoint."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    policy = doc.get("policyName")
    if not isinstance(policy, str) or not policy:
        raise ValueError("policyName missing or not a string")
    default = doc.get("defaultCpuSet", "")
    if not isinstance(default, str):
        raise ValueError("defaultCpuSet is not a string")
    try:
        default_cpus = tuple(parse_cpu_list(default))
    except ValueError:
        raise ValueError(f"defaultCpuSet {default!r} is not a CPU list") from None
    raw_entries = doc.get("entries")
    if raw_entries is None:                  # policy "none" writes no entries
        raw_entries = {}
    if not isinstance(raw_entries, dict):
        raise ValueError("entries is not an object")
    entries: dict[str, dict[str, tuple[int, ...]]] = {}
    for pod_uid, containers in raw_entries.items():
        if not isinstance(containers, dict):
            raise ValueError(f"entries[{pod_uid!r}] is not an object of container -> cpuset "
                             "(a v1 checkpoint keyed by container id?)")
        for name, cpuset in containers.items():
            if not isinstance(cpuset, str):
                raise ValueError(f"entries[{pod_uid!r}][{name!r}] is not a string")
            try:
                entries.setdefault(pod_uid, {})[name] = tuple(parse_cpu_list(cpuset))
            except ValueError:
                raise ValueError(f"entries[{pod_uid!r}][{name!r}] {cpuset!r} is not a CPU list") from None
    checksum = doc.get("checksum")
    if checksum is not None and (isinstance(checksum, bool) or not isinstance(checksum, int)):
        raise ValueError("checksum is not an integer")
    return CPUManagerState(policy, default_cpus, entries, checksum)


def read_cpu_manager_state(paths: HostPaths) -> tuple[CPUManagerState | None, str]:
    """(state, error). Absent file: (None, ""). Unreadable or malformed: (None, message naming the file)."""
    path = os.path.join(paths.var_lib_kubelet, CPU_MANAGER_STATE_FILE)
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return None, ""
    except OSError as e:
        return None, f"{path}: cannot read: {e.strerror or e}"
    try:
        return parse_cpu_manager_state(data), ""
    except ValueError as e:
        return None, f"{path}: {e}"


# ---------------------------------------------------------------------------------------------------------------


def read_topology(paths: HostPaths) -> Topology:
    """The whole CPU/NUMA picture of the host behind ``paths``. Never raises for missing or malformed files."""
    problems: list[str] = []
    present, online, offline, possible = _cpu_sets(paths, problems)
    nodes, from_sysfs = _read_nodes(paths, present, problems)
    node_of: dict[int, int] = {}
    for n in nodes:
        for c in n.cpus:
            node_of.setdefault(c, n.id)
    cpus, caches = _read_cpus(paths, present, set(online), node_of, problems)
    cores = _group_cores(cpus)
    basic = _read_basic(paths, max((len(c.cpus) for c in cores), default=0))
    state, error = read_cpu_manager_state(paths)
    return Topology(cpus=tuple(cpus), nodes=tuple(nodes), packages=_group_packages(cpus), cores=cores,
                    caches=caches, online=tuple(online), offline=tuple(offline), present=tuple(present),
                    possible=tuple(possible), numa_from_sysfs=from_sysfs, basic=basic, cpu_manager=state,
                    cpu_manager_error=error, problems=tuple(problems))
