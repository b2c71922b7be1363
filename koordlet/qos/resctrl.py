"""Resctrl strategy: LLC ways (CAT) and memory bandwidth (MBA) per QoS class and per pod, and the threads that
belong to each group (upstream ``pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile.go: resctrlReconcile`` and
``pkg/koordlet/runtimehooks/hooks/resctrl``).

Each cycle:

1. **Class groups** ``LSR``, ``LS``, ``BE`` are created when missing and get the schemata of ``lsrClass`` /
   ``lsClass`` / ``beClass`` ``.resctrlQOS`` (written even when ``enable=false``: the None values mean full range
   and unthrottled). LSE pods use ``LSR``; SYSTEM pods are never moved.
2. **Pod groups** ``koordlet-<pod uid>`` for pods with the ``node.koordinator.sh/resctrl`` annotation: created
   while a CLOSID is free, their schemata kept equal to the annotation, removed when the pod is gone (10 s after
   creation at the earliest, so a group made for a pod the pod list does not show yet survives), and adopted from
   the ``koordlet-*`` directories after a restart.
3. **Threads**: the thread ids of every container cgroup of a pod (sandbox included; v1 ``tasks``, v2
   ``cgroup.threads``) that are not yet in the pod's group are appended to the group's ``tasks``, one id per
   write, never cached (ids are reused). Pods go to their pod group, else to their class group when that class
   has ``resctrlQOS.enable=true``.

Values (pure functions below, table-tested):

- L3 mask: ``ways = bitlen(cbm)``, ``start = ceil(ways*s/100)``, ``end = ceil(ways*e/100)``,
  ``mask = (1<<end) - (1<<start)``; cbm ``7ff``, BE 0-30 gives ``f``. Beyond upstream: a mask with fewer bits than
  ``info/L3/min_cbm_bits`` (at least 1; e.g. 1-5 % of 11 ways is empty) is widened upwards to that many bits
  and logged once, instead of being written and rejected by the kernel.
- MB: Intel, the percent rounded up to ``info/MB/bandwidth_gran`` (upstream: to a multiple of 10, the usual
  granularity) and at least ``min_bandwidth``, so the kernel stores exactly what we write. AMD (and Hygon) count
  in units of 1/8 GB/s: 100 % is ``2048`` (the kernel's unlimited value), otherwise ``floor(160*p/100)``, where
  160 units = 20 GB/s = 80 % of a CCD's 25 GB/s (upstream's constant, measured on EPYC Milan).

Writes follow the kernel's schemata rules (see :mod:`koordlet.host.resctrl`): we read the group's schemata,
compare each resource numerically (the kernel pads the values), and write only the resource lines that differ,
together in one write (the kernel validates and applies all lines of a write atomically); when that write fails
the lines are retried one by one, so a rejected L3 line never holds back the MB line. Upstream always issues
two writes (one per resource). A verified schemata is not read again for ``executor.force_refresh`` seconds, so a
steady cycle reads only task lists.

Beyond upstream (documented differences):

- A changed annotation rewrites the pod group's schemata (upstream writes it once, at creation, also after a
  restart). A resource or cache the annotation leaves out gets the kernel's default for a new group (full mask,
  unthrottled MB), so removing a setting from the annotation resets it.
- The number of groups never exceeds ``num_closids`` (the root and class groups count): pods beyond it run in
  their class group, with one error log when CLOSIDs run out and the gauge
  ``koordlet_resctrl_pods_without_group`` / counter ``koordlet_resctrl_closid_exhausted``. Upstream's mkdir fails
  with ENOSPC every cycle.
- A malformed annotation (bad JSON or types, a range that is not ``[start, end]`` with ``0 <= start < end <= 100``,
  a percent outside 1-100, a cache id this node does not have) is rejected as a whole with one log line naming
  the pod and the problem; the pod stays in its class group. Upstream drops bad parts silently or writes values
  the kernel rejects.
- Thread ids of pods with a pod group are appended every cycle (upstream: only with ``--enable-pod-taskids``,
  relying on the NRI hook otherwise); finished pods (Succeeded/Failed) free their group.
- L3-only hosts (CPU without ``mba``) and CDP mounts (``L3CODE``/``L3DATA``) work; upstream needs both flags and
  writes ``L3`` lines.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.component import Plugin, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import Cgroups, CgroupVersion
from koordlet.host.fs import read_bytes, read_text
from koordlet.host.paths import HostPaths
from koordlet.host.resctrl import (
    MB_MAX_AMD,
    ResctrlInfo,
    ResctrlKernel,
    detect,
    is_no_space,
    list_groups,
    mounted,
    parse_schemata,
    schemata_line,
)
from koordlet.rules.resctrl import CLASS_GROUP_OF, CLASS_GROUPS, POD_GROUP_PREFIX
from koordlet.states import decode
from koordlet.states.decode import decoder
from koordlet.states.informer import pod_owner
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import Executor, Update

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.nodeslo.schema import ResctrlQOSCfg, ResourceQOSStrategy

log = logging.getLogger(__name__)

REMOVE_GRACE = 10.0            # seconds a pod group lives at least (upstream ExpirationTime)
PROBE_INTERVAL = 60.0          # seconds between support probes while resctrl is unusable
AMD_MB_UNITS = 160             # 25 GB/s * 8 units per GB/s * 0.8
REASON, REASON_TASKS = "resctrl", "resctrl-tasks"
RESOURCE = "resctrl.schemata"  # executor metric label
FINISHED = ("Succeeded", "Failed")

Schemata = dict[str, dict[int, int]]     # resource name -> domain id -> value


# --------------------------------------------------------------------------------------------------
# pure values
# --------------------------------------------------------------------------------------------------

def l3_mask(cbm: int, start: int, end: int, min_bits: int = 1) -> tuple[int, bool]:
    """(mask, widened): the ways ``[ceil(ways*start/100), ceil(ways*end/100))`` of the root cbm, widened upwards
    to ``min_bits`` (at least 1) when the range rounds to fewer ways. ValueError for a cbm that is not a run of
    ones from bit 0 or a range outside ``0 <= start < end <= 100``."""
    if cbm <= 0 or (cbm + 1) & cbm:
        raise ValueError(f"illegal cbm {cbm:x}: not a contiguous mask from bit 0")
    if not 0 <= start < end <= 100:
        raise ValueError(f"illegal L3 range start={start} end={end}: want 0 <= start < end <= 100")
    ways = cbm.bit_length()
    lo, hi = -(-ways * start // 100), -(-ways * end // 100)       # integer ceil == upstream's float ceil here
    need = min(max(min_bits, 1), ways)
    widened = hi - lo < need
    if widened:
        hi = min(ways, lo + need)
        lo = hi - need
    return (1 << hi) - (1 << lo), widened


def mb_value(percent: int | None, info: ResctrlInfo) -> int | None:
    """The MB schemata value for a percent of the node's bandwidth; None (MB not written) outside 1-100."""
    if percent is None or percent <= 0 or percent > 100:
        return None
    if info.amd:
        value = MB_MAX_AMD if percent == 100 else AMD_MB_UNITS * percent // 100
    else:
        value = percent
    gran = max(info.mb_gran, 1)
    value = -(-value // gran) * gran               # the kernel rounds up to the granularity: do it first
    return min(max(value, info.mb_min, 1), info.mb_max)


def default_schemata(info: ResctrlInfo) -> Schemata:
    """What the kernel gives a new group: every way, unthrottled bandwidth."""
    out: Schemata = {name: dict.fromkeys(info.cache_ids, info.cbm_mask) for name in info.cache_names}
    if info.mb:
        out["MB"] = dict.fromkeys(info.mb_ids, info.mb_max)
    return out


def class_schemata(cfg: ResctrlQOSCfg | None, info: ResctrlInfo) -> tuple[Schemata, str | None, bool]:
    """(desired lines, problem, widened) for a class group; an unset or invalid part is left out."""
    out: Schemata = {}
    problem, widened = None, False
    if cfg is None:
        return out, None, False
    if cfg.cat_range_start_percent is not None and cfg.cat_range_end_percent is not None:
        try:
            mask, widened = l3_mask(info.cbm_mask, cfg.cat_range_start_percent, cfg.cat_range_end_percent,
                                    info.min_cbm_bits)
        except ValueError as e:
            problem = str(e)
        else:
            for name in info.cache_names:
                out[name] = dict.fromkeys(info.cache_ids, mask)
    if info.mb:
        value = mb_value(cfg.mba_percent, info)
        if value is not None:
            out["MB"] = dict.fromkeys(info.mb_ids, value)
    return out, problem, widened


# --------------------------------------------------------------------------------------------------
# the pod annotation
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodResctrlConfig:
    """The ``node.koordinator.sh/resctrl`` annotation, checked (values are percents)."""
    llc: tuple[int, int] | None = None
    llc_per_cache: tuple[tuple[int, tuple[int, int]], ...] = ()
    mb: int | None = None
    mb_per_cache: tuple[tuple[int, int], ...] = ()


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """Go encoding/json field matching: the exact key, else any key equal ignoring case."""
    if name in obj:
        return obj[name]
    folded = name.casefold()
    for key, value in obj.items():
        if key.casefold() == folded:
            return value
    return None


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be an integer, got {json.dumps(value)[:80]}")
    return value


def _range(value: Any, where: str) -> tuple[int, int] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"{where} must be [start, end], got {json.dumps(value)[:80]}")
    start, end = _int(value[0], f"{where}[0]"), _int(value[1], f"{where}[1]")
    if not 0 <= start < end <= 100:
        raise ValueError(f"{where} [{start}, {end}] must satisfy 0 <= start < end <= 100")
    return start, end


