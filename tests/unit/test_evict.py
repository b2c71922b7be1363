"""Evictions (qos/evict.py): pod metadata parsing, victim order and release amounts as tables, the shared
release account, cool-downs with an injected clock, the standalone paths, and the cluster path against the
API server double over real HTTP.

Expected values come from upstream pkg/koordlet/qosmanager/plugins/cpuevict, memoryevict, util/evict.go, and
apis/extension/constants.go, priority_utils.go (the pod metadata).
"""

import json
import logging
import subprocess

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, Layout
from koordlet.host.topology import CPUBasicInfo, NUMANode, Topology
from koordlet.metriccache import MetricCache, Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.evict import Evictor
from koordlet.qos.evict_release import (
    BECPUSample,
    EvictTask,
    be_cpu_release_milli,
    check_be_cpu_config,
    check_cpu_config,
    check_memory_config,
    cpu_usage_release_milli,
    kill_and_evict,
    memory_release_bytes,
)
from koordlet.qos.evict_victims import (
    PodEvictInfo,
    be_cpu_victims,
    be_memory_victims,
    eviction_policy_allows,
    eviction_priority,
    label_priority,
    priority_value,
    priority_victims,
)
from koordlet.states.informer import meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import ResourceThresholdStrategy
from koordlet.states.pod import pod_from_k8s
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view, pod_meta, pod_object
from tests.fakehost import CgroupValues, FakeHost

NOW = 1_000_000.0
GiB = 2**30
BE = {"koordinator.sh/qosClass": "BE"}
ENABLED = {"koordinator.sh/eviction-enabled": "true"}
LAYOUT = Layout(Driver.CGROUPFS)


def uid(n: int) -> str:
    return f"22222222-0000-0000-0000-{n:012d}"


def cid(n: int) -> str:
    """Pod n's one container's id (its container is c)."""
    return f"{n:064x}"


def batch_cpu(milli: int) -> dict:
    """The resources of a container asking for ``milli`` batch CPU."""
    return {"requests": {"kubernetes.io/batch-cpu": str(milli)}}


def names(infos):
    return [i.pod.name for i in infos]


# ----------------------------------------------------------------------------------------------------------
# metadata (upstream apis/extension/constants.go, priority_utils.go)

@pytest.mark.parametrize("annotation,gate,expected", [
    (None, "BECPUEvict", True),                           # no annotation: any gate
    ('["BECPUEvict","MemoryEvict"]', "BECPUEvict", True),
    ('["BECPUEvict","MemoryEvict"]', "CPUEvict", False),
    ("[]", "CPUEvict", False),
    ("null", "CPUEvict", False),
    ("not json", "CPUEvict", ValueError),
    ('{"BECPUEvict": true}', "BECPUEvict", ValueError),
    ('["BECPUEvict", 3]', "BECPUEvict", ValueError),
])
def test_eviction_policy(annotation, gate, expected):
    p = agent_pod(uid(1), "p1", containers={"c": cid(1)},
                  annotations={} if annotation is None else {"koordinator.sh/eviction-policy": annotation})
    if expected is ValueError:
        with pytest.raises(ValueError):
            eviction_policy_allows(p, gate)
    else:
        assert eviction_policy_allows(p, gate) is expected


@pytest.mark.parametrize("raw,expected", [(None, 0), ("5", 5), ("-3", -3), ("+2", 2), ("2147483647", 2147483647),
                                          ("2147483648", ValueError), ("abc", ValueError), ("1.5", ValueError)])
def test_eviction_priority(raw, expected):
    p = agent_pod(uid(1), "p1", containers={"c": cid(1)},
                  annotations={} if raw is None else {"koordinator.sh/eviction-priority": raw})
    if expected is ValueError:
        with pytest.raises(ValueError):
            eviction_priority(p)
    else:
        assert eviction_priority(p) == expected


@pytest.mark.parametrize("raw,expected", [(None, 42), ("7", 7), ("+7", 7), ("-7", -7), (" 7", 42), ("1_0", 42),
                                          ("x", 42)])
