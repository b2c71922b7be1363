import os
import time
from pathlib import Path

import pytest

from koordlet.collectors.usage import NUMACollector, SharedState, UsageCollection
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.procfs import CLK_TCK, read_cpu_stat
from koordlet.host.topology import read_topology
from koordlet.metriccache import Sample
from koordlet.ops.metrics import AgentMetrics
from tests.builders import pod_meta
from tests.fakehost import CgroupValues, FakeHost

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


def node_collect(coll, host, now, mono):
    """The node collector on this cycle's /proc/stat, which UsageCollection.run reads once for node and NUMA."""
    return coll.node.collect(now, mono, read_cpu_stat(host.paths).busy)


def pods_for(host, cg):
    return (pod_meta("u-ls", "web", qos="Burstable", containers={"app": A}, layout=cg.layout),
            pod_meta("u-be", "batch", qos="BestEffort", qos_class="BE", containers={"job": B},
                     resources={"job": {"requests": {"kubernetes.io/batch-cpu": "2000"}}}, layout=cg.layout))


def test_node_pod_container_system_usage(setup):
    host, cg, _metrics, coll = setup
    host.set_proc_stat(busy=1000, idle=5000)
    host.set_meminfo(total_kb=8 * 2**20, available_kb=6 * 2**20, free_kb=5 * 2**20)
    host.add_pod(KubeQOS.BURSTABLE, "u-ls", CgroupValues(cpu_ns=10**9, anon=200 * MiB, inactive_file=5 * MiB),
                 {A: CgroupValues(cpu_ns=10**9, anon=150 * MiB, inactive_file=5 * MiB)})
    host.add_pod(KubeQOS.BESTEFFORT, "u-be", CgroupValues(cpu_ns=0, anon=100 * MiB),
                 {B: CgroupValues(cpu_ns=0, anon=100 * MiB)})
    pods = pods_for(host, cg)
    first = by_name(node_collect(coll, host, 100.0, 10.0) + coll.pod.collect(100.0, 10.0, pods))
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
    s = by_name(node_collect(coll, host, 102.0, 12.0) + coll.pod.collect(102.0, 12.0, pods)
                + coll.system.collect(102.0))
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
    Path(cg.usage_files(cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls")).memory_stat).write_text("garbage\n")
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
    host, cg, _metrics, coll = setup
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


# ----------------------------------------------------------------------------------------------- per-CPU and NUMA

GiB_KB = 2**20          # 1 GiB in meminfo's kB


def test_proc_stat_aggregate_and_per_cpu_lines(tmp_path):
    host = FakeHost(str(tmp_path))
    # a real kernel's layout: "cpu  " aggregate, then online CPUs only (cpu2 offline), then intr & co.
    Path(host.paths.proc("stat")).write_text(
        "cpu  100 5 40 9000 30 3 2 7 11 0\n"
        "cpu0 60 5 20 4000 10 1 1 3 11 0\n"
        "cpu1 40 0 20 5000 20 2 1 4 0 0\n"
        "cpu3 7 0 0 100 0 0 0 0 0 0\n"
        "intr 12345 0 1 2 3\nctxt 99\nbtime 1700000000\nprocesses 42\n")
    stat = read_cpu_stat(host.paths)
    # user nice system irq softirq; idle, iowait, steal and guest (already inside user) are not busy
    assert stat.busy == 100 + 5 + 40 + 3 + 2
    assert stat.per_cpu == {0: 60 + 5 + 20 + 1 + 1, 1: 40 + 20 + 2 + 1, 3: 7}
    Path(host.paths.proc("stat")).write_text("cpu0 1 2 3 4 5 6 7 8 0 0\n")
    with pytest.raises(ValueError, match="aggregate cpu line"):
        read_cpu_stat(host.paths)
    Path(host.paths.proc("stat")).write_text("cpu  1 2 3 4 5 6 7 0 0 0\ncpu0 1 2 3\n")
    with pytest.raises(ValueError, match="cpu0 line has 3 fields"):
        read_cpu_stat(host.paths)


def two_numa_host(tmp_path):
    """node 0: CPUs 0-1; node 1: CPUs 2-3 with cpu3 offline; node 2: CPU-less memory (CXL-like); node 3: an
    empty node (no CPUs, no memory: what an ACPI generic initiator looks like)."""
    host = FakeHost(str(tmp_path))
    host.set_numa({0: [0, 1], 1: [2, 3], 2: [], 3: []}, offline=(3,))
    host.set_node_meminfo(0, total_kb=8 * GiB_KB, free_kb=2 * GiB_KB, active_file_kb=GiB_KB,
                          inactive_file_kb=GiB_KB // 2, sreclaimable_kb=GiB_KB // 4)
    host.set_node_meminfo(1, total_kb=8 * GiB_KB, free_kb=7 * GiB_KB)
    host.set_node_meminfo(2, total_kb=4 * GiB_KB, free_kb=3 * GiB_KB, inactive_file_kb=GiB_KB // 2)
    host.set_node_meminfo(3, total_kb=0, free_kb=0)
    return host


def numa_collector(host):
    metrics = AgentMetrics("n1")
    return NUMACollector(host.paths, read_topology(host.paths), metrics), metrics


def numa_collect(numa, host, now, mono):
    return by_name(numa.collect(now, mono, read_cpu_stat(host.paths).per_cpu))


def cpu(node):
    return ("node_numa_cpu_usage", (("numa_node_id", str(node)),))


def mem(node):
    return ("node_numa_memory_usage", (("numa_node_id", str(node)),))


def test_numa_cpu_is_per_cpu_ticks_summed_by_node(tmp_path):
    host = two_numa_host(tmp_path)
    numa, _ = numa_collector(host)
    # cpu3 is offline (no line); cpu4 was hot-added after start (a line, but no node in the topology)
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: 1000, 1: 2000, 2: 3000, 4: 0})
    first = numa_collect(numa, host, 100.0, 10.0)
    assert not any(name == "node_numa_cpu_usage" for name, _ in first)      # a rate needs two readings

    # 2 s later: cpu0 +1 s of busy ticks, cpu1 +0.5 s, cpu2 +2 s (fully busy), cpu4 +2 s; iowait/steal grow too
    host.set_proc_stat(busy=0, idle=0, iowait=500, steal=300,
                       per_cpu={0: 1000 + CLK_TCK, 1: 2000 + CLK_TCK // 2, 2: 3000 + 2 * CLK_TCK, 4: 2 * CLK_TCK})
    s = numa_collect(numa, host, 102.0, 12.0)
    assert s[cpu(0)] == pytest.approx((1.0 + 0.5) / 2)           # 0.75 cores
    assert s[cpu(1)] == pytest.approx(2.0 / 2)                   # 1 core: cpu2 only, cpu3 offline
    assert cpu(2) not in s and cpu(3) not in s                   # CPU-less nodes have no CPU usage

    # 1 s later: cpu1's counter went backwards (it is skipped), cpu0 idle: node 0 still reports, with 0
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: 1000 + CLK_TCK, 1: 0, 2: 3000 + 2 * CLK_TCK})
    s = numa_collect(numa, host, 103.0, 13.0)
    assert s[cpu(0)] == 0.0 and s[cpu(1)] == 0.0


def test_numa_memory_per_node(tmp_path):
    host = two_numa_host(tmp_path)
    numa, _ = numa_collector(host)
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: 0, 1: 0, 2: 0})
    s = numa_collect(numa, host, 100.0, 10.0)
    # MemTotal − (MemFree + Active(file) + Inactive(file) + SReclaimable), in bytes; MemUsed is not used
    assert s[mem(0)] == (8 - 2 - 1 - 0.5 - 0.25) * 2**30
    assert s[mem(1)] == 1 * 2**30
    assert s[mem(2)] == 0.5 * 2**30                               # CPU-less memory still has a memory usage
    assert mem(3) not in s                                        # neither CPUs nor memory: nothing to report
    host.set_node_meminfo(1, total_kb=GiB_KB, free_kb=GiB_KB // 2, active_file_kb=GiB_KB)
    assert numa_collect(numa, host, 101.0, 11.0)[mem(1)] == 0.0  # estimate above total: clamped at 0


def test_numa_node_meminfo_problem_skips_that_node_only(tmp_path):
    host = two_numa_host(tmp_path)
    numa, metrics = numa_collector(host)
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: 0, 1: 0, 2: 0})
    host.set_node_meminfo(0, total_kb=8 * GiB_KB, free_kb=GiB_KB, omit=("SReclaimable",))
    os.remove(os.path.join(host.paths.sys_root, "devices/system/node/node1/meminfo"))
    s = numa_collect(numa, host, 100.0, 10.0)
    assert mem(0) not in s and mem(1) not in s and mem(2) in s
    assert metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                             {"node": "n1", "collector": "numa", "reason": "error"}) == 2


