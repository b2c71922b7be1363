"""Benchmark: the companion scheduler's extender.

1. filter + prioritize for one pod over 500 node names from a 5,000-node cache (a quarter of the nodes 8-GPU boards
   with 4 NICs, every node with a NodeMetric and two assigned pods), over HTTP/1.1 keep-alive as kube-scheduler
   calls it (request written -> answer parsed; prioritize asked about the names filter passed, as kube asks), for
   a half-GPU pod, a 4-GPU pod and a CPU-only pod, cycle after cycle as kube-scheduler runs them: each cycle's 500
   names (kube's 10 % of 5,000 nodes) are the first nodes its NodeResourcesFit passes from where the last cycle
   stopped (the 4-GPU pod asks nvidia.com/gpu, which the GPU boards advertise, so its names are boards with 4
   free by kube's count; the half-GPU pod's koordinator.sh/gpu is ignoredByScheduler, so its names are any
   nodes), and each pod is then bound to its best node, so the next one finds that node changed.
   *Replicas*: every pod another replica of one workload (the steady state: a node's answer is remembered until
   it changes). *New Job*: every pod the first of another Job of one template (its own job-name, controller-uid,
   completion index and owner, which no decision reads). *New shape*: every pod unlike any before it (every node
   decided afresh: a workload's first pod).
   Floor, interleaved call by call: the same two POSTs (prioritize's with the names the extender's filter passed)
   to a handler that answers without deciding (transport and JSON of the same bodies; answered on the server's
   loop, as ``serve`` answers filter and prioritize). Beside, the CPU time the extender's two handlers took (JSON
   in, decision, JSON out), which the machine's other load changes much less than the wall time.
2. bind: allocate under the node lock, assume, POST the Binding to the API server double (real HTTP), p50/p99.
3. pods/s through the kube-scheduler double (in-tree NodeResourcesFit, binding to the API server double) over 200
   nodes (every node scored) and 5,000 nodes (kube's adaptive 10 %: 500 names per cycle), in three modes: alone,
   with the extender, and with the *floor*, an extender that answers without deciding (filter passes every name,
   prioritize scores each 0, no bind verb): what calling any extender over HTTP + JSON costs the double. Scheduling
   cycles run one after another and each pod's binding cycle overlaps the next pods' (``scheduleOne`` binds in a
   goroutine); a batch is done when its last pod is bound. Three batches per mode, the modes taking turns, after
   an untimed batch of 20 pods each (the extender's first pass over the nodes for a new pod shape is the *new
   shape* cost above, once per workload); then the ratios. The extender runs in its own process as deployed,
   watching the API server double; each batch's pods are created first and scheduled once its watch has seen
   them; its CPU time per pod is reported beside, and that of this process (the kube-scheduler double, Python
   where kube-scheduler is Go, and the API server double): what calling the extender costs the double is the
   difference between the modes. Its API client has no client-side rate limit here (``--kube-api-qps`` caps
   binds per second in a deployment, as kube-scheduler's own clientConnection caps its binder's).

Goals: filter + prioritize p99 ≤ 2 ms (replicas, 500 names of 5,000 nodes); ≥ 100 pods/s with the extender and at
least two thirds of the double's rate without it (the floor's rate against the double's alone says how much of
that any extender costs); bind p99 ≤ 10 ms (kube's timeout is 5 s).

Usage: python bench/sched_extender.py [--nodes 5000 --names 500 --calls 200 --binds 300 --pods 100]
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
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from doubles import schedcluster as sc
from doubles.apiserver_double import ApiServerDouble
from doubles.connections import NoDelayHTTPConnection
from doubles.kube_scheduler import ExtenderConfig, KubeSchedulerDouble, ManagedResource
from koordlet.base.gcfreeze import FreezeAfterFullCollection
from koordlet.ops.server import HttpServer, PostHandler
from koordlet.states.kubeapi import KubeApi
from scheduler.cache import ClusterCache
from scheduler.cli import make_binder
from scheduler.extender import Extender
from scheduler.server import ExtenderMetrics, handlers, inline_paths, serve, verb_path

GPU_ALLOC = "scheduling.koordinator.sh/device-allocated"
NVIDIA_GPU = "nvidia.com/gpu"      # advertised by the device plugin: kube-scheduler's NodeResourcesFit counts it
NOW = "2026-11-28T10:00:00Z"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def node_metric(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
            "status": {"updateTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}}}}


def build_cache(nodes: int) -> ClusterCache:
    cache = ClusterCache()
    for i in range(nodes):
        name = f"node-{i:05d}"
        board = i % 4 == 0
        cache.on_node("ADDED", sc.node(name, extra={NVIDIA_GPU: "8"} if board else None))   # NVIDIA's device plugin
        cache.on_node_metric("ADDED", node_metric(name, f"{8 + i % 20}", f"{64 + i % 100}Gi"))
        if board:
            cache.on_device("ADDED", sc.gpu_board(name, 8, nics=4))
            cache.on_pod("ADDED", sc.pod(f"busy-{i}", {NVIDIA_GPU: "1", "cpu": "4"}, node_name=name,
                                         annotations={GPU_ALLOC: '{"gpu":[{"minor":0,"resources":{'
                                                      '"koordinator.sh/gpu-core":"100",'
                                                      '"koordinator.sh/gpu-memory-ratio":"100"}}]}'}))
        cache.on_pod("ADDED", sc.pod(f"web-{i}", {"cpu": "2", "memory": "4Gi"}, node_name=name))
    return cache


SHAPES = {"half GPU": {"koordinator.sh/gpu": "50", "cpu": "1"},
          "4 GPUs": {NVIDIA_GPU: "4", "cpu": "8"},
          "CPU only": {"cpu": "2", "memory": "4Gi"}}
WARM = 10               # cycles before timing: with 500 names of 5,000 nodes, one pass over every node
ROUNDS = 3              # pods/s: each mode schedules this many batches, the modes taking turns
WARM_PODS = 20          # pods/s: each mode's untimed first batch (two passes over 5,000 nodes at 500 a cycle)


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> Any:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    assert response.status == 200, data
    return json.loads(data)


def timed_pair(conn: http.client.HTTPConnection, prefix: str, pod: dict[str, Any], body: bytes,
               passed: list[str] | None = None) -> tuple[float, Any, Any]:
    """filter (``body``: the pod and the cycle's names), then prioritize over the names filter passed, as kube
    sends them (``passed``: those names instead, so that the floor is asked what the extender was):
    (milliseconds, filter's answer, prioritize's answer)."""
    start = time.perf_counter()
    fits = post(conn, f"{prefix}/filter", body)
    names = passed if passed is not None else fits.get("NodeNames") or []
    scores = post(conn, f"{prefix}/prioritize", json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode())
    return (time.perf_counter() - start) * 1000, fits, scores


def _floor_server(verbs: dict[str, PostHandler]) -> HttpServer:
    """A started server answering ``verbs`` without deciding, on its loop as ``serve`` answers filter and
    prioritize."""
    server = HttpServer(("127.0.0.1", 0), ExtenderMetrics().registry, lambda: (True, "ok"), posts=verbs,
                        inline=frozenset(verbs))
    server.start()
    return server


def _serve_in_child(cache: ClusterCache, conn: Connection) -> None:
    """The extender and the floor in a process of their own, as in a cluster (kube-scheduler is another process:
    the client's JSON work must not share the extender's GIL). Each filter and prioritize call's CPU time in the
    handler (JSON in, decision, JSON out) is recorded; "cpu" sends the pairs recorded since the last time."""
    extender = Extender(cache)
    metrics = ExtenderMetrics()
    verbs = handlers(extender, metrics)
    spent: list[float] = []

    def timed(handle: PostHandler) -> PostHandler:
        def run(body: bytes) -> tuple[int, bytes]:
            start = time.thread_time()
            answer = handle(body)
            spent.append(time.thread_time() - start)
            return answer
        return run

    verbs.update({path: timed(verbs[path]) for path in ("/scheduler/filter", "/scheduler/prioritize")})
    server = HttpServer(("127.0.0.1", 0), metrics.registry, lambda: (True, "ok"), posts=verbs,
                        inline=inline_paths())
    server.start()
    floor = _floor_server({verb_path("/floor", v): (lambda body: (200, b'{"NodeNames":[],"Error":""}'))
                           for v in ("filter", "prioritize")})
    conn.send((server.address, floor.address))
    while conn.recv() == "cpu":
        conn.send([(spent[i] + spent[i + 1]) * 1000 for i in range(0, len(spent) - 1, 2)])
        spent.clear()
    server.stop()
    floor.stop()


def _best(fits: dict[str, Any], scores: list[dict[str, Any]]) -> str | None:
    """selectHost without the random tie-break: the first of the highest-scored nodes that passed filter."""
    passed = set(fits.get("NodeNames") or ())
    ranked = [(e["Score"], e["Host"]) for e in scores if e["Host"] in passed]
    return max(ranked, key=lambda sh: sh[0])[1] if ranked else None


def _job_pod(name: str, asks: dict[str, str]) -> dict[str, Any]:
    """The first pod of one more Job of the same template: its own job-name and controller-uid labels, completion
    index and owner."""
    pod = sc.pod(name, asks, labels={"job-name": name, "controller-uid": str(uuid.uuid4())},
                 annotations={"batch.kubernetes.io/job-completion-index": "0"})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                           "uid": pod["metadata"]["labels"]["controller-uid"], "controller": True}]
    return pod


def bench_verbs(cache: ClusterCache, names: int, calls: int) -> None:
    everyone = sorted(cache.node_names())          # every 4th a GPU board, as in the cluster
    replicas = {label: [sc.pod(f"{label.replace(' ', '-').lower()}-{i}", asks) for i in range(WARM + calls)]
                for label, asks in SHAPES.items()}
    jobs = {label: [_job_pod(f"{label.replace(' ', '-').lower()}-job-{i}", asks) for i in range(WARM + calls)]
            for label, asks in SHAPES.items()}
    for pods in (*replicas.values(), *jobs.values()):
        for pod in pods:
            cache.on_pod("ADDED", pod)             # pending: bind finds them in the extender's cache
    parent, child = multiprocessing.get_context("fork").Pipe()
    process = multiprocessing.get_context("fork").Process(target=_serve_in_child, args=(cache, child))
    process.start()
    server_addr, floor_addr = parent.recv()
    extender = NoDelayHTTPConnection(server_addr[0], server_addr[1], timeout=10)
    floor = NoDelayHTTPConnection(floor_addr[0], floor_addr[1], timeout=10)
    # nvidia.com/gpu free on each node by kube-scheduler's own count (the busy pod holds one on each board)
    free = {n: 8 - 1 for n in everyone if (cache.get(n).node or {})["status"]["allocatable"].get(NVIDIA_GPU)}
    start = 0

    def window(asks: dict[str, str]) -> list[str]:
        """The next cycle's names, as kube-scheduler finds them: from where the last cycle stopped
        (nextStartNodeIndex), the first ``names`` nodes its NodeResourcesFit passes; of the pods here only the
        4-GPU one asks for a resource it counts (koordinator.sh/gpu is ignoredByScheduler, and no node runs out
        of cpu or memory), so its names are GPU nodes with 4 free."""
        nonlocal start
        need = int(asks.get(NVIDIA_GPU, 0))
        out: list[str] = []
        seen = 0
        while len(out) < names and seen < len(everyone):
            name = everyone[(start + seen) % len(everyone)]
            seen += 1
            if not need or free.get(name, 0) >= need:
                out.append(name)
        start = (start + seen) % len(everyone)
        return out

    print(f"filter + prioritize over {names} names, {len(everyone)}-node cache, each cycle's names where the last "
          f"stopped, {calls} pods each (extender in its own process; floor interleaved)")
    for label, asks in SHAPES.items():
        for kind in ("replicas", "new Job", "new shape"):
            times, floors = [], []
            parent.send("cpu")
            parent.recv()
            for i in range(WARM + calls):
                if kind != "new shape":
                    pod = (replicas if kind == "replicas" else jobs)[label][i]
                else:      # nothing any node remembers applies to it: a Koordinator label (pod_key keeps those)
                    pod = sc.pod(f"new-{i}", asks, labels={"koordinator.sh/bench-shape": f"{label}-{i}"})
                body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": window(asks)}).encode()
                took, fits, scores = timed_pair(extender, "/scheduler", pod, body)
                floor_took, _, _ = timed_pair(floor, "/floor", pod, body, fits.get("NodeNames") or [])
                if i >= WARM:
                    times.append(took)
                    floors.append(floor_took)
                host = _best(fits, scores)
                if kind != "new shape" and host is not None:     # the next pod finds this node changed
                    meta = pod["metadata"]
                    bound = post(extender, "/scheduler/bind", json.dumps(
                        {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
                         "Node": host}).encode())
                    assert not bound["Error"], bound
                    if NVIDIA_GPU in asks:
                        free[host] -= int(asks[NVIDIA_GPU])
            parent.send("cpu")
            cpu = parent.recv()[WARM:]
            print(f"  {label:9s} {kind:9s} extender p50 {pct(times, 0.5):6.2f} ms  p99 {pct(times, 0.99):6.2f} ms"
                  f"   floor p50 {pct(floors, 0.5):5.2f} ms  p99 {pct(floors, 0.99):5.2f} ms"
                  f"   extender CPU p50 {pct(cpu, 0.5):5.2f} ms  p99 {pct(cpu, 0.99):5.2f} ms")
    extender.close()
    floor.close()
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


def _extender_process(kubeconfig: str, conn: Connection) -> None:
    """The extender as ``koord-scheduler-extender serve`` runs it (watches, binder, HTTP server, frozen gc), in a
    process of its own; answers the parent's ("seen", nodes, uids) with its CPU seconds so far once its cache holds
    them, until "stop"."""
    api = KubeApi(kubeconfig, qps=0)
    cache = ClusterCache()
    stop = threading.Event()
    cache.watch(api, stop)
    server = serve(Extender(cache, binder=make_binder(api)), ("127.0.0.1", 0))
    floor = _floor_server({
        verb_path("/floor", "filter"): lambda body: (200, json.dumps(
            {"NodeNames": json.loads(body)["NodeNames"], "FailedNodes": {}, "Error": ""}).encode()),
        verb_path("/floor", "prioritize"): lambda body: (200, json.dumps(
            [{"Host": n, "Score": 0} for n in json.loads(body)["NodeNames"]]).encode())})
    FreezeAfterFullCollection().install()
    conn.send((server.address, floor.address))
    while (message := conn.recv()) != "stop":
        _, nodes, uids = message
        while not (cache.synced and len(cache.node_names()) >= nodes and all(cache.pod(u) for u in uids)):
            time.sleep(0.01)
        conn.send(time.process_time())
    stop.set()
    cache.stop()
    server.stop()
    floor.stop()
    api.close()


def bench_throughput(node_counts: list[int], pods: int, tmp: Path) -> None:
    parent, child = multiprocessing.get_context("spawn").Pipe()
    with ApiServerDouble(bookmark_interval=1.0) as apiserver:
        apiserver.serve_koordinator_crds()
        process = multiprocessing.get_context("spawn").Process(
            target=_extender_process, args=(apiserver.write_kubeconfig(tmp / "kubeconfig-t"), child))
        process.start()
        (host, port), (floor_host, floor_port) = parent.recv()
        config = ExtenderConfig(url_prefix=f"http://{host}:{port}/scheduler", filter_verb="filter",
                                prioritize_verb="prioritize", bind_verb="bind", weight=3, node_cache_capable=True,
                                managed_resources=(ManagedResource("nvidia.com/gpu"),))
        floor = ExtenderConfig(url_prefix=f"http://{floor_host}:{floor_port}/floor", filter_verb="filter",
                               prioritize_verb="prioritize", weight=3, node_cache_capable=True,
                               managed_resources=(ManagedResource("nvidia.com/gpu"),))
        nodes: list[dict[str, Any]] = []
        for count in node_counts:
            for i in range(len(nodes), count):
                n = sc.node(f"n{i:05d}", extra={"nvidia.com/gpu": "8"})
                apiserver.put("/api/v1/nodes", n)
                apiserver.put("/apis/scheduling.koordinator.sh/v1alpha1/devices",
                              sc.gpu_board(n["metadata"]["name"], 8))
                nodes.append(n)
            percentage = 100 if count <= 200 else 0       # 0: kube's adaptive share (10 % of 5,000)
            modes = {label: KubeSchedulerDouble(extenders, api=apiserver.url, percentage_of_nodes_to_score=percentage)
                     for label, extenders in (("alone", []), ("with the floor", [floor]),
                                              ("with the extender", [config]))}
            took, placed, cpu = dict.fromkeys(modes, 0.0), dict.fromkeys(modes, 0), dict.fromkeys(modes, 0.0)
            doubles = dict.fromkeys(modes, 0.0)           # this process: the kube-scheduler and API server doubles
            # a warm-up batch first (round -1, not counted); then interleaved: every mode sees the same load
            for r in range(-1, ROUNDS):
                for label, ks in modes.items():
                    size = WARM_PODS if r < 0 else pods
                    batch = [apiserver.add_pod(sc.pod(f"{count}-{r}-{label.split()[-1]}-{i}",
                                                      {"nvidia.com/gpu": "1", "cpu": "1"})) for i in range(size)]
                    uids = [p["metadata"]["uid"] for p in batch]
                    parent.send(("seen", count, uids))
                    before = parent.recv()
                    start, own = time.perf_counter(), time.process_time()
                    # one scheduling cycle after another, each pod's binding cycle overlapping the next ones
                    bindings = [ks.schedule(pod, nodes) for pod in batch]
                    done = sum(b.result().node is not None for b in bindings)
                    elapsed, own = time.perf_counter() - start, time.process_time() - own
                    parent.send(("seen", count, uids))
                    spent = parent.recv() - before
                    if r >= 0:
                        placed[label] += done
                        took[label] += elapsed
                        cpu[label] += spent
                        doubles[label] += own
            rates = {}
            for label, ks in modes.items():
                ks.close()
                scheduled = pods * ROUNDS
                rates[label] = scheduled / took[label]
                print(f"pods/s, 1-GPU pods over {count} nodes: kube-scheduler double {label:17s} "
                      f"{rates[label]:6.1f}  ({placed[label]}/{scheduled} placed; CPU per pod: extender "
                      f"{cpu[label] / scheduled * 1000:.2f} ms, "
                      f"the doubles {doubles[label] / scheduled * 1000:.2f} ms)")
            print(f"pods/s over {count} nodes: with the extender / alone = "
                  f"{rates['with the extender'] / rates['alone']:.2f}, with the extender / with the floor = "
                  f"{rates['with the extender'] / rates['with the floor']:.2f}")
        parent.send("stop")
        process.join(30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--names", type=int, default=500)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--binds", type=int, default=300)
    p.add_argument("--pods", type=int, default=100, help="pods per batch for pods/s (3 batches per mode)")
    p.add_argument("--throughput-nodes", default="200,5000", help="node counts for pods/s, comma-separated")
    args = p.parse_args()
    start = time.perf_counter()
    cache = build_cache(args.nodes)
    print(f"cache of {args.nodes} nodes built in {time.perf_counter() - start:.1f} s")
    gc_policy = FreezeAfterFullCollection()      # as `koord-scheduler-extender serve` does once its caches are built
    gc_policy.install()
    bench_verbs(cache, args.names, args.calls)
    with tempfile.TemporaryDirectory() as tmp:
        bench_bind(args.binds, Path(tmp))
        bench_throughput([int(n) for n in args.throughput_nodes.split(",")], args.pods, Path(tmp))


if __name__ == "__main__":
    main()