def test_label_priority_is_atoi(raw, expected):
    p = agent_pod(uid(1), "p1", containers={"c": cid(1)},
                  labels={} if raw is None else {"koordinator.sh/priority": raw})
    assert label_priority(p, 42) == expected


@pytest.mark.parametrize("kw,expected", [
    (dict(), 9500),                                           # LS by default -> koord-prod
    (dict(labels=BE, qos="BestEffort"), 5500),                # BE -> koord-batch
    (dict(labels={"koordinator.sh/priority-class": "koord-mid"}), 7500),
    (dict(priority=8000), 8000),                              # a non-zero spec.priority wins
    (dict(priority=0, labels=BE), 5500),                      # zero means "use the class default"
    (dict(priority=3200), 3200),
])
def test_priority_value_with_default(kw, expected):
    assert priority_value(agent_pod(uid(1), "p1", containers={"c": cid(1)}, **kw)) == expected


# ----------------------------------------------------------------------------------------------------------
# victims

def test_be_cpu_victims_order_and_filters():
    pods = [pod_meta(uid(n), name, containers={"c": cid(n)}, resources={"c": batch_cpu(milli)}, layout=LAYOUT, **kw)
            for n, name, milli, kw in [
                (1, "low-prio-idle", 1000, dict(labels=BE, priority=5000)),
                (2, "busy", 1000, dict(labels=BE, priority=5500)),
                (3, "idle", 2000, dict(labels=BE, priority=5500)),
                (4, "ls", 1000, dict(priority=5500)),                           # not raw BE
                (5, "opted-out", 1000, dict(labels=BE,
                                            annotations={"koordinator.sh/eviction-policy": '["BEMemoryEvict"]'}))]]
    used = {uid(1): 100, uid(2): 900, uid(3): 400}
    got = be_cpu_victims(pods, used)
    assert names(got) == ["low-prio-idle", "busy", "idle"]       # priority, then usage/request desc
    assert [(i.milli_cpu_request, i.milli_cpu_used, i.cpu_usage) for i in got] == \
        [(1000, 100, 0.1), (1000, 900, 0.9), (2000, 400, 0.2)]


def test_be_memory_victims_order():
    pods = [pod_meta(uid(n), name, labels=BE, priority=priority, containers={"c": cid(n)}, layout=LAYOUT)
            for n, name, priority in [(1, "a-zero", 5500), (2, "b-zero", 5500), (3, "small", 5500), (4, "big", 5500),
                                      (5, "lowest-prio", 5000)]]
    used = {uid(3): 1 * GiB, uid(4): 3 * GiB, uid(5): 1}
    assert names(be_memory_victims(pods, used)) == ["lowest-prio", "big", "small", "b-zero", "a-zero"]


def test_priority_victims_filters_and_sort(caplog):
    e = dict(labels=ENABLED)
    pods = [pod_meta(uid(n), name, priority=priority, containers={"c": cid(n)}, layout=LAYOUT, **kw)
            for n, name, priority, kw in [
                (1, "a", 5000, e),
                (2, "b", 5000, dict(annotations={"koordinator.sh/eviction-priority": "-1"}, **e)),
                (3, "c", 4000, e),
                (4, "d", 5000, dict(labels={**ENABLED, "koordinator.sh/priority": "-5"})),
                (5, "no-label", 4000, {}),
                (6, "too-high", 9000, e),
                (7, "done", 4000, dict(phase="Succeeded", **e)),
                (8, "no-metric", 4000, e),
                (9, "bad-policy", 4000, dict(annotations={"koordinator.sh/eviction-policy": "{"}, **e)),
                (10, "bad-prio", 5000, dict(annotations={"koordinator.sh/eviction-priority": "x"}, **e))]]
    used = {uid(n): 100 * n for n in (1, 2, 3, 4, 5, 6, 7, 9, 10)}
    from koordlet.base.logutil import LogOnce
    bad = LogOnce(logging.getLogger("test"))
    caplog.set_level(logging.WARNING, "test")
    got = priority_victims(pods, "CPUEvict", 7999, used, "cpu", bad)
    # eviction-priority first (-1), then priority (4000 before 5000), then label priority (-5), then usage desc
    assert names(got) == ["b", "c", "d", "bad-prio", "a"]
    assert got[0].eviction_priority == -1 and got[2].label_priority == -5 and got[4].label_priority == 5000
    assert {r.message.split(" ")[1].rstrip(":") for r in caplog.records} == {"default/bad-policy", "default/bad-prio"}


