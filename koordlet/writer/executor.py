"""The only writer of kernel files (cgroups, sysctls): cached, read-compare-write, ordered, audited.

Facts: upstream ``pkg/koordlet/resourceexecutor`` (``executor.go: ResourceUpdateExecutorImpl``, ``updater.go``).
Strategies and rules compute :class:`Update` s (desired values); the executor decides whether a write is needed and
in which order:

- **Cache.** A value written (or found already in place) is remembered with the time; the same value again is
  skipped without touching the kernel until ``force_refresh`` seconds have passed, then the file is read again
  (drift from another writer is repaired). A restart over a correct host reads every file once and writes none.
- **Read-compare-write.** Values are compared the way the kernel prints them: cpu lists as sets, ``max`` equal to
  ``9223372036854775807``/``-1``, ``cpu.max`` by its quota field (:mod:`koordlet.writer.resources`, with the table
  of v1 resource names and the file and value each is on the running hierarchy).
- **Leveled batches** (:meth:`Executor.update_leveled`), for files the kernel checks against the parent:
  v1 ``cpuset.cpus`` must stay a subset of the parent's, v1 ``cpu.cfs_quota_us`` at most the parent's. Top-down,
  a mergeable update first writes the union/larger of old and new (loosening never fails), then bottom-up the
  exact values (tightening a child before its parent never fails).
- **Bounded cache.** An entry is useful only while its file is still asked for: once per cycle the reconciler
  hands :meth:`Executor.prune` the live pod dirs, and entries of pod dirs that left that set and are gone from
  the tree are dropped (a pod that left the view but whose dir the kubelet has not removed yet keeps them until
  a later prune). Entries not verified for ``force_refresh`` seconds are dropped too, at most once per
  ``force_refresh``: such an entry would only make the next update read the file anyway, so dropping it
  changes no behaviour. Without this, pods that come and go without an NRI RemovePodSandbox (no NRI, a missed
  event) left every entry behind: 6,005 entries after 2,000 pods, none alive.
- **Errors** never escape: a missing file or directory, or a cgroup removed while we held its file open
  (ENODEV; see ``koordlet.host.fs.vanished``), is counted as ``missing`` (vanished container, feature the
  kernel lacks); EINVAL/EBUSY/EPERM... are counted per resource in Prometheus, logged once per file and error,
  and not cached, so the next cycle retries.
- **Audit.** Every real write is one log line and one event in a ring buffer served at ``/events``; with the
  ``AuditEvents`` gate it is also an event of upstream's audit log (:mod:`koordlet.ops.audit`, verbosity 3, the message
  upstream's ``update <path> to <value>``).
- **Timing.** Every write the kernel was asked for is timed into upstream's
  ``koordlet_resource_update_duration_milliseconds`` (type ``cgroup`` for files under the cgroup root, ``default``
  for the rest; status ``success`` / ``failed``); a vanished file is not counted, as upstream ignores those.

Upstream difference: upstream writes on cache expiry without reading; we read first, so a forced refresh over a
correct host is free of writes, and the audit trail shows only real changes.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from koordlet.base.logutil import LogOnce
from koordlet.host.cgroup import Cgroups, CgroupVersion, CgroupWrite, KubeQOS, Layout
from koordlet.host.fs import append_values, is_dir, read_value, remove_file, replace_file, vanished, write_value
from koordlet.ops.audit import AuditLog, event_of_owner
from koordlet.writer.resources import KEYED, RESOURCES, Merge, loosest_of, parse_limit, same_value

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics

log = logging.getLogger(__name__)

FORCE_REFRESH = 60.0       # --resource-force-update-seconds
AUDIT_EVENTS = 1024


@dataclass(frozen=True, slots=True)
class Update:
    """One desired value of one kernel file."""
    path: str                    # absolute file path
    value: str                   # as written (no trailing newline)
    owner: str                   # audit: "pod default/web", "qos besteffort", "node", "hostapp nginx"
    reason: str                  # audit: the strategy ("cpu-qos", "cpu-suppress", ...)
    resource: str = ""           # metric label: the v1 resource name ("cpu.cfs_quota_us"); default: file name
    merge: Merge = Merge.NONE
    cacheable: bool = True       # False: always read-compare (cfs-quota suppress, task lists)
    keyed: bool = False          # the file holds one line per key ("8:16 rbps=..."): compare our key's line only
    create: bool = False         # a plain config file we own (terway-qos): create it when missing

    @property
    def label(self) -> str:
        return self.resource or os.path.basename(self.path)


@dataclass
class Result:
    written: int = 0
    unchanged: int = 0           # cache hit or kernel already had the value
    missing: int = 0             # file or directory absent: not applicable here (counted, not logged)
    failed: int = 0

    def add(self, other: Result) -> None:
        self.written += other.written
        self.unchanged += other.unchanged
        self.missing += other.missing
        self.failed += other.failed


def _cache_key(u: Update) -> str:
    """One cache entry per file, or per device line of a keyed file (N devices in one file: N entries)."""
    return f"{u.path} {u.value.split(' ', 1)[0]}" if u.keyed else u.path


def _one_line(text: str) -> str:
    """Multi-line values (schemata, per-device tables) on one log line."""
    return text.strip().replace("\n", "\\n")


# --------------------------------------------------------------------------------------------------
# the executor
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AuditEvent:
    time: float                  # Unix seconds
    owner: str
    reason: str
    file: str
    old: str
    new: str

    def to_dict(self) -> dict[str, object]:
        return {"createdAt": self.time, "owner": self.owner, "reason": self.reason, "file": self.file,
                "old": self.old, "new": self.new}


@dataclass(slots=True)
class _Cached:
    value: str
    at: float
    pod: tuple[str, str] | None = None     # (pod dir relative to the hierarchy, its absolute path), see _pod_of


# most specific first: with cgroupfs the Guaranteed dir ("kubepods") is the parent of the other two
_QOS_ORDER = (KubeQOS.BURSTABLE, KubeQOS.BESTEFFORT, KubeQOS.GUARANTEED)


def _pod_of(layout: Layout, path: str) -> tuple[str, str] | None:
    """(pod dir relative to its hierarchy, absolute pod dir) of a file at or below a pod dir; None for anything
    else (QoS dirs, host applications, sysctls, resctrl). Found by the layout's own names, so a host root that
    happens to contain "kubepods" elsewhere does not matter: the component after the QoS dir must be a pod dir."""
    for qos in _QOS_ORDER:
        qos_dir = layout.qos_dir(qos)
        needle = f"/{qos_dir}/"
        i = path.find(needle)
        if i < 0:
            continue
        start = i + len(needle)
        end = path.find("/", start)
        if end < 0:
            continue                     # a file of the QoS dir itself
        name = path[start:end]
        if layout.pod_uid_of(qos, name) is not None:
            return f"{qos_dir}/{name}", path[:end]
    return None


@dataclass
class Executor:
    """The single writer; thread-safe (the reconciler and, later, the NRI hooks share one)."""

    cgroups: Cgroups
    metrics: AgentMetrics | None = None
    force_refresh: float = FORCE_REFRESH
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    audit_size: int = AUDIT_EVENTS
    audit_log: AuditLog | None = None      # upstream's audit log (gate AuditEvents)
    _cache: dict[str, _Cached] = field(default_factory=dict)
    _events: deque[AuditEvent] = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _bad: LogOnce = field(default_factory=lambda: LogOnce(log, logging.WARNING))
    total: Result = field(default_factory=Result)
    _live_pods: frozenset[str] | None = field(default=None, init=False)   # the set the last prune saw
    _swept: float | None = field(default=None, init=False)                # when prune last expired entries
    # absolute pod dir -> the (relative, absolute) pair every cache entry below that pod shares: one per pod, not
    # two strings per file; rebuilt from the entries left whenever prune sees the live pods change
    _pods: dict[str, tuple[str, str]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._events = deque(maxlen=self.audit_size)

    # --- building updates ---------------------------------------------------------------------------

    def cgroup(self, rel: str, resource: str, value: int | str, owner: str, reason: str, *,
               cacheable: bool = True) -> Update | None:
        """An update of a cgroup file named by its v1 resource name, translated for the running hierarchy.

        None when the hierarchy has no such file (a v1-only resource on v2).
        """
        spec = RESOURCES[resource]
        text = str(value)
        keyed = resource in KEYED
        if self.cgroups.version is CgroupVersion.V1:
            if resource.startswith("io."):
                return None
            return Update(self.cgroups.path(spec.subsystem, rel, resource), text, owner, reason, resource,
                          spec.merge, cacheable, keyed)
        if spec.v2_file is None:
            return None
        if spec.to_v2 is not None:
            text = spec.to_v2(text)
        return Update(self.cgroups.path(spec.subsystem, rel, spec.v2_file), text, owner, reason, resource,
                      spec.merge, cacheable, keyed)

    def writes(self, writes: Iterable[CgroupWrite], owner: str) -> list[Update | None]:
        """The updates of the rules' desired cgroup writes (see :meth:`cgroup`), for ``owner``."""
        return [self.cgroup(w.rel, w.resource, w.value, owner, w.reason) for w in writes]

    # --- applying ----------------------------------------------------------------------------------

    def update(self, updates: Iterable[Update | None]) -> Result:
        """Apply in the given order (no parent/child concerns)."""
        result = Result()
        with self._lock:
            now = self.clock()
            for u in updates:
                if u is not None:
                    self._apply(u, u.value, result, True, now)
            self.total.add(result)
        return result

    def update_leveled(self, levels: Sequence[Sequence[Update | None]]) -> Result:
        """Apply levels ordered top (parents) to bottom (children), keeping each parent no tighter than its
        children at every step (see the module docstring)."""
        result = Result()
        with self._lock:
            now = self.clock()
            pending: list[Update] = []
            last = len(levels) - 1
            for depth, level in enumerate(levels):
                for u in level:
                    if u is None:
                        continue
                    if u.merge is Merge.NONE:
                        self._apply(u, u.value, result, True, now)
                        continue
                    if self._fresh(u, u.value, now):
                        result.unchanged += 1
                        continue
                    current = self._current(u, result)
                    if current is None:
                        continue
                    if same_value(u.resource or u.path, current, u.value):
                        self._remember(u, u.value)
                        result.unchanged += 1
                        continue
                    if depth < last:          # leaves have no children to keep room for
                        try:
                            loosest = loosest_of(u.merge, current, u.value)
                        except ValueError:
                            loosest = u.value
                        if not same_value(u.resource or u.path, current, loosest):
                            self._write(u, loosest, current, result, final=False)
                    pending.append(u)
            for u in reversed(pending):
                self._apply(u, u.value, result, True, now)
            self.total.add(result)
        return result

    def append(self, path: str, values: Iterable[str], owner: str, reason: str) -> Result:
        """Add entries to a task list (resctrl ``tasks``, ``cgroup.procs``): one write() per entry on one O_APPEND
        fd, as the kernel takes one id per write. Never cached (ids are reused); an entry that fails (task gone:
        ESRCH) is counted, not logged; the file missing counts as missing."""
        result = Result()
        values = list(values)
        if not values:
            return result
        with self._lock:
            started = time.perf_counter()
            try:
                written, failed = append_values(path, values)
            except OSError as e:
                if vanished(e):
                    result.missing += 1
                else:
                    self._failed(Update(path, ",".join(values), owner, reason), ",".join(values), e, result)
                return result
            result.written += written
            result.failed += failed
            self._timed(path, not result.failed, started)
            if result.written:
                self._audit(AuditEvent(self.wall(), owner, reason, path, "", f"+{result.written} ids"))
                log.info("append file=%s ids=%d failed=%d owner=%s reason=%s", path, result.written, result.failed,
                         owner, reason)
            self.total.add(result)
        return result

    def remove(self, path: str, owner: str, reason: str) -> bool:
        """Delete a plain config file we own (a policy turned off); audited like a write. True if it existed."""
        with self._lock:
            self._cache.pop(path, None)
            try:
                if not remove_file(path):
                    return False
            except OSError as e:
                self._failed(Update(path, "", owner, reason), "<remove>", e, Result())
                return False
            self._audit(AuditEvent(self.wall(), owner, reason, path, "<file>", "<removed>"))
            log.info("remove file=%s owner=%s reason=%s", path, owner, reason)
            return True

    def record(self, owner: str, reason: str, target: str, old: str, new: str, *, message: str = "",
               verbose: int = 3) -> None:
        """Audit a change made through another kernel interface (netlink, prctl), so /events shows every change
        the agent makes, not only file writes."""
        with self._lock:
            self._audit(AuditEvent(self.wall(), owner, reason, target, old, new), message, verbose)

    def forget(self, prefix: str) -> None:
        """Drop cached values under a path prefix (a removed cgroup: a new one at the same path starts fresh)."""
        with self._lock:
            for path in [p for p in self._cache if p.startswith(prefix)]:
                del self._cache[path]

    def forget_cgroup(self, rel: str) -> None:
        """Drop cached values of a removed cgroup dir and everything below it, in every hierarchy."""
        needle = f"/{rel.strip('/')}/"
        with self._lock:
            for path in [p for p in self._cache if needle in p]:
                del self._cache[path]

    def prune(self, live_pod_dirs: Iterable[str]) -> int:
        """Drop cache entries nobody can use any more; returns how many. Called by the reconciler once per cycle
        with the pod dirs of its view (``PodMeta.cgroup_dir``); cheap when nothing changed.

        - Entries below a pod dir that is not in ``live_pod_dirs`` and no longer exists (checked once per dir and
          hierarchy) go when the live set has changed since the last prune: the pods that left are the ones whose
          entries may be dead. A dir still on disk (the kubelet removes it after the pod leaves the view; a pod the
          NRI hooks saw before the view did) keeps its entries: a later prune or the expiry drops them.
        - Every ``force_refresh`` seconds, entries older than ``force_refresh`` go (the next update of such a file
          reads it again whatever the cache says, so this changes nothing but memory).

        Dropping an entry can never make a write wrong, only cost one read of the file the next time it is asked
        for."""
        live = frozenset(live_pod_dirs)
        dropped = 0
        with self._lock:
            now = self.clock()
            if self._swept is None:
                self._swept = now
            elif now - self._swept >= self.force_refresh:
                self._swept = now
                old = [k for k, c in self._cache.items() if now - c.at >= self.force_refresh]
                for k in old:
                    del self._cache[k]
                dropped += len(old)
            if live != self._live_pods:
                self._live_pods = live
                gone: dict[str, bool] = {}            # absolute pod dir -> gone from the tree
                dead: list[str] = []
                for k, c in self._cache.items():
                    pod = c.pod
                    if pod is None or pod[0] in live:
                        continue
                    is_gone = gone.get(pod[1])
                    if is_gone is None:
                        is_gone = gone[pod[1]] = not is_dir(pod[1])
                    if is_gone:
                        dead.append(k)
                for k in dead:
                    del self._cache[k]
                dropped += len(dead)
                self._pods = {c.pod[1]: c.pod for c in self._cache.values() if c.pod is not None}
        if dropped:
            log.debug("executor cache pruned entries=%d left=%d", dropped, len(self._cache))
        return dropped

    def cache_size(self) -> int:
        """Entries in the write cache (one per file, or per device line of a keyed file)."""
        return len(self._cache)

    def events(self, limit: int = AUDIT_EVENTS) -> list[dict[str, object]]:
        """The newest audit events, oldest first."""
        with self._lock:
            return [e.to_dict() for e in list(self._events)[-limit:]]

    # --- internals ----------------------------------------------------------------------------------

    def _audit(self, event: AuditEvent, message: str = "", verbose: int = 3) -> None:
        """The ring buffer, and upstream's audit log when there is one (a kernel write at upstream's verbosity 3;
        ``record`` callers pass their own message and verbosity: evictions are 0). Called under the lock."""
        self._events.append(event)
        if self.audit_log is not None:
            text = message or f"update {event.file} to {event.new}"
            self.audit_log.log(verbose, event_of_owner(event.time, event.owner, event.reason, text))

    def _apply(self, u: Update, value: str, result: Result, final: bool, now: float) -> None:
        if self._fresh(u, value, now):
            result.unchanged += 1
            return
        current = self._current(u, result)
        if current is None:
            return
        if same_value(u.resource or u.path, current, value):
            self._remember(u, value)
            result.unchanged += 1
            return
        self._write(u, value, current, result, final)

    def _fresh(self, u: Update, value: str, now: float) -> bool:
        """The cache says this exact value was verified in place less than force_refresh before ``now`` (the clock
        read once per batch: a batch asks this for every file it names, ~2,000 a second at 500 containers)."""
        if not u.cacheable:
            return False
        cached = self._cache.get(_cache_key(u) if u.keyed else u.path)
        return cached is not None and cached.value == value and now - cached.at < self.force_refresh

    def _current(self, u: Update, result: Result) -> str | None:
        try:
            return read_value(u.path)
        except OSError as e:
            if u.create and isinstance(e, FileNotFoundError):
                return ""                            # a file of ours that does not exist yet
            if vanished(e):
                self._missing(u, result)
            else:
                self._failed(u, u.value, e, result)
            return None

    def _write(self, u: Update, value: str, old: str, result: Result, final: bool) -> None:
        memsw = self._memsw(u)
        if memsw is None:
            self._write_file(u, value, old, result, final)
            return
        # v1 keeps memory.limit_in_bytes <= memory.memsw.limit_in_bytes, and runc sets both to the same value (no
        # swap): a limit raised past memsw is refused (EINVAL). So memsw goes first when it is in the way, and it
        # follows a lowered limit when it was equal to the old one (the container keeps having no swap).
        path, current = memsw
        new_n, old_n, memsw_n = parse_limit(value), parse_limit(old), parse_limit(current)
        inf = float("inf")
        if (inf if new_n is None else new_n) > (inf if memsw_n is None else memsw_n):
            self._write_file(replace(u, path=path, resource="memory.memsw.limit_in_bytes", cacheable=False),
                             value, current, result, final=True)
            self._write_file(u, value, old, result, final)
            return
        self._write_file(u, value, old, result, final)
        if memsw_n is not None and memsw_n == old_n and new_n is not None and new_n < memsw_n:
            self._write_file(replace(u, path=path, resource="memory.memsw.limit_in_bytes", cacheable=False),
                             value, current, result, final=True)

    def _memsw(self, u: Update) -> tuple[str, str] | None:
        """(path, value) of the memsw limit beside a v1 memory limit being written; None when there is none (not
        a memory limit, v2, or no swap accounting in this kernel)."""
        if u.resource != "memory.limit_in_bytes" or self.cgroups.version is not CgroupVersion.V1:
            return None
        path = os.path.join(os.path.dirname(u.path), "memory.memsw.limit_in_bytes")
        try:
            current = read_value(path)
            parse_limit(current)
        except (OSError, ValueError):
            return None
        return path, current

    def _write_file(self, u: Update, value: str, old: str, result: Result, final: bool) -> None:
        started = time.perf_counter()
        try:
            if u.create:
                replace_file(u.path, value)
            else:
                write_value(u.path, value)
        except OSError as e:
            if vanished(e):                          # ENODEV: the cgroup was removed between our read and write
                self._missing(u, result)
            else:
                self._timed(u.path, False, started)
                self._failed(u, value, e, result)
            return
        self._timed(u.path, True, started)
        result.written += 1
        self._count("written", u)
        if final:
            self._remember(u, value)
        else:
            self._cache.pop(_cache_key(u), None)
        if self._bad.forget(u.path):
            log.info("write recovered file=%s", u.path)
        self._audit(AuditEvent(self.wall(), u.owner, u.reason, u.path, old, value))
        log.info("write file=%s old=%s new=%s owner=%s reason=%s%s", u.path, _one_line(old), _one_line(value),
                 u.owner, u.reason,
                 "" if final else " step=loosen-parent")

    def _missing(self, u: Update, result: Result) -> None:
        """The file or its cgroup is gone (or never existed here): counted, not logged, not cached."""
        self._cache.pop(_cache_key(u), None)
        result.missing += 1
        self._count("missing", u)

    def _failed(self, u: Update, value: str, e: OSError, result: Result) -> None:
        self._cache.pop(_cache_key(u), None)
        result.failed += 1
        name = errno.errorcode.get(e.errno or 0, "EIO")
        self._count(f"error_{name}", u)
        self._bad(u.path, "write failed file=%s value=%s owner=%s reason=%s error=%s; retrying next cycle",
                  u.path, value, u.owner, u.reason, e.strerror or e)

    def _remember(self, u: Update, value: str) -> None:
        key = _cache_key(u)
        old = self._cache.get(key)
        if old is not None:                  # the common case (a refresh): no path parsing
            old.value, old.at = value, self.clock()
        else:
            pod = _pod_of(self.cgroups.layout, u.path)
            if pod is not None:
                pod = self._pods.setdefault(pod[1], pod)
            self._cache[key] = _Cached(value, self.clock(), pod)

    def _timed(self, path: str, ok: bool, started: float) -> None:
        if self.metrics is not None:
            root = self.cgroups.root.rstrip("/") + "/"
            self.metrics.resource_updated(path.startswith(root), ok, time.perf_counter() - started)

    def _count(self, outcome: str, u: Update) -> None:
        if self.metrics is not None:
            self.metrics.executor_updates.labels(self.metrics.node, u.label, outcome).inc()
