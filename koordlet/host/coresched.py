"""Core scheduling cookies via prctl(PR_SCHED_CORE) (Linux ≥ 5.14). Issue 5 adds create/share."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

PR_SCHED_CORE = 62
PR_SCHED_CORE_GET = 0
PIDTYPE_PID = 0

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def get_cookie(pid: int) -> int:
    """The core-scheduling cookie of a task (0 = none); OSError with the kernel's errno otherwise.

    EINVAL: kernel built without CONFIG_SCHED_CORE; ENODEV: no SMT on this machine, so the kernel keeps
    core scheduling off.
    """
    cookie = ctypes.c_ulong(0)
    if _libc.prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET, pid, PIDTYPE_PID, ctypes.byref(cookie)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return cookie.value
