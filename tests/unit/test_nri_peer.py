"""Self-tests of the fake NRI runtime (doubles/nriruntime.py).

The "plugin" here is a blocking socket speaking hand-built mux + ttRPC frames (only the protobuf payloads use
the generated modules), so the peer is checked against the wire facts, not against our own plugin transport.
"""

from __future__ import annotations

import shutil
import socket
import struct
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from doubles.nriruntime import FakeRuntime, TTRPCError
from koordlet._proto.nri import api_pb2 as api
from koordlet._proto.ttrpc import ttrpc_pb2

KOORD_EVENTS = 0x8D   # RunPodSandbox | RemovePodSandbox | CreateContainer | UpdateContainer

# RegisterPlugin{koordlet_nri, 00} with a 5 s deadline, stream 1 on conn 2, byte for byte (test_nri_transport).
REGISTER_90 = (
    bytes.fromhex("00000002 00000052") + bytes.fromhex("00000048 00000001 01 00")
    + b"\x0a\x1c" + b"nri.pkg.api.v1alpha1.Runtime" + b"\x12\x0e" + b"RegisterPlugin"
    + b"\x1a\x12" + b"\x0a\x0c" + b"koordlet_nri" + b"\x12\x02" + b"00"
    + b"\x20" + bytes.fromhex("80e497d012")            # varint 5_000_000_000
)


def frame(conn: int, data: bytes) -> bytes:
    return struct.pack(">II", conn, len(data)) + data


def ttrpc(stream: int, mtype: int, data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">IIBB", len(data), stream, mtype, flags) + data


def response(payload: bytes = b"", code: int = 0) -> bytes:
    resp = ttrpc_pb2.Response(payload=payload)
    resp.status.code = code
    resp.status.SetInParent()
    return resp.SerializeToString()


def runtime_request(method: str, msg: object) -> bytes:
    return ttrpc_pb2.Request(service="nri.pkg.api.v1alpha1.Runtime", method=method,
                             payload=msg.SerializeToString(), timeout_nano=2_000_000_000).SerializeToString()


OPEN_SOCKETS: list[socket.socket] = []     # closed by the runtime fixture


