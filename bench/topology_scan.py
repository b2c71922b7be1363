"""Benchmark: a full topology scan (read_topology) of the largest sysfs fixture and of this host, and the
NodeResourceTopology status built from it (what the 3 s NRT report loop pays each cycle).

The floor is opening and reading the same sysfs files the scan reads (its file list is taken with an audit
hook), so the ratio shows what the parsing costs on top of the kernel/disk reads.
Usage: python bench/topology_scan.py [--runs 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _paced import back_to_back, paced  # bench/ is on sys.path when run as a script

from doubles.sysfsdump import unpack
from koordlet.host.paths import HostPaths
from koordlet.host.topology import read_topology
from koordlet.reporters import nrt
from koordlet.states.node import NodeInfo
from koordlet.states.pools import cpu_pools

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "sysfs-hwloc"
LARGEST = "40intel64-2g2n4c+pcilocality"

_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], (str, bytes)):
        _opened.append(os.fsdecode(args[0]))


def files_read(paths: HostPaths) -> list[str]:
    global _opened
    _opened = []
    read_topology(paths)
    files, _opened = [f for f in _opened if os.path.isfile(f)], None
    return files


def floor(files: list[str]) -> None:
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.read(fd, 65536)
        os.close(fd)


def measure(label: str, paths: HostPaths, runs: int, paced_runs: int) -> None:
    files = files_read(paths)
    topo = read_topology(paths)
    steps = {"floor": lambda: floor(files), "scan": lambda: read_topology(paths)}
    for mode, timings in (("paced every 1 s (headline)", paced(steps, paced_runs)),
                          ("back to back", back_to_back(steps, runs))):
        scan, base = timings["scan"], timings["floor"]
        med = statistics.median
        print(f"{label}, {mode}: cpus={len(topo.cpus)} files={len(files)} read_topology median="
              f"{med(scan) * 1e3:.2f} ms floor={med(base) * 1e3:.2f} ms ratio={med(scan) / med(base):.2f}x")
    build = []
    node = NodeInfo("bench")
    for _ in range(runs):
        t = time.perf_counter()
        nrt.apply(nrt.new_object(node), nrt.build_status(topo, cpu_pools(topo, [], node, None), node, None))
        build.append(time.perf_counter() - t)
    print(f"{label}: nrt_object median={statistics.median(build) * 1e3:.2f} ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60, help="back-to-back runs")
    ap.add_argument("--paced-runs", type=int, default=20, help="runs one second apart (the agent: once a minute)")
    args = ap.parse_args()
    sys.addaudithook(_audit)
    measure("this host", HostPaths("/sys/fs/cgroup", "/sys", "/sys/fs", "/proc", "/var/run", "/run",
                                   "/var/lib/kubelet"), args.runs, args.paced_runs)
    if not (FIXTURES / f"{LARGEST}.tar.bz2").exists():
        print(f"skipped fixture: {FIXTURES} not found")
        return 0
    with tempfile.TemporaryDirectory() as d:
        measure(LARGEST, HostPaths.under(str(unpack(FIXTURES / f"{LARGEST}.tar.bz2", Path(d)))), args.runs,
                args.paced_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
