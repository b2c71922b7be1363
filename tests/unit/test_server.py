"""The agent's HTTP server (koordlet/ops/server.py) over real sockets.

Each failure mode is one test here: a non-ASCII ``limit`` crashing /events, tracebacks for every client that
hangs up early, slow partial requests pinning a thread each, a listen backlog of 5 stalling a burst of scrapes, and
/events (pod names, UIDs, cgroup paths) open to every interface. Timings are relative to the server's own
deadlines; absolute seconds appear only as generous "eventually" limits.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.registry import Collector

from doubles.httpload import burst
from koordlet.ops import server as server_mod
from koordlet.ops.server import HttpServer, is_loopback, parse_limit
from tests.waits import wait_for

EVENTS = [{"seq": i, "path": f"/sys/fs/cgroup/kubepods/pod{i}/cpu.shares"} for i in range(2000)]


class Events:
    """The executor's ``events(limit)`` contract: the newest ``limit`` entries; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def __call__(self, limit: int) -> list[dict[str, object]]:
        self.asked.append(limit)
        return list(EVENTS[-limit:])


def big_registry(series: int = 20000) -> CollectorRegistry:
    """A registry whose /metrics body (~1 MiB) is larger than the socket buffers, so writes are still going on
    when a client hangs up."""
    registry = CollectorRegistry()
    gauge = Gauge("koordlet_test_value", "a value", ["pod", "container"], registry=registry)
    for i in range(series):
        gauge.labels(f"pod-{i}", "app").set(i)
    return registry


@contextlib.contextmanager
def serving(registry: CollectorRegistry | None = None, host: str = "127.0.0.1", start: bool = True,
            **kwargs: object) -> Iterator[tuple[HttpServer, Events]]:
    events = Events()
    srv = HttpServer((host, 0), registry or CollectorRegistry(), lambda: (True, "ready"), events,
                     **kwargs)  # type: ignore[arg-type]
    if start:
        srv.start()
    try:
        yield srv, events
    finally:
        srv.stop()


def get(port: int, path: str, host: str = "127.0.0.1", method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def raw(port: int, data: bytes, host: str = "127.0.0.1") -> bytes:
    """Send bytes as they are, read until the server closes."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): what a killed scraper or a load balancer's health check does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def still_open(sock: socket.socket) -> bool:
    """True while the server has neither closed nor reset the connection."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


# --- 1. /events?limit -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["limit=%C2%B2", "limit=%EF%BC%95", "limit=0", "limit=1025", "limit=-1",
                                   "limit=+5", "limit=5.0", "limit=%205", "limit=", "limit=0x10",
                                   "limit=99999999999999999999999999", "limit=1&limit=2", "limit=%FF"])
def test_events_limit_is_parsed_strictly(query):
    with serving() as (srv, events):
        port = srv.address[1]
        status, body = get(port, f"/events?{query}")
        assert status == 400, body
        assert b"limit" in body
        assert events.asked == []
        assert get(port, "/healthz") == (200, b"ok\n"), "the server goes on after a bad query"


def test_events_limit_values():
    with serving() as (srv, events):
        port = srv.address[1]
        status, body = get(port, "/events?limit=3")
        assert status == 200
        assert [e["seq"] for e in json.loads(body)] == [1997, 1998, 1999]
        assert get(port, "/events")[0] == 200
        assert get(port, "/events?limit=1024&other=x")[0] == 200
        assert events.asked == [3, server_mod.EVENTS_DEFAULT, server_mod.EVENTS_MAX]


def test_parse_limit_bounds():
    assert parse_limit("") == server_mod.EVENTS_DEFAULT
    assert parse_limit("limit=7", most=7) == 7
    for text in ("limit=8", "limit=²", "limit=٣"):   # superscript two, Arabic-Indic three: isdigit() says yes
        with pytest.raises(ValueError, match="limit"):
            parse_limit(text, most=7)


# --- 2. clients that hang up early --------------------------------------------------------------------------------

def test_clients_that_hang_up_early_are_quiet(capfd, caplog):
    caplog.set_level(logging.DEBUG, logger="koordlet.ops.server")
    with serving(big_registry()) as (srv, _):
        port = srv.address[1]
        assert get(port, "/metrics")[0] == 200
        capfd.readouterr()
        caplog.clear()
        hangups = 0
        for _ in range(10):
            for request in (b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", b"GET /events HTTP/1.1\r\nHost: t\r\n\r\n",
                            b"GET /metr", b""):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                if request:
                    sock.sendall(request)
                if request.startswith(b"GET /metrics"):
                    sock.recv(100)   # the response has started: the server is writing when the RST comes
                reset(sock)
                hangups += 1
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:   # a clean close mid-head
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHo")
            hangups += 1
        # every connection has been dealt with, and the server still serves
        assert wait_for(lambda: srv.connections == 0, timeout=30)
        assert get(port, "/metrics")[0] == 200
        err = capfd.readouterr().err
        assert "Traceback" not in err and "Error" not in err, err
        ours = [r for r in caplog.records if r.name == "koordlet.ops.server"]
        assert all(r.levelno <= logging.DEBUG for r in ours), [r.getMessage() for r in ours]
        assert len(ours) <= hangups, "at most one debug line per connection"
        assert all(r.exc_info is None for r in ours)


