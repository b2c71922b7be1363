"""Benchmark: the CPI collector's cost per window (the counting time itself excluded: window = 0).

1. Fake kernel (doubles/fakeperf.py), 200 containers x 16 CPUs x 2 events: the collector's Python overhead per
   container. Floor in the same run: the same open/ioctl/read/close calls made straight on the fake kernel, so the
   difference is the collector (targets, budget, grouping, parsing, scaling, samples, gauges).
2. Real perf_event_open with software events (cpu-clock, task-clock) on 20 real cgroup v2 directories (root and a
   v2 hierarchy needed; skipped otherwise): syscall cost per container and the fds a window holds.

Usage: python bench/cpi_window.py [--containers 200 --cpus 16 --rounds 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from doubles.fakeperf import FakePerfKernel
from koordlet.collectors.cpi import CPICollector
from koordlet.component import Tick
from koordlet.host import perf
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.informer import PodMeta
from koordlet.states.pod import Container, Pod


def pods(cgroups: Cgroups, n: int, subsystem: str) -> list[PodMeta]:
    out = []
    for i in range(n):
        uid = f"{i:08d}-0000-0000-0000-000000000000"
        cid = f"{i:064x}"
        pod_dir = cgroups.layout.pod_dir(KubeQOS.BURSTABLE, uid)
        rel = cgroups.layout.container_dir(pod_dir, "containerd", cid)
        os.makedirs(cgroups.path(subsystem, rel), exist_ok=True)
        pod = Pod(uid, f"pod-{i}", "bench", KubeQOS.BURSTABLE, containers=(Container("app", "containerd", cid),))
        out.append(PodMeta(pod, pod_dir, ((pod.containers[0], rel),)))
    return out


def floor_window(kernel: FakePerfKernel, dirs: list[str], cpus: list[int]) -> None:
    """The kernel calls of one window and nothing else."""
    leaders, fds = [], []
    for d in dirs:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        for cpu in cpus:
            lead = kernel.open(perf.attr_bytes(perf.CYCLES, perf.GROUP_READ_FORMAT), dfd, cpu, -1,
                               perf.PERF_FLAG_PID_CGROUP)
            fds += [lead, kernel.open(perf.attr_bytes(perf.INSTRUCTIONS, perf.GROUP_READ_FORMAT), dfd, cpu, lead,
                                      perf.PERF_FLAG_PID_CGROUP)]
            leaders.append(lead)
        os.close(dfd)
    for lead in leaders:
        kernel.ioctl(lead, perf.PERF_EVENT_IOC_RESET, 1)
        kernel.ioctl(lead, perf.PERF_EVENT_IOC_ENABLE, 1)
    for lead in leaders:
        kernel.ioctl(lead, perf.PERF_EVENT_IOC_DISABLE, 1)
        kernel.read(lead, 56)
    for fd in reversed(fds):
        kernel.close(fd)


def timed(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fake(args: argparse.Namespace) -> None:
    root = tempfile.mkdtemp(prefix="cpibench")
    try:
        cgroups = Cgroups(root, CgroupVersion.V1, Driver.CGROUPFS)
        metas = pods(cgroups, args.containers, "perf_event")
        cpus = list(range(args.cpus))
        dirs = [os.path.normpath(cgroups.path("perf_event", rel)) for m in metas for _, rel in m.containers]
        kernel = FakePerfKernel(counts={(d, c, e): 1000 for d in dirs for c in cpus for e in ("cycles",
                                                                                              "instructions")})
        collector = CPICollector(cgroups, AgentMetrics("bench"), cpus, kernel=kernel, window=0.0)
        full = timed(lambda: collector.collect(Tick(time.time(), metas)), args.rounds)
        floor = timed(lambda: floor_window(kernel, dirs, cpus), args.rounds)
        n = args.containers
        print(f"fake kernel, {n} containers x {args.cpus} CPUs x 2 events ({collector.last_fds} fds):")
        print(f"  collector window {full * 1e3:.1f} ms ({full / n * 1e6:.0f} us/container); kernel calls alone "
              f"{floor * 1e3:.1f} ms ({floor / n * 1e6:.0f} us/container); collector overhead "
              f"{(full - floor) / n * 1e6:.0f} us/container, ratio {full / floor:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def real(args: argparse.Namespace) -> None:
    root = "/sys/fs/cgroup/unified" if os.path.exists("/sys/fs/cgroup/unified/cgroup.procs") else "/sys/fs/cgroup"
    if os.geteuid() != 0 or not os.path.exists(os.path.join(root, "cgroup.controllers")):
        print("real path: skipped (needs root and a cgroup v2 hierarchy)")
        return
    base = f"koordlet-bench-cpi-{os.getpid()}"
    cgroups = Cgroups(os.path.join(root, base), CgroupVersion.V2, Driver.CGROUPFS)
    try:
        metas = pods(cgroups, 20, "")
        cpus = sorted(os.sched_getaffinity(0))
        collector = CPICollector(cgroups, AgentMetrics("bench"), cpus, events=(perf.CPU_CLOCK, perf.TASK_CLOCK),
                                 window=0.0)
        took = timed(lambda: collector.collect(Tick(time.time(), metas)), args.rounds)
        print(f"real perf_event_open (software events), 20 cgroups x {len(cpus)} CPUs: window {took * 1e3:.2f} ms "
              f"({took / 20 * 1e6:.0f} us/container), {collector.last_fds} fds held during the window")
    finally:
        for dirpath, _, _ in sorted(os.walk(cgroups.root), key=lambda w: -len(w[0])):
            os.rmdir(dirpath)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--containers", type=int, default=200)
    parser.add_argument("--cpus", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    fake(args)
    real(args)


if __name__ == "__main__":
    main()
