"""A thin raw-JSON client for the kube-apiserver, on top of the official ``kubernetes`` library.

The library does what it is good at (kubeconfig and in-cluster loading, TLS, token refresh, connection pooling);
we skip its model classes and speak the API's JSON directly, so objects keep their wire keys (``camelCase``) and
custom resources need no generated code. ``kubernetes`` is imported inside :class:`KubeApi` only: importing it costs
~40 MB, which a standalone agent never pays.

Conventions followed (Kubernetes API concepts): errors arrive as ``meta/v1 Status`` objects whose ``reason`` we
keep (``Conflict``, ``NotFound``, ``AlreadyExists``, ``Expired``/``Gone``); watch streams are JSON lines of
``{"type", "object"}``; a watch that starts from a compacted resourceVersion ends with an ``ERROR`` event carrying
a 410 Status. Every request takes a token from a client-side bucket like client-go's (``kube-api-qps`` /
``kube-api-burst``, upstream 20 / 30).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

USER_AGENT = "koordlet-py"
_SNIPPET = 200
_WATCH_READ = 64 * 1024


class ApiError(Exception):
    """A request failed: ``status`` is the HTTP code (0 when the server could not be reached)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        """The resourceVersion asked for is older than the server keeps (watch/list must start over)."""
        return self.status == 410

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def retryable(self) -> bool:
        """Worth trying again later: unreachable, throttled, or a server-side failure."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class ConfigError(Exception):
    """The kubeconfig / in-cluster config cannot be loaded (the message says which and why)."""


@dataclass(frozen=True)
class Resource:
    """One API resource: ``Resource("slo.koordinator.sh", "v1alpha1", "nodemetrics")``; group "" is core."""

    group: str
    version: str
    plural: str
    namespace: str = ""

    def collection(self) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        ns = f"/namespaces/{quote(self.namespace, safe='')}" if self.namespace else ""
        return f"{base}{ns}/{self.plural}"

    def item(self, name: str, subresource: str = "") -> str:
        path = f"{self.collection()}/{quote(name, safe='')}"
        return f"{path}/{subresource}" if subresource else path

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NODES = Resource("", "v1", "nodes")
PODS = Resource("", "v1", "pods")
NODE_METRICS = Resource("slo.koordinator.sh", "v1alpha1", "nodemetrics")
NODE_SLOS = Resource("slo.koordinator.sh", "v1alpha1", "nodeslos")
NODE_RESOURCE_TOPOLOGIES = Resource("topology.node.k8s.io", "v1alpha1", "noderesourcetopologies")
DEVICES = Resource("scheduling.koordinator.sh", "v1alpha1", "devices")


class RateLimiter:
    """Token bucket shared by all threads: ``qps`` tokens per second, at most ``burst`` saved up."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._qps, self._burst, self._clock = qps, max(burst, 1), clock
        self._tokens = float(self._burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; returns how long to wait before using it (0 = now)."""
        if self._qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self._qps


class KubeApi:
    """Raw JSON access to the API server; one instance per agent, safe to share between threads."""

    def __init__(self, kubeconfig: str | None, *, timeout: float = 10.0, qps: float = 20.0, burst: int = 30) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        # The library raises many types on a bad kubeconfig (YAMLError, TypeError, KeyError...): all mean "bad config".
        try:
            if kubeconfig:
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except Exception as exc:
            source = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config"
            raise ConfigError(f"cannot load {source}: {exc}") from exc
        # Our loops are the retry policy; urllib3's retries would stretch one failed call to several timeouts.
        configuration.retries = 0
        self.host = configuration.host
        self._timeout = timeout
        self._limiter = RateLimiter(qps, burst)
        self._client: ApiClient = client.ApiClient(configuration)
        self._client.user_agent = USER_AGENT

    # --- verbs -----------------------------------------------------------------------------------------------

    def get(self, path: str, **query: str) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", resource.collection(), body=obj)

    def replace(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """PUT: with ``metadata.resourceVersion`` set the server refuses a stale object (409 Conflict)."""
        return self.request("PUT", path, body=obj)

    def evict_pod(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        """POST a ``policy/v1`` Eviction for a pod, with a UID precondition so that a pod recreated under the
        same name is never the one evicted (the server answers 409 Conflict then). PDBs may refuse (429)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}}}
        pods = Resource("", "v1", "pods", namespace)
        return self.request("POST", pods.item(name, "eviction"), body=body)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ``core/v1`` Event in ``namespace``."""
        return self.create(Resource("", "v1", "events", namespace), event)

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None, content_type: str = "application/json") -> dict[str, Any]:
        response = self._send(method, path, query, body, content_type, self._timeout)
        try:
            data = response.read()
        finally:
            response.close()
        return self._decode(method, path, response.status, data)

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int,
              query: Mapping[str, str] | None = None,
              on_open: Callable[[Callable[[], None]], None] | None = None) -> Iterator[dict[str, Any]]:
        """Events of a watch from ``resource_version`` with bookmarks; ends when the server closes the stream.

        ``on_open`` receives a function that aborts the stream from another thread (used on shutdown).
        A 410 answered before the stream starts is raised as ``ApiError``; one inside the stream arrives as an
        ``ERROR`` event, as the API server sends it.
        """
        params = {**(query or {}), "watch": "true", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        # no total timeout: the stream lasts timeoutSeconds; a read stalled past it plus slack means a dead peer
        response = self._send("GET", path, params, None, "application/json", (self._timeout, timeout_seconds + 30))
        try:
            if response.status != 200:
                self._decode("WATCH", path, response.status, response.read())
            raw = response.response
            if on_open is not None:
                on_open(raw.close)
            buffer = b""
            while True:
                try:
                    chunk = raw.read1(_WATCH_READ) if hasattr(raw, "read1") else raw.read(_WATCH_READ)
                except Exception as exc:      # closed by on_open's abort, or the connection died
                    if raw.closed:
                        return
                    raise ApiError(0, type(exc).__name__, f"watch {path}: {exc}") from exc
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._event(path, line)
            if buffer.strip():
                yield self._event(path, buffer)
        finally:
            response.close()

    def close(self) -> None:
        """Release pooled connections."""
        self._client.close()

    # --- plumbing ----------------------------------------------------------------------------------------------

    def _send(self, method: str, path: str, query: Mapping[str, str] | None, body: Any, content_type: str,
              timeout: float | tuple[float, float]) -> Any:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        delay = self._limiter.reserve()
        if delay > 0:
            time.sleep(delay)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self._client.param_serialize(method, path, query_params=list((query or {}).items()),
                                                  header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            return self._client.call_api(*serialized, _request_timeout=timeout)
        except ApiException as exc:              # the library reports TLS failures this way (status 0)
            raise ApiError(exc.status or 0, "RequestFailed", f"{method} {path}: {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            cause = getattr(exc, "reason", None) or exc     # MaxRetryError hides the real cause
            raise ApiError(0, type(cause).__name__, f"{method} {path}: {cause}") from exc

    @staticmethod
    def _decode(method: str, path: str, status: int, data: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(data) if data else {}
        except ValueError:
            doc = None
        if 200 <= status < 300:
            if not isinstance(doc, dict):
                raise ApiError(status, "BadResponse", f"{method} {path}: not a JSON object: {data[:_SNIPPET]!r}")
            return doc
        if isinstance(doc, dict) and doc.get("kind") == "Status":
            raise ApiError(status, str(doc.get("reason") or ""), f"{method} {path}: {doc.get('message', '')}")
        raise ApiError(status, "", f"{method} {path}: {data[:_SNIPPET]!r}")

    @staticmethod
    def _event(path: str, line: bytes) -> dict[str, Any]:
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise ApiError(200, "BadWatchEvent", f"watch {path}: {exc}: {line[:_SNIPPET]!r}") from exc
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise ApiError(200, "BadWatchEvent", f"watch {path}: not an event: {line[:_SNIPPET]!r}")
        return event
