"""Memory QoS (qos/memory_qos.py): the config tables, the formulas, and the leveled writes on fake trees.

Expected values follow upstream pkg/koordlet/qosmanager/plugins/cgreconcile/cgroup_reconcile.go:
min = req·min%, low = req·low% (raised to min), container high = "max" at 0 % else
floor((req + (limit|allocatable − req)·pct)/page)·page, QoS dirs Σ pods, the kubepods root Σ all.
"""

import json
import logging
import os
from dataclasses import replace

import pytest

from koordlet.base import wire
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.topology import read_topology
from koordlet.qos.memory_qos import (
    NONE_MEMORY_QOS,
    PAGE_SIZE,
    MemoryQOS,
    MemorySettings,
    class_memory_qos,
    container_settings,
    pod_memory_qos,
    pod_settings,
    qos_settings,
)
from koordlet.states.decode import DecodeError
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import MemoryQOSCfg
from koordlet.writer.executor import Executor
from koordlet.writer.resources import MAX_INT64
from tests.builders import agent_pod, node_view, pod_meta
from tests.fakehost import CgroupValues, FakeHost

GiB, MiB = 2**30, 2**20
A, B, C = "a" * 64, "b" * 64, "c" * 64
U1, U2, U3 = ("22222222-0000-0000-0000-00000000000" + str(i) for i in (1, 2, 3))

LS_ON = {"enable": True, "minLimitPercent": 40, "lowLimitPercent": 60, "throttlingPercent": 80,
         "priorityEnable": 1, "priority": 6, "oomKillGroup": 1, "pageCacheLimitPercent": 50}
SLO, _errors = merge_node_slo_spec({"resourceQOSStrategy": {
    "lsClass": {"memoryQOS": LS_ON},
    "lsrClass": {"memoryQOS": {"enable": True, "minLimitPercent": 100, "lowLimitPercent": 100,
                               "throttlingPercent": 0}},
    "beClass": {"memoryQOS": {"enable": False}}}}, "n1")
assert not _errors
STRATEGY = SLO.resource_qos


