"""Stand-in scheduler extenders: small real HTTP servers, for checking the kube-scheduler double itself.

Before the kube-scheduler double (kube_scheduler.py) drives the companion extender, it has to reproduce what the
real kube-scheduler does with extenders whose behaviour is known. kubernetes' own integration test
(``test/integration/scheduler/extender/extender_test.go``, TestSchedulerExtender) gives that golden case: three
extenders built from node-name predicates and weighted prioritizers over five nodes, the pod landing on
``machine2``. :class:`UpstreamExtender` has the logic of that test's extender (filter by every predicate, prioritize
by the weighted sum of prioritizers, bind by POSTing a Binding), and :func:`upstream_case` serves the three of them.

:class:`ExtenderServer` is the HTTP side: HTTP/1.1 keep-alive, ``POST <prefix>/<verb>``, one handler per verb that
tests may replace to script any reply (an unknown node name, both lists null, a 500). It records every request and
counts the connections it accepted, so keep-alive reuse is observable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import quote

from doubles.connections import GoBacklog, shutdown_all
from doubles.kube_scheduler import ExtenderConfig, ManagedResource

# The decoded JSON body of a request -> (HTTP status, the reply to encode as JSON).
Handler = Callable[[Any], tuple[int, Any]]
Predicate = Callable[[dict[str, Any], dict[str, Any]], bool]            # (pod, node) -> fits
Prioritizer = Callable[[dict[str, Any], list[dict[str, Any]]], list[tuple[str, int]]]  # (pod, nodes) -> scores

EXTENDED_RESOURCE = "foo.com/bar"  # the resource extender2 manages in the upstream case


@dataclasses.dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    verb: str
    body: Any


class ExtenderServer:
    """An extender's HTTP endpoint on 127.0.0.1; ``url`` is what goes into ``urlPrefix``.

    ``handlers`` maps a verb to its handler and may be changed while serving. A path outside ``prefix`` or an
    unknown verb is a 404, a body that is not JSON a 400, as upstream's test extender answers.
    """

    def __init__(self, handlers: Mapping[str, Handler], *, prefix: str = "") -> None:
        self.handlers: dict[str, Handler] = dict(handlers)
        self.prefix = prefix.rstrip("/")
        self.requests: list[Received] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"extender-{self.port}", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def verbs(self) -> list[str]:
        """The verbs called so far, in order."""
        with self._lock:
            return [r.verb for r in self.requests]

    def start(self) -> ExtenderServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        with self._lock:
            open_sockets = list(self._open)
        shutdown_all(open_sockets)
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> ExtenderServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _answer(self, path: str, body: bytes) -> tuple[int, bytes]:
        verb = path[len(self.prefix) + 1:] if path.startswith(self.prefix + "/") else ""
        handler = self.handlers.get(verb)
        if handler is None:
            return 404, b"Unknown method\n"
        try:
            args = json.loads(body)
        except ValueError:
            return 400, b"Decode error\n"
        with self._lock:
            self.requests.append(Received(verb, args))
        try:
            status, reply = handler(args)
            return status, json.dumps(reply).encode() + b"\n"
        except Exception as exc:  # a broken handler is a test bug: answer it visibly instead of hanging up
            return 500, f"{type(exc).__name__}: {exc}\n".encode()


class _Server(GoBacklog, ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # keep-alive handler threads may idle on a client; stop() cuts them off

    def __init__(self, owner: ExtenderServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        owner = self.owner
        with owner._lock:
            owner.connections += 1
            owner._open.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with owner._lock:
                owner._open.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-request are test scenarios, not errors."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status, reply = self.server.owner._answer(self.path.split("?", 1)[0], body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet; ``ExtenderServer.requests`` is the record."""


# --- upstream's test extender -----------------------------------------------------------------------------------


def _node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