# --- 3. slow clients ---------------------------------------------------------------------------------------------

def test_slow_clients_pin_no_threads_and_scrapes_go_on():
    with serving(big_registry(2000)) as (srv, _):
        port = srv.address[1]
        for _ in range(server_mod.WORKERS * 2):   # let the worker pool reach its size
            assert get(port, "/metrics")[0] == 200
        threads = threading.active_count()
        slow = []
        try:
            for _ in range(200):   # more than the 191 that pinned 191 threads
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Slow: ")
                slow.append(sock)
            assert wait_for(lambda: srv.connections == 200, timeout=30)
            assert threading.active_count() <= threads, "a slow client costs no thread"
            t0 = time.monotonic()
            for path in ("/metrics", "/healthz", "/readyz"):
                assert get(port, path)[0] == 200
            served_in = time.monotonic() - t0
            # the scrapes were served while every slow client still hangs on, well inside their deadline
            assert served_in < server_mod.IDLE_TIMEOUT
            assert all(still_open(s) for s in slow)
        finally:
            for sock in slow:
                sock.close()


def test_request_head_must_arrive_within_the_idle_timeout():
    timeout = 0.5
    with serving(idle_timeout=timeout) as (srv, _):
        port = srv.address[1]
        # a client that dribbles one header byte at a time, never finishing: the deadline is for the whole head
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
            t0 = time.monotonic()
            closed_after = None
            while time.monotonic() - t0 < 20 * timeout:
                try:
                    sock.sendall(b"X")
                except OSError:
                    closed_after = time.monotonic() - t0
                    break
                if not still_open(sock):
                    closed_after = time.monotonic() - t0
                    break
                time.sleep(timeout / 20)
            assert closed_after is not None, "a dribbling client was not cut off"
            assert closed_after >= timeout * 0.9
        # a client that connects and says nothing
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            t0 = time.monotonic()
            assert sock.recv(1) == b""
            assert timeout * 0.9 <= time.monotonic() - t0 < 20 * timeout
        # keep-alive: served, then closed once idle for the timeout
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            data = b""
            while not data.endswith(b"ok\n"):
                data += sock.recv(1024)
            assert data.startswith(b"HTTP/1.1 200")
            t0 = time.monotonic()
            assert sock.recv(1) == b""
            assert timeout * 0.9 <= time.monotonic() - t0 < 20 * timeout
        assert wait_for(lambda: srv.connections == 0, timeout=10)


def test_connection_cap_makes_room_for_a_scrape():
    cap = 10
    with serving(max_connections=cap) as (srv, _):
        port = srv.address[1]
        keep_alive = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        keep_alive.connect()   # accepted first, but it will have waited least
        slow = []
        try:
            for _ in range(cap - 1):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(b"GET /metrics HTTP/1.1\r\n")
                slow.append(sock)
            assert wait_for(lambda: srv.connections == cap, timeout=30)
            time.sleep(server_mod.EVICT_GRACE * 0.5)
            keep_alive.request("GET", "/healthz")
            assert keep_alive.getresponse().read() == b"ok\n"
            time.sleep(server_mod.EVICT_GRACE * 1.2)
            status, _ = get(port, "/metrics")
            assert status == 200
            assert srv.connections <= cap
            assert not still_open(slow[0]), "the connection that waited longest for a request made room"
            assert still_open(slow[-1])
            assert keep_alive.sock is not None and still_open(keep_alive.sock)
        finally:
            keep_alive.close()
            for sock in slow:
                sock.close()


# --- 4. listen backlog and bursts ----------------------------------------------------------------------------------

