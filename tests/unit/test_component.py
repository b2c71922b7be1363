"""koordlet.component and the registries: declarations, building, supervised loops, and the node state's memo."""

from __future__ import annotations

import http.client
import logging
import threading
import time

import pytest

from koordlet import collectors, qos, reporters, services
from koordlet.component import Loops, Plugin, StartupError, build_enabled, spread
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.ops.config import build
from koordlet.ops.gates import ALPHA_GATES, DEFAULT_GATES
from koordlet.ops.metrics import AgentMetrics
from koordlet.ops.server import HttpServer
from koordlet.states.informer import PodsInformer
from koordlet.states.nodestate import NodeState
from nri_plugin.features import FEATURES
from tests.builders import pod_meta
from tests.fakehost import FakeHost
from tests.waits import wait_for

REGISTRIES = {"strategy": qos.STRATEGIES, "collector": collectors.COLLECTORS, "report": reporters.REPORTS,
              "service": services.SERVICES}


def config(**flags):
    return build(environ={}, flags={"standalone": True, "node-name": "n", **flags})


def errors(metrics: AgentMetrics, loop: str) -> float:
    return metrics.registry.get_sample_value("koordlet_loop_errors_total", {"node": "n", "loop": loop}) or 0


# --- declarations ------------------------------------------------------------------------------------------------


def test_every_registered_component_names_real_gates_and_a_unique_name():
    """A typo in a gate would switch a component off for good without a word: every gate must be one the
    configuration knows (upstream's table), and names are unique (they label loops and metrics)."""
    names = [p.name for plugins in REGISTRIES.values() for p in plugins]
    assert len(names) == len(set(names)), names
    for plugins in REGISTRIES.values():
        for plugin in plugins:
            assert set(plugin.gates) <= set(DEFAULT_GATES), (plugin.name, plugin.gates)
    assert {f.gate for f in FEATURES} <= set(DEFAULT_GATES)
    assert len({f.name for f in FEATURES}) == len(FEATURES)


def test_a_plugin_is_on_when_any_of_its_gates_is_and_its_options_allow():
    plugin = Plugin("p", lambda ctx: object(), gates=("GroupIdentity", "CoreSched"),
                    when=lambda c: c.collect_res_used_interval > 0)
    assert plugin.enabled(config(**{"feature-gates": {"GroupIdentity": False, "CoreSched": True}}))
    assert not plugin.enabled(config(**{"feature-gates": {"GroupIdentity": False, "CoreSched": False}}))
    assert not plugin.enabled(config(**{"collect-res-used-interval": 0}))
    assert Plugin("always", lambda ctx: object()).enabled(config())


def test_strategies_follow_the_gates_in_reconcile_order():
    on = [p.name for p in qos.STRATEGIES if p.enabled(config(**{"feature-gates": dict.fromkeys(ALPHA_GATES, True)}))]
    assert on[:4] == ["pod-resources", "cpu-qos", "resctrl", "core-sched"]
    assert on.index("cpu-suppress") < on.index("cpu-burst")            # burst scales the quota suppress left
    off = config(**{"feature-gates": {"BECPUSuppress": False, "CPUBurst": False}})
    assert {"cpu-suppress", "cpu-burst"}.isdisjoint(p.name for p in qos.STRATEGIES if p.enabled(off))


def test_a_failing_build_leaves_only_that_component_out_but_a_startup_error_stops(caplog):
    def broken(ctx):
        raise OSError("no such device")

    plugins = (Plugin("broken", broken), Plugin("fine", lambda ctx: "built"), Plugin("absent", lambda ctx: None))
    ctx = type("Ctx", (), {"config": config()})()
    with caplog.at_level(logging.ERROR, "koordlet.component"):
        built = build_enabled(plugins, ctx)      # type: ignore[arg-type]
    assert [(p.name, c) for p, c in built] == [("fine", "built")]
    assert "component not started name=broken error=no such device" in caplog.text

    def bad_config(ctx):
        raise StartupError("nri plugin index '7': must be exactly two digits")

    with pytest.raises(StartupError, match="two digits"):
        build_enabled((Plugin("nri", bad_config),), ctx)   # type: ignore[arg-type]


# --- supervised loops --------------------------------------------------------------------------------------------


