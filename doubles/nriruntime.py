"""A fake containerd NRI runtime: the peer our NRI plugin is tested and benchmarked against.

It is written from the wire facts alone (containerd/nri ``pkg/net/multiplex/mux.go``, ``pkg/adaptation/plugin.go``;
containerd/ttrpc ``PROTOCOL.md``), deliberately without looking at nri_plugin/, so that a framing bug in the plugin's
transport cannot hide behind the same bug here. It behaves like a Go runtime: it owns the socket, waits for
RegisterPlugin on mux conn 2, calls Configure and Synchronize on mux conn 1, delivers events the way NRI v0.11 or v0.12
runtimes do, and closes the connection on a timeout or a bad registration. It is also stricter than Go: everything the
plugin sends is checked against the rules a Go peer silently depends on (frames <= 4096 bytes, one message per frame,
odd increasing stream ids...), and every breach lands in ``violations`` so a test can assert the plugin kept to them.

All state lives on one asyncio loop in a daemon thread; the public methods are synchronous and thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import DecodeError, Message

from koordlet._proto.nri import api_pb2 as api
from koordlet._proto.ttrpc import ttrpc_pb2

log = logging.getLogger(__name__)

MUX_HEADER = struct.Struct(">II")        # conn id, payload length
TTRPC_HEADER = struct.Struct(">IIBB")    # data length, stream id, type, flags
PLUGIN_CONN, RUNTIME_CONN = 1, 2         # conn 1: we call the plugin; conn 2: the plugin calls us
MAX_PLUGIN_FRAME = 4096                  # a Go reader's buffer: larger frames kill a real runtime's trunk
MAX_MESSAGE = 4 << 20                    # ttRPC data limit
MAX_ANY_FRAME = MAX_MESSAGE + 10         # the largest frame a Go mux ever writes; beyond that it is garbage
REQUEST, RESPONSE = 1, 2
UNKNOWN, INVALID_ARGUMENT, UNIMPLEMENTED = 2, 3, 12
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
PLUGIN_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
ALWAYS_DEDICATED = ("CreateContainer", "UpdateContainer", "StopContainer")   # own RPCs in every version

R = TypeVar("R", bound=Message)


class TTRPCError(Exception):
    """The plugin answered with a non-OK status; a runtime fails the pod/container operation on this."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {code}: {message}")
        self.code = code
        self.message = message


@dataclass(eq=False)
class _Conn:
    """One accepted plugin connection (a trunk) and the state of both ttRPC connections multiplexed on it."""

    writer: asyncio.StreamWriter
    bufs: dict[int, bytearray] = field(default_factory=lambda: {PLUGIN_CONN: bytearray(), RUNTIME_CONN: bytearray()})
    pending: dict[int, asyncio.Future[bytes]] = field(default_factory=dict)   # our calls on conn 1, by stream id
    next_stream: int = 1                 # our client ids on conn 1: 1, 3, 5, ...
    last_plugin_stream: int = 0          # the plugin's client ids on conn 2 must be odd and strictly increase
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    registration_error: str | None = None
    ready: bool = False
    closed: bool = False


def _version_at_least(version: str, major: int, minor: int) -> bool:
    """Compare "v0.12.0"-style versions on major.minor; anything unparsable counts as old."""
    m = re.match(r"v?(\d+)\.(\d+)", version)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


