"""nri_plugin.transport: mux frames and ttRPC messages, byte for byte as containerd/nri pkg/net/multiplex/mux.go and
containerd/ttrpc PROTOCOL.md lay them out."""

import asyncio
import struct

import pytest

from koordlet._proto.nri import api_pb2 as api
from koordlet._proto.ttrpc import ttrpc_pb2
from nri_plugin.transport import mux, ttrpc
from nri_plugin.transport.mux import ProtocolError
from nri_plugin.transport.ttrpc import Channel, Code, Decoder, TTRPCError


def test_register_plugin_worked_example():
    """Registering as 00-koordlet_nri with a 5 s deadline is 90 bytes on the trunk: mux header, ttRPC header, the
    Request envelope."""
    payload = api.RegisterPluginRequest(plugin_name="koordlet_nri", plugin_idx="00").SerializeToString()
    assert payload == b"\x0a\x0ckoordlet_nri\x12\x0200"
    req = ttrpc_pb2.Request(service="nri.pkg.api.v1alpha1.Runtime", method="RegisterPlugin", payload=payload,
                            timeout_nano=5_000_000_000).SerializeToString()
    wire = mux.frames(mux.RUNTIME_CONN, ttrpc.encode(1, ttrpc.TYPE_REQUEST, req))
    assert len(wire) == 90
    assert wire[:8] == bytes.fromhex("00000002 00000052")
    assert wire[8:18] == bytes.fromhex("00000048 00000001 01 00")
    assert wire[18:48] == b"\x0a\x1cnri.pkg.api.v1alpha1.Runtime"
    assert wire[48:64] == b"\x12\x0eRegisterPlugin"
    assert wire[64:84] == b"\x1a\x12" + payload


def _split(wire: bytes) -> list[tuple[int, bytes]]:
    out, off = [], 0
    while off < len(wire):
        conn, n = struct.unpack_from(">II", wire, off)
        out.append((conn, wire[off + 8:off + 8 + n]))
        off += 8 + n
    return out


@pytest.mark.parametrize("size,expect", [(0, [0]), (4096, [4096]), (4097, [4096, 1]),
                                         (10_000, [4096, 4096, 1808])])
