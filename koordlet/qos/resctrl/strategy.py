"""Strategy ``resctrl``: each cycle, the class groups and the pod groups made and kept equal to what
:mod:`.schemata` says they should hold, and the pods' threads moved into their group (the rules are in the package
docstring)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.host.cgroup import Cgroups, CgroupVersion
from koordlet.host.fs import read_bytes, read_text
from koordlet.host.paths import HostPaths
from koordlet.host.resctrl import ResctrlInfo, ResctrlKernel, detect, is_no_space, list_groups, mounted
from koordlet.qos.resctrl.annotation import parse_pod_resctrl
from koordlet.qos.resctrl.schemata import Schemata, class_schemata, differing_lines, pod_schemata, render
from koordlet.rules.resctrl import CLASS_GROUP_OF, CLASS_GROUPS, POD_GROUP_PREFIX
from koordlet.states.informer import pod_owner
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import Executor, Update

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.nodeslo.schema import ResourceQOSStrategy

log = logging.getLogger(__name__)

REMOVE_GRACE = 10.0            # seconds a pod group lives at least (upstream ExpirationTime)
PROBE_INTERVAL = 60.0          # seconds between support probes while resctrl is unusable
REASON, REASON_TASKS = "resctrl", "resctrl-tasks"
RESOURCE = "resctrl.schemata"  # executor metric label
FINISHED = ("Succeeded", "Failed")


@dataclass
class _Dirs:
    """One pod's container task lists, and what each held when all its threads were last found in the group."""
    containers: tuple[Any, ...]           # meta.containers they were computed from
    files: tuple[str, ...]                # task list of every container cgroup of the pod (sandbox included)
    at: float
    group: str = ""
    seen: dict[str, bytes] = field(default_factory=dict)


@dataclass
class _Members:
    """A group's ``tasks`` as read this cycle; the id set is built only when some container list changed."""
    data: bytes
    unchanged: bool                       # byte-identical to the previous cycle's read
    _ids: set[bytes] | None = None

    @property
    def ids(self) -> set[bytes]:
        if self._ids is None:
            self._ids = set(self.data.split())
        return self._ids


