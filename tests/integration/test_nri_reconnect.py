"""The NRI plugin against the runtime-side peer over a real unix socket: a runtime that comes back with its socket
re-created at the same path is connected at once, also when the inode number is unchanged (ext4 reuses it), and a
runtime that starts a frame and goes silent is dropped after the partial-frame timeout and reconnected, while hooks on
the other conn keep answering.

Timing is relative: "at once" is a small fraction of a 60 s back-off, "after the timeout" is a lower bound."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator

import pytest

from doubles.nriruntime import FakeRuntime
from nri_plugin import plugin as plugin_mod
from nri_plugin import socketwatch
from nri_plugin.plugin import NRIPlugin
from tests.integration.test_nri_plugin import BE, Harness, metric
from tests.unit.test_nri_hooks import container
from tests.waits import wait_for

BACKOFF = 60.0
PROMPT = BACKOFF / 4          # "at once": well inside the back-off, generous for a loaded 2-core host
MUX = struct.Struct(">II")
TTRPC = struct.Struct(">IIBB")
MIB3 = 3 << 20


@pytest.fixture
def h(tmp_path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def same_inode_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every socket at the path looks like the old one to the stat poll, as a re-created socket on ext4 does."""
    monkeypatch.setattr(plugin_mod, "_socket_id", lambda path: (1, 1) if os.path.lexists(path) else None)


