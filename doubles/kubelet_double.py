"""A real HTTP(S) kubelet test double serving ``/pods/`` and ``/configz``.

It is a genuine socket server on 127.0.0.1 (not a mock) so the client's
transport behaviour -- TLS, keep-alive reuse, timeouts, reconnects -- is what
gets tested. Knobs make it misbehave the ways a real kubelet does: HTTP
errors, garbage bodies, stalls, rejected credentials, dropped connections.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from doubles.connections import GoBacklog, shutdown_all


def openssl_available() -> bool:
    """Whether the ``openssl`` CLI needed by :func:`make_self_signed_cert` exists."""
    return shutil.which("openssl") is not None


@dataclass(frozen=True)
class TlsFiles:
    """PEM paths of a self-signed serving certificate; the cert is its own CA."""

    cert: str
    key: str


def make_self_signed_cert(directory: str | Path, name: str = "kubelet") -> TlsFiles:
    """Generate a self-signed cert for 127.0.0.1, like a kubelet's default one.

    EC keys keep generation in the milliseconds; the IP SAN makes the cert
    verifiable when a client is given it as ``ca_file``.
    """
    directory = Path(directory)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-nodes", "-days", "1",
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return TlsFiles(cert=str(cert), key=str(key))


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the double saw it; header names are lower-cased."""

    path: str
    headers: dict[str, str]


class KubeletDouble:
    """Kubelet stand-in; use as a context manager, then point a client at ``port``.

    Settable attributes (read on every request, so tests may change them
    between calls):

    * ``pods``: pod dicts served as the ``items`` of a ``PodList``.
    * ``configz``: document served at ``/configz``.
    * ``required_token``: when set, requests without ``Authorization: Bearer
      <token>`` get 401.
    * ``error_status`` / ``error_body``: answer every request with this status.
    * ``raw_body``: answer 200 with these exact bytes (garbage JSON, wrong kind).
    * ``stall_seconds``: sleep before answering (cut short when the double stops).

    ``requests`` records every request and ``connections`` counts accepted TCP
    connections, so tests can assert credentials and keep-alive reuse.
    """

    def __init__(self, tls: TlsFiles | None = None, required_token: str | None = None) -> None:
        self.pods: list[dict[str, Any]] = []
        self.configz: dict[str, Any] = {"kubeletconfig": {}}
        self.required_token = required_token
        self.error_status: int | None = None
        self.error_body = b"internal error"
        self.raw_body: bytes | None = None
        self.stall_seconds = 0.0
        self.requests: list[RecordedRequest] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._open_sockets: set[socket.socket] = set()
        self._stopping = threading.Event()
        ssl_context = None
        if tls is not None:
            ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ssl_context.load_cert_chain(tls.cert, tls.key)
        self._server = _Server(self, ssl_context)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def __enter__(self) -> KubeletDouble:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()
        self._server.shutdown()
        self.drop_connections()
        self._server.server_close()
        self._thread.join()

    def drop_connections(self) -> None:
        """Close every open client connection from the server side.

        Simulates a kubelet restart or idle keep-alive expiry, which leaves the
        client holding a stale connection.
        """
        with self._lock:
            sockets = list(self._open_sockets)
        shutdown_all(sockets)

    def _serve(self, path: str) -> tuple[int, str, bytes]:
        """Decide the (status, content type, body) for an authorised request."""
        if self.error_status is not None:
            return self.error_status, "text/plain", self.error_body
        if self.raw_body is not None:
            return 200, "application/json", self.raw_body
        if path in ("/pods", "/pods/"):
            pod_list = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self.pods}
            return 200, "application/json", json.dumps(pod_list).encode()
        if path == "/configz":
            return 200, "application/json", json.dumps(self.configz).encode()
        return 404, "text/plain", b"404 page not found\n"


class _Server(GoBacklog, ThreadingHTTPServer):
    daemon_threads = True
    # Keep-alive handler threads may idle on a client; never wait for them.
    block_on_close = False

    def __init__(self, double: KubeletDouble, ssl_context: ssl.SSLContext | None) -> None:
        self.double = double
        self.ssl_context = ssl_context
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Count the connection and do the TLS handshake in the connection's thread."""
        double = self.double
        with double._lock:
            double.connections += 1
        if self.ssl_context is not None:
            request = self.ssl_context.wrap_socket(request, server_side=True)
        with double._lock:
            double._open_sockets.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with double._lock:
                double._open_sockets.discard(request)
            request.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet: failed handshakes and clients that hung up are test scenarios."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is observable
    server: _Server

    def do_GET(self) -> None:
        double = self.server.double
        with double._lock:
            double.requests.append(
                RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()})
            )
        if double.stall_seconds:
            double._stopping.wait(double.stall_seconds)
        expected = f"Bearer {double.required_token}"
        if double.required_token is not None and self.headers.get("Authorization") != expected:
            status, content_type, body = 401, "text/plain", b"Unauthorized"
        else:
            status, content_type, body = double._serve(urlsplit(self.path).path)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; ``requests`` is the record."""
