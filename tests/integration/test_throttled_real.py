"""The podthrottled collector against the real kernel: a spinner under a 0.1-core CFS quota is throttled in most
periods; an idle container beside it, and the pod dir (no quota of its own), are not."""

from __future__ import annotations

import time

import pytest

from koordlet.collectors.throttled import ThrottledCollector, throttled_ratio
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.ops.metrics import AgentMetrics
from tests.builders import pod_meta
from tests.realcgroup import BUSY, IDLE

UID = "11111111-2222-3333-4444-0000000000a1"
SPIN, REST = "a" * 64, "b" * 64


def test_throttled_ratio_is_the_share_of_throttled_periods():
    assert throttled_ratio((100, 10), (150, 40)) == pytest.approx(0.6)
    assert throttled_ratio((100, 10), (100, 10)) == 0.0          # no period elapsed
    assert throttled_ratio((100, 10), (5, 1)) is None            # counters went back: a recreated cgroup


@pytest.mark.root
def test_quota_limited_spinner_is_throttled_and_its_idle_neighbour_is_not(real_tree):
    cgroups = Cgroups(real_tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)
    meta = pod_meta(UID, "spin", namespace="ns", qos="Burstable", containers={"spin": SPIN, "rest": REST},
                    layout=cgroups.layout)
    (spin_c, spin), (rest_c, rest) = meta.containers
    for _, rel in meta.containers:
        real_tree.mkdir(rel)
    with open(real_tree.real("cpu", f"{spin}/cpu.cfs_quota_us"), "w") as f:
        f.write("10000")                                     # 0.1 core of the 100 ms period
    real_tree.spawn(spin, BUSY)
    real_tree.spawn(rest, IDLE)
    collector = ThrottledCollector(cgroups, AgentMetrics("n"))
    assert collector.collect(Tick(1.0, (meta,))) == []       # first reading: nothing to compare with yet
    time.sleep(1.0)
    got = {(s.name, s.labels): s.value for s in collector.collect(Tick(2.0, (meta,)))}
    assert got[("container_cpu_throttled", (("container_id", spin_c.id),))] > 0.5
    assert got[("container_cpu_throttled", (("container_id", rest_c.id),))] == 0.0
    assert got[("pod_cpu_throttled", (("pod_uid", UID),))] == 0.0
