"""Pod lifecycle events from the cgroup tree (inotify), so a new pod or container is seen at once.

Watches the three QoS parent dirs for pod dirs, and each pod dir for container dirs (v1: under the cpu
subsystem, as upstream). Events only *trigger* a re-sync of the pod source; the source stays the truth.
Parents that do not exist yet (a node before its first pod, or a host without a kubelet) are re-armed by
``rearm()``, which the informer calls on every periodic sync.
"""

from __future__ import annotations

import enum
import logging
import os
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass

from koordlet.host.cgroup import Cgroups, KubeQOS
from koordlet.host.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
)

log = logging.getLogger(__name__)

_MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_ONLYDIR


class EventKind(enum.Enum):
    POD_ADDED = "PodAdded"
    POD_DELETED = "PodDeleted"
    CONTAINER_ADDED = "ContainerAdded"
    CONTAINER_DELETED = "ContainerDeleted"
    RESYNC = "Resync"            # the kernel queue overflowed: everything must be re-read


@dataclass(frozen=True, slots=True)
class PlegEvent:
    kind: EventKind
    pod_uid: str = ""
    container_id: str = ""


@dataclass(slots=True)
class _Watch:
    qos: KubeQOS
    rel: str
    pod_uid: str = ""     # "" for a QoS parent watch


class Pleg:
    """Runs one thread; ``on_event`` is called from it and must be quick (set a flag, not work)."""

    def __init__(self, cgroups: Cgroups, on_event: Callable[[PlegEvent], None]) -> None:
        self._cgroups = cgroups
        self._on_event = on_event
        self._ino = Inotify()
        self._lock = threading.Lock()
        self._watches: dict[int, _Watch] = {}
        self._watched_rel: set[str] = set()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread: threading.Thread | None = None
        self._stop = False

    def start(self) -> None:
        self.rearm()
        self._thread = threading.Thread(target=self._loop, name="pleg", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        os.write(self._wake_w, b"x")
        if self._thread:
            self._thread.join(timeout=2)
        self._ino.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    @property
    def watch_count(self) -> int:
        return len(self._watches)

    def rearm(self) -> None:
        """Add watches for QoS parents and pod dirs that exist but are not watched yet."""
        layout = self._cgroups.layout
        for qos in KubeQOS:
            parent = layout.qos_dir(qos)
            if self._add(_Watch(qos, parent)):
                for name in self._cgroups.subdirs(parent):
                    uid = layout.pod_uid_of(qos, name)
                    if uid is not None:
                        self._add(_Watch(qos, f"{parent}/{name}", uid))

    def _add(self, watch: _Watch) -> bool:
        """True when the dir is watched (now or already)."""
        with self._lock:
            if watch.rel in self._watched_rel:
                return True
            try:
                wd = self._ino.add_watch(self._cgroups.listing_dir(watch.rel), _MASK)
            except OSError:
                return False
            self._watches[wd] = watch
            self._watched_rel.add(watch.rel)
            return True

    def _drop(self, wd: int) -> None:
        with self._lock:
            watch = self._watches.pop(wd, None)
            if watch is not None:
                self._watched_rel.discard(watch.rel)

    def _loop(self) -> None:
        while not self._stop:
            try:
                ready, _, _ = select.select([self._ino.fileno(), self._wake_r], [], [])
            except (OSError, ValueError):
                return
            if self._stop:
                return
            if self._ino.fileno() in ready:
                for event in self._ino.read():
                    try:
                        self._handle(event.wd, event.mask, event.name)
                    except Exception:        # never let one odd event kill the watcher
                        log.exception("pleg event failed wd=%d mask=%#x name=%s", event.wd, event.mask,
                                      event.name)

    def _handle(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            log.warning("pleg inotify queue overflow; requesting full resync")
            self._on_event(PlegEvent(EventKind.RESYNC))
            return
        if mask & (IN_IGNORED | IN_DELETE_SELF):
            self._drop(wd)
            return
        watch = self._watches.get(wd)
        if watch is None or not mask & IN_ISDIR:
            return
        created = bool(mask & (IN_CREATE | IN_MOVED_TO))
        layout = self._cgroups.layout
        if not watch.pod_uid:
            uid = layout.pod_uid_of(watch.qos, name)
            if uid is None:
                return
            if created:
                pod = _Watch(watch.qos, f"{watch.rel}/{name}", uid)
                self._add(pod)
                # containers may have been created before the watch existed
                for child in self._cgroups.subdirs(pod.rel):
                    parsed = layout.container_of(child)
                    if parsed:
                        self._on_event(PlegEvent(EventKind.CONTAINER_ADDED, uid, parsed[1]))
            self._on_event(PlegEvent(EventKind.POD_ADDED if created else EventKind.POD_DELETED, uid))
            return
        parsed = layout.container_of(name)
        if parsed is not None:
            kind = EventKind.CONTAINER_ADDED if created else EventKind.CONTAINER_DELETED
            self._on_event(PlegEvent(kind, watch.pod_uid, parsed[1]))
