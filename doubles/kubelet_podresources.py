"""A kubelet's PodResources v1 endpoint, from the same proto, on a real unix socket (kubernetes
``pkg/kubelet/apis/podresources/server_v1.go: v1PodResourcesServer``, ``grpc/ratelimit.go``).

Behaves as the kubelet does where the proxy can tell: List returns the active pods with restartable init
containers (sidecars) first, then the regular ones, in spec order, listed whether started or not; ``Get`` of an
unknown pod is a plain error (code UNKNOWN); more than 100 calls/s (burst 10) are refused with RESOURCE_EXHAUSTED.
Devices are what the "device plugins" gave (``devices``: (namespace, name, container) -> {resource: [ids]}).
``calls`` records every call (method, monotonic time); ``stop()``/``start()`` take it away and bring it back.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Any

import grpc

from koordlet._proto.podresources import api_pb2 as pb
from koordlet._proto.podresources import api_pb2_grpc as pb_grpc


class _Bucket:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst, self.tokens, self.last = rate, burst, float(burst), time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    def __init__(self, socket_path: str, pods: list[dict[str, Any]] | None = None,
                 devices: dict[tuple[str, str, str], dict[str, list[str]]] | None = None,
                 allocatable: pb.AllocatableResourcesResponse | None = None, delay: float = 0.0) -> None:
        self.socket_path = socket_path
        self.pods = list(pods or [])
        self.devices = dict(devices or {})
        self.allocatable = allocatable or pb.AllocatableResourcesResponse(cpu_ids=[0, 1])
        self.delay = delay
        self.calls: list[tuple[str, float]] = []
        self._bucket = _Bucket(100.0, 10)
        self._server: grpc.Server | None = None

    # --- the service --------------------------------------------------------------------------------------

    def _admit(self, method: str, context: grpc.ServicerContext) -> None:
        self.calls.append((method, time.monotonic()))
        if not self._bucket.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
        if self.delay:
            time.sleep(self.delay)

    def _pod(self, obj: dict[str, Any]) -> pb.PodResources:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        ns, name = meta.get("namespace", "default"), meta["name"]
        containers = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        containers += list(spec.get("containers") or [])
        out = pb.PodResources(name=name, namespace=ns)
        for c in containers:
            entry = out.containers.add(name=c["name"], cpu_ids=[0])
            for resource, ids in self.devices.get((ns, name, c["name"]), {}).items():
                entry.devices.add(resource_name=resource, device_ids=ids,
                                  topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)]))
        return out

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
        self._admit("List", context)
        active = [p for p in self.pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        return pb.ListPodResourcesResponse(pod_resources=[self._pod(p) for p in active])

    def GetAllocatableResources(self, request: pb.AllocatableResourcesRequest,
                                context: grpc.ServicerContext) -> pb.AllocatableResourcesResponse:
        self._admit("GetAllocatableResources", context)
        return self.allocatable

    def Get(self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext) -> pb.GetPodResourcesResponse:
        self._admit("Get", context)
        for p in self.pods:
            meta = p["metadata"]
            if meta["name"] == request.pod_name and meta.get("namespace", "default") == request.pod_namespace:
                return pb.GetPodResourcesResponse(pod_resources=self._pod(p))
        context.abort(grpc.StatusCode.UNKNOWN,
                      f"pod {request.pod_name} in namespace {request.pod_namespace} not found")
        raise AssertionError("unreachable")

    # --- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait(2)
            self._server = None

    def count(self, method: str = "List") -> int:
        return sum(1 for m, _ in self.calls if m == method)
