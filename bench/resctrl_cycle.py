"""Benchmark: one resctrl reconcile cycle over 200 pods x 5 containers (+ a sandbox each) on the fake resctrl tree.

The tree lives on tmpfs (/dev/shm): a fake of the kernel's resctrl filesystem (doubles/fakeresctrl.py, Intel
profile, 16 CLOSIDs) and cgroup v1 ``cpu/.../tasks`` files with 3 thread ids each. Every class has
``resctrlQOS.enable=true`` (BE 0-30 %, MB 50 %) and 8 pods carry a ``node.koordinator.sh/resctrl`` annotation,
so every pod's threads are compared with its group's ``tasks`` each cycle.

- "first": from scratch (groups created, schemata written, every thread moved).
- "steady": converged; the cycle reads the group task lists and every container task list, writes nothing.
- "refresh": steady with the schemata cache expired (every group's schemata re-read, as once a minute).
- floor: os.open/os.read/os.close of exactly the task lists a steady cycle reads, interleaved in the same run.

Usage: python bench/resctrl_cycle.py [--pods 200 --per-pod 5 --annotated 8 --cycles 50]
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

from _paced import back_to_back, paced  # bench/ is on sys.path when run as a script

from doubles.fakeresctrl import INTEL, FakeResctrl
from koordlet.base import wire
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS, Layout
from koordlet.host.paths import HostPaths
from koordlet.qos.resctrl.strategy import Resctrl
from koordlet.states.informer import meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodestate import NodeView
from koordlet.states.pod import Container, Pod
from koordlet.writer.executor import Executor

CLASSES = (("LS", KubeQOS.BURSTABLE), ("BE", KubeQOS.BESTEFFORT), ("LSR", KubeQOS.GUARANTEED),
           (None, KubeQOS.BURSTABLE))
POD_CFG = '{"llc":{"schemata":{"range":[0,50]}},"mb":{"schemata":{"percent":40}}}'


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f} ms (p90 {sorted(values)[int(len(values) * 0.9)] * 1000:.2f})"


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--per-pod", type=int, default=5)
    ap.add_argument("--annotated", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--paced-cycles", type=int, default=30, help="cycles at the reconciler's pace (1 s)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="resctrl-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        paths = HostPaths.under(base)
        fake = FakeResctrl(paths, INTEL)
        cg = Cgroups(paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
        layout = Layout(Driver.CGROUPFS)
        metas, task_files, tid = [], [], 10_000
        for p in range(args.pods):
            label, kube = CLASSES[p % len(CLASSES)]
            containers = tuple(Container(f"c{c}", "containerd", f"{p:06d}{c:04d}" + "ab" * 27)
                               for c in range(args.per_pod))
            pod = Pod(uid=f"{p:08d}-bench-0000-0000-000000000000", name=f"p{p}", namespace="bench", kube_qos=kube,
                      labels={"koordinator.sh/qosClass": label} if label else {},
                      annotations={wire.ANNOTATION_POD_RESCTRL: POD_CFG} if p < args.annotated else {},
                      phase="Running", containers=containers, created=float(p))
            meta = meta_for(pod, layout)
            rels = [rel for _, rel in meta.containers] + [f"{meta.cgroup_dir}/{'f' * 64}"]   # + the sandbox
            for rel in rels:
                path = cg.path("cpu", rel, "tasks")
                write(path, "".join(f"{tid + i}\n" for i in range(3)))
                task_files.append(path)
                tid += 3
            metas.append(meta)
        spec = merge_node_slo_spec({"resourceQOSStrategy": {
            "lsrClass": {"resctrlQOS": {"enable": True}}, "lsClass": {"resctrlQOS": {"enable": True}},
            "beClass": {"resctrlQOS": {"enable": True, "mbaPercent": 50}}}})[0]
        view = NodeView(tuple(metas), spec, (), None, NodeInfo("bench"))  # type: ignore[arg-type]
        clock = [0.0]
        ex = Executor(cg, clock=lambda: clock[0])
        strategy = Resctrl(paths, kernel=fake)

        def cycle() -> None:
            strategy.reconcile(view, ex)

        t = time.perf_counter()
        cycle()
        first = time.perf_counter() - t
        fake.apply()
        assert not fake.violations, fake.violations
        schemata = lambda: sum(1 for e in ex.events() if str(e["file"]).endswith("/schemata"))  # noqa: E731
        appends = lambda: sum(1 for e in ex.events() if str(e["file"]).endswith("/tasks"))  # noqa: E731
        groups = [g for g in os.listdir(fake.root) if g not in ("info", "mon_groups", "mon_data")
                  and os.path.isdir(os.path.join(fake.root, g))]
        moved = sum(len(fake.members(g)) for g in groups)
        print(f"fake resctrl (tmpfs, Intel 11 ways, 16 CLOSIDs): {len(metas)} pods, {len(task_files)} container "
              f"task lists (sandboxes included), {len(groups)} groups; first cycle {first * 1000:.1f} ms, "
              f"{schemata()} schemata writes, {appends()} task appends, {moved} threads placed")

        files = task_files + [os.path.join(fake.root, g, "tasks") for g in groups]

        def floor() -> None:
            for f in files:
                fd = os.open(f, os.O_RDONLY)
                os.read(fd, 65536)
                os.close(fd)

        def timed(fn) -> float:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t

        def tick() -> None:
            cycle()
            clock[0] += 1.0

        s0, a0 = schemata(), appends()
        for label, runs in (("paced every 1 s (headline)", paced({"floor": floor, "cycle": tick}, args.paced_cycles)),
                            ("back to back", back_to_back({"floor": floor, "cycle": tick}, args.cycles))):
            steady, floors = runs["cycle"], runs["floor"]
            print(f"  steady, {label}: {ms(steady)}; floor ({len(files)} task lists read) {ms(floors)}; ratio "
                  f"{statistics.median(steady) / statistics.median(floors):.2f}x")
        print(f"  steady: schemata writes {schemata() - s0}, task appends {appends() - a0}")

        def expired() -> None:
            clock[0] += 61.0
            cycle()

        s0 = schemata()
        refresh = [timed(expired) for _ in range(max(args.cycles // 5, 5))]
        print(f"  refresh (once a minute: every {len(groups)} schemata re-read, every pod dir relisted): "
              f"{ms(refresh)}; schemata writes {schemata() - s0}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
