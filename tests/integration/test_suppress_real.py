"""BE CPU suppress against the real kernel: real BestEffort pod cgroups, real busy processes, the effect measured.

- cfsQuota: two spinners in a BE container use ~2 cores (the unthrottled control); after the strategy computes
  suppress = 0.5 core and writes the BestEffort QoS quota, the tier's cpuacct.usage grows at ~0.5 core/s.
- cpuset: the BE container's process is allowed exactly the computed BE cpuset (grown through every level of
  the tree with the union-then-exact order), and recovery narrows it again bottom-up.
"""

from __future__ import annotations

import os
import time

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, format_cpu_list
from koordlet.host.topology import read_topology
from koordlet.metriccache import MetricCache, Sample
from koordlet.qos.cpu_suppress import CPUSuppress, be_suppress_cpuset, processors_of
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import Executor
from tests.builders import host_paths, node_view, pod_meta
from tests.realcgroup import BUSY, IDLE, cpus_allowed

pytestmark = pytest.mark.root

UID_LS, UID_BE = "11111111-2222-3333-4444-000000000001", "11111111-2222-3333-4444-000000000002"
BE_DIR = "kubepods/besteffort"


def slo(**threshold):
    value, errors = merge_node_slo_spec({"resourceUsedThresholdWithBE": threshold}, "n1")
    assert not errors
    return value


def kernel(tree, sub: str, rel: str, file: str) -> str:
    with open(tree.real(sub, os.path.join(rel, file))) as f:
        return f.read().strip()


def be_cores(tree, seconds: float) -> float:
    """CPU time the BestEffort tier used per wall second, from the kernel's own cpuacct.usage."""
    start, t0 = int(kernel(tree, "cpuacct", BE_DIR, "cpuacct.usage")), time.monotonic()
    time.sleep(seconds)
    used, wall = int(kernel(tree, "cpuacct", BE_DIR, "cpuacct.usage")) - start, time.monotonic() - t0
    return used / 1e9 / wall


class Setup:
    def __init__(self, tree):
        self.tree = tree
        self.paths = host_paths(tree.link_root)
        self.cg = Cgroups(tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)
        self.topology = read_topology(self.paths)
        self.ls = pod_meta(UID_LS, "web", namespace="ns", labels={}, qos="Burstable", containers={"main": "1" * 64},
                           layout=self.cg.layout)
        self.be = pod_meta(UID_BE, "batch", namespace="ns", qos_class="BE", qos="BestEffort",
                           containers={"main": "2" * 64}, layout=self.cg.layout)
        self.container = self.be.containers[0][1]
        tree.mkdir(self.container)
        self.cache = MetricCache(None)
        self.strategy = CPUSuppress(self.cache, 1.0)
        self.executor = Executor(self.cg)

    def feed(self, node: float, ls: float, be: float) -> float:
        now = time.time()
        self.cache.append([Sample("node_cpu_usage", (), now, node),
                           Sample("pod_cpu_usage", (("pod_uid", UID_LS),), now, ls),
                           Sample("pod_cpu_usage", (("pod_uid", UID_BE),), now, be)])
        return now

    def view(self, spec, now: float, be_pools) -> NodeView:
        return node_view(pods=(self.ls, self.be), slo=spec, topology=self.topology,
                         node=NodeInfo("n1", capacity={"cpu": "2"}, allocatable={"cpu": "2"}), now=now,
                         be_pools=be_pools)


def nr_throttled(tree) -> int:
    for line in kernel(tree, "cpu", BE_DIR, "cpu.stat").splitlines():
        key, _, value = line.partition(" ")
        if key == "nr_throttled":
            return int(value)
    raise AssertionError("no nr_throttled in cpu.stat")


def test_cfs_quota_policy_throttles_the_be_tier_to_the_suppress_value(real_tree):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    s = Setup(real_tree)
    for _ in range(2):
        real_tree.spawn(s.container, BUSY)
    time.sleep(0.3)
    control = be_cores(real_tree, 1.5)
    print(f"BE tier unthrottled: {control:.2f} cores")
    # 2 cores · 65% = 1300m − LS 0.8 core − system max(2.8 − 0.8 − 2.0, 0) = 500m -> quota 50000
    now = s.feed(node=2.8, ls=0.8, be=2.0)
    spec = slo(enable=True, cpuSuppressThresholdPercent=65, cpuSuppressPolicy="cfsQuota")
    s.strategy.reconcile(s.view(spec, now, {0: (0, 1)}), s.executor)
    assert kernel(real_tree, "cpu", BE_DIR, "cpu.cfs_quota_us") == "50000"
    time.sleep(0.2)
    throttled_before = nr_throttled(real_tree)
    throttled = be_cores(real_tree, 2.0)
    print(f"BE tier suppressed to 0.5 core: {throttled:.2f} cores")
    assert nr_throttled(real_tree) > throttled_before, "the kernel never throttled the BE tier"
    assert throttled / 0.5 < 1.35, f"BE tier should run at most ~0.5 core, got {throttled:.2f}"
    # the unthrottled control used clearly more than the quota allows: the drop is the quota, not the host
    assert control > 1.5 * throttled, f"control {control:.2f} vs suppressed {throttled:.2f} cores"
    if control > 1.2:          # the spinners were not starved by other load, so the tier must reach its quota
        assert throttled / 0.5 > 0.65, f"BE tier should run at ~0.5 core, got {throttled:.2f}"
    # disabling the feature lifts the limit (once): no more throttling
    s.strategy.reconcile(s.view(slo(enable=False), time.time(), {0: (0, 1)}), s.executor)
    assert kernel(real_tree, "cpu", BE_DIR, "cpu.cfs_quota_us") == "-1"
    time.sleep(0.2)
    before = nr_throttled(real_tree)
    time.sleep(0.5)
    assert nr_throttled(real_tree) == before


def test_cpuset_policy_moves_the_be_processes(real_tree):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    s = Setup(real_tree)
    first = min(os.sched_getaffinity(0))
    for rel in reversed(real_tree.dirs[1:]):               # the BE subtree starts narrowed to one CPU
        with open(real_tree.real("cpuset", os.path.join(rel, "cpuset.cpus")), "w") as f:
            f.write(str(first))
    proc = real_tree.spawn(s.container, IDLE)
    assert cpus_allowed(proc.pid) == str(first)
    online = tuple(sorted(os.sched_getaffinity(0)))
    now = s.feed(node=1.0, ls=0.2, be=0.5)                 # 1300 − 200 − 300 = 800m -> the 2-CPU minimum
    s.strategy.reconcile(s.view(slo(enable=True), now, {0: online}), s.executor)
    expected = be_suppress_cpuset(800, 1, len(online), [],
                                  [p for p in processors_of(s.topology) if p.cpu in online])
    assert len(expected) == 2                              # grown from 1 CPU (cap: ceil(10% of 2) = 1 more)
    want = format_cpu_list(expected)
    assert cpus_allowed(proc.pid) == want
    for rel in (BE_DIR, s.be.cgroup_dir, s.container):
        assert kernel(real_tree, "cpuset", rel, "cpuset.cpus") == want
    # recovery with a BE pool of the last CPU only narrows every level, children first
    last = max(online)
    s.strategy.reconcile(s.view(slo(enable=False), time.time(), {0: (last,)}), s.executor)
    assert cpus_allowed(proc.pid) == str(last)
    assert kernel(real_tree, "cpuset", BE_DIR, "cpuset.cpus") == str(last)
    assert s.executor.total.failed == 0
