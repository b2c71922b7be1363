"""CPU burst (qos/cpu_burst.py) on fake v1/v2 cgroup trees.

Expected numbers come from upstream pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst.go:
burst = limit cores · cpuBurstPercent/100 · 100000, quota ×1.2 / ×0.8 / reset, clamp [base, base·pct/100],
share pool thresholds, token bucket capacity period·(pct−100), write order by the sign of the change.
"""

import json
import logging
import os
import random

import pytest

from koordlet.base import wire
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, parse_cpu_throttling
from koordlet.host.topology import read_topology
from koordlet.metriccache import MetricCache, Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.cpu_burst import (
    BurstLimiter,
    CPUBurst,
    NodeState,
    Operation,
    adjust_for_node,
    base_quota_us,
    ceiling_quota_us,
    container_operation,
    node_state,
    pod_burst_config,
    static_burst_us,
    target_quota,
)
from koordlet.states.decode import DecodeError
from koordlet.states.informer import meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import CPUBurstStrategy
from koordlet.states.pod import pod_from_k8s
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view, pod_object
from tests.fakehost import CgroupValues, FakeHost

A, B, C = "a" * 64, "b" * 64, "c" * 64
CPU_1, CPU_2 = {"limits": {"cpu": "1"}}, {"limits": {"cpu": "2"}}      # a container's resources
NOW = 1_000_000.0
UID = "11111111-0000-0000-0000-000000000001"
UID2 = "11111111-0000-0000-0000-000000000002"


class ZeroRandom(random.Random):
    """Deterministic stand-in for the limiter's random start (always the bottom of [0, 0.5·capacity))."""

    def random(self):
        return 0.0


def spec(**burst):
    value, errors = merge_node_slo_spec({"cpuBurstStrategy": burst} if burst else None, "n1")
    assert not errors
    return value


class Env:
    def __init__(self, tmp_path, version):
        self.host = FakeHost(str(tmp_path), version, Driver.CGROUPFS)
        self.host.set_numa({0: [0, 1, 2, 3]})
        self.version = version
        self.cg = Cgroups(self.host.paths.cgroup_root, version, Driver.CGROUPFS)
        self.executor = Executor(self.cg)
        self.cache = MetricCache(None)
        self.metrics = AgentMetrics("n1")
        self.topology = read_topology(self.host.paths)
        self.metas = []

    def file(self, rel, v1_name):
        name = {"cpu.cfs_burst_us": "cpu.max.burst", "cpu.cfs_quota_us": "cpu.max"}.get(v1_name, v1_name) \
            if self.version is CgroupVersion.V2 else v1_name
        return self.cg.path("cpu", rel, name)

    def write(self, rel, v1_name, text):
        with open(self.file(rel, v1_name), "w") as f:
            f.write(text)

    def read(self, rel, v1_name):
        with open(self.file(rel, v1_name)) as f:
            return f.read().strip()

    def quota(self, rel):
        """The quota as the kernel shows it (a v2 write of the quota alone keeps the period)."""
        text = self.read(rel, "cpu.cfs_quota_us").split()[0]
        return -1 if text == "max" else int(text)

    def kernelize(self):
        """What the kernel does after a write of cpu.max "<quota>": it reads back "<quota> <period>"."""
        if self.version is CgroupVersion.V2:
            for rel in self.rels():
                text = self.read(rel, "cpu.cfs_quota_us")
                if len(text.split()) == 1:
                    self.write(rel, "cpu.cfs_quota_us", f"{text} 100000")

    def rels(self):
        for m in self.metas:
            yield m.cgroup_dir
            for _, rel in m.containers:
                yield rel

    def throttle(self, rel, periods, throttled):
        path = self.cg.path("cpu", rel, "cpu.stat")
        with open(path, "w") as f:
            f.write(f"usage_usec 0\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec 0\n")

    def add(self, obj, pod_quota=-1, quotas=None):
        """Create the pod's cgroups as kubelet would (quota = limit), with zeroed burst and cpu.stat files."""
        meta = meta_for(pod_from_k8s(obj), self.cg.layout)
        qos = meta.pod.kube_qos
        self.host.add_pod(qos, meta.pod.uid, CgroupValues(quota=pod_quota),
                          {c.id: CgroupValues(quota=(quotas or {}).get(c.name, base_quota_us(c.resources.cpu_limit)))
                           for c, _ in meta.containers})
        for rel in [meta.cgroup_dir] + [rel for _, rel in meta.containers]:
            self.write(rel, "cpu.cfs_burst_us", "0")
            self.throttle(rel, 0, 0)
        self.metas.append(meta)
        return meta

    def node_usage(self, cores, now=NOW):
        self.cache.append([Sample("node_cpu_usage", (), now - 1, cores)])

    def view(self, slo, now=NOW, pods=None):
        return node_view(pods=self.metas if pods is None else pods, slo=slo, topology=self.topology,
                         node=NodeInfo("n1"), now=now)

    def writes(self):
        return [(e["file"], e["new"]) for e in self.executor.events()]


