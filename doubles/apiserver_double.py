"""A real HTTP kube-apiserver test double: Kubernetes API conventions over an in-memory store.

It is a fake of the peer, not a mock of the agent: the official ``kubernetes`` client (or our own
raw HTTP client) talks to it over a real socket, and it answers the way kube-apiserver does, so a
client bug that the real server would reject -- a stale resourceVersion, a status written through
the main resource, a strategic-merge patch to a custom resource, a watch resumed from a compacted
revision -- fails the test instead of passing silently.

What it models:

* **Resources** registered with :meth:`ApiServerDouble.resource` (nodes, pods, configmaps and
  events are built in), namespaced or cluster-scoped, served under ``/api/v1`` or
  ``/apis/<group>/<version>``: GET, LIST (field and label selectors, ``limit``/``continue``),
  POST, PUT, PATCH (merge, JSON and -- built-ins only -- strategic merge), DELETE, the ``status``
  subresource and the pods ``eviction`` and ``binding`` subresources. :meth:`ApiServerDouble.serve_koordinator_crds`
  installs the custom resources a Koordinator scheduler watches.
* **Optimistic concurrency** like etcd: one global, monotonically increasing resourceVersion; a
  write carrying a stale one is a 409 ``Conflict``; an update that changes nothing is not a write.
* **Watch** streams with bookmarks, timeouts and a bounded event history; resuming from a
  revision older than the history is answered with an ``ERROR`` event holding a 410 ``Expired``.
* **Outages**: 503 for everything (:meth:`~ApiServerDouble.outage`), a real stop and restart on
  the same port (:meth:`~ApiServerDouble.stop` / :meth:`~ApiServerDouble.start`), and one-off
  injected failures (:meth:`~ApiServerDouble.fail_next`).

Deliberate simplifications, each one a place where the real server is stricter or richer: no
authentication, admission or defaulting; LIST pages are cut from the current state, not from a
snapshot at the first page's revision; pods are deleted at once (there is no kubelet to finish a
graceful deletion); strategic merge knows only the merge keys in ``_MERGE_KEYS``; server-side
apply is refused with 415.

Objects live in ``objects`` keyed by ``(collection path, name)``, e.g.
``("/api/v1/namespaces/default/pods", "web-0")``. Tests seed and change state behind the API with
:meth:`~ApiServerDouble.put` / :meth:`~ApiServerDouble.remove` (as another client would; watchers
see it) and override any endpoint with :meth:`~ApiServerDouble.route`.
"""

from __future__ import annotations

import base64
import binascii
import collections
import copy
import dataclasses
import json
import re
import secrets
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from doubles.connections import GoBacklog, shutdown_all

Handler = Callable[["Request"], tuple[int, dict[str, Any]]]
Validator = Callable[[dict[str, Any]], list[str]]

# How often an idle watch stream wakes to notice a client that hung up.
_WATCH_TICK_S = 0.1

# The reason the real server puts in a Status for each code, used for injected failures.
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

# patchMergeKey of the list fields a node agent strategic-merge-patches on built-in objects
# (node/pod conditions, node addresses, containers, ...). Other lists are replaced, which is
# what the real server does for lists without a patch strategy.
_MERGE_KEYS = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ownerReferences": "uid",
}

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what apimachinery's generateName draws from


@dataclasses.dataclass(frozen=True)
class Request:
    """One request as the double saw it; header names are lower-cased."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    match: re.Match[str] | None = None


@dataclasses.dataclass(frozen=True)
class Resource:
    """One served resource type, as a CRD (or a built-in's registration) describes it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    custom: bool = True
    selectable_fields: frozenset[str] = frozenset()
    return_deleted_object: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def qualified(self) -> str:
        """``plural.group``: how the real server names the resource in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def collection(self, namespace: str | None = None) -> str:
        """The collection path; ``namespace=None`` on a namespaced resource means all namespaces."""
        if self.namespaced and namespace is not None:
            return f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.prefix}/{self.plural}"

    def path_pattern(self) -> re.Pattern[str]:
        namespace = r"(?:namespaces/(?P<namespace>[^/]+)/)?" if self.namespaced else ""
        return re.compile(
            rf"{re.escape(self.prefix)}/{namespace}{re.escape(self.plural)}"
            r"(?:/(?P<name>[^/]+)(?:/(?P<subresource>[^/]+))?)?"
        )


_BUILTINS = (
    Resource(
        "", "v1", "pods", "Pod", status_subresource=True, custom=False, return_deleted_object=True,
        selectable_fields=frozenset({
            "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
            "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
        }),
    ),
    Resource(
        "", "v1", "nodes", "Node", namespaced=False, status_subresource=True, custom=False,
        selectable_fields=frozenset({"spec.unschedulable"}),
    ),
    Resource("", "v1", "configmaps", "ConfigMap", custom=False),
    Resource(
        "", "v1", "events", "Event", custom=False,
        selectable_fields=frozenset({
            "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
            "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
            "involvedObject.fieldPath", "reason", "reportingComponent", "type",
        }),
    ),
)


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``meta/v1 Status`` failure, the body the real API server sends on errors.

    An empty ``reason`` is the real server's ``StatusReasonUnknown`` and is left out, as it is
    on the wire.
    """
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "details": details or {},
        "code": code,
    }
    if reason:
        status["reason"] = reason
    return status


