"""Core scheduling cookies via prctl(PR_SCHED_CORE) (Linux >= 5.14), and the files that switch the feature on.

Facts: upstream ``pkg/koordlet/util/system/core_sched.go`` and ``core_sched_linux.go``. ``prctl(PR_SCHED_CORE=62, op,
pid, scope, cookie_ptr)``: op GET=0, CREATE=1, SHARE_TO=2, SHARE_FROM=3; scope 0=thread, 1=thread group (TGID),
2=process group. GET and SHARE_FROM accept only the thread scope. Tasks with different cookies never run on the two SMT
siblings of one core at the same time; cookie 0 is "no cookie".

The kernel has no "set task X's cookie to task Y's" operation: a cookie travels through the *calling* thread
(SHARE_FROM copies Y's cookie onto the caller, SHARE_TO pushes the caller's cookie onto X). If the agent's own
thread carried a cookie it would be kept off every core that runs another group, and a later "clear" would
hand that cookie out instead of 0. So :meth:`CoreSchedOps.assign` and :meth:`CoreSchedOps.clear` run their
share operations in a fresh, short-lived OS thread (which starts with its creator's cookie, 0) and the caller's
thread never changes. Upstream does the same with a locked goroutine thread that is thrown away.

:class:`CoreSchedOps` holds those two compound operations on top of four primitives; :class:`CoreSchedKernel`
implements the primitives with the real syscall. Tests use a fake of the kernel (``doubles/fakecoresched.py``)
that implements the same primitives, so the compound operations under test are the real ones.
"""

from __future__ import annotations

import abc
import ctypes
import ctypes.util
import errno
import glob
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from koordlet.host.cgroup import Cgroups
from koordlet.host.fs import read_bytes, read_text
from koordlet.host.paths import HostPaths

PR_SCHED_CORE = 62
PR_SCHED_CORE_GET = 0
PR_SCHED_CORE_CREATE = 1
PR_SCHED_CORE_SHARE_TO = 2
PR_SCHED_CORE_SHARE_FROM = 3

SCOPE_THREAD = 0           # PIDTYPE_PID
SCOPE_THREAD_GROUP = 1     # PIDTYPE_TGID
SCOPE_PROCESS_GROUP = 2    # PIDTYPE_PGID
PIDTYPE_PID = SCOPE_THREAD  # kept for older callers

DEFAULT_COOKIE = 0

# sysctls and the debugfs file that switch the feature on (Anolis kernels; mainline has it compiled in)
SYSCTL_SCHED_CORE = "sys/kernel/sched_core"
SYSCTL_GROUP_IDENTITY = "sys/kernel/sched_group_identity_enabled"
SCHED_FEATURES = "kernel/debug/sched_features"          # under the sys root
FEATURE_CORE_SCHED = "CORE_SCHED"
FEATURE_NO_CORE_SCHED = "NO_CORE_SCHED"

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

_T = TypeVar("_T")


def _prctl(op: int, pid: int, scope: int, cookie: ctypes.c_uint64 | None = None) -> None:
    """One PR_SCHED_CORE call; OSError(errno) naming the op and pid on failure.

    Every argument is passed as an unsigned long: prctl is variadic, and a plain int would leave the upper
    half of the register undefined.
    """
    ptr = ctypes.c_ulong(ctypes.addressof(cookie)) if cookie is not None else ctypes.c_ulong(0)
    if _libc.prctl(ctypes.c_int(PR_SCHED_CORE), ctypes.c_ulong(op), ctypes.c_ulong(pid), ctypes.c_ulong(scope),
                   ptr) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)} (prctl PR_SCHED_CORE op={op} pid={pid} scope={scope})")


def get_cookie(pid: int) -> int:
    """The core-scheduling cookie of a task (0 = none); OSError with the kernel's errno otherwise.

    EINVAL: kernel built without CONFIG_SCHED_CORE; ENODEV: no SMT on this machine, so the kernel keeps
    core scheduling off.
    """
    cookie = ctypes.c_uint64(0)
    _prctl(PR_SCHED_CORE_GET, pid, SCOPE_THREAD, cookie)
    return cookie.value


def errno_name(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, "EIO")


class CoreSchedOps(abc.ABC):
    """The four kernel primitives (implemented by subclasses) and the compound operations built on them."""

    # --- primitives ----------------------------------------------------------------------------------

    @abc.abstractmethod
    def get(self, pid: int) -> int:
        """GET, thread scope (the only scope the kernel accepts): the cookie of one task; pid 0 = caller."""

    @abc.abstractmethod
    def create(self, pid: int, scope: int = SCOPE_THREAD_GROUP) -> None:
        """CREATE: a fresh cookie for the task (thread scope) or all its threads (thread-group scope)."""

    @abc.abstractmethod
    def share_to(self, pid: int, scope: int = SCOPE_THREAD_GROUP) -> None:
        """SHARE_TO: push the calling thread's cookie onto the target."""

    @abc.abstractmethod
    def share_from(self, pid: int) -> None:
        """SHARE_FROM, thread scope: copy the target's cookie onto the calling thread."""

    @abc.abstractmethod
    def supported(self, paths: HostPaths) -> tuple[bool, str]:
        """(supported, why) on this host."""

    # --- compound operations (never change the calling thread's cookie) ------------------------------

    def assign(self, source: int, targets: list[int]) -> dict[int, OSError]:
        """Give every target process (thread-group scope) the cookie of the ``source`` thread.

        Returns the failed targets with their error (ESRCH: the process exited, normal churn). Raises OSError
        when the source itself cannot be read (exited: the caller picks another source).
        """
        def work() -> dict[int, OSError]:
            self.share_from(source)
            return self._share_to_all(targets)
        return self._in_fresh_thread(work)

    def clear(self, pids: list[int]) -> dict[int, OSError]:
        """Reset every process (thread-group scope) to cookie 0; returns the failed ones with their error.

        The helper thread first checks that it really holds cookie 0 (it inherits its creator's): were the
        calling thread ever tagged, a clear would otherwise hand that cookie out instead of removing it.
        """
        def work() -> dict[int, OSError]:
            own = self.get(0)
            if own != DEFAULT_COOKIE:
                raise OSError(errno.EBUSY, f"helper thread holds cookie {own:#x}, refusing to clear")
            return self._share_to_all(pids)
        return self._in_fresh_thread(work)

    def _share_to_all(self, pids: list[int]) -> dict[int, OSError]:
        failed: dict[int, OSError] = {}
        for pid in pids:
            try:
                self.share_to(pid, SCOPE_THREAD_GROUP)
            except OSError as e:
                failed[pid] = e
        return failed

    def _in_fresh_thread(self, work: Callable[[], _T]) -> _T:
        """Run ``work`` in a new OS thread that ends right after; its result or exception comes back here."""
        box: dict[str, object] = {}

        def run() -> None:
            try:
                box["result"] = work()
            except Exception as e:  # handed back to the caller's thread, re-raised there
                box["error"] = e

        t = threading.Thread(target=run, name="koordlet-coresched", daemon=True)
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["result"]  # type: ignore[return-value]


