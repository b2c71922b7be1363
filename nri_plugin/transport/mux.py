"""The NRI multiplexer: logical conns over one unix stream (containerd/nri ``pkg/net/multiplex/mux.go``).

A frame is ``conn id (u32 BE) | length (u32 BE) | payload``. Payloads of one conn id are joined into that conn's
byte stream; a frame is not a message. Conn 1 carries the Plugin service (the runtime calls us), conn 2 the
Runtime service (we call it). Frames for conn ids nobody opened are dropped, as Go's mux does.

What we send is shaped for Go's reader: every message is cut into frames of at most 4096 bytes and no frame holds
bytes of two messages (a larger frame makes Go's mux fail with ENOMEM, a mixed one loses bytes).

What we receive must complete: a frame (or a conn's ttRPC message) whose first bytes arrived has
``partial_timeout`` (5 s) to arrive whole. A Go peer writes each message at once, so a header announcing megabytes
followed by silence is a wedged or broken peer; waiting for it would hold the trunk forever with no other timeout to
end it. The trunk is closed instead and the plugin reconnects with its usual back-off.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

HEADER = struct.Struct(">II")
PLUGIN_CONN = 1              # runtime -> plugin: we serve nri.pkg.api.v1alpha1.Plugin
RUNTIME_CONN = 2             # plugin -> runtime: we call nri.pkg.api.v1alpha1.Runtime
MAX_SEND_FRAME = 4096
# Go frames are at most one ttRPC message (4 MiB + 10-byte header). Anything larger is not a peer speaking NRI:
# the trunk is closed rather than buffering an attacker-chosen length.
MAX_RECV_FRAME = (4 << 20) + 10
DEFAULT_PARTIAL_TIMEOUT = 5.0

Sink = Callable[[bytes], None]
Partial = Callable[[], "tuple[float, str] | None"]
"""A conn's incomplete inbound message: (monotonic time its first byte came, what it is), or None."""


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
    whole message. ``closed`` resolves with the reason when the trunk goes away (EOF, error, protocol error, a
    partial frame or message older than ``partial_timeout``). ``peer`` names the other end in logs."""

    def __init__(self, partial_timeout: float = DEFAULT_PARTIAL_TIMEOUT, peer: str = "") -> None:
        if partial_timeout <= 0:
            raise ValueError(f"mux partial timeout {partial_timeout}s: must be above 0")
        self._sinks: dict[int, Sink] = {}
        self._partials: dict[int, Partial] = {}
        self._buf = bytearray()
        self._consumed = False              # the last chunk completed at least one frame
        self._since: float | None = None    # monotonic time the first byte of our incomplete frame arrived
        self._partial_timeout = partial_timeout
        self._peer = peer
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def open(self, conn_id: int, sink: Sink, partial: Partial | None = None) -> None:
        """Route ``conn_id`` to ``sink``; ``partial`` reports the conn's incomplete message for the deadline."""
        if conn_id == 0:
            raise ValueError("mux conn id 0 is reserved")
        self._sinks[conn_id] = sink
        if partial is not None:
            self._partials[conn_id] = partial

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
        self._parse(data)
        if self.closed.done():
            return
        if not self._buf:
            self._since = None
        elif self._since is None or self._consumed:    # what is left began in this chunk
            self._since = time.monotonic()
        self._watch_partial()

    def _parse(self, data: bytes) -> None:
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
            self._consumed = off > 0

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(f"connection lost: {exc}" if exc else "closed by runtime (EOF)")

    def _finish(self, reason: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.closed.done():
            self.closed.set_result(reason)

    # --- the partial-frame deadline ------------------------------------------------------------------------------

    def _oldest_partial(self) -> tuple[float, str] | None:
        """The incomplete frame or conn message that has waited longest, described for the log."""
        found: list[tuple[float, str]] = []
        if self._since is not None:
            if len(self._buf) < HEADER.size:
                found.append((self._since, f"{len(self._buf)} of {HEADER.size} mux frame header bytes"))
            else:
                conn_id, length = HEADER.unpack_from(self._buf)
                have = len(self._buf) - HEADER.size
                found.append((self._since, f"mux frame of {length} bytes on conn {conn_id}, {have} received"))
        for conn_id, partial in self._partials.items():
            got = partial()
            if got is not None:
                found.append((got[0], f"conn {conn_id}: {got[1]}"))
        return min(found, default=None)

    def _watch_partial(self) -> None:
        """Keep one timer armed for the oldest incomplete frame or message; none while everything is whole."""
        oldest = self._oldest_partial()
        if oldest is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif self._timer is None:
            due = oldest[0] + self._partial_timeout - time.monotonic()
            self._timer = asyncio.get_running_loop().call_later(max(due, 0.001), self._partial_due)

    def _partial_due(self) -> None:
        """The timer fired: close the trunk if the oldest partial is past its deadline, else wait for the next."""
        self._timer = None
        if self.closed.done():
            return
        oldest = self._oldest_partial()
        if oldest is None:
            return
        waited = time.monotonic() - oldest[0]
        if waited < self._partial_timeout:
            self._watch_partial()             # what armed the timer completed; a younger one is still due
            return
        log.warning("nri trunk closed: partial frame never completed peer=%s partial=%s waited=%.1fs timeout=%.1fs",
                    self._peer or "?", oldest[1], waited, self._partial_timeout)
        self.close(f"stalled: {oldest[1]} incomplete after {waited:.1f}s")
