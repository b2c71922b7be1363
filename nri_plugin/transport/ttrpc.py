"""ttRPC over one mux conn: 10-byte message headers, unary request/response (containerd/ttrpc ``PROTOCOL.md``,
``channel.go``).

Header: ``length (u32 BE, data only) | stream id (u32 BE) | type (u8) | flags (u8)``. A client numbers its streams
1, 3, 5, ... on each conn; a server answers with the request's stream id, possibly out of order. Envelopes are
``ttrpc.Request`` / ``ttrpc.Response`` (proto/ttrpc). NRI uses unary calls only: Data messages and streaming flags
are not part of it and are ignored, as Go's server ignores message types it does not know.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from koordlet._proto.ttrpc import ttrpc_pb2
from nri_plugin.transport.mux import ProtocolError

log = logging.getLogger(__name__)

HEADER = struct.Struct(">IIBB")
MAX_DATA = 4 << 20
# A header announcing more than this is not an oversized message but a desynchronized (garbage) stream: Go would
# try to discard that many bytes; we close the conn instead of waiting for gigabytes.
MAX_DISCARD = 16 << 20
TYPE_REQUEST, TYPE_RESPONSE, TYPE_DATA = 1, 2, 3


class Code(enum.IntEnum):
    """The gRPC status codes ttRPC carries."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class TTRPCError(Exception):
    """A non-OK ttRPC status, raised by handlers to answer with it and by :meth:`Client.call` on receiving one."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {code}: {message}")
        self.code, self.message = code, message


def encode(stream_id: int, msg_type: int, data: bytes) -> bytes:
    if len(data) > MAX_DATA:
        raise TTRPCError(Code.RESOURCE_EXHAUSTED, f"message of {len(data)} bytes exceeds {MAX_DATA}")
    return HEADER.pack(len(data), stream_id, msg_type, 0) + data


@dataclass(frozen=True, slots=True)
class Message:
    stream_id: int
    type: int
    flags: int
    data: bytes | None       # None: the message exceeded MAX_DATA and its bytes were discarded


class Decoder:
    """Byte stream -> messages. Oversized messages (≤ MAX_DISCARD) are skipped and surface with ``data=None``.

    ``partial()`` tells how long an incomplete message has been waiting for its rest, so the trunk can give up on
    a peer that announced a message and went silent (see :class:`nri_plugin.transport.mux.Mux`).
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._skip = 0
        self._skipped: Message | None = None
        self._since: float | None = None    # monotonic time the first byte of the incomplete message arrived

    def feed(self, chunk: bytes) -> list[Message]:
        out = self._feed(chunk)
        if not self._buf and not self._skip:
            self._since = None
        elif out or self._since is None:    # what is left began in this chunk
            self._since = time.monotonic()
        return out

    def partial(self) -> tuple[float, str] | None:
        """(monotonic time its first byte came, what it is) for the incomplete message, or None."""
        if self._since is None:
            return None
        if self._skip:
            sid = self._skipped.stream_id if self._skipped is not None else 0
            return self._since, f"oversized ttrpc message (stream {sid}) being discarded, {self._skip} bytes due"
        if len(self._buf) < HEADER.size:
            return self._since, f"{len(self._buf)} of {HEADER.size} ttrpc header bytes"
        length, stream_id, msg_type, _ = HEADER.unpack_from(self._buf)
        return self._since, (f"ttrpc message of {length} bytes (stream {stream_id}, type {msg_type}), "
                             f"{len(self._buf) - HEADER.size} received")

    def _feed(self, chunk: bytes) -> list[Message]:
        out: list[Message] = []
        if self._skip:
            n = min(self._skip, len(chunk))
            self._skip -= n
            chunk = chunk[n:]
            if self._skip == 0 and self._skipped is not None:
                out.append(self._skipped)
                self._skipped = None
            if not chunk:
                return out
        buf = self._buf
        buf += chunk
        off, end = 0, len(buf)
        while end - off >= HEADER.size:
            length, stream_id, msg_type, flags = HEADER.unpack_from(buf, off)
            if length > MAX_DATA:
                if length > MAX_DISCARD:
                    del buf[:]
                    raise ProtocolError(f"ttrpc message header announces {length} bytes (stream {stream_id})")
                have = min(length, end - off - HEADER.size)
                self._skip = length - have
                skipped = Message(stream_id, msg_type, flags, None)
                off += HEADER.size + have
                if self._skip:
                    self._skipped = skipped
                    break
                out.append(skipped)
                continue
            if end - off - HEADER.size < length:
                break
            start = off + HEADER.size
            off = start + length
            out.append(Message(stream_id, msg_type, flags, bytes(buf[start:off])))
        del buf[:off]
        return out


Handler = Callable[[bytes, float | None], Awaitable[bytes]]
"""(request payload, seconds left until the caller's deadline or None) -> response payload."""


