"""Connection helpers of the HTTP doubles: cutting the connections a peer holds (a simulated restart), and a client
connection and a listener that behave like Go's on the wire."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterable


def shutdown_all(connections: Iterable[socket.socket]) -> None:
    """Shut every connection down in both directions; one the client already closed is skipped."""
    for connection in connections:
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class NoDelayHTTPConnection(http.client.HTTPConnection):
    """An HTTP client connection that sends each request as soon as it is written, as Go's net/http does (it sets
    TCP_NODELAY on every TCP connection). http.client writes the head and the body in two sends; with Nagle's
    algorithm on, the body waits for the server's delayed ACK of the head (40 ms on Linux), which no Go client
    (kube-scheduler, client-go) ever pays."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class GoBacklog:
    """Mixin for a socketserver server (before the server class in the bases): listen with the kernel's backlog
    (``somaxconn``), as Go's net.Listen does, not socketserver's 5. With 5, a burst of new connections (a client's
    pool of threads each opening one) overflows the accept queue, and the SYNs dropped wait out TCP's 1 s
    retransmission."""

    request_queue_size = socket.SOMAXCONN
