"""BE CPU suppress (qos/cpu_suppress.py): the formula, the cpuset pick and the quota rules as tables, then the
strategy on fake v1/v2 cgroup trees.

Expected numbers come from upstream pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress.go (n = max(2, ceil),
growth cap ceil(10% CPUs), (NUMA, socket) buckets with HT pairs first, quota = milli·100 ≥ 2000, 1% skip band, 10% step
cap).
"""

import json
import logging

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.topology import CPU, CPUBasicInfo, NUMANode, Topology
from koordlet.metriccache import MetricCache, Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.cpu_suppress import (
    CPUSuppress,
    FilteredUsage,
    Processor,
    be_cfs_quota,
    be_cpuset_size,
    be_suppress_cpuset,
    be_suppress_milli,
    filter_used,
    is_non_be_host_app,
    is_non_be_pod,
    node_reserved_milli,
    processors_of,
    select_cpus,
)
from koordlet.states.informer import meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import CgroupPath, HostApplicationSpec
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view
from tests.fakehost import CgroupValues, FakeHost

NOW = 1_000_000.0
LS_UID = "11111111-0000-0000-0000-000000000001"
BE_UID = "11111111-0000-0000-0000-000000000002"
LSR_UID = "11111111-0000-0000-0000-000000000003"
LSE_UID = "11111111-0000-0000-0000-000000000004"
BE_CID, SANDBOX = "b" * 64, "5" * 64


def ht_topology() -> Topology:
    """2 sockets = 2 NUMA nodes, 2 cores each, 2 threads per core: {0,4} {1,5} on node 0, {2,6} {3,7} on node 1."""
    cpus = []
    for cpu in range(8):
        node = (cpu % 4) // 2
        core = cpu % 4
        cpus.append(CPU(id=cpu, online=True, node=node, socket=node, core=core, physical_package_id=node,
                        core_id=core % 2, siblings=(core, core + 4)))
    nodes = (NUMANode(0, (0, 1, 4, 5), {"MemTotal": 16 * 2**20}, {}),
             NUMANode(1, (2, 3, 6, 7), {"MemTotal": 16 * 2**20}, {}))
    return Topology(cpus=tuple(cpus), nodes=nodes, packages=(), cores=(), caches=(), online=tuple(range(8)),
                    offline=(), present=tuple(range(8)), possible=tuple(range(8)), numa_from_sysfs=True,
                    basic=CPUBasicInfo())


HT = processors_of(ht_topology())


def flat(n: int, node: int = 0) -> list[Processor]:
    """n CPUs without SMT (every CPU its own core) on one node/socket."""
    return [Processor(cpu=i, core=i, socket=0, node=node) for i in range(n)]


# ----------------------------------------------------------------------------------------------------------
# the formula

@pytest.mark.parametrize("node,reserved,pods,apps,expected", [
    # node 6 cores, LS 2 + BE 3 -> system 1
    (6.0, 0.0, {"ls": 2.0, "be": 3.0}, {}, FilteredUsage(2.0, 0.0, 1.0)),
    # the reservation wins over a smaller measured system usage
    (6.0, 1.5, {"ls": 2.0, "be": 3.0}, {}, FilteredUsage(2.0, 0.0, 1.5)),
    # host apps: the non-BE one counts as LS usage, both leave the system share
    (6.8, 0.0, {"ls": 2.0, "be": 3.0}, {"nginx": 0.5, "spark": 0.3}, FilteredUsage(2.0, 0.5, 1.0)),
    # pods+apps above the node reading: system is 0, not negative
    (4.0, 0.0, {"ls": 2.0, "be": 3.0}, {}, FilteredUsage(2.0, 0.0, 0.0)),
])
def test_filter_used(node, reserved, pods, apps, expected):
    got = filter_used(node, reserved, pods, ["ls"], apps, ["nginx"])
    assert got.pods == pytest.approx(expected.pods)
    assert got.host_apps == pytest.approx(expected.host_apps)
    assert got.system == pytest.approx(expected.system)