def no_inotify(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable() -> None:
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(socketwatch, "Inotify", unavailable)


def crashed_and_waiting(h: Harness, rt: FakeRuntime, plugin: NRIPlugin) -> None:
    """The runtime dies leaving its socket file; the plugin has seen EOF and sits in its 60 s back-off."""
    rt.crash()
    assert wait_for(lambda: metric(h.metrics, "koordlet_nri_reconnects_total", reason="eof") == 1, 20)
    assert not plugin.connected


def test_a_socket_recreated_with_the_same_inode_is_connected_on_the_inotify_event(h, monkeypatch):
    same_inode_always(monkeypatch)
    rt = h.runtime()
    plugin = h.plugin(backoff_initial=BACKOFF, backoff_max=BACKOFF)
    assert rt.wait_ready(20)
    crashed_and_waiting(h, rt, plugin)
    rt.recover()
    started = time.monotonic()
    assert rt.wait_ready(PROMPT), "waited for the back-off: the re-created socket went unnoticed"
    print(f"registered {(time.monotonic() - started) * 1000:.0f} ms after the socket was re-created")
    assert rt.accepted == 2 and plugin.registrations == 2 and rt.max_live == 1 and rt.violations == []
    assert rt.create_container(BE, container(BE, "app")).adjust.linux.resources.cpu.shares.value == 512


def test_control_without_inotify_the_same_inode_goes_unnoticed(h, monkeypatch):
    """The control for the test above: with only the stat poll, the same scenario waits for the back-off, so
    the prompt reconnect there is the inotify event's doing."""
    same_inode_always(monkeypatch)
    no_inotify(monkeypatch)
    rt = h.runtime()
    plugin = h.plugin(backoff_initial=BACKOFF, backoff_max=BACKOFF)
    assert rt.wait_ready(20)
    crashed_and_waiting(h, rt, plugin)
    rt.recover()
    assert not rt.wait_ready(2.0) and rt.accepted == 1


def test_a_socket_bound_before_it_listens_is_retried_at_once_not_after_the_backoff(h, monkeypatch):
    """A runtime binds, then listens: woken by the bind, the plugin may be refused, and then looks again within
    its settle window instead of backing off for 60 s."""
    same_inode_always(monkeypatch)
    rt = h.runtime()
    plugin = h.plugin(backoff_initial=BACKOFF, backoff_max=BACKOFF, socket_settle=5.0)
    assert rt.wait_ready(20)
    crashed_and_waiting(h, rt, plugin)
    rt.recover(listen_delay=0.5)
    assert rt.wait_ready(PROMPT), "a refusal right after the socket appeared sent the plugin into its back-off"
    refused = metric(h.metrics, "koordlet_nri_reconnects_total", reason="refused")
    print(f"refused {refused:.0f} times between bind and listen")      # 0 only when the host was slower than 0.5 s
    assert plugin.registrations == 2 and rt.max_live == 1


def _tmpfs_dir() -> str:
    with open("/proc/mounts") as f:
        tmpfs = [line.split()[1] for line in f if line.split()[2] == "tmpfs"]
    if "/dev/shm" not in tmpfs or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable tmpfs at /dev/shm")
    return tempfile.mkdtemp(prefix="nri", dir="/dev/shm")


@pytest.mark.parametrize("watch", ["inotify", "stat-poll-only"])
def test_on_tmpfs_a_new_inode_is_noticed_either_way(h, monkeypatch, watch):
    """tmpfs numbers inodes afresh, so the stat poll alone (no inotify) sees the new socket too."""
    if watch == "stat-poll-only":
        no_inotify(monkeypatch)
    shutil.rmtree(h.dir)
    h.dir = _tmpfs_dir()                              # removed by Harness.close
    h.socket = os.path.join(h.dir, "nri", "nri.sock")
    rt = h.runtime()
    plugin = h.plugin(backoff_initial=BACKOFF, backoff_max=BACKOFF)
    assert rt.wait_ready(20)
    old = os.stat(h.socket).st_ino
    crashed_and_waiting(h, rt, plugin)
    rt.recover()
    if os.stat(h.socket).st_ino == old:
        pytest.skip("this tmpfs reused the inode number")
    assert rt.wait_ready(PROMPT), f"the new socket went unnoticed ({watch})"
    assert plugin.registrations == 2 and rt.max_live == 1


def test_a_frame_header_then_silence_drops_the_runtime_after_the_timeout_and_reconnects(h, caplog):
    rt = h.runtime()
    plugin = h.plugin(partial_frame_timeout=0.5, backoff_initial=0.1)
    assert rt.wait_ready(20)
    with caplog.at_level(logging.INFO, logger="nri_plugin"):
        started = time.monotonic()
        rt.send_raw(MUX.pack(1, MIB3) + b"z" * 512)                 # 3 MiB announced, 512 bytes sent
        assert wait_for(lambda: rt.accepted == 2 and rt.wait_ready(0), 20), rt.closed_reasons
    assert time.monotonic() - started >= 0.5, "dropped before the frame was due"
    stalls = [r.getMessage() for r in caplog.records if "partial frame" in r.getMessage()]
    assert len(stalls) == 1 and f"peer={h.socket}" in stalls[0]
    assert "mux frame of 3145728 bytes on conn 1, 512 received" in stalls[0]
    assert metric(h.metrics, "koordlet_nri_reconnects_total", reason="partial_timeout") == 1
    assert plugin.registrations == 2 and rt.max_live == 1 and rt.violations == []


def test_hooks_keep_answering_while_the_other_conn_holds_a_partial_message(h, caplog):
    """A ttRPC header announcing 3 MiB on conn 2 (the runtime's answers to us) and then nothing: CreateContainer on
    conn 1 is still answered in full meanwhile, and the trunk is dropped once the message is overdue."""
    rt = h.runtime()
    plugin = h.plugin(backoff_initial=0.1)                          # the default 5 s partial-frame timeout
    assert rt.wait_ready(20)
    header = TTRPC.pack(MIB3, 99, 2, 0)
    with caplog.at_level(logging.INFO, logger="nri_plugin"):
        started = time.monotonic()
        rt.send_raw(MUX.pack(2, len(header)) + header)
        resp = rt.create_container(BE, container(BE, "app"))
        assert wait_for(lambda: rt.accepted == 2 and rt.wait_ready(0), 30), rt.closed_reasons
    assert resp.adjust.linux.resources.cpu.shares.value == 512
    assert time.monotonic() - started >= 5.0
    (stall,) = [r.getMessage() for r in caplog.records if "partial frame" in r.getMessage()]
    assert "conn 2: ttrpc message of 3145728 bytes (stream 99, type 2), 0 received" in stall
    assert metric(h.metrics, "koordlet_nri_hook_errors_total", hook="CreateContainer", reason="timeout") == 0
    assert plugin.registrations == 2 and rt.max_live == 1
