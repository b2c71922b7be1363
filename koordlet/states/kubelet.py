"""Minimal kubelet HTTP(S) client: the pod source upstream koordlet's podsInformer polls.

Upstream koordlet asks the local kubelet for ``GET /pods/`` every
``--kubelet-sync-interval`` (10s) with a ``--kubelet-sync-timeout`` (3s) budget,
because the kubelet's view is the node's ground truth and costs the API server
nothing. This module reproduces only that transport: one persistent stdlib
connection, bearer-token auth, and errors that say exactly which URL failed and
why, so a failing poll is diagnosable from a single log line.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from koordlet.base.quantity import milli
from koordlet.host.cgroup import parse_cpu_list

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics

log = logging.getLogger(__name__)

# Enough of an error body to show the kubelet's reason without flooding logs.
_BODY_SNIPPET_BYTES = 200

# Errors that mean a reused keep-alive connection was closed by the peer while
# idle; the request never reached a live server, so one retry is safe (GET).
_STALE_CONNECTION_ERRORS = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
)


class KubeletError(Exception):
    """A kubelet request failed; the message names the URL and the cause."""


class KubeletClient:
    """Polls the local kubelet over one reused HTTP(S) connection.

    Two access modes mirror upstream koordlet:

    * ``https=True`` (kubelet port 10250): sends the service-account bearer
      token read from ``token_path``. Without ``ca_file`` the server
      certificate is *not* verified, exactly like upstream's
      ``TLSClientConfig{Insecure: true}``: by default the kubelet serves a
      certificate it self-signed at startup, which no cluster CA vouches for,
      so verification would always fail. The peer is the node's own kubelet,
      and the token still authenticates us to it. Pass ``ca_file`` when the
      kubelet serves a CA-issued certificate (``serverTLSBootstrap``) to get
      full verification including hostname/IP checks.
    * ``https=False`` (``--kubelet-insecure-tls``, read-only port 10255):
      plain HTTP without credentials.

    ``timeout`` bounds connecting and each socket read, not the whole
    exchange; a kubelet that stalls (the failure mode that matters) is cut off
    after ``timeout`` seconds. Calls are serialised by a lock because they share
    one connection.
    """

    def __init__(
        self,
        address: str,
        port: int,
        https: bool,
        token_path: str | None,
        timeout: float,
        ca_file: str | None = None,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self._address = address
        self._port = port
        self._timeout = timeout
        self._token_path = token_path
        host = f"[{address}]" if ":" in address else address
        self._base_url = f"{'https' if https else 'http'}://{host}:{port}"
        self._ssl_context = _client_ssl_context(ca_file) if https else None
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self._token: str | None = None
        self._token_stamp: tuple[int, int, int] | None = None
        self._metrics = metrics      # koordlet_kubelet_request_duration_seconds: every request that got an answer

    def get_pods(self) -> list[dict[str, Any]]:
        """Return the kubelet's pods as raw dicts with Kubernetes JSON keys."""
        path = "/pods/"
        doc = self._get_json(path)
        # Upstream decodes into v1.PodList; accept what that accepts and reject
        # anything else (e.g. a Status or a proxy's HTML-as-JSON) loudly.
        if not isinstance(doc, dict) or "items" not in doc or doc.get("kind", "PodList") != "PodList":
            raise self._failure(self._base_url + path, f"response is not a PodList: {_snippet(doc)}")
        items = doc["items"]
        if items is None:
            # Go marshals the kubelet's empty pod slice as null.
            return []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise self._failure(self._base_url + path, f"PodList items is not a list of objects: {_snippet(items)}")
        return items

    def get_configz(self) -> dict[str, Any]:
        """Return the kubelet's ``/configz`` document (``{"kubeletconfig": {...}}``)."""
        path = "/configz"
        doc = self._get_json(path)
        if not isinstance(doc, dict):
            raise self._failure(self._base_url + path, f"response is not a JSON object: {_snippet(doc)}")
        return doc

    def close(self) -> None:
        """Drop the persistent connection; the next call reconnects."""
        with self._lock:
            self._drop_connection()

    def _get_json(self, path: str) -> Any:
        url = self._base_url + path
        headers = {"Accept": "application/json"}
        with self._lock:
            token = self._current_token(url)
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            started = time.perf_counter()
            status, body = self._request(url, path, headers)
            if self._metrics is not None:
                self._metrics.kubelet_request(path, status, time.perf_counter() - started)
        if status != 200:
            text = body[:_BODY_SNIPPET_BYTES].decode("utf-8", "replace")
            raise self._failure(url, f"HTTP {status}: {text!r}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise self._failure(url, f"bad JSON ({exc}): {body[:_BODY_SNIPPET_BYTES]!r}") from exc

    def _request(self, url: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """Send one GET, retrying once only when a reused connection went stale."""
        while True:
            fresh = self._conn is None
            try:
                return self._roundtrip(path, headers)
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                # A fresh connection cannot be stale, so this loops at most twice.
                if fresh or not isinstance(exc, _STALE_CONNECTION_ERRORS):
                    raise self._failure(url, _describe(exc, self._timeout)) from exc
                log.debug("kubelet keep-alive connection closed by peer, reconnecting url=%s error=%r", url, exc)

    def _roundtrip(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        if self._conn is None:
            if self._ssl_context is None:
                self._conn = http.client.HTTPConnection(self._address, self._port, timeout=self._timeout)
            else:
                self._conn = http.client.HTTPSConnection(
                    self._address, self._port, timeout=self._timeout, context=self._ssl_context
                )
        self._conn.request("GET", path, headers=headers)
        response = self._conn.getresponse()
        # Reading the whole body is what makes the connection reusable.
        body = response.read()
        if response.will_close:
            self._drop_connection()
        return response.status, body

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _current_token(self, url: str) -> str | None:
        """Return the bearer token, re-reading the file only when it changed.

        Projected service-account tokens rotate (the kubelet swaps the
        ``..data`` symlink atomically), so caching forever would eventually
        send an expired token; stat-ing is cheap, reading every poll is not
        needed. Inode, mtime and size together detect both the symlink swap and
        an in-place rewrite.
        """
        if self._token_path is None:
            return None
        try:
            st = os.stat(self._token_path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._token_stamp:
                with open(self._token_path, encoding="utf-8") as f:
                    self._token = f.read().strip()
                self._token_stamp = stamp
                log.info("kubelet token loaded path=%s", self._token_path)
        except OSError as exc:
            raise self._failure(url, f"cannot read token file {self._token_path}: {exc}") from exc
        return self._token

    @staticmethod
    def _failure(url: str, cause: str) -> KubeletError:
        log.debug("kubelet request failed url=%s error=%s", url, cause)   # the informer logs it once
        return KubeletError(f"kubelet request {url} failed: {cause}")


def _client_ssl_context(ca_file: str | None) -> ssl.SSLContext:
    if ca_file is not None:
        return ssl.create_default_context(cafile=ca_file)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _describe(exc: BaseException, timeout: float) -> str:
    """Turn a transport exception into a short, operator-readable cause."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout}s"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed: {exc.verify_message}"
    return f"{type(exc).__name__}: {exc}"


def _snippet(value: Any) -> str:
    return json.dumps(value)[:_BODY_SNIPPET_BYTES]


# kubelet topologyManagerScope -> topologyManagerPolicy -> NRT topologyPolicies value
_TOPOLOGY_POLICIES = {
    "container": {"single-numa-node": "SingleNUMANodeContainerLevel", "restricted": "RestrictedContainerLevel",
                  "best-effort": "BestEffortContainerLevel"},
    "pod": {"single-numa-node": "SingleNUMANodePodLevel", "restricted": "RestrictedPodLevel",
            "best-effort": "BestEffortPodLevel"},
}


@dataclass(frozen=True)
class KubeletCPUConfig:
    """The parts of the kubelet's ``/configz`` the report needs."""

    policy: str = "none"
    options: Mapping[str, str] = field(default_factory=dict)
    reserved_system_cpus: tuple[int, ...] = ()
    reserved_cpu_milli: int = 0            # kubeReserved.cpu + systemReserved.cpu
    topology_manager_policy: str = ""
    topology_manager_scope: str = "container"

    @classmethod
    def from_configz(cls, doc: object) -> KubeletCPUConfig:
        """Parse ``{"kubeletconfig": {...}}`` (the kubelet's JSON, any shape); ValueError names the field that is
        wrong."""
        cfg = doc.get("kubeletconfig") if isinstance(doc, Mapping) else None
        if not isinstance(cfg, Mapping):
            raise ValueError("kubelet /configz: no kubeletconfig object")

        def text(key: str, default: str) -> str:
            v = cfg.get(key)
            if v is None:
                return default
            if not isinstance(v, str):
                raise ValueError(f"kubelet /configz: {key} is not a string: {v!r}")
            return v

        options = cfg.get("cpuManagerPolicyOptions") or {}
        if not isinstance(options, Mapping) or not all(isinstance(v, str) for v in options.values()):
            raise ValueError(f"kubelet /configz: cpuManagerPolicyOptions is not a map of strings: {options!r}")
        try:
            reserved_cpus = tuple(parse_cpu_list(text("reservedSystemCPUs", "")))
        except ValueError:
            raise ValueError(f"kubelet /configz: reservedSystemCPUs {cfg.get('reservedSystemCPUs')!r} is not a "
                             "cpu list") from None
        reserved_milli = 0
        if reserved_cpus:      # --reserved-cpus overrides the cpu of kubeReserved and systemReserved
            reserved_milli = 1000 * len(reserved_cpus)
        else:
            for key in ("kubeReserved", "systemReserved"):
                section = cfg.get(key) or {}
                if not isinstance(section, Mapping):
                    raise ValueError(f"kubelet /configz: {key} is not a map: {section!r}")
                if "cpu" in section:
                    try:
                        reserved_milli += milli(section["cpu"])
                    except ValueError as e:
                        raise ValueError(f"kubelet /configz: {key}.cpu: {e}") from None
        return cls(policy=text("cpuManagerPolicy", "none") or "none", options=dict(options),
                   reserved_system_cpus=reserved_cpus, reserved_cpu_milli=reserved_milli,
                   topology_manager_policy=text("topologyManagerPolicy", ""),
                   topology_manager_scope=text("topologyManagerScope", "container"))

    @property
    def topology_policy(self) -> str:
        """The NRT ``topologyPolicies`` value for this kubelet (``None`` unless a known policy and scope)."""
        return _TOPOLOGY_POLICIES.get(self.topology_manager_scope, {}).get(self.topology_manager_policy, "None")