class FakeRuntime:
    """A containerd-like NRI runtime listening on ``socket_path``; see the module docstring."""

    def __init__(self, socket_path: str, *, nri_version: str = "v0.11.0", request_timeout: float = 2.0,
                 registration_timeout: float = 5.0, valid_events: int = 0x7FF,
                 pods: Sequence[api.PodSandbox] = (), containers: Sequence[api.Container] = (),
                 sync_chunk: int = 0, split: str | int = "go", config: str = "") -> None:
        if split != "go" and not (isinstance(split, int) and split > 0):
            raise ValueError(f"split must be 'go' or a positive int, not {split!r}")
        self.socket_path = socket_path
        self.nri_version = nri_version
        self.request_timeout = request_timeout
        self.registration_timeout = registration_timeout
        self.valid_events = valid_events
        self.pods = list(pods)
        self.containers = list(containers)
        self.sync_chunk = sync_chunk
        self.split = split
        self.config = config                  # the plugin configuration text Configure hands over
        self.registrations: list[api.RegisterPluginRequest] = []
        self.configures: list[api.ConfigureResponse] = []
        self.events_mask: int | None = None
        self.sync_responses: list[api.SynchronizeResponse] = []
        self.updates_pushed: list[api.UpdateContainersRequest] = []
        self.accepted = 0
        self.live = 0
        self.max_live = 0
        self.violations: list[str] = []
        self.closed_reasons: list[str] = []
        self._conns: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the socket directory (0700, like a runtime) and start listening on a loop thread."""
        os.makedirs(os.path.dirname(self.socket_path) or ".", mode=0o700, exist_ok=True)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-nri-runtime", daemon=True)
        self._thread.start()
        self.run(self._listen())

    def stop(self) -> None:
        """Close every connection and the listener, finish the loop thread, remove the socket."""
        if self._loop is None:
            return
        self.run(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(5)
        self._loop.close()
        self._loop = None

    def restart(self) -> None:
        """A runtime restart: the plugin sees EOF, and a fresh socket appears at the same path."""
        async def restart() -> None:
            await self._close_listener("runtime restart")
            await self._listen()
        self.run(restart())

    def drop(self) -> None:
        """Close the current connection only, as a runtime does with a plugin it gave up on."""
        async def drop() -> None:
            self._close(self._current(), "dropped by runtime")
        self.run(drop())

    def crash(self) -> None:
        """A runtime that dies: its connections and listener go away, but the socket file stays behind, stale
        (connecting is refused), until the next runtime replaces it (``recover``), as after a containerd crash."""
        async def crash() -> None:
            for conn in list(self._conns):
                self._close(conn, "runtime crashed")
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
                self._server = None
            if not os.path.exists(self.socket_path):    # an asyncio that unlinks on close: leave one behind
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
                    stale.bind(self.socket_path)
        self.run(crash())

    def recover(self, listen_delay: float = 0.0) -> None:
        """The runtime is back: the stale socket is unlinked and a new one bound at the same path, which on ext4
        usually gets the same inode number back. ``listen_delay`` holds the new socket bound but not yet
        listening (connects are refused) for that long, the window every bind-then-listen runtime has."""
        async def recover() -> None:
            if os.path.lexists(self.socket_path):
                os.unlink(self.socket_path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(self.socket_path)
            if listen_delay > 0:
                await asyncio.sleep(listen_delay)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock)
        self.run(recover())

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the peer loop and return its result.

        For the benchmark: ``rt.run(many())`` where ``async def many(): return await asyncio.gather(*acalls)``.
        """
        if self._loop is None:
            raise RuntimeError("FakeRuntime is not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def wait_ready(self, timeout: float) -> bool:
        """Whether the current connection got registered, configured and synchronized within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            newest = self._conns[-1:]       # a slice: atomic against the loop thread removing entries
            if newest and newest[0].ready and not newest[0].closed:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    async def _listen(self) -> None:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server = await asyncio.start_unix_server(self._serve, path=self.socket_path)

    async def _close_listener(self, reason: str) -> None:
        for conn in list(self._conns):
            self._close(conn, reason)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    async def _shutdown(self) -> None:
        """Close everything, then let the connection handlers see their EOF and finish (no cancelling:
        asyncio's stream server logs an error for a cancelled handler)."""
        await self._close_listener("runtime stopped")
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=2)

    # ---- connection handling ------------------------------------------------------------------------------

    def _current(self) -> _Conn:
        """The newest open connection: where calls go (a plugin keeps exactly one)."""
        if not self._conns:
            raise ConnectionError("no plugin connected")
        return self._conns[-1]

    def _violate(self, what: str) -> None:
        log.warning("nri peer: plugin protocol violation: %s", what)
        self.violations.append(what)

    def _close(self, conn: _Conn, reason: str | None) -> None:
        """Close one trunk; idempotent. ``reason`` None means the plugin hung up, which is not our doing."""
        if conn.closed:
            return
        conn.closed = True
        self.live -= 1
        if reason:
            log.info("nri peer: closing plugin connection reason=%r", reason)
            self.closed_reasons.append(reason)
        for fut in conn.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"plugin connection closed ({reason or 'by plugin'})"))
        conn.pending.clear()
        conn.writer.close()
        self._conns.remove(conn)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read mux frames off one trunk until EOF; the handshake runs beside it, as in the Go adaptation."""
        conn = _Conn(writer)
        me = asyncio.current_task()
        assert me is not None
        self._handlers.add(me)
        me.add_done_callback(self._handlers.discard)
        self._conns.append(conn)
        self.accepted += 1
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        handshake = asyncio.create_task(self._handshake(conn))
        try:
            while not conn.closed:
                conn_id, length = MUX_HEADER.unpack(await reader.readexactly(MUX_HEADER.size))
                if length > MAX_ANY_FRAME:
                    self._violate(f"frame header claims {length} bytes on conn {conn_id}")
                    self._close(conn, f"garbage on trunk (frame length {length})")
                    break
                self._on_frame(conn, conn_id, await reader.readexactly(length))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._close(conn, None)
            if not handshake.done():
                handshake.cancel()

    def _on_frame(self, conn: _Conn, conn_id: int, payload: bytes) -> None:
        """Reassemble the ttRPC stream of one mux conn, checking the frame rules a Go peer depends on."""
        if len(payload) > MAX_PLUGIN_FRAME:
            self._violate(f"frame of {len(payload)} bytes on conn {conn_id} (> {MAX_PLUGIN_FRAME})")
        if conn_id not in conn.bufs:
            self._violate(f"frame for conn id {conn_id} (only 1 and 2 exist)")
            return
        buf = conn.bufs[conn_id]
        buf += payload
        mixed = False
        while len(buf) >= TTRPC_HEADER.size:
            length, stream, mtype, flags = TTRPC_HEADER.unpack_from(buf)
            if length > MAX_MESSAGE:
                self._violate(f"ttRPC message of {length} bytes on conn {conn_id} (> 4 MiB)")
                self._close(conn, "oversized ttRPC message")
                return
            end = TTRPC_HEADER.size + length
            if len(buf) < end:
                break
            data = bytes(buf[TTRPC_HEADER.size:end])
            del buf[:end]
            # Before this frame the buffer held less than one message, so leftovers came with this frame.
            if buf and not mixed:
                mixed = True
                self._violate(f"frame on conn {conn_id} holds bytes of two ttRPC messages")
            self._on_message(conn, conn_id, stream, mtype, flags, data)
            if conn.closed:
                return

    def _on_message(self, conn: _Conn, conn_id: int, stream: int, mtype: int, flags: int, data: bytes) -> None:
        if mtype == RESPONSE and conn_id == PLUGIN_CONN:
            if flags:
                self._violate(f"response stream {stream} has flags {flags:#x}")
            fut = conn.pending.pop(stream, None)
            if fut is None:
                self._violate(f"response on conn 1 for stream {stream} with no pending request")
            elif not fut.done():
                fut.set_result(data)
        elif mtype == REQUEST and conn_id == RUNTIME_CONN:
            if flags:
                self._violate(f"request stream {stream} has flags {flags:#x}")
            if stream % 2 == 0 or stream <= conn.last_plugin_stream:
                self._violate(f"plugin stream id {stream} after {conn.last_plugin_stream} (must be odd, increasing)")
            conn.last_plugin_stream = max(conn.last_plugin_stream, stream)
            self._serve_request(conn, stream, data)
        else:
            self._violate(f"message type {mtype} on conn {conn_id} (stream {stream})")

    # ---- the Runtime service (conn 2) ---------------------------------------------------------------------

    def _serve_request(self, conn: _Conn, stream: int, data: bytes) -> None:
        """Answer one plugin call like a Go ttRPC server: unknown service/method -> UNIMPLEMENTED."""
        try:
            req = ttrpc_pb2.Request.FromString(data)
        except DecodeError:
            self._respond(conn, stream, INVALID_ARGUMENT, "undecodable request envelope")
            return
        if req.service != RUNTIME_SERVICE:
            self._respond(conn, stream, UNIMPLEMENTED, f"service {req.service}")
        elif req.method == "RegisterPlugin":
            self._register(conn, stream, req.payload)
        elif req.method == "UpdateContainers":
            try:
                update = api.UpdateContainersRequest.FromString(req.payload)
            except DecodeError:
                self._respond(conn, stream, INVALID_ARGUMENT, "undecodable UpdateContainersRequest")
                return
            self.updates_pushed.append(update)
            self._respond(conn, stream, 0, "", api.UpdateContainersResponse())
        else:
            self._respond(conn, stream, UNIMPLEMENTED, f"method {req.method}")

    def _register(self, conn: _Conn, stream: int, payload: bytes) -> None:
        try:
            reg = api.RegisterPluginRequest.FromString(payload)
        except DecodeError:
            self._respond(conn, stream, INVALID_ARGUMENT, "undecodable RegisterPluginRequest")
            return
        self.registrations.append(reg)
        problem = None
        if not reg.plugin_name:
            problem = "invalid (empty) plugin name"
        elif not re.fullmatch(r"[0-9]{2}", reg.plugin_idx, re.ASCII):
            problem = f"invalid plugin index {reg.plugin_idx!r} (must be 2 digits)"
        elif _version_at_least(self.nri_version, 0, 12) and not PLUGIN_NAME.fullmatch(reg.plugin_name):
            problem = f"invalid plugin name {reg.plugin_name!r}"
        if problem:   # Go answers the error, then the waiting handshake closes the connection
            conn.registration_error = problem
            self._respond(conn, stream, UNKNOWN, problem)
        else:
            self._respond(conn, stream, 0, "", api.Empty())
        conn.registered.set()

    def _respond(self, conn: _Conn, stream: int, code: int, message: str, payload: Message | None = None) -> None:
        resp = ttrpc_pb2.Response(payload=payload.SerializeToString() if payload is not None else b"")
        resp.status.code = code          # a Go server always sends an explicit status, even code 0
        resp.status.message = message
        resp.status.SetInParent()
        self._send(conn, RUNTIME_CONN, self._message(stream, RESPONSE, resp.SerializeToString()))

    # ---- sending ------------------------------------------------------------------------------------------

    @staticmethod
    def _message(stream: int, mtype: int, data: bytes) -> bytes:
        return TTRPC_HEADER.pack(len(data), stream, mtype, 0) + data

    def _cut(self, message: bytes) -> list[bytes]:
        """Frame payloads for one message as our ``split`` mode promises (Go: a 4096-byte bufio, then the rest)."""
        if self.split == "go":
            return [part for part in (message[:4096], message[4096:]) if part]
        assert isinstance(self.split, int)
        return [message[i:i + self.split] for i in range(0, len(message), self.split)]

    def _send(self, conn: _Conn, conn_id: int, message: bytes) -> None:
        """Write one message's frames with no await in between, so concurrent senders never interleave."""
        if conn.closed:
            return
        conn.writer.write(b"".join(MUX_HEADER.pack(conn_id, len(p)) + p for p in self._cut(message)))

    def _new_request(self, conn: _Conn, method: str, request: Message, timeout: float) -> tuple[int, bytes]:
        stream = conn.next_stream
        conn.next_stream += 2
        env = ttrpc_pb2.Request(service=PLUGIN_SERVICE, method=method, payload=request.SerializeToString(),
                                timeout_nano=int(timeout * 1e9))
        return stream, self._message(stream, REQUEST, env.SerializeToString())

    def _expect(self, conn: _Conn, stream: int) -> asyncio.Future[bytes]:
        """Register a pending stream before its request is written, so no answer can beat it."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        conn.pending[stream] = fut
        return fut

    async def _await_response(self, conn: _Conn, fut: asyncio.Future[bytes], stream: int, method: str,
                              timeout: float, response_cls: type[R]) -> R:
        """Wait for one answer; a timeout is fatal to the connection, as in a Go runtime (nri
        ``pkg/adaptation/plugin.go: isFatalError``)."""
        try:
            data = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            conn.pending.pop(stream, None)
            self._close(conn, f"{method} timed out after {timeout}s")
            raise TimeoutError(f"plugin did not answer {method} within {timeout}s") from None
        try:
            resp = ttrpc_pb2.Response.FromString(data)
        except DecodeError:
            self._violate(f"undecodable response envelope to {method}")
            self._close(conn, f"garbage response to {method}")
            raise ConnectionError(f"garbage response to {method}") from None
        if resp.status.code != 0:
            raise TTRPCError(resp.status.code, resp.status.message)
        try:
            return response_cls.FromString(resp.payload)
        except DecodeError:
            self._violate(f"undecodable {response_cls.__name__} payload")
            raise TTRPCError(INVALID_ARGUMENT, f"undecodable {response_cls.__name__}") from None

    async def _call(self, conn: _Conn, method: str, request: Message, response_cls: type[R],
                    timeout: float | None = None) -> R:
        if conn.closed:
            raise ConnectionError("plugin connection is closed")
        timeout = self.request_timeout if timeout is None else timeout
        stream, message = self._new_request(conn, method, request, timeout)
        fut = self._expect(conn, stream)
        self._send(conn, PLUGIN_CONN, message)
        return await self._await_response(conn, fut, stream, method, timeout, response_cls)

    # ---- handshake ----------------------------------------------------------------------------------------

    async def _handshake(self, conn: _Conn) -> None:
        """RegisterPlugin (awaited) -> Configure -> Synchronize (maybe chunked) -> ready, as nri's
        ``pkg/adaptation/plugin.go``: ``plugin.start``, then ``plugin.synchronize``."""
        try:
            await asyncio.wait_for(conn.registered.wait(), self.registration_timeout)
        except TimeoutError:
            self._close(conn, "registration timeout")
            return
        if conn.registration_error:
            self._close(conn, conn.registration_error)
            return
        try:
            cfg = await self._call(conn, "Configure", api.ConfigureRequest(
                config=self.config, runtime_name="fake-containerd", runtime_version="2.1.0",
                registration_timeout=int(self.registration_timeout * 1000),
                request_timeout=int(self.request_timeout * 1000), NRI_version=self.nri_version),
                api.ConfigureResponse)
            self.configures.append(cfg)
            self.events_mask = cfg.events
            if cfg.events & ~self.valid_events:
                self._close(conn, f"invalid plugin events {cfg.events:#x}")
                return
            for chunk in self._sync_chunks():
                resp = await self._call(conn, "Synchronize", chunk, api.SynchronizeResponse)
                self.sync_responses.append(resp)
                if chunk.more and (not resp.more or len(resp.update)):
                    self._violate(f"split sync chunk answered more={resp.more} with {len(resp.update)} updates")
                    self._close(conn, "plugin does not handle split sync requests")
                    return
            conn.ready = True
        except (TTRPCError, TimeoutError, ConnectionError) as exc:
            self._close(conn, f"handshake failed: {exc}")

    def _sync_chunks(self) -> list[api.SynchronizeRequest]:
        if self.sync_chunk <= 0 or len(self.containers) <= self.sync_chunk:
            return [api.SynchronizeRequest(pods=self.pods, containers=self.containers)]
        parts = [self.containers[i:i + self.sync_chunk] for i in range(0, len(self.containers), self.sync_chunk)]
        return [api.SynchronizeRequest(pods=self.pods if i == 0 else (), containers=part, more=i < len(parts) - 1)
                for i, part in enumerate(parts)]

    # ---- calls into the plugin ----------------------------------------------------------------------------

    async def acall(self, method: str, request: Message, response_cls: type[R], timeout: float | None = None) -> R:
        """Call Plugin.<method> on the current connection; must run on the peer loop (see ``run``)."""
        return await self._call(self._current(), method, request, response_cls, timeout)

    def call(self, method: str, request: Message, response_cls: type[R], timeout: float | None = None) -> R:
        """Blocking ``acall``: raises TTRPCError on a non-OK status, TimeoutError (connection closed) on silence."""
        return self.run(self.acall(method, request, response_cls, timeout))

    def state_change(self, event: int, pod: api.PodSandbox, ctr: api.Container | None = None) -> None:
        """A raw StateChange, delivered even when the plugin did not subscribe to ``event``."""
        self.call("StateChange", api.StateChangeEvent(event=event, pod=pod, container=ctr), api.Empty)

    def _deliver(self, event: int, method: str, request: Message, response_cls: type[R],
                 pod: api.PodSandbox, ctr: api.Container | None) -> R | None:
        """Deliver one lifecycle event as the configured runtime version would.

        Unsubscribed events are skipped (returning an empty response), like a runtime does; v0.12 tries the
        dedicated RPC and falls back to StateChange on UNIMPLEMENTED; older versions only have the dedicated
        RPC for CreateContainer/UpdateContainer/StopContainer.
        """
        if not self.wait_ready(0):
            raise ConnectionError("no registered, configured and synchronized plugin connection")
        mask = self.events_mask or self.valid_events
        if not mask & (1 << (event - 1)):
            return response_cls()
        if method in ALWAYS_DEDICATED:
            return self.call(method, request, response_cls)
        if _version_at_least(self.nri_version, 0, 12):
            try:
                return self.call(method, request, response_cls)
            except TTRPCError as exc:
                if exc.code != UNIMPLEMENTED:
                    raise
        self.state_change(event, pod, ctr)
        return None

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._deliver(api.RUN_POD_SANDBOX, "RunPodSandbox", api.RunPodSandboxRequest(pod=pod),
                      api.RunPodSandboxResponse, pod, None)

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._deliver(api.STOP_POD_SANDBOX, "StopPodSandbox", api.StopPodSandboxRequest(pod=pod),
                      api.StopPodSandboxResponse, pod, None)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._deliver(api.REMOVE_POD_SANDBOX, "RemovePodSandbox", api.RemovePodSandboxRequest(pod=pod),
                      api.RemovePodSandboxResponse, pod, None)

    def create_container(self, pod: api.PodSandbox, ctr: api.Container) -> api.CreateContainerResponse:
        resp = self._deliver(api.CREATE_CONTAINER, "CreateContainer",
                             api.CreateContainerRequest(pod=pod, container=ctr), api.CreateContainerResponse, pod, ctr)
        assert resp is not None
        return resp

    def update_container(self, pod: api.PodSandbox, ctr: api.Container,
                         resources: api.LinuxResources) -> api.UpdateContainerResponse:
        resp = self._deliver(api.UPDATE_CONTAINER, "UpdateContainer",
                             api.UpdateContainerRequest(pod=pod, container=ctr, linux_resources=resources),
                             api.UpdateContainerResponse, pod, ctr)
        assert resp is not None
        return resp

    def stop_container(self, pod: api.PodSandbox, ctr: api.Container) -> api.StopContainerResponse:
        resp = self._deliver(api.STOP_CONTAINER, "StopContainer", api.StopContainerRequest(pod=pod, container=ctr),
                             api.StopContainerResponse, pod, ctr)
        assert resp is not None
        return resp

    def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self._deliver(api.START_CONTAINER, "StartContainer", api.StartContainerRequest(pod=pod, container=ctr),
                      api.StartContainerResponse, pod, ctr)

    def remove_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self._deliver(api.REMOVE_CONTAINER, "RemoveContainer", api.RemoveContainerRequest(pod=pod, container=ctr),
                      api.RemoveContainerResponse, pod, ctr)

    # ---- raw, for framing tests ---------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        """Write arbitrary bytes on the current trunk (garbage, odd conn ids, hand-made frames)."""
        async def send() -> None:
            self._current().writer.write(data)
        self.run(send())

    def call_coalesced(self, calls: list[tuple[str, Message, type[Message]]]) -> list[Message]:
        """Several requests back to back in ONE mux frame (legal for a Go mux); returns their responses."""
        async def coalesced() -> list[Message]:
            conn = self._current()
            streams, messages = zip(*(self._new_request(conn, method, req, self.request_timeout)
                                      for method, req, _ in calls), strict=False)
            futs = [self._expect(conn, s) for s in streams]
            blob = b"".join(messages)
            conn.writer.write(MUX_HEADER.pack(PLUGIN_CONN, len(blob)) + blob)
            return list(await asyncio.gather(*(
                self._await_response(conn, f, s, method, self.request_timeout, cls)
                for f, s, (method, _, cls) in zip(futs, streams, calls, strict=False))))
        return self.run(coalesced())

    def close_mid_message(self, method: str, request: Message) -> None:
        """Send a request's first half as a whole frame, then part of a second frame, then hang up."""
        async def cut() -> None:
            conn = self._current()
            _, message = self._new_request(conn, method, request, self.request_timeout)
            half = max(1, len(message) // 2)
            rest = message[half:]
            conn.writer.write(MUX_HEADER.pack(PLUGIN_CONN, half) + message[:half]
                              + MUX_HEADER.pack(PLUGIN_CONN, len(rest)) + rest[:len(rest) // 2])
            self._close(conn, "closed mid-message")
        self.run(cut())
