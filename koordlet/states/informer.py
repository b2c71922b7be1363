"""The pods of this node with their cgroup dirs, kept fresh by periodic syncs and PLEG triggers.

One writer (the informer thread) replaces an immutable tuple; readers (collectors, HTTP) take the current
tuple without locks. A failing source keeps the last good answer: collection goes on while the kubelet or
API server is away, and the failure is logged once (and again when it changes or recovers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.host.cgroup import Layout
from koordlet.ops.metrics.states import ResourceRow
from koordlet.states.pleg import EventKind, PlegEvent
from koordlet.states.pod import Container, Pod, pod_from_k8s

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodMeta:
    """A pod and where its cgroups are (relative dirs; see host.cgroup)."""
    pod: Pod
    cgroup_dir: str
    containers: tuple[tuple[Container, str], ...]     # started containers and their dirs
    described: bool = True     # False: found in the cgroup tree only (no labels, annotations or names yet)


def pod_owner(meta: PodMeta) -> str:
    """The audit owner of a pod's kernel writes (the executor's /events)."""
    return f"pod {meta.pod.key}"


def meta_for(pod: Pod, layout: Layout) -> PodMeta:
    """Cgroup dirs computed from UID, Kubernetes QoS and container ids (upstream computes, never discovers)."""
    pod_dir = layout.pod_dir(pod.kube_qos, pod.uid)
    containers = tuple((c, layout.container_dir(pod_dir, c.runtime, c.id)) for c in pod.containers if c.id)
    return PodMeta(pod, pod_dir, containers)


def metas_from_objects(objects: list[Any], layout: Layout, bad: LogOnce) -> list[PodMeta]:
    """Parse Kubernetes pod objects; a malformed pod is logged (once) and skipped, the others are kept."""
    out, errors = [], []
    for obj in objects:
        try:
            out.append(meta_for(pod_from_k8s(obj), layout))
        except ValueError as e:
            errors.append(str(e))
            bad(str(e), "pod rejected: %s", e)
    bad.keep_only(errors)
    return out


def resource_rows(pods: Iterable[PodMeta]) -> list[ResourceRow]:
    """The batch and mid requests and limits of every container the pod status lists (upstream's
    ``container_resource_requests`` / ``_limits``); containers of pods known only from the cgroup tree have none."""
    rows = []
    for meta in pods:
        pod = meta.pod
        for c in pod.containers:
            r = c.resources
            cid = f"{c.runtime}://{c.id}" if c.id else ""
            for name, request, limit in ((wire.BATCH_CPU, r.batch_cpu_request, r.batch_cpu_limit),
                                         (wire.BATCH_MEMORY, r.batch_memory_request, r.batch_memory_limit),
                                         (wire.MID_CPU, r.mid_cpu_request, r.mid_cpu_limit),
                                         (wire.MID_MEMORY, r.mid_memory_request, r.mid_memory_limit)):
                if request or limit:
                    rows.append(ResourceRow(pod.uid, pod.name, pod.namespace, cid, c.name, name, request, limit))
    return rows


def unchanged_kept(pods: list[PodMeta], previous: Iterable[PodMeta]) -> list[PodMeta]:
    """``pods`` with every meta equal to the previous sync's meta of its pod replaced by that object. A sync
    parses every pod again; keeping the old object of an unchanged pod keeps what is memoized per object (a
    strategy's Updates) instead of building it again after each sync, and with it one copy of each cgroup path
    (the executor's cache keeps the first Update's, a rebuilt Update would hold a second)."""
    before = {m.pod.uid: m for m in previous}
    return [old if (old := before.get(m.pod.uid)) is not None and old == m else m for m in pods]


class TokenBucket:
    """Rate limit for PLEG-triggered syncs (upstream: 5/s, burst 10)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._last = clock()

    def delay(self) -> float:
        """Seconds to wait before the next action is allowed (0 = go, a token is taken)."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self._rate


class PodsInformer:
    def __init__(self, fetch: Callable[[], list[PodMeta]], sync_interval: float, source_name: str) -> None:
        self._fetch = fetch
        self._interval = sync_interval
        self._source = source_name
        self._pods: tuple[PodMeta, ...] = ()
        self._trigger = threading.Event()
        self._bucket = TokenBucket(5.0, 10)
        self._errors = LogOnce(log)
        self.synced = threading.Event()
        self._generation = 0                            # good syncs so far (sync_now waits for the next one)
        self._synced_cond = threading.Condition()
        self.on_sync: list[Callable[[], None]] = []     # after each good sync (PLEG re-arms its watches)
        self.on_error: list[Callable[[], None]] = []    # after each failed sync (a metric counts them)

    @property
    def pods(self) -> tuple[PodMeta, ...]:
        return self._pods

    def on_pleg(self, event: PlegEvent) -> None:
        """PLEG callback: runs on the PLEG thread, so it only sets the trigger."""
        if event.kind in (EventKind.POD_ADDED, EventKind.CONTAINER_ADDED, EventKind.POD_DELETED,
                          EventKind.CONTAINER_DELETED, EventKind.RESYNC):
            self.poke()

    def poke(self) -> None:
        """Ask for an early sync (rate-limited, never waits): the source has news, e.g. the runtime named a pod."""
        self._trigger.set()

    def sync(self) -> bool:
        try:
            pods = self._fetch()
        except Exception as e:  # any source failure: keep the last good list
            for callback in self.on_error:
                callback()
            self._errors("sync", "pod sync failed source=%s error=%s; keeping %d known pods", self._source,
                         str(e) or type(e).__name__, len(self._pods))
            return False
        if self._errors.forget("sync"):
            log.info("pod sync recovered source=%s pods=%d", self._source, len(pods))
        self._pods = tuple(sorted(unchanged_kept(pods, self._pods),
                                  key=lambda m: (m.pod.namespace, m.pod.name, m.pod.uid)))
        self.synced.set()
        with self._synced_cond:
            self._generation += 1
            self._synced_cond.notify_all()
        for callback in self.on_sync:
            callback()
        return True

    def sync_now(self, timeout: float) -> bool:
        """Ask the informer thread for a sync (rate-limited like PLEG triggers) and wait up to ``timeout`` for
        one to complete. For callers that know the pod list is behind, e.g. the kubelet lists a pod we lack."""
        with self._synced_cond:
            seen = self._generation
            self._trigger.set()
            return self._synced_cond.wait_for(lambda: self._generation > seen, timeout)

    def run(self, stop: threading.Event) -> None:
        """Sync every interval, and early (rate-limited) when PLEG fires."""
        next_full = time.monotonic()
        while not stop.is_set():
            timeout = max(0.0, next_full - time.monotonic())
            triggered = self._trigger.wait(timeout)
            if stop.is_set():
                return
            if triggered:
                while (wait := self._bucket.delay()) > 0:
                    if stop.wait(wait):
                        return
                self._trigger.clear()
            self.sync()
            if not triggered:
                next_full = time.monotonic() + self._interval