def _percent(value: Any, where: str) -> int | None:
    if value is None:
        return None
    p = _int(value, where)
    if p == 0:
        return None                     # Go's zero value: not set
    if not 0 < p <= 100:
        raise ValueError(f"{where} {p} must be 1-100")
    return p


@decoder(wire.ANNOTATION_POD_RESCTRL)
def parse_pod_resctrl(raw: str) -> PodResctrlConfig:
    """Parse the annotation (keys matched as Go does: ``llc``/``LLC``, ``mb``/``MB``, ``cacheID``/``cacheid``);
    DecodeError naming the field and the problem."""
    doc = decode.json_object(wire.ANNOTATION_POD_RESCTRL, raw)
    llc = _object(_field(doc, "llc"), "llc")
    mb = _object(_field(doc, "mb"), "mb")
    llc_range = _range(_field(_object(_field(llc, "schemata"), "llc.schemata"), "range"), "llc.schemata.range")
    mb_percent = _percent(_field(_object(_field(mb, "schemata"), "mb.schemata"), "percent"),
                          "mb.schemata.percent")

    def per_cache(section: Mapping[str, Any], name: str) -> list[tuple[int, Mapping[str, Any], str]]:
        items = _field(section, "schemataPerCache")
        if items is None:
            return []
        if not isinstance(items, list):
            raise ValueError(f"{name}.schemataPerCache must be a list")
        out = []
        for i, item in enumerate(items):
            where = f"{name}.schemataPerCache[{i}]"
            obj = _object(item, where)
            cache_id = _field(obj, "cacheID")
            out.append((0 if cache_id is None else _int(cache_id, f"{where}.cacheID"), obj, where))
        return out

    llc_pc = []
    for cache_id, obj, where in per_cache(llc, "llc"):
        r = _range(_field(obj, "range"), f"{where}.range")
        if r is not None:
            llc_pc.append((cache_id, r))
    mb_pc = []
    for cache_id, obj, where in per_cache(mb, "mb"):
        p = _percent(_field(obj, "percent"), f"{where}.percent")
        if p is not None:
            mb_pc.append((cache_id, p))
    return PodResctrlConfig(llc_range, tuple(llc_pc), mb_percent, tuple(mb_pc))


