"""Readers for /proc/stat and /proc/meminfo (under the configured proc root)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from koordlet.host.fs import read_bytes
from koordlet.host.paths import HostPaths

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class CpuTicks:
    """Aggregate ``cpu`` line of /proc/stat in clock ticks.

    busy = user + nice + system + irq + softirq: upstream's formula, which leaves out idle, iowait, steal
    and guest (guest time is already inside user).
    """
    busy: int
    total: int


def read_cpu_ticks(paths: HostPaths) -> CpuTicks:
    data = read_bytes(paths.proc("stat"))
    line = data[:data.index(b"\n")] if b"\n" in data else data
    fields = line.split()
    if not fields or fields[0] != b"cpu" or len(fields) < 8:
        raise ValueError(f"{paths.proc('stat')}: first line is not the aggregate cpu line")
    v = [int(x) for x in fields[1:]]
    return CpuTicks(busy=v[0] + v[1] + v[2] + v[5] + v[6], total=sum(v[:8]))


def read_meminfo(paths: HostPaths) -> dict[str, int]:
    """/proc/meminfo as {field: kB} (HugePages_* counts are kept as plain numbers)."""
    out: dict[str, int] = {}
    for line in read_bytes(paths.proc("meminfo")).splitlines():
        key, _, rest = line.partition(b":")
        parts = rest.split()
        if parts:
            try:
                out[key.decode()] = int(parts[0])
            except ValueError:
                continue
    return out


def node_memory_used_bytes(meminfo: dict[str, int]) -> int:
    """(MemTotal − MemAvailable) × 1024, upstream's node_memory_usage."""
    return max(meminfo["MemTotal"] - meminfo["MemAvailable"], 0) * 1024