def test_one_numa_node_reports_node_zero(tmp_path):
    host = FakeHost(str(tmp_path), ncpu=2)
    host.set_numa({0: [0, 1]})
    numa, _ = numa_collector(host)
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: 0, 1: 0})
    numa_collect(numa, host, 100.0, 10.0)
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: CLK_TCK, 1: CLK_TCK})
    s = numa_collect(numa, host, 101.0, 11.0)
    assert s == {cpu(0): pytest.approx(2.0), mem(0): 0.0}


def test_no_numa_in_sysfs_means_no_numa_samples(tmp_path):
    host = FakeHost(str(tmp_path))                     # /proc only, as a kernel without CONFIG_NUMA
    numa, _ = numa_collector(host)
    assert numa.collect(1.0, 1.0, read_cpu_stat(host.paths).per_cpu) == []
    assert numa.collect(2.0, 2.0, read_cpu_stat(host.paths).per_cpu) == []


def test_collection_cycle_includes_numa_samples(tmp_path):
    host = two_numa_host(tmp_path)
    coll = UsageCollection(host.paths, Cgroups.detect(host.paths), AgentMetrics("n1"), interval=1.0,
                           outdated=10.0)
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: 0, 1: 0, 2: 0})
    coll.collect(Tick(time.time(), ()))
    host.set_proc_stat(busy=3 * CLK_TCK, idle=0, per_cpu={0: CLK_TCK, 1: CLK_TCK, 2: CLK_TCK})
    names = {(s.name, s.labels) for s in coll.collect(Tick(time.time(), ()))}
    assert {cpu(0), cpu(1), mem(0), mem(1), mem(2), ("node_cpu_usage", ())} <= names


