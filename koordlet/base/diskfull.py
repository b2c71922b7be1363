"""A full disk as one state per store, not a stream of errors.

The agent writes four things of its own to disk: the metric cache's history, the standalone report files, the
prediction checkpoints and (gate AuditEvents) upstream's audit log. When a filesystem has no room left each of them
keeps failing at its own pace (a flush every 10 s, a report every minute, checkpoints every training step, an audit
event per kernel write), and none of those failures is news after the first.
:class:`DiskFull` keeps, per store, whether its writes are failing for lack of space: the state is logged once when it
begins (WARNING, with what the agent does meanwhile) and once when it ends (INFO, with how long it lasted), and the
agent reads it for the ``koordlet_storage_full`` gauge and the body of ``/readyz``. Which errors mean "no space" is
decided here only (:func:`no_space`); any other error stays the writer's to log.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AUDIT", "CHECKPOINTS", "METRIC_CACHE", "REPORTS", "DiskFull", "free_bytes", "no_space"]

log = logging.getLogger(__name__)

#: The stores, as the gauge's ``store`` label names them.
METRIC_CACHE = "metriccache"
REPORTS = "reports"
CHECKPOINTS = "checkpoints"
AUDIT = "audit"

_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# sqlite's own "no space": SQLITE_FULL (any extended code), and SQLITE_IOERR_SHMSIZE, which is how a WAL database
# says it could not extend its -shm index file: on a local filesystem, a full one
_SQLITE_FULL = 13
_SQLITE_IOERR_SHMSIZE = 4874


def no_space(error: BaseException) -> bool:
    """Whether ``error`` means the filesystem (or the user's quota) has no room: ENOSPC or EDQUOT from the kernel,
    SQLITE_FULL or SQLITE_IOERR_SHMSIZE from sqlite."""
    if isinstance(error, OSError):
        return error.errno in _NO_SPACE_ERRNOS
    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        return code is not None and (code & 0xFF == _SQLITE_FULL or code == _SQLITE_IOERR_SHMSIZE)
    return False


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path`` (``statvfs``'s ``f_bavail``:
    the agent leaves root's reserve to the node), looked up at the nearest directory that exists; None when that
    cannot be read."""
    path = os.path.abspath(path)
    while True:
        try:
            st = os.statvfs(path)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent
            continue
        except OSError:
            return None
        return st.f_bavail * st.f_frsize


@dataclass
class _Store:
    path: str
    meanwhile: str                   # what the agent does while the store cannot be written (the WARNING says it)
    since: float | None = None       # when the state began (the tracker's clock); None: writable


class DiskFull:
    """Which stores cannot be written for lack of space. Thread-safe: the housekeeping thread writes the metric
    cache, the report loop the report files and the checkpoints, the strategies and the evictions the audit log,
    the HTTP server reads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._stores: dict[str, _Store] = {}

    def watch(self, store: str, path: str, meanwhile: str) -> None:
        """Declare a store written under ``path``; ``meanwhile``: what the agent does while it is full."""
        with self._lock:
            self._stores[store] = _Store(path, meanwhile)

    def failed(self, store: str, error: BaseException) -> bool:
        """A write of ``store`` failed with ``error``. True when for lack of space: the store is full (logged when
        that begins, silent while it lasts); False for any other error, which the caller logs as before."""
        if not no_space(error):
            return False
        self.begin(store, f"error={error}")
        return True

    def begin(self, store: str, reason: str) -> None:
        """``store`` cannot be written for lack of space (``reason``: ``key=value`` fields); logged once, when the
        state begins."""
        with self._lock:
            state = self._stores[store]
            if state.since is not None:
                return
            state.since = self._clock()
        log.warning("storage full store=%s path=%s %s; %s", store, state.path, reason, state.meanwhile)

    def wrote(self, store: str, detail: str = "") -> None:
        """``store`` was written again: the state ends (logged once, with how long it lasted and ``detail``:
        `` key=value`` fields the store adds)."""
        with self._lock:
            state = self._stores[store]
            if state.since is None:
                return
            lasted, state.since = self._clock() - state.since, None
        log.info("storage writable again store=%s path=%s after=%.0fs%s", store, state.path, lasted, detail)

    def is_full(self, store: str) -> bool:
        with self._lock:
            return self._stores[store].since is not None

    def states(self) -> dict[str, bool]:
        """Every declared store: whether it is full (the gauge's series)."""
        with self._lock:
            return {name: state.since is not None for name, state in self._stores.items()}

    def summary(self) -> str:
        """The full stores for ``/readyz`` and ``STATUS=``: ``storage full: metriccache (/var/lib/koordlet/...)``;
        empty when none is. No duration: systemd is sent STATUS= whenever it changes."""
        with self._lock:
            full = [f"{name} ({state.path})" for name, state in self._stores.items() if state.since is not None]
        return f"storage full: {', '.join(full)}" if full else ""
