"""The extender's HTTP endpoints on the agent's server (:class:`koordlet.ops.server.HttpServer`: one asyncio loop,
deadlines, bounded connections, keep-alive): POST ``<prefix>/filter|prioritize|bind|preempt`` with kube's JSON,
GET ``/healthz``, ``/readyz`` (caches synced) and ``/metrics``.

The verbs can bind pods, so their listener stays on loopback; kubelet probes (sent to the pod's IP) and Prometheus
cannot reach it there. :func:`serve_metrics` is a second listener for them with the same GET pages and the same
metrics but no POST route: whoever reaches it can read, never schedule.

A body that is not JSON, or not an object, is answered 400 (kube counts any status but 200 as the extender's
error); a verb that raises is a 500 with one log line, and the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from koordlet.ops.server import HttpServer, PostHandler
from scheduler.extender import Extender

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/scheduler"
VERBS = ("filter", "prioritize", "bind", "preempt")
COMPUTING = ("filter", "prioritize", "preempt")     # decide from the cache alone: answered on the server's loop


class ExtenderMetrics:
    """Per-verb latency and outcomes (``koord_scheduler_extender_*``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram("koord_scheduler_extender_request_duration_seconds",
                                 "Time to answer one extender call, by verb", ["verb"], registry=self.registry,
                                 buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.errors = Counter("koord_scheduler_extender_errors_total",
                              "Extender calls answered with an error, by verb", ["verb"], registry=self.registry)
        self.bindings = Counter("koord_scheduler_extender_bindings_total", "Binding attempts by result",
                                ["result"], registry=self.registry)


def host_priorities(pairs: list[tuple[str, int]]) -> bytes:
    """Prioritize's HostPriorityList as ``json.dumps`` of its ``{"Host", "Score"}`` objects writes it (compact
    separators), written directly with the encoder's own string escaping: hundreds of nodes per call, in a third
    of the generic encoder's time."""
    return ("[" + ",".join([f'{{"Host":{encode_basestring_ascii(h)},"Score":{s}}}' for h, s in pairs]) + "]").encode()


def handlers(extender: Extender, metrics: ExtenderMetrics, prefix: str = DEFAULT_PREFIX) -> dict[str, PostHandler]:
    """path -> handler for the four verbs."""
    calls: Mapping[str, Callable[[Mapping[str, Any]], Any]] = {
        "filter": extender.filter, "prioritize": extender.host_scores,
        "bind": extender.bind, "preempt": extender.preempt}

    def handler(verb: str) -> PostHandler:
        call = calls[verb]

        def handle(body: bytes) -> tuple[int, bytes]:
            start = time.perf_counter()
            try:
                args = json.loads(body)
            except ValueError as e:
                metrics.errors.labels(verb).inc()
                return 400, f"{verb}: the body is not JSON: {e}\n".encode()
            if not isinstance(args, dict):
                metrics.errors.labels(verb).inc()
                return 400, f"{verb}: the body is not a JSON object\n".encode()
            result = call(args)
            if isinstance(result, dict) and result.get("Error"):
                metrics.errors.labels(verb).inc()
            if verb == "bind":
                metrics.bindings.labels("error" if result.get("Error") else "bound").inc()
            metrics.latency.labels(verb).observe(time.perf_counter() - start)
            return 200, (host_priorities(result) if verb == "prioritize" else
                         json.dumps(result, separators=(",", ":")).encode())

        return handle

    return {verb_path(prefix, verb): handler(verb) for verb in VERBS}


def verb_path(prefix: str, verb: str) -> str:
    return f"{prefix.rstrip('/')}/{verb}"


def inline_paths(prefix: str = DEFAULT_PREFIX) -> frozenset[str]:
    """The verbs' paths answered on the server's loop: those that decide from the cache alone (bind waits for the
    API server, so it goes to a worker)."""
    return frozenset(verb_path(prefix, v) for v in COMPUTING)


def _readiness(extender: Extender) -> Callable[[], tuple[bool, str]]:
    """/readyz: ready once every watch has listed (until then filter answers with an error and kube retries)."""
    def ready() -> tuple[bool, str]:
        return (True, "ok") if extender.cache.synced else (False, "caches not synced yet")
    return ready


def serve(extender: Extender, addr: tuple[str, int], prefix: str = DEFAULT_PREFIX,
          metrics: ExtenderMetrics | None = None) -> HttpServer:
    """Start serving the verbs and the GET pages (in a background thread) and return the server."""
    metrics = metrics or ExtenderMetrics()
    server = HttpServer(addr, metrics.registry, _readiness(extender), posts=handlers(extender, metrics, prefix),
                        workers=8, inline=inline_paths(prefix))
    server.start()
    return server


def serve_metrics(extender: Extender, addr: tuple[str, int], metrics: ExtenderMetrics) -> HttpServer:
    """Start serving only GET /metrics, /healthz and /readyz (no verb: a POST is refused) and return the server;
    ``metrics`` is the verbs' server's, so both pages show the same counts."""
    server = HttpServer(addr, metrics.registry, _readiness(extender))
    server.start()
    return server