# ------------------------------------------------------------------------------------------ per-NUMA system usage

PAGE = os.sysconf("SC_PAGE_SIZE")


def sys_cpu(node):
    return ("sys_numa_cpu_usage", (("numa_node_id", str(node)),))


def sys_mem(node):
    return ("sys_numa_memory_usage", (("numa_node_id", str(node)),))


@pytest.fixture(params=[CgroupVersion.V1, CgroupVersion.V2], ids=["v1", "v2"])
def numa_pods(request, tmp_path):
    """two_numa_host with two pods whose memory.numa_stat spreads their memory over nodes 0 and 1."""
    host = FakeHost(str(tmp_path), request.param, Driver.CGROUPFS)
    host.set_numa({0: [0, 1], 1: [2, 3], 2: []})
    host.set_node_meminfo(0, total_kb=8 * GiB_KB, free_kb=5 * GiB_KB)             # 3 GiB used
    host.set_node_meminfo(1, total_kb=8 * GiB_KB, free_kb=7 * GiB_KB)             # 1 GiB used
    host.set_node_meminfo(2, total_kb=4 * GiB_KB, free_kb=3 * GiB_KB)             # 1 GiB used, no pod memory
    host.add_pod(KubeQOS.BURSTABLE, "u-ls",
                 CgroupValues(anon=768 * MiB, unevictable=256 * MiB, active_file=512 * MiB,
                              numa={0: 512 * MiB, 1: 256 * MiB}), {A: CgroupValues()})
    host.add_pod(KubeQOS.BESTEFFORT, "u-be", CgroupValues(anon=2 * 1024 * MiB, numa={1: 2 * 1024 * MiB}),
                 {B: CgroupValues()})
    cg = Cgroups.detect(host.paths)
    coll = UsageCollection(host.paths, cg, AgentMetrics("n1"), interval=1.0, outdated=10.0)
    return host, cg, coll


def two_cycles(host, cg, coll, per_cpu_busy):
    """Cycle 1 (no rates yet), then 2 s later one where node 0 and 1 are busy as given (CPU-seconds per CPU)."""
    pods = pods_for(host, cg)
    host.set_proc_stat(busy=0, idle=0, per_cpu={0: 0, 1: 0, 2: 0, 3: 0})
    first = by_name(coll.collect(Tick(100.0, pods)))
    total = sum(per_cpu_busy.values())
    host.set_proc_stat(busy=int(total * CLK_TCK), idle=0,
                       per_cpu={c: int(b * CLK_TCK) for c, b in per_cpu_busy.items()})
    host.set_cgroup(cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls"),
                    CgroupValues(cpu_ns=10**9, anon=768 * MiB, unevictable=256 * MiB, active_file=512 * MiB,
                                 numa={0: 512 * MiB, 1: 256 * MiB}))
    time.sleep(0.01)        # the collection measures the period on the monotonic clock
    return first, by_name(coll.collect(Tick(102.0, pods)))


def test_system_numa_usage_is_node_numa_minus_pods_and_apportioned_cpu(numa_pods):
    host, cg, coll = numa_pods
    first, s = two_cycles(host, cg, coll, {0: 1.0, 1: 0.0, 2: 1.5, 3: 0.5})
    # cycle 1: no node CPU rate, so no system usage at all yet
    assert not any(name.startswith("sys_") for name, _ in first)
    # memory: node NUMA usage − Σ the pods' anon + unevictable on that node (u-ls's page cache is not subtracted:
    # the node figure already leaves file pages out)
    assert s[sys_mem(0)] == 3 * 2**30 - (512 + 256) * MiB
    assert s[sys_mem(1)] == max(2**30 - (256 + 2048) * MiB, 0)                    # clamped at 0
    assert s[sys_mem(2)] == 2**30                                                  # no pod memory there
    # CPU: the node-level system CPU split by each node's share of the NUMA CPU usage
    node_cpu = {n: s[cpu(n)] for n in (0, 1)}
    total = sum(node_cpu.values())
    assert s[("sys_cpu_usage", ())] > 0 and node_cpu[1] == pytest.approx(2 * node_cpu[0])
    assert sum(s[sys_cpu(n)] for n in (0, 1)) == pytest.approx(s[("sys_cpu_usage", ())])
    for n in (0, 1):
        assert s[sys_cpu(n)] == pytest.approx(s[("sys_cpu_usage", ())] * node_cpu[n] / total)
    assert sys_cpu(2) not in s                                                     # a CPU-less node


