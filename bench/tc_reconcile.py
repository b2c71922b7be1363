"""Benchmark: net QoS (policy tc) reconcile with 200 pod classes, over netlink in a scratch network namespace.

A namespace made here holds one link (a ``dummy`` when the kernel has it, else a veth pair) with a default route,
so the strategy finds its egress interface as on a node. 200 pods, half LS and half BE, each with its own
``koordinator.sh/networkQOS`` egress limit: 200 pod classes + 4 node classes + 200 ``u32`` source-IP filters.

- "from scratch": the first reconcile (qdisc, 204 classes, 200 filters), with its netlink write count.
- "steady, plan unchanged": the normal cycle (nothing changed, within the refresh period): no netlink at all.
- "steady, refresh": the plan is re-checked against the kernel (dump qdiscs, classes, filters; diff) as happens
  once per refresh period: must make 0 writes.
- "one pod changed": one pod's limit changes -> one class change.

Usage: python bench/tc_reconcile.py [--pods 200 --cycles 30]   (root)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _paced import back_to_back, paced  # bench/ is on sys.path when run as a script

from koordlet.base import wire
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.host.paths import HostPaths
from koordlet.qos.net_qos.strategy import NetQOS
from koordlet.states.informer import meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodestate import NodeView
from koordlet.states.pod import pod_from_k8s
from koordlet.writer.executor import Executor


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f} ms (p90 {sorted(values)[int(len(values) * 0.9)] * 1000:.2f})"


def sh(*args: str) -> bool:
    return subprocess.run(args, capture_output=True, timeout=10).returncode == 0


def make_link(ns: str) -> str:
    if sh("ip", "-n", ns, "link", "add", "bq0", "type", "dummy"):
        kind = "dummy"
    else:
        sh("ip", "-n", ns, "link", "add", "bq0", "type", "veth", "peer", "name", "bq1")
        sh("ip", "-n", ns, "link", "set", "bq1", "up")
        kind = "veth (no dummy driver in this kernel)"
    sh("ip", "-n", ns, "addr", "add", "10.204.0.1/16", "dev", "bq0")
    sh("ip", "-n", ns, "link", "set", "bq0", "up")
    sh("ip", "-n", ns, "route", "add", "default", "via", "10.204.255.254")
    return kind


def view(n: int, bump: int = -1) -> NodeView:
    slo, errors = merge_node_slo_spec({
        "systemStrategy": {"totalNetworkBandwidth": "10G"},
        "resourceQOSStrategy": {"lsClass": {"networkQOS": {"enable": True, "egressRequest": "4G"}},
                                "beClass": {"networkQOS": {"enable": True, "egressRequest": "1G",
                                                           "egressLimit": 50}}}})
    assert errors == [], errors
    layout = Cgroups("/nonexistent", CgroupVersion.V1, Driver.CGROUPFS).layout
    metas = []
    for i in range(n):
        label = "LS" if i % 2 else "BE"
        limit = f"{10 + i + (5 if i == bump else 0)}M"
        metas.append(meta_for(pod_from_k8s({
            "metadata": {"name": f"p{i}", "namespace": "bench", "uid": str(uuid.UUID(int=i + 1)),
                         "labels": {"koordinator.sh/qosClass": label},
                         "annotations": {wire.ANNOTATION_POD_NETWORK_QOS: json.dumps({"egressLimit": limit})}},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"qosClass": "Burstable", "podIP": f"10.204.{1 + i // 250}.{1 + i % 250}"}}), layout))
    return NodeView(tuple(metas), slo, (), None, NodeInfo("bench"))  # type: ignore[arg-type]


def run(pods: int, cycles: int, paced_cycles: int) -> None:
    ns = f"kbench-{os.getpid()}"
    if not sh("ip", "netns", "add", ns):
        print("cannot create a network namespace (root needed)")
        return
    try:
        kind = make_link(ns)
        tmp = tempfile.mkdtemp(prefix="tcbench-")
        ex = Executor(Cgroups(tmp, CgroupVersion.V1, Driver.CGROUPFS))
        strategy = NetQOS(HostPaths.under(tmp), None, ns, terway=False, refresh=3600)
        v = view(pods)
        t = time.perf_counter()
        strategy.reconcile(v, ex)
        first = time.perf_counter() - t
        state = strategy.tc.read(strategy.tc.default_link())           # type: ignore[arg-type]
        print(f"link {kind}; {pods} pods -> {len(state.classes)} classes, "
              f"{sum(1 for f in state.filters if f.src_ip)} u32 filters")
        print(f"  from scratch: {first * 1000:.1f} ms, netlink writes {strategy.tc.writes}")

        writes = strategy.tc.writes
        views = [view(pods) for _ in range(2)]  # fresh objects each cycle, as the informer produces them
        turn = [0]

        def steady_cycle() -> None:
            turn[0] += 1
            strategy.reconcile(views[turn[0] % 2], ex)

        steady = paced({"cycle": steady_cycle}, paced_cycles)["cycle"]
        steady_warm = back_to_back({"cycle": steady_cycle}, cycles)["cycle"]
        print(f"  steady, plan unchanged (no netlink), paced every 1 s (headline): {ms(steady)}; back to back "
              f"{ms(steady_warm)}; writes {strategy.tc.writes - writes}")
        v = views[0]

        refresh = []
        for _ in range(cycles):
            strategy._converged = None         # what the refresh period's expiry does
            t = time.perf_counter()
            strategy.reconcile(v, ex)
            refresh.append(time.perf_counter() - t)
        print(f"  steady, refresh (dump + diff): {ms(refresh)}, writes {strategy.tc.writes - writes}")

        changed = []
        for i in range(min(cycles, 10)):
            before = strategy.tc.writes
            t = time.perf_counter()
            strategy.reconcile(view(pods, bump=i), ex)
            changed.append(time.perf_counter() - t)
            assert strategy.tc.writes - before in (1, 2), strategy.tc.writes - before
            strategy.reconcile(view(pods), ex)  # back
        print(f"  one pod's limit changed: {ms(changed)}, 1 class change (+1 back) per step")
        strategy.tc.close()
        strategy = NetQOS(HostPaths.under(tmp), None, ns, terway=False, refresh=3600)
        t = time.perf_counter()
        strategy.reconcile(view(pods), ex)
        print(f"  restart over the converged tree: {(time.perf_counter() - t) * 1000:.1f} ms, "
              f"writes {strategy.tc.writes}")
        strategy.tc.close()
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        sh("ip", "netns", "del", ns)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--cycles", type=int, default=30, help="back-to-back cycles")
    ap.add_argument("--paced-cycles", type=int, default=30, help="cycles at the reconciler's pace (1 s)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)")
        return
    run(args.pods, args.cycles, args.paced_cycles)


if __name__ == "__main__":
    main()
