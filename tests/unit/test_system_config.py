"""System config (qos/system_config.py) on a fake /proc/sys and /sys tree.

Facts: upstream pkg/koordlet/qosmanager/plugins/sysreconcile/system_config.go:
min_free_kbytes = memKB·factor/10000 in 10240..10485760, watermark_scale_factor 10..400, switches 0..1,
sched_features written one "NAME" / "NO_NAME" line per changed feature.
"""

import logging
import os

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.host.topology import read_topology
from koordlet.qos.system_config import SystemConfig, min_free_kbytes, parse_sched_features, sched_feature_writes
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import SystemStrategy
from koordlet.writer.executor import Executor
from tests.builders import node_view
from tests.fakehost import FakeHost

FILES = {
    ("proc", "sys/vm/min_free_kbytes"): "67584",
    ("proc", "sys/vm/watermark_scale_factor"): "10",
    ("sys", "kernel/mm/memcg_reaper/reap_background"): "0",
    ("proc", "sys/kernel/sched_group_identity_enabled"): "0",
    ("proc", "sys/kernel/sched_idle_saver_wmark"): "0",
    ("sys", "kernel/mm/pagecache_limit/enabled"): "0",
    ("sys", "kernel/debug/sched_features"): "GENTLE_FAIR_SLEEPERS START_DEBIT NO_NEXT_BUDDY NO_HRTICK",
}


