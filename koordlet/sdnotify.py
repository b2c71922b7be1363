"""systemd readiness notification (Type=notify) without libsystemd: one datagram to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


def notify(state: str, environ: dict[str, str] | None = None) -> bool:
    """Send e.g. "READY=1" or "STOPPING=1"; False when not started by systemd (no NOTIFY_SOCKET)."""
    env = os.environ if environ is None else environ
    addr = env.get("NOTIFY_SOCKET", "")
    if not addr:
        return False
    if addr.startswith("@"):                 # abstract namespace socket
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        try:
            s.sendto(state.encode(), addr)
        except OSError:
            return False
    return True