@pytest.fixture(params=[CgroupVersion.V1, CgroupVersion.V2], ids=["v1", "v2"])
def env(request, tmp_path):
    return Env(tmp_path, request.param)


# ----------------------------------------------------------------------------------------------------------
# pure rules

@pytest.mark.parametrize("policy,limit,percent,expected", [
    ("none", 2000, 1000, 0),
    ("cfsQuotaBurstOnly", 2000, 1000, 0),
    ("cpuBurstOnly", 2000, 1000, 2_000_000),
    ("auto", 2000, 1000, 2_000_000),
    ("auto", 500, 150, 75_000),
    ("auto", 0, 1000, 0),                  # no limit
    ("cpuBurstOnly", 1, 1, 1),             # 0.001 core · 1 % · 100000
])
def test_static_burst(policy, limit, percent, expected):
    assert static_burst_us(limit, CPUBurstStrategy(policy=policy, cpu_burst_percent=percent)) == expected


def test_base_and_ceiling_quota():
    assert base_quota_us(2000) == 200000
    assert base_quota_us(5) == 1000              # at least 1000
    assert base_quota_us(0) == -1
    assert ceiling_quota_us(200000, CPUBurstStrategy(cfs_quota_burst_percent=300)) == 600000
    assert ceiling_quota_us(200000, CPUBurstStrategy(cfs_quota_burst_percent=100)) == 200000


@pytest.mark.parametrize("ratio,state", [(None, NodeState.UNKNOWN), (0.5, NodeState.OVERLOAD),
                                         (0.9, NodeState.OVERLOAD), (0.45, NodeState.COOLING),
                                         (0.4499, NodeState.IDLE), (0.0, NodeState.IDLE)])
def test_node_state(ratio, state):
    assert node_state(ratio, 50) is state


@pytest.mark.parametrize("state,op,expected", [
    (NodeState.OVERLOAD, Operation.SCALE_UP, Operation.SCALE_DOWN),
    (NodeState.OVERLOAD, Operation.REMAIN, Operation.SCALE_DOWN),
    (NodeState.OVERLOAD, Operation.RESET, Operation.RESET),
    (NodeState.COOLING, Operation.SCALE_UP, Operation.REMAIN),
    (NodeState.UNKNOWN, Operation.SCALE_UP, Operation.REMAIN),
    (NodeState.UNKNOWN, Operation.SCALE_DOWN, Operation.SCALE_DOWN),
    (NodeState.IDLE, Operation.SCALE_UP, Operation.SCALE_UP),
])
def test_node_vetoes_growth(state, op, expected):
    assert adjust_for_node(state, op) is expected


def test_container_operation_and_target():
    assert container_operation("none", True, True) is Operation.RESET
    assert container_operation("cpuBurstOnly", False, True) is Operation.RESET
    assert container_operation("auto", False, True) is Operation.SCALE_DOWN
    assert container_operation("cfsQuotaBurstOnly", True, True) is Operation.SCALE_UP
    assert container_operation("cfsQuotaBurstOnly", True, False) is Operation.REMAIN
    assert container_operation("cfsQuotaBurstOnly", True, None) is Operation.REMAIN
    assert target_quota(Operation.SCALE_UP, 200000, 200000, 600000) == 240000
    assert target_quota(Operation.SCALE_UP, 550000, 200000, 600000) == 600000       # clamped to the ceiling
    assert target_quota(Operation.SCALE_DOWN, 220000, 200000, 600000) == 200000     # clamped to the base
    assert target_quota(Operation.SCALE_DOWN, 400000, 200000, 600000) == 320000
    assert target_quota(Operation.RESET, 400000, 200000, 600000) == 200000
    assert target_quota(Operation.REMAIN, -1, 200000, 600000) == 200000             # unlimited lands on base


def test_parse_cpu_throttling():
    assert parse_cpu_throttling(b"nr_periods 12\nnr_throttled 3\nthrottled_time 99\n") == (12, 3)
    with pytest.raises(ValueError):
        parse_cpu_throttling(b"usage_usec 5\n")


