"""Writing reports to the API server: NodeMetric status, the NodeResourceTopology and Device objects.

Both writers take the object they change from a watcher (the informer's copy, as upstream reads its lister) and
follow the API's optimistic concurrency: every write carries the resourceVersion it was based on; a 409 Conflict
means someone wrote in between, so we read the current object and apply our part again (up to
``CONFLICT_RETRIES`` times). Server-side failures (unreachable, 429, 5xx) are raised to the caller's loop, which
backs off; the next report is rebuilt from the metric cache, so data collected during an outage is reported when
the server returns.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from koordlet.states.kubeapi import NODE_METRICS, ApiError, KubeApi, RateLimiter, Resource
from koordlet.states.watcher import ObjectWatcher

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 5
# upstream's NodeMetric status update limiter: 0.1 QPS, burst 2
STATUS_QPS, STATUS_BURST = 0.1, 2


def _retry_on_conflict(attempt: Callable[[dict[str, Any] | None], str], current: dict[str, Any] | None,
                       fetch: Callable[[], dict[str, Any] | None], what: str) -> str:
    """Run ``attempt(obj)``; on 409 Conflict read the object again and retry (client-go's RetryOnConflict)."""
    for _ in range(CONFLICT_RETRIES):
        try:
            return attempt(current)
        except ApiError as e:
            if not (e.conflict or (e.status == 409 and e.reason == "AlreadyExists")):
                raise
            log.info("write conflict resource=%s reason=%s; reading it again", what, e.reason or "Conflict")
            current = fetch()
    raise ApiError(409, "Conflict", f"{what}: still conflicting after {CONFLICT_RETRIES} attempts")


class NodeMetricStatusWriter:
    """``UpdateStatus`` of this node's NodeMetric. koord-manager creates the object; if it is absent we wait."""

    def __init__(self, api: KubeApi, watcher: ObjectWatcher, name: str) -> None:
        self._api = api
        self._watcher = watcher
        self._name = name
        self._limiter = RateLimiter(STATUS_QPS, STATUS_BURST)
        self._absent_logged = False

    def write(self, status: dict[str, Any], stop: threading.Event) -> str:
        """Replace the status; returns "updated", "absent" (no NodeMetric yet) or "stopped"."""
        if self._watcher.object is None:
            if not self._absent_logged:
                log.info("NodeMetric %s not found; status is reported once koord-manager creates it", self._name)
                self._absent_logged = True
            return "absent"
        self._absent_logged = False
        delay = self._limiter.reserve()
        if delay > 0 and stop.wait(delay):
            return "stopped"
        path = NODE_METRICS.item(self._name, "status")

        def attempt(obj: dict[str, Any] | None) -> str:
            if obj is None:
                return "absent"
            self._api.replace(path, {**obj, "status": status})
            return "updated"

        try:
            return _retry_on_conflict(attempt, self._watcher.object, self._fetch, f"nodemetrics/{self._name}")
        except ApiError as e:
            if e.not_found:
                return "absent"
            raise

    def _fetch(self) -> dict[str, Any] | None:
        try:
            return self._api.get(NODE_METRICS.item(self._name))
        except ApiError as e:
            if e.not_found:
                return None
            raise


class ObjectWriter:
    """Create or update one named cluster-scoped object (NodeResourceTopology, Device) that this agent co-owns.

    ``write`` takes two functions: ``create()`` builds the object when there is none, ``update(live)`` returns
    the live object with our part applied, or None when our part is already there (no request is sent).
    """

    def __init__(self, api: KubeApi, watcher: ObjectWatcher, resource: Resource) -> None:
        self._api = api
        self._watcher = watcher
        self._resource = resource
        self._written: dict[str, Any] | None = None   # our last write, until the watcher has caught up with it
        self._written_from: str | None = None          # resourceVersion that write replaced

    def write(self, name: str, create: Callable[[], dict[str, Any]],
              update: Callable[[dict[str, Any]], dict[str, Any] | None]) -> str:
        """Returns "created", "updated" or "unchanged"."""
        def attempt(obj: dict[str, Any] | None) -> str:
            if obj is None:
                self._remember(None, self._api.create(self._resource, create()))
                return "created"
            changed = update(obj)
            if changed is None:
                return "unchanged"
            self._remember(obj, self._api.replace(self._resource.item(name), changed))
            return "updated"

        return _retry_on_conflict(attempt, self._current(), lambda: self._fetch(name),
                                  f"{self._resource.plural}/{name}")

    def _current(self) -> dict[str, Any] | None:
        seen = self._watcher.object
        if self._written is not None:
            seen_version = (seen or {}).get("metadata", {}).get("resourceVersion")
            if seen_version == self._written_from:      # the watch has not delivered our write yet
                return self._written
            self._written = None
        return seen

    def _remember(self, base: dict[str, Any] | None, written: dict[str, Any]) -> None:
        self._written = written
        self._written_from = (base or {}).get("metadata", {}).get("resourceVersion")

    def _fetch(self, name: str) -> dict[str, Any] | None:
        try:
            return self._api.get(self._resource.item(name))
        except ApiError as e:
            if e.not_found:
                return None
            raise
