"""The metric-kind table (koordlet/metriccache/kinds.py): upstream's kinds with upstream's label keys, and the
collectors writing exactly those."""

import time

import pytest

from koordlet.collectors.throttled import ThrottledCollector
from koordlet.collectors.usage import UsageCollection
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.procfs import CLK_TCK
from koordlet.metriccache import KINDS, Sample, schema_problem
from koordlet.metriccache.kinds import EXTRA_KINDS, UPSTREAM_KINDS
from koordlet.ops.metrics import AgentMetrics
from tests.builders import pod_meta
from tests.fakehost import CgroupValues, FakeHost

A = "a" * 64
MiB = 2**20


def test_the_kinds_issue_20_found_missing_are_declared_as_upstream():
    # pkg/koordlet/metriccache/metric_resources.go: SystemNUMA*UsageMetric, Pod/ContainerCPUThrottledMetric,
    # ResctrlLLCMetric, ResctrlMBMetric
    assert KINDS["sys_numa_cpu_usage"] == {"numa_node_id"}
    assert KINDS["sys_numa_memory_usage"] == {"numa_node_id"}
    assert KINDS["pod_cpu_throttled"] == {"pod_uid"}
    assert KINDS["container_cpu_throttled"] == {"container_id"}
    assert KINDS["resctrl_resource_llc"] == {"qos", "cache_id"}
    assert KINDS["resctrl_resource_mb"] == {"qos", "cache_id", "resctrl_mb_type"}
    assert len(UPSTREAM_KINDS) == 43 and not UPSTREAM_KINDS.keys() & EXTRA_KINDS.keys()


def test_schema_problem_names_unknown_kinds_and_label_mismatches():
    assert schema_problem(Sample("sys_numa_cpu_usage", (("numa_node_id", "0"),), 1.0, 0.5)) is None
    assert "unknown metric kind" in schema_problem(Sample("sys_numa_cpu", (), 1.0, 0.5))
    assert "schema ['numa_node_id']" in schema_problem(Sample("sys_numa_cpu_usage", (), 1.0, 0.5))
    assert schema_problem(Sample("pod_cpu_throttled", (("pod_uid", "u"), ("qos", "LS")), 1.0, 0.0)) is not None


@pytest.mark.parametrize("version", [CgroupVersion.V1, CgroupVersion.V2], ids=["v1", "v2"])
def test_usage_and_throttling_collectors_write_only_declared_kinds(tmp_path, version):
    host = FakeHost(str(tmp_path), version, Driver.CGROUPFS)
    host.set_numa({0: [0, 1], 1: [2, 3]})
    host.add_pod(KubeQOS.BURSTABLE, "u-ls", CgroupValues(anon=64 * MiB, numa={0: 32 * MiB, 1: 32 * MiB}),
                 {A: CgroupValues(anon=64 * MiB)})
    cg = Cgroups.detect(host.paths)
    metas = (pod_meta("u-ls", "web", qos="Burstable", containers={"app": A}, layout=cg.layout),)
    usage = UsageCollection(host.paths, cg, AgentMetrics("n1"), interval=1.0, outdated=10.0)
    throttled = ThrottledCollector(cg, AgentMetrics("n1"))
    samples: list[Sample] = []
    for i in range(2):
        host.set_proc_stat(busy=i * 4 * CLK_TCK, idle=0, per_cpu=dict.fromkeys(range(4), i * CLK_TCK))
        host.set_cgroup(cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls"),
                        CgroupValues(cpu_ns=i * 10**8, anon=64 * MiB, numa={0: 32 * MiB, 1: 32 * MiB}))
        samples += usage.collect(Tick(100.0 + i, metas))
        if version is CgroupVersion.V2:          # cpu.stat with nr_periods: the fake writes it on v2
            samples += throttled.collect(Tick(100.0 + i, metas))
        time.sleep(0.01)
    names = {s.name for s in samples}
    assert {"sys_numa_cpu_usage", "sys_numa_memory_usage"} <= names
    if version is CgroupVersion.V2:
        assert {"pod_cpu_throttled", "container_cpu_throttled"} <= names
    assert [p for p in map(schema_problem, samples) if p] == []
