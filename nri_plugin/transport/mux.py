"""The NRI multiplexer: logical conns over one unix stream (reference §1.3, checklist items 1–3).

A frame is ``conn id (u32 BE) | length (u32 BE) | payload``. Payloads of one conn id are joined into that conn's
byte stream; a frame is not a message. Conn 1 carries the Plugin service (the runtime calls us), conn 2 the
Runtime service (we call it). Frames for conn ids nobody opened are dropped, as Go's mux does.

What we send is shaped for Go's reader: every message is cut into frames of at most 4096 bytes and no frame holds
bytes of two messages (a larger frame makes Go's mux fail with ENOMEM, a mixed one loses bytes).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable

log = logging.getLogger(__name__)

HEADER = struct.Struct(">II")
PLUGIN_CONN = 1              # runtime -> plugin: we serve nri.pkg.api.v1alpha1.Plugin
RUNTIME_CONN = 2             # plugin -> runtime: we call nri.pkg.api.v1alpha1.Runtime
MAX_SEND_FRAME = 4096
# Go frames are at most one ttRPC message (4 MiB + 10-byte header). Anything larger is not a peer speaking NRI:
# the trunk is closed rather than buffering an attacker-chosen length.
MAX_RECV_FRAME = (4 << 20) + 10

Sink = Callable[[bytes], None]


class ProtocolError(Exception):
    """The peer broke the framing; the trunk cannot be resynchronized and is closed."""


def frames(conn_id: int, message: bytes) -> bytes:
    """``message`` as consecutive frames of at most MAX_SEND_FRAME payload bytes (one buffer, one write)."""
    if len(message) <= MAX_SEND_FRAME:
        return HEADER.pack(conn_id, len(message)) + message
    view = memoryview(message)
    parts: list[bytes | memoryview] = []
    for off in range(0, len(message), MAX_SEND_FRAME):
        chunk = view[off:off + MAX_SEND_FRAME]
        parts.append(HEADER.pack(conn_id, len(chunk)))
        parts.append(chunk)
    return b"".join(parts)


class Mux(asyncio.Protocol):
    """One trunk. ``open(conn, sink)`` routes a conn's payloads to ``sink``; ``send(conn, message)`` writes one
    whole message. ``closed`` resolves with the reason when the trunk goes away (EOF, error, protocol error)."""

    def __init__(self) -> None:
        self._sinks: dict[int, Sink] = {}
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def open(self, conn_id: int, sink: Sink) -> None:
        if conn_id == 0:
            raise ValueError("mux conn id 0 is reserved")
        self._sinks[conn_id] = sink

    def send(self, conn_id: int, message: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("mux trunk is closed")
        self._transport.write(frames(conn_id, message))

    def close(self, reason: str = "closed by plugin") -> None:
        self._finish(reason)
        if self._transport is not None:
            self._transport.abort()

    # --- asyncio.Protocol ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        off, end = 0, len(buf)
        try:
            while end - off >= HEADER.size:
                conn_id, length = HEADER.unpack_from(buf, off)
                if length > MAX_RECV_FRAME:
                    raise ProtocolError(f"frame of {length} bytes on conn {conn_id} exceeds {MAX_RECV_FRAME}")
                if end - off - HEADER.size < length:
                    break
                start = off + HEADER.size
                off = start + length
                sink = self._sinks.get(conn_id)
                if sink is not None:
                    sink(bytes(buf[start:off]))
                elif conn_id == 0:
                    raise ProtocolError("frame on reserved conn id 0")
        except ProtocolError as e:
            self.close(f"protocol error: {e}")
        except Exception as e:     # a bug above us must close this trunk, not leave it half-parsed
            log.exception("nri trunk handler failed error=%s", e)
            self.close(f"internal error: {e}")
        finally:
            del buf[:off]

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(f"connection lost: {exc}" if exc else "closed by runtime (EOF)")

    def _finish(self, reason: str) -> None:
        if not self.closed.done():
            self.closed.set_result(reason)
