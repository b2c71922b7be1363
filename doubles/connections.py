"""What both HTTP peers do to simulate a restart: cut the client connections they hold open."""

from __future__ import annotations

import socket
from collections.abc import Iterable


def shutdown_all(connections: Iterable[socket.socket]) -> None:
    """Shut every connection down in both directions; one the client already closed is skipped."""
    for connection in connections:
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
