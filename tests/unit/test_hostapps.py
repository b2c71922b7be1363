"""Host applications from NodeSLO: cgroup dirs (upstream's rule, escapes refused), collection, system remainder
and NodeMetric hostApplicationMetric."""

from __future__ import annotations

import time

import pytest

from koordlet.collectors.usage import UsageCollection
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, Layout
from koordlet.host.procfs import CLK_TCK
from koordlet.metriccache import MetricCache, Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder
from koordlet.states.hostapps import HostApp, resolve_host_apps
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from tests.fakehost import CgroupValues, FakeHost

MiB = 2**20


def apps_from(raw: list[dict], driver: Driver = Driver.CGROUPFS) -> tuple[list[HostApp], list[str]]:
    spec, errors = merge_node_slo_spec({"hostApplications": raw})
    assert errors == []
    return resolve_host_apps(spec.host_applications, Layout(driver))


def test_cgroup_dirs_follow_upstream_defaults_and_bases():
    apps, errors = apps_from([
        {"name": "nginx", "qos": "LS", "priority": "koord-prod"},
        {"name": "spark", "qos": "BE"},
        {"name": "plain"},
        {"name": "agent", "cgroupPath": {"base": "KubepodsBesteffort", "parentDir": "host", "relativePath": "a"}},
        {"name": "root", "cgroupPath": {"parentDir": "system.slice", "relativePath": "sshd.service"}},
    ])
    assert errors == []
    assert [(a.name, a.cgroup_dir) for a in apps] == [
        ("nginx", "host-latency-sensitive/nginx"), ("spark", "host-best-effort/spark"), ("plain", "plain"),
        ("agent", "kubepods/besteffort/host/a"), ("root", "system.slice/sshd.service")]
    assert apps[0].priority == "koord-prod" and apps[0].qos == "LS"
    systemd, _ = apps_from([{"name": "x", "cgroupPath": {"base": "KubepodsBurstable", "relativePath": "x"}}],
                           Driver.SYSTEMD)
    assert systemd[0].cgroup_dir == "kubepods.slice/kubepods-burstable.slice/x"


@pytest.mark.parametrize("raw, problem", [
    ({"name": "../../etc"}, "leaves the cgroup root"),
    ({"name": "evil", "cgroupPath": {"parentDir": "/abs", "relativePath": "x"}}, "leaves the cgroup root"),
    ({"name": "evil", "cgroupPath": {"relativePath": "a/../../.."}}, "leaves the cgroup root"),
    ({"qos": "LS"}, "name is required"),
    ({"name": "nul\x00x"}, "control character"),
    ({"name": "evil", "cgroupPath": {"relativePath": "a\nb"}}, "control character"),
])
def test_escaping_or_nameless_apps_are_refused_alone(raw, problem):
    apps, errors = apps_from([raw, {"name": "good"}])
    assert [a.name for a in apps] == ["good"]
    assert len(errors) == 1 and problem in errors[0] and "hostApplications[0]" in errors[0]


