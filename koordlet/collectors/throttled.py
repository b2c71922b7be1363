"""CPU throttling of pods and containers: the share of CFS periods in which the group was throttled.

Upstream's PodThrottledCollector (``pkg/koordlet/metricsadvisor/collectors/podthrottled/pod_throttled_collector.go``:
``podThrottledCollector.collectPodThrottledInfo``): always on, every collection interval;
ratio = Δnr_throttled / Δnr_periods of ``cpu.stat`` since the previous run (0 when no period elapsed) →
``pod_cpu_throttled{pod_uid}`` and ``container_cpu_throttled{container_id}``. The first reading of a cgroup, and a
cgroup whose counters went backwards (recreated), give no sample until the next run.
"""

from __future__ import annotations

import logging

from koordlet.base.logutil import LogOnce
from koordlet.component import Plugin, Tick, collecting
from koordlet.host.cgroup import Cgroups
from koordlet.host.fs import vanished
from koordlet.metriccache import Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.readings import CgroupReadings, CpuStat

log = logging.getLogger(__name__)

POD, CONTAINER = "pod_cpu_throttled", "container_cpu_throttled"


def throttled_ratio(previous: tuple[int, int] | CpuStat, current: tuple[int, int] | CpuStat) -> float | None:
    """Δnr_throttled / Δnr_periods between two (nr_periods, nr_throttled) readings; None when they went back."""
    periods, throttled = current[0] - previous[0], current[1] - previous[1]
    if periods < 0 or throttled < 0:
        return None
    return throttled / periods if periods else 0.0


class ThrottledCollector:
    name = "podthrottled"

    def __init__(self, cgroups: Cgroups, metrics: AgentMetrics, readings: CgroupReadings | None = None) -> None:
        self._cgroups = cgroups
        self._metrics = metrics
        self._readings = readings                        # where CPU burst takes this cycle's cpu.stat from
        self._errors = LogOnce(log)
        self._last: dict[str, CpuStat] = {}              # cgroup dir -> the previous reading

    def collect(self, tick: Tick) -> list[Sample]:
        samples: list[Sample] = []
        seen: dict[str, CpuStat] = {}
        at = self._readings.clock() if self._readings is not None else 0.0
        for meta in tick.pods:
            self._read(POD, meta.cgroup_dir, ("pod_uid", meta.pod.uid), at, tick.now, seen, samples)
            for c, rel in meta.containers:
                if c.id:
                    self._read(CONTAINER, rel, ("container_id", c.id), at, tick.now, seen, samples)
        self._last = seen
        if self._readings is not None:
            self._readings.publish_cpu_stat(seen)
        self._errors.keep_only(seen)
        return samples

    def _read(self, kind: str, rel: str, label: tuple[str, str], at: float, now: float, seen: dict[str, CpuStat],
              samples: list[Sample]) -> None:
        """One cgroup's ``cpu.stat`` into ``seen``, and its sample of ``kind`` when there is a previous reading."""
        try:
            periods, throttled = self._cgroups.read_throttling(rel)
        except (OSError, ValueError) as e:
            if vanished(e):             # gone before the open, or removed mid-read (ENODEV)
                self._metrics.skipped(self.name, "vanished")
                return
            self._metrics.skipped(self.name, "error")
            self._errors(rel, "cpu.stat unreadable cgroup=%s error=%s", rel, e)
            return
        seen[rel] = reading = CpuStat(periods, throttled, at)
        previous = self._last.get(rel)
        ratio = throttled_ratio(previous, reading) if previous is not None else None
        if ratio is not None:
            samples.append(Sample(kind, (label,), now, ratio))


PLUGIN = Plugin("podthrottled", lambda ctx: ThrottledCollector(ctx.cgroups, ctx.metrics, ctx.readings),
                when=collecting,
                period=lambda c: c.collect_res_used_interval)
