"""Benchmark: the companion scheduler's extender.

1. filter + prioritize for one pod over 500 node names from a 5,000-node cache (a quarter of the nodes 8-GPU boards
   with 4 NICs, every node with a NodeMetric and two assigned pods), over HTTP/1.1 keep-alive as kube-scheduler
   calls it (request written -> answer parsed), for a half-GPU pod, a 4-GPU pod and a CPU-only pod. Floor in the
   same run: the same two POSTs to a handler that answers without deciding (transport + JSON of the same bodies).
2. bind: allocate under the node lock, assume, POST the Binding to the API server double (real HTTP), p50/p99.
3. pods/s through the kube-scheduler double (in-tree NodeResourcesFit, 200 nodes, binding to the API server
   double) without and with the extender.

Goals: filter + prioritize p99 ≤ 20 ms, bind p99 ≤ 10 ms (kube's timeout is 5 s).

Usage: python bench/sched_extender.py [--nodes 5000 --names 500 --calls 200]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from doubles import schedcluster as sc
from doubles.apiserver_double import ApiServerDouble
from doubles.connections import NoDelayHTTPConnection
from doubles.kube_scheduler import ExtenderConfig, KubeSchedulerDouble, ManagedResource
from koordlet.base.gcfreeze import FreezeAfterFullCollection
from koordlet.ops.server import HttpServer
from koordlet.states.kubeapi import KubeApi
from scheduler.cache import ClusterCache
from scheduler.cli import make_binder
from scheduler.extender import Extender
from scheduler.server import ExtenderMetrics, serve

GPU_ALLOC = "scheduling.koordinator.sh/device-allocated"
NOW = "2026-11-28T10:00:00Z"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def node_metric(name: str, cpu: str, memory: str) -> dict:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
            "status": {"updateTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}}}}


def build_cache(nodes: int) -> ClusterCache:
    cache = ClusterCache()
    for i in range(nodes):
        name = f"node-{i:05d}"
        cache.on_node("ADDED", sc.node(name))
        cache.on_node_metric("ADDED", node_metric(name, f"{8 + i % 20}", f"{64 + i % 100}Gi"))
        if i % 4 == 0:
            cache.on_device("ADDED", sc.gpu_board(name, 8, nics=4))
            cache.on_pod("ADDED", sc.pod(f"busy-{i}", {"nvidia.com/gpu": "1", "cpu": "4"}, node_name=name,
                                         annotations={GPU_ALLOC: '{"gpu":[{"minor":0,"resources":{'
                                                      '"koordinator.sh/gpu-core":"100",'
                                                      '"koordinator.sh/gpu-memory-ratio":"100"}}]}'}))
        cache.on_pod("ADDED", sc.pod(f"web-{i}", {"cpu": "2", "memory": "4Gi"}, node_name=name))
    return cache


def post_pair(conn: http.client.HTTPConnection, prefix: str, body: bytes) -> None:
    for verb in ("filter", "prioritize"):
        conn.request("POST", f"{prefix}/{verb}", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        assert response.status == 200, data
        json.loads(data)


def _serve_in_child(cache: ClusterCache, conn: Connection) -> None:
    """The extender and the floor in a process of their own, as in a cluster (kube-scheduler is another process:
    the client's JSON work must not share the extender's GIL)."""
    extender = Extender(cache)
    server = serve(extender, ("127.0.0.1", 0))
    floor = HttpServer(("127.0.0.1", 0), ExtenderMetrics().registry, lambda: (True, "ok"),
                       posts={f"/floor/{v}": (lambda body: (200, b'{"NodeNames":[],"Error":""}'))
                              for v in ("filter", "prioritize")})
    floor.start()
    conn.send((server.address, floor.address))
    conn.recv()                   # until the parent is done
    server.stop()
    floor.stop()


def bench_verbs(cache: ClusterCache, names: int, calls: int) -> None:
    parent, child = multiprocessing.get_context("fork").Pipe()
    process = multiprocessing.get_context("fork").Process(target=_serve_in_child, args=(cache, child))
    process.start()
    server_addr, floor_addr = parent.recv()
    candidates = sorted(cache.node_names())[:names]        # every 4th a GPU board, as in the cluster
    pods = {"half GPU": sc.pod("p", {"koordinator.sh/gpu": "50", "cpu": "1"}),
            "4 GPUs": sc.pod("p", {"nvidia.com/gpu": "4", "cpu": "8"}),
            "CPU only": sc.pod("p", {"cpu": "2", "memory": "4Gi"})}
    print(f"filter + prioritize over {names} names, {len(cache.node_names())}-node cache, {calls} calls each "
          "(extender in its own process)")
    for label, pod in pods.items():
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": candidates}).encode()
        for target, addr, prefix in (("extender", server_addr, "/scheduler"), ("floor", floor_addr, "/floor")):
            conn = NoDelayHTTPConnection(*addr, timeout=10)
            for _ in range(10):           # warm-up: the first calls build the per-pod and per-node memos
                post_pair(conn, prefix, body)
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                post_pair(conn, prefix, body)
                times.append((time.perf_counter() - start) * 1000)
            conn.close()
            print(f"  {label:9s} {target:8s} p50 {pct(times, 0.5):6.2f} ms  p99 {pct(times, 0.99):6.2f} ms")
    parent.send("done")
    process.join(10)


def bench_bind(binds: int, tmp: Path) -> None:
    with ApiServerDouble() as apiserver:
        # qps=0: time the bind itself, not the client-side rate limit
        api = KubeApi(apiserver.write_kubeconfig(tmp / "kubeconfig"), qps=0)
        cache = ClusterCache()
        for i in range(50):
            cache.on_node("ADDED", sc.node(f"gpu-{i}"))
            cache.on_device("ADDED", sc.gpu_board(f"gpu-{i}", 8))
        extender = Extender(cache, binder=make_binder(api))
        times = []
        for i in range(binds):
            pod = apiserver.add_pod(sc.pod(f"b{i}", {"koordinator.sh/gpu": "25"}))
            cache.on_pod("ADDED", pod)
            start = time.perf_counter()
            error = extender.bind_pod("default", pod["metadata"]["name"], pod["metadata"]["uid"], f"gpu-{i % 50}")
            times.append((time.perf_counter() - start) * 1000)
            assert error is None, error
        api.close()
    print(f"bind ({binds} pods, Binding POSTed to the API server double): p50 {pct(times, 0.5):.2f} ms  "
          f"p99 {pct(times, 0.99):.2f} ms")


def bench_throughput(pods: int, tmp: Path) -> None:
    with ApiServerDouble(bookmark_interval=1.0) as apiserver:
        apiserver.serve_koordinator_crds()
        nodes = [sc.node(f"n{i:03d}", extra={"nvidia.com/gpu": "8"}) for i in range(200)]
        for n in nodes:
            apiserver.put("/api/v1/nodes", n)
            apiserver.put("/apis/scheduling.koordinator.sh/v1alpha1/devices", sc.gpu_board(n["metadata"]["name"], 8))
        api = KubeApi(apiserver.write_kubeconfig(tmp / "kubeconfig-t"))
        cache = ClusterCache()
        stop = threading.Event()
        cache.watch(api, stop)
        extender = Extender(cache, binder=make_binder(api))
        server = serve(extender, ("127.0.0.1", 0))
        while not (cache.synced and len(cache.node_names()) == 200):
            time.sleep(0.05)
        host, port = server.address
        config = ExtenderConfig(url_prefix=f"http://{host}:{port}/scheduler", filter_verb="filter",
                                prioritize_verb="prioritize", bind_verb="bind", weight=3, node_cache_capable=True,
                                managed_resources=(ManagedResource("nvidia.com/gpu"),))
        for label, extenders in (("kube-scheduler double alone", []), ("with the extender", [config])):
            with KubeSchedulerDouble(extenders, api=apiserver.url, percentage_of_nodes_to_score=100) as ks:
                start = time.perf_counter()
                placed = 0
                for i in range(pods):
                    pod = apiserver.add_pod(sc.pod(f"{label[:4]}-{i}", {"nvidia.com/gpu": "1", "cpu": "1"}))
                    while cache.pod(pod["metadata"]["uid"]) is None:
                        time.sleep(0.001)
                    placed += ks.schedule_one(pod, nodes).node is not None
                rate = pods / (time.perf_counter() - start)
            print(f"pods/s, 1-GPU pods over 200 nodes: {label:28s} {rate:6.1f}  ({placed}/{pods} placed)")
        stop.set()
        cache.stop()
        server.stop()
        api.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--names", type=int, default=500)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--binds", type=int, default=300)
    p.add_argument("--pods", type=int, default=200)
    args = p.parse_args()
    start = time.perf_counter()
    cache = build_cache(args.nodes)
    print(f"cache of {args.nodes} nodes built in {time.perf_counter() - start:.1f} s")
    gc_policy = FreezeAfterFullCollection()      # as `koord-scheduler-extender serve` does once its caches are built
    gc_policy.install()
    bench_verbs(cache, args.names, args.calls)
    with tempfile.TemporaryDirectory() as tmp:
        bench_bind(args.binds, Path(tmp))
        bench_throughput(args.pods, Path(tmp))


if __name__ == "__main__":
    main()
