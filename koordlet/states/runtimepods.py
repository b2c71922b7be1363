"""What the container runtime told the agent about its pods (over NRI): sandbox metadata and container names.

A standalone agent without a pods file discovers pods from the cgroup tree, which gives a UID and container ids
but no labels, annotations or names, so the QoS class, the pinned CPUs and the batch resources were unknown. When
the NRI plugin is connected, every RunPodSandbox / CreateContainer / Synchronize carries exactly that, straight
from the kubelet's CRI request: the standalone pod source (:mod:`koordlet.states.standalone`) merges it in, so the
NRI hooks and the reconciler decide from the same facts. It also names the sandbox (pause) container, which the
cgroup tree shows as one more child of the pod dir and which must never count as an application container.

One lock, small critical sections; bounded (a node runs at most a few hundred pods; entries beyond
``MAX_SANDBOXES`` evict the oldest). Entries go at RemovePodSandbox, and a Synchronize replaces them all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

MAX_SANDBOXES = 4096
MAX_CONTAINERS = 256             # per pod; the API server allows far fewer containers per pod


@dataclass(frozen=True)
class RuntimePod:
    """One sandbox as the runtime describes it."""
    uid: str
    sandbox_id: str
    name: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: Mapping[str, str] = field(default_factory=dict)    # container id -> container name


class RuntimePods:
    """Thread-safe map pod UID -> :class:`RuntimePod`, written by the NRI hooks, read by the pod source."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: OrderedDict[str, RuntimePod] = OrderedDict()
        self.generation = 0               # bumped on every change (readers can tell that a re-list is due)

    def sandbox(self, pod: RuntimePod) -> bool:
        """Record a sandbox (its containers known so far are kept); True when it is new or changed."""
        with self._lock:
            old = self._pods.get(pod.uid)
            if old is not None and old.sandbox_id == pod.sandbox_id:
                pod = replace(pod, containers=old.containers)
            if old == pod:
                return False
            self._pods[pod.uid] = pod
            self._pods.move_to_end(pod.uid)
            while len(self._pods) > MAX_SANDBOXES:
                self._pods.popitem(last=False)
            self.generation += 1
            return True

    def container(self, uid: str, container_id: str, name: str) -> bool:
        """Record a container's name under its pod (ignored when the pod is unknown); True when new."""
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None or pod.containers.get(container_id) == name or len(pod.containers) >= MAX_CONTAINERS:
                return False
            names = dict(pod.containers)
            names[container_id] = name
            self._pods[uid] = replace(pod, containers=MappingProxyType(names))
            self.generation += 1
            return True

    def remove(self, uid: str) -> None:
        with self._lock:
            if self._pods.pop(uid, None) is not None:
                self.generation += 1

    def replace_all(self, pods: Iterable[RuntimePod]) -> None:
        """What a Synchronize reports is the whole truth: pods it does not list are gone."""
        fresh = OrderedDict((p.uid, p) for p in pods)
        while len(fresh) > MAX_SANDBOXES:
            fresh.popitem(last=False)
        with self._lock:
            if fresh != self._pods:
                self._pods = fresh
                self.generation += 1

    def get(self, uid: str) -> RuntimePod | None:
        with self._lock:
            return self._pods.get(uid)

    def __len__(self) -> int:
        return len(self._pods)