def test_pod_numa_stat_unreadable_skips_numa_memory_only(numa_pods, caplog):
    host, cg, coll = numa_pods
    path = Path(cg.path("memory", cg.layout.pod_dir(KubeQOS.BESTEFFORT, "u-be"), "memory.numa_stat"))
    path.write_text("total=0 N0=0\n")                 # no anon/unevictable lines: cannot say the pod's share
    _, s = two_cycles(host, cg, coll, {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0})
    assert not any(name == "sys_numa_memory_usage" for name, _ in s)
    assert sys_cpu(0) in s and sys_cpu(1) in s
    assert "memory.numa_stat unreadable" in caplog.text


def test_system_numa_usage_needs_fresh_numa_and_pod_readings():
    from koordlet.collectors.usage import NumaReading, Reading, SystemCollector
    shared = SharedState()
    sysc = SystemCollector(shared, outdated=10.0)
    shared.node, shared.pods = Reading(100.0, 3.0, 10.0 * 2**30), Reading(100.0, 1.0, 2.0 * 2**30)
    shared.numa = NumaReading(100.0, {0: 2.0, 1: 0.0}, {0: 6.0 * 2**30, 1: 4.0 * 2**30})
    shared.pods_numa = NumaReading(85.0, memory={0: 2.0 * 2**30})
    s = by_name(sysc.collect(100.0))
    assert sys_mem(0) not in s                                # the pods' NUMA sum is 15 s old
    assert s[sys_cpu(0)] == pytest.approx(2.0) and s[sys_cpu(1)] == 0.0
    shared.pods_numa = NumaReading(99.0, memory={0: 2.0 * 2**30})
    s = by_name(sysc.collect(100.0))
    assert s[sys_mem(0)] == 4.0 * 2**30 and s[sys_mem(1)] == 4.0 * 2**30
    shared.numa = NumaReading(80.0, {0: 0.0, 1: 0.0}, {0: 1.0, 1: 1.0})             # stale node NUMA reading
    assert {name for name, _ in by_name(sysc.collect(100.0))} == {"sys_cpu_usage", "sys_memory_usage"}
    shared.numa = NumaReading(100.0, {0: 0.0, 1: 0.0}, {})                           # an idle node: 0, not 0/0
    assert by_name(sysc.collect(100.0))[sys_cpu(1)] == 0.0


def test_no_numa_nodes_means_pod_numa_stat_is_never_read(setup, caplog):
    host, cg, _metrics, coll = setup                  # a FakeHost without sysfs NUMA nodes
    host.add_pod(KubeQOS.BURSTABLE, "u-ls", CgroupValues(), {A: CgroupValues()})
    os.remove(cg.path("memory", cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls"), "memory.numa_stat"))
    pods = pods_for(host, cg)[:1]
    coll.collect(Tick(1.0, pods))
    s = by_name(coll.collect(Tick(2.0, pods)))
    assert not any(name.startswith("sys_numa") for name, _ in s)
    assert "numa_stat" not in caplog.text


def test_numa_system_usage_reaches_the_node_metric(numa_pods):
    from fractions import Fraction

    from koordlet.base.quantity import parse_quantity
    from koordlet.metriccache import MetricCache
    from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder
    host, cg, coll = numa_pods
    first, s = two_cycles(host, cg, coll, {0: 1.0, 1: 0.0, 2: 1.5, 3: 0.5})
    cache = MetricCache(None, clock=lambda: 102.0)
    cache.append([Sample(name, lb, ts, v) for ts, cycle in ((100.0, first), (102.0, s))
                  for (name, lb), v in cycle.items()])
    numa = NodeMetricBuilder(cache, CollectPolicy()).status([], 102.0)["nodeMetric"]["numaUsages"]
    assert [u["numaNodeID"] for u in numa] == [0, 1]
    assert numa[0]["systemUsage"]["resources"]["memory"] == f"{3 * 1024 - 768}Mi"
    system1 = numa[1]["systemUsage"]["resources"]
    assert system1["memory"] == "0"
    assert parse_quantity(system1["cpu"]) == Fraction(int(s[sys_cpu(1)] * 1000), 1000)
