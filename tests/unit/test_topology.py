"""CPU/NUMA topology: real machines' sysfs dumps checked against hwloc's own answer, this VM checked against
os.cpu_count() and /proc/cpuinfo, a fake tree for offline/sparse CPUs and kubelet's cpu_manager_state.

The dumps and hwloc's expected topologies (``.xml`` hwloc XML, ``.console`` lstopo text) are in
``tests/fixtures/sysfs-hwloc`` (from the hwloc project, its licence in COPYING there); where ``lscpu`` is installed
it is run on the same trees (``--sysroot``) as a second, independent oracle for the lscpu-style SOCKET/CORE/cache
numbering the annotations carry.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from doubles.sysfsdump import unpack
from koordlet.host.cgroup import parse_cpu_list
from koordlet.host.paths import HostPaths
from koordlet.host.topology import (
    Topology,
    parse_cpu_manager_state,
    parse_cpu_mask,
    parse_node_meminfo,
    read_cpu_manager_state,
    read_topology,
)
from koordlet.states.topology import (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_TOPOLOGY,
    cpu_basic_info_annotation,
    cpu_topology_annotation,
    format_cpu_list,
    go_json,
    render,
    to_dict,
    topology_annotations,
)
from tests.builders import host_paths

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs-hwloc"

# Only the files the topology reader and lscpu look at (paths relative to the dump's root): extracting PCI,
# block, cgroup, cpufreq and the thousands of nodeN/memoryM links costs seconds and tests nothing here.
_WANTED = re.compile(r"""^(?:
    proc/(?:cpuinfo|meminfo|driver/nvidia/gpus/[^/]+/numa_status)
  | sys/devices/system/cpu/(?:online|offline|present|possible|smt/active|intel_pstate/no_turbo)
  | sys/devices/system/cpu/cpu\d+/(?:online|topology/\w+|cache/index\d+/(?:level|type|id|size|shared_cpu_\w+))
  | sys/devices/system/node/(?:online|possible|has_\w+)
  | sys/devices/system/node/node\d+/(?:cpulist|cpumap|meminfo|hugepages/hugepages-\d+kB/nr_hugepages)
  | sys/fs/resctrl/info/L3/cbm_mask
)$""", re.X)


# ----------------------------------------------------------------------------------------------- hwloc's answer


@dataclass
class Hwloc:
    """The part of an hwloc topology we check: CPUs by OS index (hwloc's P#)."""
    pus: set[int]
    nodes: dict[int, set[int]]                 # NUMA node P# -> CPUs of the object the node hangs off
    node_memory: dict[int, int | str]          # P# -> local_memory bytes (XML) or lstopo's printed size (console)
    packages: dict[int, set[int]]              # P# -> CPUs
    cores: list[tuple[int, int, set[int]]]     # (L#, P#, CPUs) in hwloc's logical order
    l3: list[set[int]]
    cpu_model: str
    l3_size_kb: set[int] = field(default_factory=set)
    restricted: bool = False                   # hwloc pruned objects outside its cgroup's cpuset
    counts: dict[str, int] = field(default_factory=dict)   # lstopo's "depth N: count Type" summary


def _bitmap(text: str) -> set[int]:
    """hwloc bitmap "0x000000ff,0xffffffff" (32-bit words, most significant first)."""
    value = 0
    for word in text.split(","):
        value = (value << 32) | int(word, 16)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def parse_hwloc_xml(path: Path) -> Hwloc:
    root = ET.parse(path).getroot()
    machine = root.find("object")
    assert machine is not None and machine.get("type") == "Machine"
    out = Hwloc(pus=_bitmap(machine.get("complete_cpuset")), nodes={}, node_memory={}, packages={}, cores=[],
                l3=[], cpu_model="", restricted=machine.get("cpuset") != machine.get("complete_cpuset"))
    complete_nodes = _bitmap(machine.get("complete_nodeset"))
    for el in root.iter("object"):
        kind, cpus = el.get("type"), _bitmap(el.get("complete_cpuset", "0x0"))
        if kind == "NUMANode":
            out.nodes[int(el.get("os_index"))] = cpus
            out.node_memory[int(el.get("os_index"))] = int(el.get("local_memory"))
        elif kind == "Package":
            out.packages[int(el.get("os_index"))] = cpus
            model = el.find("info[@name='CPUModel']")
            if model is not None:
                out.cpu_model = model.get("value")
        elif kind == "Core":
            out.cores.append((len(out.cores), int(el.get("os_index")), cpus))
        elif kind == "L3Cache":
            out.l3.append(cpus)
            out.l3_size_kb.add(int(el.get("cache_size")) // 1024)
    # a restricted topology drops whole nodes (32amd64: nodes 6-7); the complete nodeset still names them
    for n in complete_nodes - set(out.nodes):
        out.nodes[n] = set()
    return out


_LINE = re.compile(r"^( *)(\w+)(?: L#(\d+))?(?: \((.*)\))?$")
_COUNT = re.compile(r"^\s*(?:Special )?depth -?\d+:\s+(\d+) (\w+) \(type")


def parse_lstopo_console(path: Path) -> Hwloc:
    """lstopo's text output: an indented tree (2 spaces a level), then the per-depth object counts."""
    out = Hwloc(pus=set(), nodes={}, node_memory={}, packages={}, cores=[], l3=[], cpu_model="")
    stack: list[dict] = []                     # open ancestors: {"type", "l", "p", "attrs", "pus", "depth"}
    objs: list[dict] = []
    lines = path.read_text().splitlines()
    for line in lines:
        if _COUNT.match(line) or line.startswith("Relative latency"):
            break
        m = _LINE.match(line)
        if not m:
            continue
        depth = len(m.group(1)) // 2
        attrs = m.group(4) or ""
        p = re.search(r"P#(\d+)", attrs)
        obj = {"type": m.group(2), "l": int(m.group(3)) if m.group(3) else None, "p": int(p.group(1)) if p else None,
               "attrs": attrs, "pus": set(), "depth": depth}
        while stack and stack[-1]["depth"] >= depth:
            stack.pop()
        obj["parent"] = stack[-1] if stack else None
        if obj["type"] == "PU":
            for anc in stack:
                anc["pus"].add(obj["p"])
            obj["pus"].add(obj["p"])
        stack.append(obj)
        objs.append(obj)
    for line in lines:
        m = _COUNT.match(line)
        if m:
            out.counts[m.group(2)] = int(m.group(1))
    for o in objs:
        if o["type"] == "PU":
            out.pus.add(o["p"])
        elif o["type"] == "NUMANode":             # a memory child: its CPUs are those of the object it hangs off
            out.nodes[o["p"]] = o["parent"]["pus"]
            out.node_memory[o["p"]] = re.search(r"local=(\S+)", o["attrs"]).group(1)
        elif o["type"] == "Package":
            out.packages[o["p"]] = o["pus"]
            model = re.search(r'CPUModel="([^"]*)"', o["attrs"])
            if model:
                out.cpu_model = model.group(1)
        elif o["type"] == "Core":
            out.cores.append((o["l"], o["p"], o["pus"]))
        elif o["type"] == "L3Cache":
            out.l3.append(o["pus"])
            size, unit = re.search(r"size=(\d+)(KiB|MiB)", o["attrs"]).groups()
            out.l3_size_kb.add(int(size) * (1024 if unit == "MiB" else 1))
    return out


def lstopo_size(n_bytes: int) -> str:
    """How lstopo prints a size (hwloc_memory_size_printf_*): unit chosen below 10 of the next one, rounded."""
    for shift, unit in ((10, "KiB"), (20, "MiB"), (30, "GiB"), (40, "TiB")):
        if n_bytes < 10 << (shift + 10) or unit == "TiB":
            return f"{((n_bytes >> (shift - 1)) + 1) >> 1}{unit}"
    raise AssertionError


# ----------------------------------------------------------------------------------------------- the fixtures


@dataclass(frozen=True)
class Fixture:
    tarball: str
    expected: str                  # .xml or .console next to it
    core_index_is_hwloc_l: bool    # CPUs numbered package by package: lscpu's CORE equals hwloc's Core L#
    gpu_nodes: frozenset[int] = frozenset()


FIXTURE_LIST = [
    Fixture("16amd64-8n2c", "16amd64-8n2c.console", True),
    Fixture("32amd64-4s2n4c-cgroup2", "32amd64-4s2n4c-cgroup2.xml", True),
    Fixture("40intel64-2g2n4c+pcilocality", "40intel64-2g2n4c+pcilocality.xml", False),
    Fixture("nvidiagpunumanodes", "nvidiagpunumanodes.console", True, frozenset(range(250, 256))),
]


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """Tarball name -> root of its extracted tree (the tar's own top directory, which is not always its name)."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            # only the wanted regular files: creating files dominates this module's run time on a slow disk
            cache[name] = unpack(FIXTURES / f"{name}.tar.bz2", tmp_path_factory.mktemp(name.replace("+", "_")),
                                 lambda m, rel: m.isreg() and bool(_WANTED.match(rel)))
        return cache[name]
    return get


def _expected(fx: Fixture) -> Hwloc:
    path = FIXTURES / fx.expected
    return parse_hwloc_xml(path) if path.suffix == ".xml" else parse_lstopo_console(path)


@pytest.fixture(scope="module")
def loaded(extracted):
    cache: dict[str, tuple[Topology, Hwloc, Path]] = {}

    def get(fx: Fixture) -> tuple[Topology, Hwloc, Path]:
        if fx.tarball not in cache:
            root = extracted(fx.tarball)
            cache[fx.tarball] = (read_topology(HostPaths.under(str(root))), _expected(fx), root)
        return cache[fx.tarball]
    return get


IDS = [f.tarball for f in FIXTURE_LIST]


@pytest.mark.parametrize("fx", FIXTURE_LIST, ids=IDS)
def test_cpus_and_numa_nodes_agree_with_hwloc(fx, loaded):
    topo, hw, _ = loaded(fx)
    assert topo.problems == ()
    assert set(topo.present) == hw.pus and len(topo.cpus) == len(hw.pus)
    assert [c.id for c in topo.cpus] == sorted(hw.pus)
    # hwloc hides NVIDIA GPU memory nodes (HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES); we keep them, marked
    assert {n.id for n in topo.nodes if n.gpu_memory} == fx.gpu_nodes
    assert {n.id for n in topo.nodes if not n.gpu_memory} == set(hw.nodes)
    assert topo.numa_from_sysfs
    by_id = {n.id: n for n in topo.nodes}
    for nid, cpus in hw.nodes.items():
        if cpus:                                   # restricted XML: a pruned node keeps no cpuset to compare
            assert set(by_id[nid].cpus) == cpus, f"node {nid}"
            assert all(topo.cpu(c).node == nid for c in cpus)
    if hw.counts:
        assert hw.counts["PU"] == len(topo.cpus)
        assert hw.counts["NUMANode"] == sum(1 for n in topo.nodes if not n.gpu_memory)


@pytest.mark.parametrize("fx", FIXTURE_LIST, ids=IDS)
def test_numa_memory_agrees_with_hwloc(fx, loaded):
    topo, hw, _ = loaded(fx)
    by_id = {n.id: n for n in topo.nodes}
    assert hw.node_memory
    for nid, expected in hw.node_memory.items():
        node = by_id[nid]
        # hwloc's local_memory is MemTotal less the memory held in huge pages
        local = node.mem_total_bytes - node.hugepages_bytes
        if isinstance(expected, int):
            assert local == expected, f"node {nid}"
        else:
            assert lstopo_size(local) == expected, f"node {nid}"
        assert node.meminfo["MemFree"] <= node.meminfo["MemTotal"]
        assert "FilePages" in node.meminfo and "HugePages_Total" in node.meminfo


@pytest.mark.parametrize("fx", FIXTURE_LIST, ids=IDS)
def test_packages_cores_and_l3_agree_with_hwloc(fx, loaded):
    topo, hw, _ = loaded(fx)
    ours = {p.physical_id: set(p.cpus) for p in topo.packages}
    for pid, cpus in hw.packages.items():
        assert ours[pid] == cpus, f"package P#{pid}"
    # a cgroup-restricted XML (32amd64) drops the package with no allowed CPU; ours still cover every CPU once
    if hw.restricted:
        assert len(topo.packages) > len(hw.packages)
    else:
        assert len(topo.packages) == len(hw.packages)
    assert sorted(c for p in topo.packages for c in p.cpus) == sorted(hw.pus)
    assert [p.socket for p in topo.packages] == list(range(len(topo.packages)))

    core_of = {frozenset(c.cpus): c for c in topo.cores}
    for l_index, p_index, cpus in hw.cores:
        core = core_of[frozenset(cpus)]
        assert core.core_id == p_index            # raw core_id is hwloc's Core P#
        if fx.core_index_is_hwloc_l and not hw.restricted:
            assert core.core == l_index           # ... and the logical index its Core L#
    if not hw.restricted:
        assert len(topo.cores) == len(hw.cores)
    # the logical index is unique on the node and follows each core's lowest CPU (lscpu's rule)
    assert [c.core for c in topo.cores] == list(range(len(topo.cores)))
    assert [min(c.cpus) for c in topo.cores] == sorted(min(c.cpus) for c in topo.cores)

    if hw.l3:
        assert {frozenset(g.cpus) for g in topo.l3_groups} >= {frozenset(s) for s in hw.l3}
        assert {g.size_kb for g in topo.l3_groups} == hw.l3_size_kb
        if not hw.restricted:
            assert len(topo.l3_groups) == len(hw.l3)
    else:
        assert topo.l3_groups == ()
    if hw.counts:
        assert hw.counts["Package"] == len(topo.packages)
        assert hw.counts["Core"] == len(topo.cores)
        assert hw.counts.get("L3Cache", 0) == len(topo.l3_groups)
    assert topo.basic.cpu_model == hw.cpu_model


def test_raw_core_ids_repeat_per_package_but_core_index_does_not(loaded):
    """16amd64: hwloc shows Core P#0 and P#1 in each of 8 packages; the annotation's core must still be unique."""
    topo, hw, _ = loaded(FIXTURE_LIST[0])
    assert sorted({p for _, p, _ in hw.cores}) == [0, 1]
    assert len({c.core_id for c in topo.cores}) == 2
    detail = cpu_topology_annotation(topo)["detail"]
    assert len({d["core"] for d in detail}) == 16
    assert {(d["id"], d["core"], d["socket"], d["node"]) for d in detail if d["id"] in (2, 3)} == {(2, 2, 1, 1),
                                                                                                    (3, 3, 1, 1)}


def test_interleaved_packages_number_cores_by_cpu_like_lscpu(loaded):
    """40intel64: cpu0 is on package 0, cpu1 on package 1, ... hwloc's Core L# walks its tree (distance group
    {packages 0, 2} first), lscpu's CORE (and ours) counts by CPU number: cpu1 is core 1 here, Core L#20 in hwloc."""
    topo, hw, _ = loaded(FIXTURE_LIST[2])
    hw_l = {frozenset(cpus): logical for logical, _, cpus in hw.cores}
    assert hw_l[frozenset({1})] == 20
    cpu1 = topo.cpu(1)
    assert (cpu1.core, cpu1.socket, cpu1.node, cpu1.l3) == (1, 1, 1, 1)
    assert [p.cpus for p in topo.packages][1] == tuple(range(1, 40, 4))


def test_sparse_cpus_gpu_nodes_and_power_ids(loaded):
    """nvidiagpunumanodes: CPUs 0-15 and 88-103 (of 0-175 possible), packages P#0 and P#8, SMT4, six CPU-less
    GPU-memory nodes 250-255 named by the NVIDIA driver."""
    topo, _, _ = loaded(FIXTURE_LIST[3])
    assert format_cpu_list(topo.present) == "0-15,88-103"
    assert format_cpu_list(topo.possible) == "0-175"
    assert [(p.socket, p.physical_id) for p in topo.packages] == [(0, 0), (1, 8)]
    assert topo.threads_per_core == 4 and topo.basic.hyper_thread_enabled
    node8 = next(n for n in topo.nodes if n.id == 8)
    assert node8.cpus == tuple(range(88, 104))     # its cpulist says 88-175: absent CPUs are dropped
    gpu = [n for n in topo.nodes if n.gpu_memory]
    assert all(n.cpus == () and n.meminfo["MemTotal"] == 15728640 for n in gpu)
    assert node8.hugepages == {2048: 0, 1048576: 0}
    # caches without shared_cpu_list: read from shared_cpu_map; L2 and L3 shared by two SMT4 cores
    assert {frozenset(c.cpus) for c in topo.caches if c.name == "L2"} == {
        frozenset(range(s, s + 8)) for s in (0, 8, 88, 96)}
    assert topo.basic.vendor_id == "" and "vendorID" not in cpu_basic_info_annotation(topo)


@pytest.mark.parametrize("fx", FIXTURE_LIST, ids=IDS)
def test_annotation_values(fx, loaded):
    topo, _, _ = loaded(fx)
    detail = cpu_topology_annotation(topo)["detail"]
    assert [d["id"] for d in detail] == sorted(topo.online)
    for d in detail:
        cpu = topo.cpu(d["id"])
        assert (d["core"], d["socket"], d["node"]) == (cpu.core, cpu.socket, cpu.node)
        assert list(d) == ["id", "core", "socket", "node"]
    values = topology_annotations(topo)
    assert json.loads(values[ANNOTATION_CPU_TOPOLOGY]) == {"detail": detail}
    basic = json.loads(values[ANNOTATION_CPU_BASIC_INFO])
    assert basic["cpuModel"] == topo.basic.cpu_model
    assert " " not in values[ANNOTATION_CPU_TOPOLOGY]             # compact, as Go writes it


def _lscpu(sysroot: str | None) -> tuple[dict[int, tuple[str, ...]], list[str]]:
    """``lscpu -e`` rows keyed by CPU: (NODE, SOCKET, CORE, cache ids, ONLINE), and the cache names."""
    args = ["lscpu"] + (["--sysroot", sysroot] if sysroot else []) + ["-e=CPU,NODE,SOCKET,CORE,CACHE,ONLINE"]
    out = subprocess.run(args, capture_output=True, text=True, check=True, env={"LC_ALL": "C", "PATH": os.environ.get(
        "PATH", "/usr/bin:/bin")}, timeout=20).stdout.splitlines()
    header = out[0].split()
    assert header[:4] == ["CPU", "NODE", "SOCKET", "CORE"], header
    return {int(r.split()[0]): tuple(r.split()[1:]) for r in out[1:] if r.strip()}, header[4].split(":")


def _as_lscpu(topo: Topology, cache_names: list[str]) -> dict[int, tuple[str, ...]]:
    def s(v: object) -> str:
        return "-" if v is None else str(v)
    rows = {}
    for c in topo.cpus:
        caches = ":".join(str(c.caches[n]) for n in cache_names if n in c.caches) or "-"
        rows[c.id] = (s(c.node), s(c.socket), s(c.core), caches, "yes" if c.online else "no")
    return rows


def _lscpu_version() -> tuple[int, ...]:
    out = subprocess.run(["lscpu", "--version"], capture_output=True, text=True, timeout=20,
                         env={"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# The util-linux releases whose SOCKET/CORE/CACHE *numbers* we checked ours against, row by row. lscpu was
# rewritten in 2.37 and how it numbers cores and caches (logical indexes, sysfs ``id`` files) has changed between
# releases since; with any other release only what every release agrees on is compared: NODE and ONLINE as
# printed, and which CPUs share a socket, a core, and each cache (the grouping, whatever the labels).
LSCPU_NUMBERING_CHECKED = {(2, 38)}


def _groups(rows: dict[int, tuple[str, ...]], column: int) -> tuple[set[frozenset[int]], set[int]]:
    """The CPUs sharing each value of one column, and the CPUs without a value ("-")."""
    by_value: dict[str, set[int]] = {}
    missing = set()
    for cpu, row in rows.items():
        if row[column] == "-":
            missing.add(cpu)
        else:
            by_value.setdefault(row[column], set()).add(cpu)
    return {frozenset(v) for v in by_value.values()}, missing


def _split_caches(rows: dict[int, tuple[str, ...]], n: int) -> dict[int, tuple[str, ...]]:
    """(NODE, SOCKET, CORE, "a:b:c", ONLINE) -> (NODE, SOCKET, CORE, a, b, c, ONLINE)."""
    split = {}
    for cpu, (node, socket, core, caches, online) in rows.items():
        ids = tuple(caches.split(":")) if caches != "-" else ("-",) * n
        split[cpu] = (node, socket, core, *ids, online)
    return split


def assert_matches_lscpu(ours: dict[int, tuple[str, ...]], theirs: dict[int, tuple[str, ...]],
                         cache_names: list[str]) -> None:
    if _lscpu_version() in LSCPU_NUMBERING_CHECKED:
        assert ours == theirs
        return
    assert ours.keys() == theirs.keys()
    assert {c: (r[0], r[-1]) for c, r in ours.items()} == {c: (r[0], r[-1]) for c, r in theirs.items()}
    a, b = _split_caches(ours, len(cache_names)), _split_caches(theirs, len(cache_names))
    for column, name in enumerate(["SOCKET", "CORE", *cache_names], start=1):
        assert _groups(a, column) == _groups(b, column), name


needs_lscpu = pytest.mark.skipif(shutil.which("lscpu") is None, reason="lscpu (util-linux) not installed")


@needs_lscpu
@pytest.mark.parametrize("fx", FIXTURE_LIST, ids=IDS)
def test_numbering_matches_lscpu_on_the_dumps(fx, loaded):
    topo, _, root = loaded(fx)
    rows, cache_names = _lscpu(str(root))
    assert_matches_lscpu(_as_lscpu(topo, cache_names), rows, cache_names)


def test_lscpu_comparison_tolerates_renumbering_but_not_regrouping(monkeypatch):
    """Another util-linux release may number cores and caches differently: the same grouping under other labels
    passes, a different grouping does not."""
    ours = {0: ("0", "0", "0", "0:0", "yes"), 1: ("0", "0", "0", "0:0", "yes"),
            2: ("0", "0", "1", "1:0", "yes"), 3: ("0", "0", "1", "1:0", "yes")}
    renumbered = {0: ("0", "0", "4", "8:2", "yes"), 1: ("0", "0", "4", "8:2", "yes"),
                  2: ("0", "0", "6", "9:2", "yes"), 3: ("0", "0", "6", "9:2", "yes")}
    regrouped = {**renumbered, 1: ("0", "0", "6", "8:2", "yes")}
    monkeypatch.setattr(f"{__name__}._lscpu_version", lambda: (99, 0))
    assert_matches_lscpu(ours, renumbered, ["L1d", "L2"])
    with pytest.raises(AssertionError):
        assert_matches_lscpu(ours, regrouped, ["L1d", "L2"])
    monkeypatch.setattr(f"{__name__}._lscpu_version", lambda: min(LSCPU_NUMBERING_CHECKED))
    with pytest.raises(AssertionError):
        assert_matches_lscpu(ours, renumbered, ["L1d", "L2"])


# ----------------------------------------------------------------------------------------------- this machine


REAL = host_paths()


@pytest.fixture(scope="module")
def real_topo() -> Topology:
    if not os.path.isdir("/sys/devices/system/cpu") or not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no Linux /sys and /proc here")
    return read_topology(REAL)


def test_this_machine_against_cpu_count_and_cpuinfo(real_topo):
    topo = real_topo
    assert len(topo.online) == os.cpu_count()
    assert set(os.sched_getaffinity(0)) <= set(topo.online)
    info = Path("/proc/cpuinfo").read_text()
    processors = [int(m) for m in re.findall(r"^processor\s*:\s*(\d+)", info, re.M)]
    assert sorted(processors) == list(topo.online)
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    if model:
        assert topo.basic.cpu_model == model.group(1).strip()
    vendor = re.search(r"^vendor_id\s*:\s*(.*)$", info, re.M)
    assert topo.basic.vendor_id == (vendor.group(1).strip() if vendor else "")
    for c in topo.cpus:
        if c.online:
            assert c.node is not None and c.socket is not None and c.core is not None, c
    assert sum(len(n.cpus) for n in topo.nodes) == len(topo.cpus)
    assert all(n.mem_total_bytes > 0 for n in topo.nodes if n.cpus)
    detail = cpu_topology_annotation(topo)["detail"]
    assert [d["id"] for d in detail] == list(topo.online)


@needs_lscpu
def test_this_machine_matches_lscpu(real_topo):
    rows, cache_names = _lscpu(None)
    assert_matches_lscpu(_as_lscpu(real_topo, cache_names), rows, cache_names)


# ----------------------------------------------------------------------------------------------- fake trees


def _mask(cpus: list[int]) -> str:
    value = sum(1 << c for c in cpus)
    words = []
    while True:
        words.append(f"{value & 0xFFFFFFFF:08x}")
        value >>= 32
        if not value:
            break
    return ",".join(reversed(words))


class FakeSys:
    """A /sys + /proc tree in the kernel's formats; CPU sets are written both as lists and as masks, as the
    kernel does (we read the lists, lscpu reads the masks)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = HostPaths.under(str(root))

    def write(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")

    def cpu_files(self, present: str, online: str, possible: str) -> None:
        base = "sys/devices/system/cpu"
        self.write(f"{base}/present", present)
        self.write(f"{base}/online", online)
        self.write(f"{base}/possible", possible)
        offline = sorted(set(parse_cpu_list(possible)) - set(parse_cpu_list(online)))
        self.write(f"{base}/offline", format_cpu_list(offline))

    def cpu(self, cpu: int, package: int, core_id: int, siblings: list[int], package_cpus: list[int],
            caches: list[tuple[int, str, list[int]]]) -> None:
        t = f"sys/devices/system/cpu/cpu{cpu}/topology"
        self.write(f"{t}/physical_package_id", str(package))
        self.write(f"{t}/core_id", str(core_id))
        self.write(f"{t}/thread_siblings_list", format_cpu_list(siblings))
        self.write(f"{t}/thread_siblings", _mask(siblings))
        self.write(f"{t}/core_siblings_list", format_cpu_list(package_cpus))
        self.write(f"{t}/core_siblings", _mask(package_cpus))
        for i, (level, ctype, shared) in enumerate(caches):
            c = f"sys/devices/system/cpu/cpu{cpu}/cache/index{i}"
            self.write(f"{c}/level", str(level))
            self.write(f"{c}/type", ctype)
            self.write(f"{c}/shared_cpu_list", format_cpu_list(shared))
            self.write(f"{c}/shared_cpu_map", _mask(shared))
            self.write(f"{c}/size", "32K" if level == 1 else "1024K" if level == 2 else "16384K")

    def node(self, nid: int, cpus: list[int], total_kb: int, free_kb: int, hugepages: dict[int, int]) -> None:
        d = f"sys/devices/system/node/node{nid}"
        self.write(f"{d}/cpulist", format_cpu_list(cpus))
        self.write(f"{d}/cpumap", _mask(cpus))
        self.write(f"{d}/meminfo", "\n".join(
            f"Node {nid} {k}:{v:>15} kB" for k, v in (("MemTotal", total_kb), ("MemFree", free_kb),
                                                        ("MemUsed", total_kb - free_kb), ("FilePages", 1234)))
            + "".join(f"\nNode {nid} {k}: {v:>5}" for k, v in (("HugePages_Total", 0), ("HugePages_Free", 0))))
        for size, n in hugepages.items():
            self.write(f"{d}/hugepages/hugepages-{size}kB/nr_hugepages", str(n))


def build_sparse_host(root: Path) -> FakeSys:
    """Two packages, SMT2 with Intel-style sibling numbering (cpu N and N+8), CPUs 4-7 absent (sparse), cpu 11
    present but offline (so cpu 3 has no sibling and cpu 11 no topology dir), no /proc/cpuinfo."""
    h = FakeSys(root)
    h.cpu_files(present="0-3,8-11", online="0-3,8-10", possible="0-15")
    pkg = {0: [0, 1, 8, 9], 1: [2, 3, 10]}
    l3 = {0: [0, 1, 8, 9], 1: [2, 3, 10]}
    for cpu in (0, 1, 2, 3, 8, 9, 10):
        p = 0 if cpu in pkg[0] else 1
        sib = [c for c in (cpu % 8, cpu % 8 + 8) if c != 11]
        h.cpu(cpu, package=p, core_id=cpu % 2, siblings=sib, package_cpus=pkg[p],
              caches=[(1, "Data", sib), (1, "Instruction", sib), (2, "Unified", sib), (3, "Unified", l3[p])])
    h.node(0, [0, 1, 8, 9], total_kb=8 << 20, free_kb=6 << 20, hugepages={2048: 4, 1048576: 1})
    h.node(1, [2, 3, 10, 11], total_kb=8 << 20, free_kb=7 << 20, hugepages={2048: 0})
    h.write("sys/devices/system/cpu/cpu11/online", "0")         # an offline CPU keeps only its dir and this
    h.write("sys/devices/system/cpu/smt/active", "1")
    h.write("sys/devices/system/cpu/intel_pstate/no_turbo", "0")
    h.write("sys/fs/resctrl/info/L3/cbm_mask", "7ff")
    return h


@pytest.fixture
def sparse_host(tmp_path) -> FakeSys:
    """A tree of its own, for tests that change it."""
    return build_sparse_host(tmp_path)


@pytest.fixture(scope="module")
def sparse_ro(tmp_path_factory) -> FakeSys:
    """One shared tree for tests that only read it (file creation is the slow part of this module)."""
    return build_sparse_host(tmp_path_factory.mktemp("sparse"))


@pytest.fixture
def kubelet(sparse_ro, tmp_path) -> tuple[HostPaths, Path]:
    """The shared sparse tree with a per-test kubelet directory: (paths, cpu_manager_state path)."""
    return dataclasses.replace(sparse_ro.paths, var_lib_kubelet=str(tmp_path)), tmp_path / "cpu_manager_state"


def test_offline_and_sparse_cpus(sparse_ro):
    topo = read_topology(sparse_ro.paths)
    assert topo.problems == ()
    assert [c.id for c in topo.cpus] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert format_cpu_list(topo.offline) == "4-7,11-15"      # the kernel's meaning: possible but not online
    c11 = topo.cpu(11)
    assert (c11.online, c11.node, c11.socket, c11.core, c11.caches) == (False, 1, None, None, {})
    # cores by lowest CPU; raw core_id 0 appears in both packages but the index stays unique
    assert [(c.core, c.core_id, c.socket, c.cpus) for c in topo.cores] == [
        (0, 0, 0, (0, 8)), (1, 1, 0, (1, 9)), (2, 0, 1, (2, 10)), (3, 1, 1, (3,))]
    assert [(p.socket, p.cpus, p.nodes) for p in topo.packages] == [(0, (0, 1, 8, 9), (0,)),
                                                                    (1, (2, 3, 10), (1,))]
    assert [(g.id, g.cpus) for g in topo.l3_groups] == [(0, (0, 1, 8, 9)), (1, (2, 3, 10))]
    n0, n1 = topo.nodes
    assert n0.hugepages == {2048: 4, 1048576: 1} and n0.hugepages_bytes == (4 * 2 + 1024) << 20
    assert n0.mem_total_bytes == 8 << 30 and n0.meminfo["FilePages"] == 1234 and n0.meminfo["HugePages_Total"] == 0
    assert n1.cpus == (2, 3, 10, 11)
    assert cpu_topology_annotation(topo) == {"detail": [
        {"id": 0, "core": 0, "socket": 0, "node": 0}, {"id": 1, "core": 1, "socket": 0, "node": 0},
        {"id": 2, "core": 2, "socket": 1, "node": 1}, {"id": 3, "core": 3, "socket": 1, "node": 1},
        {"id": 8, "core": 0, "socket": 0, "node": 0}, {"id": 9, "core": 1, "socket": 0, "node": 0},
        {"id": 10, "core": 2, "socket": 1, "node": 1}]}


def test_offline_cpu_that_keeps_its_topology_stays_out_of_the_annotation(sparse_host):
    """arm64 keeps topology/ of an offline CPU, so lscpu (and upstream) would list it; a cpuset cannot hold it."""
    sparse_host.cpu(11, package=1, core_id=1, siblings=[11], package_cpus=[2, 3, 10, 11], caches=[])
    topo = read_topology(sparse_host.paths)
    c11 = topo.cpu(11)
    assert (c11.online, c11.socket, c11.core) == (False, 1, 4)
    assert 11 not in [d["id"] for d in cpu_topology_annotation(topo)["detail"]]
    assert len(cpu_topology_annotation(topo)["detail"]) == 7


def test_basic_info_without_cpuinfo_is_empty_not_an_error(sparse_host):
    topo = read_topology(sparse_host.paths)
    b = topo.basic
    assert (b.cpu_model, b.vendor_id) == ("", "")
    assert (b.hyper_thread_enabled, b.turbo_enabled, b.cat_l3_cbm_mask) == (True, True, "7ff")
    assert go_json(cpu_basic_info_annotation(topo)) == '{"hyperThreadEnabled":true,"turboEnabled":true,' \
                                                       '"catL3CbmMask":"7ff"}'
    sparse_host.write("sys/devices/system/cpu/smt/active", "0")
    sparse_host.write("sys/devices/system/cpu/intel_pstate/no_turbo", "1")
    sparse_host.write("proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon <test> & co\n")
    topo = read_topology(sparse_host.paths)
    assert cpu_basic_info_annotation(topo) == {"cpuModel": "Xeon <test> & co", "catL3CbmMask": "7ff",
                                               "vendorID": "GenuineIntel"}
    assert go_json(cpu_basic_info_annotation(topo)).startswith('{"cpuModel":"Xeon \\u003ctest\\u003e \\u0026 co"')


@needs_lscpu
def test_fake_tree_numbering_matches_lscpu(sparse_host):
    # lscpu refuses to run without /proc/cpuinfo and prints nothing for a CPU of unknown vendor/model (we need none)
    sparse_host.write("proc/cpuinfo", "".join(f"processor\t: {c}\nvendor_id\t: GenuineIntel\nmodel name\t: Fake\n\n"
                                              for c in (0, 1, 2, 3, 8, 9, 10)))
    topo = read_topology(sparse_host.paths)
    rows, cache_names = _lscpu(str(sparse_host.root))
    assert _as_lscpu(topo, cache_names) == rows


def test_no_numa_dirs_means_one_node_zero(tmp_path):
    h = FakeSys(tmp_path)
    h.cpu_files(present="0-1", online="0-1", possible="0-1")
    for cpu in (0, 1):
        h.cpu(cpu, package=0, core_id=cpu, siblings=[cpu], package_cpus=[0, 1], caches=[])
    h.write("proc/meminfo", "MemTotal:       4046848 kB\nMemFree:        1000000 kB\nHugePages_Total:       0")
    topo = read_topology(h.paths)
    assert not topo.numa_from_sysfs
    (node,) = topo.nodes
    assert (node.id, node.cpus, node.mem_total_bytes) == (0, (0, 1), 4046848 * 1024)
    assert [c.node for c in topo.cpus] == [0, 0]
    assert topo.l3_groups == () and topo.basic.hyper_thread_enabled is False


def test_malformed_sysfs_file_is_named_and_skipped(sparse_host):
    sparse_host.write("sys/devices/system/cpu/cpu9/topology/core_id", "garbage")
    sparse_host.write("sys/devices/system/node/node1/cpulist", "2-x")
    topo = read_topology(sparse_host.paths)
    assert any("cpu9/topology/core_id" in p for p in topo.problems)
    assert any("node1/cpulist" in p for p in topo.problems)
    assert topo.cpu(9).core_id is None and topo.cpu(9).core == 1      # the sibling set still places it
    assert topo.nodes[1].cpus == (2, 3, 10, 11) and topo.cpu(2).node == 1   # node1 fell back to its cpumap
    assert "skipped malformed files" in render(topo, "table")


def test_empty_host_root_gives_an_empty_topology(tmp_path):
    topo = read_topology(HostPaths.under(str(tmp_path)))
    assert topo.cpus == () and topo.cores == () and [n.id for n in topo.nodes] == [0]
    assert cpu_topology_annotation(topo) == {} and cpu_basic_info_annotation(topo) == {}
    assert go_json(cpu_topology_annotation(topo)) == "{}"


# ----------------------------------------------------------------------------------------------- kubelet state


STATIC_STATE = {"policyName": "static", "defaultCpuSet": "0-1,6-7",
                "entries": {"6f1a2b3c-0000-4d5e-8f90-123456789abc": {"app": "2-3", "sidecar": "4"},
                            "0a1b2c3d-1111-4d5e-8f90-abcdefabcdef": {"db": "5"}},
                "checksum": 3716479342}


def test_cpu_manager_state_static_policy(kubelet):
    paths, state_file = kubelet
    state_file.write_text(json.dumps(STATIC_STATE))
    topo = read_topology(paths)
    assert topo.cpu_manager_error == ""
    state = topo.cpu_manager
    assert state.policy_name == "static" and state.default_cpu_set == (0, 1, 6, 7)
    assert state.entries == {"6f1a2b3c-0000-4d5e-8f90-123456789abc": {"app": (2, 3), "sidecar": (4,)},
                             "0a1b2c3d-1111-4d5e-8f90-abcdefabcdef": {"db": (5,)}}
    assert state.checksum == 3716479342
    d = to_dict(topo)["kubeletCPUManager"]
    assert d["entries"]["6f1a2b3c-0000-4d5e-8f90-123456789abc"] == {"app": "2-3", "sidecar": "4"}
    assert "sidecar" in render(topo, "table")


def test_cpu_manager_state_none_policy_and_absent(kubelet):
    paths, state_file = kubelet
    assert read_cpu_manager_state(paths) == (None, "")
    state_file.write_text('{"policyName":"none","defaultCpuSet":"","checksum":1353318690}')
    state, error = read_cpu_manager_state(paths)
    assert error == "" and (state.policy_name, state.default_cpu_set, state.entries) == ("none", (), {})


@pytest.mark.parametrize("text,problem", [
    ('{"policyName":"static","defaultCpuSet":"0-1",', "not valid JSON"),
    ("[]", "not a JSON object"),
    ('{"defaultCpuSet":"0-1"}', "policyName"),
    ('{"policyName":"static","defaultCpuSet":"0-x"}', "defaultCpuSet"),
    ('{"policyName":"static","defaultCpuSet":"","entries":{"uid":"1-2"}}', "entries['uid']"),
    ('{"policyName":"static","defaultCpuSet":"","entries":{"uid":{"c":"a"}}}', "entries['uid']['c']"),
    ('{"policyName":"static","defaultCpuSet":"","checksum":"x"}', "checksum"),
    ('{"policyName":"static","defaultCpuSet":"","entries":[]}', "entries is not an object"),
    ("", "not valid JSON"),
])
def test_malformed_cpu_manager_state_is_an_error_field(kubelet, text, problem):
    paths, state_file = kubelet
    state_file.write_text(text)
    topo = read_topology(paths)                         # never raises for kubelet's file
    assert topo.cpu_manager is None
    assert topo.cpu_manager_error.startswith(f"{state_file}: ")
    assert problem in topo.cpu_manager_error
    assert len(topo.cpus) == 8                           # the rest of the topology is unaffected
    assert to_dict(topo)["kubeletCPUManagerError"] == topo.cpu_manager_error
    with pytest.raises(ValueError):
        parse_cpu_manager_state(text.encode())


# ----------------------------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize("mask,cpus", [("0000000f", [0, 1, 2, 3]), ("00000000,00000101", [0, 8]),
                                       ("00000001,00000000", [32]), ("0", []), ("", [])])
def test_parse_cpu_mask(mask, cpus):
    assert parse_cpu_mask(mask) == cpus


def test_format_cpu_list_and_meminfo_parser():
    assert format_cpu_list([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([]) == "" and format_cpu_list([5]) == "5"
    assert parse_node_meminfo("Node 3 MemTotal:  100 kB\nNode 3 HugePages_Total:     7\nbogus\n") == {
        "MemTotal": 100, "HugePages_Total": 7}
    assert parse_node_meminfo("MemTotal:  42 kB\n") == {"MemTotal": 42}


def test_render_outputs(kubelet):
    paths, state_file = kubelet
    state_file.write_text(json.dumps(STATIC_STATE))
    topo = read_topology(paths)
    as_json = json.loads(render(topo, "json"))
    assert as_json == json.loads(json.dumps(to_dict(topo)))
    assert yaml.safe_load(render(topo, "yaml")) == as_json
    assert as_json["summary"] == {"sockets": 2, "numaNodes": 2, "cores": 4, "cpus": 8, "onlineCPUs": 7,
                                  "threadsPerCore": 2, "l3Groups": 2, "numaFromSysfs": True}
    assert as_json["annotations"][ANNOTATION_CPU_TOPOLOGY] == go_json(cpu_topology_annotation(topo))
    table = render(topo, "table")
    assert table.splitlines()[0].startswith("2 socket(s), 2 NUMA node(s), 4 core(s), 8 CPU(s) (7 online)")
    assert re.search(r"^11\s+1\s+-\s+-\s+-\s+no$", table, re.M)        # the offline CPU's lscpu-style row
    with pytest.raises(ValueError):
        render(topo, "xml")