def test_limiter_bucket():
    lim = BurstLimiter.new(10, 300, NOW, ZeroRandom())
    assert (lim.capacity, lim.tokens, lim.expire_after) == (2000.0, 0.0, 20.0)
    assert not lim.allow(NOW + 1, 100)             # no tokens, nothing earned at 100 %
    assert lim.allow(NOW + 3, 50)                  # 2 s at 50 % earn 100 tokens
    assert lim.tokens == 100
    assert lim.allow(NOW + 4, 150)                 # spend 50
    assert not lim.allow(NOW + 6, 150)             # spend 100: -50
    assert lim.tokens == -50
    lim.allow(NOW + 1000, 0)
    assert lim.tokens == 2000                      # capped at capacity
    assert not lim.expired(NOW + 1020) and lim.expired(NOW + 1021)
    assert lim.matches(10, 300) and not lim.matches(20, 300)
    start = BurstLimiter.new(10, 300, NOW, random.Random(7))
    assert 0 <= start.tokens < 1000


def test_pod_config_overlay():
    node = spec(policy="none").cpu_burst

    def cfg(annotation):
        pod = agent_pod(UID, "p", containers={"app": A}, resources={"app": CPU_1},
                        annotations={wire.ANNOTATION_POD_CPU_BURST: annotation})
        return pod_burst_config(pod, node)

    value = cfg(json.dumps({"policy": "cpuBurstOnly", "cpuBurstPercent": 50}))
    assert value.policy == "cpuBurstOnly" and value.cpu_burst_percent == 50
    assert value.cfs_quota_burst_percent == 300                    # the node's for what the pod leaves out
    value = cfg(json.dumps({"sharePoolThresholdPercent": 1}))
    assert value.share_pool_threshold_percent == 50                 # node-level only
    for bad in ("{not json", "[1]", json.dumps({"policy": "bogus"}), json.dumps({"cpuBurstPercent": "x"}),
                json.dumps({"cpuBurstPercent": 20000})):
        with pytest.raises(DecodeError, match="koordinator.sh/cpuBurst"):
            cfg(bad)


# ----------------------------------------------------------------------------------------------------------
# the strategy on fake trees

def test_burst_values_written_per_policy(env):
    meta = env.add(pod_object(UID, "web", containers={"app": A, "side": B}, resources={"app": CPU_2}))
    strategy = CPUBurst(env.cache, 1.0, env.metrics)
    app_rel, side_rel = meta.containers[0][1], meta.containers[1][1]
    env.write(app_rel, "cpu.cfs_burst_us", "123")
    strategy.reconcile(env.view(spec()), env.executor)                        # policy none: writes 0
    assert env.read(app_rel, "cpu.cfs_burst_us") == "0"
    strategy.reconcile(env.view(spec(policy="cpuBurstOnly", cpuBurstPercent=150)), env.executor)
    # 2 cores · 150 % · 100000 = 300000, capped at the base quota (the kernel refuses burst > quota)
    assert env.read(app_rel, "cpu.cfs_burst_us") == "200000"
    assert env.read(side_rel, "cpu.cfs_burst_us") == "0"                      # unlimited
    assert env.read(meta.cgroup_dir, "cpu.cfs_burst_us") == "200000"          # Σ containers
    # containers first, then the pod
    files = [f for f, _ in env.writes()]
    assert files.index(env.file(app_rel, "cpu.cfs_burst_us")) < files.index(
        env.file(meta.cgroup_dir, "cpu.cfs_burst_us"))
    text = env.metrics.registry.get_sample_value(
        "koordlet_container_scaled_cfs_burst_us",
        {"node": "n1", "pod_namespace": "default", "pod_name": "web", "container_id": A, "container_name": "app"})
    assert text == 200000
    n = len(env.executor.events())
    strategy.reconcile(env.view(spec(policy="cpuBurstOnly", cpuBurstPercent=150)), env.executor)
    assert len(env.executor.events()) == n                                    # idempotent


def test_only_burstable_classes_and_active_pods(env):
    lsr = env.add(pod_object(UID, "lsr", qos_class="LSR", containers={"app": A}, resources={"app": CPU_1}))
    be = env.add(pod_object(UID2, "be", qos_class="BE", containers={"app": B}, resources={"app": CPU_1}))
    done = env.add(pod_object("11111111-0000-0000-0000-000000000003", "done", phase="Succeeded",
                              containers={"app": C}, resources={"app": CPU_1}))
    for m in (lsr, be, done):
        env.write(m.containers[0][1], "cpu.cfs_burst_us", "7")
    CPUBurst(env.cache, 1.0).reconcile(env.view(spec(policy="auto")), env.executor)
    for m in (lsr, be, done):
        assert env.read(m.containers[0][1], "cpu.cfs_burst_us") == "7"
    assert env.executor.events() == []


