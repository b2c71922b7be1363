"""Benchmark: the QoS reconcile cycle over 200 containers, and NodeSLO change -> every cgroup converged.

Two trees, both with 40 pods x 5 containers (+ a sandbox dir each):

1. The real kernel (root, cgroup v1): PodResources (cpuset, batch resources, quota unset) + CPUQOS (cpu.idle).
   - "steady": converged host, cache fresh -> no kernel reads, no writes; paced once a second as the reconciler
     runs (the headline, bench/_paced.py) and back to back.
   - "refresh": converged host, cache expired (every value re-read, what happens once a minute) vs. the floor:
     os.open/os.read/os.close of exactly the files the cycle reads, in the same run.
   - "change all": the share pool moves (node reservation), so every container's cpuset.cpus is rewritten.
2. A fake Anolis tree on tmpfs with ``cpu.bvt_warp_ns`` (this VM has no bvt): NodeSLO enables group identity ->
   time until every QoS dir, pod and container holds its value (one reconcile: they are all written in it).

Usage: python bench/qos_reconcile.py [--pods 40 --per-pod 5 --cycles 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _paced import back_to_back, paced  # bench/ is on sys.path when run as a script

from doubles.realcgroup import RealCgroupTree, v1_available
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.qos.cpu_qos import CPUQOS
from koordlet.qos.pod_resources import PodResources
from koordlet.states.informer import meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodestate import NodeView
from koordlet.states.pod import pod_from_k8s
from koordlet.writer.executor import Executor

CLASSES = (("LS", "Burstable"), ("BE", "BestEffort"), ("LSR", "Guaranteed"), (None, "Burstable"))
BATCH = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
         "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}}


def make_pods(n: int, per_pod: int):
    pods = []
    for p in range(n):
        label, kube = CLASSES[p % len(CLASSES)]
        res = BATCH if label == "BE" else {}
        containers = [{"name": f"c{c}", "resources": res} for c in range(per_pod)]
        statuses = [{"name": f"c{c}", "containerID": f"containerd://{p:04d}{c:04d}" + "ab" * 28}
                    for c in range(per_pod)]
        labels = {"koordinator.sh/qosClass": label} if label else {}
        pods.append(pod_from_k8s({"metadata": {"name": f"p{p}", "namespace": "bench",
                                               "uid": f"{p:08d}-bench-0000-0000-000000000000", "labels": labels},
                                  "spec": {"containers": containers},
                                  "status": {"qosClass": kube, "containerStatuses": statuses}}))
    return pods


def slo(spec):
    return merge_node_slo_spec(spec)[0]


def timed(fn, cycles: int) -> list[float]:
    out = []
    for _ in range(cycles):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f} ms (p90 {sorted(values)[int(len(values) * 0.9)] * 1000:.2f})"


def real_kernel(args) -> None:
    reason = v1_available()
    if reason:
        print(f"real-kernel part skipped: {reason}")
        return
    link_root = tempfile.mkdtemp(prefix="qos-bench-")
    tree = RealCgroupTree(link_root)
    try:
        cg = Cgroups(link_root, CgroupVersion.V1, Driver.CGROUPFS)
        paths = HostPaths(link_root, "/sys", "/sys/fs", "/proc", "/var/run", "/run", "/var/lib/kubelet")
        for q in KubeQOS:
            tree.mkdir(cg.layout.qos_dir(q))
        metas = tuple(meta_for(p, cg.layout) for p in make_pods(args.pods, args.per_pod))
        for m in metas:
            for _, rel in m.containers:
                tree.mkdir(rel)
            tree.mkdir(f"{m.cgroup_dir}/{'f' * 64}")          # the sandbox
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        view = NodeView(metas, slo({"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}), (), None,
                        NodeInfo("bench"), ls_pools={0: cpus})  # type: ignore[arg-type]
        clock = [0.0]
        ex = Executor(cg, clock=lambda: clock[0])
        strategies = [PodResources(), CPUQOS(cg, paths)]

        def cycle(v=view):
            for s in strategies:
                s.reconcile(v, ex)

        t = time.perf_counter()
        cycle()
        first = time.perf_counter() - t
        first_writes = ex.total.written
        containers = sum(len(m.containers) for m in metas)
        print(f"real kernel: {len(metas)} pods, {containers} containers; first cycle {first * 1000:.1f} ms, "
              f"{first_writes} writes")
        before = ex.total.written
        steady = paced({"cycle": cycle}, args.paced_cycles, args.interval)["cycle"]
        steady_warm = timed(cycle, args.cycles)
        print(f"  steady (cache fresh), paced every {args.interval:g} s (headline): {ms(steady)}; back to back "
              f"{ms(steady_warm)}; writes {ex.total.written - before}")

        files = sorted(set(ex._cache))                       # exactly what a refresh re-reads

        def floor():
            for f in files:
                fd = os.open(f, os.O_RDONLY)
                os.read(fd, 4096)
                os.close(fd)

        def expired():
            clock[0] += 61.0
            cycle()

        before = ex.total.written
        for label, runs in (("paced (headline)", paced({"floor": floor, "refresh": expired}, args.paced_cycles,
                                                       args.interval)),
                            ("back to back", back_to_back({"floor": floor, "refresh": expired}, args.cycles))):
            floors, refresh = runs["floor"], runs["refresh"]
            print(f"  refresh (cache expired, {len(files)} files re-read), {label}: {ms(refresh)}; floor "
                  f"{ms(floors)}; ratio {statistics.median(refresh) / statistics.median(floors):.2f}x")
        print(f"  refresh writes {ex.total.written - before}")

        narrowed = replace(view, ls_pools={0: cpus[1:] or cpus})
        widened = view
        changes = []
        for i in range(max(args.cycles // 5, 3)):
            target = narrowed if i % 2 == 0 else widened
            before = ex.total.written
            changes += timed(lambda target=target: cycle(target), 1)
            assert ex.total.written - before > 0
        print(f"  change all (share pool moved: cpuset of every non-BE container + sandbox): {ms(changes)}, "
              f"{ex.total.written - before} writes in the last one")
    finally:
        tree.cleanup()
        shutil.rmtree(link_root, ignore_errors=True)


def fake_anolis(args) -> None:
    base = tempfile.mkdtemp(prefix="qos-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        paths = HostPaths.under(base)
        cg = Cgroups(paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
        os.makedirs(paths.proc("sys", "kernel"))
        with open(paths.proc("sys", "kernel", "sched_group_identity_enabled"), "w") as f:
            f.write("0\n")
        metas = tuple(meta_for(p, cg.layout) for p in make_pods(args.pods, args.per_pod))
        rels = [cg.layout.qos_dir(q) for q in KubeQOS]
        rels += [r for m in metas for r in [m.cgroup_dir] + [c for _, c in m.containers]]
        for rel in rels:
            d = cg.path("cpu", rel)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cpu.bvt_warp_ns"), "w") as f:
                f.write("0\n")
        off = NodeView(metas, slo({}), (), None, NodeInfo("bench"))  # type: ignore[arg-type]
        on = replace(off, slo=slo({"resourceQOSStrategy": {c: {"cpuQOS": {"enable": True}}
                                                            for c in ("lsrClass", "lsClass", "beClass")}}))
        results = []
        for i in range(max(args.cycles // 5, 4)):
            ex = Executor(cg)
            strategy = CPUQOS(cg, paths)
            strategy.reconcile(on if i % 2 else off, ex)       # converge on the other setting first
            view = off if i % 2 else on
            t = time.perf_counter()
            strategy.reconcile(view, ex)
            results.append(time.perf_counter() - t)
            written = len(ex.events())
        print(f"fake Anolis tree (tmpfs): NodeSLO group identity toggled -> {len(rels)} cgroups converged in "
              f"{ms(results)}; {written} bvt writes in the last toggle")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=40)
    ap.add_argument("--per-pod", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=50, help="back-to-back cycles")
    ap.add_argument("--paced-cycles", type=int, default=30, help="cycles at the reconciler's pace")
    ap.add_argument("--interval", type=float, default=1.0, help="the reconcile interval")
    args = ap.parse_args()
    real_kernel(args)
    fake_anolis(args)


if __name__ == "__main__":
    main()
