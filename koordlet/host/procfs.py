"""Readers for /proc/stat, /proc/meminfo and /proc/<pid>/cgroup (under the configured proc root), and the agent
process's own file-descriptor count and limit."""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import dataclass

from koordlet.host.fs import read_bytes
from koordlet.host.paths import HostPaths

log = logging.getLogger(__name__)

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class CpuStat:
    """Busy clock ticks from one read of /proc/stat: the aggregate ``cpu`` line and each online CPU's line.

    busy = user + nice + system + irq + softirq: upstream's formula, which leaves out idle, iowait, steal
    and guest (guest time is already inside user). The node and the per-NUMA collectors both need it every
    cycle; one read serves both, so the cycle opens /proc/stat once and the two views come from one instant.
    """
    busy: int
    per_cpu: dict[int, int]          # logical CPU id -> busy ticks; the kernel prints online CPUs only


def _busy_ticks(fields: list[bytes], path: str) -> int:
    """Busy ticks of one ``cpu``/``cpuN`` line (upstream parses both kinds with the same rule).

    Only the five busy fields are converted: on a 256-CPU host this runs 257 times a cycle.
    """
    if len(fields) < 8:
        raise ValueError(f"{path}: {fields[0].decode()} line has {len(fields) - 1} fields, expected at least 7")
    return int(fields[1]) + int(fields[2]) + int(fields[3]) + int(fields[6]) + int(fields[7])


def read_cpu_stat(paths: HostPaths) -> CpuStat:
    """Aggregate and per-CPU busy ticks; ValueError when the first line is not the aggregate ``cpu`` line."""
    path = paths.proc("stat")
    lines = read_bytes(path).split(b"\n")
    fields = lines[0].split()
    if not fields or fields[0] != b"cpu":
        raise ValueError(f"{path}: first line is not the aggregate cpu line")
    busy = _busy_ticks(fields, path)
    per_cpu: dict[int, int] = {}
    for line in lines[1:]:
        if not line.startswith(b"cpu"):
            break                     # the cpu lines come first; the long intr line is never field-split
        fields = line.split()
        per_cpu[int(fields[0][3:])] = _busy_ticks(fields, path)
    return CpuStat(busy, per_cpu)


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



def read_process_cgroup(paths: HostPaths, pid: int) -> list[tuple[str, str]]:
    """``/proc/<pid>/cgroup`` as (controllers, path) pairs: ("cpu,cpuacct", "/kubepods/...") on v1, ("", "/...")
    for v2's unified line. Raises OSError when the process has gone."""
    out = []
    for line in read_bytes(paths.proc(str(pid), "cgroup")).decode("utf-8", "replace").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[1], parts[2]))
    return out


def kill_cgroup_processes(cgroup_dir: str, sig: int = 9) -> tuple[int, list[str]]:
    """Send ``sig`` (default SIGKILL) to every process in ``cgroup.procs`` of a cgroup directory and all its
    descendants (a pod's containers and sandbox). Returns (signalled, problems); a process that exits in between
    (ESRCH) is not a problem. Used by standalone eviction, where there is no API server to ask.

    Raises FileNotFoundError when ``cgroup_dir`` itself does not exist (the pod has already gone)."""
    if not os.path.isdir(cgroup_dir):
        raise FileNotFoundError(cgroup_dir)
    signalled, problems = 0, []
    for dirpath, _, _ in os.walk(cgroup_dir):
        try:
            pids = [int(p) for p in read_bytes(os.path.join(dirpath, "cgroup.procs")).split()]
        except (OSError, ValueError) as e:
            if not isinstance(e, FileNotFoundError):
                problems.append(f"{dirpath}: {e}")
            continue
        for pid in pids:
            try:
                os.kill(pid, sig)
                signalled += 1
            except ProcessLookupError:
                continue
            except OSError as e:
                problems.append(f"pid {pid}: {e.strerror or e}")
    return signalled, problems


def open_fd_count() -> int:
    """How many file descriptors this process holds: the entries of /proc/self/fd, or 64 when it cannot be listed.

    This is the agent's own fd table, measured against its own RLIMIT_NOFILE, so it is read from the procfs this
    process runs with, not under the configured proc root (that root is the host's view of other processes)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


def raise_nofile(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards ``wanted`` (never above the hard limit); returns the soft
    limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("cannot raise RLIMIT_NOFILE soft=%d to %d error=%s", soft, target, e)
    return soft