MEMORY_QOS = wire.ANNOTATION_POD_MEMORY_QOS
WEB = {"containers": {"app": A}, "resources": {"app": {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}}


# ----------------------------------------------------------------------------------------------------------
# config: classes x policies x annotation

LS_CFG = STRATEGY.ls.memory_qos
LSR_CFG = STRATEGY.lsr.memory_qos
BE_NODE_CFG = STRATEGY.be.memory_qos                   # disabled: the None values


@pytest.mark.parametrize("labels,kube,annotation,expected", [
    (None, "Burstable", None, LS_CFG),
    (None, "Guaranteed", None, LSR_CFG),
    ({"koordinator.sh/qosClass": "LSE"}, "Guaranteed", None, LSR_CFG),              # LSE shares LSR
    ({"koordinator.sh/qosClass": "BE"}, "BestEffort", None, BE_NODE_CFG),
    (None, "Burstable", '{"policy":"none"}', NONE_MEMORY_QOS),
    (None, "Burstable", '{"policy":"none","minLimitPercent":90}', NONE_MEMORY_QOS),  # none ignores fields
    (None, "Burstable", '{"policy":"default","minLimitPercent":90}', replace(LS_CFG, min_limit_percent=90)),
    (None, "Burstable", '{"minLimitPercent":90}', replace(LS_CFG, min_limit_percent=90)),
    (None, "Burstable", '{"policy":"","enable":false}', LS_CFG),                      # enable is node-level
])
def test_pod_config_table(labels, kube, annotation, expected):
    p = agent_pod(U1, "web", qos=kube, labels=labels, **WEB,
                  annotations={} if annotation is None else {MEMORY_QOS: annotation})
    assert pod_memory_qos(p, STRATEGY) == expected


def test_policy_auto_uses_the_builtin_class_default_even_when_disabled():
    be = agent_pod(U1, "web", qos="BestEffort", qos_class="BE", annotations={MEMORY_QOS: '{"policy":"auto"}'}, **WEB)
    cfg = pod_memory_qos(be, STRATEGY)
    assert BE_NODE_CFG.wmark_min_adj == 0                                # the node has BE disabled ...
    assert (cfg.wmark_ratio, cfg.wmark_scale_permill, cfg.wmark_min_adj) == (95, 20, 50)   # ... auto: BE default
    ls = agent_pod(U1, "web", annotations={MEMORY_QOS: '{"policy":"auto","lowLimitPercent":30}'}, **WEB)
    cfg = pod_memory_qos(ls, STRATEGY)
    assert (cfg.min_limit_percent, cfg.low_limit_percent, cfg.wmark_min_adj, cfg.page_cache_limit_percent) == \
        (0, 30, -25, None)                                                # LS default, fields overlaid
    system = agent_pod(U1, "web", qos_class="SYSTEM", annotations={MEMORY_QOS: '{"policy":"auto"}'}, **WEB)
    cfg = pod_memory_qos(system, STRATEGY)
    assert (cfg.wmark_ratio, cfg.wmark_scale_permill) == (0, 50)


@pytest.mark.parametrize("annotation", ["{oops", "[1]", '{"policy":"strict"}', '{"policy":3}',
                                        '{"minLimitPercent":101}', '{"wmarkRatio":"high"}'])
def test_malformed_annotation_falls_back_to_the_class(annotation):
    p = agent_pod(U1, "web", annotations={MEMORY_QOS: annotation}, **WEB)
    with pytest.raises(DecodeError, match="koordinator.sh/memoryQOS"):
        pod_memory_qos(p, STRATEGY)
    assert class_memory_qos(STRATEGY, p.qos_class) == LS_CFG           # what the strategy falls back to


# ----------------------------------------------------------------------------------------------------------
# formulas

def cfg(**kw):
    return MemoryQOSCfg(**kw)


def high(req, pct, ceiling):
    return (req + (ceiling - req) * pct // 100) // PAGE_SIZE * PAGE_SIZE


@pytest.mark.parametrize("resources,c,node_mem,expected", [
    ({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}},
     cfg(min_limit_percent=40, low_limit_percent=60, throttling_percent=80), 0,
     (int(0.4 * GiB), int(0.6 * GiB), high(GiB, 80, 2 * GiB))),
    ({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}},      # low below min is raised to min
     cfg(min_limit_percent=100, low_limit_percent=50, throttling_percent=0), 0, (GiB, GiB, MAX_INT64)),
    ({"requests": {"memory": "1Gi"}},                                   # no limit: node allocatable
     cfg(min_limit_percent=0, low_limit_percent=0, throttling_percent=50), 8 * GiB, (0, 0, high(GiB, 50, 8 * GiB))),
    ({"requests": {"memory": "1Gi"}}, cfg(throttling_percent=50), 0, (None, None, None)),   # allocatable unknown
    ({"limits": {"memory": "100Mi"}},                                   # request defaults to the limit
     cfg(min_limit_percent=100, throttling_percent=1), 0, (100 * MiB, None, 100 * MiB)),
    ({}, cfg(min_limit_percent=100, low_limit_percent=100, throttling_percent=100), 4 * GiB, (0, 0, 4 * GiB)),
    ({"requests": {"memory": "1000001"}, "limits": {"memory": "1000001"}},     # high at least min
     cfg(min_limit_percent=100, throttling_percent=100), 0, (1000001, None, 1000001)),
])
def test_container_formulas(resources, c, node_mem, expected):
    p = agent_pod(U1, "web", containers={"app": A}, resources={"app": resources})
    s = container_settings(p, p.containers[0], c, node_mem)
    assert (s.min, s.low, s.high) == expected


