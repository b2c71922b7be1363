"""The trunk gives up on a frame that never completes, and a re-created runtime socket is noticed by inotify whatever
its inode number. (The plugin-level behaviour is in tests/integration/test_nri_reconnect.py.)"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import time

import pytest

from nri_plugin import socketwatch
from nri_plugin.socketwatch import SocketWatch
from nri_plugin.transport import ttrpc
from nri_plugin.transport.mux import Mux
from nri_plugin.transport.ttrpc import Channel, Decoder

MUX = struct.Struct(">II")
TTRPC = struct.Struct(">IIBB")
MIB3 = 3 << 20


def test_decoder_reports_its_partial_message_and_when_it_began():
    d = Decoder()
    assert d.partial() is None
    before = time.monotonic()
    assert d.feed(TTRPC.pack(MIB3, 7, ttrpc.TYPE_RESPONSE, 0) + b"abc") == []
    since, what = d.partial()
    assert since >= before and what == "ttrpc message of 3145728 bytes (stream 7, type 2), 3 received"
    assert d.feed(b"x" * 100) == [] and d.partial()[0] == since          # progress does not restart the clock
    whole = ttrpc.encode(9, ttrpc.TYPE_RESPONSE, b"ok")
    d2 = Decoder()
    d2.feed(whole[:4])
    assert d2.partial()[1] == "4 of 10 ttrpc header bytes"
    first = d2.partial()[0]
    (msg,) = d2.feed(whole[4:] + whole[:3])                               # one completes, the next begins
    assert msg.data == b"ok" and d2.partial()[0] >= first and d2.partial()[1] == "3 of 10 ttrpc header bytes"
    assert [m.data for m in d2.feed(whole[3:])] == [b"ok"] and d2.partial() is None


async def _trunk(timeout: float) -> tuple[Mux, socket.socket]:
    """A Mux on one end of a socketpair; the other end is the 'runtime' the test writes with."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    _, mux = await asyncio.get_running_loop().create_unix_connection(lambda: Mux(timeout, peer="test-peer"),
                                                                     sock=ours)
    return mux, theirs


def test_a_mux_header_followed_by_silence_closes_the_trunk_after_the_timeout(caplog):
    async def main() -> tuple[str, float]:
        mux, peer = await _trunk(0.3)
        mux.open(1, lambda payload: None)
        started = time.monotonic()
        peer.sendall(MUX.pack(1, MIB3) + b"y" * 1000)
        reason = await asyncio.wait_for(mux.closed, 30)
        peer.close()
        return reason, time.monotonic() - started

    with caplog.at_level(logging.WARNING, logger="nri_plugin"):
        reason, took = asyncio.run(main())
    assert took >= 0.3, "closed before the partial frame was due"
    assert reason.startswith("stalled: mux frame of 3145728 bytes on conn 1, 1000 received")
    (line,) = [r.getMessage() for r in caplog.records if "partial frame" in r.getMessage()]
    assert "peer=test-peer" in line and "mux frame of 3145728 bytes on conn 1" in line


def test_a_ttrpc_header_followed_by_silence_closes_the_trunk_and_names_the_conn():
    async def main() -> str:
        mux, peer = await _trunk(0.3)
        runtime = Channel(lambda data: None, name="runtime")
        mux.open(2, runtime.feed, runtime.partial)
        header = TTRPC.pack(MIB3, 1, ttrpc.TYPE_RESPONSE, 0)
        peer.sendall(MUX.pack(2, len(header)) + header)        # the frame is whole; the message inside is not
        reason = await asyncio.wait_for(mux.closed, 30)
        peer.close()
        return reason

    reason = asyncio.run(main())
    assert reason.startswith("stalled: conn 2: ttrpc message of 3145728 bytes (stream 1, type 2), 0 received")


def test_frames_that_each_complete_in_time_never_trip_the_deadline():
    """Ten frames, each split in two with a pause between the halves: the trunk stays up for longer than the
    timeout in all, because the clock is per frame, from its first byte, not per connection."""
    timeout, pause = 0.5, 0.1

    async def main() -> tuple[bool, float, float]:
        mux, peer = await _trunk(timeout)
        got: list[bytes] = []
        mux.open(1, got.append)
        started, worst = time.monotonic(), 0.0
        for i in range(10):
            frame = MUX.pack(1, 64) + bytes([i]) * 64
            peer.sendall(frame[:20])
            began = time.monotonic()
            await asyncio.sleep(pause)
            peer.sendall(frame[20:])
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - began)
        await asyncio.sleep(pause)
        alive = not mux.closed.done() and len(got) == 10
        peer.close()
        return alive, time.monotonic() - started, worst

    alive, total, worst = asyncio.run(main())
    if worst >= timeout * 0.8:
        pytest.skip(f"host too loaded to keep one frame under the {timeout}s deadline (worst {worst:.2f}s)")
    assert total > timeout and alive


def _bind(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    return s


async def _changed(watch: SocketWatch, within: float) -> bool:
    try:
        await asyncio.wait_for(watch.changed.wait(), within)
    except TimeoutError:
        return False
    return True


def test_socket_watch_sees_a_socket_recreated_at_the_same_path(tmp_path):
    path = str(tmp_path / "nri.sock")

    async def main() -> None:
        first = _bind(path)
        watch = SocketWatch(path)
        watch.reset()
        assert watch.watching and not watch.changed.is_set()
        first.close()
        os.unlink(path)
        other = _bind(str(tmp_path / "other.sock"))             # another name in the same directory: not news
        assert not await _changed(watch, 0.2)
        second = _bind(path)                                    # same path; on ext4 usually the same inode too
        assert await _changed(watch, 10)
        watch.reset()
        assert not watch.changed.is_set()
        staged = _bind(str(tmp_path / "staged.sock"))
        os.rename(tmp_path / "staged.sock", path)               # renamed into place
        assert await _changed(watch, 10)
        watch.reset()
        os.chmod(path, 0o600)                                   # a chmod after listen
        assert await _changed(watch, 10)
        watch.close()
        for s in (other, second, staged):
            s.close()
    asyncio.run(main())


def test_socket_watch_arms_once_the_directory_exists_and_falls_back_without_inotify(tmp_path, monkeypatch, caplog):
    path = str(tmp_path / "nri" / "nri.sock")

    async def late_directory() -> None:
        watch = SocketWatch(path)
        watch.reset()
        assert not watch.watching and not watch.arm()
        os.mkdir(tmp_path / "nri")
        assert watch.arm() and watch.watching
        s = _bind(path)
        assert await _changed(watch, 10)
        watch.close()
        s.close()
    asyncio.run(late_directory())

    def no_inotify() -> None:
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(socketwatch, "Inotify", no_inotify)

    async def without() -> None:
        watch = SocketWatch(path)
        watch.reset()
        assert not watch.watching and not watch.arm()
        watch.close()
    with caplog.at_level(logging.WARNING, logger="nri_plugin"):
        asyncio.run(without())
    (line,) = [r.getMessage() for r in caplog.records]
    assert "socket watch unavailable" in line and "Too many open files" in line
