"""The Koordinator YARN Copilot agent's HTTP API on its unix socket: the YARN containers of this node, and the
eviction of some of them.

Facts: koordinator-sh/yarn-copilot ``pkg/copilot-agent/server`` (``server.go``: ``GET /health``, ``/information``,
``/v1/containers``, ``/v1/container?containerID=``, ``POST /v1/killContainer``, ``/v1/killContainersByResource``;
``ContainerInfo``: name, namespace "yarn", uid, labels, annotations, priority, createTimestamp, cgroupDir,
hostNetwork, resources; ``helper.go``: cpu and memory limits and requests from the NodeManager's vcores and MB,
cgroupDir ``<yarn-container-cgroup-path>/<container id>``), and koordinator's evict-by-copilot-agent proposal
(``docs/proposals/koordlet/20250528-support-evict-yarn-container.md``: koordlet posts the resources it needs
freed, ``{"resources": {"kubernetes.io/batch-cpu": ..., "kubernetes.io/batch-memory": ...}}``, and the copilot
answers with the resources it released, a ResourceList of the same names).

The copilot is a peer: every answer is bounded before it is parsed (:data:`MAX_BODY` bytes including the headers,
read within the call's timeout however slowly it trickles in, :data:`MAX_CONTAINERS` entries, JSON nesting), and
fails in one way only, :class:`CopilotError`. A malformed container entry costs only that entry (it comes back
as a problem naming it). Quantities of batch-cpu are milli-cores as an integer, as Koordinator defines the batch
resources (``apis/extension/resource.go``).
"""

from __future__ import annotations

import http.client
import io
import json
import math
import re
import socket
import time
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.states import decode
from koordlet.states.pod import Resources, container_resources

PATH_CONTAINERS = "/v1/containers"
PATH_KILL_BY_RESOURCE = "/v1/killContainersByResource"
TIMEOUT = 2.0               # seconds for one call, connect to last byte (an eviction's call holds the QoS cycle)
MAX_BODY = 4 << 20          # bytes of one answer, headers included: ~5,000 entries of the published shape
MAX_CONTAINERS = 2048       # entries of one listing: a NodeManager runs a few hundred containers at most
MAX_DEPTH = 8               # JSON nesting of a listing (list > entry > resources > limits: 4)
MAX_DIR = 4096              # characters of one cgroupDir (PATH_MAX)
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")    # container_<cluster ts>_<app>_<attempt>_<n> and the like


class CopilotError(Exception):
    """The copilot could not be asked, or its answer cannot be used (the message says which)."""


@dataclass(frozen=True)
class YarnContainer:
    """One YARN container as the copilot lists it (only what the agent acts on)."""
    name: str
    uid: str
    cgroup_dir: str            # as the copilot gave it; checked against the cgroup tree by states.yarn
    resources: Resources       # its cpu / memory as batch-* (the YARN containers run on batch resources)


def parse_containers(raw: bytes) -> tuple[list[YarnContainer], dict[str, str]]:
    """The containers of a ``/v1/containers`` answer, and a problem per entry that was refused, keyed by its name
    (``#<index>`` when it has none). CopilotError when the answer as a whole is not a bounded list."""
    key = f"yarn copilot {PATH_CONTAINERS}"
    try:
        doc = decode.loads(key, raw.decode("utf-8"), max_bytes=MAX_BODY, max_depth=MAX_DEPTH)
        entries = decode.array(key, doc, null=True, max_items=MAX_CONTAINERS)
    except (UnicodeDecodeError, decode.DecodeError) as e:
        raise CopilotError(str(e)) from None
    containers: list[YarnContainer] = []
    problems: dict[str, str] = {}
    seen = set()
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        label = name[:80] if isinstance(name, str) and name else f"#{i}"
        try:
            container = _container(key, entry, label)
        except decode.DecodeError as e:
            problems[label] = e.problem
            continue
        if container.uid in seen:
            problems[label] = f"uid {container.uid!r} listed twice"
            continue
        seen.add(container.uid)
        containers.append(container)
    return containers, problems


def _container(key: str, entry: Any, where: str) -> YarnContainer:
    entry = decode.obj(key, entry, where, null=False)
    name = _identifier(key, entry.get("name"), f"{where}.name")
    uid = _identifier(key, entry.get("uid"), f"{where}.uid")
    cgroup_dir = decode.string(key, entry.get("cgroupDir"), f"{where}.cgroupDir")
    if not cgroup_dir or len(cgroup_dir) > MAX_DIR:
        raise decode.DecodeError(key, f"{where}.cgroupDir: empty or longer than {MAX_DIR} characters")
    resources = decode.obj(key, entry.get("resources"), f"{where}.resources")
    for section in ("limits", "requests"):
        decode.obj(key, resources.get(section), f"{where}.resources.{section}")
    try:
        given = container_resources({"resources": resources})
    except (ValueError, TypeError) as e:
        raise decode.DecodeError(key, f"{where}.resources: {e}") from None
    return YarnContainer(name, uid, cgroup_dir, _as_batch(given))


