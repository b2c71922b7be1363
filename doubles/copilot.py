"""A Koordinator YARN Copilot agent double: the copilot agent's HTTP API on a unix socket, serving YARN containers
that are real processes in real cgroups (or records only, where a test has no cgroups).

Built from the published API, not from the agent's code:

- koordinator-sh/yarn-copilot ``pkg/copilot-agent/server/server.go``: the routes (``GET /health``,
  ``/information``, ``/v1/containers``, ``/v1/container?containerID=``, ``POST /v1/killContainer``,
  ``/v1/killContainersByResource``), ``ContainerInfo`` (name, namespace, uid, labels, annotations, priority,
  createTimestamp, cgroupDir, hostNetwork, resources) and ``KillRequest`` (containerID, resources); gin answers
  errors with status 400;
- ``server/helper.go``: name and uid are the YARN container id, namespace ``yarn``, priority 1, hostNetwork true,
  cgroupDir ``<yarn-container-cgroup-path>/<id>``, cpu and memory limits equal to the requests, from the
  NodeManager's vcores and MB (memory as bytes, written as Go's resource.Quantity writes a DecimalSI value);
- ``nm/nm.go``: a kill is SIGKILL to the container's processes, found in ``<cgroup-root>/cpu/<cgroupDir>``;
  containers in a final state (``KILLING``, ``DONE``, ...) are not listed;
- koordinator's evict-by-copilot-agent proposal (``docs/proposals/koordlet/20250528-support-evict-yarn-container.md``)
  for ``killContainersByResource``: leave out the ApplicationMaster containers (YARN's first container of an
  application attempt, ``..._000001``), take the most recently created first, kill until the request is covered,
  and answer the released resources as a ResourceList: ``kubernetes.io/batch-cpu`` in milli-cores,
  ``kubernetes.io/batch-memory`` in bytes (the requests of the containers killed).

Knobs make it misbehave as a broken peer would (read on every request): ``raw_body`` (answer 200 with these bytes:
garbage JSON, a huge list), ``error_status``, ``stall_seconds`` (wait before answering), ``trickle_seconds`` (send
the answer one byte at a time, this long apart), ``hang_up`` (close without an answer).
"""

from __future__ import annotations

import json
import os
import signal
import socketserver
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

NAMESPACE = "yarn"
FINAL_STATES = ("KILLING", "DONE", "LOCALIZATION_FAILED", "CONTAINER_RESOURCES_CLEANINGUP",
                "CONTAINER_CLEANEDUP_AFTER_KILL", "EXITED_WITH_FAILURE", "EXITED_WITH_SUCCESS")
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
_SI = ("", "k", "M", "G", "T", "P", "E")


def container_id(cluster_ts: int, app: int, attempt: int, number: int) -> str:
    """A YARN container id: ``container_<cluster timestamp>_<app>_<attempt>_<container number>``."""
    return f"container_{cluster_ts}_{app:04d}_{attempt:02d}_{number:06d}"


def decimal_si(value: int) -> str:
    """An integer as Go's resource.Quantity writes a DecimalSI value (1000 -> "1k", 1073741824 -> "1073741824")."""
    exponent = 0
    while value and value % 1000 == 0 and exponent < len(_SI) - 1:
        value //= 1000
        exponent += 1
    return f"{value}{_SI[exponent]}"


@dataclass
class YarnContainer:
    """One container of the NodeManager the double plays."""
    id: str
    vcores: int
    memory_mb: int
    cgroup_dir: str                  # as the copilot writes it: <yarn-container-cgroup-path>/<id>
    created: float = field(default_factory=time.time)
    state: str = "RUNNING"

    @property
    def application_master(self) -> bool:
        return self.id.endswith("_000001")

    @property
    def batch_cpu_milli(self) -> int:
        return self.vcores * 1000

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb << 20

    def info(self) -> dict[str, Any]:
        """Its ``ContainerInfo`` as the copilot marshals it."""
        quantities = {"cpu": decimal_si(self.vcores), "memory": decimal_si(self.memory_bytes)}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.created)) + \
            f".{int(self.created * 1e9) % 1_000_000_000:09d}Z"
        return {"name": self.id, "namespace": NAMESPACE, "uid": self.id, "labels": None, "annotations": None,
                "priority": 1, "createTimestamp": stamp, "cgroupDir": self.cgroup_dir, "hostNetwork": True,
                "resources": {"limits": dict(quantities), "requests": dict(quantities)}}


