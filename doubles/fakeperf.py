"""A fake perf_event kernel: the open / ioctl / read / close boundary of koordlet.host.perf, answering as Linux does.

Counts are configured per (cgroup directory, CPU, event name) with the group's time_enabled / time_running (less
running than enabled = multiplexed). The cgroup an open names is found from the directory fd the caller passes,
as the kernel does. Group semantics: a member must name an open leader on the same CPU; reads of a leader return
the GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING | ID layout; values count only while the group is enabled.
``max_fds`` makes open fail with EMFILE, ``missing_pmu`` with ENOENT; ``open_now`` is what is still open.
"""

from __future__ import annotations

import errno
import itertools
import os
import struct

from koordlet.host import perf


class FakePerfKernel:
    def __init__(self, counts=None, times=None, max_fds: int = 1 << 20, missing_pmu: bool = False) -> None:
        self.counts = dict(counts or {})          # (cgroup dir, cpu, event name) -> count over the window
        self.times = dict(times or {})            # (cgroup dir, cpu) -> (enabled, running); default (1, 1)
        self.max_fds, self.missing_pmu = max_fds, missing_pmu
        self._next = itertools.count(1000)
        self.fds: dict[int, dict] = {}
        self.opened = 0
        self.max_open = 0

    @property
    def open_now(self) -> int:
        return len(self.fds)

    def open(self, attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        type_, size, config = struct.unpack_from("IIQ", attr, 0)
        read_format, bits = struct.unpack_from("QQ", attr, 32)
        if self.missing_pmu and type_ == perf.PERF_TYPE_HARDWARE:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        if len(self.fds) >= self.max_fds:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        if not flags & perf.PERF_FLAG_PID_CGROUP or cpu < 0:
            raise OSError(errno.EINVAL, "cgroup events need PERF_FLAG_PID_CGROUP and a CPU")
        cgroup = os.readlink(f"/proc/self/fd/{pid}")          # EBADF if the caller closed it too early
        name = {(perf.PERF_TYPE_HARDWARE, perf.PERF_COUNT_HW_CPU_CYCLES): "cycles",
                (perf.PERF_TYPE_HARDWARE, perf.PERF_COUNT_HW_INSTRUCTIONS): "instructions"}.get((type_, config))
        if name is None or size != 128:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if group_fd != -1:
            leader = self.fds.get(group_fd)
            if leader is None or leader["cpu"] != cpu or leader["leader"] is not None:
                raise OSError(errno.EINVAL, "bad group leader")
        fd = next(self._next)
        self.fds[fd] = {"cgroup": cgroup, "cpu": cpu, "name": name, "leader": None if group_fd == -1 else group_fd,
                        "members": [], "enabled": not bits & 1, "counted": False, "read_format": read_format}
        if group_fd != -1:
            self.fds[group_fd]["members"].append(fd)
        self.opened += 1
        self.max_open = max(self.max_open, len(self.fds))
        return fd

    def ioctl(self, fd: int, request: int, arg: int) -> None:
        ev = self.fds[fd]
        group = [fd] + ev["members"] if arg & perf.PERF_IOC_FLAG_GROUP else [fd]
        for f in group:
            if request == perf.PERF_EVENT_IOC_ENABLE:
                self.fds[f]["counted"] = True
            elif request == perf.PERF_EVENT_IOC_RESET:
                self.fds[f]["counted"] = False
            elif request != perf.PERF_EVENT_IOC_DISABLE:
                raise OSError(errno.ENOTTY, "unknown ioctl")

    def read(self, fd: int, size: int) -> bytes:
        ev = self.fds[fd]
        if ev["read_format"] != perf.GROUP_READ_FORMAT or ev["leader"] is not None:
            raise OSError(errno.EINVAL, "expected a group leader read")
        group = [fd] + ev["members"]
        enabled, running = self.times.get((ev["cgroup"], ev["cpu"]), (1, 1)) if ev["counted"] else (0, 0)
        out = struct.pack("QQQ", len(group), enabled, running)
        for f in group:
            e = self.fds[f]
            value = self.counts.get((e["cgroup"], e["cpu"], e["name"]), 0) if e["counted"] else 0
            out += struct.pack("QQ", value, f)
        if len(out) > size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return out

    def close(self, fd: int) -> None:
        if fd not in self.fds:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        del self.fds[fd]
