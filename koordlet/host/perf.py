"""perf_event_open(2) through ctypes (no perf binary): grouped counters per cgroup and CPU.

The kernel boundary is :class:`PerfKernel` (open / ioctl / read / close); :class:`LinuxPerf` is the real one,
tests hand in a fake kernel that answers in the kernel's own read format. On top of it, :class:`CgroupCounters`
counts two events for one cgroup the way upstream's libpfm4 path does: one group per CPU (the first event leads),
``PERF_FLAG_PID_CGROUP`` with the cgroup directory's fd as the pid, read_format GROUP | TOTAL_TIME_ENABLED |
TOTAL_TIME_RUNNING | ID, reset + enable of the whole group, disable before reading. When the PMU has more events
than counters the kernel multiplexes and the group ran only ``time_running`` of ``time_enabled``; each CPU's values
are scaled by enabled/running before they are summed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_FLAG_PID_CGROUP = 1 << 2

PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_ID = 1 << 2
PERF_FORMAT_GROUP = 1 << 3
GROUP_READ_FORMAT = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING | PERF_FORMAT_ID

# _IO('$', n): the perf ioctls take an int argument; PERF_IOC_FLAG_GROUP applies them to the whole group
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_DISABLE = 0x2401
PERF_EVENT_IOC_RESET = 0x2403
PERF_IOC_FLAG_GROUP = 1

_ATTR_SIZE = 128          # PERF_ATTR_SIZE_VER8; older kernels accept any size they know, newer zero-extend
_DISABLED = 1 << 0
_EXCLUDE_HV = 1 << 6
_NR = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


@dataclass(frozen=True)
class Event:
    type: int
    config: int
    name: str


CYCLES = Event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "cycles")
INSTRUCTIONS = Event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "instructions")
CPU_CLOCK = Event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, "cpu-clock")
TASK_CLOCK = Event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, "task-clock")


def attr_bytes(event: Event, read_format: int = 0, flags: int = _DISABLED | _EXCLUDE_HV) -> bytes:
    """struct perf_event_attr: type, size, config, sample_period, sample_type, read_format, then the flag bits."""
    attr = bytearray(_ATTR_SIZE)
    struct.pack_into("IIQ", attr, 0, event.type, _ATTR_SIZE, event.config)
    struct.pack_into("QQ", attr, 32, read_format, flags)
    return bytes(attr)


class PerfKernel(Protocol):
    def open(self, attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> int: ...
    def ioctl(self, fd: int, request: int, arg: int) -> None: ...
    def read(self, fd: int, size: int) -> bytes: ...
    def close(self, fd: int) -> None: ...


class LinuxPerf:
    """The syscall. Errors are OSError with the kernel's errno (ENOENT: no such PMU event, EMFILE: out of fds)."""

    def open(self, attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        nr = _NR.get(platform.machine())
        if nr is None:
            raise OSError(38, f"perf_event_open: unsupported architecture {platform.machine()}")
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd: int = _libc.syscall(nr, buf, pid, cpu, group_fd, flags | PERF_FLAG_FD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def ioctl(self, fd: int, request: int, arg: int) -> None:
        fcntl.ioctl(fd, request, arg)

    def read(self, fd: int, size: int) -> bytes:
        return os.read(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)


def perf_event_open(type_: int, config: int, pid: int, cpu: int, group_fd: int = -1, flags: int = 0) -> int:
    """Open one counter (used by ``doctor`` to probe the PMU); returns the fd or raises OSError."""
    return LinuxPerf().open(attr_bytes(Event(type_, config, "")), pid, cpu, group_fd, flags)


def parse_group_read(data: bytes, events: int) -> tuple[list[int], int, int]:
    """(values in group order, time_enabled, time_running) from a GROUP|TOTAL_TIME_*|ID read."""
    if len(data) < 24:
        raise ValueError(f"group read of {len(data)} bytes, expected at least 24")
    nr, enabled, running = struct.unpack_from("QQQ", data, 0)
    if nr != events or len(data) < 24 + 16 * nr:
        raise ValueError(f"group read has {nr} events in {len(data)} bytes, expected {events}")
    values = [struct.unpack_from("Q", data, 24 + 16 * i)[0] for i in range(nr)]
    return values, enabled, running


def scaled(value: int, enabled: int, running: int) -> float:
    """A count corrected for multiplexing: the group counted ``running`` of the ``enabled`` time. With no running
    time the count is taken as it is: a group that never ran counted nothing, and a cgroup event can report a count
    with both times still 0 (seen on Linux 6.18 for the CPU where the cgroup's only task ran all along: its times
    had not been brought up to date)."""
    if running <= 0:
        return float(value)
    return value * enabled / running if running < enabled else float(value)


class CgroupCounters:
    """``events`` (the first leads the group, the others follow it: only the leader is opened disabled) counted
    for one cgroup on each of ``cpus``: len(events) fds per CPU, all closed by :meth:`close`. An OSError from the
    constructor leaves nothing open."""

    def __init__(self, kernel: PerfKernel, cgroup_fd: int, cpus: Sequence[int], events: Sequence[Event]) -> None:
        self._kernel = kernel
        self._events = tuple(events)
        self._leaders: list[int] = []
        self._fds: list[int] = []
        try:
            for cpu in cpus:
                leader = kernel.open(attr_bytes(self._events[0], GROUP_READ_FORMAT), cgroup_fd, cpu, -1,
                                     PERF_FLAG_PID_CGROUP)
                self._fds.append(leader)
                self._leaders.append(leader)
                for event in self._events[1:]:
                    self._fds.append(kernel.open(attr_bytes(event, GROUP_READ_FORMAT, _EXCLUDE_HV), cgroup_fd, cpu,
                                                 leader, PERF_FLAG_PID_CGROUP))
        except OSError:
            self.close()
            raise

    @classmethod
    def open(cls, kernel: PerfKernel, cgroup_dir: str, cpus: Sequence[int],
             events: Sequence[Event]) -> CgroupCounters | None:
        """The counters of the cgroup whose directory is ``cgroup_dir``: perf_event_open takes the directory's fd
        as its pid (``PERF_FLAG_PID_CGROUP``), and that fd is closed again once the events are open (each keeps its
        own reference to the cgroup). None when the directory is gone (its container ended after it was listed);
        OSError from opening the directory or from perf_event_open."""
        try:
            dir_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            return cls(kernel, dir_fd, cpus, events)
        finally:
            os.close(dir_fd)

    @property
    def fds(self) -> int:
        return len(self._fds)

    def start(self) -> None:
        for leader in self._leaders:
            self._kernel.ioctl(leader, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP)
            self._kernel.ioctl(leader, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP)

    def stop_and_read(self) -> list[float]:
        """Per event, the scaled sum over CPUs since :meth:`start`."""
        totals = [0.0] * len(self._events)
        size = 24 + 16 * len(self._events)
        for leader in self._leaders:
            self._kernel.ioctl(leader, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP)
        for leader in self._leaders:
            values, enabled, running = parse_group_read(self._kernel.read(leader, size), len(self._events))
            for i, value in enumerate(values):
                totals[i] += scaled(value, enabled, running)
        return totals

    def close(self) -> None:
        for fd in reversed(self._fds):      # members before their leader
            try:
                self._kernel.close(fd)
            except OSError:
                pass
        self._fds, self._leaders = [], []
