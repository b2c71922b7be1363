"""YARN containers as containers of their NodeManager pod (states/yarn.py) and what each part of the agent does
with them: their dirs checked against the cgroup tree, the pod they join, the batch settings the plan gives them,
their usage, and evictions through the copilot (the copilot double over a real unix socket; the cgroup tree is the
fake host's, the real kernel's is tests/integration/test_yarn_real.py)."""

from __future__ import annotations

import logging
import os

import pytest

from doubles.copilot import CopilotDouble, container_id
from koordlet.collectors.usage import UsageCollection
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS, Layout
from koordlet.host.topology import CPUBasicInfo, NUMANode, Topology
from koordlet.metriccache import MetricCache, Sample
from koordlet.ops.compat import gate_notes
from koordlet.ops.config import build
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.evict import Evictor
from koordlet.qos.pod_resources import PodResources
from koordlet.states.copilot import CopilotClient, YarnContainer
from koordlet.states.informer import PodMeta
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.pod import Resources
from koordlet.states.yarn import NO_NODE_MANAGER, RECHECK, YarnContainers, attach, container_dir
from koordlet.writer.executor import Executor
from tests.builders import node_view, pod_meta
from tests.fakehost import CgroupValues, FakeHost

TS = 1700000000000
NM_UID, OTHER_UID = "33333333-0000-0000-0000-000000000001", "33333333-0000-0000-0000-000000000002"
NM_LABELS = {"app.kubernetes.io/component": "node-manager", "koordinator.sh/qosClass": "BE"}
LABEL = ("app.kubernetes.io/component", "node-manager")
NM_CONTAINER, OTHER_CONTAINER = "a" * 64, "b" * 64
LAYOUT = Layout(Driver.CGROUPFS)
GiB, MiB = 2**30, 2**20
YARN_DIR = "kubepods/besteffort/hadoop-yarn"


