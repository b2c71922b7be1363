"""What the collection cycle read from the kernel, handed to the QoS strategies of the same second.

Each kernel file is read once per cycle. The collectors read every pod and container cgroup each second; a strategy that
needs the same value (CPU burst's throttling check under the quota-burst policies reads each LS container's
``cpu.stat``) takes the collector's reading when it is fresh, and reads the file itself only otherwise (the collector is
off or slower than the reconciler, or the cgroup is new).

One writer per kind of reading (the throttled collector for ``cpu.stat``) replaces the whole map at the end of its
cycle: readers on other threads see one cycle or the next, never half of each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


class CpuStat(NamedTuple):
    """The CFS bandwidth counters of one ``cpu.stat`` read, and when (monotonic seconds). A named tuple: the
    throttled collector makes one for every pod and container each second."""
    periods: int
    throttled: int
    at: float


@dataclass
class CgroupReadings:
    clock: Callable[[], float] = time.monotonic
    _cpu_stat: Mapping[str, CpuStat] = field(default_factory=dict)

    def publish_cpu_stat(self, readings: Mapping[str, CpuStat]) -> None:
        """The collector's whole cycle (cgroup dir -> reading), replacing the previous one."""
        self._cpu_stat = readings

    def cpu_stat(self, rel: str, max_age: float) -> CpuStat | None:
        """The collector's reading of ``rel`` if it is at most ``max_age`` seconds old, else None (the caller reads
        the file)."""
        reading = self._cpu_stat.get(rel)
        if reading is None or self.clock() - reading.at > max_age:
            return None
        return reading
