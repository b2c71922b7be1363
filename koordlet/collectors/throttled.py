"""CPU throttling of pods and containers: the share of CFS periods in which the group was throttled.

Upstream's PodThrottledCollector (reference/metrics-and-reports.md §2.3): always on, every collection interval;
ratio = Δnr_throttled / Δnr_periods of ``cpu.stat`` since the previous run (0 when no period elapsed) →
``pod_cpu_throttled{pod_uid}`` and ``container_cpu_throttled{container_id}``. The first reading of a cgroup, and a
cgroup whose counters went backwards (recreated), give no sample until the next run.
"""

from __future__ import annotations

import logging

from koordlet.component import Plugin, Tick, collecting
from koordlet.host.cgroup import Cgroups
from koordlet.host.fs import vanished
from koordlet.logutil import LogOnce
from koordlet.metriccache import Sample
from koordlet.metrics import AgentMetrics
from koordlet.states.readings import CgroupReadings, CpuStat

log = logging.getLogger(__name__)


def throttled_ratio(previous: tuple[int, int], current: tuple[int, int]) -> float | None:
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
        self._last: dict[str, tuple[int, int]] = {}      # cgroup dir -> the previous reading

    def collect(self, tick: Tick) -> list[Sample]:
        samples: list[Sample] = []
        seen: dict[str, tuple[int, int]] = {}
        shared: dict[str, CpuStat] = {}
        at = self._readings.clock() if self._readings is not None else 0.0
        for meta in tick.pods:
            targets = [("pod", meta.cgroup_dir, ("pod_uid", meta.pod.uid))]
            targets += [("container", rel, ("container_id", c.id)) for c, rel in meta.containers if c.id]
            for scope, rel, label in targets:
                try:
                    seen[rel] = reading = self._cgroups.read_throttling(rel)
                    shared[rel] = CpuStat(reading[0], reading[1], at)
                except (OSError, ValueError) as e:
                    if vanished(e):             # gone before the open, or removed mid-read (ENODEV)
                        self._metrics.skipped(self.name, "vanished")
                        continue
                    self._metrics.skipped(self.name, "error")
                    self._errors(rel, "cpu.stat unreadable cgroup=%s error=%s", rel, e)
                    continue
                ratio = throttled_ratio(self._last[rel], reading) if rel in self._last else None
                if ratio is not None:
                    samples.append(Sample(f"{scope}_cpu_throttled", (label,), tick.now, ratio))
        self._last = seen
        if self._readings is not None:
            self._readings.publish_cpu_stat(shared)
        self._errors.keep_only(seen)
        return samples


PLUGIN = Plugin("podthrottled", lambda ctx: ThrottledCollector(ctx.cgroups, ctx.metrics, ctx.readings),
                when=collecting,
                period=lambda c: c.collect_res_used_interval)
