"""HTTP endpoints: /metrics (Prometheus text), /healthz (every agent loop working), /readyz (serving real data),
/events (the executor's audit trail: the newest kernel writes as JSON, ``?limit=N``; only when enforcement is on)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


class HttpServer:
    """Serves in a background thread; ``ready()`` returns (ok, reason) for /readyz, ``health()`` for /healthz
    (the agent's loops: one that keeps failing turns it red)."""

    def __init__(self, addr: tuple[str, int], registry: CollectorRegistry,
                 ready: Callable[[], tuple[bool, str]],
                 events: Callable[[int], list[dict[str, object]]] | None = None,
                 health: Callable[[], tuple[bool, str]] | None = None) -> None:
        registry_, ready_, events_ = registry, ready, events
        health_ = health or (lambda: (True, "ok"))

        class Handler(BaseHTTPRequestHandler):
            server_version = "koordlet-py"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(registry_), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok, reason = health_()
                    self._send(200 if ok else 503, (reason + "\n").encode())
                elif path == "/readyz":
                    ok, reason = ready_()
                    self._send(200 if ok else 503, (reason + "\n").encode())
                elif path == "/events" and events_ is not None:
                    limit = parse_qs(urlsplit(self.path).query).get("limit", ["100"])[0]
                    body = json.dumps(events_(int(limit) if limit.isdigit() else 100), indent=1)
                    self._send(200, (body + "\n").encode(), "application/json")
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # scrapes are not events
                return

        self._events = events is not None
        host = addr[0] or "0.0.0.0"
        self._httpd = ThreadingHTTPServer((host, addr[1]), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()
        log.info("http serving addr=%s:%d endpoints=/metrics,/healthz,/readyz%s", *self.address,
                 ",/events" if self._events else "")

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