@pytest.mark.parametrize("capacity,threshold,minimum,used,expected", [
    (8000, 65, None, FilteredUsage(2.0, 0.0, 1.0), 2200),         # 5200 - 2000 - 1000
    (8000, 65, None, FilteredUsage(2.0, 0.5, 1.0), 1700),
    (8000, 65, None, FilteredUsage(6.0, 0.0, 1.0), -1800),        # may go negative without a floor
    (8000, 65, 10, FilteredUsage(6.0, 0.0, 1.0), 800),            # floor: 10% of capacity
    (8000, 65, 10, FilteredUsage(1.0, 0.0, 0.0), 4200),           # floor not reached
    (2000, 65, None, FilteredUsage(0.0015, 0.0, 0.0019), 1298),   # each usage truncated to milli first
])
def test_be_suppress_milli(capacity, threshold, minimum, used, expected):
    assert be_suppress_milli(capacity, threshold, minimum, used) == expected


def test_be_pod_and_host_app_filters():
    assert is_non_be_pod(agent_pod(LS_UID, "ls"))
    assert not is_non_be_pod(agent_pod(BE_UID, "be-label", qos_class="BE"))
    assert not is_non_be_pod(agent_pod(BE_UID, "besteffort", qos="BestEffort"))
    assert is_non_be_pod(agent_pod(BE_UID, "lsr", qos="Guaranteed", qos_class="LSR"))
    be_dir = CgroupPath(base="KubepodsBesteffort")
    assert not is_non_be_host_app(HostApplicationSpec(name="a", qos="BE", cgroup_path=be_dir))
    assert is_non_be_host_app(HostApplicationSpec(name="a", qos="BE"))                 # BE but not under besteffort
    assert is_non_be_host_app(HostApplicationSpec(name="a", qos="BE", cgroup_path=CgroupPath(base="CgroupRoot")))
    assert is_non_be_host_app(HostApplicationSpec(name="a", qos="LS", cgroup_path=be_dir))


@pytest.mark.parametrize("capacity,allocatable,annotation,expected", [
    ({}, {}, None, 0),
    ({"cpu": "8"}, {"cpu": "7500m"}, None, 500),
    ({"cpu": "8"}, {"cpu": "9"}, None, 0),                                       # never negative
    ({"cpu": "8"}, {"cpu": "7500m"}, {"resources": {"cpu": "2"}}, 2000),
    ({"cpu": "8"}, {"cpu": "7500m"}, {"resources": {"cpu": "2"}, "reservedCPUs": "0-2"}, 3000),  # cpus win
    ({"cpu": "8"}, {"cpu": "5"}, {"resources": {"cpu": "1"}}, 3000),                             # the max
    ({"cpu": "8"}, {"cpu": "7500m"}, "not json", 500),
])
def test_node_reserved(capacity, allocatable, annotation, expected):
    annotations = {} if annotation is None else {
        "node.koordinator.sh/reservation": annotation if isinstance(annotation, str) else json.dumps(annotation)}
    node = NodeInfo("n1", capacity=capacity, allocatable=allocatable, annotations=annotations)
    assert node_reserved_milli(node) == expected


# ----------------------------------------------------------------------------------------------------------
# the cpuset pick

@pytest.mark.parametrize("suppress,current,total,expected", [
    (3500, 4, 8, 4),
    (500, 4, 8, 2),            # at least 2
    (-3000, 4, 8, 2),
    (8000, 2, 16, 4),          # growth cap: 2 + ceil(1.6)
    (8000, 6, 16, 8),
    (500, 0, 8, 1),            # the cap applies even below the minimum (upstream)
    (3001, 2, 40, 4),          # ceil(3.001) = 4, cap ceil(4.0) = 4 -> 2 + 4 = 6 allowed
])
def test_be_cpuset_size(suppress, current, total, expected):
    assert be_cpuset_size(suppress, current, total) == expected


@pytest.mark.parametrize("count,expected", [
    (2, [0, 4]),                       # one HT pair in the first NUMA bucket
    (3, [0, 4, 2]),                    # a pair, then a single CPU from the next bucket
    (4, [0, 4, 2, 6]),                 # one pair per NUMA node (round robin)
    (5, [0, 4, 2, 6, 1]),
    (6, [0, 4, 2, 6, 1, 5]),
    (8, [0, 4, 2, 6, 1, 5, 3, 7]),
    (9, []),                           # not enough CPUs
])
def test_select_cpus_prefers_ht_pairs_round_robin_over_numa(count, expected):
    assert select_cpus(count, HT) == expected


