"""Health, readiness and the systemd watchdog: the one rule (``component.assess``, pure), the loops' progress stamps
that feed it, and the notifier that speaks systemd's protocol over a real datagram socket."""

from __future__ import annotations

import os
import socket
import tempfile
import threading

import pytest

from koordlet.component import (
    STALL_FLOOR,
    STALL_PERIODS,
    UNHEALTHY_AFTER,
    Loops,
    LoopState,
    assess,
    stall_deadline,
)
from koordlet.host.sdnotify import Notifier, socket_address, watchdog_interval
from koordlet.ops.metrics import AgentMetrics
from tests.waits import wait_for

REQUIRED = (("pods", "pod sync"), ("usage", "collection cycle"))


def fine(name: str, deadline: float | None = 10.0) -> LoopState:
    return LoopState(name, deadline, since_progress=0.5, since_success=0.5)


# --- the rule ----------------------------------------------------------------------------------------------------


def test_every_loop_progressing_is_healthy_ready_and_pings():
    v = assess([fine("pods"), fine("usage"), fine("qos"), fine("report", 300.0), fine("watch-node", None)], REQUIRED)
    assert (v.healthy, v.ready, v.progressing) == (True, True, True)
    assert (v.health, v.readiness) == ("ok", "ok")
    assert v.status == "running: 5 loops progressing"


def test_a_loop_past_its_deadline_is_stuck_healthz_red_and_no_watchdog():
    stuck = LoopState("usage", 10.0, since_progress=10.5, since_success=10.5)
    v = assess([fine("pods"), stuck, fine("qos")], REQUIRED)
    assert not v.healthy and not v.progressing
    assert v.health == "stuck loops: usage (no progress for 10.5s, deadline 10s)"
    assert not v.ready and v.readiness == "no collection cycle for 10.5s (deadline 10s)"
    assert v.status == "stuck loops: usage (no progress for 10.5s, deadline 10s); watchdog withheld"


def test_a_loop_within_its_deadline_is_not_stuck_whatever_its_age():
    slow = LoopState("report", 300.0, since_progress=299.0, since_success=299.0)
    assert assess([slow], REQUIRED).progressing


def test_unwatched_loops_may_wait_forever():
    """A watch blocks until the API server sends something: no deadline, never stuck."""
    watch = LoopState("watch-nodeslo", None, since_progress=86400.0, since_success=None)
    v = assess([fine("pods"), fine("usage"), watch], REQUIRED)
    assert v.healthy and v.ready and v.progressing


def test_a_loop_that_keeps_failing_but_iterates_is_unhealthy_not_stuck():
    """The kubelet down: restarting the agent would not bring it back, so the watchdog goes on; /healthz says
    which loop fails and /readyz that pod sync has not succeeded for a while."""
    pods = LoopState("pods", 50.0, since_progress=1.0, since_success=80.0, failures=UNHEALTHY_AFTER)
    v = assess([pods, fine("usage")], REQUIRED)
    assert v.progressing
    assert (v.healthy, v.health) == (False, "failing loops: pods")
    assert (v.ready, v.readiness) == (False, "no pod sync for 80.0s (deadline 50s)")


def test_readiness_needs_a_first_success_then_fresh_successes_and_comes_back():
    never = LoopState("pods", 50.0, since_progress=0.1, since_success=None)
    assert assess([never, fine("usage")], REQUIRED).readiness == "no pod sync completed yet"
    stale = LoopState("pods", 50.0, since_progress=0.1, since_success=51.0)
    assert not assess([stale, fine("usage")], REQUIRED).ready        # it does not latch
    assert assess([fine("pods", 50.0), fine("usage")], REQUIRED).ready


def test_readiness_ignores_loops_this_agent_does_not_run_and_needs_some_loop():
    """Collection off: no usage loop, so readiness rests on the pods alone; before start, nothing is ready."""
    assert assess([fine("pods")], REQUIRED).ready
    v = assess([], REQUIRED)
    assert (v.ready, v.readiness, v.healthy) == (False, "not started", True)


def test_stuck_and_failing_are_both_reported():
    v = assess([LoopState("qos", 10.0, 30.0, 30.0), LoopState("psi", 50.0, 1.0, 99.0, failures=5)], ())
    assert v.health == "stuck loops: qos (no progress for 30.0s, deadline 10s); failing loops: psi"


def test_the_deadline_is_periods_with_a_floor():
    assert stall_deadline(1.0) == STALL_FLOOR
    assert stall_deadline(60.0) == STALL_PERIODS * 60.0


# --- the stamps ----------------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_loops_stamp_progress_and_success_and_the_snapshot_ages_them():
    clock, stop = Clock(), threading.Event()
    loops = Loops(stop, AgentMetrics("n"), clock=clock)
    loops.forever("pods", lambda s: s.wait(), period=10.0)
    loops.forever("watch-node", lambda s: s.wait())
    loops.start()
    try:
        clock.now += 3.0
        loops.beat("pods", ok=False)                   # a failed sync: alive, not fresh
        clock.now += 2.0
        states = {s.name: s for s in loops.states()}
        assert states["pods"] == LoopState("pods", 5 * 10.0, since_progress=2.0, since_success=None)
        assert states["watch-node"].deadline is None
        loops.beat("pods")
        clock.now += 60.0
        v = assess(loops.states(), (("pods", "pod sync"),))
        assert not v.progressing and v.health == "stuck loops: pods (no progress for 60.0s, deadline 50s)"
        loops.beat("not-a-loop")                       # a one-shot run has no loops: a no-op
    finally:
        stop.set()
        loops.join(5)