def pod_schemata(cfg: PodResctrlConfig, info: ResctrlInfo) -> tuple[Schemata, bool, str | None]:
    """(desired lines, widened, note) of a pod group: the defaults, then the global entries, then the per-cache
    ones. ValueError for a cache id the node does not have; ``note`` says when an MB setting cannot apply here."""
    out = default_schemata(info)
    widened = False

    def mask(r: tuple[int, int]) -> int:
        nonlocal widened
        m, w = l3_mask(info.cbm_mask, r[0], r[1], info.min_cbm_bits)
        widened = widened or w
        return m

    for name in info.cache_names:
        if cfg.llc is not None:
            out[name] = dict.fromkeys(info.cache_ids, mask(cfg.llc))
        for cache_id, r in cfg.llc_per_cache:
            if cache_id not in info.cache_ids:
                raise ValueError(f"llc cacheID {cache_id} is not a cache of this node "
                                 f"(ids {','.join(map(str, info.cache_ids))})")
            out[name][cache_id] = mask(r)
    note = None
    if cfg.mb is not None or cfg.mb_per_cache:
        if not info.mb:
            note = f"mb settings ignored: {info.mb_note}"
        else:
            if cfg.mb is not None:
                out["MB"] = dict.fromkeys(info.mb_ids, mb_value(cfg.mb, info) or info.mb_max)
            for cache_id, p in cfg.mb_per_cache:
                if cache_id not in info.mb_ids:
                    raise ValueError(f"mb cacheID {cache_id} is not a memory bandwidth domain of this node "
                                     f"(ids {','.join(map(str, info.mb_ids))})")
                out["MB"][cache_id] = mb_value(p, info) or info.mb_max
    return out, widened, note


def _render(desired: Schemata) -> str:
    return "".join(schemata_line(name, values) for name, values in desired.items())


def _differing_lines(current: str, desired: Schemata) -> list[str]:
    """The desired resource lines whose values the kernel does not hold yet (compared as numbers: the kernel
    zero-pads masks and space-pads MB)."""
    have = parse_schemata(current)
    out = []
    for name, values in desired.items():
        base = 10 if name.startswith("MB") else 16
        try:
            cur = {i: int(v, base) for i, v in have.get(name, {}).items()}
        except ValueError:
            cur = {}
        if any(cur.get(i) != v for i, v in values.items()):
            out.append(schemata_line(name, values))
    return out


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------

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
        text = _render(desired)
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
        lines = _differing_lines(current, desired)
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


PLUGIN = Plugin("resctrl", lambda ctx: Resctrl(ctx.paths, ctx.metrics, pod_level=ctx.config.gate("Resctrl")),
                gates=("RdtResctrl",), probe=host_probe(probes.resctrl))
