"""HTTP endpoints: /metrics (Prometheus text; with the agent's metrics also /internal-metrics and /external-metrics,
its two registries, as upstream koordlet serves them), /healthz (every agent loop working), /readyz (serving real
data), /events (the executor's audit trail: the newest kernel writes as JSON, ``?limit=N``; only when enforcement
is on).

Anyone who can reach ``addr`` can talk to this server (in a DaemonSet with hostNetwork, upstream's ``:9316`` is
every interface of the node), so it is built to stay up for Prometheus and the kubelet's probes whatever other
clients do:

- **No thread per connection.** One asyncio loop (in the ``http`` thread) accepts connections and reads request
  heads; a client that dribbles a partial request costs a socket and a small buffer, not a thread. The handlers
  (the exposition and the agent's callables) run on a small fixed pool of worker threads; a POST handler named
  ``inline`` (one that only computes: no I/O, no waiting) runs on the loop itself, which saves the hand-off to a
  worker and back (half the server's CPU for a small request) and holds the loop only as long as the GIL would.
- **Scrapes share work.** Concurrent requests for one metrics page share one generation
  (``koordlet.ops.metrics.exposition.exposition``: upstream's families written as upstream's Go client writes
  them): a request joins the next generation that starts after it arrived (never an older one), so a burst of N
  scrapes costs about two generations of CPU instead of N (the agent's CPU limit is half a core).
- **Deadlines.** A request line and its headers must arrive within ``idle_timeout`` (10 s) of the connection
  opening or of the previous response (keep-alive); a response must be taken by the client within
  ``write_timeout`` (handed over in chunks, so a slow reader holds one chunk of our memory, not a copy of the
  body). Past either deadline the connection is closed, with one debug line.
- **Bounded connections.** At most ``max_connections`` are open; at the cap the one that has waited longest for a
  request head (more than ``EVICT_GRACE``) is closed to make room, otherwise new connections wait in the kernel's
  listen backlog (``socket.SOMAXCONN``, not http.server's 5: 500 concurrent scrapes then see no refused or
  retransmitted connects).
- **Quiet failures.** A client that goes away early (reset, broken pipe, half a request) is a debug line, never a
  traceback.
- **/events is private by default.** The audit trail names pods, UIDs, container ids and cgroup paths, so it is
  answered only to loopback peers (``curl 127.0.0.1:9316/events`` on the node, or ``kubectl port-forward``);
  others get 403 unless ``events_remote`` (the agent sets it from upstream's ``AuditEventsHTTPHandler`` gate, the
  opt-in for serving audit events over HTTP). The metrics pages, /healthz and /readyz are served to everyone, as
  upstream. With that gate the agent hands in ``events_upstream`` instead: upstream's /events protocol
  (``?size=&pageToken=``, JSON lines or ``Accept: application/json``; :class:`koordlet.ops.audit.EventPager`), for
  every client.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import errno
import ipaddress
import json
import logging
import re
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as METRICS_TYPE  # what exposition() writes
from prometheus_client.registry import Collector

from koordlet.base.logutil import LogOnce
from koordlet.ops.metrics.exposition import DEFAULT_PATH, exposition

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 10.0       # s for a request line + headers to arrive (and the longest idle keep-alive)
WRITE_TIMEOUT = 10.0      # s for a client to take a response
MAX_CONNECTIONS = 256     # open connections; each costs an fd and at most one unsent response in memory
WORKERS = 4               # handler threads: generate_latest holds the GIL anyway, more would not scrape faster
EVICT_GRACE = 1.0         # s a connection must have waited for its request before the cap may close it
MAX_HEAD = 16 * 1024      # bytes of request line + headers (a scrape or probe sends < 1 KiB)
CHUNK = 64 * 1024         # a response is handed to the transport this much at a time (bounds its buffer)
MAX_HEADERS = 100         # header lines (http.server's limit)
EVENTS_DEFAULT = 100      # /events without ?limit
EVENTS_MAX = 1024         # the executor's audit ring (executor.AUDIT_EVENTS; server may not import executor)
MAX_BODY = 16 * 1024 * 1024   # bytes of a POST body (an extender filter call with full Node objects of 5,000 nodes)
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
_DIGITS = re.compile(r"[0-9]{1,9}")   # ASCII only: str.isdigit() also takes '²' and other digits int() refuses


# upstream's /events handler: (query string, Accept header) -> (status, content type, body, extra headers)
EventsHandler = Callable[[str, str], tuple[int, str, bytes, tuple[tuple[str, str], ...]]]
# a POST endpoint (the companion scheduler's extender verbs): request body -> (status, JSON body)
PostHandler = Callable[[bytes], tuple[int, bytes]]


class _BadRequest(Exception):
    """A request this server answers with ``status`` and closes: the rest of the stream cannot be trusted."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]   # lower-case names; a repeated header's values joined with ", "

    def keep_alive(self, body_read: bool = False) -> bool:
        """HTTP/1.1 keeps the connection unless asked not to; 1.0 closes (no client we serve needs 1.0 keep-alive).
        A request with a body closes too unless the body was read (a POST endpoint's): otherwise the stream after
        it is not a request."""
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        has_body = "transfer-encoding" in self.headers or self.headers.get("content-length", "0").strip() != "0"
        return self.version == "HTTP/1.1" and "close" not in tokens and (body_read or not has_body)


