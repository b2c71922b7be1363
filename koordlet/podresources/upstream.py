"""The kubelet's PodResources endpoint behind a single-flight, rate-limited cache.

Multus opens a connection and calls List on every CNI ADD that needs devices, and the kubelet rejects more than 100
calls/s (burst 10) with RESOURCE_EXHAUSTED (kubernetes ``pkg/kubelet/apis/podresources/grpc/ratelimit.go``). So the
proxy never forwards calls one to one: an answer younger than ``max_age`` is served as it is; an older one is refreshed
by exactly one caller while the others wait for that same call; and no call starts within ``min_interval`` of the
previous one (when it would, the last answer is served). However many clients ask, the kubelet sees at most one call per
``min_interval``. When the kubelet fails, the last good answer stays; its age is the proxy's staleness.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc

from koordlet._proto.podresources import api_pb2 as pb
from koordlet._proto.podresources import api_pb2_grpc as pb_grpc

T = TypeVar("T")

MAX_MESSAGE = 16 * 2**20 + 1      # at least the 16 MiB the kubelet's Go clients accept (Python's default is 4)
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE))


@dataclass(frozen=True)
class Snapshot(Generic[T]):
    value: T | None = None          # the last good answer (None: never had one)
    fetched: float = float("-inf")  # monotonic time of that answer
    error: str = ""                 # why the latest call failed ("" when it succeeded)
    attempts: int = 0               # calls finished so far, good or bad


class Upstream(Generic[T]):
    """One upstream call's cache. ``call(timeout)`` returns the answer or raises."""

    def __init__(self, call: Callable[[float], T], *, min_interval: float = 1.0, timeout: float = 3.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_call: Callable[[str], None] | None = None) -> None:
        self._call, self._min_interval, self._timeout, self._clock = call, min_interval, timeout, clock
        self._on_call = on_call
        self._snap: Snapshot[T] = Snapshot()
        self._cond = threading.Condition()
        self._inflight = False
        self._last_start = float("-inf")

    @property
    def snapshot(self) -> Snapshot[T]:
        return self._snap

    def age(self) -> float:
        """Seconds since the last good answer (inf: never answered)."""
        return self._clock() - self._snap.fetched

    def _still_in_flight(self) -> bool:
        """Read again after a wait: the calling thread clears it when the kubelet answers."""
        return self._inflight

    def get(self, max_age: float) -> Snapshot[T]:
        """An answer at most ``max_age`` old when the kubelet allows it, else the last one there is."""
        with self._cond:
            arrived = self._snap.attempts
            while True:
                snap = self._snap
                now = self._clock()
                if now - snap.fetched <= max_age or snap.attempts > arrived:
                    return snap                       # fresh, or a call made since we asked has finished
                if self._inflight:
                    self._cond.wait(self._timeout)
                    if self._still_in_flight() and self._snap.attempts == arrived:
                        return self._snap             # the call is hanging: do not hang with it
                    continue
                if now - self._last_start < self._min_interval:
                    return snap                       # rate limit: the last answer will do
                self._inflight, self._last_start = True, now
                break
        value: T | None = None
        error = ""
        try:
            value = self._call(self._timeout)
        except Exception as e:       # any failure: keep the last good answer
            error = describe(e)
        with self._cond:
            old = self._snap
            self._snap = (Snapshot(value, self._clock(), "", old.attempts + 1) if not error
                          else Snapshot(old.value, old.fetched, error, old.attempts + 1))
            self._inflight = False
            self._cond.notify_all()
            snap = self._snap
        if self._on_call is not None:
            self._on_call(error)
        return snap


def describe(e: Exception) -> str:
    """A gRPC error as ``CODE: details``; anything else by its message."""
    if isinstance(e, grpc.RpcError) and hasattr(e, "code"):
        return f"{e.code().name}: {e.details()}"
    return str(e) or type(e).__name__


class KubeletPodResources:
    """A client of the kubelet's socket (one channel, reconnected by gRPC as the kubelet comes and goes)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._channel = grpc.insecure_channel(f"unix://{socket_path}", options=CHANNEL_OPTIONS)
        self._stub = pb_grpc.PodResourcesListerStub(self._channel)

    def list(self, timeout: float) -> list[pb.PodResources]:
        return list(self._stub.List(pb.ListPodResourcesRequest(), timeout=timeout).pod_resources)

    def allocatable(self, timeout: float) -> pb.AllocatableResourcesResponse:
        return self._stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=timeout)

    def close(self) -> None:
        self._channel.close()


def probe(socket_path: str) -> tuple[bool, str]:
    """For ``doctor``: is the kubelet's PodResources socket there? (Without it the proxy still answers, from the
    pod annotations alone, so Multus sees koordinator's devices but not the device plugins'.)"""
    try:
        st = os.stat(socket_path)
    except OSError as e:
        return False, f"{socket_path}: {e.strerror or e}: the proxy answers from pod annotations only"
    if not stat.S_ISSOCK(st.st_mode):
        return False, f"{socket_path} is not a socket"
    return True, f"kubelet socket at {socket_path}"