def write_kubeconfig(path: str | Path, server: str) -> str:
    """Write a plain-HTTP, no-auth kubeconfig for ``server``; returns its path."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "double", "user": {}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "double"}}],
        "current-context": "double",
    }
    Path(path).write_text(yaml.safe_dump(kubeconfig))
    return str(path)


@dataclasses.dataclass(frozen=True)
class _Reply:
    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _WatchReply:
    """A 200 whose body is streamed: each item is an event to send, ``None`` an idle tick."""

    events: Generator[dict[str, Any] | None, None, None]


@dataclasses.dataclass(frozen=True)
class _Event:
    """One committed change, kept in the history watches replay from."""

    rv: int
    type: str
    resource: Resource | None
    namespace: str | None
    obj: dict[str, Any]
    prev: dict[str, Any] | None


@dataclasses.dataclass(eq=False)
class _Watcher:
    """One open watch stream's mailbox; commits push to it under the double's lock."""

    resource: Resource
    events: collections.deque[_Event] = dataclasses.field(default_factory=collections.deque)
    bookmark_requested: bool = False
    closed: bool = False


@dataclasses.dataclass
class _Failure:
    method: str
    path: re.Pattern[str]
    status: int
    remaining: int


class _ApiError(Exception):
    """Raised inside a verb to answer with a Status; carries the reply."""

    def __init__(self, reply: _Reply) -> None:
        super().__init__(reply.body.get("message"))
        self.reply = reply


def _error(
    code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> _ApiError:
    reason = _REASONS.get(code, "") if reason is None else reason
    return _ApiError(_Reply(code, status_object(code, reason, message, details)))


def _details(resource: Resource, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource.plural, **extra}
    if resource.group:
        details["group"] = resource.group
    return details


def _not_found(resource: Resource, name: str) -> _ApiError:
    return _error(404, f'{resource.qualified} "{name}" not found', details=_details(resource, name))


def _conflict(resource: Resource, name: str, why: str) -> _ApiError:
    return _error(
        409, f'Operation cannot be fulfilled on {resource.qualified} "{name}": {why}',
        details=_details(resource, name),
    )


def _invalid(resource: Resource, name: str, causes: list[tuple[str, str | None, str]]) -> _ApiError:
    """422 Invalid the way field validation reports it; causes are (reason, field, message)."""
    texts = [f"{field}: {message}" if field else message for _, field, message in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = {
        "name": name,
        **({"group": resource.group} if resource.group else {}),
        "kind": resource.kind,
        "causes": [
            {"reason": reason, "message": message, **({"field": field} if field else {})}
            for reason, field, message in causes
        ],
    }
    return _error(422, f'{resource.qualified_kind} "{name}" is invalid: {summary}', details=details)


class ApiServerDouble:
    """kube-apiserver stand-in; use as a context manager (it starts and stops the server).

    ``validate`` is run on every create, update and status update of a custom resource, like a
    CRD's OpenAPI schema; the messages it returns make the request a 422 ``Invalid``.
    ``bookmark_interval`` is how often a watch that allows bookmarks gets one;
    ``watch_timeout`` ends a watch whose client set no ``timeoutSeconds`` (the real server
    picks a random 30-60 min); ``history`` is how many events watches can resume from.
    """

    def __init__(
        self,
        validate: Validator | None = None,
        *,
        bookmark_interval: float = 60.0,
        watch_timeout: float = 1800.0,
        history: int = 1000,
    ) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[Request] = []
        self._validate = validate
        self._bookmark_interval = bookmark_interval
        self._watch_timeout = watch_timeout
        self._cond = threading.Condition()
        self._resource_version = 0
        self._history: collections.deque[_Event] = collections.deque(maxlen=history)
        self._oldest_resumable = 0  # a watch may resume from this revision or a later one
        self._watchers: set[_Watcher] = set()
        self._outage = False
        self._failures: list[_Failure] = []
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._resources: dict[tuple[str, str, str], tuple[Resource, re.Pattern[str]]] = {}
        for builtin in _BUILTINS:
            self._register(builtin)
        self._server: _Server | None = _Server(self, 0)
        self._port: int = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def __enter__(self) -> ApiServerDouble:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ApiServerDouble:
        """Serve (again) on the same port; the store and history are kept across a stop."""
        if self._thread is not None:
            return self
        if self._server is None:
            self._server = _Server(self, self._port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"apiserver-double-{self._port}", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a crashed apiserver would: the port refuses connections, open ones drop.

        Every handler thread has finished when this returns, watch streams included.
        """
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        if thread is not None:
            server.shutdown()
            thread.join()
        server.drop_connections()
        self._close_watches()
        server.server_close()

    # --- configuration -------------------------------------------------------------------

    def resource(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        *,
        namespaced: bool = True,
        status_subresource: bool = False,
        selectable_fields: Iterable[str] = (),
        custom: bool = True,
    ) -> Resource:
        """Serve a resource type, as installing its CRD would; returns its description.

        ``custom=False`` gives built-in semantics (strategic merge allowed, unconditional
        updates allowed, no ``validate`` hook, list items without kind/apiVersion).
        """
        return self._register(Resource(
            group, version, plural, kind, namespaced=namespaced,
            status_subresource=status_subresource, custom=custom,
            selectable_fields=frozenset(selectable_fields),
        ))

    def serve_koordinator_crds(self) -> tuple[Resource, Resource, Resource]:
        """Serve the node reports a Koordinator scheduler watches, as their CRDs in deploy/crds declare them:
        Device (``scheduling.koordinator.sh/v1alpha1``), NodeMetric (``slo.koordinator.sh/v1alpha1``, status
        subresource) and NodeResourceTopology (``topology.node.k8s.io/v1alpha1``), all cluster-scoped; in that
        order."""
        return (
            self.resource("scheduling.koordinator.sh", "v1alpha1", "devices", "Device", namespaced=False),
            self.resource("slo.koordinator.sh", "v1alpha1", "nodemetrics", "NodeMetric", namespaced=False,
                          status_subresource=True),
            self.resource("topology.node.k8s.io", "v1alpha1", "noderesourcetopologies", "NodeResourceTopology",
                          namespaced=False),
        )

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        """Register ``handler`` for ``method`` on paths fully matching ``pattern``.

        Takes precedence over earlier routes and over the served resources.
        """
        with self._cond:
            self._routes.insert(0, (method, re.compile(pattern), handler))

    def outage(self, down: bool) -> None:
        """While down, every request is a 503 ``ServiceUnavailable`` and open watches end."""
        with self._cond:
            self._outage = down
        if down:
            self._close_watches()

    def fail_next(self, method: str, path_regex: str, status: int, count: int = 1) -> None:
        """Answer the next ``count`` matching requests with a ``status`` Status instead.

        A 429 carries ``Retry-After: 1`` as the real server's priority-and-fairness does.
        """
        with self._cond:
            self._failures.append(_Failure(method, re.compile(path_regex), status, count))

    # --- state behind the API ------------------------------------------------------------

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a copy of ``obj`` under ``collection`` as another client's write would.

        No API checks; bumps the resourceVersion, fills in the server-set metadata that is
        missing (uid, creationTimestamp, kind, ...) and tells watchers ADDED or MODIFIED.
        """
        stored = copy.deepcopy(obj)
        metadata = stored.setdefault("metadata", {})
        with self._cond:
            resource, namespace = self._resource_of(collection)
            previous = self.objects.get((collection, metadata["name"]))
            if previous is not None:
                metadata.setdefault("uid", previous["metadata"].get("uid"))
                metadata.setdefault("creationTimestamp", previous["metadata"].get("creationTimestamp"))
            _set_server_fields(stored, resource, namespace)
            return self._commit(collection, stored, resource, namespace)

    def add_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Store a pod in its namespace's collection."""
        namespace = pod["metadata"].get("namespace", "default")
        return self.put(f"/api/v1/namespaces/{namespace}/pods", pod)

    def remove(self, collection: str, name: str) -> dict[str, Any]:
        """Delete an object behind the API (watchers see DELETED); returns its last state."""
        with self._cond:
            resource, namespace = self._resource_of(collection)
            return self._commit(collection, None, resource, namespace, name=name)

    def compact(self) -> None:
        """Forget the event history up to now, as etcd compaction does.

        A watch resuming from an earlier resourceVersion then gets 410 Expired; open watches
        are not affected.
        """
        with self._cond:
            self._history.clear()
            self._oldest_resumable = self._resource_version

    def bookmark(self) -> None:
        """Send a BOOKMARK with the current resourceVersion to every watch that allows them."""
        with self._cond:
            for watcher in self._watchers:
                watcher.bookmark_requested = True
            self._cond.notify_all()

    def write_kubeconfig(self, path: str | Path) -> str:
        """Write a no-auth kubeconfig pointing at this double; returns its path."""
        return write_kubeconfig(path, self.url)

    def _close_watches(self) -> None:
        with self._cond:
            for watcher in self._watchers:
                watcher.closed = True
            self._cond.notify_all()

    # --- request handling ----------------------------------------------------------------

    def _register(self, resource: Resource) -> Resource:
        with self._cond:
            key = (resource.group, resource.version, resource.plural)
            self._resources[key] = (resource, resource.path_pattern())
        return resource

    def _resource_of(self, collection: str) -> tuple[Resource | None, str | None]:
        for resource, pattern in self._resources.values():
            match = pattern.fullmatch(collection)
            if match and match["name"] is None:
                return resource, match.groupdict().get("namespace")
        return None, None

    def _dispatch(self, request: Request) -> _Reply | _WatchReply:
        with self._cond:
            self.requests.append(request)
            if self._outage:
                return _error(503, "the server is currently unable to handle the request").reply
            injected = self._take_failure(request)
            routes = list(self._routes)
            resources = list(self._resources.values())
        if injected is not None:
            return injected
        for method, pattern, handler in routes:
            match = pattern.fullmatch(request.path)
            if method == request.method and match is not None:
                return _Reply(*handler(dataclasses.replace(request, match=match)))
        for resource, pattern in resources:
            match = pattern.fullmatch(request.path)
            if match is not None:
                try:
                    return self._serve(resource, match, request)
                except _ApiError as exc:
                    return exc.reply
        return _error(404, "the server could not find the requested resource").reply

    def _take_failure(self, request: Request) -> _Reply | None:
        for failure in self._failures:
            if failure.method == request.method and failure.path.fullmatch(request.path):
                failure.remaining -= 1
                if failure.remaining == 0:
                    self._failures.remove(failure)
                status = failure.status
                details: dict[str, Any] = {}
                headers: dict[str, str] = {}
                if status == 429:
                    details["retryAfterSeconds"] = 1
                    headers["Retry-After"] = "1"
                body = status_object(status, _REASONS.get(status, ""), "injected failure", details)
                return _Reply(status, body, headers)
        return None

    def _serve(self, resource: Resource, match: re.Match[str], request: Request) -> _Reply | _WatchReply:
        namespace = match.groupdict().get("namespace")
        name, subresource = match["name"], match["subresource"]
        method = request.method
        if resource.namespaced and name is not None and namespace is None:
            raise _error(404, "the server could not find the requested resource")
        collection = resource.collection(namespace)
        if name is None:
            if method == "GET":
                if _flag(request.query, "watch"):
                    return self._watch(resource, namespace, request.query)
                return self._list(resource, namespace, request.query)
            if method == "POST" and (namespace is not None or not resource.namespaced):
                return self._create(resource, collection, namespace, _json_body(request))
        elif subresource is None:
            if method == "GET":
                return _Reply(200, self._get(resource, collection, name))
            if method in ("PUT", "PATCH"):
                return self._update(resource, collection, namespace, name, request, status=False)
            if method == "DELETE":
                options = _json_body(request) if request.body else {}
                return self._delete(resource, collection, namespace, name, options)
        elif subresource == "status" and resource.status_subresource:
            if method == "GET":
                return _Reply(200, self._get(resource, collection, name))
            if method in ("PUT", "PATCH"):
                return self._update(resource, collection, namespace, name, request, status=True)
        elif subresource == "eviction" and (resource.group, resource.plural) == ("", "pods"):
            if method == "POST":
                return self._evict(resource, collection, namespace, name, _json_body(request))
        elif subresource == "binding" and (resource.group, resource.plural) == ("", "pods"):
            if method == "POST":
                return self._bind(resource, collection, namespace, name, _json_body(request))
        else:
            raise _error(404, "the server could not find the requested resource")
        raise _error(405, "the server does not allow this method on the requested resource")

    def _get(self, resource: Resource, collection: str, name: str) -> dict[str, Any]:
        with self._cond:
            stored = self.objects.get((collection, name))
            if stored is None:
                raise _not_found(resource, name)
            return copy.deepcopy(stored)

    def _list(self, resource: Resource, namespace: str | None, query: dict[str, list[str]]) -> _Reply:
        visible = _selector(resource, namespace, query)
        limit = _int_param(query, "limit")
        start = ""
        with self._cond:
            token = _param(query, "continue")
            if token:
                token_rv, start = _decode_continue(token)
                if token_rv < self._oldest_resumable:
                    raise _error(410, "The provided continue parameter is too old to display a "
                                      "consistent list result. You can start a new list without "
                                      "the continue parameter.")
            items = sorted(
                ((_object_key(obj), copy.deepcopy(obj)) for obj in self._objects_of(resource) if visible(obj)),
                key=lambda item: item[0],
            )
            resource_version = self._resource_version
        items = [(key, obj) for key, obj in items if key > start]
        metadata: dict[str, Any] = {"resourceVersion": str(resource_version)}
        if limit and len(items) > limit:
            metadata["continue"] = _encode_continue(resource_version, items[limit - 1][0])
            if not (_param(query, "fieldSelector") or _param(query, "labelSelector")):
                metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        objs = [obj for _, obj in items]
        if not resource.custom:
            # Typed lists carry kind/apiVersion only on the list itself.
            for obj in objs:
                obj.pop("kind", None)
                obj.pop("apiVersion", None)
        return _Reply(200, {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": objs,
        })

    def _objects_of(self, resource: Resource) -> Iterator[dict[str, Any]]:
        for (collection, _), obj in self.objects.items():
            if self._resource_of(collection)[0] is resource:
                yield obj

    def _create(
        self, resource: Resource, collection: str, namespace: str | None, body: dict[str, Any]
    ) -> _Reply:
        _check_type(resource, body)
        metadata = body.setdefault("metadata", {})
        _check_namespace(resource, namespace, metadata)
        if not metadata.get("name") and metadata.get("generateName"):
            suffix = "".join(secrets.choice(_NAME_SUFFIX_CHARS) for _ in range(5))
            metadata["name"] = metadata["generateName"] + suffix
        name = metadata.get("name") or ""
        _check_name(resource, name)
        if metadata.get("resourceVersion"):
            # Not a typed API error in the real server either: a bare 500.
            raise _error(500, "resourceVersion should not be set on objects to be created", reason="")
        for server_set in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            metadata.pop(server_set, None)
        if resource.custom and resource.status_subresource:
            body.pop("status", None)  # status is only written through /status
        _set_server_fields(body, resource, namespace)
        if resource.custom:
            metadata["generation"] = 1
        with self._cond:
            self._run_validation(resource, body)  # validation comes before the storage write
            if (collection, name) in self.objects:
                raise _error(
                    409, f'{resource.qualified} "{name}" already exists', reason="AlreadyExists",
                    details=_details(resource, name),
                )
            return _Reply(201, self._commit(collection, body, resource, namespace))

    def _update(
        self,
        resource: Resource,
        collection: str,
        namespace: str | None,
        name: str,
        request: Request,
        *,
        status: bool,
    ) -> _Reply:
        """PUT or PATCH of the object or of its status, with the real server's preconditions."""
        body = _json_body(request, allow_list=request.method == "PATCH")
        with self._cond:
            current = self.objects.get((collection, name))
            if current is None:
                raise _not_found(resource, name)
            if request.method == "PATCH":
                wanted = _apply_patch(resource, current, body, request.headers.get("content-type", ""))
            else:
                assert isinstance(body, dict)
                wanted = body
            _check_type(resource, wanted)
            metadata = wanted.setdefault("metadata", {})
            if metadata.get("name", name) != name:
                raise _error(400, f"the name of the object ({metadata['name']}) does not match "
                                  f"the name on the URL ({name})")
            _check_namespace(resource, namespace, metadata)
            current_meta = current["metadata"]
            sent_rv = metadata.get("resourceVersion")
            if sent_rv and sent_rv != current_meta["resourceVersion"]:
                raise _conflict(resource, name, "the object has been modified; please apply your "
                                                "changes to the latest version and try again")
            if not sent_rv and resource.custom:
                # Custom resources forbid unconditional updates (AllowUnconditionalUpdate false).
                raise _invalid(resource, name, [(
                    "FieldValueInvalid", "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                )])
            if metadata.get("uid") and metadata["uid"] != current_meta.get("uid"):
                raise _conflict(resource, name, f"Precondition failed: UID in precondition: "
                                                f"{metadata['uid']}, UID in object meta: "
                                                f"{current_meta.get('uid')}")
            updated = _merge_write(resource, current, wanted, status=status)
            if updated == current:
                return _Reply(200, copy.deepcopy(current))  # a no-op is not a write: RV stays
            self._run_validation(resource, updated)
            return _Reply(200, self._commit(collection, updated, resource, namespace))

    def _delete(
        self,
        resource: Resource,
        collection: str,
        namespace: str | None,
        name: str,
        options: dict[str, Any],
    ) -> _Reply:
        with self._cond:
            current = self.objects.get((collection, name))
            if current is None:
                raise _not_found(resource, name)
            preconditions = options.get("preconditions") or {}
            for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                wanted, actual = preconditions.get(field), current["metadata"].get(field)
                if wanted is not None and wanted != actual:
                    raise _conflict(resource, name, f"Precondition failed: {label} in precondition: "
                                                    f"{wanted}, {label} in object meta: {actual}")
            deleted = self._commit(collection, None, resource, namespace, name=name)
        if resource.return_deleted_object:
            return _Reply(200, deleted)
        return _Reply(200, {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": _details(resource, name, uid=deleted["metadata"].get("uid")),
        })

    def _evict(
        self,
        resource: Resource,
        collection: str,
        namespace: str | None,
        name: str,
        eviction: dict[str, Any],
    ) -> _Reply:
        """POST pods/{name}/eviction: no PDBs here, so an eviction deletes the pod at once."""
        if eviction.get("metadata", {}).get("name", name) != name:
            raise _error(400, "name in URL does not match name in Eviction object")
        self._delete(resource, collection, namespace, name, eviction.get("deleteOptions") or {})
        return _Reply(201, {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201,
        })

    def _bind(
        self,
        resource: Resource,
        collection: str,
        namespace: str | None,
        name: str,
        binding: dict[str, Any],
    ) -> _Reply:
        """POST pods/{name}/binding as BindingREST does it: one storage update sets ``spec.nodeName``, merges the
        Binding's ``metadata.annotations`` onto the pod and sets ``PodScheduled`` True, so a watcher sees all three
        in one MODIFIED event (what lets a scheduler write allocation annotations atomically with the binding).

        The Binding's uid and resourceVersion are preconditions on the pod (409 on pods, like an update's); a pod
        that is being deleted, already assigned or still gated is a 409 on pods/binding with upstream's text.
        """
        if binding.get("kind", "Binding") != "Binding" or binding.get("apiVersion", "v1") != "v1":
            raise _error(400, f"the object provided is {binding.get('apiVersion')}, Kind={binding.get('kind')}; "
                              "this endpoint serves v1, Kind=Binding")
        metadata = binding.get("metadata") or {}
        if metadata.get("name", name) != name:
            raise _error(400, "name in URL does not match name in Binding object")
        _check_namespace(resource, namespace, dict(metadata))
        target = binding.get("target") or {}
        invalid = []
        if target.get("kind") not in (None, "", "Node"):
            invalid.append(f'target.kind: Unsupported value: "{target["kind"]}": supported values: "Node", "<empty>"')
        if not target.get("name"):
            invalid.append("target.name: Required value")
        if invalid:
            # ValidatePodBinding's errors reach the client as a plain (non-API) error: a 500 without a reason.
            raise _error(500, invalid[0] if len(invalid) == 1 else "[" + ", ".join(invalid) + "]", reason="")
        binding_conflict = {"name": name, "kind": "pods/binding"}
        with self._cond:
            current = self.objects.get((collection, name))
            if current is None:
                raise _not_found(resource, name)
            current_meta = current["metadata"]
            for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                wanted, actual = metadata.get(field), current_meta.get(field)
                if wanted and wanted != actual:
                    raise _conflict(resource, name, f"Precondition failed: {label} in precondition: {wanted}, "
                                                    f"{label} in object meta: {actual}")
            spec = current.get("spec") or {}
            why = None
            if current_meta.get("deletionTimestamp"):
                why = f"pod {name} is being deleted, cannot be assigned to a host"
            elif spec.get("nodeName"):
                why = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
            elif spec.get("schedulingGates"):
                why = f"pod {name} has non-empty .spec.schedulingGates"
            if why is not None:
                raise _error(409, f'Operation cannot be fulfilled on pods/binding "{name}": {why}',
                             details=binding_conflict)
            updated = copy.deepcopy(current)
            updated.setdefault("spec", {})["nodeName"] = target["name"]
            if metadata.get("annotations"):
                updated["metadata"].setdefault("annotations", {}).update(metadata["annotations"])
            _set_pod_condition(updated.setdefault("status", {}), "PodScheduled", "True")
            self._commit(collection, updated, resource, namespace)
        return _Reply(201, {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201,
        })

    def _run_validation(self, resource: Resource, obj: dict[str, Any]) -> None:
        if self._validate is None or not resource.custom:
            return
        errors = self._validate(copy.deepcopy(obj))
        if errors:
            name = obj["metadata"]["name"]
            raise _invalid(resource, name, [("FieldValueInvalid", None, e) for e in errors])

    def _commit(
        self,
        collection: str,
        obj: dict[str, Any] | None,
        resource: Resource | None,
        namespace: str | None,
        *,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Write (or, with ``obj=None``, delete) under the lock; records the watch event.

        Returns a copy of the stored object; a deleted object carries the deletion's
        resourceVersion, as in the real DELETED event.
        """
        key = (collection, name if obj is None else obj["metadata"]["name"])
        prev = self.objects.get(key)
        if obj is None and prev is None:
            raise KeyError(key)
        self._resource_version += 1
        rv = self._resource_version
        if obj is None:
            assert prev is not None
            stored = copy.deepcopy(prev)
            del self.objects[key]
            event_type = "DELETED"
        else:
            stored = obj
            self.objects[key] = stored
            event_type = "ADDED" if prev is None else "MODIFIED"
        stored["metadata"]["resourceVersion"] = str(rv)
        if len(self._history) == self._history.maxlen:
            self._oldest_resumable = self._history[0].rv
        event = _Event(rv, event_type, resource, namespace, copy.deepcopy(stored), prev)
        self._history.append(event)
        for watcher in self._watchers:
            if watcher.resource is resource:
                watcher.events.append(event)
        self._cond.notify_all()
        return copy.deepcopy(stored)

    # --- watch -----------------------------------------------------------------------------

    def _watch(self, resource: Resource, namespace: str | None, query: dict[str, list[str]]) -> _WatchReply:
        visible = _selector(resource, namespace, query)
        since = _int_param(query, "resourceVersion") or 0
        timeout = _int_param(query, "timeoutSeconds") or self._watch_timeout
        bookmarks = _flag(query, "allowWatchBookmarks")
        return _WatchReply(self._stream(resource, namespace, visible, since, timeout, bookmarks))

    def _stream(
        self,
        resource: Resource,
        namespace: str | None,
        visible: Callable[[dict[str, Any]], bool],
        since: int,
        timeout: float,
        bookmarks: bool,
    ) -> Generator[dict[str, Any] | None, None, None]:
        """The events of one watch; ``since=0`` starts with the current state as ADDED.

        Resuming (``since`` > 0) replays the history after ``since``, or, when that part of
        the history is gone, sends the ERROR event the real server sends and ends.
        """
        deadline = time.monotonic() + timeout
        watcher = _Watcher(resource)
        initial: list[dict[str, Any]] = []
        with self._cond:
            oldest = self._oldest_resumable
            expired = 0 < since < oldest
            if since and not expired:
                watcher.events.extend(e for e in self._history if e.rv > since and e.resource is resource)
            elif not since:
                initial = [
                    {"type": "ADDED", "object": copy.deepcopy(obj)}
                    for obj in self._objects_of(resource) if visible(obj)
                ]
            if not expired:
                self._watchers.add(watcher)
        if expired:
            message = f"too old resource version: {since} ({oldest})"
            yield {"type": "ERROR", "object": status_object(410, "Expired", message)}
            return
        try:
            yield from initial
            next_bookmark = time.monotonic() + self._bookmark_interval
            while True:
                with self._cond:
                    if not (watcher.events or watcher.closed or watcher.bookmark_requested):
                        wake = min(deadline, next_bookmark) if bookmarks else deadline
                        self._cond.wait(max(0.0, min(_WATCH_TICK_S, wake - time.monotonic())))
                    now = time.monotonic()
                    if watcher.closed or now >= deadline:
                        return
                    pending = list(watcher.events)
                    watcher.events.clear()
                    send_bookmark = bookmarks and (watcher.bookmark_requested or now >= next_bookmark)
                    watcher.bookmark_requested = False
                    current = self._resource_version  # every event up to here is in pending
                out = [e for e in (_as_seen(event, namespace, visible) for event in pending) if e]
                if send_bookmark:
                    next_bookmark = now + self._bookmark_interval
                    out.append({"type": "BOOKMARK", "object": {
                        "kind": resource.kind, "apiVersion": resource.api_version,
                        "metadata": {"resourceVersion": str(current)},
                    }})
                if not out:
                    yield None
                yield from out
        finally:
            with self._cond:
                self._watchers.discard(watcher)


def _as_seen(
    event: _Event, namespace: str | None, visible: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """The event as a watch with this scope and selector sees it, or None.

    An object moving into or out of the selector is ADDED or DELETED for that watch, as the
    real watch cache reports it.
    """
    if namespace is not None and event.namespace != namespace:
        return None
    now = event.type != "DELETED" and visible(event.obj)
    before = event.prev is not None and visible(event.prev)
    if now:
        kind = "MODIFIED" if before else "ADDED"
    elif before:
        kind = "DELETED"
    else:
        return None
    return {"type": kind, "object": copy.deepcopy(event.obj)}


# --- object helpers --------------------------------------------------------------------------


def _set_server_fields(obj: dict[str, Any], resource: Resource | None, namespace: str | None) -> None:
    """Fill what the server owns and a client never has to send: uid, timestamps, type."""
    metadata = obj.setdefault("metadata", {})
    metadata.setdefault("uid", str(uuid.uuid4()))
    metadata.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    if namespace is not None:
        metadata["namespace"] = namespace
    if resource is not None:
        obj["kind"] = resource.kind
        obj["apiVersion"] = resource.api_version


def _set_pod_condition(status: dict[str, Any], kind: str, value: str) -> None:
    """podutil.UpdatePodCondition: the condition replaces any of its type; lastTransitionTime moves only when the
    status changes (lastProbeTime is the zero time, null on the wire)."""
    conditions = status.setdefault("conditions", [])
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
    for i, old in enumerate(conditions):
        if old.get("type") == kind:
            if old.get("status") == value:
                condition["lastTransitionTime"] = old.get("lastTransitionTime")
            conditions[i] = condition
            return
    conditions.append(condition)


def _merge_write(
    resource: Resource, current: dict[str, Any], wanted: dict[str, Any], *, status: bool
) -> dict[str, Any]:
    """The object an update stores: status writes change only status, others all but status.

    Server-owned metadata is kept from ``current``; generation (custom resources) moves when
    anything but metadata (and status, with the subresource) does.
    """
    if status:
        updated = copy.deepcopy(current)
        if "status" in wanted:
            updated["status"] = copy.deepcopy(wanted["status"])
        else:
            updated.pop("status", None)
        return updated
    updated = copy.deepcopy(wanted)
    if resource.status_subresource:
        if "status" in current:
            updated["status"] = copy.deepcopy(current["status"])
        else:
            updated.pop("status", None)
    metadata = updated["metadata"]
    for owned in ("uid", "creationTimestamp", "resourceVersion", "namespace", "deletionTimestamp"):
        if owned in current["metadata"]:
            metadata[owned] = current["metadata"][owned]
        else:
            metadata.pop(owned, None)
    metadata["name"] = current["metadata"]["name"]
    updated["kind"], updated["apiVersion"] = resource.kind, resource.api_version
    metadata.pop("generation", None)
    if "generation" in current["metadata"]:
        changed = _spec_of(resource, updated) != _spec_of(resource, current)
        metadata["generation"] = current["metadata"]["generation"] + changed
    return updated


def _spec_of(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    ignored = {"metadata", "kind", "apiVersion"} | ({"status"} if resource.status_subresource else set())
    return {k: v for k, v in obj.items() if k not in ignored}


def _check_type(resource: Resource, body: dict[str, Any]) -> None:
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if (kind and kind != resource.kind) or (api_version and api_version != resource.api_version):
        raise _error(400, f"the object provided is {api_version}, Kind={kind}; this endpoint "
                          f"serves {resource.api_version}, Kind={resource.kind}")


def _check_namespace(resource: Resource, namespace: str | None, metadata: dict[str, Any]) -> None:
    if resource.namespaced and metadata.get("namespace", namespace) != namespace:
        raise _error(400, "the namespace of the provided object does not match the namespace "
                          "sent on the request")
    if not resource.namespaced:
        metadata.pop("namespace", None)


def _check_name(resource: Resource, name: str) -> None:
    if not name:
        raise _invalid(resource, name, [(
            "FieldValueRequired", "metadata.name", "Required value: name or generateName is required",
        )])
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise _invalid(resource, name, [(
            "FieldValueInvalid", "metadata.name",
            (f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
             "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
             "character"),
        )])


def _object_key(obj: dict[str, Any]) -> str:
    """The order LIST returns objects in: etcd's key order, namespace then name."""
    metadata = obj["metadata"]
    return f"{metadata.get('namespace', '')}/{metadata['name']}"


def _encode_continue(rv: int, after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": after}).encode()).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(decoded["rv"]), str(decoded["start"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise _error(400, f"invalid continue token: {token}") from None


# --- request parsing ---------------------------------------------------------------------------


def _param(query: dict[str, list[str]], name: str) -> str:
    return query.get(name, [""])[0]


def _int_param(query: dict[str, list[str]], name: str) -> int:
    """A non-negative integer parameter; 0 when absent."""
    value = _param(query, name)
    if value and not value.isdigit():
        raise _error(400, f"invalid {name}: {value!r}")
    return int(value or 0)


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return _param(query, name).lower() in ("true", "1")


def _json_body(request: Request, *, allow_list: bool = False) -> Any:
    try:
        body = json.loads(request.body or b"null")
    except ValueError as exc:
        raise _error(400, f"the body of the request could not be decoded: {exc}") from None
    if not isinstance(body, dict) and not (allow_list and isinstance(body, list)):
        raise _error(400, "the body of the request must be a JSON object")
    return body


# --- selectors ---------------------------------------------------------------------------------

_FieldTerm = tuple[str, bool, str]  # (dotted field, must equal?, value)
_LabelTerm = tuple[str, str, frozenset[str]]  # (key, "in" | "notin" | "exists" | "!", values)

_LABEL_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_LABEL_SET = re.compile(rf"({_LABEL_KEY})\s+(in|notin)\s+\(([^)]*)\)")
_LABEL_EQUALITY = re.compile(rf"({_LABEL_KEY})\s*(==|!=|=)\s*([-A-Za-z0-9_.]*)")
_LABEL_EXISTS = re.compile(rf"(!?)\s*({_LABEL_KEY})")


def _selector(
    resource: Resource, namespace: str | None, query: dict[str, list[str]]
) -> Callable[[dict[str, Any]], bool]:
    """The ``fieldSelector``/``labelSelector`` predicate (with the namespace scope) of a request."""
    fields = _parse_field_selector(_param(query, "fieldSelector"))
    supported = {"metadata.name", "metadata.namespace"} | resource.selectable_fields
    for field, _, _ in fields:
        if field not in supported:
            raise _error(400, f"field label not supported: {field}")
    labels = _parse_label_selector(_param(query, "labelSelector"))

    def visible(obj: dict[str, Any]) -> bool:
        metadata = obj.get("metadata", {})
        if namespace is not None and metadata.get("namespace") != namespace:
            return False
        return (all(_field_matches(obj, term) for term in fields)
                and all(_label_matches(metadata.get("labels") or {}, term) for term in labels))

    return visible


def _parse_field_selector(selector: str) -> list[_FieldTerm]:
    """Parse ``a.b=v,c!=w`` (also ``==``) the way the API server does."""
    terms: list[_FieldTerm] = []
    for term in filter(None, selector.split(",")):
        for op, equal in (("!=", False), ("==", True), ("=", True)):
            field, found, value = term.partition(op)
            if found:
                terms.append((field.strip(), equal, value.strip()))
                break
        else:
            raise _error(400, f"invalid field selector term {term!r}")
    return terms


def _field_matches(obj: dict[str, Any], term: _FieldTerm) -> bool:
    field, equal, value = term
    current: Any = obj
    for part in field.split("."):
        current = current.get(part) if isinstance(current, dict) else None
    # The API server compares string forms; a missing field is the empty string.
    if current is None:
        actual = ""
    elif isinstance(current, bool):
        actual = "true" if current else "false"
    else:
        actual = str(current)
    return (actual == value) == equal


def _parse_label_selector(selector: str) -> list[_LabelTerm]:
    """Equality (``=``, ``==``, ``!=``), set (``in``, ``notin``) and existence (``k``, ``!k``)."""
    terms: list[_LabelTerm] = []
    for term in (t.strip() for t in re.split(r",(?![^(]*\))", selector)):
        if not term:
            continue
        if match := _LABEL_SET.fullmatch(term):
            values = frozenset(v.strip() for v in match[3].split(",") if v.strip())
            terms.append((match[1], match[2], values))
        elif match := _LABEL_EQUALITY.fullmatch(term):
            terms.append((match[1], "notin" if match[2] == "!=" else "in", frozenset({match[3]})))
        elif match := _LABEL_EXISTS.fullmatch(term):
            terms.append((match[2], "!" if match[1] else "exists", frozenset()))
        else:
            raise _error(400, f"unable to parse requirement: {term!r}")
    return terms


def _label_matches(labels: dict[str, str], term: _LabelTerm) -> bool:
    key, op, values = term
    if op == "exists":
        return key in labels
    if op == "!":
        return key not in labels
    if op == "in":
        return key in labels and labels[key] in values
    return key not in labels or labels[key] not in values


# --- patches -----------------------------------------------------------------------------------


class _PatchError(Exception):
    """A JSON patch that does not apply; the real server answers 422."""


def _apply_patch(resource: Resource, current: dict[str, Any], patch: Any, content_type: str) -> dict[str, Any]:
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json-patch+json":
        if not isinstance(patch, list):
            raise _error(400, "json patch must be a list of operations")
        try:
            result = _json_patch(copy.deepcopy(current), patch)
        except _PatchError as exc:
            raise _error(422, str(exc)) from None
        if not isinstance(result, dict):
            raise _error(422, "json patch replaced the object with a non-object")
        return result
    if not isinstance(patch, dict):
        raise _error(400, "a merge patch must be a JSON object")
    if media == "application/merge-patch+json":
        return _merge(current, patch, {})
    if media == "application/strategic-merge-patch+json" and not resource.custom:
        return _merge(current, patch, _MERGE_KEYS)
    raise _error(415, f"the body of the request was in an unknown format ({media}) - accepted media "
                      "types include: application/json-patch+json, application/merge-patch+json"
                      + ("" if resource.custom else ", application/strategic-merge-patch+json"))


def _merge(target: Any, patch: Any, merge_keys: Mapping[str, str]) -> Any:
    """RFC 7386 merge patch; with ``merge_keys``, strategic merge of those keyed lists."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key in merge_keys and isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, merge_keys[key], merge_keys)
        else:
            result[key] = _merge(result.get(key), value, merge_keys)
    return result


def _merge_keyed_list(
    current: list[Any], patch: list[Any], key: str, merge_keys: Mapping[str, str]
) -> list[Any]:
    """Strategic merge of a list keyed by ``key``; ``{"$patch": "delete"}`` removes an item."""
    result = list(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise _error(400, f"strategic merge patch list item lacks merge key {key!r}")
        index = next((i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(copy.deepcopy(item))
        else:
            result[index] = _merge(result[index], item, merge_keys)
    return result


def _json_patch(doc: Any, operations: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    for operation in operations:
        try:
            op, path = operation["op"], _pointer(operation["path"])
            if op == "test":
                if _resolve(doc, path) != operation["value"]:
                    raise _PatchError(f"testing value {operation['path']} failed")
            elif op == "remove":
                doc = _remove(doc, path)
            elif op == "add":
                doc = _add(doc, path, copy.deepcopy(operation["value"]))
            elif op == "replace":
                doc = _add(_remove(doc, path), path, copy.deepcopy(operation["value"]))
            elif op in ("move", "copy"):
                source = _pointer(operation["from"])
                value = copy.deepcopy(_resolve(doc, source))
                if op == "move":
                    doc = _remove(doc, source)
                doc = _add(doc, path, value)
            else:
                raise _PatchError(f"unexpected json patch operation {op!r}")
        except (KeyError, TypeError) as exc:
            raise _PatchError(f"malformed json patch operation {operation!r}: {exc}") from None
    return doc


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchError(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _resolve(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(doc, dict) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            raise _PatchError(f"path element {token!r} not found")
    return doc


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent, last = _resolve(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list) and last == "-":
        parent.append(value)
    elif isinstance(parent, list) and last.isdigit() and int(last) <= len(parent):
        parent.insert(int(last), value)
    else:
        raise _PatchError(f"cannot add at path element {last!r}")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _PatchError("cannot remove the whole document")
    parent, last = _resolve(doc, tokens[:-1]), tokens[-1]
    _resolve(parent, [last])
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return doc


# --- HTTP plumbing -----------------------------------------------------------------------------


class _Server(GoBacklog, ThreadingHTTPServer):
    daemon_threads = True
    # server_close() joins handler threads; stop() has unblocked them all first.
    block_on_close = True

    def __init__(self, double: ApiServerDouble, port: int) -> None:
        self.double = double
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # as Go's net/http (kube-apiserver): no Nagle delay between a response's head and body writes
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Cut every open connection, keep-alive and watch streams included."""
        with self._connections_lock:
            connections = list(self._connections)
        shutdown_all(connections)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle each reply would wait for the
    # client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True
    server: _Server

    def _handle(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length", "0"))
        request = Request(
            method=self.command,
            path=url.path,
            query=parse_qs(url.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length) if length else b"",
        )
        try:
            reply = self.server.double._dispatch(request)
        except Exception as exc:  # a bug in a route or the double: answer, as the real server would
            reply = _Reply(500, status_object(500, "InternalError", f"{type(exc).__name__}: {exc}"))
        if isinstance(reply, _WatchReply):
            self._stream(reply.events)
            return
        body = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, events: Generator[dict[str, Any] | None, None, None]) -> None:
        """Chunked JSON lines, one event per chunk, as the real watch endpoint sends them."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                if event is None:
                    if self._peer_closed():
                        self.close_connection = True
                        return
                    continue
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            events.close()

    def _peer_closed(self) -> bool:
        """Whether the client hung up; an idle watch has nothing to write to find out."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; ``requests`` is the record."""