def test_select_cpus_without_smt_and_uneven_buckets():
    assert select_cpus(3, flat(4)) == [0, 1, 2]
    # node 1 has more CPUs: its bucket is visited first
    uneven = flat(2, node=0) + [Processor(cpu=c, core=c, socket=0, node=1) for c in (2, 3, 4)]
    assert select_cpus(2, uneven) == [2, 0]
    assert select_cpus(4, uneven) == [2, 0, 3, 1]


def test_be_suppress_cpuset_splits_lsr_and_others():
    lsr = [p for p in HT if p.cpu in (2, 6)]
    others = [p for p in HT if p.cpu not in (2, 6)]
    # n = 4: 4·2/8 = 1 from LSR (CPU 2), 3 from the others (pair 0,4 on node 0, then 3 on node 1)
    assert be_suppress_cpuset(3500, 8, 8, lsr, others) == [0, 2, 3, 4]
    assert be_suppress_cpuset(3500, 8, 8, [], []) == []


@pytest.mark.parametrize("suppress,current,expected", [
    (1500, -1, 150000),        # unset: no step cap
    (1500, 148000, None),      # within 1% of 4 cores (4000)
    (1500, 100000, 140000),    # increase capped at 10% of 4 cores per step
    (500, 300000, 50000),      # decreases are not capped
    (10, 2000, 2000),          # the minimum is always written
    (-5000, 50000, 2000),
    (-5000, -1, 2000),
])
def test_be_cfs_quota(suppress, current, expected):
    assert be_cfs_quota(suppress, current, 4) == expected


# ----------------------------------------------------------------------------------------------------------
# the strategy on fake trees

def slo(**threshold):
    value, errors = merge_node_slo_spec({"resourceUsedThresholdWithBE": threshold} if threshold else None, "n1")
    assert not errors
    return value


class Env:
    def __init__(self, tmp_path, version=CgroupVersion.V1):
        self.host = FakeHost(str(tmp_path), version, Driver.CGROUPFS, ncpu=8)
        self.version = version
        self.cg = Cgroups(self.host.paths.cgroup_root, version, Driver.CGROUPFS)
        self.executor = Executor(self.cg)
        self.cache = MetricCache(None)
        self.metrics = AgentMetrics("n1")
        self.strategy = CPUSuppress(self.cache, 1.0, self.metrics)
        self.be_dir = self.cg.layout.qos_dir(KubeQOS.BESTEFFORT)
        self.host.set_cgroup(self.be_dir, CgroupValues(cpuset="0-7"))
        self.ls = self.add(agent_pod(LS_UID, "web", containers={"app": "a" * 64}))
        self.be = self.add(agent_pod(BE_UID, "batch", qos="BestEffort", qos_class="BE", containers={"job": BE_CID}))
        self.host.set_cgroup(f"{self.be.cgroup_dir}/{SANDBOX}", CgroupValues(cpuset="0-7"))   # the pause container

    def add(self, p):
        meta = meta_for(p, self.cg.layout)
        self.host.add_pod(meta.pod.kube_qos, meta.pod.uid, CgroupValues(cpuset="0-7"),
                          {c.id: CgroupValues(cpuset="0-7") for c, _ in meta.containers})
        return meta

    def usage(self, node, ls, be, now=NOW):
        self.cache.append([Sample("node_cpu_usage", (), now - 0.5, node),
                           Sample("pod_cpu_usage", (("pod_uid", LS_UID),), now - 0.5, ls),
                           Sample("pod_cpu_usage", (("pod_uid", BE_UID),), now - 0.5, be)])

    def view(self, spec, policy="none", **kw):
        fields = dict(pods=(self.ls, self.be), slo=spec, topology=ht_topology(),
                      node=NodeInfo("n1", capacity={"cpu": "8"}, allocatable={"cpu": "8"}),
                      cpu_manager_policy=policy, now=NOW, be_pools={0: (0, 1, 4, 5), 1: (2, 3, 6, 7)})
        fields.update(kw)
        return node_view(**fields)

    def cpuset(self, rel):
        with open(self.cg.path("cpuset", rel, "cpuset.cpus")) as f:
            return f.read().strip()

    def quota(self):
        name = "cpu.cfs_quota_us" if self.version is CgroupVersion.V1 else "cpu.max"
        with open(self.cg.path("cpu", self.be_dir, name)) as f:
            return f.read().split()[0]

    def set_quota(self, value):
        name = "cpu.cfs_quota_us" if self.version is CgroupVersion.V1 else "cpu.max"
        with open(self.cg.path("cpu", self.be_dir, name), "w") as f:
            f.write(str(value))

    def all_dirs(self):
        return [self.be_dir, self.be.cgroup_dir, self.be.containers[0][1], f"{self.be.cgroup_dir}/{SANDBOX}"]


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