def test_collection_system_remainder_and_node_metric(tmp_path):
    host = FakeHost(str(tmp_path), CgroupVersion.V1, Driver.CGROUPFS)
    cg = Cgroups.detect(host.paths)
    metrics = AgentMetrics("n1")
    coll = UsageCollection(host.paths, cg, metrics, interval=1.0, outdated=10.0)
    apps, _ = apps_from([{"name": "nginx", "qos": "LS", "priority": "koord-prod"},
                         {"name": "missing", "qos": "BE"}])
    host.set_cgroup("host-latency-sensitive/nginx", CgroupValues(cpu_ns=0, anon=100 * MiB, active_file=20 * MiB))
    host.set_proc_stat(busy=1000, idle=0)
    coll.collect(Tick(time.time(), (), tuple(apps)))       # first counter reading: no CPU rate yet
    host.set_cgroup("host-latency-sensitive/nginx", CgroupValues(cpu_ns=int(1e9), anon=100 * MiB,
                                                                 active_file=20 * MiB))
    host.set_proc_stat(busy=1000 + 2 * CLK_TCK, idle=0)
    time.sleep(0.2)                                     # rates are per monotonic second elapsed
    samples = coll.collect(Tick(time.time(), (), tuple(apps)))
    cache = MetricCache(None, clock=lambda: 1_000_000.0)
    cache.append([Sample(s.name, s.labels, 1_000_000.0, s.value) for s in samples])   # at the report's clock
    values = {(s.name, s.labels): s.value for s in samples}
    nginx = (("host_app_name", "nginx"),)
    assert values[("host_application_memory_usage", nginx)] == 100 * MiB
    assert values[("host_application_memory_usage_with_page_cache", nginx)] == 120 * MiB
    app_cpu = values[("host_application_cpu_usage", nginx)]
    assert 0 < app_cpu <= 1e9 / 0.2 / 1e9               # 1 cpu-second over ≥ 0.2 s
    # system = node − pods (none) − host apps
    assert values[("sys_cpu_usage", ())] == pytest.approx(max(values[("node_cpu_usage", ())] - app_cpu, 0))
    assert values[("sys_memory_usage", ())] == values[("node_memory_usage", ())] - 100 * MiB
    assert metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                             {"node": "n1", "collector": "hostapp", "reason": "error"}) == 2
    assert metrics.registry.get_sample_value("koordlet_host_application_resource_usage", {
        "node": "n1", "host_application_name": "nginx", "resource": "memory", "priority_class": "koord-prod",
        "qos": "LS"}) == 100 * MiB
    status = NodeMetricBuilder(cache, CollectPolicy()).status([], 1_000_000.0, host_apps=apps)
    [entry] = status["hostApplicationMetric"]           # "missing" has no samples
    assert entry["name"] == "nginx" and entry["priority"] == "koord-prod" and entry["qos"] == "LS"
    assert entry["usage"]["resources"]["memory"] == "100Mi"
    with_cache = NodeMetricBuilder(cache, CollectPolicy(memory_policy="usageWithPageCache")).status(
        [], 1_000_000.0, host_apps=apps)
    assert with_cache["hostApplicationMetric"][0]["usage"]["resources"]["memory"] == "120Mi"


def test_an_app_dir_that_resolves_outside_the_root_is_dropped_and_written_nowhere(tmp_path, caplog):
    """The text of the path is fine, but on a tree that is not a cgroup filesystem the dir is a symlink out of the
    root (here made after the NodeSLO was read): the app is left out of collection and enforcement, logged once."""
    import logging
    import os

    from koordlet.ops.config import build
    from koordlet.qos.pod_resources import PodResources
    from koordlet.states.informer import PodsInformer
    from koordlet.states.nodeslo.file import NodeSLOFile
    from koordlet.states.nodestate import NodeState
    from koordlet.writer.executor import Executor

    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    cgroups = Cgroups.detect(host.paths)
    outside = tmp_path / "outside"
    outside.mkdir()
    nodeslo = tmp_path / "nodeslo.yaml"
    nodeslo.write_text('hostApplications: [{name: nginx, qos: LS}, {name: logagent, qos: BE}]\n')
    for sub in ("cpu", "cpuset", "cpuacct", "memory"):
        os.makedirs(cgroups.path(sub, "host-best-effort/logagent"), exist_ok=True)
        os.makedirs(cgroups.path(sub, "host-latency-sensitive"), exist_ok=True)
        os.symlink(outside, os.path.join(cgroups.path(sub, "host-latency-sensitive"), "nginx"))
    informer = PodsInformer(list, 60.0, "standalone")
    informer.sync()
    config = build(environ={}, flags={"standalone": True, "node-name": "n", "nodeslo-file": str(nodeslo)})
    state = NodeState(config, host.paths, cgroups, informer, slo_file=NodeSLOFile(str(nodeslo), "n"))
    with caplog.at_level(logging.ERROR, "koordlet.states.nodestate"):
        assert [a.name for a in state.host_apps()] == ["logagent"]
        view = state.view()
        assert view is not None and [a.name for a in view.host_apps] == ["logagent"]
    assert caplog.text.count("resolves to " + str(outside)) == 1
    PodResources().reconcile(view, Executor(cgroups))
    assert list(outside.iterdir()) == []                          # nothing written through the symlink