@dataclasses.dataclass
class UpstreamExtender:
    """The logic of extender_test.go's ``Extender``: a node passes when every predicate holds (else FailedNodes says
    ``extender failed: <name>``); a node's score is the sum of each prioritizer's score × its weight (weight 0 is
    skipped); bind POSTs a Binding to ``api``. Node-cache-capable ones work on names only, as upstream's do."""

    name: str
    predicates: Sequence[Predicate]
    prioritizers: Sequence[tuple[Prioritizer, int]]
    node_cache_capable: bool = False
    api: str | None = None

    def handlers(self) -> dict[str, Handler]:
        return {"filter": self.filter, "prioritize": self.prioritize, "bind": self.bind}

    def _nodes(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        if self.node_cache_capable:
            return [{"metadata": {"name": name}} for name in args["NodeNames"]]
        return list(args["Nodes"]["items"])

    def filter(self, args: Any) -> tuple[int, Any]:
        passed, failed = [], {}
        for node in self._nodes(args):
            if all(predicate(args["Pod"], node) for predicate in self.predicates):
                passed.append(node)
            else:
                failed[_node_name(node)] = f"extender failed: {self.name}"
        result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": None, "Error": ""}
        if self.node_cache_capable:
            result["NodeNames"] = [_node_name(n) for n in passed]
        else:
            result["Nodes"] = {"metadata": {}, "items": passed}
        return 200, result

    def prioritize(self, args: Any) -> tuple[int, Any]:
        nodes = self._nodes(args)
        combined: dict[str, int] = {}
        for prioritizer, weight in self.prioritizers:
            if weight == 0:
                continue
            for host, score in prioritizer(args["Pod"], nodes):
                combined[host] = combined.get(host, 0) + score * weight
        return 200, [{"Host": host, "Score": score} for host, score in combined.items()]

    def bind(self, args: Any) -> tuple[int, Any]:
        if self.api is None:
            return 200, {"Error": f"extender {self.name} has no API server to bind with"}
        namespace, name = args["PodNamespace"], args["PodName"]
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": namespace, "uid": args["PodUID"]},
                   "target": {"kind": "Node", "name": args["Node"]}}
        request = urllib.request.Request(
            f"{self.api}/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/binding",
            data=json.dumps(binding).encode(), headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10):
                return 200, {"Error": ""}
        except urllib.error.HTTPError as exc:
            return 200, {"Error": json.loads(exc.read() or b"{}").get("message", str(exc))}


def machine_1_2_3_predicate(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    return _node_name(node) in ("machine1", "machine2", "machine3")


def machine_2_3_5_predicate(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    return _node_name(node) in ("machine2", "machine3", "machine5")


def _favour(favourite: str) -> Prioritizer:
    def prioritize(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> list[tuple[str, int]]:
        return [(_node_name(n), 10 if _node_name(n) == favourite else 1) for n in nodes]

    return prioritize


machine2_prioritizer = _favour("machine2")
machine3_prioritizer = _favour("machine3")


def upstream_nodes() -> list[dict[str, Any]]:
    """DoTestPodScheduling's nodes: machine1..machine5, capacity 32 pods (no allocatable: defaulting copies it),
    Ready."""
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"machine{i}"},
             "spec": {"unschedulable": False},
             "status": {"capacity": {"pods": "32"},
                        "conditions": [{"type": "Ready", "status": "True", "reason": "schedulable condition"}]}}
            for i in range(1, 6)]


def upstream_pod(namespace: str = "default") -> dict[str, Any]:
    """DoTestPodScheduling's pod: one container limiting 1 ``foo.com/bar`` (so extender2 is interested)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "extender-test-pod", "namespace": namespace},
            "spec": {"containers": [{"name": "container", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {EXTENDED_RESOURCE: "1"}}}]}}


@contextlib.contextmanager
def upstream_case(api: str | None) -> Iterator[tuple[list[ExtenderServer], list[ExtenderConfig]]]:
    """TestSchedulerExtender's three extenders, serving, with the scheduler's entries for them: extender1 (filter
    machine1-3, favour machine2, weight 3), extender2 (filter machine2/3/5, favour machine3, weight 4, the binder,
    manages ``foo.com/bar`` ignored by the scheduler), extender3 (like extender1 with its prioritizer weighted 5,
    node-cache-capable, weight 10). ``api``: where extender2 binds."""
    logic = [
        UpstreamExtender("extender1", [machine_1_2_3_predicate], [(machine2_prioritizer, 1)]),
        UpstreamExtender("extender2", [machine_2_3_5_predicate], [(machine3_prioritizer, 1)], api=api),
        UpstreamExtender("extender3", [machine_1_2_3_predicate], [(machine2_prioritizer, 5)],
                         node_cache_capable=True),
    ]
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ExtenderServer(e.handlers())) for e in logic]
        configs = [
            ExtenderConfig(servers[0].url, filter_verb="filter", prioritize_verb="prioritize", weight=3),
            ExtenderConfig(servers[1].url, filter_verb="filter", prioritize_verb="prioritize", bind_verb="bind",
                           weight=4, managed_resources=(ManagedResource(EXTENDED_RESOURCE, True),)),
            ExtenderConfig(servers[2].url, filter_verb="filter", prioritize_verb="prioritize", weight=10,
                           node_cache_capable=True),
        ]
        yield servers, configs