def test_frames_never_exceed_4096(size, expect):
    message = bytes(range(256)) * (size // 256) + bytes(size % 256)
    parts = _split(mux.frames(1, message))
    assert [len(p) for _, p in parts] == expect
    assert {c for c, _ in parts} == {1}
    assert b"".join(p for _, p in parts) == message


def _msgs(*items: tuple[int, bytes]) -> bytes:
    return b"".join(ttrpc.encode(sid, ttrpc.TYPE_REQUEST, data) for sid, data in items)


def test_decoder_any_split_point():
    stream = _msgs((1, b"hello"), (3, b""), (5, b"x" * 300))
    for cut in range(1, len(stream)):
        d = Decoder()
        got = d.feed(stream[:cut]) + d.feed(stream[cut:])
        assert [(m.stream_id, m.data) for m in got] == [(1, b"hello"), (3, b""), (5, b"x" * 300)]


def test_decoder_byte_by_byte_and_back_to_back():
    stream = _msgs((1, b"a" * 20), (3, b"b" * 7))
    d = Decoder()
    got = [m for i in range(len(stream)) for m in d.feed(stream[i:i + 1])]
    assert [m.data for m in got] == [b"a" * 20, b"b" * 7]
    assert [m.data for m in Decoder().feed(stream)] == [b"a" * 20, b"b" * 7]


def test_decoder_discards_oversized_message_and_resyncs():
    big = ttrpc.MAX_DATA + 100
    stream = struct.pack(">IIBB", big, 7, ttrpc.TYPE_REQUEST, 0) + b"z" * big + _msgs((9, b"after"))
    d = Decoder()
    got = []
    for off in range(0, len(stream), 65536):
        got += d.feed(stream[off:off + 65536])
    assert [(m.stream_id, m.data) for m in got] == [(7, None), (9, b"after")]


def test_decoder_garbage_header_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        Decoder().feed(b"\xff\xff\xff\xff" + b"\x00" * 20)


def test_encode_refuses_over_4mib():
    with pytest.raises(TTRPCError) as e:
        ttrpc.encode(1, ttrpc.TYPE_REQUEST, bytes(ttrpc.MAX_DATA + 1))
    assert e.value.code == Code.RESOURCE_EXHAUSTED


class _Pipe:
    """Two Channels wired back to back in memory (client <-> server), to test dispatch without sockets."""

    def __init__(self, services):
        self.sent_by_client: list[bytes] = []
        self.sent_by_server: list[bytes] = []
        self.server = Channel(self._to_client, services)
        self.client = Channel(self._to_server)

    def _to_client(self, data: bytes) -> None:
        self.sent_by_server.append(data)
        asyncio.get_running_loop().call_soon(self.client.feed, data)

    def _to_server(self, data: bytes) -> None:
        self.sent_by_client.append(data)
        asyncio.get_running_loop().call_soon(self.server.feed, data)


def test_dispatch_status_codes():
    async def echo(payload, deadline):
        return payload + b"!" + str(round(deadline or 0)).encode()

    async def refuse(payload, deadline):
        raise TTRPCError(Code.NOT_FOUND, "nope")

    async def broken(payload, deadline):
        raise RuntimeError("bug")

    async def main():
        p = _Pipe({"svc": {"Echo": echo, "Refuse": refuse, "Broken": broken}})
        assert await p.client.call("svc", "Echo", b"hi", 3.0) == b"hi!3"
        for method, service, code in [("Missing", "svc", Code.UNIMPLEMENTED), ("Echo", "other", Code.UNIMPLEMENTED),
                                      ("Refuse", "svc", Code.NOT_FOUND), ("Broken", "svc", Code.INTERNAL)]:
            with pytest.raises(TTRPCError) as e:
                await p.client.call(service, method, b"", 1.0)
            assert e.value.code == code
        # client stream ids: 1, 3, 5, ...; every response carries the request's id, flags 0
        sids = [struct.unpack_from(">IIBB", m)[1] for m in p.sent_by_client]
        assert sids == [1, 3, 5, 7, 9]
        assert [struct.unpack_from(">IIBB", m)[1:] for m in p.sent_by_server] == [(s, 2, 0) for s in sids]
    asyncio.run(main())


def test_server_rejects_even_and_reused_stream_ids():
    async def ok(payload, deadline):
        return b"ok"

    async def main():
        replies: list[bytes] = []
        server = Channel(replies.append, {"svc": {"M": ok}})
        req = ttrpc_pb2.Request(service="svc", method="M").SerializeToString()
        for sid in (2, 5, 3, 7):
            server.feed(ttrpc.encode(sid, ttrpc.TYPE_REQUEST, req))
        await asyncio.sleep(0.01)
        codes = {}
        for r in replies:
            _, sid, _, _ = struct.unpack_from(">IIBB", r)
            codes[sid] = ttrpc_pb2.Response.FromString(r[10:]).status.code
        assert codes == {2: Code.INVALID_ARGUMENT, 5: Code.OK, 3: Code.INVALID_ARGUMENT, 7: Code.OK}
    asyncio.run(main())


def test_out_of_order_responses_are_matched_by_stream_id():
    async def main():
        sent: list[bytes] = []
        client = Channel(sent.append)
        first = asyncio.ensure_future(client.call("s", "A", b"", 1.0))
        second = asyncio.ensure_future(client.call("s", "B", b"", 1.0))
        await asyncio.sleep(0)
        for sid, body in ((3, b"second"), (1, b"first")):
            client.feed(ttrpc.encode(sid, ttrpc.TYPE_RESPONSE, ttrpc_pb2.Response(payload=body).SerializeToString()))
        assert (await first, await second) == (b"first", b"second")
    asyncio.run(main())


def test_call_times_out_and_close_fails_pending():
    async def main():
        client = Channel(lambda data: None)
        with pytest.raises(TTRPCError) as e:
            await client.call("s", "M", b"", 0.01)
        assert e.value.code == Code.DEADLINE_EXCEEDED
        pending = asyncio.ensure_future(client.call("s", "M", b"", 5.0))
        await asyncio.sleep(0)
        client.close("gone")
        with pytest.raises(ConnectionError):
            await pending
    asyncio.run(main())
