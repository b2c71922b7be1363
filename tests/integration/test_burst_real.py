"""CPU burst against the real kernel: a real pod + container cgroup (v1) with a 0.2-core cpu limit.

- cpu.cfs_burst_us written by the strategy is what the kernel reports back, and a burst above the quota (the
  default 1000 %, which mainline kernels refuse) ends up capped at the quota instead of failing every cycle;
- a busy spinner throttled at 0.2 core makes nr_throttled grow, the strategy raises the pod and container quotas
  step by step (×1.2) up to the 300 % ceiling, and the spinner really gets more CPU;
- policy none puts the quotas back to the base, container first.
"""

import itertools
import os
import time

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.host.topology import read_topology
from koordlet.metriccache import MetricCache, Sample
from koordlet.qos.cpu_burst import CPUBurst
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.writer.executor import Executor
from tests.builders import host_paths, node_view, pod_meta
from tests.realcgroup import BUSY, IDLE, proc_cpu_seconds

pytestmark = pytest.mark.root

UID = "33333333-4444-5555-6666-777777777777"
CID = "f" * 64
BASE = 20000                      # 0.2 core · 100000


def slo(**burst):
    spec, errors = merge_node_slo_spec({"cpuBurstStrategy": burst}, "n1")
    assert not errors
    return spec


class Real:
    def __init__(self, tree):
        self.tree = tree
        self.cg = Cgroups(tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)
        self.meta = pod_meta(UID, "spinner", qos="Burstable", containers={"app": CID},
                             resources={"app": {"limits": {"cpu": "200m"}}}, layout=self.cg.layout)
        self.pod_rel = self.meta.cgroup_dir
        self.ctr_rel = self.meta.containers[0][1]
        tree.mkdir(self.ctr_rel)
        if not os.path.exists(self.file(self.ctr_rel, "cpu.cfs_burst_us")):
            pytest.skip("kernel has no cpu.cfs_burst_us (CONFIG_CFS_BANDWIDTH burst support)")
        for rel in (self.pod_rel, self.ctr_rel):             # what the kubelet sets for a 200m limit
            self.set(rel, "cpu.cfs_quota_us", BASE)
        self.executor = Executor(self.cg)
        self.cache = MetricCache(None)
        self.topology = read_topology(host_paths("/nonexistent", var_run_root="/run", var_lib_kubelet="/"))

    def file(self, rel, name):
        return self.tree.real("cpu", os.path.join(rel, name))

    def link(self, rel, name):
        """The path as the agent names it (through the link root), as the audit events show it."""
        return self.cg.path("cpu", rel, name)

    def set(self, rel, name, value):
        with open(self.file(rel, name), "w") as f:
            f.write(str(value))

    def get(self, rel, name):
        with open(self.file(rel, name)) as f:
            return f.read().strip()

    def nr_throttled(self):
        for line in self.get(self.ctr_rel, "cpu.stat").splitlines():
            key, value = line.split()
            if key == "nr_throttled":
                return int(value)
        raise AssertionError("no nr_throttled")

    def cycle(self, strategy, spec):
        now = time.time()
        self.cache.append([Sample("node_cpu_usage", (), now - 0.1, 0.05)])     # an idle share pool
        strategy.reconcile(node_view(pods=(self.meta,), slo=spec, topology=self.topology, node=NodeInfo("n1"), now=now),
                           self.executor)


@pytest.fixture
def real(real_tree):
    return Real(real_tree)


