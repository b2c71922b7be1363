"""Benchmark: NRI CreateContainer round trip and Synchronize with 500 containers, over a real unix socket.

The plugin runs in its own process (as in production: the runtime and the agent do not share a GIL); the
runtime side is the test peer (doubles/nriruntime.py). Measured from the runtime: request written -> response
parsed.

1. CreateContainer, N calls with C in flight at a time, cycling a BE pod (batch resources from the annotation),
   an LSR pod pinned by the scheduler and an LS pod in the share pools; 200 pods are known to the agent.
   Floor in the same run: ``StopContainer`` (same request size, answered without a hook): the transport alone.
2. Synchronize with 500 running containers (250 drifted BE containers get updates), repeated.

Budgets: CreateContainer p99 ≤ 5 ms; Synchronize(500) ≤ 200 ms.

Usage: python bench/nri_roundtrip.py [--calls 10000 --concurrency 16 --sync-containers 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._nri import POOLS, STATUS, be_spec, container, sandbox, slo
from doubles.nriruntime import FakeRuntime
from koordlet._proto.nri import api_pb2 as api


def pods(n: int) -> list[api.PodSandbox]:
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            out.append(sandbox(f"be-{i}", "BE", "besteffort", be_spec("app")))
        elif kind == 1:
            out.append(sandbox(f"lsr-{i}", "LSR", "guaranteed", {STATUS: '{"cpuset": "2-3"}'}))
        else:
            out.append(sandbox(f"ls-{i}", "LS"))
    return out


def serve(socket: str, known: int) -> None:
    """The plugin process: hooks over a view with ``known`` pods (what the agent's reconciler would hold)."""
    import tempfile as tf

    from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
    from koordlet.states.informer import meta_for
    from koordlet.states.node import NodeInfo
    from koordlet.states.nodestate import NodeView
    from koordlet.states.pod import pod_from_k8s
    from nri_plugin.hooks import Hooks
    from nri_plugin.plugin import NRIPlugin, PluginSettings

    cg = Cgroups(tf.mkdtemp(), CgroupVersion.V1, Driver.CGROUPFS)
    metas = tuple(meta_for(pod_from_k8s({"metadata": {"name": f"k{i}", "namespace": "ns", "uid": f"known-{i}"},
                                         "status": {"qosClass": "Burstable"}}), cg.layout) for i in range(known))
    view = NodeView(metas, slo(), (), None, NodeInfo("n"), ls_pools=POOLS)  # type: ignore[arg-type]
    hooks = Hooks({"cpuset", "batch", "group_identity", "oom_score_adj"}, cg.layout, lambda: view)
    plugin = NRIPlugin(PluginSettings(socket_path=socket, backoff_initial=0.05), hooks)
    plugin.start()
    sys.stdin.read()          # until the parent closes our stdin
    plugin.stop()


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def round_trips(rt: FakeRuntime, method: str, requests: list, resp_cls, concurrency: int) -> list[float]:
    async def many() -> list[float]:
        times: list[float] = []
        queue = list(reversed(requests))

        async def worker() -> None:
            while queue:
                req = queue.pop()
                t0 = time.perf_counter()
                await rt.acall(method, req, resp_cls)
                times.append(time.perf_counter() - t0)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return times
    return rt.run(many())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--sync-containers", type=int, default=500)
    ap.add_argument("--sync-rounds", type=int, default=20)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, 200)
        return
    tmp = tempfile.mkdtemp(prefix="nribench")
    sock = os.path.join(tmp, "nri", "nri.sock")
    rt = FakeRuntime(sock)
    rt.start()
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", sock], stdin=subprocess.PIPE)
    try:
        assert rt.wait_ready(20), rt.closed_reasons
        sandboxes = pods(300)
        creates = [api.CreateContainerRequest(pod=p, container=container(p, "app"))
                   for p in (sandboxes[i % len(sandboxes)] for i in range(args.calls))]
        stops = [api.StopContainerRequest(pod=r.pod, container=r.container) for r in creates]
        round_trips(rt, "CreateContainer", creates[:500], api.CreateContainerResponse, args.concurrency)  # warm-up
        rows = []
        for name, method, reqs, cls in (("StopContainer, no hook (floor)", "StopContainer", stops,
                                         api.StopContainerResponse),
                                        ("CreateContainer", "CreateContainer", creates, api.CreateContainerResponse)):
            t0 = time.perf_counter()
            times = round_trips(rt, method, reqs, cls, args.concurrency)
            wall = time.perf_counter() - t0
            rows.append((name, statistics.median(times), percentile(times, 0.99), max(times), len(times) / wall))
        print(f"round trips: {args.calls} calls, {args.concurrency} in flight")
        print("| what | p50 | p99 | max | calls/s |")
        for name, p50, p99, mx, rate in rows:
            print(f"| {name} | {p50 * 1e3:.2f} ms | {p99 * 1e3:.2f} ms | {mx * 1e3:.1f} ms | {rate:,.0f} |")
        print(f"p99 ratio CreateContainer / floor: {rows[1][2] / rows[0][2]:.2f}x")

        sync_pods = pods(args.sync_containers)
        sync_ctrs = [container(p, "app", state=api.CONTAINER_RUNNING,
                               cpus="2-3" if p.uid.startswith("lsr") else "0-3,6-7") for p in sync_pods]
        req = api.SynchronizeRequest(pods=sync_pods, containers=sync_ctrs)
        durations, updates = [], 0
        for _ in range(args.sync_rounds):
            t0 = time.perf_counter()
            resp = rt.call("Synchronize", req, api.SynchronizeResponse)
            durations.append(time.perf_counter() - t0)
            updates = len(resp.update)
        print(f"Synchronize {args.sync_containers} containers ({req.ByteSize() / 1024:.0f} KiB, {updates} updates): "
              f"median {statistics.median(durations) * 1e3:.1f} ms, max {max(durations) * 1e3:.1f} ms")
        assert rt.violations == [], rt.violations
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(10)
        rt.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
