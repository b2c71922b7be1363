"""Gate ResctrlCollector: LLC occupancy and memory bandwidth of the class groups, read from a fake of the kernel's
resctrl tree with its monitoring files (doubles/fakeresctrl.py), as upstream's resctrl collector reads them
(pkg/koordlet/metricsadvisor/collectors/resctrl/resctrl_collector.go)."""

from __future__ import annotations

from typing import Any

import pytest

from doubles.fakeresctrl import AMD, INTEL, FakeResctrl
from koordlet.collectors import resctrl as rc
from koordlet.component import Tick
from koordlet.host import resctrl as hr
from koordlet.host.paths import HostPaths
from koordlet.metriccache.kinds import schema_problem
from koordlet.ops.config import build
from koordlet.ops.metrics import AgentMetrics


def fake_with_groups(tmp_path: Any, profile: Any = INTEL, groups: tuple[str, ...] = ("LSR", "LS", "BE")
                     ) -> FakeResctrl:
    fake = FakeResctrl(HostPaths.under(str(tmp_path)), profile)
    for name in groups:
        fake.make_group(fake.root, name)
    return fake


def gauge(m: AgentMetrics, name: str, **labels: str) -> float | None:
    return m.external.get_sample_value(name, {"node": "n1", **labels})


def test_reads_every_class_group_and_domain(tmp_path: Any) -> None:
    fake = fake_with_groups(tmp_path)
    fake.set_monitor("LS", 0, llc_occupancy=1_048_576)
    fake.set_monitor("LS", 1, llc_occupancy=2_097_152)
    fake.traffic("BE", 1, total=5_000, local=3_000)
    fake.traffic("BE", 1, total=1_000, local=0)          # the counters only grow
    m = AgentMetrics("n1")
    samples = rc.ResctrlCollector(fake.root, m).collect(Tick(100.0, ()))
    by_key = {(s.name, s.labels): s.value for s in samples}
    assert by_key[("resctrl_resource_llc", (("cache_id", "0"), ("qos", "LS")))] == 1_048_576
    assert by_key[("resctrl_resource_llc", (("cache_id", "1"), ("qos", "LS")))] == 2_097_152
    assert by_key[("resctrl_resource_mb", (("cache_id", "1"), ("qos", "BE"),
                                           ("resctrl_mb_type", "mbm_total_bytes")))] == 6_000
    assert by_key[("resctrl_resource_mb", (("cache_id", "1"), ("qos", "BE"),
                                           ("resctrl_mb_type", "mbm_local_bytes")))] == 3_000
    # 3 groups x 2 domains: one llc and two mb samples each
    assert len(samples) == 3 * 2 * 3
    assert all(schema_problem(s) is None for s in samples)
    assert gauge(m, "koordlet_resctrl_llc_occupancy", cache_id="0", qos="LS") == 1_048_576
    assert gauge(m, "koordlet_resctrl_memory_bandwidth", cache_id="1", qos="BE", mb_type="mbm_total_bytes") == 6_000


def test_group_missing_or_unavailable_domain(tmp_path: Any) -> None:
    """A class group the resctrl strategy has not made is skipped; a domain the kernel prints "Unavailable" for is
    left out, the rest of the group kept (upstream fails the whole group)."""
    fake = fake_with_groups(tmp_path, groups=("LS",))
    fake.set_monitor("LS", 0, llc_occupancy=None)
    fake.set_monitor("LS", 1, llc_occupancy=4096)
    m = AgentMetrics("n1")
    samples = rc.ResctrlCollector(fake.root, m).collect(Tick(1.0, ()))
    llc = {s.labels: s.value for s in samples if s.name == "resctrl_resource_llc"}
    assert llc == {(("cache_id", "1"), ("qos", "LS")): 4096}
    assert {dict(s.labels)["qos"] for s in samples} == {"LS"}


def test_series_of_a_removed_group_disappear(tmp_path: Any) -> None:
    fake = fake_with_groups(tmp_path, AMD)
    m = AgentMetrics("n1")
    collector = rc.ResctrlCollector(fake.root, m)
    collector.collect(Tick(1.0, ()))
    assert gauge(m, "koordlet_resctrl_llc_occupancy", cache_id="3", qos="BE") == 0
    fake.remove_group(fake.root, "BE")
    collector.collect(Tick(2.0, ()))
    assert gauge(m, "koordlet_resctrl_llc_occupancy", cache_id="3", qos="BE") is None
    assert gauge(m, "koordlet_resctrl_llc_occupancy", cache_id="3", qos="LS") == 0
    fake.unmount()
    assert collector.collect(Tick(3.0, ())) == []
    assert gauge(m, "koordlet_resctrl_llc_occupancy", cache_id="3", qos="LS") is None


def test_support_follows_upstream_flags(tmp_path: Any) -> None:
    fake = FakeResctrl(HostPaths.under(str(tmp_path / "a")), INTEL)
    assert hr.monitoring_supported(fake.paths)[0]
    no_mbm = FakeResctrl(HostPaths.under(str(tmp_path / "b")), INTEL.with_(flags=("cat_l3", "mba", "cqm_llc",
                                                                                 "cqm_occup_llc")))
    ok, why = hr.monitoring_supported(no_mbm.paths)
    assert not ok and "cqm_mbm_total" in why
    no_mon = FakeResctrl(HostPaths.under(str(tmp_path / "c")), INTEL.with_(flags=("cat_l3", "mba")))
    assert not hr.monitoring_supported(no_mon.paths)[0]
    assert not (tmp_path / "c" / "sys" / "fs" / "resctrl" / "mon_data").exists()    # as the kernel: no monitoring


@pytest.mark.parametrize("gate,option,enabled", [(True, True, True), (True, False, False), (False, True, False)])
def test_gate_and_option_both_needed(tmp_path: Any, gate: bool, option: bool, enabled: bool) -> None:
    """Upstream runs the collector only with the gate and -enable-resctrl-collector."""
    cfg = build(flags={"standalone": True, "feature-gates": {"ResctrlCollector": gate},
                       "enable-resctrl-collector": option, "tsdb-path": str(tmp_path)}, environ={})
    assert rc.PLUGIN.enabled(cfg) is enabled
    assert cfg.resctrl_collector_interval == 10.0