class CopilotDouble:
    """The copilot agent on ``socket_path``; a context manager. ``cgroup_root``: where the containers' cgroups
    are (``<cgroup_root>/cpu/<cgroupDir>``), for kills; None: killing only marks them."""

    def __init__(self, socket_path: str, cgroup_root: str | None = None) -> None:
        self.socket_path = socket_path
        self.cgroup_root = cgroup_root
        self.containers: list[YarnContainer] = []
        self.requests: list[tuple[str, str, bytes]] = []       # (method, path with query, body)
        self.killed: list[str] = []                             # container ids, in kill order
        self.raw_body: bytes | None = None
        self.error_status: int | None = None
        self.stall_seconds = 0.0
        self.trickle_seconds = 0.0
        self.hang_up = False
        self.lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def add(self, cid: str, vcores: int, memory_mb: int, cgroup_dir: str, created: float | None = None
            ) -> YarnContainer:
        container = YarnContainer(cid, vcores, memory_mb, cgroup_dir, time.time() if created is None else created)
        with self.lock:
            self.containers.append(container)
        return container

    def __enter__(self) -> CopilotDouble:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        os.makedirs(os.path.dirname(self.socket_path) or ".", exist_ok=True)
        if os.path.exists(self.socket_path):
            os.remove(self.socket_path)
        self._stopping.clear()
        self._server = _Server(self.socket_path, self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and remove the socket (a copilot that died)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if os.path.exists(self.socket_path):
            os.remove(self.socket_path)

    # --- the API ---------------------------------------------------------------------------------------------------

    def listed(self) -> list[YarnContainer]:
        with self.lock:
            return [c for c in self.containers if c.state not in FINAL_STATES]

    def serve(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        """(status, JSON value) for one request."""
        url = urlsplit(target)
        if method == "GET" and url.path == "/health":
            return 200, "ok"
        if method == "GET" and url.path == "/information":
            return 200, {"name": "yarn", "version": "v1"}
        if method == "GET" and url.path == "/v1/containers":
            return 200, [c.info() for c in self.listed()]
        if method == "GET" and url.path == "/v1/container":
            wanted = (parse_qs(url.query).get("containerID") or [""])[0]
            found = next((c for c in self.listed() if c.id == wanted), None)
            return (200, found.info()) if found else (400, {})
        if method == "POST" and url.path == "/v1/killContainer":
            request = _json_object(body)
            found = next((c for c in self.listed() if c.id == request.get("containerID")), None)
            if found is None:
                return 400, {}
            self._kill(found)
            return 200, {"items": [found.info()]}
        if method == "POST" and url.path == "/v1/killContainersByResource":
            resources = _json_object(body).get("resources") or {}
            return 200, self._kill_by_resource(_amount(resources.get(BATCH_CPU)),
                                               _amount(resources.get(BATCH_MEMORY)))
        return 404, "404 page not found"

    def _kill_by_resource(self, cpu_milli: int, memory_bytes: int) -> dict[str, str]:
        candidates = sorted((c for c in self.listed() if not c.application_master),
                            key=lambda c: (c.created, c.id), reverse=True)
        cpu = memory = 0
        for container in candidates:
            if cpu >= cpu_milli and memory >= memory_bytes:
                break
            self._kill(container)
            cpu += container.batch_cpu_milli
            memory += container.memory_bytes
        return {BATCH_CPU: str(cpu), BATCH_MEMORY: str(memory)}

    def _kill(self, container: YarnContainer) -> None:
        with self.lock:
            container.state = "KILLING"
            self.killed.append(container.id)
        if self.cgroup_root is None:
            return
        procs = os.path.join(self.cgroup_root, "cpu", container.cgroup_dir.lstrip("/"), "cgroup.procs")
        try:
            with open(procs) as f:
                pids = [int(line) for line in f if line.strip()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _amount(value: Any) -> int:
    """A ResourceList quantity that is a plain integer ("1500", 1500); anything else asks for nothing."""
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, double: CopilotDouble) -> None:
        self.double = double
        super().__init__(path, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet: clients that hung up are test scenarios."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(self.rfile.read(length) if length else b"")

    def _answer(self, body: bytes) -> None:
        double = self.server.double
        with double.lock:
            double.requests.append((self.command, self.path, body))
        if double.stall_seconds:
            double._stopping.wait(double.stall_seconds)
        if double.hang_up:
            self.close_connection = True
            return
        if double.raw_body is not None:
            status, payload = 200, double.raw_body
        elif double.error_status is not None:
            status, payload = double.error_status, json.dumps({"error": "injected"}).encode()
        else:
            status, value = double.serve(self.command, self.path, body)
            payload = json.dumps(value).encode()
        head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
                f"Content-Type: application/json; charset=utf-8\r\nContent-Length: {len(payload)}\r\n"
                f"Connection: close\r\n\r\n").encode()
        self.close_connection = True
        try:
            if double.trickle_seconds:
                for i in range(len(head + payload)):
                    if double._stopping.wait(double.trickle_seconds):
                        return
                    self.wfile.write((head + payload)[i:i + 1])
                    self.wfile.flush()
            else:
                self.wfile.write(head + payload)
        except OSError:
            pass

    def address_string(self) -> str:
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; ``requests`` is the record."""
