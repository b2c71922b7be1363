"""CPU QoS and pod-resource strategies over fake kernel trees (an Anolis-like v1 tree with cpu.bvt_warp_ns, which
this VM lacks) and the reconciler's isolation of a failing strategy."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.cpu_qos import CPUQOS
from koordlet.qos.pod_resources import PodResources
from koordlet.qos.reconciler import Reconciler
from koordlet.states.hostapps import HostApp
from koordlet.states.informer import meta_for
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view
from tests.unit.test_qos_rules import BATCH, slo

ALL_ON = {"enable": True}
C0 = f"{0:064x}"                           # container id

# pods as the kubelet reports them before a phase; uid, QoS classes, annotations and containers vary
pod = partial(agent_pod, namespace="ns", phase=None)


def fake_host(tmp_path, files=("cpu.bvt_warp_ns", "cpu.idle"), gi_sysctl: str | None = "0"):
    paths = HostPaths.under(str(tmp_path))
    cg = Cgroups(paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
    if gi_sysctl is not None:
        os.makedirs(paths.proc("sys", "kernel"))
        with open(paths.proc("sys", "kernel", "sched_group_identity_enabled"), "w") as f:
            f.write(gi_sysctl + "\n")
        with open(paths.proc("sys", "kernel", "sched_core"), "w") as f:
            f.write("1\n")
    return paths, cg, files


def mkcg(cg: Cgroups, rel: str, files, cpuset: str = "0-7") -> None:
    for sub in ("cpu", "cpuset", "memory"):
        d = cg.path(sub, rel)
        os.makedirs(d, exist_ok=True)
        wanted = {"cpu": list(files) + ["cpu.shares", "cpu.cfs_quota_us"], "cpuset": ["cpuset.cpus"],
                  "memory": ["memory.limit_in_bytes"]}[sub]
        for f in wanted:
            default = {"cpu.shares": "1024", "cpu.cfs_quota_us": "-1", "cpuset.cpus": cpuset,
                       "memory.limit_in_bytes": "9223372036854771712"}.get(f, "0")
            p = os.path.join(d, f)
            if not os.path.exists(p):
                with open(p, "w") as fh:
                    fh.write(default + "\n")


def value(cg: Cgroups, sub: str, rel: str, f: str) -> str:
    with open(cg.path(sub, rel, f)) as fh:
        return fh.read().strip()


def build(cg, files, pods):
    for q in KubeQOS:
        mkcg(cg, cg.layout.qos_dir(q), files)
    metas = []
    for p in pods:
        m = meta_for(p, cg.layout)
        mkcg(cg, m.cgroup_dir, files)
        for _, rel in m.containers:
            mkcg(cg, rel, files)
        metas.append(m)
    return tuple(metas)


def test_group_identity_on_an_anolis_tree(tmp_path, caplog):
    paths, cg, files = fake_host(tmp_path)
    one = {"containers": {"c0": C0}, "resources": {"c0": {}}}
    pods = [pod("u-lsr", "u-lsr", qos_class="LSR", qos="Guaranteed", **one),
            pod("u-ls", "u-ls", qos_class="LS", qos="Burstable", **one,
                annotations={"koordinator.sh/cpuQOS": '{"enable": true, "groupIdentity": 1}'}),
            pod("u-be", "u-be", qos_class="BE", qos="BestEffort", **one),
            pod("u-bad", "u-bad", qos_class="LS", qos="Burstable", annotations={"koordinator.sh/cpuQOS": "{oops"})]
    metas = build(cg, files, pods)
    mkcg(cg, "kubepods/besteffort/poddangling", files)
    mkcg(cg, "host-best-effort/logagent", files)
    view = node_view(pods=metas, slo=slo(lsr=ALL_ON, ls=ALL_ON, be=ALL_ON),
                     host_apps=(HostApp("logagent", "koord-batch", "BE", "host-best-effort/logagent"),))
    strategy = CPUQOS(cg, paths)
    assert strategy.bvt and strategy.idle
    ex = Executor(cg)
    strategy.reconcile(view, ex)
    got = {m.pod.uid: (value(cg, "cpu", m.cgroup_dir, "cpu.bvt_warp_ns"),
                       [value(cg, "cpu", rel, "cpu.bvt_warp_ns") for _, rel in m.containers]) for m in metas}
    assert got == {"u-lsr": ("2", ["2"]), "u-ls": ("1", ["1"]), "u-be": ("-1", ["-1"]), "u-bad": ("2", [])}
    assert [value(cg, "cpu", cg.layout.qos_dir(q), "cpu.bvt_warp_ns") for q in KubeQOS] == ["0", "2", "-1"]
    assert value(cg, "cpu", "kubepods/besteffort/poddangling", "cpu.bvt_warp_ns") == "-1"
    assert value(cg, "cpu", "host-best-effort/logagent", "cpu.bvt_warp_ns") == "-1"
    # GI on: core scheduling off first, then the GI switch
    assert Path(paths.proc("sys/kernel/sched_core")).read_text() == "0"
    assert Path(paths.proc("sys/kernel/sched_group_identity_enabled")).read_text() == "1"
    assert caplog.text.count("koordinator.sh/cpuQOS: not JSON") == 1
    assert value(cg, "cpu", "kubepods/besteffort", "cpu.idle") == "0"     # bvt works: idle left alone
    before = len(ex.events())
    strategy.reconcile(view, ex)
    assert len(ex.events()) == before                                       # converged: nothing more
    assert caplog.text.count("koordinator.sh/cpuQOS: not JSON") == 1     # no log spam per cycle

    # turning the classes off resets every level to 0 (the kernel switch stays on: files are the switch)
    strategy.reconcile(node_view(pods=metas, host_apps=view.host_apps), ex)
    assert value(cg, "cpu", metas[2].cgroup_dir, "cpu.bvt_warp_ns") == "0"
    assert value(cg, "cpu", metas[2].containers[0][1], "cpu.bvt_warp_ns") == "0"


def test_group_identity_disabled_in_rule_and_kernel_writes_nothing(tmp_path):
    paths, cg, files = fake_host(tmp_path, gi_sysctl="0")
    metas = build(cg, files, [pod("u-1", "p", qos_class="BE", qos="BestEffort")])
    ex = Executor(cg)
    CPUQOS(cg, paths).reconcile(node_view(pods=metas), ex)
    assert ex.events() == []


def test_no_bvt_kernel_uses_cpu_idle_for_be(tmp_path):
    paths, cg, files = fake_host(tmp_path, files=("cpu.idle",), gi_sysctl=None)
    metas = build(cg, files, [pod("u-1", "p", qos_class="BE", qos="BestEffort", containers={"c0": C0},
                                  resources={"c0": {}})])
    strategy = CPUQOS(cg, paths)
    assert (strategy.bvt, strategy.idle) == (False, True)
    ex = Executor(cg)
    strategy.reconcile(node_view(pods=metas, slo=slo(be=ALL_ON)), ex)
    assert [value(cg, "cpu", cg.layout.qos_dir(q), "cpu.idle") for q in KubeQOS] == ["0", "0", "1"]
    assert all(not str(e["file"]).endswith("bvt_warp_ns") for e in ex.events())   # never attempted
    r = ex.update([])
    assert r.missing == 0


def test_pod_resources_cpuset_and_batch(tmp_path, caplog):
    _paths, cg, files = fake_host(tmp_path, files=())
    one = {"containers": {"c0": C0}, "resources": {"c0": {}}}
    pinned = pod("u-lsr", "u-lsr", qos_class="LSR", qos="Guaranteed", **one,
                 annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset": "4-5"}'})
    ls = pod("u-ls", "u-ls", qos_class="LS", qos="Burstable", **one)
    be = pod("u-be", "u-be", qos_class="BE", qos="BestEffort", containers={"c0": C0}, resources={"c0": BATCH})
    broken = pod("u-broken", "u-broken", qos_class="LSR", qos="Guaranteed", **one,
                 annotations={"scheduling.koordinator.sh/resource-status": "{"})
    metas = build(cg, files, [pinned, ls, be, broken])
    sandbox = metas[0].cgroup_dir + "/" + "f" * 64
    mkcg(cg, sandbox, files)
    for m in metas:
        with open(cg.path("cpu", m.cgroup_dir, "cpu.cfs_quota_us"), "w") as f:
            f.write("400000\n")
    view = node_view(pods=metas, host_apps=(HostApp("nginx", "koord-prod", "LS", "host-latency-sensitive/nginx"),),
                     ls_pools={0: (0, 1, 2, 3), 1: (6, 7)})
    mkcg(cg, "host-latency-sensitive/nginx", ())
    ex = Executor(cg)
    strategy = PodResources()
    strategy.reconcile(view, ex)
    lsr_c = metas[0].containers[0][1]
    assert value(cg, "cpuset", lsr_c, "cpuset.cpus") == "4-5"
    assert value(cg, "cpuset", sandbox, "cpuset.cpus") == "4-5"
    assert value(cg, "cpu", lsr_c, "cpu.cfs_quota_us") == "-1"
    assert value(cg, "cpu", metas[0].cgroup_dir, "cpu.cfs_quota_us") == "-1"
    assert value(cg, "cpuset", metas[1].containers[0][1], "cpuset.cpus") == "0-3,6-7"
    be_dir, be_c = metas[2].cgroup_dir, metas[2].containers[0][1]
    assert value(cg, "cpuset", be_c, "cpuset.cpus") == "0-7"                  # untouched: suppress owns BE
    assert (value(cg, "cpu", be_dir, "cpu.shares"), value(cg, "cpu", be_dir, "cpu.cfs_quota_us"),
            value(cg, "memory", be_dir, "memory.limit_in_bytes")) == ("512", "200000", str(2 << 30))
    assert value(cg, "cpu", be_c, "cpu.cfs_quota_us") == "200000"
    # the broken pod: logged once, treated as unpinned (share pool), quota untouched
    assert value(cg, "cpuset", metas[3].containers[0][1], "cpuset.cpus") == "0-3,6-7"
    assert value(cg, "cpu", metas[3].cgroup_dir, "cpu.cfs_quota_us") == "400000"
    assert caplog.text.count("u-broken") == 1 and "resource-status" in caplog.text
    assert value(cg, "cpuset", "host-latency-sensitive/nginx", "cpuset.cpus") == "0-3,6-7"
    n = len(ex.events())
    strategy.reconcile(view, ex)
    assert len(ex.events()) == n


def test_a_failing_strategy_does_not_stop_the_others(tmp_path, caplog):
    _, cg, _ = fake_host(tmp_path, gi_sysctl=None)
    calls = []

    class Broken:
        name = "broken"

        def reconcile(self, view, executor):
            raise RuntimeError("boom")

    class Working:
        name = "working"

        def reconcile(self, view, executor):
            calls.append(view)

    metrics = AgentMetrics("n")
    rec = Reconciler(Executor(cg), [Broken(), Working()], metrics)
    view = node_view()
    rec.run_once(view)
    rec.run_once(view)
    assert len(calls) == 2 and caplog.text.count("qos strategy failed name=broken") == 1
    assert metrics.registry.get_sample_value("koordlet_qos_strategy_errors_total",
                                             {"node": "n", "strategy": "broken"}) == 2


def test_the_shipped_host_nodeslo_example_parses_and_resolves():
    from koordlet.states.hostapps import resolve_host_apps
    from koordlet.states.nodeslo.file import NodeSLOFile
    here = os.path.join(os.path.dirname(__file__), "..", "..", "systemd", "nodeslo.yaml")
    f = NodeSLOFile(here, "my-host")
    f.refresh()
    assert f.errors == []
    apps, errors = resolve_host_apps(f.spec.host_applications, Cgroups("/x", CgroupVersion.V1,
                                                                       Driver.SYSTEMD).layout)
    assert errors == [] and [a.cgroup_dir for a in apps] == [
        "host-latency-sensitive/nginx", "host-best-effort/log-shipper", "system.slice/backup.service"]


def test_host_apps_that_leave_get_what_a_cgroup_has_without_the_agent(tmp_path):
    """cpu.idle back to 0 and the cpuset back to the parent's CPUs, once, when an app leaves the NodeSLO; never for
    an app whose dir now leads outside the cgroup root."""
    paths, cg, files = fake_host(tmp_path, files=("cpu.idle",), gi_sysctl=None)
    build(cg, files, [])
    mkcg(cg, "host-best-effort", files)
    mkcg(cg, "host-best-effort/logagent", files)
    mkcg(cg, "host-best-effort/evil", files)
    mkcg(cg, "host-latency-sensitive", files, cpuset="0-7")
    mkcg(cg, "host-latency-sensitive/nginx", files, cpuset="0")
    logagent = HostApp("logagent", "koord-batch", "BE", "host-best-effort/logagent")
    evil = HostApp("evil", "koord-batch", "BE", "host-best-effort/evil")
    nginx = HostApp("nginx", "koord-prod", "LS", "host-latency-sensitive/nginx")
    qos, resources = CPUQOS(cg, paths), PodResources()
    ex = Executor(cg)

    def cycle(*apps: HostApp) -> None:
        view = node_view(slo=slo(be=ALL_ON), host_apps=apps, ls_pools={0: (2, 3)})
        qos.reconcile(view, ex)
        resources.reconcile(view, ex)

    cycle(logagent, evil, nginx)
    assert value(cg, "cpu", "host-best-effort/logagent", "cpu.idle") == "1"
    assert value(cg, "cpu", "host-best-effort/evil", "cpu.idle") == "1"
    assert value(cg, "cpu", "host-latency-sensitive/nginx", "cpu.idle") == "0"
    assert value(cg, "cpuset", "host-latency-sensitive/nginx", "cpuset.cpus") == "2-3"
    # evil's dir now leads outside the root (a symlink where one can be made), and the NodeSLO drops every app
    outside = tmp_path / "outside"
    os.rename(cg.path("cpu", "host-best-effort/evil").rstrip("/"), outside)
    os.symlink(outside, cg.path("cpu", "host-best-effort/evil").rstrip("/"))
    cycle()
    assert value(cg, "cpu", "host-best-effort/logagent", "cpu.idle") == "0"
    assert value(cg, "cpuset", "host-latency-sensitive/nginx", "cpuset.cpus") == "0-7"       # the parent's
    assert (outside / "cpu.idle").read_text().strip() == "1"                                # not written
    written = len(ex.events())
    cycle()
    assert len(ex.events()) == written                                   # given back once, then left alone
    # an app that changes class: the cpuset goes back when it is no longer LS, cpu.idle follows the class
    mkcg(cg, "host-latency-sensitive/nginx", files, cpuset="0")
    cycle(nginx)
    assert value(cg, "cpuset", "host-latency-sensitive/nginx", "cpuset.cpus") == "2-3"
    cycle(HostApp("nginx", "koord-batch", "BE", "host-latency-sensitive/nginx"))
    assert value(cg, "cpuset", "host-latency-sensitive/nginx", "cpuset.cpus") == "0-7"
    assert value(cg, "cpu", "host-latency-sensitive/nginx", "cpu.idle") == "1"


def test_host_apps_that_leave_get_group_identity_0_back(tmp_path):
    paths, cg, files = fake_host(tmp_path)
    build(cg, files, [])
    mkcg(cg, "host-best-effort/logagent", files)
    strategy, ex = CPUQOS(cg, paths), Executor(cg)
    app = HostApp("logagent", "koord-batch", "BE", "host-best-effort/logagent")
    strategy.reconcile(node_view(slo=slo(be=ALL_ON), host_apps=(app,)), ex)
    assert value(cg, "cpu", "host-best-effort/logagent", "cpu.bvt_warp_ns") == "-1"
    strategy.reconcile(node_view(slo=slo(be=ALL_ON)), ex)
    assert value(cg, "cpu", "host-best-effort/logagent", "cpu.bvt_warp_ns") == "0"


def test_a_host_app_cgroup_made_again_is_written_in_the_same_cycle(tmp_path):
    """systemd removes a service's cgroup and makes it again at every restart: the executor's cache must not take
    the old dir's values for the new one's."""
    paths, cg, files = fake_host(tmp_path, files=("cpu.idle",), gi_sysctl=None)
    build(cg, files, [])
    rel = "system.slice/logagent.service"
    mkcg(cg, rel, files)
    view = node_view(slo=slo(be=ALL_ON), host_apps=(HostApp("logagent", "koord-batch", "BE", rel),))
    rec = Reconciler(Executor(cg), [CPUQOS(cg, paths)])
    rec.run_once(view)
    assert value(cg, "cpu", rel, "cpu.idle") == "1"
    for sub in ("cpu", "cpuset", "memory"):            # the old dir kept aside: the new one gets another inode
        os.rename(cg.path(sub, rel).rstrip("/"), cg.path(sub, rel).rstrip("/") + ".old")
    mkcg(cg, rel, files)
    assert value(cg, "cpu", rel, "cpu.idle") == "0"
    rec.run_once(view)
    assert value(cg, "cpu", rel, "cpu.idle") == "1"
    rec.run_once(view)
    assert [e["owner"] for e in rec.executor.events()].count("hostapp logagent") == 2
