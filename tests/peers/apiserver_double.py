"""A real HTTP kube-apiserver test double: a small router over an in-memory store.

Objects live in ``objects`` keyed by ``(collection path, name)``, e.g.
``("/api/v1/namespaces/default/pods", "web-0")``. Routes are
``(method, path regex, handler)``; later registrations win, so a test (or a
later feature such as NodeMetric / NodeResourceTopology status updates) adds
endpoints or injects failures with :meth:`ApiServerDouble.route` without
touching the server plumbing. Unknown paths get a Kubernetes ``Status`` 404,
like the real server.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import yaml

_POD_COLLECTION = re.compile(r"/api/v1/namespaces/[^/]+/pods")


@dataclasses.dataclass(frozen=True)
class Request:
    """One request as the double saw it; header names are lower-cased."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    match: re.Match[str] | None = None


Handler = Callable[[Request], tuple[int, dict[str, Any]]]


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``meta/v1 Status`` failure, the body the real API server sends on errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code,
    }


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


class ApiServerDouble:
    """kube-apiserver stand-in; use as a context manager.

    Serves ``GET /api/v1/pods`` (all namespaces, honouring ``fieldSelector``)
    out of the box. ``requests`` records every request so tests can assert the
    query and headers a client sent.
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[Request] = []
        self._resource_version = 0
        self._lock = threading.Lock()
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.route("GET", r"/api/v1/pods", self._list_all_pods)
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ApiServerDouble:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        """Register ``handler`` for ``method`` on paths fully matching ``pattern``.

        Takes precedence over earlier routes for the same path.
        """
        self._routes.insert(0, (method, re.compile(pattern), handler))

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a copy of ``obj`` under ``collection``, bumping its resourceVersion."""
        stored = copy.deepcopy(obj)
        with self._lock:
            self._resource_version += 1
            stored.setdefault("metadata", {})["resourceVersion"] = str(self._resource_version)
            self.objects[(collection, stored["metadata"]["name"])] = stored
        return stored

    def add_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Store a pod in its namespace's collection."""
        namespace = pod["metadata"].get("namespace", "default")
        return self.put(f"/api/v1/namespaces/{namespace}/pods", pod)

    def write_kubeconfig(self, path: str | Path) -> str:
        """Write a no-auth kubeconfig pointing at this double; returns its path."""
        return write_kubeconfig(path, self.url)

    def _dispatch(self, request: Request) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(request)
            routes = list(self._routes)
        for method, pattern, handler in routes:
            match = pattern.fullmatch(request.path)
            if method == request.method and match is not None:
                return handler(dataclasses.replace(request, match=match))
        return 404, status_object(404, "NotFound", "the server could not find the requested resource")

    def _list_all_pods(self, request: Request) -> tuple[int, dict[str, Any]]:
        try:
            selector = _parse_field_selector(request.query.get("fieldSelector", [""])[0])
        except ValueError as exc:
            return 400, status_object(400, "BadRequest", str(exc))
        with self._lock:
            pods = [
                copy.deepcopy(obj)
                for (collection, _), obj in sorted(self.objects.items())
                if _POD_COLLECTION.fullmatch(collection)
            ]
            resource_version = str(self._resource_version)
        items = [pod for pod in pods if all(_field_matches(pod, term) for term in selector)]
        return 200, {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": resource_version},
            "items": items,
        }


_SelectorTerm = tuple[str, bool, str]  # (dotted field, must equal?, value)


def _parse_field_selector(selector: str) -> list[_SelectorTerm]:
    """Parse ``a.b=v,c!=w`` (also ``==``) the way the API server does."""
    terms: list[_SelectorTerm] = []
    for term in filter(None, selector.split(",")):
        for op, equal in (("!=", False), ("==", True), ("=", True)):
            field, found, value = term.partition(op)
            if found:
                terms.append((field, equal, value))
                break
        else:
            raise ValueError(f"invalid field selector term {term!r}")
    return terms


def _field_matches(obj: dict[str, Any], term: _SelectorTerm) -> bool:
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Keep-alive handler threads may idle on a client; never wait for them.
    block_on_close = False

    def __init__(self, double: ApiServerDouble) -> None:
        self.double = double
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
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
        status, document = self.server.double._dispatch(request)
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; ``requests`` is the record."""