def nm_meta(layout: Layout = LAYOUT, labels: dict[str, str] | None = None, **kw) -> PodMeta:
    batch = {"kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "8Gi"}
    return pod_meta(NM_UID, "nodemanager", namespace="hadoop-yarn", qos="BestEffort", labels={**NM_LABELS,
                                                                                              **(labels or {})},
                    containers={"nm": NM_CONTAINER}, resources={"nm": {"requests": batch, "limits": batch}},
                    layout=layout, **kw)


def other_meta(layout: Layout = LAYOUT) -> PodMeta:
    return pod_meta(OTHER_UID, "spark", qos="BestEffort", qos_class="BE", containers={"c": OTHER_CONTAINER},
                    layout=layout)


def yc(n: int, rel: str, vcores: int = 1, memory_mb: int = 1024) -> tuple[YarnContainer, str]:
    name = container_id(TS, 1, 1, n)
    return YarnContainer(name, name, rel, Resources(batch_cpu_request=vcores * 1000, batch_cpu_limit=vcores * 1000,
                                                    batch_memory_request=memory_mb * MiB,
                                                    batch_memory_limit=memory_mb * MiB)), rel


# --------------------------------------------------------------------------------------------------
# dirs and the pod they join

@pytest.mark.parametrize("raw,expected", [
    (f"{YARN_DIR}/c1", f"{YARN_DIR}/c1"),
    (f"/{YARN_DIR}//c1/", f"{YARN_DIR}/c1"),                   # the copilot's filepath.Join: a leading / is harmless
    (f"kubepods/besteffort/pod{NM_UID}/c1", f"kubepods/besteffort/pod{NM_UID}/c1"),
    (f"{YARN_DIR}/../../burstable/x", ValueError),
    ("kubepods/burstable/hadoop-yarn/c1", ValueError),         # not BestEffort
    ("kubepods/besteffort", ValueError),                       # the tier itself
    ("hadoop-yarn/c1", ValueError),
    (f"{YARN_DIR}/c\n1", ValueError),
])
def test_container_dir(raw, expected):
    if expected is ValueError:
        with pytest.raises(ValueError):
            container_dir(raw, LAYOUT)
    else:
        assert container_dir(raw, LAYOUT) == expected


def test_container_dir_systemd():
    layout = Layout(Driver.SYSTEMD)
    rel = "kubepods.slice/kubepods-besteffort.slice/hadoop-yarn/c1"
    assert container_dir(rel, layout) == rel
    with pytest.raises(ValueError):
        container_dir(f"{YARN_DIR}/c1", layout)


def test_attach_to_the_pod_holding_the_dir_or_the_only_nodemanager():
    nm, other = nm_meta(), other_meta()
    nested, beside = yc(2, f"{nm.cgroup_dir}/{container_id(TS, 1, 1, 2)}"), yc(3, f"{YARN_DIR}/c3")
    pods, problems = attach((nm, other), (nested, beside), LABEL)
    assert problems == {}
    assert pods[1] is other                                     # untouched pods stay the same objects
    assert [(c.name, c.yarn, rel) for c, rel in pods[0].containers] == [
        ("nm", False, nm.containers[0][1]), (nested[0].name, True, nested[1]), (beside[0].name, True, beside[1])]
    yarn = pods[0].containers[1][0]
    assert yarn.id == nested[0].uid and yarn.resources == nested[0].resources and yarn.known
    assert pods[0].pod is nm.pod                                # the pod's own containers (its spec) unchanged


def test_attach_refuses_what_is_not_a_nodemanager_s():
    nm, other = nm_meta(), other_meta()
    listed = (yc(2, f"{other.cgroup_dir}/x"),                    # inside another pod
              yc(3, nm.cgroup_dir),                              # the pod dir itself
              yc(4, nm.containers[0][1]),                        # the pod's own container
              yc(5, f"{YARN_DIR}/c5"))
    pods, problems = attach((nm, other), listed, LABEL)
    assert [c.name for c, _ in pods[0].containers] == ["nm", listed[3][0].name]
    assert "not a NodeManager pod" in problems[listed[0][0].uid]
    assert "own" in problems[listed[1][0].uid] and "own" in problems[listed[2][0].uid]


def test_no_or_several_nodemanagers_leave_containers_beside_the_pods_out():
    nm, other = nm_meta(), other_meta()
    beside = (yc(2, f"{YARN_DIR}/c2"), yc(3, f"{YARN_DIR}/c3"))
    pods, problems = attach((other,), beside, LABEL)
    assert pods == (other,) and problems == {NO_NODE_MANAGER: "count=2 problem=no NodeManager pod "
                                                              "(app.kubernetes.io/component=node-manager) here"}
    second = pod_meta("33333333-0000-0000-0000-000000000003", "nm2", qos="BestEffort", labels=NM_LABELS,
                      layout=LAYOUT)
    nested = yc(4, f"{nm.cgroup_dir}/c4")
    pods, problems = attach((nm, second), (*beside, nested), LABEL)
    assert [c.name for c, _ in pods[0].containers] == ["nm", nested[0].name]
    assert "2 NodeManager pods" in problems[NO_NODE_MANAGER]
    terminating = nm_meta(deleting="2024-01-01T00:00:00Z")
    assert NO_NODE_MANAGER in attach((terminating,), beside, LABEL)[1]


# --------------------------------------------------------------------------------------------------
# the source: the copilot double on a real socket, the fake host's cgroup tree

@pytest.fixture
def host(tmp_path):
    return FakeHost(str(tmp_path / "host"), CgroupVersion.V1, Driver.CGROUPFS)


@pytest.fixture
def copilot(tmp_path):
    with CopilotDouble(str(tmp_path / "copilot.sock")) as d:
        yield d


def source(copilot: CopilotDouble, host: FakeHost) -> YarnContainers:
    cg = Cgroups(host.paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
    return YarnContainers(CopilotClient(copilot.socket_path, timeout=0.5).containers, cg, LABEL,
                          copilot.socket_path)


def test_refresh_checks_the_dirs_and_keeps_the_last_list_while_the_copilot_is_away(copilot, host, tmp_path, caplog):
    caplog.set_level(logging.INFO, "koordlet.states.yarn")
    nm = nm_meta()
    host.add_pod(KubeQOS.BESTEFFORT, NM_UID, CgroupValues(), {NM_CONTAINER: CgroupValues()})
    for n in (2, 3):
        host.set_cgroup(f"{YARN_DIR}/{container_id(TS, 1, 1, n)}", CgroupValues())
    outside = tmp_path / "outside"
    outside.mkdir()
    for sub in ("cpu", "cpuacct", "cpuset", "memory", "blkio"):
        os.symlink(outside, os.path.join(host.paths.cgroup_root, sub, YARN_DIR, "evil"))
    for n in (2, 3):
        copilot.add(container_id(TS, 1, 1, n), 1, 1024, f"{YARN_DIR}/{container_id(TS, 1, 1, n)}")
    copilot.add(container_id(TS, 1, 1, 4), 1, 1024, f"{YARN_DIR}/{container_id(TS, 1, 1, 4)}")   # no dir yet
    copilot.add("evil", 1, 1024, f"{YARN_DIR}/evil")
    copilot.add("escape", 1, 1024, "kubepods/besteffort/../../etc")
    yarn = source(copilot, host)
    yarn.refresh()
    assert [c.name for c, _ in yarn.listed] == [container_id(TS, 1, 1, 2), container_id(TS, 1, 1, 3)]
    errors = [r.message for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and any("outside the cgroup root" in e for e in errors) and \
        any("'..'" in e for e in errors)
    pods = yarn.pods((nm,))
    assert yarn.pods(pods_in := (nm,)) is yarn.pods(pods_in)           # the same tuple while nothing changed
    assert [c.name for c, _ in pods[0].containers][1:] == [container_id(TS, 1, 1, 2), container_id(TS, 1, 1, 3)]
    yarn.refresh()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2      # said once
    # the copilot dies: the last list stays, less the containers whose dirs go
    copilot.stop()
    host.remove(f"{YARN_DIR}/{container_id(TS, 1, 1, 3)}")
    for _ in range(3):
        yarn.refresh()
    assert [c.name for c, _ in yarn.listed] == [container_id(TS, 1, 1, 2)]
    down = [r.message for r in caplog.records if "yarn copilot unavailable" in r.message]
    assert len(down) == 1 and copilot.socket_path in down[0]
    copilot.start()
    yarn.refresh()
    assert any("yarn copilot answering again" in r.message for r in caplog.records)


def test_a_listed_dir_that_becomes_a_symlink_out_is_dropped_at_the_next_check(copilot, host, tmp_path,
                                                                              monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("koordlet.states.yarn.time.monotonic", lambda: clock[0])
    rel = f"{YARN_DIR}/{container_id(TS, 1, 1, 2)}"
    host.set_cgroup(rel, CgroupValues())
    copilot.add(container_id(TS, 1, 1, 2), 1, 1024, rel)
    yarn = source(copilot, host)
    yarn.refresh()
    assert len(yarn.listed) == 1
    outside = tmp_path / "outside"
    outside.mkdir()
    host.remove(rel)
    for sub in ("cpu", "cpuacct", "cpuset", "memory", "blkio"):
        os.symlink(outside, os.path.join(host.paths.cgroup_root, sub, rel))
    clock[0] += RECHECK - 1
    yarn.refresh()
    assert len(yarn.listed) == 1                               # resolved again only every RECHECK seconds
    clock[0] += 1
    yarn.refresh()
    assert yarn.listed == ()


def test_a_slow_copilot_keeps_the_last_list(copilot, host):
    host.set_cgroup(f"{YARN_DIR}/{container_id(TS, 1, 1, 2)}", CgroupValues())
    copilot.add(container_id(TS, 1, 1, 2), 1, 1024, f"{YARN_DIR}/{container_id(TS, 1, 1, 2)}")
    yarn = source(copilot, host)
    yarn.refresh()
    copilot.stall_seconds = 2.0
    yarn.refresh()
    assert [c.name for c, _ in yarn.listed] == [container_id(TS, 1, 1, 2)]


# --------------------------------------------------------------------------------------------------
# what the strategies and collectors do with them

def test_plan_keeps_yarn_containers_out_of_the_pod_sums_and_caps_them_by_the_pod():
    nm = nm_meta()
    small, big = yc(2, f"{nm.cgroup_dir}/c2", vcores=1, memory_mb=1024), yc(3, f"{YARN_DIR}/c3", vcores=8,
                                                                            memory_mb=16 * 1024)
    unlimited = (YarnContainer("c4", "c4", "d", Resources(batch_cpu_request=500)), f"{YARN_DIR}/c4")
    meta = attach((nm,), (small, big, unlimited), LABEL)[0][0]
    plan = PodResources().plan(meta, node_view(pods=(meta,)))
    assert (plan.pod.cfs_quota, plan.pod.memory_limit) == (400_000, 8 * GiB)          # the NodeManager's own only
    nm_own, c2, c3, c4 = plan.containers
    assert (nm_own.cfs_quota, nm_own.memory_limit) == (400_000, 8 * GiB)
    assert (c2.cpu_shares, c2.cfs_quota, c2.memory_limit) == (1024, 100_000, GiB)       # its own: within the pod's
    assert (c3.cpu_shares, c3.cfs_quota, c3.memory_limit) == (8192, 400_000, 8 * GiB)   # capped by the pod's
    assert (c4.cfs_quota, c4.memory_limit) == (400_000, 8 * GiB)                        # unlimited: the pod's


def test_usage_counts_each_yarn_container_once_in_its_pod(host):
    cg = Cgroups(host.paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
    metrics = AgentMetrics("n1")
    coll = UsageCollection(host.paths, cg, metrics, interval=1.0, outdated=10.0)
    nm = nm_meta()
    nested_rel, beside_rel, app_rel = f"{nm.cgroup_dir}/c2", f"{YARN_DIR}/c3", "host-yarn/c4"
    listed = (yc(2, nested_rel), yc(3, beside_rel), yc(4, f"{YARN_DIR}/c4"))
    meta = attach((nm,), listed, LABEL)[0][0]
    meta = PodMeta(meta.pod, meta.cgroup_dir, (*meta.containers[:3], (meta.containers[3][0], app_rel)))

    def cycle(cpu_s: int, now: float) -> dict:
        # the pod dir holds its container and the nested YARN container; the other two are elsewhere
        host.add_pod(KubeQOS.BESTEFFORT, NM_UID, CgroupValues(cpu_ns=3 * cpu_s * 10**9, anon=300 * MiB),
                     {NM_CONTAINER: CgroupValues(cpu_ns=cpu_s * 10**9, anon=100 * MiB)})
        for rel in (nested_rel, beside_rel, app_rel):
            host.set_cgroup(rel, CgroupValues(cpu_ns=2 * cpu_s * 10**9 if rel == nested_rel else cpu_s * 10**9,
                                              anon=200 * MiB if rel == nested_rel else 50 * MiB))
        samples = coll.pod.collect(now, now - 90.0, (meta,), ("host-yarn",))
        return {(s.name, s.labels): s.value for s in samples}

    cycle(0, 100.0)
    got = cycle(1, 101.0)
    pod = (("pod_uid", NM_UID),)
    assert got[("pod_memory_usage", pod)] == (300 + 50) * MiB     # the pod dir (with c2 in it) + c3 beside it
    assert got[("pod_cpu_usage", pod)] == pytest.approx(3 + 1)
    assert got[("container_memory_usage", (("container_id", container_id(TS, 1, 1, 2)),))] == 200 * MiB
    assert got[("container_cpu_usage", (("container_id", container_id(TS, 1, 1, 3)),))] == pytest.approx(1)
    yarn_usage = {(labels[2], labels[3]): v for labels, v in metrics.yarn_container_resource_usage._values.items()}
    assert yarn_usage[(container_id(TS, 1, 1, 3), "memory")] == 50 * MiB
    assert yarn_usage[(container_id(TS, 1, 1, 2), "cpu")] == pytest.approx(2)
    assert {labels[1] for labels in metrics.yarn_container_resource_usage._values} == {"yarn"}


# --------------------------------------------------------------------------------------------------
# evictions through the copilot

class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


MEMORY = merge_node_slo_spec({"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}},
                             "n1")[0]
TOPOLOGY = Topology(cpus=(), nodes=(NUMANode(0, (), {"MemTotal": 16 * 2**20}, {}),), packages=(), cores=(),
                    caches=(), online=(0, 1, 2, 3), offline=(), present=(0, 1, 2, 3), possible=(0, 1, 2, 3),
                    numa_from_sysfs=True, basic=CPUBasicInfo())
NOW = 1_000_000.0


class Env:
    def __init__(self, host: FakeHost, copilot: CopilotDouble | None) -> None:
        self.cg = Cgroups(host.paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
        self.executor = Executor(self.cg)
        self.cache = MetricCache(None)
        self.metrics = AgentMetrics("n1")
        client = CopilotClient(copilot.socket_path, timeout=0.5) if copilot is not None else None
        self.evictor = Evictor(self.cache, 1.0, self.metrics, gates={"BEMemoryEvict", "MemoryAllocatableEvict"},
                               clock=Clock(), node_name="n1", copilot=client)
        self.pods = (nm_meta(), other_meta())

    def round(self, node_used: int, used: dict[str, int]) -> None:
        self.cache.append([Sample("node_memory_usage", (), NOW - 0.5, node_used)] +
                          [Sample("pod_memory_usage", (("pod_uid", u),), NOW - 0.5, v) for u, v in used.items()])
        self.evictor.reconcile(node_view(pods=self.pods, slo=MEMORY, topology=TOPOLOGY, node=NodeInfo("n1"),
                                         now=NOW), self.executor)

    def count(self, result: str) -> float:
        return self.metrics.pod_eviction_attempts.labels("n1", "BEMemoryEvict", result)._value.get()


def test_memory_eviction_kills_the_newest_yarn_container_instead_of_the_nodemanager(copilot, host, caplog):
    caplog.set_level(logging.WARNING, "koordlet.qos.evict")
    for n, created in ((1, 1.0), (2, 2.0), (3, 3.0)):
        copilot.add(container_id(TS, 1, 1, n), 1, 2048, f"{YARN_DIR}/{container_id(TS, 1, 1, n)}", created=created)
    env = Env(host, copilot)
    # 12 GiB of 16 = 75%: release 16·(75−68)% = 1.12 GiB; the NodeManager uses the most, so it is picked first
    env.round(12 * GiB, {NM_UID: 6 * GiB, OTHER_UID: 1 * GiB})
    assert copilot.killed == [container_id(TS, 1, 1, 3)]              # the newest that is not the AM: 2 GiB
    assert env.count("copilot_released") == 1 and env.count("would_evict") == 0
    assert env.metrics.pod_eviction.labels("n1", "evictedYarnContainers")._value.get() == 1
    line = next(r.message for r in caplog.records if "evict yarn containers" in r.message)
    assert "pod=hadoop-yarn/nodemanager" in line and "result=released" in line and "batch-memory=2147483648" in line
    kill = [b for m, p, b in copilot.requests if p == "/v1/killContainersByResource"]
    assert len(kill) == 1 and b'"kubernetes.io/batch-cpu": "0"' in kill[0]


def test_the_nodemanager_is_evicted_when_the_copilot_fails_or_frees_too_little(copilot, host, caplog):
    caplog.set_level(logging.WARNING, "koordlet.qos.evict")
    copilot.add(container_id(TS, 1, 1, 1), 1, 4096, "d1")                            # only the AM: nothing to free
    env = Env(host, copilot)
    env.round(12 * GiB, {NM_UID: 6 * GiB, OTHER_UID: 1 * GiB})
    assert env.count("copilot_released_nothing") == 1 and env.count("would_evict") == 1
    assert any("would evict pod=hadoop-yarn/nodemanager" in r.message for r in caplog.records)
    copilot.hang_up = True
    env2 = Env(host, copilot)
    env2.round(12 * GiB, {NM_UID: 6 * GiB, OTHER_UID: 1 * GiB})
    assert env2.count("copilot_failed") == 1 and env2.count("would_evict") == 1
    assert any("result=failed" in r.message and "evicting the pod" in r.message for r in caplog.records)


def test_the_copilot_freeing_too_little_counts_and_the_pod_goes_too(copilot, host):
    copilot.add(container_id(TS, 1, 1, 2), 1, 512, "d2")
    env = Env(host, copilot)
    env.round(12 * GiB, {NM_UID: 6 * GiB, OTHER_UID: 1 * GiB})       # 1.12 GiB wanted, 512 MiB freed
    assert copilot.killed == [container_id(TS, 1, 1, 2)]
    assert env.count("copilot_released") == 1 and env.count("would_evict") == 1


def test_cpu_eviction_asks_for_cpu(copilot, host):
    for n, created in ((2, 2.0), (3, 3.0), (4, 4.0)):
        copilot.add(container_id(TS, 1, 1, n), 1, 1024, f"d{n}", created=created)
    env = Env(host, copilot)
    env.evictor = Evictor(env.cache, 1.0, env.metrics, gates={"CPUEvict"}, clock=Clock(), node_name="n1",
                          copilot=CopilotClient(copilot.socket_path), cpu_cool_down=0.0)
    nm = nm_meta(labels={"koordinator.sh/eviction-enabled": "true"}, priority=5000)
    spec = merge_node_slo_spec({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuEvictThresholdPercent": 50, "evictEnabledPriorityThreshold": 5999}}, "n1")[0]
    env.cache.append([Sample("node_cpu_usage", (), NOW - 0.5, 3.0),    # 75% of 4 CPUs: 4000m·(75−48)% wanted
                      Sample("pod_cpu_usage", (("pod_uid", NM_UID),), NOW - 0.5, 2.5)])
    env.evictor.reconcile(node_view(pods=(nm,), slo=spec, topology=TOPOLOGY, node=NodeInfo("n1"), now=NOW),
                          env.executor)
    assert copilot.killed == [container_id(TS, 1, 1, 4), container_id(TS, 1, 1, 3)]      # 2000m ≥ 1080m
    body = next(b for _, p, b in copilot.requests if p == "/v1/killContainersByResource")
    assert b'"kubernetes.io/batch-cpu": "1080"' in body and b'"kubernetes.io/batch-memory": "0"' in body
    assert env.metrics.pod_eviction_attempts.labels("n1", "CPUEvict", "copilot_released")._value.get() == 1
    assert env.metrics.pod_eviction_attempts.labels("n1", "CPUEvict", "would_evict")._value.get() == 0


def test_without_the_copilot_or_for_other_pods_nothing_changes(copilot, host):
    copilot.add(container_id(TS, 1, 1, 2), 1, 2048, "d2")
    env = Env(host, None)                                     # evict-by-copilot-agent off
    env.round(12 * GiB, {NM_UID: 6 * GiB, OTHER_UID: 1 * GiB})
    assert env.count("would_evict") == 1 and copilot.requests == []
    env2 = Env(host, copilot)                                 # the other BE pod uses more: it goes, no copilot call
    env2.round(12 * GiB, {NM_UID: 1 * GiB, OTHER_UID: 6 * GiB})
    assert env2.count("would_evict") == 1 and copilot.requests == []


def test_evict_by_copilot_without_an_eviction_gate_says_so():
    on = build(flags={"standalone": True, "evict-by-copilot-agent": True}, environ={})
    assert [n.text for n in gate_notes(on) if n.flag == "evict-by-copilot-agent"] == [
        ("option evict-by-copilot-agent evicts nothing: none of BECPUEvict, CPUEvict, BEMemoryEvict, MemoryEvict is "
         "on (the YARN containers are still discovered and managed)")]
    gated = build(flags={"standalone": True, "evict-by-copilot-agent": True,
                         "feature-gates": {"BEMemoryEvict": True}}, environ={})
    assert not [n for n in gate_notes(gated) if n.flag == "evict-by-copilot-agent"]


def test_config_finds_the_socket_as_upstream():
    daemonset = build(flags={"node-name": "n", "agent-mode": "daemonset", "evict-by-copilot-agent": True},
                      environ={})
    assert daemonset.evict_by_copilot_endpoint == "/host-var-run/yarn-copilot/yarn-copilot.sock"
    assert build(flags={"standalone": True}, environ={}).evict_by_copilot_endpoint == ""
    given = build(flags={"standalone": True, "evict-by-copilot-endpoint": "/run/c.sock"}, environ={})
    assert (given.evict_by_copilot_endpoint, given.evict_by_copilot_agent) == ("/run/c.sock", False)
