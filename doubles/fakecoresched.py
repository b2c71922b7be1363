"""A fake of the kernel's core scheduling (``prctl(PR_SCHED_CORE)``), not of our code.

It implements the four primitives of :class:`koordlet.host.coresched.CoreSchedOps` with the kernel's semantics
(kernel/sched/core_sched.c ``sched_core_share_pid``), so the compound operations under test (``assign``,
``clear``) are the agent's real ones:

- every task (thread) has a cookie, 0 by default; a new thread inherits its creator's cookie;
- GET (thread scope only, else EINVAL) reads one task; pid 0 means the calling thread;
- CREATE gives a fresh non-zero cookie to the task, its whole thread group (TGID scope) or process group;
- SHARE_TO pushes the *calling thread's* cookie onto the task / thread group / process group;
- SHARE_FROM (thread scope only, else EINVAL) copies the task's cookie onto the *calling thread*;
- an unknown pid is ESRCH; a kernel without CONFIG_SCHED_CORE gives EINVAL, one without SMT ENODEV.

"Calling thread" is the real OS thread (``threading.get_native_id()``): the agent's threads are tracked by
native id, so a SHARE_FROM made on the main thread really taints the main thread here, and tests can see it.
A thread the fake has not seen yet starts with the cookie of the main thread (threads are created from it, or
from threads that hold its cookie); entries of threads that ended are dropped.

The managed processes are synthetic (pids above the kernel's pid_max, so they never collide with real threads
of this process): :meth:`spawn` a process with some threads, :meth:`exit` it to make its pid ESRCH.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
from dataclasses import dataclass

from koordlet.host import coresched as hc
from koordlet.host.paths import HostPaths

PID_BASE = 5_000_000          # above the largest pid_max (4194304)


@dataclass
class FakeTask:
    tid: int
    tgid: int
    pgid: int
    cookie: int = 0


@dataclass(frozen=True)
class Call:
    op: str                   # get | create | share_to | share_from
    pid: int
    scope: int
    caller: int               # native id of the calling thread


class FakeCoreSchedKernel(hc.CoreSchedOps):
    def __init__(self, *, sched_core: bool = True, smt: bool = True,
                 supported: tuple[bool, str] = (True, "fake kernel with core scheduling")) -> None:
        self.sched_core = sched_core
        self.smt = smt
        self._supported = supported
        self.tasks: dict[int, FakeTask] = {}
        self.own: dict[int, int] = {}          # native thread id of this process -> cookie
        self.calls: list[Call] = []
        self.errors: dict[int, int] = {}       # pid -> errno to fail ops that target it (EPERM...)
        self.error_ops: set[str] | None = None # which ops ``errors`` applies to (None: all)
        self._pids = itertools.count(PID_BASE)
        self._cookies = itertools.count(0x9E3779B1, 0x1F0)
        self._lock = threading.RLock()
        self.main_tid = threading.main_thread().native_id or os.getpid()
        self.own[self.main_tid] = 0

    # --- the world -----------------------------------------------------------------------------------

    def spawn(self, threads: int = 1, cookie: int = 0, pgid: int | None = None) -> int:
        """A process with ``threads`` threads (all holding ``cookie``); returns its TGID."""
        with self._lock:
            tgid = next(self._pids)
            self.tasks[tgid] = FakeTask(tgid, tgid, pgid or tgid, cookie)
            for _ in range(threads - 1):
                tid = next(self._pids)
                self.tasks[tid] = FakeTask(tid, tgid, pgid or tgid, cookie)
            return tgid

    def add_thread(self, tgid: int) -> int:
        """clone(CLONE_THREAD): the new thread inherits the leader's cookie."""
        with self._lock:
            leader = self.tasks[tgid]
            tid = next(self._pids)
            self.tasks[tid] = FakeTask(tid, tgid, leader.pgid, leader.cookie)
            return tid

    def exit(self, tgid: int) -> None:
        with self._lock:
            for tid in [t for t, task in self.tasks.items() if task.tgid == tgid]:
                del self.tasks[tid]

    def new_cookie(self) -> int:
        return next(self._cookies)

    def cookie_of(self, tid: int) -> int:
        """Test accessor (not a syscall, not recorded)."""
        return self.tasks[tid].cookie

    def process_cookies(self, tgid: int) -> set[int]:
        return {t.cookie for t in self.tasks.values() if t.tgid == tgid}

    def thread_cookie(self, native_id: int) -> int:
        """Cookie of one of this process's own threads (0 if never seen)."""
        return self.own.get(native_id, 0)

    def set_thread_cookie(self, native_id: int, cookie: int) -> None:
        self.own[native_id] = cookie

    def mutations(self) -> list[Call]:
        """Calls that can change a cookie (everything but GET)."""
        return [c for c in self.calls if c.op != "get"]

    def supported(self, paths: HostPaths) -> tuple[bool, str]:
        return self._supported

    # --- the syscall ---------------------------------------------------------------------------------

    def get(self, pid: int) -> int:
        return self.prctl("get", pid, hc.SCOPE_THREAD)

    def create(self, pid: int, scope: int = hc.SCOPE_THREAD_GROUP) -> None:
        self.prctl("create", pid, scope)

    def share_to(self, pid: int, scope: int = hc.SCOPE_THREAD_GROUP) -> None:
        self.prctl("share_to", pid, scope)

    def share_from(self, pid: int) -> None:
        self.prctl("share_from", pid, hc.SCOPE_THREAD)

    def prctl(self, op: str, pid: int, scope: int) -> int:
        """``prctl(PR_SCHED_CORE, op, pid, scope, ...)`` with any scope, as the kernel checks it; returns the
        cookie for GET, else 0."""
        with self._lock:
            self._enter(op, pid, scope)
            if op == "get":
                return self._resolve(pid, scope)[0][1]
            if op == "share_from":
                self._set(self._current()[0], self._resolve(pid, scope)[0][1])
                return 0
            cookie = next(self._cookies) if op == "create" else self._current()[1]
            for key, _ in self._resolve(pid, scope):
                self._set(key, cookie)
            return 0

    # --- internals -----------------------------------------------------------------------------------

    def _enter(self, op: str, pid: int, scope: int) -> None:
        self.calls.append(Call(op, pid, scope, threading.get_native_id()))
        if not self.sched_core:
            raise OSError(errno.EINVAL, "Invalid argument")
        if not self.smt:
            raise OSError(errno.ENODEV, "No such device")
        if scope not in (hc.SCOPE_THREAD, hc.SCOPE_THREAD_GROUP, hc.SCOPE_PROCESS_GROUP) or pid < 0:
            raise OSError(errno.EINVAL, "Invalid argument")
        if op not in ("get", "create", "share_to", "share_from"):
            raise OSError(errno.EINVAL, "Invalid argument")
        if op in ("get", "share_from") and scope != hc.SCOPE_THREAD:
            raise OSError(errno.EINVAL, "Invalid argument")
        if pid in self.errors and (self.error_ops is None or op in self.error_ops):
            raise OSError(self.errors[pid], os.strerror(self.errors[pid]))

    def _current(self) -> tuple[tuple[str, int], int]:
        alive = {t.native_id for t in threading.enumerate()}
        for tid in [t for t in self.own if t not in alive and t != self.main_tid]:
            del self.own[tid]
        me = threading.get_native_id()
        if me not in self.own:
            self.own[me] = self.own.get(self.main_tid, 0)
        return ("own", me), self.own[me]

    def _resolve(self, pid: int, scope: int) -> list[tuple[tuple[str, int], int]]:
        """The tasks an operation on (pid, scope) touches, as ((kind, tid), cookie)."""
        if pid == 0:
            cur, cookie = self._current()
            if scope == hc.SCOPE_THREAD:
                return [(cur, cookie)]
            pid = os.getpid()
        if pid in self.tasks:
            task = self.tasks[pid]
            if scope == hc.SCOPE_THREAD:
                return [(("task", pid), task.cookie)]
            match = (lambda t: t.tgid == task.tgid) if scope == hc.SCOPE_THREAD_GROUP else \
                (lambda t: t.pgid == task.pgid)
            return [(("task", t.tid), t.cookie) for t in self.tasks.values() if match(t)]
        self._current()                                # prune ended threads, register the caller
        if pid in self.own:
            if scope == hc.SCOPE_THREAD:
                return [(("own", pid), self.own[pid])]
            return [(("own", t), c) for t, c in self.own.items()]
        raise OSError(errno.ESRCH, "No such process")

    def _set(self, key: tuple[str, int], cookie: int) -> None:
        kind, tid = key
        if kind == "task":
            self.tasks[tid].cookie = cookie
        else:
            self.own[tid] = cookie
