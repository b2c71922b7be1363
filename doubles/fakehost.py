"""A fake host tree: /proc and cgroupfs files in the kernel's own formats, under a temporary root (tests and benches).

It stands in for the kernel only (file layout and formats), so the agent's real readers run unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from koordlet.host.cgroup import CgroupVersion, Driver, KubeQOS, Layout
from koordlet.host.paths import HostPaths

V1_SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory", "blkio")


@dataclass
class CgroupValues:
    cpu_ns: int = 0
    anon: int = 0                 # split evenly into active/inactive anon
    active_file: int = 0
    inactive_file: int = 0
    unevictable: int = 0
    usage: int | None = None      # memory.usage_in_bytes / memory.current; default anon + file
    cpuset: str = "0-3"
    quota: int = -1
    period: int = 100000
    # memory.numa_stat: anon bytes per NUMA node (default: all on node 0); unevictable and file pages on node 0
    numa: dict[int, int] | None = None


@dataclass
class FakeHost:
    root: str
    version: CgroupVersion = CgroupVersion.V1
    driver: Driver = Driver.CGROUPFS
    ncpu: int = 4
    paths: HostPaths = field(init=False)

    def __post_init__(self) -> None:
        self.paths = HostPaths.under(self.root)
        self.layout = Layout(self.driver)
        os.makedirs(self.paths.proc_root, exist_ok=True)
        os.makedirs(self.paths.cgroup_root, exist_ok=True)
        if self.version is CgroupVersion.V2:
            self._write(os.path.join(self.paths.cgroup_root, "cgroup.controllers"), "cpuset cpu io memory pids")
        else:
            for s in V1_SUBSYSTEMS:
                os.makedirs(os.path.join(self.paths.cgroup_root, s), exist_ok=True)
        self.set_cgroup("", CgroupValues())
        for qos in KubeQOS:
            self.set_cgroup(self.layout.qos_dir(qos), CgroupValues())
        self.set_proc_stat(busy=0, idle=0)
        self.set_meminfo(total_kb=16 * 2**20, available_kb=12 * 2**20, free_kb=10 * 2**20)

    @staticmethod
    def _write(path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def dirs(self, rel: str) -> list[str]:
        if self.version is CgroupVersion.V2:
            return [os.path.join(self.paths.cgroup_root, rel)]
        return [os.path.join(self.paths.cgroup_root, s, rel) for s in V1_SUBSYSTEMS]

    @staticmethod
    def _stat_line(name: str, busy: int, idle: int, iowait: int, steal: int) -> str:
        """busy ticks are split over user/system/irq/softirq; iowait and steal must not count as busy."""
        user, system, irq = busy // 2, busy // 4, busy // 8
        softirq = busy - user - system - irq
        return f"{name} {user} 0 {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\n"

    def set_proc_stat(self, busy: int, idle: int, iowait: int = 0, steal: int = 0,
                      per_cpu: dict[int, int] | None = None) -> None:
        """The aggregate line from ``busy``; ``per_cpu`` gives each listed CPU's busy ticks (the kernel lists
        online CPUs only, so leave an offline one out), with the same iowait/steal on every CPU line. Without
        it, CPUs 0..ncpu-1 are listed with zero ticks."""
        cpus = per_cpu if per_cpu is not None else dict.fromkeys(range(self.ncpu), 0)
        lines = "".join(self._stat_line(f"cpu{c}", b, idle, iowait, steal) for c, b in sorted(cpus.items()))
        self._write(self.paths.proc("stat"), self._stat_line("cpu ", busy, idle, iowait, steal) + lines
                    + "intr 0\nctxt 0\nbtime 0\nprocesses 1\n")

    def set_numa(self, nodes: dict[int, list[int]], offline: tuple[int, ...] = ()) -> None:
        """sysfs NUMA nodes {node id: its CPUs} (empty list: a CPU-less node) and the CPU sets; every node
        starts with 1 GiB of which nothing is used (set_node_meminfo changes that)."""
        cpus = sorted(c for node_cpus in nodes.values() for c in node_cpus)
        online = [c for c in cpus if c not in offline]
        listing = lambda xs: ",".join(map(str, xs))  # noqa: E731
        base = os.path.join(self.paths.sys_root, "devices", "system")
        for name, value in (("present", cpus), ("possible", cpus), ("online", online), ("offline", offline)):
            self._write(os.path.join(base, "cpu", name), listing(value) + "\n")
        for node, node_cpus in nodes.items():
            self._write(os.path.join(base, "node", f"node{node}", "cpulist"), listing(node_cpus) + "\n")
            self.set_node_meminfo(node, total_kb=2**20, free_kb=2**20)

    def set_node_meminfo(self, node: int, total_kb: int, free_kb: int, active_file_kb: int = 0,
                         inactive_file_kb: int = 0, sreclaimable_kb: int = 0, omit: tuple[str, ...] = ()) -> None:
        """nodeN/meminfo as the kernel prints it ("Node N Field:  value kB"); ``omit`` drops fields."""
        fields = {"MemTotal": total_kb, "MemFree": free_kb, "MemUsed": total_kb - free_kb,
                  "Active(file)": active_file_kb, "Inactive(file)": inactive_file_kb, "FilePages": 0,
                  "SReclaimable": sreclaimable_kb, "SUnreclaim": 0}
        text = "".join(f"Node {node} {k + ':':<15} {v:>8} kB\n" for k, v in fields.items() if k not in omit)
        self._write(os.path.join(self.paths.sys_root, "devices", "system", "node", f"node{node}", "meminfo"),
                    text + f"Node {node} HugePages_Total:     0\n")

    def set_meminfo(self, total_kb: int, available_kb: int, free_kb: int) -> None:
        self._write(self.paths.proc("meminfo"),
                    f"MemTotal:       {total_kb} kB\nMemFree:        {free_kb} kB\n"
                    f"MemAvailable:   {available_kb} kB\nBuffers:        0 kB\nCached:         0 kB\n"
                    "HugePages_Total:       0\n")

    def set_cgroup(self, rel: str, v: CgroupValues) -> None:
        for d in self.dirs(rel):
            os.makedirs(d, exist_ok=True)
        root = self.paths.cgroup_root
        ia, aa = v.anon // 2, v.anon - v.anon // 2
        usage = v.usage if v.usage is not None else v.anon + v.active_file + v.inactive_file + v.unevictable
        if self.version is CgroupVersion.V1:
            j = lambda s, f: os.path.join(root, s, rel, f)  # noqa: E731
            self._write(j("cpuacct", "cpuacct.usage"), f"{v.cpu_ns}\n")
            stat = (f"cache {v.active_file + v.inactive_file}\nrss {v.anon}\n"
                    f"inactive_anon {ia}\nactive_anon {aa}\ninactive_file {v.inactive_file}\n"
                    f"active_file {v.active_file}\nunevictable {v.unevictable}\n"
                    f"hierarchical_memory_limit 9223372036854771712\n"
                    f"total_cache {v.active_file + v.inactive_file}\ntotal_rss {v.anon}\n"
                    f"total_inactive_anon {ia}\ntotal_active_anon {aa}\n"
                    f"total_inactive_file {v.inactive_file}\ntotal_active_file {v.active_file}\n"
                    f"total_unevictable {v.unevictable}\n")
            self._write(j("memory", "memory.stat"), stat)
            self._write(j("memory", "memory.usage_in_bytes"), f"{usage}\n")
            self._write(j("cpuset", "cpuset.cpus"), f"{v.cpuset}\n")
            self._write(j("cpu", "cpu.cfs_quota_us"), f"{v.quota}\n")
            self._write(j("cpu", "cpu.cfs_period_us"), f"{v.period}\n")
            self._write(j("memory", "memory.numa_stat"), self._numa_stat_v1(v))
        else:
            d = os.path.join(root, rel)
            self._write(os.path.join(d, "cpu.stat"),
                        f"usage_usec {v.cpu_ns // 1000}\nuser_usec 0\nsystem_usec 0\nnr_periods 0\n"
                        "nr_throttled 0\nthrottled_usec 0\n")
            self._write(os.path.join(d, "memory.stat"),
                        f"anon {v.anon}\nfile {v.active_file + v.inactive_file}\nkernel 0\n"
                        f"inactive_anon {ia}\nactive_anon {aa}\ninactive_file {v.inactive_file}\n"
                        f"active_file {v.active_file}\nunevictable {v.unevictable}\n")
            self._write(os.path.join(d, "memory.current"), f"{usage}\n")
            self._write(os.path.join(d, "memory.numa_stat"), self._numa_stat_v2(v))
            self._write(os.path.join(d, "cpuset.cpus.effective"), f"{v.cpuset}\n")
            quota = "max" if v.quota < 0 else str(v.quota)
            self._write(os.path.join(d, "cpu.max"), f"{quota} {v.period}\n")

    @staticmethod
    def _numa_split(v: CgroupValues) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        """(anon, unevictable, file) bytes per node: anon as ``v.numa`` says (all on node 0 without it),
        unevictable and file pages on node 0."""
        anon = dict(v.numa) if v.numa is not None else {0: v.anon}
        anon.setdefault(0, 0)
        anon = dict(sorted(anon.items()))
        unev = {n: v.unevictable if n == 0 else 0 for n in anon}
        file = {n: v.active_file + v.inactive_file if n == 0 else 0 for n in anon}
        return anon, unev, file

    def _numa_stat_v1(self, v: CgroupValues) -> str:
        """v1 format in pages; the plain lines count only pages charged to the dir itself, which the kernel shows
        as 0 for a pod whose processes live in its container cgroups, the hierarchical ones everything below."""
        page = os.sysconf("SC_PAGE_SIZE")
        anon, unev, file = self._numa_split(v)
        line = lambda name, per: (f"{name}={sum(per.values()) // page} "  # noqa: E731
                                  + " ".join(f"N{n}={b // page}" for n, b in per.items()) + "\n")
        zero = dict.fromkeys(anon, 0)
        total = {n: anon[n] + unev[n] + file[n] for n in anon}
        return "".join([line("total", zero), line("file", zero), line("anon", zero), line("unevictable", zero),
                        line("hierarchical_total", total), line("hierarchical_file", file),
                        line("hierarchical_anon", anon), line("hierarchical_unevictable", unev)])

    def _numa_stat_v2(self, v: CgroupValues) -> str:
        """v2 format in bytes (hierarchical), a subset of the kernel's lines in its order."""
        anon, unev, file = self._numa_split(v)
        half = {n: b // 2 for n, b in anon.items()}
        line = lambda name, per: name + " " + " ".join(f"N{n}={b}" for n, b in per.items()) + "\n"  # noqa: E731
        return "".join([line("anon", anon), line("file", file), line("kernel_stack", dict.fromkeys(anon, 0)),
                        line("inactive_anon", half), line("active_anon", {n: anon[n] - half[n] for n in anon}),
                        line("inactive_file", dict.fromkeys(anon, 0)), line("active_file", file),
                        line("unevictable", unev)])

    def pod_dir(self, qos: KubeQOS, uid: str) -> str:
        return self.layout.pod_dir(qos, uid)

    def container_dir(self, qos: KubeQOS, uid: str, cid: str, runtime: str = "containerd") -> str:
        return self.layout.container_dir(self.pod_dir(qos, uid), runtime, cid)

    def add_pod(self, qos: KubeQOS, uid: str, values: CgroupValues | None = None,
                containers: dict[str, CgroupValues] | None = None, runtime: str = "containerd") -> str:
        """Create the pod dir and container dirs (container ids as keys); returns the pod's relative dir."""
        rel = self.pod_dir(qos, uid)
        self.set_cgroup(rel, values or CgroupValues())
        for cid, cv in (containers or {}).items():
            self.set_cgroup(self.container_dir(qos, uid, cid, runtime), cv)
        return rel

    def remove(self, rel: str) -> None:
        import shutil
        for d in self.dirs(rel):
            shutil.rmtree(d, ignore_errors=True)