class Env:
    def __init__(self, tmp_path, skip=()):
        self.host = FakeHost(str(tmp_path))
        self.paths = self.host.paths
        for (root, rel), value in FILES.items():
            if rel in skip:
                continue
            path = self.path(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(value + "\n")
        self.executor = Executor(Cgroups(self.paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS))
        self.topology = read_topology(self.paths)

    def path(self, root, rel):
        return self.paths.proc(rel) if root == "proc" else self.paths.sys(rel)

    def read(self, root, rel):
        with open(self.path(root, rel)) as f:
            return f.read().strip()

    def view(self, system, capacity=None):
        slo, errors = merge_node_slo_spec({"systemStrategy": system}, "n1")
        assert not errors
        return node_view(slo=slo, topology=self.topology, node=NodeInfo("n1", capacity=capacity or {}), now=1.0)


def test_pure_helpers():
    assert min_free_kbytes(16 * 2**20, 100) == 167772
    assert parse_sched_features("A NO_B C") == {"A": True, "B": False, "C": True}
    assert sched_feature_writes({"A": True, "B": False}, {"A": False, "B": False, "D": True}) == ["NO_A", "D"]


def test_all_fields_written(tmp_path):
    env = Env(tmp_path)
    strategy = SystemConfig(env.paths, memory_total_kb=8 * 2**20)
    view = env.view({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 1,
                     "schedGroupIdentityEnabled": 1, "schedIdleSaverWmark": 5000000, "pageCacheLimitEnabled": 1},
                    capacity={"memory": "16Gi"})
    strategy.reconcile(view, env.executor)
    assert env.read("proc", "sys/vm/min_free_kbytes") == "167772"             # node capacity 16Gi, not MemTotal
    assert env.read("proc", "sys/vm/watermark_scale_factor") == "150"
    assert env.read("sys", "kernel/mm/memcg_reaper/reap_background") == "1"
    assert env.read("proc", "sys/kernel/sched_group_identity_enabled") == "1"
    assert env.read("proc", "sys/kernel/sched_idle_saver_wmark") == "5000000"
    assert env.read("sys", "kernel/mm/pagecache_limit/enabled") == "1"
    events = env.executor.events()
    assert len(events) == 6 and {e["reason"] for e in events} == {"systemConfig reconcile"}
    strategy.reconcile(view, env.executor)
    assert len(env.executor.events()) == 6                                     # idempotent


def test_memtotal_used_without_node_capacity(tmp_path):
    env = Env(tmp_path)
    SystemConfig(env.paths, memory_total_kb=8 * 2**20).reconcile(env.view({"minFreeKbytesFactor": 100}),
                                                                  env.executor)
    assert env.read("proc", "sys/vm/min_free_kbytes") == str(8 * 2**20 * 100 // 10000)


def test_unset_fields_write_nothing(tmp_path):
    env = Env(tmp_path)
    SystemConfig(env.paths, 8 * 2**20).reconcile(env.view({}), env.executor)
    assert env.executor.events() == []
    assert env.executor.total.written == env.executor.total.missing == 0
    assert env.read("proc", "sys/vm/min_free_kbytes") == "67584"


@pytest.mark.parametrize("system,field,file", [
    ({"minFreeKbytesFactor": 1}, "minFreeKbytesFactor", "sys/vm/min_free_kbytes"),        # 838 kB < 10240
    ({"minFreeKbytesFactor": 20000}, "minFreeKbytesFactor", "sys/vm/min_free_kbytes"),    # > 10 GiB
    ({"watermarkScaleFactor": 5}, "watermarkScaleFactor", "sys/vm/watermark_scale_factor"),
])
def test_out_of_range_is_refused_with_the_field_named(tmp_path, caplog, system, field, file):
    env = Env(tmp_path)
    before = env.read("proc", file)
    strategy = SystemConfig(env.paths, 8 * 2**20)
    with caplog.at_level(logging.WARNING, "koordlet.qos.system_config"):
        strategy.reconcile(env.view({**system, "schedGroupIdentityEnabled": 1}), env.executor)
        strategy.reconcile(env.view({**system, "schedGroupIdentityEnabled": 1}), env.executor)
    assert env.read("proc", file) == before
    assert env.read("proc", "sys/kernel/sched_group_identity_enabled") == "1"   # other fields still apply
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"systemStrategy.{field}" in lines[0]


def test_switch_out_of_range_from_a_typed_spec(tmp_path, caplog):
    """The NodeSLO decoder already rejects 2 for a 0/1 field; the strategy checks again for specs built in code."""
    env = Env(tmp_path)
    slo, _ = merge_node_slo_spec(None)
    from dataclasses import replace
    slo = replace(slo, system=SystemStrategy(memcg_reap_background=2))
    with caplog.at_level(logging.WARNING, "koordlet.qos.system_config"):
        SystemConfig(env.paths, 8 * 2**20).reconcile(
            node_view(slo=slo, topology=env.topology, node=NodeInfo("n1")), env.executor)
    assert env.read("sys", "kernel/mm/memcg_reaper/reap_background") == "0"
    assert "memcgReapBackGround" in caplog.text


def test_missing_anolis_files_counted_quietly(tmp_path, caplog):
    env = Env(tmp_path, skip=("kernel/mm/memcg_reaper/reap_background", "kernel/mm/pagecache_limit/enabled"))
    with caplog.at_level(logging.WARNING):
        SystemConfig(env.paths, 8 * 2**20).reconcile(
            env.view({"memcgReapBackGround": 1, "pageCacheLimitEnabled": 1, "watermarkScaleFactor": 20}),
            env.executor)
    assert env.executor.total.missing == 2 and env.executor.total.written == 1
    assert not caplog.records


def test_sched_features_write_only_changes(tmp_path):
    env = Env(tmp_path)
    strategy = SystemConfig(env.paths, 8 * 2**20)
    strategy.reconcile(env.view({"schedFeatures": {"HRTICK": True, "START_DEBIT": True,
                                                   "GENTLE_FAIR_SLEEPERS": False}}), env.executor)
    path = env.path("sys", "kernel/debug/sched_features")
    assert [(e["file"], e["new"]) for e in env.executor.events()] == [(path, "NO_GENTLE_FAIR_SLEEPERS"),
                                                                      (path, "HRTICK")]
    # the kernel now lists the new state: nothing left to write
    with open(path, "w") as f:
        f.write("NO_GENTLE_FAIR_SLEEPERS START_DEBIT NO_NEXT_BUDDY HRTICK\n")
    strategy.reconcile(env.view({"schedFeatures": {"HRTICK": True, "START_DEBIT": True,
                                                   "GENTLE_FAIR_SLEEPERS": False}}), env.executor)
    assert len(env.executor.events()) == 2


def test_sched_features_unreadable_is_logged_once(tmp_path, caplog):
    env = Env(tmp_path, skip=("kernel/debug/sched_features",))
    strategy = SystemConfig(env.paths, 8 * 2**20)
    with caplog.at_level(logging.WARNING, "koordlet.qos.system_config"):
        for _ in range(3):
            strategy.reconcile(env.view({"schedFeatures": {"HRTICK": True}, "watermarkScaleFactor": 30}),
                               env.executor)
    assert env.read("proc", "sys/vm/watermark_scale_factor") == "30"
    assert len(caplog.records) == 1 and "sched_features" in caplog.records[0].getMessage()