class CoreSchedKernel(CoreSchedOps):
    """The real kernel interface (prctl)."""

    def get(self, pid: int) -> int:
        return get_cookie(pid)

    def create(self, pid: int, scope: int = SCOPE_THREAD_GROUP) -> None:
        _prctl(PR_SCHED_CORE_CREATE, pid, scope)

    def share_to(self, pid: int, scope: int = SCOPE_THREAD_GROUP) -> None:
        _prctl(PR_SCHED_CORE_SHARE_TO, pid, scope)

    def share_from(self, pid: int) -> None:
        _prctl(PR_SCHED_CORE_SHARE_FROM, pid, SCOPE_THREAD)

    def supported(self, paths: HostPaths) -> tuple[bool, str]:
        """Upstream's ``IsCoreSchedSupported``: (supported, why) -- see :func:`probe_support`."""
        return probe_support(paths, self._probe)

    @staticmethod
    def _probe() -> None:
        get_cookie(0)


# --------------------------------------------------------------------------------------------------
# detection and the switch files
# --------------------------------------------------------------------------------------------------

def is_anolis(paths: HostPaths) -> bool:
    """Upstream's Anolis test: ``cpu.bvt_warp_ns`` at the cpu cgroup root, or any first-level memory cgroup
    with ``memory.wmark_ratio`` (v1 layout, or the unified root on v2)."""
    root = paths.cgroup_root
    for bvt in (os.path.join(root, "cpu", "cpu.bvt_warp_ns"), os.path.join(root, "cpu.bvt_warp_ns")):
        if os.path.exists(bvt):
            return True
    return bool(glob.glob(os.path.join(glob.escape(root), "memory", "*", "memory.wmark_ratio"))
                or glob.glob(os.path.join(glob.escape(root), "*", "memory.wmark_ratio")))


def read_sched_features(paths: HostPaths) -> set[str] | None:
    """The words of ``/sys/kernel/debug/sched_features``; None when debugfs or the file is absent."""
    try:
        return set(read_text(paths.sys(SCHED_FEATURES)).split())
    except OSError:
        return None


def probe_support(paths: HostPaths, prctl_probe: Callable[[], None]) -> tuple[bool, str]:
    """(supported, reason), as upstream decides it.

    Not Anolis: supported when ``prctl(PR_SCHED_CORE, GET, 0, thread)`` succeeds (EINVAL: no CONFIG_SCHED_CORE;
    ENODEV: no SMT). Anolis: supported when the ``kernel.sched_core`` sysctl exists, or ``sched_features``
    lists CORE_SCHED / NO_CORE_SCHED.
    """
    if not is_anolis(paths):
        try:
            prctl_probe()
        except OSError as e:
            why = {errno.EINVAL: "kernel built without CONFIG_SCHED_CORE",
                   errno.ENODEV: "SMT not present or disabled (no sibling threads to isolate)",
                   errno.EPERM: "not permitted"}.get(e.errno or 0, os.strerror(e.errno or 0))
            return False, f"prctl(PR_SCHED_CORE, GET) failed with {errno_name(e)}: {why}"
        return True, "prctl(PR_SCHED_CORE) works"
    if os.path.exists(paths.proc(SYSCTL_SCHED_CORE)):
        return True, f"Anolis kernel: {paths.proc(SYSCTL_SCHED_CORE)} exists"
    features = read_sched_features(paths)
    if features is None:
        return False, f"Anolis kernel without {paths.proc(SYSCTL_SCHED_CORE)} and {paths.sys(SCHED_FEATURES)}"
    if features & {FEATURE_CORE_SCHED, FEATURE_NO_CORE_SCHED}:
        return True, f"Anolis kernel: {paths.sys(SCHED_FEATURES)} lists core scheduling"
    return False, f"Anolis kernel: neither kernel.sched_core nor {FEATURE_CORE_SCHED} in sched_features"


def read_procs(cgroups: Cgroups, rel: str) -> list[int] | None:
    """TGIDs in a cgroup's ``cgroup.procs`` (cpu hierarchy, as upstream), in file order; None when the cgroup
    is gone. Other read errors raise OSError; malformed lines are skipped."""
    try:
        data = read_bytes(cgroups.path("cpu", rel, "cgroup.procs"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    out = []
    for word in data.split():
        if word.isdigit():
            pid = int(word)
            if pid > 0:
                out.append(pid)
    return out
