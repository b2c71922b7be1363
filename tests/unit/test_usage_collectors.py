import pytest

from koordlet.collectors.usage import SharedState, UsageCollection
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.procfs import CLK_TCK
from koordlet.metrics import AgentMetrics
from koordlet.states.informer import meta_for
from koordlet.states.pod import pod_from_k8s
from tests.fakehost import CgroupValues, FakeHost, pod_object

A, B, C = "a" * 64, "b" * 64, "c" * 64
MiB = 2**20


def by_name(samples):
    return {(s.name, s.labels): s.value for s in samples}


@pytest.fixture(params=[(CgroupVersion.V1, Driver.CGROUPFS), (CgroupVersion.V2, Driver.SYSTEMD)],
                ids=["v1-cgroupfs", "v2-systemd"])
def setup(request, tmp_path):
    version, driver = request.param
    host = FakeHost(str(tmp_path), version, driver)
    cg = Cgroups.detect(host.paths)
    metrics = AgentMetrics("n1")
    coll = UsageCollection(host.paths, cg, metrics, interval=1.0, outdated=10.0)
    return host, cg, metrics, coll


def pods_for(host, cg):
    ls = pod_from_k8s(pod_object("u-ls", "web", qos="Burstable", containers={"app": A}))
    be_obj = pod_object("u-be", "batch", qos="BestEffort", containers={"job": B},
                        labels={"koordinator.sh/qosClass": "BE"})
    be_obj["spec"]["containers"] = [{"name": "job", "resources": {"requests": {"kubernetes.io/batch-cpu": "2000"}}}]
    be = pod_from_k8s(be_obj)
    return (meta_for(ls, cg.layout), meta_for(be, cg.layout))


def test_node_pod_container_system_usage(setup):
    host, cg, metrics, coll = setup
    host.set_proc_stat(busy=1000, idle=5000)
    host.set_meminfo(total_kb=8 * 2**20, available_kb=6 * 2**20, free_kb=5 * 2**20)
    host.add_pod(KubeQOS.BURSTABLE, "u-ls", CgroupValues(cpu_ns=10**9, anon=200 * MiB, inactive_file=5 * MiB),
                 {A: CgroupValues(cpu_ns=10**9, anon=150 * MiB, inactive_file=5 * MiB)})
    host.add_pod(KubeQOS.BESTEFFORT, "u-be", CgroupValues(cpu_ns=0, anon=100 * MiB),
                 {B: CgroupValues(cpu_ns=0, anon=100 * MiB)})
    pods = pods_for(host, cg)
    first = by_name(coll.node.collect(100.0, 10.0) + coll.pod.collect(100.0, 10.0, pods))
    assert ("node_cpu_usage", ()) not in first                 # first counter sample is skipped
    assert ("pod_cpu_usage", (("pod_uid", "u-ls"),)) not in first
    assert first[("node_memory_usage", ())] == 2 * 2**30          # (total − available) × 1024
    assert first[("pod_memory_usage", (("pod_uid", "u-ls"),))] == 200 * MiB

    # 2 s later: node busy +4 CPU-seconds worth of ticks, ls pod +1.5 cpu-s, its container +1 cpu-s, be +0.5
    host.set_proc_stat(busy=1000 + 4 * CLK_TCK, idle=9000, iowait=777, steal=333)
    host.set_cgroup(cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls"),
                    CgroupValues(cpu_ns=int(2.5e9), anon=210 * MiB, inactive_file=5 * MiB))
    host.set_cgroup(host.container_dir(KubeQOS.BURSTABLE, "u-ls", A), CgroupValues(cpu_ns=int(2e9), anon=150 * MiB))
    host.set_cgroup(cg.layout.pod_dir(KubeQOS.BESTEFFORT, "u-be"), CgroupValues(cpu_ns=int(0.5e9), anon=100 * MiB))
    s = by_name(coll.node.collect(102.0, 12.0) + coll.pod.collect(102.0, 12.0, pods) + coll.system.collect(102.0))
    assert s[("node_cpu_usage", ())] == pytest.approx(2.0)        # iowait/steal are not busy
    assert s[("pod_cpu_usage", (("pod_uid", "u-ls"),))] == pytest.approx(0.75)
    assert s[("container_cpu_usage", (("container_id", A),))] == pytest.approx(0.5)
    assert s[("pod_cpu_usage", (("pod_uid", "u-be"),))] == pytest.approx(0.25)
    assert s[("pod_memory_working_set", (("pod_uid", "u-ls"),))] == 210 * MiB  # usage − inactive_file
    assert s[("sys_cpu_usage", ())] == pytest.approx(2.0 - 0.75 - 0.25)
    assert s[("sys_memory_usage", ())] == 2 * 2**30 - 310 * MiB


