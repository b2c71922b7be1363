"""Keep cluster objects from the API server: the latest copy of one named object (this node's Node, NodeSLO,
NodeMetric, NRT: :class:`ObjectWatcher`) or a whole collection (the companion scheduler's caches: :class:`Reflector`).

List-then-watch as client-go's reflector does (the single-object watcher narrowed by ``fieldSelector=metadata.name=``):
* a watch resumes from the last resourceVersion seen (events and bookmarks both advance it), so a watch that ends
  at its timeout or on a dropped connection continues without a re-list and without missing an event;
* a 410 Gone / Expired (the server compacted past our version) means start over with a fresh list;
* while the API server is unreachable the last good copy stays in place and the watcher backs off exponentially
  (1 s doubling to 30 s); one log line when it fails, one when it recovers.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from koordlet.states.kubeapi import ApiError, KubeApi, Resource

log = logging.getLogger(__name__)

BACKOFF_START, BACKOFF_MAX = 1.0, 30.0
WATCH_TIMEOUT = 300          # seconds the server keeps one watch open (client-go picks 5-10 min)


class _ListWatch(ABC):
    """The list-then-watch loop shared by :class:`ObjectWatcher` (one named object) and :class:`Reflector` (a whole
    collection): resume from the last resourceVersion, re-list on 410, back off while the API server is away."""

    def __init__(self, api: KubeApi, resource: Resource, *, query: dict[str, str] | None = None,
                 watch_timeout: int = WATCH_TIMEOUT) -> None:
        self._api = api
        self._resource = resource
        self._query = dict(query or {})
        self._watch_timeout = watch_timeout
        self._abort: Callable[[], None] | None = None
        self._failing = False
        self._backoff = BACKOFF_START
        self.synced = threading.Event()          # set after the first successful list
        self.relists = 0                         # lists done (the first one included)
        self.resource_version = ""               # where the watch resumes (events and bookmarks move it)

    @property
    def what(self) -> str:
        return self._resource.plural

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set."""
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    version = self.resource_version = self._list()
                version = self._watch(version, stop)
                continue              # the server ended the watch at its timeout: resume at once
            except ApiError as e:
                if e.gone:
                    log.info("watch expired resource=%s resourceVersion=%s; listing again", self.what, version)
                    version = None
                    continue
                self._failed(e)
            except Exception as e:      # a bug in a callback must not end the watch
                log.exception("watch loop failed resource=%s", self.what)
                self._failed(e)
            if stop.wait(self._backoff):
                break
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def stop(self) -> None:
        """Abort the open watch stream (call after setting the stop event) so ``run`` returns at once."""
        abort = self._abort
        if abort is not None:
            abort()

    @abstractmethod
    def _listed(self, items: list[dict[str, Any]]) -> None:
        """The full state after a list (it replaces whatever was known)."""

    @abstractmethod
    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        """One ADDED / MODIFIED / DELETED event."""

    def _list(self) -> str:
        doc = self._api.get(self._resource.collection(), **self._query)
        items = [i for i in doc.get("items") or [] if isinstance(i, dict)]
        self.relists += 1
        self._recovered()
        self._listed(items)
        self.synced.set()
        return str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str, stop: threading.Event) -> str:
        events = self._api.watch(self._resource.collection(), resource_version=version,
                                 timeout_seconds=self._watch_timeout, query=self._query, on_open=self._opened)
        try:
            for event in events:
                if stop.is_set():
                    break
                kind, obj = event.get("type"), event["object"]
                if kind == "ERROR":
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("reason") or ""),
                                   f"watch {self.what}: {obj.get('message', '')}")
                version = self.resource_version = str((obj.get("metadata") or {}).get("resourceVersion")
                                                      or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._event(str(kind), obj)
        finally:
            self._abort = None
        return version

    def _opened(self, abort: Callable[[], None]) -> None:
        self._abort = abort
        self._recovered()

    def _failed(self, error: Exception) -> None:
        if not self._failing:
            log.warning("watch failing resource=%s error=%s; keeping the last copy, retrying with backoff",
                        self.what, error)
            self._failing = True

    def _recovered(self) -> None:
        self._backoff = BACKOFF_START
        if self._failing:
            log.info("watch recovered resource=%s", self.what)
            self._failing = False


class ObjectWatcher(_ListWatch):
    """Watches ``resource``/``name``; ``object`` is the latest copy (None: absent or not listed yet)."""

    def __init__(self, api: KubeApi, resource: Resource, name: str, *,
                 on_change: Callable[[dict[str, Any] | None], None] | None = None,
                 watch_timeout: int = WATCH_TIMEOUT) -> None:
        super().__init__(api, resource, query={"fieldSelector": f"metadata.name={name}"},
                         watch_timeout=watch_timeout)
        self._name = name
        # called (on the watch thread) with each new copy; more may be added before run()
        self.on_change: list[Callable[[dict[str, Any] | None], None]] = [on_change] if on_change else []
        self._object: dict[str, Any] | None = None
        self._lock = threading.Lock()

    @property
    def object(self) -> dict[str, Any] | None:
        with self._lock:
            return self._object

    @property
    def what(self) -> str:
        return f"{self._resource.plural}/{self._name}"

    def _listed(self, items: list[dict[str, Any]]) -> None:
        self._set(items[0] if items else None)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        self._set(None if kind == "DELETED" else obj)

    def _set(self, obj: dict[str, Any] | None) -> None:
        with self._lock:
            if obj == self._object:
                return
            self._object = obj
        for callback in self.on_change:
            callback(obj)


class Reflector(_ListWatch):
    """Watches a whole collection (client-go's reflector + informer), telling ``handler`` of every change:
    ``handler(kind, obj)`` with kind ADDED / MODIFIED / DELETED, on the watch thread. After a re-list the objects
    that vanished meanwhile are reported DELETED and every listed one ADDED (or MODIFIED when known), so the
    handler's state always converges to the server's."""

    def __init__(self, api: KubeApi, resource: Resource, handler: Callable[[str, dict[str, Any]], None], *,
                 query: dict[str, str] | None = None, watch_timeout: int = WATCH_TIMEOUT) -> None:
        super().__init__(api, resource, query=query, watch_timeout=watch_timeout)
        self._handler = handler
        self._known: dict[str, dict[str, Any]] = {}     # key (namespace/name) -> last object

    @staticmethod
    def key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def _listed(self, items: list[dict[str, Any]]) -> None:
        fresh = {self.key(i): i for i in items}
        for key in [k for k in self._known if k not in fresh]:
            self._handler("DELETED", self._known.pop(key))
        for key, obj in fresh.items():
            kind = "MODIFIED" if key in self._known else "ADDED"
            self._known[key] = obj
            self._handler(kind, obj)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._known.pop(self.key(obj), None)
        else:
            self._known[self.key(obj)] = obj
        self._handler(kind, obj)