# ----------------------------------------------------------------------------------------------------------
# how much to release

def thr(**kw) -> ResourceThresholdStrategy:
    return ResourceThresholdStrategy(**kw)


@pytest.mark.parametrize("kw,problem", [
    (dict(cpu_evict_be_satisfaction_lower_percent=40, cpu_evict_be_satisfaction_upper_percent=80), None),
    (dict(cpu_evict_be_satisfaction_lower_percent=40), "not set"),
    (dict(cpu_evict_be_satisfaction_lower_percent=61, cpu_evict_be_satisfaction_upper_percent=80), "(0,60]"),
    (dict(cpu_evict_be_satisfaction_lower_percent=40, cpu_evict_be_satisfaction_upper_percent=100), "(0,100)"),
    (dict(cpu_evict_be_satisfaction_lower_percent=50, cpu_evict_be_satisfaction_upper_percent=40), "<"),
])
def test_be_cpu_config(kw, problem):
    got = check_be_cpu_config(thr(**kw))
    assert got is None if problem is None else problem in got


def test_cpu_and_memory_config():
    assert check_cpu_config(thr(cpu_evict_threshold_percent=80, evict_enabled_priority_threshold=5999)) is None
    assert "evictEnabledPriorityThreshold" in check_cpu_config(thr(cpu_evict_threshold_percent=80))
    assert "below" in check_cpu_config(thr(cpu_evict_threshold_percent=80, cpu_evict_lower_percent=80,
                                           evict_enabled_priority_threshold=1))
    assert check_memory_config(thr(memory_evict_threshold_percent=70), needs_priority=False) is None
    assert "evictEnabledPriorityThreshold" in check_memory_config(thr(memory_evict_threshold_percent=70), True)
    assert "below" in check_memory_config(thr(memory_evict_threshold_percent=70, memory_evict_lower_percent=75),
                                          False)


SAT = dict(cpu_evict_be_satisfaction_lower_percent=40, cpu_evict_be_satisfaction_upper_percent=80)


@pytest.mark.parametrize("avg,last,kw,allocatable,expected", [
    # limit 2000 / request 10000 = 20% <= 40%: release 10000·(0.8-0.2) = 6000; usage 1900/2000 >= 90%
    (BECPUSample(1900, 10000, 2000, 5), BECPUSample(1900, 10000, 2000, 1), {}, -1, 6000),
    # BE not using its limit: nothing
    (BECPUSample(1000, 10000, 2000, 5), BECPUSample(1900, 10000, 2000, 1), {}, -1, 0),
    # satisfaction above the lower bound: nothing
    (BECPUSample(4900, 10000, 5000, 5), BECPUSample(4900, 10000, 5000, 1), {}, -1, 0),
    # the newest sample says less: the minimum wins (limit 3000 -> 10000·0.5)
    (BECPUSample(1900, 10000, 2000, 5), BECPUSample(2900, 10000, 3000, 1), {}, -1, 5000),
    # newest sample no longer saturated: nothing
    (BECPUSample(1900, 10000, 2000, 5), BECPUSample(100, 10000, 3000, 1), {}, -1, 0),
    # a limit below one core always counts as saturated
    (BECPUSample(10, 10000, 500, 5), BECPUSample(10, 10000, 500, 1), {}, -1, 7500),
    # usage threshold from the NodeSLO
    (BECPUSample(1500, 10000, 2000, 5), BECPUSample(1500, 10000, 2000, 1),
     dict(cpu_evict_be_usage_threshold_percent=70), -1, 6000),
    # too few points in a 30 s window (needs >= 10)
    (BECPUSample(1900, 10000, 2000, 9), BECPUSample(1900, 10000, 2000, 1),
     dict(cpu_evict_time_window_seconds=30), -1, 0),
    # evictByAllocatable: the batch allocatable is the limit; unknown (-1) never evicts
    (BECPUSample(1900, 10000, 9000, 5), BECPUSample(1900, 10000, 9000, 1),
     dict(cpu_evict_policy="evictByAllocatable"), 2000, 6000),
    (BECPUSample(1900, 10000, 2000, 5), BECPUSample(1900, 10000, 2000, 1),
     dict(cpu_evict_policy="evictByAllocatable"), -1, 0),
])
def test_be_cpu_release(avg, last, kw, allocatable, expected):
    t = thr(**SAT, **kw)
    window = t.cpu_evict_time_window_seconds or 1
    assert be_cpu_release_milli(avg, last, t, allocatable, window, 1) == expected