def test_vanished_container_is_skipped_and_counted(setup):
    host, cg, metrics, coll = setup
    host.add_pod(KubeQOS.BURSTABLE, "u-ls", CgroupValues(), {A: CgroupValues()})
    pods = pods_for(host, cg)             # u-be has no cgroup at all: vanished too
    coll.pod.collect(1.0, 1.0, pods)
    host.remove(host.container_dir(KubeQOS.BURSTABLE, "u-ls", A))
    samples = by_name(coll.pod.collect(2.0, 2.0, pods))
    assert ("pod_memory_usage", (("pod_uid", "u-ls"),)) in samples
    assert not any(name.startswith("container_") for name, _ in samples)
    vanished = metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                                 {"node": "n1", "collector": "pod", "reason": "vanished"})
    assert vanished == 2 + 3            # cycle 1: be pod + its container; cycle 2: be pod, be container, A


def test_malformed_file_counts_error_not_crash(setup):
    host, cg, metrics, coll = setup
    host.add_pod(KubeQOS.BURSTABLE, "u-ls", CgroupValues(), {A: CgroupValues()})
    open(cg.usage_files(cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls")).memory_stat, "w").write("garbage\n")
    pods = pods_for(host, cg)[:1]
    samples = by_name(coll.pod.collect(1.0, 1.0, pods))
    assert ("container_memory_usage", (("container_id", A),)) in samples
    assert metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                             {"node": "n1", "collector": "pod", "reason": "error"}) == 1


def test_system_usage_needs_fresh_inputs():
    shared = SharedState()
    from koordlet.collectors.usage import Reading, SystemCollector
    sysc = SystemCollector(shared, outdated=10.0)
    shared.node, shared.pods = Reading(100.0, 1.0, 1000.0), Reading(85.0, 0.5, 400.0)
    assert sysc.collect(100.0) == []                   # pods reading 15 s old
    shared.pods = Reading(99.0, 1.5, 1400.0)
    values = {s.name: s.value for s in sysc.collect(100.0)}
    assert values == {"sys_cpu_usage": 0.0, "sys_memory_usage": 0.0}   # clamped at 0


def test_be_tier(setup):
    host, cg, metrics, coll = setup
    be_dir = cg.layout.qos_dir(KubeQOS.BESTEFFORT)
    host.set_cgroup(be_dir, CgroupValues(cpu_ns=0, cpuset="0-7", quota=300000, period=100000))
    host.add_pod(KubeQOS.BESTEFFORT, "u-be", CgroupValues(), {B: CgroupValues(cpuset="0-3")})
    pods = pods_for(host, cg)
    coll.be.collect(1.0, 1.0, pods)
    host.set_cgroup(be_dir, CgroupValues(cpu_ns=int(1e9), cpuset="0-7", quota=300000, period=100000))
    s = {dict(x.labels)["be_allocation"]: x.value for x in coll.be.collect(3.0, 3.0, pods)}
    assert s["usage"] == pytest.approx(500.0)          # 1 cpu-s over 2 s, milli-cores
    assert s["request"] == 2000.0                      # batch-cpu of BE-labelled pods
    assert s["real-limit"] == 3000.0                   # min(4 cpus of smallest cpuset, quota 3 cores)