def test_a_failing_step_is_counted_logged_once_and_the_loop_goes_on(caplog):
    stop, metrics = threading.Event(), AgentMetrics("n")
    loops = Loops(stop, metrics)
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) <= 4:
            raise RecursionError("maximum recursion depth exceeded")

    loop = loops.every("flaky", 0.001, step)
    with caplog.at_level(logging.INFO, "koordlet.component"):
        loops.start()
        try:
            assert wait_for(lambda: loop.runs >= 3, timeout=10)
        finally:
            stop.set()
            loops.join(5)
    assert errors(metrics, "flaky") == 4
    assert caplog.text.count("loop step failed loop=flaky") == 1
    assert "loop recovered loop=flaky" in caplog.text
    assert not loop.thread.is_alive()


def test_loops_of_one_period_start_spread_over_it():
    assert spread([1.0, 1.0, 60.0, 1.0, 1.0]) == [0.0, 0.25, 0.0, 0.5, 0.75]
    assert spread([2.0]) == [0.0]
    assert spread([]) == []
    stop, metrics = threading.Event(), AgentMetrics("n")
    loops = Loops(stop, metrics)
    started: dict[str, float] = {}
    for name, offset in (("first", 0.0), ("later", 0.3)):
        loops.every(name, 10.0, lambda name=name: started.setdefault(name, time.monotonic()), offset)
    loops.start()
    try:
        assert wait_for(lambda: len(started) == 2, timeout=10)
    finally:
        stop.set()
        loops.join(5)
    assert started["later"] - started["first"] >= 0.25


def test_a_long_running_target_that_raises_is_restarted():
    stop, metrics = threading.Event(), AgentMetrics("n")
    loops = Loops(stop, metrics)
    starts: list[int] = []

    def watch(s: threading.Event) -> None:
        starts.append(1)
        if len(starts) < 3:
            raise ConnectionResetError("peer went away")
        s.wait()

    loops.forever("watch", watch, restart_after=0.001)
    loops.start()
    try:
        assert wait_for(lambda: len(starts) == 3, timeout=10)
    finally:
        stop.set()
        loops.join(5)
    assert errors(metrics, "watch") == 2


def test_healthz_turns_red_while_a_loop_keeps_failing_and_green_when_it_recovers():
    stop, metrics = threading.Event(), AgentMetrics("n")
    loops = Loops(stop, metrics)
    broken = threading.Event()
    broken.set()

    def step() -> None:
        if broken.is_set():
            raise ValueError("bad NodeSLO file")

    loop = loops.every("report", 0.001, step)
    server = HttpServer(("127.0.0.1", 0), metrics.registry, lambda: (True, "ok"), health=loops.healthy)
    server.start()

    def healthz() -> tuple[int, str]:
        conn = http.client.HTTPConnection(*server.address, timeout=5)
        try:
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    loops.start()
    try:
        assert wait_for(lambda: loop.failures >= 3, timeout=10)
        assert healthz() == (503, "failing loops: report\n")
        broken.clear()
        assert wait_for(lambda: loop.failures == 0 and loop.runs > 0, timeout=10)
        assert healthz() == (200, "ok\n")
    finally:
        stop.set()
        loops.join(5)
        server.stop()


# --- the node state ------------------------------------------------------------------------------------------------


def test_pools_are_computed_once_per_input_and_again_when_the_pods_change(tmp_path):
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    cgroups = Cgroups.detect(host.paths)
    pinned = pod_meta("u-1", "lsr", qos_class="LSR", qos="Guaranteed", layout=cgroups.layout,
                      annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"1"}'})
    pods = [(pinned,)]
    informer = PodsInformer(lambda: list(pods[-1]), 60.0, "standalone")
    state = NodeState(config(), host.paths, cgroups, informer)
    assert state.view() is None                               # pods never synced: nothing to decide from
    informer.sync()
    first = state.view()
    assert first is not None and state.pools(None) is state.pools(None)       # same inputs: the same value
    online = set(state.topology.online)
    assert {c for cpus in first.ls_pools.values() for c in cpus} == online - {1}
    pods.append(())                                           # the pinned pod is gone
    informer.sync()
    assert {c for cpus in state.view().ls_pools.values() for c in cpus} == online