def test_annotation_overlay_and_malformed(env, caplog):
    burst = '{"policy":"cpuBurstOnly","cpuBurstPercent":50}'
    good = env.add(pod_object(UID, "good", containers={"app": A}, resources={"app": CPU_2},
                              annotations={wire.ANNOTATION_POD_CPU_BURST: burst}))
    bad = env.add(pod_object(UID2, "broken", containers={"app": B}, resources={"app": CPU_2},
                             annotations={wire.ANNOTATION_POD_CPU_BURST: "{oops"}))
    strategy = CPUBurst(env.cache, 1.0)
    slo = spec(policy="none")
    with caplog.at_level(logging.WARNING, "koordlet.qos.cpu_burst"):
        strategy.reconcile(env.view(slo), env.executor)
        strategy.reconcile(env.view(slo), env.executor)
    assert env.read(good.containers[0][1], "cpu.cfs_burst_us") == "100000"    # 2 cores · 50 %
    assert env.read(bad.containers[0][1], "cpu.cfs_burst_us") == "0"          # node config (none)
    lines = [r.getMessage() for r in caplog.records if "annotation ignored" in r.getMessage()]
    assert len(lines) == 1 and "default/broken" in lines[0] and wire.ANNOTATION_POD_CPU_BURST in lines[0]


def quota_events(env):
    return [(e["file"], e["new"]) for e in env.executor.events() if e["reason"] == "CFSQuotaBurst"]


def test_quota_scales_up_pod_first_after_throttling(env):
    meta = env.add(pod_object(UID, "web", containers={"app": A}, resources={"app": CPU_2}), pod_quota=200000)
    rel = meta.containers[0][1]
    env.node_usage(0.2)                                                      # idle share pool
    strategy = CPUBurst(env.cache, 1.0)
    slo = spec(policy="cfsQuotaBurstOnly", cfsQuotaBurstPercent=300)
    env.throttle(rel, 10, 0)
    strategy.reconcile(env.view(slo), env.executor)                          # first reading: no delta yet
    assert quota_events(env) == [] and env.quota(rel) == 200000
    env.throttle(rel, 20, 0)
    strategy.reconcile(env.view(slo, NOW + 1), env.executor)                 # not throttled: remain
    assert quota_events(env) == []
    env.throttle(rel, 30, 4)
    strategy.reconcile(env.view(slo, NOW + 2), env.executor)
    env.kernelize()
    assert env.quota(rel) == 240000 and env.quota(meta.cgroup_dir) == 240000
    pod_file, ctr_file = env.file(meta.cgroup_dir, "cpu.cfs_quota_us"), env.file(rel, "cpu.cfs_quota_us")
    assert [f for f, _ in quota_events(env)] == [pod_file, ctr_file]          # parent first when growing
    # keeps growing while throttled, clamped at base · 300 %
    for i in range(3, 12):
        env.throttle(rel, 30 + 10 * i, 4 * i)
        env.node_usage(0.2, NOW + i)
        strategy.reconcile(env.view(slo, NOW + i), env.executor)
        env.kernelize()
    assert env.quota(rel) == 600000
    assert env.quota(meta.cgroup_dir) == 600000                              # moved by the same deltas


def test_quota_scale_down_by_limiter_container_first(env):
    meta = env.add(pod_object(UID, "web", containers={"app": A}, resources={"app": CPU_2}),
                   pod_quota=400000, quotas={"app": 400000})
    rel = meta.containers[0][1]
    env.node_usage(0.2)
    env.cache.append([Sample("container_cpu_usage", (("container_id", A),), NOW - 0.5, 2.0)])   # at its limit
    strategy = CPUBurst(env.cache, 1.0, rng=ZeroRandom())
    slo = spec(policy="auto", cfsQuotaBurstPercent=300, cfsQuotaBurstPeriodSeconds=10)
    strategy.reconcile(env.view(slo), env.executor)                          # empty bucket: not allowed
    env.kernelize()
    assert env.quota(rel) == 320000 and env.quota(meta.cgroup_dir) == 320000
    pod_file, ctr_file = env.file(meta.cgroup_dir, "cpu.cfs_quota_us"), env.file(rel, "cpu.cfs_quota_us")
    assert [f for f, _ in quota_events(env)] == [ctr_file, pod_file]          # child first when shrinking
    assert A in strategy.limiters


