"""Core scheduling: keep every process of a cookie group in that group's cookie (upstream
``pkg/koordlet/runtimehooks/hooks/coresched/core_sched.go: Plugin.SetContainerCookie``, ``helper.go``).

Who is in which group is decided by :mod:`koordlet.rules.core_sched`; this strategy makes the kernel agree.
A pod's *units* are its container cgroups: the running containers and the sandbox (every other container-looking
dir under the pod, normally just the pause container). Their ``cgroup.procs`` (TGIDs) are read each cycle.

State, as upstream keeps it (``cookieCache`` / ``groupCache``, go-cache entries with a 300 s expiry refreshed on
every use): group ID -> (cookie, cached PIDs), and pod/unit -> group. With them the steady state costs no
syscall at all: a unit whose PIDs are all cached in its group is left alone. Only a PID not seen before costs
prctl calls:

- **assign**: the group has a cookie: GET the new PIDs, then copy the cookie from the first cached sibling that
  still holds it (SHARE_FROM in a throw-away thread, SHARE_TO each new PID's thread group);
- **create**: the group has no live sibling: CREATE on the first PID (thread-group scope), GET it, assign the
  rest from it;
- **clear**: the pod lost core sched (policy ``none``, class disabled, turned SYSTEM): every PID with a cookie is
  reset to 0 (SHARE_TO from a fresh thread, which holds cookie 0).

The cache is seeded once, on the first cycle with pods, from the cookies the processes already hold, so an agent
restart neither re-creates cookies nor forgets to clear ones it set earlier. Pods are handled oldest first; a
group found with several cookies keeps the first one and the others are moved onto it by the normal assign
path (their PIDs are not in the cache). Threads and children created later inherit the cookie in the kernel,
so only processes that enter a container from outside (``exec``) can be missed, and the next cycle fixes them.

Before any cookie is set, the kernel feature is switched on (Anolis kernels; mainline has it compiled in):
``kernel.sched_group_identity_enabled=0`` when that sysctl exists (group identity and core scheduling exclude
each other), then ``kernel.sched_core=1`` when it exists, else ``CORE_SCHED`` into ``sched_features``.

Differences from upstream, each for a reason:

- Seeding does not let two groups share one cookie: upstream caches a pod under its current group with whatever
  cookie it holds, so a pod whose group label changed while the agent was down would pull its new group onto
  the old group's cookie (an isolation leak). Here a cookie already owned by another group is not adopted; the
  pod is moved by the assign/create path. For the same reason a group without a cache entry adopts its
  processes' cookie only when they all hold one cookie that no other group owns, else it creates one.
- SYSTEM pods are not seeded (cookies set by someone else on a SYSTEM pod are not ours to clear), but a pod we
  gave a cookie that then became SYSTEM is cleared. Upstream never looks at SYSTEM pods again.
- Every container dir under the pod is a unit; upstream finds the sandbox only when exactly one unknown dir
  exists, and skips it otherwise.
- Cached PIDs are pruned each cycle to the PIDs actually seen, so the cache does not hold exited processes until
  they happen to be tried as a sibling.
- Failed clears are retried next cycle (upstream forgets the container). ESRCH (the process exited) is normal
  churn: not logged above debug, not counted as a failure.
- The ``core_sched_cookie_manage_status`` counter counts operations that changed something (created, assigned,
  cleared) and failures; upstream also counts each resync of an unchanged container as a success.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, host_probe
from koordlet.host import coresched as hc
from koordlet.host import probes
from koordlet.host.paths import HostPaths
from koordlet.host.sysctl import has_sysctl
from koordlet.rules.core_sched import core_sched_rule, pod_group
from koordlet.writer.executor import Update

if TYPE_CHECKING:
    from koordlet.host.cgroup import Cgroups
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.nodestate import NodeView
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

REASON = "core-sched"
CACHE_EXPIRY = 300.0       # upstream defaultCacheExpiration


@dataclass
class _Group:
    cookie: int
    pids: set[int]
    expires: float


@dataclass(frozen=True)
class _Unit:
    name: str                 # dir name, unique within the pod
    rel: str                  # relative cgroup dir
    container: str            # container name; "" for the sandbox
    cid: str


@dataclass
class _Member:
    """A unit we manage: its group (None: seeded from a pod that no longer wants a cookie) and cookie."""
    group: str | None
    unit: _Unit
    cookie: int
    expires: float
    gauge: tuple[str, ...] | None = None


@dataclass
class _Cycle:
    now: float
    seen: set[int] = field(default_factory=set)


class CoreSched:
    """Strategy ``core-sched``: cookies per group for the pods' processes (see the module docstring)."""

    name = "core-sched"

    def __init__(self, kernel: hc.CoreSchedOps, paths: HostPaths, metrics: AgentMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kernel = kernel
        self.paths = paths
        self.metrics = metrics
        self.clock = clock
        self.supported, self.reason = kernel.supported(paths)
        if self.supported:
            log.info("core scheduling supported: %s", self.reason)
        else:
            log.info("core scheduling unsupported, strategy idle: %s", self.reason)
        self._groups: dict[str, _Group] = {}
        self._members: dict[str, dict[str, _Member]] = {}      # pod uid -> unit name -> member
        self._seeded = False
        self._knobs: tuple[bool, bool, bool] | None = None     # group identity sysctl, sched_core, sched_features
        self._bad = LogOnce(log)
        self._bad_labels = LogOnce(log)

    # --- the cycle ----------------------------------------------------------------------------------

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        if not self.supported:
            return
        cycle = _Cycle(self.clock())
        self._expire(cycle.now)
        rule = core_sched_rule(view.slo)
        decisions: list[tuple[PodMeta, str | None]] = []
        bad = []
        for meta in sorted(view.pods, key=lambda m: (m.pod.created, m.pod.uid)):
            group, error = pod_group(rule, meta.pod)
            if error is not None:
                bad.append(meta.pod.uid)
                self._bad_labels(meta.pod.uid, "core sched pod=%s problem=%s", meta.pod.key, error)
            decisions.append((meta, group))
        self._bad_labels.keep_only(bad)

        if rule.enabled and not self._enable_kernel(executor):
            return
        cgroups = executor.cgroups
        if not self._seeded:
            self._seed(cgroups, decisions, cycle)
        for meta, group in decisions:
            if group is None:
                self._disable_pod(cgroups, meta)
            else:
                self._enable_pod(cgroups, meta, group, cycle)
        for gid in list(self._groups):
            entry = self._groups[gid]
            entry.pids &= cycle.seen
            if not entry.pids:
                del self._groups[gid]

    def cookies(self) -> dict[str, int]:
        """Group ID -> cookie, as cached (for /debug and tests)."""
        return {gid: g.cookie for gid, g in self._groups.items()}

    # --- kernel switch ------------------------------------------------------------------------------

    def _enable_kernel(self, executor: Executor) -> bool:
        """Switch the feature on before the first cookie; False (logged once) when the kernel refuses."""
        ok, why = self._switch_on(executor)
        if ok:
            if self._bad.forget("kernel"):
                log.info("core sched kernel switch recovered")
            return True
        self._bad("kernel", "core sched cannot be switched on, no cookies set: %s", why)
        return False

    def _switch_on(self, executor: Executor) -> tuple[bool, str]:
        if self._knobs is None:        # which switch files this kernel has does not change while it runs
            features = hc.read_sched_features(self.paths)
            self._knobs = (has_sysctl(self.paths, hc.SYSCTL_GROUP_IDENTITY.removeprefix("sys/")),
                           has_sysctl(self.paths, hc.SYSCTL_SCHED_CORE.removeprefix("sys/")),
                           features is not None and bool(features & {hc.FEATURE_CORE_SCHED,
                                                                     hc.FEATURE_NO_CORE_SCHED}))
        has_gi, has_sched_core, has_feature = self._knobs
        if has_gi:
            gi = self.paths.proc(hc.SYSCTL_GROUP_IDENTITY)
            r = executor.update([Update(gi, "0", "node", REASON, "kernel.sched_group_identity_enabled")])
            if r.failed or r.missing:
                return False, f"cannot disable group identity ({gi})"
        if has_sched_core:
            r = executor.update([Update(self.paths.proc(hc.SYSCTL_SCHED_CORE), "1", "node", REASON,
                                        "kernel.sched_core")])
            if not (r.failed or r.missing):
                return True, ""
        if has_feature:
            path = self.paths.sys(hc.SCHED_FEATURES)
            features = hc.read_sched_features(self.paths) or set()
            if hc.FEATURE_CORE_SCHED in features:
                return True, ""
            # not cacheable: the file lists every feature, so it never reads back as the value written
            r = executor.update([Update(path, hc.FEATURE_CORE_SCHED, "node", REASON, "sched_features",
                                        cacheable=False)])
            return (not (r.failed or r.missing)), f"writing {hc.FEATURE_CORE_SCHED} to {path} failed"
        if has_sched_core:
            return False, f"writing 1 to {self.paths.proc(hc.SYSCTL_SCHED_CORE)} failed"
        return True, ""       # mainline: compiled in, nothing to switch

    # --- seeding -------------------------------------------------------------------------------------

    def _seed(self, cgroups: Cgroups, decisions: list[tuple[PodMeta, str | None]], cycle: _Cycle) -> None:
        synced = False
        containers = 0
        for meta, group in decisions:
            if meta.pod.raw_qos_class == wire.QOS_SYSTEM or meta.pod.terminating:
                continue
            for unit in self._units(cgroups, meta):
                pids = self._procs(cgroups, meta, unit)
                if not pids:
                    continue
                synced = True
                cookie, holders = self._first_cookie(pids)
                if cookie == hc.DEFAULT_COOKIE:
                    continue
                if group is not None:
                    entry = self._groups.get(group)
                    if entry is not None and entry.cookie != cookie:
                        continue          # a second cookie in the group: moved by the assign path
                    if entry is None and self._owner(cookie) is not None:
                        continue          # another group's cookie: never shared across groups
                    if entry is None:
                        self._groups[group] = _Group(cookie, set(holders), cycle.now + CACHE_EXPIRY)
                    else:
                        entry.pids.update(holders)
                        entry.expires = cycle.now + CACHE_EXPIRY
                self._set_member(meta, unit, group, cookie, cycle.now, holders)
                containers += 1
        self._seeded = synced
        if synced:
            log.info("core sched cache seeded groups=%d containers_with_cookie=%d", len(self._groups), containers)

    def _first_cookie(self, pids: list[int]) -> tuple[int, list[int]]:
        """The first non-zero cookie among the PIDs and the PIDs holding it (0, [] when none)."""
        first, holders = hc.DEFAULT_COOKIE, []
        for pid in pids:
            cookie = self._get(pid)
            if cookie is None or cookie == hc.DEFAULT_COOKIE:
                continue
            if first == hc.DEFAULT_COOKIE:
                first = cookie
            if cookie == first:
                holders.append(pid)
        return first, holders

    # --- enabled pods --------------------------------------------------------------------------------

    def _enable_pod(self, cgroups: Cgroups, meta: PodMeta, group: str, cycle: _Cycle) -> None:
        units = self._units(cgroups, meta)
        members = self._members.get(meta.pod.uid)
        if members:
            names = {u.name for u in units}
            for name in [n for n in members if n not in names]:     # container gone (restarted: new dir)
                self._drop_member(meta.pod.uid, name)
        for unit in units:
            pids = self._procs(cgroups, meta, unit)
            if not pids:
                continue
            cycle.seen.update(pids)
            self._enable_unit(meta, unit, group, pids, cycle.now)

    def _enable_unit(self, meta: PodMeta, unit: _Unit, group: str, pids: list[int], now: float) -> None:
        member = self._members.get(meta.pod.uid, {}).get(unit.name)
        entry = self._groups.get(group)
        if entry is not None:
            if all(p in entry.pids for p in pids):
                entry.expires = now + CACHE_EXPIRY
                if member is None or member.group != group or member.cookie != entry.cookie:
                    self._set_member(meta, unit, group, entry.cookie, now, pids)
                else:
                    member.expires = now + CACHE_EXPIRY
                return
            done = self._assign(meta, unit, group, entry, pids)
            if done is not None:
                holders, changed = done
                if holders:
                    entry.pids.update(holders)
                    entry.expires = now + CACHE_EXPIRY
                    self._note_join(meta, unit, group, entry.cookie, member, holders, changed, now)
                return
            del self._groups[group]          # no live sibling holds the cookie any more: start a new one
        self._add(meta, unit, group, pids, member, now)

    def _assign(self, meta: PodMeta, unit: _Unit, group: str, entry: _Group,
                pids: list[int]) -> tuple[list[int], int] | None:
        """(PIDs now holding the group's cookie, how many were changed); ([], 0) when nothing could be done
        this cycle; None when the group has no live sibling left to copy from (the caller creates a cookie)."""
        todo, already, gone = [], [], 0
        for pid in pids:
            cookie = self._get(pid)
            if cookie is None:
                gone += 1
            elif cookie == entry.cookie:
                already.append(pid)
            else:
                todo.append(pid)
        if gone == len(pids):
            return [], 0                      # all exited (container restarting)
        if not todo:
            return already, 0
        source = None
        for sibling in sorted(entry.pids):
            if self._get(sibling) == entry.cookie:
                source = sibling
                break
            entry.pids.discard(sibling)
        if source is None:
            return None
        try:
            failed = self.kernel.assign(source, todo)
        except OSError as e:
            self._failed(meta, unit, group, "assign", e)
            return [], 0
        self._report(meta, unit, group, "assign", failed)
        moved = [p for p in todo if p not in failed]
        return already + moved, len(moved)

    def _add(self, meta: PodMeta, unit: _Unit, group: str, pids: list[int], member: _Member | None,
             now: float) -> None:
        """The group has no cookie: adopt the unit's own cookie if it is unowned and uniform, else create one."""
        cookies = {pid: self._get(pid) for pid in pids}
        live = [p for p, c in cookies.items() if c is not None]
        if not live:
            return
        held = {c for c in cookies.values() if c is not None}
        if len(held) == 1:
            (cookie,) = held
            if cookie != hc.DEFAULT_COOKIE and self._owner(cookie) is None:
                self._groups[group] = _Group(cookie, set(live), now + CACHE_EXPIRY)
                log.info("core sched cookie adopted group=%r cookie=%#x pod=%s container=%s pids=%d", group,
                         cookie, meta.pod.key, unit.container or "<sandbox>", len(live))
                self._set_member(meta, unit, group, cookie, now, live)
                return
        for pid in live:
            try:
                self.kernel.create(pid, hc.SCOPE_THREAD_GROUP)
                cookie = self.kernel.get(pid)
            except OSError as e:
                if e.errno == errno.ESRCH:
                    continue
                self._failed(meta, unit, group, "create", e)
                return
            break
        else:
            return                            # every process exited meanwhile
        rest = live[live.index(pid) + 1:]
        failed: dict[int, OSError] = {}
        if rest:
            try:
                failed = self.kernel.assign(pid, rest)
            except OSError as e:
                failed = dict.fromkeys(rest, e)
            self._report(meta, unit, group, "assign", failed)
        holders = {pid} | {p for p in rest if p not in failed}
        self._groups[group] = _Group(cookie, holders, now + CACHE_EXPIRY)
        self._count(group, True)
        old = member.group if member is not None else None
        self._set_member(meta, unit, group, cookie, now, live)
        log.info("core sched cookie created group=%r cookie=%#x pod=%s container=%s pids=%d%s", group, cookie,
                 meta.pod.key, unit.container or "<sandbox>", len(holders),
                 f" from_group={old!r}" if member is not None and old != group else "")

    def _note_join(self, meta: PodMeta, unit: _Unit, group: str, cookie: int, member: _Member | None,
                   pids: list[int], changed: int, now: float) -> None:
        """Record a unit holding the group's cookie; one log line when processes were moved into it."""
        if changed and (member is None or member.group != group):
            self._count(group, True)
            log.info("core sched cookie assigned group=%r cookie=%#x pod=%s container=%s pids=%d%s", group,
                     cookie, meta.pod.key, unit.container or "<sandbox>", changed,
                     f" from_group={member.group!r}" if member is not None else "")
        elif changed:
            self._count(group, True)
            log.debug("core sched new processes group=%r pod=%s container=%s pids=%d", group, meta.pod.key,
                      unit.container or "<sandbox>", changed)
        self._set_member(meta, unit, group, cookie, now, pids)

    # --- pods without core sched ---------------------------------------------------------------------

    def _disable_pod(self, cgroups: Cgroups, meta: PodMeta) -> None:
        """Clear the cookies of units we manage; a pod we never touched costs nothing."""
        members = self._members.get(meta.pod.uid)
        if not members:
            return
        for name, member in list(members.items()):
            pids = self._procs(cgroups, meta, member.unit)
            if pids:
                todo = [p for p in pids if (self._get(p) or hc.DEFAULT_COOKIE) != hc.DEFAULT_COOKIE]
                if todo:
                    try:
                        failed = self.kernel.clear(todo)
                    except OSError as e:
                        self._failed(meta, member.unit, member.group, "clear", e)
                        continue
                    if self._report(meta, member.unit, member.group, "clear", failed):
                        continue              # keep the member: retried next cycle
                    self._count(member.group, True)
                    log.info("core sched cookie cleared group=%r pod=%s container=%s pids=%d", member.group,
                             meta.pod.key, member.unit.container or "<sandbox>", len(todo))
                entry = self._groups.get(member.group) if member.group is not None else None
                if entry is not None:
                    entry.pids.difference_update(pids)
            self._drop_member(meta.pod.uid, name)

    # --- helpers -------------------------------------------------------------------------------------

    def _units(self, cgroups: Cgroups, meta: PodMeta) -> list[_Unit]:
        """Sandbox (every container dir that is not a known container) first, then the containers."""
        known = {rel: c for c, rel in meta.containers}
        units = sorted((_Unit(os.path.basename(rel), rel, "", cid)
                        for _, cid, rel in cgroups.list_containers(meta.cgroup_dir) if rel not in known),
                       key=lambda u: u.name)
        units.extend(_Unit(os.path.basename(rel), rel, c.name, c.id) for c, rel in meta.containers)
        return units

    def _procs(self, cgroups: Cgroups, meta: PodMeta, unit: _Unit) -> list[int] | None:
        try:
            pids = hc.read_procs(cgroups, unit.rel)
        except OSError as e:
            self._bad(f"procs:{unit.rel}", "core sched cannot read cgroup.procs pod=%s dir=%s error=%s",
                      meta.pod.key, unit.rel, e.strerror or e)
            return None
        self._bad.forget(f"procs:{unit.rel}")
        return pids

    def _get(self, pid: int) -> int | None:
        """The cookie of a process, or None when it cannot be read (exited: ESRCH)."""
        try:
            return self.kernel.get(pid)
        except OSError as e:
            if e.errno != errno.ESRCH:
                self._bad(f"get:{hc.errno_name(e)}", "core sched GET failed pid=%d error=%s (%s); skipped",
                          pid, hc.errno_name(e), e.strerror)
            return None

    def _owner(self, cookie: int) -> str | None:
        for gid, entry in self._groups.items():
            if entry.cookie == cookie:
                return gid
        return None

    def _report(self, meta: PodMeta, unit: _Unit, group: str | None, op: str,
                failed: dict[int, OSError]) -> bool:
        """Log/count failures other than ESRCH (exited processes); True when there were any."""
        real = {p: e for p, e in failed.items() if e.errno != errno.ESRCH}
        if len(real) < len(failed):
            log.debug("core sched %s skipped exited pids=%d pod=%s", op, len(failed) - len(real), meta.pod.key)
        if not real:
            return False
        pid, e = next(iter(real.items()))
        self._failed(meta, unit, group, op, e, f" pid={pid} failed_pids={len(real)}")
        return True

    def _failed(self, meta: PodMeta, unit: _Unit, group: str | None, op: str, e: OSError,
                extra: str = "") -> None:
        if e.errno == errno.ESRCH:
            return
        self._count(group, False)
        self._bad(f"{op}:{meta.pod.uid}/{unit.name}", "core sched %s failed group=%r pod=%s container=%s "
                  "error=%s%s; retrying next cycle", op, group, meta.pod.key, unit.container or "<sandbox>",
                  hc.errno_name(e), extra)

    def _count(self, group: str | None, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.core_sched_managed(group or "", ok)

    def _set_member(self, meta: PodMeta, unit: _Unit, group: str | None, cookie: int, now: float,
                    pids: list[int]) -> None:
        """Record the unit's group and cookie; a unit that moved leaves its PIDs behind in no other group."""
        members = self._members.setdefault(meta.pod.uid, {})
        old = members.get(unit.name)
        if old is not None and old.group is not None and old.group != group:
            entry = self._groups.get(old.group)
            if entry is not None:
                entry.pids.difference_update(pids)
                if not entry.pids:
                    del self._groups[old.group]
        gauge = None
        if self.metrics is not None and group is not None:
            gauge = (self.metrics.node, meta.pod.name, meta.pod.namespace, meta.pod.uid, unit.container, unit.cid,
                     group, str(cookie))
            if old is None or old.gauge != gauge:
                self.metrics.container_core_sched_cookie.labels(*gauge).set(1)
        if old is not None and old.gauge is not None and old.gauge != gauge:
            self._remove_gauge(old.gauge)
        members[unit.name] = _Member(group, unit, cookie, now + CACHE_EXPIRY, gauge)

    def _drop_member(self, uid: str, name: str) -> None:
        members = self._members.get(uid)
        if not members:
            return
        member = members.pop(name, None)
        if member is not None and member.gauge is not None:
            self._remove_gauge(member.gauge)
        if not members:
            del self._members[uid]

    def _remove_gauge(self, labels: tuple[str, ...]) -> None:
        if self.metrics is None:
            return
        try:
            self.metrics.container_core_sched_cookie.remove(*labels)
        except KeyError:
            pass

    def _expire(self, now: float) -> None:
        for gid in [g for g, e in self._groups.items() if e.expires <= now]:
            del self._groups[gid]
        for uid in list(self._members):
            for name in [n for n, m in self._members[uid].items() if m.expires <= now]:
                self._drop_member(uid, name)


def _build(ctx: Context) -> CoreSched:
    from koordlet.host.coresched import CoreSchedKernel
    return CoreSched(CoreSchedKernel(), ctx.paths, ctx.metrics)


PLUGIN = Plugin("core-sched", _build, gates=("CoreSched",), probe=host_probe(probes.core_sched))