def test_cfs_burst_written_and_read_back(real):
    idle = real.tree.spawn(real.ctr_rel, IDLE)
    strategy = CPUBurst(real.cache, 1.0)
    real.cycle(strategy, slo(policy="cpuBurstOnly", cpuBurstPercent=50))
    assert real.get(real.ctr_rel, "cpu.cfs_burst_us") == str(BASE // 2)      # 0.2 core · 50 % · 100000
    assert real.get(real.pod_rel, "cpu.cfs_burst_us") == str(BASE // 2)
    # the default 1000 % asks for 10x the quota: the kernel refuses that, so the burst is capped at the quota
    real.cycle(strategy, slo(policy="auto"))
    assert real.get(real.ctr_rel, "cpu.cfs_burst_us") == str(BASE)
    assert real.get(real.pod_rel, "cpu.cfs_burst_us") == str(BASE)
    failed = real.executor.total.failed
    real.cycle(strategy, slo(policy="auto"))
    assert real.executor.total.failed == failed                               # no longer retried every cycle
    real.cycle(strategy, slo(policy="none"))
    assert real.get(real.ctr_rel, "cpu.cfs_burst_us") == "0"
    assert idle.poll() is None


def cpu_rate(proc, seconds=1.5):
    t0, c0 = time.monotonic(), proc_cpu_seconds(proc.pid)
    time.sleep(seconds)
    return (proc_cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0)


def test_throttled_container_gets_its_quota_raised(real):
    spinner = real.tree.spawn(real.ctr_rel, BUSY)
    strategy = CPUBurst(real.cache, 1.0)
    spec = slo(policy="cfsQuotaBurstOnly", cfsQuotaBurstPercent=300)
    time.sleep(0.3)
    before = cpu_rate(spinner)
    assert before < 0.3                                                       # held at 0.2 core
    throttled = real.nr_throttled()
    assert throttled > 0

    seen, grew_without_throttling, stalled_while_throttled = [], [], []
    last = real.nr_throttled()
    for _ in range(30):
        now_throttled = real.nr_throttled()          # what the strategy is about to see, microseconds later
        real.cycle(strategy, spec)
        ctr, pod = int(real.get(real.ctr_rel, "cpu.cfs_quota_us")), int(real.get(real.pod_rel, "cpu.cfs_quota_us"))
        assert ctr <= pod                                                     # the kernel would refuse otherwise
        if seen and ctr > seen[-1] and now_throttled == last:
            grew_without_throttling.append(ctr)
        if len(seen) > 1 and ctr == seen[-1] < 3 * BASE and now_throttled - last > 2:
            stalled_while_throttled.append(ctr)
        last = now_throttled
        if not seen or seen[-1] != ctr:
            seen.append(ctr)
        if ctr == 3 * BASE:
            break
        time.sleep(0.25)
    assert real.nr_throttled() > throttled
    assert seen[:3] == [BASE, 24000, 28800], seen                             # ×1.2 per throttled cycle
    assert all(b == min(a * 6 // 5, 3 * BASE) for a, b in itertools.pairwise(seen)), seen
    # The quota follows the kernel's throttling: it grows only after throttled periods and stops growing when the
    # spinner no longer uses its quota (a busy VM can starve it before the 300 % ceiling).
    assert grew_without_throttling == [] and stalled_while_throttled == [], (seen, grew_without_throttling,
                                                                             stalled_while_throttled)
    assert int(real.get(real.pod_rel, "cpu.cfs_quota_us")) >= seen[-1]
    events = [e["file"] for e in real.executor.events() if e["reason"] == "CFSQuotaBurst"]
    assert events[:2] == [real.link(real.pod_rel, "cpu.cfs_quota_us"), real.link(real.ctr_rel, "cpu.cfs_quota_us")]

    if seen[-1] == 3 * BASE:
        after = cpu_rate(spinner)
        assert after > 1.5 * before, (before, after)                          # the kernel gives it more CPU

    mark = len(real.executor.events())
    real.cycle(strategy, slo(policy="none"))
    assert real.get(real.ctr_rel, "cpu.cfs_quota_us") == str(BASE)
    assert real.get(real.pod_rel, "cpu.cfs_quota_us") == str(BASE)
    resets = [e["file"] for e in real.executor.events()[mark:] if e["reason"] == "CFSQuotaBurst"]
    assert resets == [real.link(real.ctr_rel, "cpu.cfs_quota_us"), real.link(real.pod_rel, "cpu.cfs_quota_us")]
    assert spinner.poll() is None