def test_cpuset_policy_none_writes_every_be_level(env):
    # capacity 8·65% = 5200m; LS 2 cores, system 6-2-3 = 1 -> suppress 2200m -> 3 CPUs: pair {0,4} + CPU 2
    env.usage(node=6.0, ls=2.0, be=3.0)
    env.set_quota(50000)
    env.strategy.reconcile(env.view(slo(enable=True)), env.executor)
    assert [env.cpuset(rel) for rel in env.all_dirs()] == ["0,2,4"] * 4
    assert env.quota() in ("-1", "max")             # the other policy is reset
    assert env.cpuset(env.ls.cgroup_dir) == "0-7"   # non-BE pods untouched
    assert env.metrics.be_suppress_cpu_cores.labels("n1", "cpuset")._value.get() == 3
    # loosen-then-tighten: the BE dir was never narrower than a child at any step
    cpuset_writes = [e["file"] for e in env.executor.events() if e["file"].endswith("cpuset.cpus")]
    assert cpuset_writes[-1] == env.cg.path("cpuset", env.be_dir, "cpuset.cpus")    # bottom-up: parent last
    assert cpuset_writes.count(cpuset_writes[-1]) == 1
    # the quota is reset once, not every cycle
    env.set_quota(50000)
    env.strategy.reconcile(env.view(slo(enable=True)), env.executor)
    assert env.quota() == "50000"


def test_cpuset_policy_static_keeps_qos_and_pod_dirs_at_the_full_be_set(env):
    env.usage(node=6.0, ls=2.0, be=3.0)
    env.strategy.reconcile(env.view(slo(enable=True), policy="static",
                                    be_pools={0: (0, 1, 4, 5), 1: (2, 3, 6)}), env.executor)
    assert env.cpuset(env.be_dir) == "0-6"
    assert env.cpuset(env.be.cgroup_dir) == "0-6"
    assert env.cpuset(env.be.containers[0][1]) == "0,2,4"
    assert env.cpuset(f"{env.be.cgroup_dir}/{SANDBOX}") == "0,2,4"


def test_cpuset_growth_is_capped_per_cycle(env):
    for rel in env.all_dirs():
        env.host.set_cgroup(rel, CgroupValues(cpuset="0,4"))
    env.usage(node=1.0, ls=0.2, be=0.5)          # suppress 5200-200-300 = 4700m -> 5 CPUs wanted
    env.strategy.reconcile(env.view(slo(enable=True)), env.executor)
    assert env.cpuset(env.be_dir) == "0,2,4"     # 2 + ceil(0.8) = 3
    env.strategy.reconcile(env.view(slo(enable=True)), env.executor)
    assert env.cpuset(env.be_dir) == "0,2,4,6"


def test_lsr_pinned_cpus_share_and_lse_reserved_excluded(env):
    lsr = env.add(agent_pod(LSR_UID, "db", qos="Guaranteed", qos_class="LSR",
                            annotations={"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": "2,6"})}))
    lse = env.add(agent_pod(LSE_UID, "rt", qos="Guaranteed", qos_class="LSE",
                            annotations={"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": "3"})}))
    env.usage(node=2.0, ls=0.5, be=1.0)          # 5200-500-500 = 4200m -> 5 CPUs
    # no reported pools: the full BE set is online − reserved − LSE
    view = env.view(slo(enable=True, cpuSuppressThresholdPercent=65), pods=(env.ls, env.be, lsr, lse),
                    be_pools={}, reserved_cpus=(7,))
    env.strategy.reconcile(view, env.executor)
    # candidates 0,1,2,4,5,6 (3 LSE, 7 reserved); LSR 2,6 -> 5·2/6 = 1 from LSR; 4 from {0,1,4,5}
    assert env.cpuset(env.be_dir) == "0-2,4-5"


