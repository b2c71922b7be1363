"""states/readings.py: the throttled collector's cpu.stat readings serve CPU burst in the same second, so under the
quota-burst policies each container's cpu.stat is read once per cycle, not twice."""

from __future__ import annotations

import threading
from pathlib import Path

from doubles.fakehost import FakeHost
from koordlet.collectors.throttled import ThrottledCollector
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, KubeQOS
from koordlet.metriccache import MetricCache
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.cpu_burst import CPUBurst
from koordlet.states.informer import meta_for
from koordlet.states.pod import Container, Pod
from koordlet.states.readings import CgroupReadings


class Clock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


def cpu_stat(periods: int, throttled: int) -> str:
    return f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time 0\n"


def setup(tmp_path):
    host = FakeHost(str(tmp_path), CgroupVersion.V1)
    cg = Cgroups.detect(host.paths)
    pod = Pod(uid="u1", name="p", namespace="d", kube_qos=KubeQOS.BURSTABLE,
              containers=(Container("c", "containerd", "ab" * 32),))
    meta = meta_for(pod, cg.layout)
    host.add_pod(KubeQOS.BURSTABLE, "u1")
    rel = meta.containers[0][1]
    Path(cg.path("cpu", rel)).mkdir(parents=True, exist_ok=True)
    stat = Path(cg.path("cpu", rel, "cpu.stat"))
    stat.write_text(cpu_stat(10, 1))
    Path(cg.path("cpu", meta.cgroup_dir, "cpu.stat")).write_text(cpu_stat(20, 2))
    return cg, meta, rel, stat


def test_the_collector_publishes_each_cycle_whole(tmp_path):
    cg, meta, rel, _ = setup(tmp_path)
    clock = Clock()
    readings = CgroupReadings(clock)
    collector = ThrottledCollector(cg, AgentMetrics("n"), readings)
    collector.collect(Tick(100.0, (meta,), (), threading.Event()))
    got = readings.cpu_stat(rel, max_age=float("inf"))
    assert got is not None and (got.periods, got.throttled) == (10, 1)
    assert readings.cpu_stat(meta.cgroup_dir, max_age=float("inf")).throttled == 2
    collector.collect(Tick(101.0, (), (), threading.Event()))      # the pod left: its readings go with it
    assert readings.cpu_stat(rel, max_age=float("inf")) is None


def test_cpu_burst_takes_the_fresh_reading_and_reads_the_file_otherwise(tmp_path):
    cg, meta, rel, stat = setup(tmp_path)
    clock = Clock()
    readings = CgroupReadings(clock)
    collector = ThrottledCollector(cg, AgentMetrics("n"), readings)
    burst = CPUBurst(MetricCache(None), 1.0, readings=readings)
    cid = meta.containers[0][0].id

    collector.collect(Tick(100.0, (meta,), (), threading.Event()))
    stat.write_text(cpu_stat(99, 99))                # the file moves on; the collector's reading of this second stays
    assert burst._throttled(cid, cg, rel) is None    # first reading: nothing to compare with
    assert (burst._throttle[cid].periods, burst._throttle[cid].throttled) == (10, 1)   # the collector's, no read

    # the same reading again (the collector has not run since): no news, and no read of the file
    clock.t += 0.5
    assert burst._throttled(cid, cg, rel) is None
    assert burst._throttle[cid].throttled == 1

    # a newer collector reading is used as it is
    stat.write_text(cpu_stat(120, 99))
    clock.t += 0.5
    collector.collect(Tick(101.0, (meta,), (), threading.Event()))
    stat.write_text(cpu_stat(130, 500))
    assert burst._throttled(cid, cg, rel) is True    # 1 -> 99 (the collector's), not 500 (the file's)
    assert burst._throttle[cid].throttled == 99
    stat.write_text(cpu_stat(140, 500))
    clock.t += 1.0
    collector.collect(Tick(102.0, (meta,), (), threading.Event()))
    assert burst._throttled(cid, cg, rel) is True    # 99 -> 500
    stat.write_text(cpu_stat(150, 500))
    clock.t += 1.0
    collector.collect(Tick(103.0, (meta,), (), threading.Event()))
    assert burst._throttled(cid, cg, rel) is False   # 500 -> 500: not throttled in that second

    # a stale one (collector stopped) is not: the file is read
    clock.t += 5.0
    stat.write_text(cpu_stat(160, 600))
    assert burst._throttled(cid, cg, rel) is True
    assert burst._throttle[cid].throttled == 600
