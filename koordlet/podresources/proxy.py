"""The PodResources proxy: kubelet PodResources v1 on our own socket, with koordinator's devices added.

Multus-CNI (thick plugin) reads ``/var/lib/kubelet/pod-resources/kubelet.sock``; its DaemonSet mounts our socket
directory there instead (deploy/multus-podresources.yaml). Every answer comes from the cached kubelet answer
(:mod:`koordlet.podresources.upstream`) merged with the pod view (:mod:`koordlet.podresources.merge`). The merged
List is kept serialized and rebuilt only when the kubelet answer or the pod view changes, so a List costs a
lookup, not a merge. While the kubelet is away the last good answer is served, plus the devices of pods that
appeared since, and the staleness gauge grows.

``Get`` answers from the same merged view (upstream passes it through, unmerged); ``GetAllocatableResources``
passes the kubelet's answer through the same single-flight cache.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from koordlet._proto.podresources import api_pb2 as pb
from koordlet.base.logutil import LogOnce
from koordlet.ops.metrics import AgentMetrics
from koordlet.podresources.merge import Merged, merge
from koordlet.podresources.upstream import CHANNEL_OPTIONS, KubeletPodResources, Snapshot, Upstream
from koordlet.states.pod import Pod

log = logging.getLogger(__name__)

SERVICE = "v1.PodResourcesLister"
SOCKET_NAME = "kubelet.sock"
POD_SYNC_WAIT = 1.0       # how long a List waits for the pod view to learn pods only the kubelet knows


@dataclass(frozen=True)
class _View:
    snapshot: Snapshot[list[pb.PodResources]]
    pods: Sequence[Any]
    merged: Merged
    payload: bytes


class PodResourcesProxy:
    """What the server answers. ``pods()`` returns the pod view's current tuple (replaced, never mutated, by its
    writer); ``sync_pods(timeout)`` asks that writer for a sync now and waits for it."""

    def __init__(self, kubelet: KubeletPodResources, pods: Callable[[], Sequence[Any]],
                 metrics: AgentMetrics, *, sync_pods: Callable[[float], bool] | None = None,
                 max_age: float = 1.0, min_interval: float = 1.0, timeout: float = 3.0) -> None:
        self._pods, self._sync_pods, self._metrics, self._max_age = pods, sync_pods, metrics, max_age
        self._bad = LogOnce(log, logging.WARNING)
        self.lists: Upstream[list[pb.PodResources]] = Upstream(
            kubelet.list, min_interval=min_interval, timeout=timeout, on_call=self._upstream_result("List"))
        self.allocatable: Upstream[pb.AllocatableResourcesResponse] = Upstream(
            kubelet.allocatable, min_interval=min_interval, timeout=timeout,
            on_call=self._upstream_result("GetAllocatableResources"))
        self._view: _View | None = None
        self._synced_for: Snapshot[list[pb.PodResources]] | None = None
        self._lock = threading.Lock()
        metrics.pod_resources_staleness.labels(metrics.node).set_function(self.staleness)

    def staleness(self) -> float:
        """Age of the kubelet answer being served, in seconds (-1: the kubelet never answered)."""
        age = self.lists.age()
        return -1.0 if age == float("inf") else age

    def _upstream_result(self, method: str) -> Callable[[str], None]:
        def record(error: str) -> None:
            self._metrics.pod_resources_upstream_calls.labels(self._metrics.node, method,
                                                              "error" if error else "ok").inc()
            if error:
                self._bad(f"upstream {method}", "kubelet PodResources %s failed error=%s; serving the last good "
                          "answer and the pod annotations", method, error)
            elif self._bad.forget(f"upstream {method}"):
                log.info("kubelet PodResources %s recovered", method)
        return record

    def view(self) -> _View:
        """The merged List for the current kubelet answer and pod view (rebuilt only when one of them changed)."""
        snapshot = self.lists.get(self._max_age)
        view = self._merged(snapshot, self._pods())
        if view.merged.unknown and self._sync_pods is not None and self._synced_for is not snapshot:
            # the kubelet lists pods the pod view has not seen yet (a CNI ADD right after admission):
            # sync the view once for this answer, so their devices are there
            self._synced_for = snapshot
            if self._sync_pods(POD_SYNC_WAIT):
                view = self._merged(snapshot, self._pods())
        return view

    def _merged(self, snapshot: Snapshot[list[pb.PodResources]], pods: Sequence[Any]) -> _View:
        view = self._view
        if view is not None and view.snapshot is snapshot and view.pods is pods:
            return view
        with self._lock:
            view = self._view
            if view is not None and view.snapshot is snapshot and view.pods is pods:
                return view
            merged = merge(snapshot.value or (), [_pod(p) for p in pods])
            for key, problem in merged.problems:
                self._bad(f"{key} {problem}", "pod %s devices: %s", key, problem)
            self._bad.keep_only([f"{k} {p}" for k, p in merged.problems]
                                + ["upstream List", "upstream GetAllocatableResources"])
            view = self._view = _View(snapshot, pods, merged, merged.response.SerializeToString())
            return view

    def allocatable_answer(self) -> Snapshot[pb.AllocatableResourcesResponse]:
        return self.allocatable.get(self._max_age)

    def list_payload(self) -> bytes:
        return self.view().payload

    def get(self, name: str, namespace: str) -> pb.PodResources | None:
        for entry in self.view().merged.response.pod_resources:
            if entry.name == name and entry.namespace == namespace:
                return entry
        return None


def _pod(item: Any) -> Pod:
    """The pod view holds PodMeta (pod + cgroup dirs) in the agent, plain Pods elsewhere."""
    return item if isinstance(item, Pod) else item.pod


def check_socket_dir(directory: str) -> None:
    """Create the socket directory (0750) or check it: it must be a directory owned by root (or us) that
    others cannot write, or someone else could put their own socket where Multus looks."""
    os.makedirs(directory, mode=0o750, exist_ok=True)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{directory} is not a directory")
    if st.st_uid not in (0, os.geteuid()):
        raise OSError(f"{directory} is owned by uid {st.st_uid}, not root")
    if st.st_mode & 0o022:
        raise OSError(f"{directory} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")


class ProxyServer:
    """The gRPC server on a unix socket, mode 0660. The socket is bound under a temporary name, given its mode
    and then renamed into place, so it is never reachable with the default mode, and a stale socket from an
    earlier run is replaced in one step."""

    def __init__(self, proxy: PodResourcesProxy, directory: str, metrics: AgentMetrics, workers: int = 8) -> None:
        self.proxy, self.directory, self._metrics = proxy, directory, metrics
        self.socket_path = os.path.join(directory, SOCKET_NAME)
        self._server: grpc.Server | None = None
        self._workers = workers

    def _handler(self, method: str, parse: Callable[[bytes], Any],
                 answer: Callable[[Any, grpc.ServicerContext], bytes]) -> grpc.RpcMethodHandler[Any, Any]:
        requests = self._metrics.pod_resources_requests

        def handle(request: Any, context: grpc.ServicerContext) -> bytes:
            try:
                payload = answer(request, context)
            except _Refused as e:
                requests.labels(self._metrics.node, method, e.code.name).inc()
                context.abort(e.code, e.message)
            except Exception:     # a bug must not take the server down, and Multus gets a clear status
                log.exception("PodResources %s failed", method)
                requests.labels(self._metrics.node, method, "INTERNAL").inc()
                context.abort(grpc.StatusCode.INTERNAL, f"koordlet PodResources proxy: {method} failed")
            requests.labels(self._metrics.node, method, "OK").inc()
            return payload
        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=parse)

    def _list(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> bytes:
        return self.proxy.list_payload()

    def _get(self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext) -> bytes:
        entry = self.proxy.get(request.pod_name, request.pod_namespace)
        if entry is None:       # the kubelet's own answer for an unknown pod: a plain error (code UNKNOWN)
            raise _Refused(grpc.StatusCode.UNKNOWN,
                           f"pod {request.pod_name} in namespace {request.pod_namespace} not found")
        return pb.GetPodResourcesResponse(pod_resources=entry).SerializeToString()

    def _allocatable(self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext) -> bytes:
        snap = self.proxy.allocatable_answer()
        if snap.value is None:
            raise _Refused(grpc.StatusCode.UNAVAILABLE, f"kubelet PodResources unavailable: {snap.error}")
        return snap.value.SerializeToString()

    def start(self) -> None:
        check_socket_dir(self.directory)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="podres"),
                             options=CHANNEL_OPTIONS)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
            "List": self._handler("List", pb.ListPodResourcesRequest.FromString, self._list),
            "Get": self._handler("Get", pb.GetPodResourcesRequest.FromString, self._get),
            "GetAllocatableResources": self._handler("GetAllocatableResources",
                                                     pb.AllocatableResourcesRequest.FromString, self._allocatable),
        })])
        staging = os.path.join(self.directory, f".{SOCKET_NAME}.{os.getpid()}")
        if os.path.lexists(staging):
            os.unlink(staging)
        if server.add_insecure_port(f"unix://{staging}") == 0:
            raise OSError(f"cannot bind {staging}")
        server.start()
        try:
            os.chmod(staging, 0o660)
            os.replace(staging, self.socket_path)
        except OSError:
            server.stop(0)
            raise
        self._server = server
        log.info("PodResources proxy serving socket=%s", self.socket_path)

    def stop(self, grace: float = 0.5) -> None:
        if self._server is None:
            return
        self._server.stop(grace).wait(grace + 1.0)
        self._server = None
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message
