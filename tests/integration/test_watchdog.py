"""The real daemon under systemd's notification protocol, with two of its loops frozen by the kernel.

systemd's side is a bound AF_UNIX datagram socket given as ``$NOTIFY_SOCKET`` with ``$WATCHDOG_USEC``, as
systemd gives a ``Type=notify`` unit with ``WatchdogSec=``. A loop is frozen the way a hung filesystem freezes it:
the file it reads next (``/proc/stat`` under the fake proc root for the usage collector, the pods file for pod
sync) is replaced by a FIFO with no writer, so open(2) blocks in the kernel until the test opens the other end.
Nothing in the agent is patched; the deadlines are the agent's own (STALL_FLOOR for 1 s periods).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import yaml

from koordlet.component import STALL_FLOOR
from koordlet.host.cgroup import CgroupVersion, Driver, KubeQOS
from tests.builders import pod_object
from tests.fakehost import CgroupValues, FakeHost
from tests.waits import wait_for

A = "a" * 64
PING_USEC = 1_000_000          # WatchdogSec=1s: the agent pings every 0.5 s while it may


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


@dataclass
class SystemdSide:
    """What systemd would receive: every datagram, with the monotonic time it arrived."""

    sock: socket.socket
    received: list[tuple[float, list[str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            with self.lock:
                self.received.append((time.monotonic(), data.decode().splitlines()))

    def lines(self, since: float = 0.0) -> list[str]:
        with self.lock:
            return [line for t, lines in self.received if t >= since for line in lines]

    def pings(self, since: float = 0.0) -> int:
        return self.lines(since).count("WATCHDOG=1")


class Freeze:
    """``path`` becomes a FIFO nobody writes to: the next open(2) of it blocks. :meth:`release` puts a regular
    file with ``content`` back and hands the blocked reader the same content, so the loop goes on."""

    def __init__(self, path: str, content: str) -> None:
        self.path, self.content = path, content
        fifo = path + ".fifo"
        os.mkfifo(fifo)
        os.replace(fifo, path)

    def release(self) -> None:
        writer = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)   # the blocked reader is the FIFO's reader
        staged = self.path + ".new"
        with open(staged, "w") as f:
            f.write(self.content)
        os.replace(staged, self.path)                               # later opens read a regular file again
        try:
            os.write(writer, self.content.encode())
        finally:
            os.close(writer)                                        # EOF for the reader


@pytest.fixture
def agent(tmp_path) -> Iterator[tuple[subprocess.Popen[str], str, SystemdSide, FakeHost, str]]:
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                 {A: CgroupValues(cpu_ns=1, anon=60 << 20)})
    pods = str(tmp_path / "pods.yaml")
    with open(pods, "w") as f:
        f.write(yaml.safe_dump([pod_object("uid-web", "web", namespace="shop", containers={"app": A})]))
    short = tempfile.mkdtemp(prefix="sdn")            # unix socket paths must stay under 108 bytes
    notify_path = os.path.join(short, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    side = SystemdSide(sock)
    reader = threading.Thread(target=side.run, daemon=True)
    reader.start()
    port = free_port()
    env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC=str(PING_USEC))
    cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
           "--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", host.paths.proc_root,
           "--pods-file", pods, "--addr", f"127.0.0.1:{port}", "--tsdb-path", str(tmp_path / "cache"),
           "--collect-res-used-interval", "1s", "--kubelet-sync-interval", "1s",
           "--enable-nri-runtime-hook=false"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)
    try:
        yield proc, f"http://127.0.0.1:{port}", side, host, pods
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        sock.close()
        os.unlink(notify_path)
        os.rmdir(short)


def test_a_frozen_loop_stops_the_watchdog_fails_health_and_readiness_and_all_come_back(agent):
    proc, base, side, host, pods = agent
    assert wait_for(lambda: get(base + "/readyz")[0] == 200, 30), \
        proc.stderr.read() if proc.poll() is not None else get(base + "/readyz")
    # READY=1 follows the server's start (the HTTP thread may answer a moment before it is sent)
    assert wait_for(lambda: "READY=1" in side.lines(), 10), side.lines()
    assert wait_for(lambda: side.pings() >= 2, 10), side.lines()
    assert get(base + "/healthz") == (200, "ok\n")
    assert wait_for(lambda: any(line.startswith("STATUS=running:") for line in side.lines()), 10), side.lines()

    with open(host.paths.proc("stat")) as f:
        stat = f.read()
    with open(pods) as f:
        pods_text = f.read()
    frozen = [Freeze(host.paths.proc("stat"), stat), Freeze(pods, pods_text)]
    frozen_at = time.monotonic()
    try:
        # both loops are past their deadline (STALL_FLOOR for 1 s periods) after a little more than the floor
        def stuck() -> bool:
            status, body = get(base + "/healthz")
            return status == 503 and "usage" in body and "pods" in body
        assert wait_for(stuck, STALL_FLOOR * 6, step=0.2), get(base + "/healthz")
        red_at = time.monotonic()
        # not before the deadline, counted from the loops' last iteration (at most one 1 s period before the freeze)
        assert red_at - frozen_at >= STALL_FLOOR - 1.0
        status, body = get(base + "/healthz")
        assert body.startswith("stuck loops: ")
        status, body = get(base + "/readyz")
        assert status == 503
        assert "no pod sync from standalone for" in body and "no collection cycle for" in body
        # the watchdog is withheld: no WATCHDOG=1 over eight ping intervals (after a grace of three for a ping the
        # agent decided on just before the deadline), and STATUS says why
        time.sleep(8 * PING_USEC / 2e6)
        assert side.pings(since=red_at + 3 * PING_USEC / 2e6) == 0, side.lines(red_at)
        assert any(line.startswith("STATUS=stuck loops:") and "watchdog withheld" in line
                   for line in side.lines(red_at)), side.lines(red_at)
        assert proc.poll() is None and get(base + "/metrics")[0] == 200   # the rest of the agent still serves
    finally:
        for f in frozen:
            f.release()

    # nothing latches: readiness, health and the pings come back once the loops make progress again
    assert wait_for(lambda: get(base + "/readyz")[0] == 200, 30), get(base + "/readyz")
    assert get(base + "/healthz") == (200, "ok\n")
    back = time.monotonic()
    assert wait_for(lambda: side.pings(since=back) >= 2, 10), side.lines(back)
    def last_status() -> str:
        return [line for line in side.lines() if line.startswith("STATUS=")][-1]
    assert wait_for(lambda: last_status().startswith("STATUS=running:"), 10), last_status()

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    stopping = [lines for _, lines in side.received if "STOPPING=1" in lines]
    assert stopping and stopping[0][1].startswith("STATUS=stopping")
