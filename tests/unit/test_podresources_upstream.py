"""The kubelet answer cache: one call for many callers, at most one call per interval, last good kept."""

from __future__ import annotations

import threading
import time

from koordlet.podresources.upstream import Upstream


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_callers_share_one_call():
    calls = []
    release = threading.Event()

    def call(timeout):
        calls.append(timeout)
        release.wait(5)
        return ["answer"]

    up = Upstream(call, min_interval=1.0, timeout=5.0)
    results = []
    threads = [threading.Thread(target=lambda: results.append(up.get(1.0))) for _ in range(50)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)               # the others arrive while the call is in flight
    release.set()
    for t in threads:
        t.join(5)
    assert len(calls) == 1
    assert len(results) == 50 and all(r.value == ["answer"] and r.error == "" for r in results)


def test_fresh_answers_are_served_and_old_ones_refreshed_at_most_once_per_interval():
    clock, calls = Clock(), []
    up = Upstream(lambda t: calls.append(clock.now) or len(calls), min_interval=1.0, clock=clock)
    assert up.get(1.0).value == 1
    clock.now += 0.5
    assert up.get(1.0).value == 1 and len(calls) == 1          # young enough
    clock.now += 0.6
    assert up.get(1.0).value == 2                                # 1.1 s old: refreshed
    assert up.get(0.0).value == 2 and len(calls) == 2            # wants fresher, but the kubelet gets 1 call/s
    clock.now += 1.0
    assert up.get(0.0).value == 3


def test_a_failing_kubelet_leaves_the_last_good_answer_and_its_age():
    clock, state = Clock(), {"fail": False}

    def call(timeout):
        if state["fail"]:
            raise ConnectionError("connection refused")
        return "good"

    results = []
    up = Upstream(call, min_interval=1.0, clock=clock, on_call=results.append)
    assert up.age() == float("inf")
    up.get(1.0)
    state["fail"] = True
    clock.now += 5
    snap = up.get(1.0)
    assert (snap.value, snap.error) == ("good", "connection refused")
    assert up.age() == 5 and results == ["", "connection refused"]
    clock.now += 0.5
    assert up.get(1.0).attempts == 2                  # inside the interval: no new call
    state["fail"] = False
    clock.now += 1
    snap = up.get(1.0)
    assert (snap.value, snap.error, up.age()) == ("good", "", 0)


def test_waiters_do_not_hang_with_a_hanging_call():
    release = threading.Event()
    up = Upstream(lambda t: release.wait(10) and "late", min_interval=1.0, timeout=0.2)
    first = threading.Thread(target=up.get, args=(1.0,))
    first.start()
    time.sleep(0.05)
    started = time.monotonic()
    snap = up.get(1.0)
    waited = time.monotonic() - started
    release.set()
    first.join(5)
    assert snap.value is None and waited < 2.0
    assert up.snapshot.value == "late"