class Resctrl:
    name = "resctrl"

    def __init__(self, paths: HostPaths, metrics: AgentMetrics | None = None,
                 kernel: ResctrlKernel | None = None, pod_level: bool = True) -> None:
        """Cheap: resctrl is detected (and mounted when the CPU supports it) on the first reconcile.
        ``pod_level`` (gate ``Resctrl``) manages the per-pod groups; without it annotated pods use their class
        group and ``koordlet-*`` groups are left alone."""
        self._paths = paths
        self._metrics = metrics
        self._kernel = kernel or ResctrlKernel()
        self.pod_level = pod_level
        self.info: ResctrlInfo | None = None
        self._probed: float | None = None
        self._groups: dict[str, float] = {}                  # pod uid -> when its group was made or adopted
        self._rebuilt = False
        self._verified: dict[str, tuple[str, float]] = {}     # group -> (desired text, when it matched)
        self._class_cache: tuple[object, dict[str, tuple[Schemata, str | None, bool]]] | None = None
        self._configs: dict[str, tuple[str, Schemata | str, bool, str | None]] = {}
        self._dirs: dict[str, _Dirs] = {}
        self._group_tasks: dict[str, bytes] = {}              # group -> its tasks list as last read
        self._exhausted: set[str] = set()
        self._bad = LogOnce(log)
        self._bad_pods = LogOnce(log)
        self._pod_notes = LogOnce(log, logging.INFO)
        self._note = LogOnce(log, logging.INFO)

    # --- the cycle ---------------------------------------------------------------------------------

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        info = self._ensure(executor.clock())
        if info is None:
            return
        groups = set(list_groups(info.root))
        self._class_groups(view, executor, info, groups)
        pod_groups = self._pod_groups(view, executor, info, groups) if self.pod_level else set()
        self._move_tasks(view, executor, info, pod_groups)

    def _ensure(self, now: float) -> ResctrlInfo | None:
        if self.info is not None:
            if mounted(self.info.root):
                return self.info
            log.warning("resctrl root disappeared (unmounted?) root=%s; probing again", self.info.root)
            self.info, self._probed = None, None
            self._verified.clear()
        if self._probed is not None and now - self._probed < PROBE_INTERVAL:
            return None
        self._probed = now
        info, why = detect(self._paths, self._kernel)
        if info is None:
            self._note("probe", "resctrl unsupported, strategy idle: %s", why)
            return None
        self._note.forget("probe")
        log.info("resctrl ready %s", info.describe())
        self.info = info
        self._class_cache = None                 # values depend on the info (cbm, MB granularity, vendor)
        self._configs.clear()
        return info

    # --- class groups ------------------------------------------------------------------------------

    def _class_desired(self, strategy: ResourceQOSStrategy | None,
                       info: ResctrlInfo) -> dict[str, tuple[Schemata, str | None, bool]]:
        if self._class_cache is None or self._class_cache[0] is not strategy:
            out = {}
            for group, attr in CLASS_GROUPS:
                rq = getattr(strategy, attr, None) if strategy is not None else None
                out[group] = class_schemata(rq.resctrl_qos if rq is not None else None, info)
            self._class_cache = (strategy, out)
        return self._class_cache[1]

    def _class_groups(self, view: NodeView, executor: Executor, info: ResctrlInfo, groups: set[str]) -> None:
        desired = self._class_desired(view.slo.resource_qos, info)
        for group, _ in CLASS_GROUPS:
            if group not in groups:
                made = self._make(info, group)
                if made == "nospace":
                    self._bad(f"mkdir/{group}", "resctrl class group=%s not created: no CLOSID left "
                              "(num_closids=%d, groups=%d)", group, info.num_closids, len(groups))
                if made != "ok":
                    continue
                groups.add(group)
            lines, problem, widened = desired[group]
            if problem:
                self._bad(f"class/{group}", "resctrl class group=%s: %s; its L3 mask is left as it is", group, problem)
            else:
                self._bad.forget(f"class/{group}")
            if widened:
                self._note(f"widen/{group}", "resctrl class group=%s: the L3 range rounds to fewer ways than "
                           "min_cbm_bits=%d; widened", group, info.min_cbm_bits)
            self._apply(info, group, lines, executor, f"resctrl {group}")

    def _make(self, info: ResctrlInfo, name: str) -> str:
        """mkdir a group: "ok" (made, or it existed), "nospace" (ENOSPC: no CLOSID left) or "failed" (logged)."""
        try:
            self._kernel.make_group(info.root, name)
        except FileExistsError:
            return "ok"
        except OSError as e:
            if is_no_space(e):
                return "nospace"
            self._bad(f"mkdir/{name}", "resctrl group create failed group=%s error=%s", name, e.strerror or e)
            return "failed"
        self._bad.forget(f"mkdir/{name}")
        self._verified.pop(name, None)
        log.info("resctrl group created group=%s", name)
        return "ok"

    def _apply(self, info: ResctrlInfo, name: str, desired: Schemata, executor: Executor, owner: str) -> None:
        """Bring the group's schemata to ``desired`` with the fewest writes (see the module docstring)."""
        if not desired:
            return
        text = render(desired)
        now = executor.clock()
        seen = self._verified.get(name)
        if seen is not None and seen[0] == text and now - seen[1] < executor.force_refresh:
            return
        path = os.path.join(info.root, name, "schemata")
        try:
            current = read_text(path)
        except OSError:
            self._verified.pop(name, None)
            return
        lines = differing_lines(current, desired)
        if lines:
            result = executor.update([Update(path, "".join(lines), owner, REASON, RESOURCE, cacheable=False)])
            if result.failed and len(lines) > 1:
                result = executor.update(Update(path, line, owner, REASON, RESOURCE, cacheable=False)
                                         for line in lines)
            if result.failed or result.missing:
                self._verified.pop(name, None)
                return
        self._verified[name] = (text, now)

    # --- pod groups --------------------------------------------------------------------------------

    def _pod_config(self, uid: str, raw: str, info: ResctrlInfo) -> tuple[Schemata | str, bool, str | None]:
        """(desired lines or the problem, widened, note), cached per annotation text."""
        cached = self._configs.get(uid)
        if cached is None or cached[0] != raw:
            try:
                desired, widened, note = pod_schemata(parse_pod_resctrl(raw), info)
                cached = (raw, desired, widened, note)
            except ValueError as e:
                cached = (raw, str(e), False, None)
            self._configs[uid] = cached
        return cached[1], cached[2], cached[3]

    def _pod_groups(self, view: NodeView, executor: Executor, info: ResctrlInfo, groups: set[str]) -> set[str]:
        """Create, update and remove the ``koordlet-<uid>`` groups; returns the uids whose pod has its group."""
        now = executor.clock()
        existing = {n[len(POD_GROUP_PREFIX):] for n in groups if n.startswith(POD_GROUP_PREFIX)}
        if not self._rebuilt:
            self._rebuilt = True
            for uid in existing:
                self._groups.setdefault(uid, now)
            if existing:
                log.info("resctrl pod groups adopted count=%d", len(existing))
        for uid in [u for u in self._groups if u not in existing]:      # removed behind our back, or remount
            del self._groups[uid]
            self._verified.pop(POD_GROUP_PREFIX + uid, None)

        wanted: dict[str, tuple[PodMeta, Schemata]] = {}
        seen: set[str] = set()
        for meta in view.pods:
            pod = meta.pod
            raw = pod.annotations.get(wire.ANNOTATION_POD_RESCTRL)
            if raw is None or pod.phase in FINISHED:
                continue
            seen.add(pod.uid)
            desired, widened, note = self._pod_config(pod.uid, raw, info)
            if isinstance(desired, str):
                self._bad_pods(pod.uid, "pod %s: annotation %s rejected: %s; the pod stays in its class group",
                               pod.key, wire.ANNOTATION_POD_RESCTRL, desired)
                continue
            self._bad_pods.forget(pod.uid)
            if widened or note:
                self._pod_notes(pod.uid, "pod %s: annotation %s: %s", pod.key, wire.ANNOTATION_POD_RESCTRL,
                                note or f"an L3 range rounds to fewer ways than min_cbm_bits={info.min_cbm_bits}; "
                                "widened")
            wanted[pod.uid] = (meta, desired)
        self._bad_pods.keep_only(seen)
        self._pod_notes.keep_only(seen)
        for uid in [u for u in self._configs if u not in seen]:
            del self._configs[uid]

        for uid, created in list(self._groups.items()):
            if uid in wanted or now - created < REMOVE_GRACE:
                continue
            name = POD_GROUP_PREFIX + uid
            try:
                self._kernel.remove_group(info.root, name)
            except FileNotFoundError:
                pass
            except OSError as e:
                self._bad(f"rmdir/{name}", "resctrl group remove failed group=%s error=%s", name, e.strerror or e)
                continue
            log.info("resctrl pod group removed group=%s", name)
            self._bad.forget(f"rmdir/{name}")
            del self._groups[uid]
            groups.discard(name)
            self._verified.pop(name, None)

        free = info.num_closids - 1 - len(groups)
        exhausted: list[str] = []
        for uid in sorted((u for u in wanted if u not in self._groups), key=lambda u: (wanted[u][0].pod.created, u)):
            name = POD_GROUP_PREFIX + uid
            if free <= 0:
                exhausted.append(uid)
                continue
            made = self._make(info, name)
            if made == "nospace":                 # the kernel has fewer CLOSIDs free than we counted
                free = 0
                exhausted.append(uid)
            elif made == "ok":
                self._groups[uid] = now
                groups.add(name)
                free -= 1
        self._report_exhausted(exhausted, wanted, info, len(groups))

        placed = set()
        for uid in self._groups:
            if uid in wanted:
                meta, desired = wanted[uid]
                self._apply(info, POD_GROUP_PREFIX + uid, desired, executor, pod_owner(meta))
                placed.add(uid)
        return placed

    def _report_exhausted(self, exhausted: list[str], wanted: Mapping[str, tuple[PodMeta, Schemata]],
                          info: ResctrlInfo, in_use: int) -> None:
        now_set = set(exhausted)
        if self._metrics is not None:
            self._metrics.resctrl_pods_without_group.labels(self._metrics.node).set(len(now_set))
            if now_set - self._exhausted:
                self._metrics.resctrl_closid_exhausted.labels(self._metrics.node).inc(len(now_set - self._exhausted))
        if now_set and not self._exhausted:
            log.error("resctrl CLOSIDs exhausted num_closids=%d groups=%d (root not counted); pods with %s run in "
                      "their class group until one is free: %s", info.num_closids, in_use, wire.ANNOTATION_POD_RESCTRL,
                      ", ".join(wanted[u][0].pod.key for u in exhausted[:10]) + (" ..." if len(exhausted) > 10 else ""))
        elif self._exhausted and not now_set:
            log.info("resctrl CLOSIDs available again; every annotated pod has its group")
        for uid in now_set - self._exhausted:
            log.debug("resctrl no CLOSID for pod %s", wanted[uid][0].pod.key)
        self._exhausted = now_set

    # --- threads -----------------------------------------------------------------------------------

    def _task_dirs(self, meta: PodMeta, cgroups: Cgroups, now: float, refresh: float) -> _Dirs:
        """The pod's container task lists, the sandbox's included. The pod dir is listed again only when its
        containers change (or after ``refresh`` seconds), so a steady cycle lists nothing."""
        cached = self._dirs.get(meta.cgroup_dir)
        if cached is not None and now - cached.at < refresh and (
                cached.containers is meta.containers or cached.containers == meta.containers):
            cached.containers = meta.containers
            return cached
        rels = [rel for _, rel in meta.containers]
        rels += [rel for _, _, rel in cgroups.list_containers(meta.cgroup_dir) if rel not in rels]
        if cgroups.version is CgroupVersion.V1:
            files = tuple(cgroups.path("cpu", rel, "tasks") for rel in rels)
        else:
            files = tuple(cgroups.path("", rel, "cgroup.threads") for rel in rels)
        cached = self._dirs[meta.cgroup_dir] = _Dirs(meta.containers, files, now)
        return cached

    def _move_tasks(self, view: NodeView, executor: Executor, info: ResctrlInfo, pod_groups: set[str]) -> None:
        """Append the threads missing from their group. A container list whose bytes are unchanged since all its
        ids were found in the group, while the group's list is unchanged too, needs no parsing: a steady cycle
        costs little more than reading the lists."""
        strategy = view.slo.resource_qos
        enabled = {}
        for group, attr in CLASS_GROUPS:
            rq = getattr(strategy, attr, None) if strategy is not None else None
            enabled[group] = bool(rq is not None and rq.resctrl_qos is not None and rq.resctrl_qos.enable)
        now = executor.clock()
        members: dict[str, _Members | None] = {}
        live = set()
        for meta in view.pods:
            pod = meta.pod
            if pod.phase in FINISHED:
                continue
            if pod.uid in pod_groups:
                group = POD_GROUP_PREFIX + pod.uid
            else:
                group = CLASS_GROUP_OF.get(pod.qos_class, "")
                if not group or not enabled[group]:
                    continue
            if group not in members:
                try:
                    data = read_bytes(os.path.join(info.root, group, "tasks"))
                    members[group] = _Members(data, data == self._group_tasks.get(group))
                except OSError:
                    members[group] = None      # the group is missing: nothing to move into
            m = members[group]
            if m is None:
                continue
            live.add(meta.cgroup_dir)
            dirs = self._task_dirs(meta, executor.cgroups, now, executor.force_refresh)
            if dirs.group != group:
                dirs.group = group
                dirs.seen.clear()
            seen = dirs.seen
            new: list[bytes] = []
            for path in dirs.files:
                try:
                    data = read_bytes(path)
                except OSError:
                    continue                   # container gone or not started: nothing to move
                if m.unchanged and seen.get(path) == data:
                    continue
                missing = set(data.split()) - m.ids
                if missing:
                    new.extend(missing)
                    seen.pop(path, None)       # checked again once the appends show in the group's list
                else:
                    seen[path] = data
            if new:
                m.ids.update(new)
                executor.append(os.path.join(info.root, group, "tasks"), [t.decode() + "\n" for t in new],
                                pod_owner(meta), REASON_TASKS)
        self._group_tasks = {g: m.data for g, m in members.items() if m is not None}
        for gone in [d for d in self._dirs if d not in live]:
            del self._dirs[gone]