def test_quota_reset_when_policy_is_not_quota_burst(env):
    meta = env.add(pod_object(UID, "web", containers={"app": A}, resources={"app": CPU_2}),
                   pod_quota=-1, quotas={"app": 500000})
    rel = meta.containers[0][1]
    CPUBurst(env.cache, 1.0).reconcile(env.view(spec(policy="cpuBurstOnly")), env.executor)
    env.kernelize()
    assert env.quota(rel) == 200000
    assert env.quota(meta.cgroup_dir) == -1                                  # an unlimited pod is left alone
    assert [f for f, _ in quota_events(env)] == [env.file(rel, "cpu.cfs_quota_us")]


def test_overload_scales_down_and_unknown_blocks_growth(env):
    meta = env.add(pod_object(UID, "web", containers={"app": A}, resources={"app": CPU_2}),
                   pod_quota=300000, quotas={"app": 300000})
    rel = meta.containers[0][1]
    slo = spec(policy="cfsQuotaBurstOnly")
    strategy = CPUBurst(env.cache, 1.0)
    env.throttle(rel, 10, 0)
    strategy.reconcile(env.view(slo), env.executor)                          # no node usage: unknown
    env.throttle(rel, 20, 5)
    strategy.reconcile(env.view(slo, NOW + 1), env.executor)                 # throttled, but unknown -> remain
    assert env.quota(rel) == 300000
    env.node_usage(3.0, NOW + 2)                                             # 3 of 4 CPUs: 75 % ≥ 50 %
    env.throttle(rel, 30, 10)
    strategy.reconcile(env.view(slo, NOW + 2), env.executor)
    env.kernelize()
    assert env.quota(rel) == 240000 and env.quota(meta.cgroup_dir) == 240000


def test_share_pool_excludes_dedicated_pods(env):
    env.add(pod_object(UID, "lsr", qos_class="LSR", containers={"app": A},
                       resources={"app": {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}}))
    env.add(pod_object(UID2, "be", qos_class="BE", containers={"app": B}))
    env.node_usage(2.5)
    env.cache.append([Sample("pod_cpu_usage", (("pod_uid", UID),), NOW - 1, 1.5),
                      Sample("pod_cpu_usage", (("pod_uid", UID2),), NOW - 1, 0.5)])
    ratio = CPUBurst(env.cache, 1.0).share_pool_usage(env.view(spec()), NOW)
    assert ratio == pytest.approx((2.5 - 1.5 - 0.5) / (4 - 2))


def test_vanished_container_is_skipped_quietly(env, caplog):
    meta = env.add(pod_object(UID, "web", containers={"app": A}, resources={"app": CPU_2}), pod_quota=200000)
    env.host.remove(meta.containers[0][1])
    with caplog.at_level(logging.WARNING):
        CPUBurst(env.cache, 1.0).reconcile(env.view(spec(policy="auto")), env.executor)
    assert env.executor.total.missing >= 1 and env.executor.total.failed == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert os.path.exists(env.file(meta.cgroup_dir, "cpu.cfs_burst_us"))


def test_a_scrape_during_reconciles_never_sees_the_burst_family_partial(env):
    """The burst gauge is rebuilt every cycle without being cleared first (a scrape between a clear and the refill
    would see part of the family): scrapes running beside 1,000 cycles always see every container's series."""
    import threading

    from koordlet.ops.metrics.exposition import exposition
    uids = [f"11111111-0000-0000-0000-{i:012d}" for i in range(20)]
    for i, uid in enumerate(uids):
        env.add(pod_object(uid, f"web-{i}", containers={"app": f"{i:02d}" * 32}, resources={"app": CPU_2}))
    strategy = CPUBurst(env.cache, 1.0, env.metrics)
    cfg = spec(policy="cpuBurstOnly", cpuBurstPercent=150)
    strategy.reconcile(env.view(cfg), env.executor)
    family = "koordlet_container_scaled_cfs_burst_us{"
    stop = threading.Event()
    seen: list[int] = []

    def scrape() -> None:
        while not stop.is_set():
            seen.append(exposition(env.metrics.registry).decode().count(family))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for _ in range(1000):
            strategy.reconcile(env.view(cfg), env.executor)
    finally:
        stop.set()
        scraper.join()
    assert seen and set(seen) == {len(uids)}