class Channel:
    """One ttRPC connection on one mux conn, as server (``services``) and/or client (``call``)."""

    def __init__(self, send: Callable[[bytes], None], services: Mapping[str, Mapping[str, Handler]] | None = None,
                 name: str = "") -> None:
        self._send = send
        self._services = services or {}
        self._decoder = Decoder()
        self._name = name
        self._last_request = 0          # server side: stream ids must be odd and strictly increasing
        self._next_stream = 1           # client side
        self._pending: dict[int, asyncio.Future[ttrpc_pb2.Response]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- inbound -----------------------------------------------------------------------------------------------

    def partial(self) -> tuple[float, str] | None:
        """The incomplete inbound message, for the trunk's partial-frame deadline (see :meth:`Decoder.partial`)."""
        return self._decoder.partial()

    def feed(self, chunk: bytes) -> None:
        """The mux sink: parse and dispatch (requests become tasks; responses resolve their futures)."""
        for msg in self._decoder.feed(chunk):
            if msg.type == TYPE_REQUEST:
                self._on_request(msg)
            elif msg.type == TYPE_RESPONSE:
                self._on_response(msg)

    def _on_request(self, msg: Message) -> None:
        sid = msg.stream_id
        if sid % 2 == 0 or sid <= self._last_request:
            self._reply(sid, None, TTRPCError(Code.INVALID_ARGUMENT,
                                              f"stream id {sid} must be odd and greater than {self._last_request}"))
            return
        self._last_request = sid
        if msg.data is None:
            self._reply(sid, None, TTRPCError(Code.RESOURCE_EXHAUSTED, f"message exceeds {MAX_DATA} bytes"))
            return
        try:
            req = ttrpc_pb2.Request.FromString(msg.data)
        except DecodeError as e:
            self._reply(sid, None, TTRPCError(Code.INVALID_ARGUMENT, f"bad ttrpc request envelope: {e}"))
            return
        service = self._services.get(req.service)
        handler = service.get(req.method) if service is not None else None
        if handler is None:
            what = f"service {req.service}" if service is None else f"method {req.method}"
            self._reply(sid, None, TTRPCError(Code.UNIMPLEMENTED, what))
            return
        deadline = req.timeout_nano / 1e9 if req.timeout_nano > 0 else None
        task = asyncio.get_running_loop().create_task(self._serve(sid, req.method, handler, req.payload, deadline))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, sid: int, method: str, handler: Handler, payload: bytes, deadline: float | None) -> None:
        try:
            self._reply(sid, await handler(payload, deadline), None)
        except TTRPCError as e:
            self._reply(sid, None, e)
        except Exception as e:        # a handler bug answers INTERNAL instead of leaving the runtime waiting
            log.exception("nri handler failed method=%s error=%s", method, e)
            self._reply(sid, None, TTRPCError(Code.INTERNAL, f"{method}: {e}"))

    def _reply(self, sid: int, payload: bytes | None, error: TTRPCError | None) -> None:
        resp = ttrpc_pb2.Response(payload=payload or b"")
        resp.status.code = error.code if error else Code.OK
        if error:
            resp.status.message = error.message
            log.debug("ttrpc error reply conn=%s stream=%d code=%d message=%s", self._name, sid, error.code,
                      error.message)
        try:
            self._send(encode(sid, TYPE_RESPONSE, resp.SerializeToString()))
        except TTRPCError as e:        # our answer is too big: tell the caller instead
            resp = ttrpc_pb2.Response()
            resp.status.code, resp.status.message = e.code, e.message
            self._send(encode(sid, TYPE_RESPONSE, resp.SerializeToString()))
        except ConnectionError:
            pass                        # the trunk went away while the handler ran; the runtime has moved on

    def _on_response(self, msg: Message) -> None:
        fut = self._pending.pop(msg.stream_id, None)
        if fut is None or fut.done():
            log.debug("ttrpc response for unknown stream conn=%s stream=%d", self._name, msg.stream_id)
            return
        if msg.data is None:
            fut.set_exception(TTRPCError(Code.RESOURCE_EXHAUSTED, f"response exceeds {MAX_DATA} bytes"))
            return
        try:
            fut.set_result(ttrpc_pb2.Response.FromString(msg.data))
        except DecodeError as e:
            fut.set_exception(TTRPCError(Code.INTERNAL, f"bad ttrpc response envelope: {e}"))

    # --- outbound ----------------------------------------------------------------------------------------------

    async def call(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        """One unary call; raises TTRPCError (status, or DEADLINE_EXCEEDED) or ConnectionError."""
        sid = self._next_stream
        self._next_stream += 2
        req = ttrpc_pb2.Request(service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9))
        fut: asyncio.Future[ttrpc_pb2.Response] = asyncio.get_running_loop().create_future()
        self._pending[sid] = fut
        started = time.monotonic()
        try:
            self._send(encode(sid, TYPE_REQUEST, req.SerializeToString()))
            resp = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise TTRPCError(Code.DEADLINE_EXCEEDED,
                             f"{method}: no answer in {time.monotonic() - started:.3f}s") from None
        finally:
            self._pending.pop(sid, None)
        if resp.HasField("status") and resp.status.code != Code.OK:
            raise TTRPCError(resp.status.code, resp.status.message)
        return resp.payload

    def close(self, reason: str) -> None:
        """Fail calls in flight and cancel running handlers (the trunk is gone)."""
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(reason))
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