def _identifier(key: str, value: Any, where: str) -> str:
    text = decode.string(key, value, where)
    if not _ID.fullmatch(text):
        raise decode.DecodeError(key, f"{where}: {text[:80]!r} is not a container name ([A-Za-z0-9_.-], ≤ 253)")
    return text


def _as_batch(r: Resources) -> Resources:
    """The copilot gives a YARN container's vcores and MB as cpu and memory; on the node they are batch
    resources of the NodeManager (batch-* given by the copilot itself win)."""
    return Resources(batch_cpu_request=r.batch_cpu_request or r.cpu_request,
                     batch_cpu_limit=r.batch_cpu_limit or r.cpu_limit,
                     batch_memory_request=r.batch_memory_request or r.memory_request,
                     batch_memory_limit=r.batch_memory_limit or r.memory_limit)


def parse_released(raw: bytes) -> dict[str, int]:
    """The batch-cpu (milli-cores) and batch-memory (bytes) a ``/v1/killContainersByResource`` answer says were
    released; a name it leaves out released nothing. CopilotError when the answer is not such a ResourceList."""
    key = f"yarn copilot {PATH_KILL_BY_RESOURCE}"
    try:
        doc = decode.obj(key, decode.loads(key, raw.decode("utf-8"), max_bytes=64 << 10, max_depth=2), null=False)
        out = {}
        for name in (wire.BATCH_CPU, wire.BATCH_MEMORY):
            if name in doc:
                value = decode.quantity(key, doc[name], name)
                if value < 0:
                    raise decode.DecodeError(key, f"{name}: negative ({doc[name]!r:.40})")
                out[name] = math.ceil(value)
    except (UnicodeDecodeError, decode.DecodeError) as e:
        raise CopilotError(str(e)) from None
    return out


class _Replay:
    """A finished exchange's bytes, for http.client to parse the response from (status, headers, chunking)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def makefile(self, *_: Any, **__: Any) -> io.BytesIO:
        return io.BytesIO(self._data)


class CopilotClient:
    """HTTP/1.1 to the copilot's unix socket ``path``: one connection per call, closed after it."""

    def __init__(self, path: str, *, timeout: float = TIMEOUT, max_body: int = MAX_BODY) -> None:
        self.path, self.timeout, self.max_body = path, timeout, max_body

    def containers(self) -> tuple[list[YarnContainer], dict[str, str]]:
        """The YARN containers the copilot lists now (those not in a final state), and the problems of the entries
        it refused; CopilotError when there is no usable answer within the timeout."""
        return parse_containers(self._call("GET", PATH_CONTAINERS, None))

    def kill_by_resource(self, batch_cpu_milli: int, batch_memory_bytes: int) -> dict[str, int]:
        """Ask the copilot to free at least this much by killing YARN containers (it picks them: the newest that
        are not an ApplicationMaster first); what it says it released, by resource name."""
        body = json.dumps({"resources": {wire.BATCH_CPU: str(max(batch_cpu_milli, 0)),
                                         wire.BATCH_MEMORY: str(max(batch_memory_bytes, 0))}}).encode()
        return parse_released(self._call("POST", PATH_KILL_BY_RESOURCE, body))

    def _call(self, method: str, target: str, body: bytes | None) -> bytes:
        """The response body of a 2xx answer; CopilotError for anything else (no socket, timeout, too large,
        not HTTP, another status)."""
        raw = self._exchange(method, target, body, self.timeout)
        response = http.client.HTTPResponse(_Replay(raw), method=method)  # type: ignore[arg-type]
        try:
            response.begin()
            data = response.read()
        except (http.client.HTTPException, ValueError) as e:
            raise CopilotError(f"{method} {target}: not an HTTP answer ({type(e).__name__}: {str(e)[:120]})") \
                from None
        if not 200 <= response.status < 300:
            excerpt = data[:200].decode("utf-8", "replace")
            raise CopilotError(f"{method} {target}: status {response.status} {excerpt!r}")
        return data

    def _exchange(self, method: str, target: str, body: bytes | None, timeout: float) -> bytes:
        """The whole raw answer, read until the copilot closes the connection: at most ``max_body`` bytes, within
        ``timeout`` seconds from the connect on, however slowly it arrives."""
        deadline = time.monotonic() + timeout
        head = [f"{method} {target} HTTP/1.1", "Host: yarn-copilot", "Accept: application/json",
                "Connection: close"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        request = ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        chunks: list[bytes] = []
        size = 0
        try:
            sock.settimeout(timeout)
            sock.connect(self.path)
            sock.sendall(request)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                data = sock.recv(65536)
                if not data:
                    break
                size += len(data)
                if size > self.max_body:
                    raise CopilotError(f"{method} {target}: answer larger than {self.max_body} bytes")
                chunks.append(data)
        except TimeoutError:
            raise CopilotError(f"{method} {target}: no complete answer within {timeout:g}s") from None
        except OSError as e:
            raise CopilotError(f"{method} {target} on {self.path}: {e.strerror or e}") from None
        finally:
            sock.close()
        return b"".join(chunks)