def test_be_pods_use_batch_resources():
    res = {"requests": {"kubernetes.io/batch-memory": "1Gi"}, "limits": {"kubernetes.io/batch-memory": "4Gi"}}
    p = agent_pod(U1, "web", qos="BestEffort", qos_class="BE", containers={"job": B, "aux": C},
                  resources={"job": res, "aux": {}})
    c = cfg(min_limit_percent=50, throttling_percent=50, page_cache_limit_percent=10)
    s = container_settings(p, p.containers[0], c, 64 * GiB)
    assert (s.min, s.high) == (GiB // 2, high(GiB, 50, 4 * GiB))
    ps = pod_settings(p, c)
    assert ps.min == GiB // 2                        # Σ batch requests (the unset one counts as 0)
    assert ps.pagecache_size is None                 # one container without a batch limit: pod unlimited
    p2 = agent_pod(U1, "web", qos="BestEffort", qos_class="BE", containers={"job": B}, resources={"job": res})
    assert pod_settings(p2, c).pagecache_size == 4 * GiB // 10


@pytest.mark.parametrize("c,expected", [
    (cfg(page_cache_limit_percent=50), (1, GiB, 0)),                              # limit 2Gi · 50 %
    (cfg(page_cache_limit_size=512 * MiB, page_cache_reclaim_sync=True), (1, 512 * MiB, 1)),
    (cfg(page_cache_limit_size=8 * GiB), (1, 2 * GiB, 0)),                        # capped at the limit
    (cfg(page_cache_limit_size=0), (0, 0, None)),                                 # explicit 0 disables
    (cfg(page_cache_limit_percent=50, page_cache_enable=False), (0, GiB, 0)),     # enable overrides
    (cfg(page_cache_enable=True), (1, None, None)),
    (cfg(), (None, None, None)),
])
def test_pod_page_cache(c, expected):
    s = pod_settings(agent_pod(U1, "web", **WEB), c)
    assert (s.pagecache_enable, s.pagecache_size, s.pagecache_sync) == expected


def test_pod_settings_static_fields_and_sums():
    p = agent_pod(U1, "web", containers={"a": A, "b": B},
                  resources={"a": {"requests": {"memory": "1Gi"}}, "b": {"requests": {"memory": "3Gi"}}})
    s = pod_settings(p, LS_CFG)
    assert (s.min, s.low) == (int(0.4 * 4 * GiB), int(0.6 * 4 * GiB))
    assert (s.wmark_ratio, s.wmark_scale_factor, s.wmark_min_adj, s.priority, s.use_priority_oom, s.oom_group) == \
        (95, 20, -25, 6, 1, 1)


def test_qos_level_sums():
    ls = agent_pod(U1, "web", **WEB)                               # 1Gi request, LS 40 % / 60 %
    lsr = agent_pod(U2, "db", qos="Guaranteed", containers={"app": B},
                    resources={"app": {"requests": {"memory": "2Gi"}, "limits": {"memory": "2Gi"}}})
    out = qos_settings([(ls, LS_CFG), (lsr, LSR_CFG)], STRATEGY)
    assert (out[KubeQOS.BURSTABLE].min, out[KubeQOS.BURSTABLE].low) == (int(0.4 * GiB), int(0.6 * GiB))
    root = out[KubeQOS.GUARANTEED]
    assert (root.min, root.low) == (int(0.4 * GiB) + 2 * GiB, int(0.6 * GiB) + 2 * GiB)     # Σ all classes
    assert out[KubeQOS.BESTEFFORT].min is None                     # no BE pods: left alone (as upstream)
    assert (out[KubeQOS.BURSTABLE].priority, out[KubeQOS.BURSTABLE].use_priority_oom,
            out[KubeQOS.BURSTABLE].oom_group) == (6, 1, 1)          # from the LS class
    assert (out[KubeQOS.BESTEFFORT].priority, out[KubeQOS.BESTEFFORT].oom_group) == (0, 0)
    assert out[KubeQOS.BURSTABLE].wmark_ratio is None               # watermarks are not set on QoS dirs


# ----------------------------------------------------------------------------------------------------------
# the strategy on fake trees

V2_FILES = {"memory.min": "0", "memory.low": "0", "memory.high": "max", "memory.wmark_ratio": "0",
            "memory.wmark_scale_factor": "50", "memory.wmark_min_adj": "0", "memory.priority": "0",
            "memory.use_priority_oom": "0", "memory.oom.group": "0", "memory.pagecache_limit.enable": "0",
            "memory.pagecache_limit.size": "0", "memory.pagecache_limit.sync": "0"}


class Env:
    def __init__(self, tmp_path, version, files):
        self.host = FakeHost(str(tmp_path), version, Driver.CGROUPFS)
        self.cg = Cgroups(self.host.paths.cgroup_root, version, Driver.CGROUPFS)
        self.executor = Executor(self.cg)
        self.files = files
        self.metas = [pod_meta(U1, "web", **WEB, layout=self.cg.layout),
                      pod_meta(U2, "db", qos="Guaranteed", containers={"app": B},
                               resources={"app": {"requests": {"memory": "2Gi"}, "limits": {"memory": "2Gi"}}},
                               layout=self.cg.layout)]
        dirs = [self.cg.layout.qos_dir(q) for q in KubeQOS]
        for m in self.metas:
            self.host.add_pod(m.pod.kube_qos, m.pod.uid, containers={c.id: CgroupValues() for c, _ in m.containers})
            dirs += [m.cgroup_dir] + [rel for _, rel in m.containers]
        for rel in dirs:
            for name, value in files.items():
                with open(self.path(rel, name), "w") as f:
                    f.write(value)
        self.topology = read_topology(self.host.paths)

    def path(self, rel, name):
        return self.cg.path("memory", rel, name)

    def read(self, rel, name):
        with open(self.path(rel, name)) as f:
            return f.read().strip()

    def view(self, slo=SLO, pods=None):
        return node_view(pods=self.metas if pods is None else pods, slo=slo, topology=self.topology,
                         node=NodeInfo("n1", allocatable={"memory": "8Gi"}), now=1.0)


def test_v2_files_written_with_sums(tmp_path):
    env = Env(tmp_path, CgroupVersion.V2, V2_FILES)
    MemoryQOS().reconcile(env.view(), env.executor)
    ls, lsr = env.metas
    ls_ctr, lsr_ctr = ls.containers[0][1], lsr.containers[0][1]
    assert env.read(ls_ctr, "memory.min") == str(int(0.4 * GiB))
    assert env.read(ls_ctr, "memory.high") == str(high(GiB, 80, 2 * GiB))
    assert env.read(ls.cgroup_dir, "memory.low") == str(int(0.6 * GiB))
    assert env.read(ls.cgroup_dir, "memory.pagecache_limit.size") == str(GiB)
    assert env.read(ls.cgroup_dir, "memory.pagecache_limit.enable") == "1"
    assert env.read(ls.cgroup_dir, "memory.priority") == "6"
    assert env.read(lsr_ctr, "memory.min") == str(2 * GiB)
    assert env.read(lsr_ctr, "memory.high") == "max"                           # MaxInt64 is "max": unchanged
    layout = env.cg.layout
    assert env.read(layout.qos_dir(KubeQOS.BURSTABLE), "memory.min") == str(int(0.4 * GiB))
    assert env.read(layout.qos_dir(KubeQOS.GUARANTEED), "memory.min") == str(int(0.4 * GiB) + 2 * GiB)
    assert env.read(layout.qos_dir(KubeQOS.BURSTABLE), "memory.oom.group") == "1"
    assert env.read(layout.qos_dir(KubeQOS.BURSTABLE), "memory.wmark_ratio") == "0"     # not a QoS-level file
    n = len(env.executor.events())
    MemoryQOS().reconcile(env.view(), env.executor)
    assert len(env.executor.events()) == n                                    # idempotent


def test_v1_without_anolis_files_writes_nothing(tmp_path, caplog):
    env = Env(tmp_path, CgroupVersion.V1, {})
    with caplog.at_level(logging.WARNING):
        MemoryQOS().reconcile(env.view(), env.executor)
    assert env.executor.events() == []
    assert env.executor.total.missing > 0 and env.executor.total.failed == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not os.path.exists(env.path(env.metas[0].cgroup_dir, "memory.min"))


def test_v1_anolis_files_written_but_never_pagecache(tmp_path):
    files = {k: v for k, v in V2_FILES.items() if not k.startswith("memory.pagecache_limit.")}
    env = Env(tmp_path, CgroupVersion.V1, files)
    MemoryQOS().reconcile(env.view(), env.executor)
    ls = env.metas[0]
    assert env.read(ls.containers[0][1], "memory.wmark_min_adj") == "-25"
    assert env.read(ls.cgroup_dir, "memory.min") == str(int(0.4 * GiB))
    assert not any("pagecache" in e["file"] for e in env.executor.events())
    assert env.executor.total.missing == 0


def min_writes(env):
    return [e["file"] for e in env.executor.events() if e["file"].endswith("/memory.min")]


def test_leveled_order_raise_parent_first_lower_child_first(tmp_path):
    env = Env(tmp_path, CgroupVersion.V2, V2_FILES)
    ls = env.metas[0]
    layout = env.cg.layout
    root, burstable = env.path(layout.qos_dir(KubeQOS.GUARANTEED), "memory.min"), \
        env.path(layout.qos_dir(KubeQOS.BURSTABLE), "memory.min")
    pod_file, ctr_file = env.path(ls.cgroup_dir, "memory.min"), env.path(ls.containers[0][1], "memory.min")
    MemoryQOS().reconcile(env.view(pods=[ls]), env.executor)
    order = min_writes(env)
    assert order.index(root) < order.index(burstable) < order.index(pod_file) < order.index(ctr_file)
    before = len(env.executor.events())
    lower = json.dumps({"minLimitPercent": 10})
    ls_low = pod_meta(U1, "web", annotations={MEMORY_QOS: lower}, **WEB, layout=env.cg.layout)
    MemoryQOS().reconcile(env.view(pods=[ls_low]), env.executor)
    order = [e["file"] for e in env.executor.events()[before:] if e["file"].endswith("/memory.min")]
    assert order == [ctr_file, pod_file, burstable, root]                    # tightened bottom-up
    assert env.read(ls.cgroup_dir, "memory.min") == str(GiB // 10)


def test_bad_annotation_logged_once_and_others_unaffected(tmp_path, caplog):
    env = Env(tmp_path, CgroupVersion.V2, V2_FILES)
    broken = pod_meta(U3, "broken", annotations={MEMORY_QOS: "{nope"}, containers={"app": C},
                      resources={"app": {"requests": {"memory": "1Gi"}}}, layout=env.cg.layout)
    env.host.add_pod(KubeQOS.BURSTABLE, U3, containers={C: CgroupValues()})
    for rel in (broken.cgroup_dir, broken.containers[0][1]):
        for name, value in V2_FILES.items():
            with open(env.path(rel, name), "w") as f:
                f.write(value)
    strategy = MemoryQOS()
    with caplog.at_level(logging.WARNING, "koordlet.qos.memory_qos"):
        strategy.reconcile(env.view(pods=env.metas + [broken]), env.executor)
        strategy.reconcile(env.view(pods=env.metas + [broken]), env.executor)
    lines = [r.getMessage() for r in caplog.records if "annotation ignored" in r.getMessage()]
    assert len(lines) == 1 and "default/broken" in lines[0]
    assert env.read(broken.containers[0][1], "memory.min") == str(int(0.4 * GiB))     # LS class config
    assert env.read(env.metas[0].containers[0][1], "memory.min") == str(int(0.4 * GiB))


def test_inactive_pods_are_skipped(tmp_path):
    env = Env(tmp_path, CgroupVersion.V2, V2_FILES)
    done = pod_meta(U1, "web", phase="Succeeded", **WEB, layout=env.cg.layout)
    MemoryQOS().reconcile(env.view(pods=[done]), env.executor)
    assert env.read(done.cgroup_dir, "memory.min") == "0"
    assert not any(done.cgroup_dir in e["file"] for e in env.executor.events())


def test_memory_settings_skip_none_and_v1_pagecache(tmp_path):
    host = FakeHost(str(tmp_path), CgroupVersion.V1, Driver.CGROUPFS)
    executor = Executor(Cgroups(host.paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS))
    ups = MemorySettings(min=1, pagecache_enable=1, pagecache_size=2).updates(executor, "kubepods", "x")
    assert [os.path.basename(u.path) for u in ups] == ["memory.min"]
