"""Benchmark: PodResources proxy ``List`` from cache, 200 pods, 16 concurrent clients, real unix-socket gRPC.

The proxy runs in its own process (as in production) with a fake kubelet upstream (doubles/
kubelet_podresources.py) and a pod view of 200 pods, half with an RDMA VF and a GPU in their device-allocated
annotation. The clients are a grpc.aio process keeping 16 calls in flight. Floor in the same run: a bare gRPC
server of the same kind (thread pool of 8) returning the same serialized answer: the transport alone.

Budget: >= 2,000 List/s.

Usage: python bench/podresources_list.py [--calls 20000 --concurrency 16 --pods 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc

from koordlet._proto.podresources import api_pb2 as pb
from koordlet._proto.podresources import api_pb2_grpc as pb_grpc


def pod_objects(n: int) -> list[dict]:
    out = []
    for i in range(n):
        obj = {"metadata": {"name": f"pod-{i}", "namespace": "bench", "uid": f"{i:08d}-0000-0000-0000-000000000000",
                            "annotations": {}},
               "spec": {"containers": [{"name": "app", "resources": {"limits": {"koordinator.sh/rdma": "1",
                                                                                 "nvidia.com/gpu": "1"}}},
                                       {"name": "sidecar"}]},
               "status": {"phase": "Running"}}
        if i % 2 == 0:
            obj["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"] = json.dumps({
                "gpu": [{"minor": i % 8, "id": f"GPU-{i:032d}", "resources": {}}],
                "rdma": [{"minor": 0, "id": "0000:09:00.0", "resources": {"koordinator.sh/rdma": "1"},
                          "extension": {"vfs": [{"minor": 1, "busID": f"0000:09:{i % 256:02x}.1"}]}}]})
        out.append(obj)
    return out


def serve(mode: str, directory: str, n_pods: int) -> None:
    """The server process: the proxy (mode "proxy") or the bare transport (mode "floor")."""
    import signal
    from concurrent import futures

    from doubles.kubelet_podresources import FakeKubelet
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.podresources.proxy import PodResourcesProxy, ProxyServer
    from koordlet.podresources.upstream import KubeletPodResources
    from koordlet.states.informer import PodMeta
    from koordlet.states.pod import pod_from_k8s
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})     # before any thread starts: sigwait gets it
    objects = pod_objects(n_pods)
    kubelet = FakeKubelet(os.path.join(directory, "kubelet.sock"), objects).start()
    metrics = AgentMetrics("bench")
    pods = tuple(PodMeta(pod_from_k8s(o), "", ()) for o in objects)
    proxy = PodResourcesProxy(KubeletPodResources(kubelet.socket_path), lambda: pods, metrics)
    if mode == "proxy":
        server = ProxyServer(proxy, os.path.join(directory, "proxy"), metrics)
        server.start()
    else:
        payload = proxy.list_payload()
        bare = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        bare.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(lambda req, ctx: payload,
                                                        request_deserializer=pb.ListPodResourcesRequest.FromString)})])
        os.makedirs(os.path.join(directory, "proxy"))
        bare.add_insecure_port(f"unix://{os.path.join(directory, 'proxy', 'kubelet.sock')}")
        bare.start()
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM})
    print(f"kubelet_calls {kubelet.count('List')}", flush=True)


async def drive(socket: str, calls: int, concurrency: int) -> tuple[list[float], float, int]:
    latencies: list[float] = []
    size = 0
    options = [("grpc.max_receive_message_length", 16 * 2**20)]
    async with grpc.aio.insecure_channel(f"unix://{socket}", options=options) as channel:
        stub = pb_grpc.PodResourcesListerStub(channel)
        size = (await stub.List(pb.ListPodResourcesRequest())).ByteSize()
        remaining = calls

        async def client() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                t0 = time.perf_counter()
                await stub.List(pb.ListPodResourcesRequest(), timeout=10)
                latencies.append(time.perf_counter() - t0)
        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, elapsed, size


def run(mode: str, args: argparse.Namespace) -> dict:
    directory = tempfile.mkdtemp(prefix="prbench")
    proc = subprocess.Popen([sys.executable, __file__, "--serve", mode, "--dir", directory, "--pods", str(args.pods)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        latencies, elapsed, size = asyncio.run(drive(os.path.join(directory, "proxy", "kubelet.sock"),
                                                     args.calls, args.concurrency))
        proc.terminate()
        tail = proc.communicate(timeout=10)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(directory, ignore_errors=True)
    latencies.sort()
    kubelet_calls = int(tail.split("kubelet_calls")[-1]) if "kubelet_calls" in tail else -1
    return {"mode": mode, "rate": len(latencies) / elapsed, "p50": statistics.median(latencies) * 1e3,
            "p99": latencies[int(len(latencies) * 0.99) - 1] * 1e3, "max": latencies[-1] * 1e3, "bytes": size,
            "elapsed": elapsed, "kubelet_calls": kubelet_calls}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--serve", choices=("proxy", "floor"))
    parser.add_argument("--dir")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.dir, args.pods)
        return
    print(f"PodResources List, {args.pods} pods, {args.concurrency} in flight, {args.calls} calls")
    results = [run("floor", args), run("proxy", args)]
    for r in results:
        print(f"{r['mode']:>6}: {r['rate']:8.0f} List/s  p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms  "
              f"max {r['max']:.1f} ms  answer {r['bytes']} B  kubelet calls {r['kubelet_calls']} "
              f"in {r['elapsed']:.1f} s")
    floor, proxy = results
    print(f"proxy/floor throughput: {proxy['rate'] / floor['rate']:.2f}  (budget: >= 2000 List/s: "
          f"{'met' if proxy['rate'] >= 2000 else 'MISSED'})")


if __name__ == "__main__":
    main()