@pytest.mark.parametrize("used,kw,expected", [
    (6.0, dict(cpu_evict_threshold_percent=80), 0),                               # 75% of 8 cores
    (6.39, dict(cpu_evict_threshold_percent=80), 0),                              # 79.9% -> 79 (integer percent)
    (6.5, dict(cpu_evict_threshold_percent=80), 240),                             # 81%: 8000·(81-78)%
    (7.2, dict(cpu_evict_threshold_percent=80), 960),                             # lower = 80 - 2
    (7.2, dict(cpu_evict_threshold_percent=80, cpu_evict_lower_percent=60), 2400),
])
def test_cpu_usage_release(used, kw, expected):
    assert cpu_usage_release_milli(used, 8000, thr(**kw)) == expected


@pytest.mark.parametrize("used,kw,expected", [
    (11 * GiB, dict(memory_evict_threshold_percent=70), 0),                       # 68%
    (12 * GiB, dict(memory_evict_threshold_percent=70), 16 * GiB * (75 - 68) // 100),
    (12 * GiB, dict(memory_evict_threshold_percent=70, memory_evict_lower_percent=50), 16 * GiB * 25 // 100),
])
def test_memory_release(used, kw, expected):
    assert memory_release_bytes(used, 16 * GiB, thr(**kw)) == expected


# ----------------------------------------------------------------------------------------------------------
# the shared release account

def info(n, mem):
    return PodEvictInfo(pod_meta(uid(n), f"p{n}", labels=BE, containers={"c": cid(n)}, layout=LAYOUT),
                        memory_used=mem)


def task(gate, victims, release):
    return EvictTask(gate, tuple(victims), {"memory": release}, "podUsed", lambda i: {"memory": i.memory_used})


def test_kill_and_evict_accounts_across_tasks():
    a, b, c, d = info(1, 3 * GiB), info(2, 2 * GiB), info(3, 4 * GiB), info(4, 1 * GiB)
    calls = []

    def evict(i, t):
        calls.append((i.pod.name, t.gate))
        return i.pod.name != "p3"                    # p3 fails to evict

    already = {uid(2)}
    tasks = [task("BEMemoryEvict", [b, a, c], 4 * GiB), task("MemoryEvict", [a, c, d], 5 * GiB)]
    released, newly = kill_and_evict(tasks, lambda i: i.pod.uid in already, evict)
    # BE task: p2 already evicted (2 GiB pending), p1 evicted (3 GiB) -> 5 GiB covers 4.
    # Memory task: 5 GiB already covered -> nothing more.
    assert calls == [("p1", "BEMemoryEvict")]
    assert newly and released == {"podUsed": {"memory": 5 * GiB}}
    # a failed eviction moves on to the next victim
    calls.clear()
    released, newly = kill_and_evict([task("MemoryEvict", [c, d], 1 * GiB)], lambda i: False, evict)
    assert calls == [("p3", "MemoryEvict"), ("p4", "MemoryEvict")] and released["podUsed"]["memory"] == GiB
    # nothing evicted at all
    assert kill_and_evict([task("MemoryEvict", [c], GiB)], lambda i: False, evict)[1] is False


# ----------------------------------------------------------------------------------------------------------
# the strategy

class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def slo(**threshold):
    value, errors = merge_node_slo_spec({"resourceUsedThresholdWithBE": threshold}, "n1")
    assert not errors
    return value


MEM_SLO = dict(enable=True, memoryEvictThresholdPercent=70)


class Env:
    def __init__(self, tmp_path, gates, **kw):
        self.host = FakeHost(str(tmp_path), CgroupVersion.V1, Driver.CGROUPFS)
        self.cg = Cgroups(self.host.paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
        self.executor = Executor(self.cg)
        self.cache = MetricCache(None)
        self.metrics = AgentMetrics("n1")
        self.clock = Clock()
        self.evictor = Evictor(self.cache, 1.0, self.metrics, gates=gates, clock=self.clock, node_name="n1", **kw)
        self.metas = []
        self.topology = Topology(cpus=(), nodes=(NUMANode(0, (), {"MemTotal": 16 * 2**20}, {}),), packages=(),
                                 cores=(), caches=(), online=(0, 1, 2, 3), offline=(), present=(0, 1, 2, 3),
                                 possible=(0, 1, 2, 3), numa_from_sysfs=True, basic=CPUBasicInfo())

    def add(self, obj):
        m = meta_for(pod_from_k8s(obj), self.cg.layout)
        self.host.add_pod(m.pod.kube_qos, m.pod.uid, CgroupValues(), {c.id: CgroupValues() for c, _ in m.containers})
        self.metas.append(m)
        return m

    def memory(self, node, pods, now=NOW):
        self.cache.append([Sample("node_memory_usage", (), now - 0.5, node)] +
                          [Sample("pod_memory_usage", (("pod_uid", u),), now - 0.5, v) for u, v in pods.items()])

    def view(self, spec, now=NOW, **kw):
        fields = dict(pods=self.metas, slo=spec, topology=self.topology, node=NodeInfo("n1"), now=now)
        fields.update(kw)
        return node_view(**fields)

    def count(self, gate, result):
        return self.metrics.pod_eviction_attempts.labels("n1", gate, result)._value.get()


def test_standalone_would_evict_once_and_memory_cool_down(tmp_path, caplog):
    env = Env(tmp_path, {"BEMemoryEvict"})
    env.add(pod_object(uid(1), "be-a", qos="BestEffort", labels=BE, containers={"c": cid(1)}))
    env.add(pod_object(uid(2), "be-b", qos="BestEffort", labels=BE, containers={"c": cid(2)}))
    caplog.set_level(logging.WARNING, "koordlet.qos.evict")
    # 12 GiB of 16 = 75% >= 70: release 16·(75-68)% = 1.12 GiB; be-a uses 2 GiB -> one victim
    env.memory(12 * GiB, {uid(1): 2 * GiB, uid(2): 1 * GiB})
    env.evictor.reconcile(env.view(slo(**MEM_SLO)), env.executor)
    would = [r.message for r in caplog.records if "would evict" in r.message]
    assert len(would) == 1 and "default/be-a" in would[0] and "trigger by koordlet feature BEMemoryEvict" in would[0]
    assert env.count("BEMemoryEvict", "would_evict") == 1
    # within the 4 s cool-down nothing runs; after it, be-a (remembered) counts as pending: be-b is next
    env.clock.t += 3.9
    env.memory(13 * GiB, {uid(1): 2 * GiB, uid(2): 1 * GiB}, now=NOW + 1)
    env.evictor.reconcile(env.view(slo(**MEM_SLO), now=NOW + 1), env.executor)
    assert env.count("BEMemoryEvict", "would_evict") == 1
    env.clock.t += 0.2
    env.evictor.reconcile(env.view(slo(**MEM_SLO), now=NOW + 1), env.executor)
    # 13/16 = 81% -> release 16·13% = 2.08 GiB: be-a's 2 GiB pending is not enough, so be-b goes too
    assert env.count("BEMemoryEvict", "would_evict") == 2
    assert len([r for r in caplog.records if "would evict" in r.message]) == 2


def test_cpu_cool_down_starts_with_the_agent(tmp_path):
    env = Env(tmp_path, {"CPUEvict"})
    env.add(pod_object(uid(1), "victim", labels=ENABLED, priority=5000, containers={"c": cid(1)}))
    spec = slo(enable=True, cpuEvictThresholdPercent=50, evictEnabledPriorityThreshold=5999)
    env.cache.append([Sample("node_cpu_usage", (), NOW - 0.5, 3.5),
                      Sample("pod_cpu_usage", (("pod_uid", uid(1)),), NOW - 0.5, 3.0)])
    env.clock.t += 19.9
    env.evictor.reconcile(env.view(spec), env.executor)
    assert env.count("CPUEvict", "would_evict") == 0
    env.clock.t += 0.1
    env.evictor.reconcile(env.view(spec), env.executor)
    assert env.count("CPUEvict", "would_evict") == 1


def test_gates_and_nodeslo_enable_decide_what_runs(tmp_path):
    env = Env(tmp_path, {"MemoryEvict"})             # BEMemoryEvict not enabled: BE pods are not its victims
    env.add(pod_object(uid(1), "be", qos="BestEffort", labels=BE, containers={"c": cid(1)}))
    env.memory(15 * GiB, {uid(1): 4 * GiB})
    env.evictor.reconcile(env.view(slo(**MEM_SLO, evictEnabledPriorityThreshold=5999)), env.executor)
    assert env.count("MemoryEvict", "would_evict") == 0       # no eviction-enabled label
    env2 = Env(tmp_path / "2", {"BEMemoryEvict"})
    env2.add(pod_object(uid(1), "be", qos="BestEffort", labels=BE, containers={"c": cid(1)}))
    env2.memory(15 * GiB, {uid(1): 4 * GiB})
    env2.evictor.reconcile(env2.view(slo(enable=False, memoryEvictThresholdPercent=70)), env2.executor)
    assert env2.count("BEMemoryEvict", "would_evict") == 0    # resourceUsedThresholdWithBE.enable false
    env2.evictor.reconcile(env2.view(slo(**MEM_SLO)), env2.executor)
    assert env2.count("BEMemoryEvict", "would_evict") == 1


def test_terminating_pod_is_not_evicted_again(tmp_path):
    env = Env(tmp_path, {"BEMemoryEvict"})
    env.add(pod_object(uid(1), "going", qos="BestEffort", labels=BE, containers={"c": cid(1)},
                       deleting="2024-01-01T00:00:00Z"))
    env.add(pod_object(uid(2), "next", qos="BestEffort", labels=BE, containers={"c": cid(2)}))
    env.memory(12 * GiB, {uid(1): 2 * GiB, uid(2): 1 * GiB})
    env.evictor.reconcile(env.view(slo(**MEM_SLO)), env.executor)
    assert env.count("BEMemoryEvict", "would_evict") == 0     # the terminating pod's 2 GiB already cover it


def test_standalone_kill_signals_the_pod_processes(tmp_path):
    env = Env(tmp_path, {"BEMemoryEvict"}, kill_standalone=True)
    m = env.add(pod_object(uid(1), "be", qos="BestEffort", labels=BE, containers={"c": "a" * 64}))
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # the fake cgroup lists our own child as the container's process
        procs = env.cg.path("cpu", m.containers[0][1], "cgroup.procs")
        with open(procs, "w") as f:
            f.write(f"{sleeper.pid}\n")
        env.memory(12 * GiB, {uid(1): 2 * GiB})
        env.evictor.reconcile(env.view(slo(**MEM_SLO)), env.executor)
        assert sleeper.wait(timeout=5) == -9
        assert env.count("BEMemoryEvict", "killed") == 1
        assert env.metrics.registry.get_sample_value("koordlet_pod_eviction_total",
                                                     {"node": "n1", "reason": "evicted"}) == 1
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    # a pod whose cgroup is gone cannot be killed: counted as a failure, not an exception
    env2 = Env(tmp_path / "2", {"BEMemoryEvict"}, kill_standalone=True)
    gone = env2.add(pod_object(uid(2), "gone", qos="BestEffort", labels=BE, containers={"c": cid(2)}))
    env2.host.remove(gone.cgroup_dir)
    env2.memory(12 * GiB, {uid(2): 2 * GiB})
    env2.evictor.reconcile(env2.view(slo(**MEM_SLO)), env2.executor)
    assert env2.count("BEMemoryEvict", "kill_failed") == 1


# ----------------------------------------------------------------------------------------------------------
# the cluster path, over real HTTP

def test_cluster_path_evicts_with_uid_precondition_and_records_events(tmp_path):
    from doubles.apiserver_double import ApiServerDouble
    from koordlet.states.kubeapi import KubeApi

    with ApiServerDouble() as double:
        pods = "/api/v1/namespaces/default/pods"
        a = pod_object(uid(1), "be-a", qos="BestEffort", labels=BE, containers={"c": cid(1)})
        b = pod_object(uid(2), "be-b", qos="BestEffort", labels=BE, containers={"c": cid(2)})
        double.put(pods, a)
        double.put(pods, b)
        api = KubeApi(double.write_kubeconfig(tmp_path / "kubeconfig"), timeout=2.0)
        try:
            env = Env(tmp_path / "host", {"BEMemoryEvict"}, api=api)
            env.add(a)
            # be-b's object in the cluster was recreated under the same name: the UID precondition protects it
            stale = dict(b, metadata={**b["metadata"], "uid": uid(9)})
            env.metas.append(meta_for(pod_from_k8s(stale), env.cg.layout))
            env.memory(15 * GiB, {uid(1): 2 * GiB, uid(9): 1 * GiB})   # 93%: release 4 GiB, both are needed
            env.evictor.reconcile(env.view(slo(**MEM_SLO)), env.executor)
        finally:
            api.close()
        evictions = [r for r in double.requests if r.method == "POST" and r.path.endswith("/eviction")]
        assert [r.path for r in evictions] == [f"{pods}/be-a/eviction", f"{pods}/be-b/eviction"]
        body = json.loads(evictions[0].body)
        assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
        assert body["deleteOptions"]["preconditions"] == {"uid": uid(1)}
        assert (pods, "be-a") not in double.objects            # evicted
        assert (pods, "be-b") in double.objects                # 409: UID mismatch, left alone
        events = [o for (c, _), o in double.objects.items() if c == "/api/v1/namespaces/default/events"]
        by_reason = {e["reason"]: e for e in events}
        assert set(by_reason) == {"evictPodSuccess", "evictPodFail"}
        ok = by_reason["evictPodSuccess"]
        assert ok["type"] == "Warning" and ok["source"]["component"] == "koordlet-qosManager"
        assert ok["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "be-a",
                                        "uid": uid(1)}
        assert "trigger by koordlet feature BEMemoryEvict" in ok["message"]
        assert "Precondition failed" in by_reason["evictPodFail"]["message"]
        assert env.count("BEMemoryEvict", "evicted") == 1 and env.count("BEMemoryEvict", "failed") == 1
        # upstream's families count only the eviction that happened, with upstream's reason
        get = env.metrics.registry.get_sample_value
        assert get("koordlet_pod_eviction_total", {"node": "n1", "reason": "evicted"}) == 1
        assert get("koordlet_pod_eviction_detail_total", {"node": "n1", "pod_namespace": "default",
                                                          "pod_name": "be-a", "reason": "evicted"}) == 1
        assert get("koordlet_pod_eviction_detail_total", {"node": "n1", "pod_namespace": "default",
                                                          "pod_name": "be-b", "reason": "evicted"}) is None
