"""Benchmark: one usage-collection cycle over 200 real container cgroups vs. the read floor.

The floor is the same files read with os.open/os.read/os.close in a tight loop, in the same run, interleaved
with the cycles so both see the same machine state. The cycle is what the daemon does each interval:
collect (node, NUMA nodes, pods, containers, BE, system) and append the samples to the metric cache. The headline is
paced as the daemon runs it (bench/_paced.py: one cycle a second, the floor half a second from it); back to back,
with every cache warm, is the secondary line.
The whole daemon's CPU and RSS on such a tree: bench/agent_soak.py.

Needs root and cgroup v1 controllers (as CI).
Usage: python bench/collect_cycle.py [--pods 40 --per-pod 5 --cycles 300 --paced-cycles 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _paced import back_to_back, line, paced  # bench/ is on sys.path when run as a script

from doubles.realcgroup import IDLE, RealCgroupTree, v1_available
from koordlet.collectors.usage import UsageCollection
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.metriccache import MetricCache
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.standalone import StandalonePodSource

QOS_MIX = (KubeQOS.GUARANTEED, KubeQOS.BURSTABLE, KubeQOS.BESTEFFORT)


def build_tree(tree: RealCgroupTree, cgroups: Cgroups, pods: int, per_pod: int) -> None:
    for qos in KubeQOS:
        tree.mkdir(cgroups.layout.qos_dir(qos))
    for p in range(pods):
        qos = QOS_MIX[p % 3]
        pod = cgroups.layout.pod_dir(qos, f"{p:08d}-bench-0000-0000-000000000000")
        for c in range(per_pod):
            rel = f"{pod}/{p:04d}{c:04d}" + "ab" * 28
            tree.mkdir(rel)
            if c == 0:
                tree.spawn(rel, IDLE)        # a real task so memory.stat is not all zeros


def floor_files(paths: HostPaths, cgroups: Cgroups, metas, numa_nodes: tuple[int, ...]) -> list[str]:
    """Exactly the files one cycle opens (/proc/stat once: node and NUMA share the read)."""
    files = [paths.proc("stat"), paths.proc("meminfo")]
    files += [paths.sys("devices", "system", "node", f"node{n}", "meminfo") for n in numa_nodes]
    for meta in metas:
        for rel in [meta.cgroup_dir] + [r for _, r in meta.containers]:
            f = cgroups.usage_files(rel)
            files += [f.cpu, f.memory_stat, f.memory_usage]
        if numa_nodes:         # the pods' memory per NUMA node, for the per-NUMA system usage
            files.append(cgroups.path("memory", meta.cgroup_dir, "memory.numa_stat"))
    be = cgroups.layout.qos_dir(KubeQOS.BESTEFFORT)
    f = cgroups.usage_files(be)
    files += [f.cpu, f.memory_stat, f.memory_usage, cgroups.path("cpuset", be, "cpuset.cpus"),
              cgroups.path("cpu", be, "cpu.cfs_quota_us"), cgroups.path("cpu", be, "cpu.cfs_period_us")]
    for meta in metas:
        if meta.pod.kube_qos is KubeQOS.BESTEFFORT:
            files += [cgroups.path("cpuset", r, "cpuset.cpus") for _, r in meta.containers]
    return files


def read_floor(files: list[str]) -> None:
    for path in files:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        os.read(fd, 65536)
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=40)
    ap.add_argument("--per-pod", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=300, help="back-to-back cycles")
    ap.add_argument("--paced-cycles", type=int, default=60, help="cycles at the daemon's pace")
    ap.add_argument("--interval", type=float, default=1.0, help="the daemon's collection interval")
    args = ap.parse_args()
    reason = v1_available()
    if reason:
        print(f"skipped: {reason}")
        return 0
    link_root = tempfile.mkdtemp(prefix="koordlet-bench-")
    tree = RealCgroupTree(link_root)
    try:
        paths = HostPaths(link_root, "/sys", "/sys/fs", "/proc", "/var/run", "/run", "/var/lib/kubelet")
        cgroups = Cgroups(link_root, CgroupVersion.V1, Driver.CGROUPFS)
        build_tree(tree, cgroups, args.pods, args.per_pod)
        metas = StandalonePodSource(cgroups)()
        containers = sum(len(m.containers) for m in metas)
        collection = UsageCollection(paths, cgroups, AgentMetrics("bench"), interval=1.0, outdated=10.0)
        files = floor_files(paths, cgroups, metas, collection.numa.memory_nodes)
        cache = MetricCache(None)
        collection.collect(Tick(time.time(), metas))             # warm: paths cached, first samples skipped
        read_floor(files)
        result: list = []

        def cycle() -> None:
            result[:] = collection.collect(Tick(time.time(), metas))
            cache.append(result)

        steps = {"floor": lambda: read_floor(files), "cycle": cycle}
        paced_runs = paced(steps, args.paced_cycles, args.interval)
        warm_runs = back_to_back(steps, args.cycles)
        print(f"containers={containers} pods={len(metas)} files_per_cycle={len(files)} samples_per_cycle={len(result)}")
        print(f"paced, one cycle every {args.interval:g} s as the daemon runs it ({args.paced_cycles} cycles):")
        print("  " + line("read floor", paced_runs["floor"]))
        print("  " + line("collect+append (headline)", paced_runs["cycle"], paced_runs["floor"]) + " (budget 1.5x)")
        print(f"back to back, caches warm ({args.cycles} cycles):")
        print("  " + line("read floor", warm_runs["floor"]))
        print("  " + line("collect+append", warm_runs["cycle"], warm_runs["floor"]))
    finally:
        tree.cleanup()
        shutil.rmtree(link_root)          # symlinks only; their targets are gone already
    return 0


if __name__ == "__main__":
    sys.exit(main())