class RawPlugin:
    """The smallest fake plugin: a blocking unix socket, per-conn reassembly, canned answers."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        OPEN_SOCKETS.append(self.sock)
        self.sock.settimeout(3)
        self.sock.connect(path)
        self.bufs = {1: b"", 2: b""}

    def exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def frame(self) -> tuple[int, bytes]:
        conn, length = struct.unpack(">II", self.exact(8))
        return conn, self.exact(length)

    def message(self) -> tuple[int, int, int, bytes]:
        """Next whole ttRPC message as (conn, stream, type, data)."""
        while True:
            for conn, buf in self.bufs.items():
                if len(buf) >= 10:
                    length, stream, mtype, flags = struct.unpack(">IIBB", buf[:10])
                    assert flags == 0
                    if len(buf) >= 10 + length:
                        self.bufs[conn] = buf[10 + length:]
                        return conn, stream, mtype, buf[10:10 + length]
            conn, payload = self.frame()
            self.bufs[conn] += payload

    def request(self) -> tuple[int, ttrpc_pb2.Request]:
        conn, stream, mtype, data = self.message()
        assert (conn, mtype) == (1, 1)
        return stream, ttrpc_pb2.Request.FromString(data)

    def reply(self, stream: int, payload: bytes = b"", code: int = 0) -> None:
        self.sock.sendall(frame(1, ttrpc(stream, 2, response(payload, code))))

    def register(self, name: str = "koordlet_nri", idx: str = "00") -> ttrpc_pb2.Response:
        reg = api.RegisterPluginRequest(plugin_name=name, plugin_idx=idx)
        self.sock.sendall(frame(2, ttrpc(1, 1, runtime_request("RegisterPlugin", reg))))
        conn, stream, mtype, data = self.message()
        assert (conn, stream, mtype) == (2, 1, 2)
        return ttrpc_pb2.Response.FromString(data)

    def handshake(self, events: int = KOORD_EVENTS) -> list[api.SynchronizeRequest]:
        """Answer Configure and every Synchronize chunk (echoing more); return the chunks."""
        stream, req = self.request()
        assert req.method == "Configure"
        self.reply(stream, api.ConfigureResponse(events=events).SerializeToString())
        chunks = []
        while not chunks or chunks[-1].more:
            stream, req = self.request()
            assert req.method == "Synchronize"
            chunks.append(api.SynchronizeRequest.FromString(req.payload))
            self.reply(stream, api.SynchronizeResponse(more=chunks[-1].more).SerializeToString())
        return chunks

    def at_eof(self) -> bool:
        try:
            while self.sock.recv(65536):
                pass
            return True
        except OSError:
            return False


@pytest.fixture
def runtime() -> Iterator[Callable[..., FakeRuntime]]:
    """Factory for started runtimes on a short socket path (AF_UNIX paths are limited to 107 bytes)."""
    made: list[FakeRuntime] = []
    tmp = tempfile.mkdtemp(prefix="nripeer")

    def make(**kwargs: object) -> FakeRuntime:
        rt = FakeRuntime(f"{tmp}/nri{len(made)}/nri.sock", **kwargs)
        rt.start()
        made.append(rt)
        return rt
    yield make
    for rt in made:
        rt.stop()
    while OPEN_SOCKETS:
        OPEN_SOCKETS.pop().close()
    shutil.rmtree(tmp)


def connected(rt: FakeRuntime, **handshake: int) -> RawPlugin:
    plugin = RawPlugin(rt.socket_path)
    assert plugin.register().status.code == 0
    plugin.handshake(**handshake)
    assert rt.wait_ready(2)
    return plugin


POD = api.PodSandbox(id="pod1", name="p", uid="u1", namespace="default")
CTR = api.Container(id="ctr1", pod_sandbox_id="pod1", name="c")


def test_worked_example_registers_and_configure_parses_by_hand(runtime) -> None:
    rt = runtime()
    assert len(REGISTER_90) == 90
    assert REGISTER_90[18:] == ttrpc_pb2.Request(   # the hand-written bytes are what protobuf would write
        service="nri.pkg.api.v1alpha1.Runtime", method="RegisterPlugin", timeout_nano=5_000_000_000,
        payload=api.RegisterPluginRequest(plugin_name="koordlet_nri", plugin_idx="00").SerializeToString(),
    ).SerializeToString()
    plugin = RawPlugin(rt.socket_path)
    plugin.sock.sendall(REGISTER_90)
    # Empty reply: conn 2, stream 1, Response, flags 0, explicit status {code 0} and no payload.
    assert plugin.exact(20) == bytes.fromhex("00000002 0000000c 00000002 00000001 02 00 0a00")
    conn, length = struct.unpack(">II", plugin.exact(8))
    data = plugin.exact(length)
    assert conn == 1
    assert struct.unpack(">IIBB", data[:10]) == (length - 10, 1, 1, 0)
    req = ttrpc_pb2.Request.FromString(data[10:])
    assert (req.service, req.method, req.timeout_nano) == ("nri.pkg.api.v1alpha1.Plugin", "Configure", 2_000_000_000)
    cfg = api.ConfigureRequest.FromString(req.payload)
    assert (cfg.config, cfg.runtime_name, cfg.runtime_version) == ("", "fake-containerd", "2.1.0")
    assert (cfg.registration_timeout, cfg.request_timeout, cfg.NRI_version) == (5000, 2000, "v0.11.0")
    assert (rt.registrations[0].plugin_name, rt.registrations[0].plugin_idx) == ("koordlet_nri", "00")
    plugin.sock.sendall(frame(1, ttrpc(1, 2, b"\x0a\x00\x12\x03\x10\x8d\x01")))   # ConfigureResponse{events=0x8D}
    stream, req = plugin.request()
    assert (stream, req.method) == (3, "Synchronize")
    plugin.sock.sendall(frame(1, ttrpc(3, 2, b"\x0a\x00")))
    assert rt.wait_ready(2)
    assert rt.events_mask == KOORD_EVENTS and rt.violations == [] and (rt.accepted, rt.live) == (1, 1)


def _update(n: int) -> bytes:
    return runtime_request("UpdateContainers", api.UpdateContainersRequest(
        update=[api.ContainerUpdate(container_id=f"c{i:04}") for i in range(n)]))


VIOLATIONS = {
    "big frame": (frame(2, ttrpc(3, 1, _update(600))), "> 4096"),
    "two messages": (frame(2, ttrpc(3, 1, _update(1)) + ttrpc(5, 1, _update(1))), "two ttRPC messages"),
    "tail and head": (frame(2, ttrpc(3, 1, _update(1))[:20]) + frame(2, ttrpc(3, 1, _update(1))[20:]
                                                                    + ttrpc(5, 1, _update(1))[:15]),
                      "two ttRPC messages"),
    "conn id 3": (frame(3, ttrpc(3, 1, _update(1))), "conn id 3"),
    "even stream": (frame(2, ttrpc(4, 1, _update(1))), "stream id 4"),
    "reused stream": (frame(2, ttrpc(1, 1, _update(1))), "stream id 1"),
    "request flags": (frame(2, ttrpc(3, 1, _update(1), flags=2)), "flags"),
    "response flags": (frame(1, ttrpc(3, 2, response(), flags=1)), "flags"),
    "orphan response": (frame(1, ttrpc(9, 2, response())), "no pending request"),
    "message > 4 MiB": (frame(2, struct.pack(">IIBB", (4 << 20) + 1, 3, 1, 0)), "4 MiB"),
}


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_plugin_violations_are_recorded(runtime, case: str) -> None:
    rt = runtime()
    plugin = connected(rt)
    data, needle = VIOLATIONS[case]
    plugin.sock.sendall(data)
    assert _wait(lambda: rt.violations)
    assert any(needle in v for v in rt.violations), rt.violations


def test_message_spread_over_small_frames_is_clean(runtime) -> None:
    rt = runtime()
    plugin = connected(rt)
    msg = ttrpc(3, 1, _update(2000))
    assert len(msg) > 3 * 4096
    plugin.sock.sendall(b"".join(frame(2, msg[i:i + 4096]) for i in range(0, len(msg), 4096)))
    conn, stream, mtype, data = plugin.message()
    assert (conn, stream, mtype) == (2, 3, 2) and ttrpc_pb2.Response.FromString(data).status.code == 0
    assert len(rt.updates_pushed[0].update) == 2000 and rt.violations == []


def _wait(pred: Callable[[], object], timeout: float = 2.0) -> bool:
    from tests.waits import wait_for
    return wait_for(pred, timeout)


@pytest.mark.parametrize("version,name,idx,refused", [
    ("v0.11.0", "koordlet_nri", "0", "index"),
    ("v0.11.0", "koordlet_nri", "0a", "index"),
    ("v0.11.0", "koordlet_nri", "000", "index"),
    ("v0.11.0", "", "00", "empty"),
    ("v0.12.0", "koord/nri", "00", "name"),
    ("v0.11.0", "koord/nri", "00", None),      # the charset check only exists from v0.12
])
def test_registration_validation(runtime, version: str, name: str, idx: str, refused: str | None) -> None:
    rt = runtime(nri_version=version)
    plugin = RawPlugin(rt.socket_path)
    resp = plugin.register(name, idx)
    if refused:
        assert resp.status.code != 0 and plugin.at_eof()
        assert refused in rt.closed_reasons[0] and rt.configures == []
    else:
        assert resp.status.code == 0
        plugin.handshake()
        assert rt.wait_ready(2)


def test_registration_timeout_closes(runtime) -> None:
    rt = runtime(registration_timeout=0.2)
    plugin = RawPlugin(rt.socket_path)
    assert plugin.at_eof()
    assert rt.closed_reasons == ["registration timeout"] and rt.live == 0


def test_invalid_event_bits_close(runtime) -> None:
    rt = runtime()
    plugin = RawPlugin(rt.socket_path)
    plugin.register()
    stream, _ = plugin.request()
    plugin.reply(stream, api.ConfigureResponse(events=0x800).SerializeToString())
    assert plugin.at_eof() and "invalid plugin events" in rt.closed_reasons[0]


@pytest.mark.parametrize("echo", [True, False])
def test_split_sync(runtime, echo: bool) -> None:
    ctrs = [api.Container(id=f"c{i}", pod_sandbox_id="pod1") for i in range(5)]
    rt = runtime(pods=[POD], containers=ctrs, sync_chunk=2)
    plugin = RawPlugin(rt.socket_path)
    plugin.register()
    stream, _ = plugin.request()
    plugin.reply(stream, api.ConfigureResponse().SerializeToString())
    stream, req = plugin.request()
    first = api.SynchronizeRequest.FromString(req.payload)
    assert first.more and [p.id for p in first.pods] == ["pod1"] and [c.id for c in first.containers] == ["c0", "c1"]
    plugin.reply(stream, api.SynchronizeResponse(more=echo).SerializeToString())
    if not echo:
        assert plugin.at_eof() and rt.violations and "split sync" in rt.closed_reasons[0]
        return
    chunks = [first]
    while chunks[-1].more:
        stream, req = plugin.request()
        chunks.append(api.SynchronizeRequest.FromString(req.payload))
        plugin.reply(stream, api.SynchronizeResponse(more=chunks[-1].more).SerializeToString())
    assert [len(c.containers) for c in chunks] == [2, 2, 1] and not chunks[1].pods and not chunks[2].more
    assert rt.wait_ready(2) and rt.events_mask == 0 and len(rt.sync_responses) == 3


def _frame_sizes_of_one_message(plugin: RawPlugin) -> list[int]:
    _conn, first = plugin.frame()
    sizes, total = [len(first)], struct.unpack(">I", first[:4])[0] + 10
    while sum(sizes) < total:
        sizes.append(len(plugin.frame()[1]))
    assert sum(sizes) == total
    return sizes


def test_split_modes_frame_sizes(runtime) -> None:
    rt = runtime(split=7)                           # also cuts the 10-byte ttRPC header in two
    plugin = RawPlugin(rt.socket_path)
    plugin.sock.sendall(REGISTER_90)
    assert _frame_sizes_of_one_message(plugin) == [7, 5]             # the 12-byte Empty response
    configure = _frame_sizes_of_one_message(plugin)
    assert set(configure[:-1]) == {7} and 0 < configure[-1] <= 7 and len(configure) > 10

    big = api.PodSandbox(id="big", annotations={"a": "x" * 9000})
    rt2 = runtime(pods=[big])                       # split="go": 4096, then the rest in one frame
    plugin2 = RawPlugin(rt2.socket_path)
    plugin2.register()
    stream, _ = plugin2.request()                   # a small message is one frame
    plugin2.reply(stream, api.ConfigureResponse().SerializeToString())
    _, a = plugin2.frame()
    _, b = plugin2.frame()
    assert len(a) == 4096 and len(a) + len(b) == struct.unpack(">I", a[:4])[0] + 10 and len(b) > 4096


def test_concurrent_calls_match_out_of_order(runtime) -> None:
    rt = runtime()
    plugin = connected(rt)
    with ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(rt.create_container, POD, api.Container(id=f"x{i}")) for i in range(2)]
        got = [plugin.request() for _ in range(2)]
        assert sorted(s for s, _ in got) == [5, 7]   # 1, 3 went to Configure and Synchronize
        for stream, req in reversed(got):
            ctr_id = api.CreateContainerRequest.FromString(req.payload).container.id
            plugin.reply(stream, api.CreateContainerResponse(
                update=[api.ContainerUpdate(container_id=ctr_id)]).SerializeToString())
        assert [c.result(2).update[0].container_id for c in calls] == ["x0", "x1"]
    assert rt.violations == []


@pytest.mark.parametrize("version", ["v0.11.0", "v0.12.0"])
def test_event_delivery_per_version(runtime, version: str) -> None:
    rt = runtime(nri_version=version)
    plugin = connected(rt)
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(lambda: (rt.stop_pod_sandbox(POD), rt.run_pod_sandbox(POD)))  # stop: unsubscribed
        stream, req = plugin.request()
        if version == "v0.12.0":
            assert req.method == "RunPodSandbox"
            plugin.reply(stream, code=12)
            stream, req = plugin.request()
        assert req.method == "StateChange"
        ev = api.StateChangeEvent.FromString(req.payload)
        assert ev.event == api.RUN_POD_SANDBOX and ev.pod.id == "pod1" and not ev.HasField("container")
        plugin.reply(stream)
        done.result(2)
        failing = pool.submit(rt.create_container, POD, CTR)
        stream, req = plugin.request()
        assert req.method == "CreateContainer"
        plugin.reply(stream, code=3)
        with pytest.raises(TTRPCError) as err:
            failing.result(2)
        assert err.value.code == 3


def test_timeout_closes_connection(runtime) -> None:
    rt = runtime()
    plugin = connected(rt)
    with pytest.raises(TimeoutError):
        rt.call("CreateContainer", api.CreateContainerRequest(pod=POD, container=CTR), api.CreateContainerResponse,
                timeout=0.2)
    assert plugin.at_eof() and "timed out" in rt.closed_reasons[0] and rt.live == 0
    with pytest.raises(ConnectionError):
        rt.create_container(POD, CTR)


def test_coalesced_calls_and_close_mid_message(runtime) -> None:
    rt = runtime()
    plugin = connected(rt)
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(rt.call_coalesced, [("StateChange", api.StateChangeEvent(event=1, pod=POD), api.Empty)] * 2)
        conn, payload = plugin.frame()
        length = struct.unpack(">I", payload[:4])[0]
        assert conn == 1 and len(payload) == 2 * (10 + length)
        for stream in (5, 7):
            plugin.reply(stream)
        assert len(done.result(2)) == 2
    rt.close_mid_message("StateChange", api.StateChangeEvent(event=1, pod=POD))
    conn, first = plugin.frame()
    assert struct.unpack(">I", first[:4])[0] + 10 > len(first)
    assert plugin.at_eof() and rt.closed_reasons == ["closed mid-message"]


def test_drop_restart_and_connection_counts(runtime) -> None:
    rt = runtime()
    plugin = connected(rt)
    rt.drop()
    assert plugin.at_eof() and not rt.wait_ready(0)
    plugin = connected(rt)
    rt.restart()
    assert plugin.at_eof()
    connected(rt)
    assert (rt.accepted, rt.live, rt.max_live) == (3, 1, 1)
    assert rt.closed_reasons == ["dropped by runtime", "runtime restart"]