def test_cfs_quota_policy_band_step_and_cpuset_reset(env):
    for rel in env.all_dirs():
        env.host.set_cgroup(rel, CgroupValues(cpuset="0,4"))
    env.usage(node=6.0, ls=2.0, be=3.0)          # 2200m -> 220000
    spec = slo(enable=True, cpuSuppressPolicy="cfsQuota")
    env.strategy.reconcile(env.view(spec), env.executor)
    assert env.quota() == "220000"
    assert [env.cpuset(rel) for rel in env.all_dirs()] == ["0-7"] * 4   # cpusets back to the full BE set
    assert env.metrics.be_suppress_cpu_cores.labels("n1", "cfsQuota")._value.get() == 2.2
    # 2250m: +5000 is within 1% of 8 cores (8000): left alone
    env.usage(node=5.95, ls=1.95, be=3.0, now=NOW + 1)
    env.strategy.reconcile(env.view(spec, now=NOW + 1), env.executor)
    assert env.quota() == "220000"
    # a big increase moves at most 10% of 8 cores (80000) per cycle
    env.usage(node=1.0, ls=0.1, be=0.5, now=NOW + 2)      # 5200-100-400 = 4700m
    env.strategy.reconcile(env.view(spec, now=NOW + 2), env.executor)
    assert env.quota() == "300000"
    # switching to the cpuset policy lifts the quota (once) and suppresses by cpuset instead
    env.strategy.reconcile(env.view(slo(enable=True), now=NOW + 2), env.executor)
    assert env.quota() == "-1"
    assert env.cpuset(env.be_dir) == "0-2,4,6"          # 4700m -> 5 CPUs


def test_disabled_recovers_quota_once_and_full_cpusets(env, caplog):
    for rel in env.all_dirs():
        env.host.set_cgroup(rel, CgroupValues(cpuset="0,4"))
    env.set_quota(20000)
    view = env.view(slo(enable=False), be_pools={0: (0, 1, 4, 5), 1: (2, 6)})
    env.strategy.reconcile(view, env.executor)
    assert env.quota() in ("-1", "max")
    assert [env.cpuset(rel) for rel in env.all_dirs()] == ["0-2,4-6"] * 4
    env.set_quota(20000)
    env.strategy.reconcile(view, env.executor)
    assert env.quota() == "20000"                 # -1 is written once


def test_missing_metrics_do_nothing_and_log_once(env, caplog):
    env.set_quota(50000)
    caplog.set_level(logging.WARNING, "koordlet.qos.cpu_suppress")
    for _ in range(3):
        env.strategy.reconcile(env.view(slo(enable=True)), env.executor)
    assert env.executor.events() == []
    assert env.quota() == "50000"
    assert len([r for r in caplog.records if "node_cpu_usage" in r.message]) == 1
    # samples older than 2 × the collect interval do not count either
    env.usage(node=6.0, ls=2.0, be=3.0, now=NOW - 5)
    env.strategy.reconcile(env.view(slo(enable=True)), env.executor)
    assert env.executor.events() == []


def test_standalone_capacity_is_the_online_cpus(env):
    env.usage(node=2.0, ls=0.0, be=2.0)
    # no Node object: 8 online CPUs -> 5200m; system = 2 - 2 = 0 -> ceil(5.2) = 6 CPUs
    env.strategy.reconcile(env.view(slo(enable=True), node=NodeInfo("")), env.executor)
    assert env.cpuset(env.be_dir) == "0-2,4-6"


def test_v2_tree_uses_cpu_max(tmp_path):
    env = Env(tmp_path, CgroupVersion.V2)
    env.usage(node=6.0, ls=2.0, be=3.0)
    env.strategy.reconcile(env.view(slo(enable=True, cpuSuppressPolicy="cfsQuota")), env.executor)
    assert env.quota() == "220000"