def test_a_periodic_step_that_blocks_stops_progress_and_one_that_raises_does_not():
    """The real threads: a step blocked on an event never returns (stuck after its deadline); a step that raises
    each time still completes iterations (failing, not stuck)."""
    clock, stop, release = Clock(), threading.Event(), threading.Event()
    loops = Loops(stop, AgentMetrics("n"), clock=clock)
    entered = threading.Event()

    def blocked() -> None:
        entered.set()
        release.wait()

    def broken() -> None:
        raise OSError("unreadable")

    loops.every("usage", 0.01, blocked)
    flaky = loops.every("psi", 0.01, broken)
    loops.start()
    try:
        assert entered.wait(10) and wait_for(lambda: flaky.failures >= UNHEALTHY_AFTER, 10)
        clock.now += STALL_FLOOR + 1
        assert wait_for(lambda: {x.name: x for x in loops.states()}["psi"].since_progress < 1.0, 10)
        s = {x.name: x for x in loops.states()}
        assert s["usage"].since_progress > s["usage"].deadline and s["usage"].since_success is None
        assert s["psi"].since_success is None
        v = assess(loops.states(), (("usage", "collection cycle"),))
        assert not v.progressing and "stuck loops: usage" in v.health and "failing loops: psi" in v.health
        release.set()
        assert wait_for(lambda: assess(loops.states(), ()).progressing, 10)
    finally:
        release.set()
        stop.set()
        loops.join(5)


# --- the protocol ------------------------------------------------------------------------------------------------


def test_notify_socket_addresses_and_watchdog_settings():
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("@sd-notify") == "\0sd-notify"
    assert socket_address("") is None and socket_address("@") is None
    assert socket_address("vsock:2:1234") is None and socket_address("run/notify") is None
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}, pid=7) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, pid=7) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "8"}, pid=7) is None   # a parent's
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}, pid=7) is None
    assert watchdog_interval({}, pid=7) is None
    assert not Notifier.from_environ({}).enabled
    assert Notifier.from_environ({"WATCHDOG_USEC": "2000000"}).watchdog_interval is None   # no socket: no pings


@pytest.fixture
def receiver():
    """A bound AF_UNIX datagram socket, as systemd's notify socket is."""
    directory = tempfile.mkdtemp(prefix="sdn")
    path = os.path.join(directory, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    try:
        yield sock, path
    finally:
        sock.close()
        os.unlink(path)
        os.rmdir(directory)


def messages(sock: socket.socket) -> list[str]:
    out = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except BlockingIOError:
        return out
    finally:
        sock.settimeout(5)


def test_the_notifier_speaks_systemds_protocol(receiver):
    sock, path = receiver
    clock = Clock()
    assert Notifier.from_environ({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"}).watchdog_interval == 1.0
    n = Notifier(path, 1.0, clock=clock)
    n.status("starting")
    n.status("starting")                                 # unchanged: not sent again
    n.ready("running:\nfine")                            # a newline would start a new assignment
    assert messages(sock) == ["STATUS=starting", "READY=1\nSTATUS=running: fine"]
    n.alive(True, "running:\nfine")
    clock.now += 0.5
    n.alive(True, "running:\nfine")                      # within the interval: no second ping
    clock.now += 1.0
    n.alive(True, "running: 3 pods")
    assert messages(sock) == ["WATCHDOG=1", "WATCHDOG=1\nSTATUS=running: 3 pods"]
    clock.now += 5.0
    n.alive(False, "stuck loops: usage")                 # withheld: only the status goes out
    clock.now += 5.0
    n.alive(False, "stuck loops: usage")
    assert messages(sock) == ["STATUS=stuck loops: usage"]
    n.stopping("stopping")
    assert messages(sock) == ["STOPPING=1\nSTATUS=stopping"]
    n.close()


def test_abstract_namespace_socket():
    """``@name``: Linux's abstract namespace (systemd uses it inside containers and for user managers)."""
    name = f"koordlet-test-{os.getpid()}-{threading.get_ident()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        n = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert n.send("READY=1")
        assert sock.recv(64) == b"READY=1"
        n.close()


def test_a_vanished_socket_costs_nothing_but_a_false(receiver, caplog):
    sock, path = receiver
    n = Notifier(path)
    assert n.send("READY=1")
    os.unlink(path)
    assert not n.send("WATCHDOG=1") and not n.send("WATCHDOG=1")
    assert caplog.text.count("sd_notify failed") == 1
    sock.close()
    sock2 = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock2.bind(path)
    try:
        assert n.send("WATCHDOG=1") and sock2.recv(64) == b"WATCHDOG=1"
    finally:
        sock2.close()
        n.close()
    assert Notifier.from_environ({}).send("READY=1") is False