def test_listen_backlog_holds_a_burst_until_the_server_accepts():
    # Nothing accepts yet (not started): connects complete only as far as the kernel's accept queue reaches. With
    # http.server's backlog of 5 the sixth and later SYNs are dropped and retried after 1 s, 3 s, 7 s ...
    n = 120
    with serving(start=False) as (srv, _):
        port = srv.address[1]
        socks = [socket.socket() for _ in range(n)]
        try:
            for sock in socks:
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", port))
            sel = selectors.DefaultSelector()
            for sock in socks:
                sel.register(sock, selectors.EVENT_WRITE)
            connected: set[socket.socket] = set()
            end = time.monotonic() + 0.5   # well under the first SYN retransmission (1 s)
            while len(connected) < n and time.monotonic() < end:
                for key, _ in sel.select(0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                    connected.add(sock)
                    sel.unregister(sock)
            assert len(connected) == n
            srv.start()
            for sock in socks:
                sock.setblocking(True)
                sock.settimeout(30)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            for sock in socks:
                assert sock.recv(100).startswith(b"HTTP/1.1 200")
        finally:
            for sock in socks:
                sock.close()


def test_500_concurrent_scrapes_all_succeed():
    with serving(big_registry(500)) as (srv, _):
        port = srv.address[1]
        result = burst(port, 500)
        assert result.errors == []
        assert result.statuses == [200] * 500
        assert wait_for(lambda: srv.connections == 0, timeout=30)


class Gated(Collector):
    """A collector that counts its runs and, while ``gate`` is clear, blocks: a scrape that is still generating."""

    def __init__(self) -> None:
        self.value = 0
        self.runs = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import GaugeMetricFamily
        self.runs += 1
        value = self.value
        self.entered.set()
        self.gate.wait(30)
        yield GaugeMetricFamily("koordlet_test_gated", "a value", value=value)


def test_concurrent_scrapes_share_generations_but_never_see_older_data():
    registry = CollectorRegistry()
    gated = Gated()
    registry.register(gated)
    with serving(registry) as (srv, _):
        port = srv.address[1]
        results: dict[str, tuple[int, bytes]] = {}
        gated.value, gated.gate = 1, threading.Event()
        first = threading.Thread(target=lambda: results.setdefault("first", get(port, "/metrics")))
        first.start()
        assert gated.entered.wait(30)
        runs = gated.runs
        gated.value = 2   # changed while the first generation runs: later requests must see it
        later = [threading.Thread(target=lambda i=i: results.setdefault(f"later{i}", get(port, "/metrics")))
                 for i in range(50)]
        for t in later:
            t.start()
        assert wait_for(lambda: srv.connections >= 51, timeout=30)
        time.sleep(0.2)   # their request heads are read and waiting (relative: the first generation still blocks)
        gated.gate.set()
        first.join(30)
        for t in later:
            t.join(30)
        assert b"koordlet_test_gated 1.0" in results["first"][1]
        for key, (status, body) in results.items():
            assert status == 200
            if key != "first":
                assert b"koordlet_test_gated 2.0" in body, "a request never gets a generation older than itself"
        assert gated.runs - runs <= 2, "the 50 requests that came during a generation shared the next one"


# --- 5. who may read /events -------------------------------------------------------------------------------------

def node_address() -> str | None:
    """A non-loopback IPv4 address of this host (SIOCGIFADDR on each interface), or None."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:   # no IPv4 address on this interface
                continue
        address = socket.inet_ntoa(packed[20:24])
        if not is_loopback(address):
            return address
    return None


def test_events_are_served_to_loopback_peers_only():
    address = node_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address to connect from")
    with serving(host="") as (srv, events):
        port = srv.address[1]
        assert get(port, "/events?limit=1")[0] == 200
        status, body = get(port, "/events?limit=1", host=address)
        assert status == 403
        assert b"loopback" in body and b"seq" not in body
        assert events.asked == [1]
        for path in ("/metrics", "/healthz", "/readyz"):   # as upstream: these stay open on addr
            assert get(port, path, host=address)[0] == 200
    with serving(host="", events_remote=True) as (srv, _):
        status, body = get(srv.address[1], "/events?limit=1", host=address)
        assert status == 200 and json.loads(body)[0]["seq"] == 1999


def test_ipv6_listen_address():
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            pass
    except OSError:
        pytest.skip("no IPv6 loopback on this host")
    with serving(host="::1") as (srv, _):
        assert srv.address[0] == "::1"
        assert get(srv.address[1], "/events?limit=1", host="::1")[0] == 200   # ::1 is loopback


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("127.3.4.5") and is_loopback("::1")
    assert is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("10.0.0.1") and not is_loopback("::ffff:10.0.0.1") and not is_loopback("fe80::1%eth0")
    assert not is_loopback("not an address")


# --- protocol details --------------------------------------------------------------------------------------------

def test_keep_alive_head_and_methods():
    with serving() as (srv, _):
        port = srv.address[1]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for path in ("/healthz", "/readyz", "/metrics", "/nope"):   # one connection, as Prometheus keeps it
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                assert response.status == (404 if path == "/nope" else 200)
            conn.request("HEAD", "/healthz")
            response = conn.getresponse()
            assert response.status == 200 and response.getheader("Content-Length") == "3"
            assert response.read() == b""
        finally:
            conn.close()
        reply = raw(port, b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
        assert reply.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in reply
        reply = raw(port, b"GET /healthz HTTP/1.0\r\n\r\n")   # 1.0: answered, then closed
        assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"ok\n")
        assert raw(port, b"hello\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert raw(port, b"GET / HTTP/2.0\r\n\r\n").startswith(b"HTTP/1.1 505")
        big = b"GET / HTTP/1.1\r\n" + b"X-A: " + b"a" * (server_mod.MAX_HEAD + 10) + b"\r\n\r\n"
        assert raw(port, big).startswith(b"HTTP/1.1 431")
        many = b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * (server_mod.MAX_HEADERS + 5) + b"\r\n"
        assert raw(port, many).startswith(b"HTTP/1.1 431")
        assert get(port, "http://node:1/healthz")[0] == 200   # absolute-form target


class Broken(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("collector exploded")


def test_a_failing_handler_is_a_500_and_one_log_line(caplog):
    registry = CollectorRegistry()
    broken = Broken()
    registry.register(broken)
    with serving(registry) as (srv, _):
        port = srv.address[1]
        caplog.set_level(logging.INFO, logger="koordlet.ops.server")
        caplog.clear()
        for _ in range(3):
            assert get(port, "/metrics") == (500, b"internal error\n")
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "collector exploded" in warnings[0].getMessage()
        assert warnings[0].exc_info is None
        registry.unregister(broken)
        assert get(port, "/metrics")[0] == 200
        assert any("recovered" in r.getMessage() for r in caplog.records)


def test_stop_closes_the_port_and_open_connections():
    with serving() as (srv, _):
        port = srv.address[1]
        idle = socket.create_connection(("127.0.0.1", port), timeout=30)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < server_mod.IDLE_TIMEOUT / 2, "stop does not wait for an idle client"
    try:
        assert idle.recv(1) == b""
    except ConnectionResetError:
        pass
    finally:
        idle.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def _serving(posts: dict) -> HttpServer:
    s = HttpServer(("127.0.0.1", 0), CollectorRegistry(), lambda: (True, "ok"), posts=posts)
    s.start()
    return s


def test_post_endpoints_read_the_body_and_keep_the_connection() -> None:
    seen: list[bytes] = []
    s = _serving({"/verb": lambda body: (seen.append(body), (200, b'{"ok":true}'))[1]})
    try:
        conn = http.client.HTTPConnection(*s.address, timeout=5)
        for body in (b'{"a":1}', b"x" * 70000):
            conn.request("POST", "/verb", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b'{"ok":true}')
            assert response.getheader("Content-Type") == "application/json" and not response.will_close
        assert seen == [b'{"a":1}', b"x" * 70000] and s.connections == 1
        # chunked bodies are not read: 411, and the connection closes
        conn.putrequest("POST", "/verb")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders(b"2\r\n{}\r\n0\r\n\r\n")
        response = conn.getresponse()
        assert response.status == 411 and response.will_close
        conn.close()
    finally:
        s.stop()


def test_inline_post_handlers_run_on_the_loop_and_the_others_on_a_worker() -> None:
    threads: dict[str, str] = {}

    def recording(path: str):
        def handle(body: bytes) -> tuple[int, bytes]:
            threads[path] = threading.current_thread().name
            return 200, b"x" * (server_mod.CHUNK + 1 if path == "/big" else 1)
        return handle

    posts = {p: recording(p) for p in ("/compute", "/big", "/waits")}
    s = HttpServer(("127.0.0.1", 0), CollectorRegistry(), lambda: (True, "ok"), posts=posts,
                   inline=frozenset({"/compute", "/big", "/not-a-post"}))
    s.start()
    try:
        conn = http.client.HTTPConnection(*s.address, timeout=5)
        for path in posts:
            conn.request("POST", path, b"{}")
            response = conn.getresponse()
            assert response.status == 200 and len(response.read()) == (server_mod.CHUNK + 1 if path == "/big" else 1)
        conn.close()
    finally:
        s.stop()
    assert threads == {"/compute": "http", "/big": "http", "/waits": threads["/waits"]}
    assert threads["/waits"].startswith("http-worker")


def test_accepted_connections_send_without_nagle_delay() -> None:
    """A kept-alive response is written as head then body; with Nagle's algorithm on the server socket the body
    waits for the client's delayed ACK of the head (40 ms per call, which an extender's caller pays on every verb).
    asyncio leaves TCP_NODELAY off on accepted sockets, so the server sets it."""
    s = _serving({"/verb": lambda body: (200, b"{}")})
    try:
        conn = http.client.HTTPConnection(*s.address, timeout=5)
        conn.request("POST", "/verb", b"{}")
        conn.getresponse().read()
        (served,) = list(s._conns)
        assert served.writer is not None
        sock = served.writer.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        conn.close()
    finally:
        s.stop()
