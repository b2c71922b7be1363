"""Many HTTP requests opened at once from one thread: non-blocking sockets and a selector, so the client is never
the bottleneck of what it measures. Shared by tests/unit/test_server.py and bench/http_scrapes.py."""

from __future__ import annotations

import os
import selectors
import socket
import time
from dataclasses import dataclass, field


@dataclass
class Burst:
    statuses: list[int] = field(default_factory=list)      # one per response that arrived whole
    latencies: list[float] = field(default_factory=list)   # connect to end of that response, same order
    errors: list[str] = field(default_factory=list)        # connections that failed, or never finished
    wall: float = 0.0                                      # seconds for the whole burst


def burst(port: int, n: int, path: str = "/metrics", timeout: float = 60) -> Burst:
    """``n`` connections to 127.0.0.1:``port`` opened at once, each sending one GET with Connection: close."""
    sel = selectors.DefaultSelector()
    request = f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()
    started: dict[socket.socket, float] = {}
    got: dict[socket.socket, bytearray] = {}
    out = Burst()
    t0 = time.perf_counter()
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        started[sock] = time.perf_counter()
        sock.connect_ex(("127.0.0.1", port))
        got[sock] = bytearray()
        sel.register(sock, selectors.EVENT_WRITE)
    end = time.monotonic() + timeout
    while got and time.monotonic() < end:
        for key, mask in sel.select(0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                if mask & selectors.EVENT_WRITE:
                    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        raise OSError(err, os.strerror(err))
                    sock.sendall(request)
                    sel.modify(sock, selectors.EVENT_READ)
                    continue
                chunk = sock.recv(1 << 20)
                if chunk:
                    got[sock] += chunk
                    continue
                out.statuses.append(int(bytes(got[sock]).split(b" ", 2)[1]))
                out.latencies.append(time.perf_counter() - started[sock])
            except (OSError, IndexError, ValueError) as e:
                out.errors.append(repr(e))
            sel.unregister(sock)
            del got[sock]
            sock.close()
    out.wall = time.perf_counter() - t0
    out.errors += ["unfinished"] * len(got)
    for sock in got:
        sock.close()
    return out