@dataclass(frozen=True)
class _Response:
    status: HTTPStatus
    body: bytes
    ctype: str = TEXT
    close: bool = False
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class _Conn:
    """An open connection as the accept loop sees it: whom it is from and whether it is waiting for a request."""

    peer: str
    loopback: bool
    writer: asyncio.StreamWriter | None = None
    waiting_since: float | None = None   # loop time it started waiting for a request head; None while served
    task: asyncio.Task[None] | None = field(default=None, repr=False)


def parse_limit(query: str, default: int = EVENTS_DEFAULT, most: int = EVENTS_MAX) -> int:
    """``limit`` of an /events query: absent → ``default``; else exactly one value of ASCII digits in 1..most.
    Raises ValueError with a message for the client."""
    values = parse_qs(query, keep_blank_values=True).get("limit")
    if values is None:
        return default
    if len(values) != 1:
        raise ValueError("limit given more than once")
    text = values[0]
    if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= most:
        raise ValueError(f"limit must be an integer from 1 to {most}, got {text[:32]!r}")
    return int(text)


def is_loopback(host: str) -> bool:
    """Whether a peer address is this host's loopback (127/8, ::1, or 127/8 mapped into IPv6)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _listen(addr: tuple[str, int]) -> socket.socket:
    """Bind now, so a taken port fails at start-up in the caller rather than later in a thread.

    An empty host and ``::`` are every interface, IPv4 and IPv6, as Go's ``:9316`` and ``[::]:9316`` are for
    upstream (one dual-stack socket; IPv4 peers arrive as ``::ffff:a.b.c.d``, which :func:`is_loopback` knows):
    the kubelet of an IPv6 or dual-stack node probes the node's IPv6 address. Where the kernel has no IPv6, they
    fall back to every IPv4 interface. Any other IPv6 literal gets an IPv6-only socket, a name or IPv4 literal an
    IPv4 one. A taken port raises ``OSError`` (EADDRINUSE) in every case."""
    host, port = addr
    if host in ("", "::"):
        if socket.has_dualstack_ipv6():
            try:
                sock = socket.create_server(("::", port), family=socket.AF_INET6, backlog=socket.SOMAXCONN,
                                            dualstack_ipv6=True)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise
                sock = socket.create_server(("0.0.0.0", port), backlog=socket.SOMAXCONN)   # IPv6 off (sysctl)
        else:
            sock = socket.create_server(("0.0.0.0", port), backlog=socket.SOMAXCONN)
    else:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN)
    sock.setblocking(False)
    return sock


_reserved: dict[tuple[str, int], socket.socket] = {}


def reserve(addr: tuple[str, int]) -> None:
    """Bind the listener of ``addr`` now, before anything else of the agent exists (the CLI calls it first, so a
    taken port is a start-up error that leaves nothing behind: no metric cache directory, no checkpoints); the
    next :class:`HttpServer` of the same ``addr`` takes the socket over. Raises ``OSError`` as binding does."""
    if addr not in _reserved:
        _reserved[addr] = _listen(addr)


def release_reserved() -> None:
    """Close the listeners :func:`reserve` bound that no server took over (start-up failed after it)."""
    while _reserved:
        _reserved.popitem()[1].close()


def format_addr(host: str, port: int) -> str:
    """``host:port`` as a URL writes it (``[::1]:9316``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class HttpServer:
    """Serves in a background thread. ``metrics`` is the registry of /metrics, or path -> registry for several
    metrics pages (``AgentMetrics.pages()``); ``ready()`` returns (ok, reason) for /readyz, ``health()`` for /healthz
    (the agent's loops: one that keeps failing turns it red), ``events(limit)`` the audit trail for /events."""

    def __init__(self, addr: tuple[str, int], metrics: Collector | Mapping[str, Collector],
                 ready: Callable[[], tuple[bool, str]],
                 events: Callable[[int], list[dict[str, object]]] | None = None,
                 health: Callable[[], tuple[bool, str]] | None = None, *,
                 events_remote: bool = False, events_max: int = EVENTS_MAX,
                 events_upstream: EventsHandler | None = None, posts: Mapping[str, PostHandler] | None = None,
                 max_body: int = MAX_BODY, idle_timeout: float = IDLE_TIMEOUT, write_timeout: float = WRITE_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS, workers: int = WORKERS,
                 inline: frozenset[str] = frozenset()) -> None:
        self._pages: dict[str, Collector] = (dict(metrics) if isinstance(metrics, Mapping)
                                             else {DEFAULT_PATH: metrics})
        self._ready, self._events = ready, events
        self._health = health or (lambda: (True, "ok"))
        self._events_remote, self._events_max = events_remote, events_max
        self._events_upstream = events_upstream
        self._posts, self._max_body = dict(posts or {}), max_body
        self._inline = frozenset(inline).intersection(self._posts)
        self._idle_timeout, self._write_timeout = idle_timeout, write_timeout
        self._max_connections = max(1, max_connections)
        self._sock = _reserved.pop(addr) if addr in _reserved else _listen(addr)
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="http-worker")
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._conns: dict[_Conn, None] = {}     # open connections (a dict: ordered, O(1) removal)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._slot_freed: asyncio.Event | None = None
        self._loop_started = threading.Event()
        self._errors = LogOnce(log)
        self._scrape_running: set[str] = set()                     # pages being generated now
        self._scrape_next: dict[str, asyncio.Future[bytes]] = {}   # page -> the generation new requests wait for

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Open connections (for tests and the benchmark)."""
        return len(self._conns)

    def start(self) -> None:
        self._thread.start()
        self._loop_started.wait(10)
        log.info("http serving addr=%s endpoints=%s,/healthz,/readyz%s%s", format_addr(*self.address),
                 ",".join(self._pages), "".join(f",POST {p}" for p in self._posts),
                 (",/events(upstream)" if self._events_upstream is not None else "" if self._events is None
                  else ",/events" if self._events_remote else ",/events(loopback)"))

    def stop(self) -> None:
        """Close the listener and every connection, wait for the loop thread; idempotent."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):   # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    # --- the loop thread ----------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as e:   # the agent goes on without HTTP; /healthz probes will say so
            log.error("http server stopped error=%r", e)
        finally:
            self._loop_started.set()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_exception_handler)
        self._loop, self._stopping, self._slot_freed = loop, asyncio.Event(), asyncio.Event()
        self._loop_started.set()
        accept = asyncio.create_task(self._accept_loop())
        await self._stopping.wait()
        accept.cancel()
        conns = list(self._conns)
        for conn in conns:   # a connection accepted a moment ago may not have its writer yet: cancel it too
            if conn.writer is not None:
                conn.writer.transport.abort()
            if conn.task is not None:
                conn.task.cancel()
        tasks = [c.task for c in conns if c.task is not None]
        await asyncio.gather(accept, *tasks, return_exceptions=True)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._slot_freed is not None
        while True:
            while len(self._conns) >= self._max_connections and not self._evict_one(loop.time()):
                # every slot is being served, or was opened just now: let the kernel's backlog hold the rest
                self._slot_freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._slot_freed.wait(), EVICT_GRACE / 4)
            try:
                sock, peer = await loop.sock_accept(self._sock)
            except OSError as e:   # EMFILE and the like: the agent needs its fds more than a scraper does
                self._errors("accept", "http accept failed error=%s; retrying", e)
                await asyncio.sleep(0.1)
                continue
            self._errors.forget("accept")
            # asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, and an accepted socket's is 0:
            # without it a response's body waits behind its head for the client's delayed ACK (40 ms on Linux)
            # whenever the connection is kept alive
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host = str(peer[0])
            conn = _Conn(peer=f"{host}:{peer[1]}", loopback=is_loopback(host), waiting_since=loop.time())
            self._conns[conn] = None
            conn.task = asyncio.create_task(self._serve(conn, sock))

    def _evict_one(self, now: float) -> bool:
        """Close the connection that has waited longest for a request head, if it has waited at least
        ``EVICT_GRACE`` (a connection accepted a moment ago has not had the chance to send yet)."""
        waiting = [c for c in self._conns if c.waiting_since is not None and now - c.waiting_since >= EVICT_GRACE]
        if not waiting:
            return False
        conn = min(waiting, key=lambda c: c.waiting_since or 0.0)
        log.debug("http connection cap reached: closing idle peer=%s", conn.peer)
        del self._conns[conn]
        if conn.writer is not None:
            conn.writer.transport.abort()
        elif conn.task is not None:
            conn.task.cancel()
        return True

    async def _serve(self, conn: _Conn, sock: socket.socket) -> None:
        """One connection: requests one after another (keep-alive) until the client closes, a deadline passes
        or a request cannot be trusted."""
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_HEAD)
            conn.writer = writer
            while True:
                conn.waiting_since = loop.time()
                try:
                    async with asyncio.timeout(self._idle_timeout):
                        request = await _read_request(reader)
                except TimeoutError:
                    log.debug("http request head not received within %.1fs peer=%s", self._idle_timeout, conn.peer)
                    return
                except _BadRequest as e:
                    response = _Response(e.status, f"{e}\n".encode(), close=True)
                    await self._write(writer, response, head_only=False)
                    return
                if request is None:   # closed between requests
                    return
                conn.waiting_since = None
                path = urlsplit(request.target).path
                body_read = False
                if path in self._pages and request.method in ("GET", "HEAD"):
                    response = await self._metrics(path)
                elif path in self._posts and request.method == "POST":
                    try:
                        async with asyncio.timeout(self._idle_timeout):
                            body = await _read_body(reader, request, self._max_body)
                    except _BadRequest as e:
                        await self._write(writer, _Response(e.status, f"{e}\n".encode(), close=True), False)
                        return
                    body_read = True
                    response = (self._post(path, body) if path in self._inline
                                else await loop.run_in_executor(self._pool, self._post, path, body))
                else:
                    response = await loop.run_in_executor(self._pool, self._respond, request, conn.loopback)
                keep = request.keep_alive(body_read) and not response.close
                if not keep:
                    response = _Response(response.status, response.body, response.ctype, True, response.headers)
                await self._write(writer, response, head_only=request.method == "HEAD")
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError) as e:
            log.debug("http client gone peer=%s error=%s", conn.peer, type(e).__name__)
        except asyncio.CancelledError:
            pass
        except Exception as e:   # a bug here must not take the accept loop or the agent down
            log.warning("http connection failed peer=%s error=%r", conn.peer, e)
        finally:
            if writer is not None:
                writer.transport.abort()
            else:
                sock.close()
            self._conns.pop(conn, None)
            if self._slot_freed is not None:
                self._slot_freed.set()

    async def _write(self, writer: asyncio.StreamWriter, response: _Response, head_only: bool) -> None:
        status = response.status
        lines = [f"HTTP/1.1 {status.value} {status.phrase}", "Server: koordlet-py",
                 f"Date: {email.utils.formatdate(usegmt=True)}", f"Content-Type: {response.ctype}",
                 f"Content-Length: {len(response.body)}"]
        lines += [f"{k}: {v}" for k, v in response.headers]
        if response.close:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        body = b"" if head_only else memoryview(response.body)
        if len(body) <= CHUNK:      # one send, one segment: the client wakes once
            head, body = head + body, b""
        writer.write(head)
        async with asyncio.timeout(self._write_timeout):
            # in chunks: a client that reads slowly holds at most one chunk of our memory (the body itself is
            # shared by the scrapes of one generation), not a copy of the whole body per connection
            for offset in range(0, len(body), CHUNK):
                writer.write(body[offset:offset + CHUNK])
                await writer.drain()
            await writer.drain()

    async def _metrics(self, path: str) -> _Response:
        """A metrics page from its next generation to start (shared with every request for the page that arrives
        before it starts)."""
        waiting = self._scrape_next.get(path)
        if waiting is None:
            waiting = self._scrape_next[path] = asyncio.get_running_loop().create_future()
            if path not in self._scrape_running:
                self._generate(path)
        try:
            body = await asyncio.shield(waiting)
        except Exception as e:   # a failing collector: one line per distinct failure, not a traceback
            self._errors(path, "http handler failed path=%s error=%r", path, e)
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n")
        if self._errors.forget(path):
            log.info("http handler recovered path=%s", path)
        return _Response(HTTPStatus.OK, body, METRICS_TYPE)

    def _generate(self, path: str) -> None:
        """Start the generation the waiting requests for ``path`` asked for; when it ends, start the next one if
        requests arrived meanwhile."""
        waiting = self._scrape_next.pop(path, None)
        if waiting is None:
            return
        self._scrape_running.add(path)
        work = asyncio.get_running_loop().run_in_executor(self._pool, exposition, self._pages[path])

        def done(finished: asyncio.Future[bytes]) -> None:
            self._scrape_running.discard(path)
            if finished.cancelled():
                waiting.cancel()
            elif (error := finished.exception()) is not None:
                waiting.set_exception(error)
            else:
                waiting.set_result(finished.result())
            if waiting.done() and not waiting.cancelled():
                waiting.exception()   # retrieved: asyncio must not log "exception never retrieved"
            self._generate(path)

        work.add_done_callback(done)

    # --- handlers (worker threads) ---------------------------------------------------------------------------

    def _post(self, path: str, body: bytes) -> _Response:
        try:
            status, data = self._posts[path](body)
        except Exception as e:   # a bug in a handler: one line per distinct failure, the client gets a 500
            self._errors(path, "http handler failed path=%s error=%r", path, e)
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n")
        if self._errors.forget(path):
            log.info("http handler recovered path=%s", path)
        return _Response(HTTPStatus(status), data, JSON if status == 200 else TEXT)

    def _respond(self, request: _Request, loopback: bool) -> _Response:
        if request.method not in ("GET", "HEAD"):
            return _Response(HTTPStatus.METHOD_NOT_ALLOWED, b"only GET and HEAD\n", close=True,
                             headers=(("Allow", "GET, HEAD"),))
        url = urlsplit(request.target)
        path = url.path
        try:
            if path == "/events" and self._events_upstream is not None:
                status, ctype, body, headers = self._events_upstream(url.query, request.headers.get("accept", ""))
                response = _Response(HTTPStatus(status), body, ctype, headers=headers)
            else:
                response = self._route(path, url.query, loopback)
        except Exception as e:   # a failing collector or callable: one line per distinct failure, not a traceback
            self._errors(path, "http handler failed path=%s error=%r", path, e)
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n")
        if self._errors.forget(path):
            log.info("http handler recovered path=%s", path)
        return response

    def _route(self, path: str, query: str, loopback: bool) -> _Response:
        if path in self._pages:   # normally answered by _metrics (shared generations) without coming here
            return _Response(HTTPStatus.OK, exposition(self._pages[path]), METRICS_TYPE)
        if path in ("/healthz", "/readyz"):
            ok, reason = (self._health if path == "/healthz" else self._ready)()
            return _Response(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, (reason + "\n").encode())
        if path == "/events" and self._events is not None:
            if not (loopback or self._events_remote):
                return _Response(HTTPStatus.FORBIDDEN, b"/events is served to loopback clients only (on the node: "
                                 b"curl http://127.0.0.1:<port>/events, or kubectl port-forward); the "
                                 b"AuditEventsHTTPHandler feature gate serves it to every client\n")
            try:
                limit = parse_limit(query, most=self._events_max)
            except ValueError as e:
                return _Response(HTTPStatus.BAD_REQUEST, f"{e}\n".encode())
            body = json.dumps(self._events(limit), indent=1)
            return _Response(HTTPStatus.OK, (body + "\n").encode(), "application/json")
        return _Response(HTTPStatus.NOT_FOUND, b"not found\n")


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """Request line and headers; None when the client closed before sending anything. Raises _BadRequest for what
    is not HTTP/1.x, asyncio.IncompleteReadError for a head cut short."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readline()
        except ValueError:   # longer than the reader's limit (MAX_HEAD)
            raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large") from None
        if not line:
            if not lines:
                return None
            raise asyncio.IncompleteReadError(b"".join(lines), None)
        if not line.endswith(b"\n"):   # EOF in the middle of a line
            raise asyncio.IncompleteReadError(line, None)
        size += len(line)
        if size > MAX_HEAD or len(lines) > MAX_HEADERS:
            raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large")
        line = line.rstrip(b"\r\n")
        if not line:
            if not lines:   # blank lines before a request line are allowed (RFC 9112 §2.2)
                continue
            break
        lines.append(line)
    parts = lines[0].decode("latin-1").split()
    if len(parts) != 3:
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "bad request line")
    method, target, version = parts
    if not re.fullmatch(r"HTTP/1\.[0-9]", version):
        raise _BadRequest(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "only HTTP/1.x")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():   # also refuses obsolete line folding
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "bad header line")
        key, value = name.lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return _Request(method, target, version if version == "HTTP/1.0" else "HTTP/1.1", headers)


async def _read_body(reader: asyncio.StreamReader, request: _Request, most: int) -> bytes:
    """A POST body of exactly Content-Length bytes (kube-scheduler's client always sends one); chunked bodies are
    refused with 411, longer ones than ``most`` with 413."""
    if "transfer-encoding" in request.headers:
        raise _BadRequest(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required (chunked bodies are not read)")
    raw = request.headers.get("content-length", "0").strip()
    if not _DIGITS.fullmatch(raw):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "bad Content-Length")
    length = int(raw)
    if length > most:
        raise _BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {most} bytes")
    return await reader.readexactly(length)


def _quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's default handler prints a traceback; anything reaching here is one warning line."""
    log.warning("http loop error message=%s error=%r", context.get("message"), context.get("exception"))
