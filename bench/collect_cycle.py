"""Benchmark: one usage-collection cycle over 200 real container cgroups vs. the read floor.

The floor is the same files read with os.open/os.read/os.close in a tight loop, in the same run, interleaved
with the cycles so both see the same machine state. The cycle is what the daemon does each interval:
collect (node, NUMA nodes, pods, containers, BE, system) and append the samples to the metric cache.
Then the real daemon runs against the same tree and its steady CPU and RSS are measured.

Needs root and cgroup v1 controllers (as CI). Usage: python bench/collect_cycle.py [--pods 40 --per-pod 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from doubles.realcgroup import IDLE, RealCgroupTree, v1_available
from koordlet.collectors.usage import UsageCollection
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.metriccache import MetricCache
from koordlet.metrics import AgentMetrics
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


def _cpu_and_rss(pid: int) -> tuple[float, float]:
    """(user + system CPU seconds, RSS in MiB) of a live process, from /proc/<pid>/stat (proc(5): utime and stime
    are fields 14 and 15 in clock ticks, rss field 24 in pages; counted after the ")" that ends the command name)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return cpu, int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_daemon(tree: RealCgroupTree, seconds: float, warmup: float,
                   extra: list[str]) -> tuple[float, float, float]:
    """(millicores, rss MiB at end, rss MiB after warmup) of the real daemon on this tree."""
    with tempfile.TemporaryDirectory() as cache:
        proc = subprocess.Popen([sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "bench",
                                 "--cgroup-root-dir", tree.link_root, "--cgroup-driver", "cgroupfs",
                                 "--addr", "127.0.0.1:19316", "--tsdb-path", cache, "--log-level", "warning",
                                 *extra], env=dict(os.environ, STATE_DIRECTORY=cache))  # reports, checkpoints
        try:
            time.sleep(warmup)
            c0, rss_warm = _cpu_and_rss(proc.pid)
            t0 = time.monotonic()
            time.sleep(seconds)
            t1 = time.monotonic()
            c1, rss_end = _cpu_and_rss(proc.pid)
        finally:
            proc.terminate()
            proc.wait(10)
    return (c1 - c0) / (t1 - t0) * 1000, rss_end, rss_warm


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=40)
    ap.add_argument("--per-pod", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--daemon-seconds", type=float, default=60.0)
    ap.add_argument("--daemon-warmup", type=float, default=15.0)
    ap.add_argument("--daemon-args", default="", help="extra agent flags, e.g. '--metric-cache-memory-window 60s'")
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
        cycle, collect_only, floor = [], [], []
        for _ in range(args.cycles):
            t = time.perf_counter()
            read_floor(files)
            floor.append(time.perf_counter() - t)
            t = time.perf_counter()
            result = collection.collect(Tick(time.time(), metas))
            t_collect = time.perf_counter() - t
            cache.append(result)
            cycle.append(time.perf_counter() - t)
            collect_only.append(t_collect)
        med = statistics.median
        p90 = lambda xs: sorted(xs)[int(len(xs) * 0.9)]  # noqa: E731
        samples = len(result)
        print(f"containers={containers} pods={len(metas)} files_per_cycle={len(files)} samples_per_cycle={samples}")
        print(f"read floor      median={med(floor) * 1e3:.2f} ms  p90={p90(floor) * 1e3:.2f} ms")
        print(f"collect         median={med(collect_only) * 1e3:.2f} ms  p90={p90(collect_only) * 1e3:.2f} ms  "
              f"ratio={med(collect_only) / med(floor):.2f}x")
        print(f"collect+append  median={med(cycle) * 1e3:.2f} ms  p90={p90(cycle) * 1e3:.2f} ms  "
              f"ratio={med(cycle) / med(floor):.2f}x (budget 1.5x)")
        if args.daemon_seconds > 0:
            mc, rss_end, rss_warm = measure_daemon(tree, args.daemon_seconds, args.daemon_warmup,
                                                   args.daemon_args.split())
            print(f"daemon 1s interval, {containers} containers: cpu={mc:.1f} millicores (budget 50)  "
                  f"rss={rss_end:.1f} MiB (after warmup {rss_warm:.1f} MiB; budget 120) {args.daemon_args}")
    finally:
        tree.cleanup()
        shutil.rmtree(link_root)          # symlinks only; their targets are gone already
    return 0


if __name__ == "__main__":
    sys.exit(main())
