"""perf_event_open(2) through ctypes (no perf binary). Issue 9 builds the CPI collector on this."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import struct

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_FLAG_PID_CGROUP = 1 << 2

_ATTR_SIZE = 128          # PERF_ATTR_SIZE_VER8; older kernels accept any size they know, newer zero-extend
_DISABLED = 1 << 0
_EXCLUDE_HV = 1 << 6
_NR = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def perf_event_open(type_: int, config: int, pid: int, cpu: int, group_fd: int = -1, flags: int = 0,
                    attr_flags: int = _DISABLED | _EXCLUDE_HV) -> int:
    """Open one counter; returns the fd or raises OSError with the kernel's errno."""
    nr = _NR.get(platform.machine())
    if nr is None:
        raise OSError(38, f"perf_event_open: unsupported architecture {platform.machine()}")
    attr = bytearray(_ATTR_SIZE)
    struct.pack_into("IIQ", attr, 0, type_, _ATTR_SIZE, config)
    struct.pack_into("Q", attr, 40, attr_flags)        # the flag bitfield follows sample_type/read_format
    buf = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
    fd = _libc.syscall(nr, buf, pid, cpu, group_fd, flags | PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd
