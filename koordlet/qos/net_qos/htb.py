"""The HTB tree net QoS keeps on the egress link (pure): the classes, the pods' own classes and their stable
minors, the source-IP and cgroup filters, and the netlink changes that turn the kernel's tree into it (upstream
``pkg/koordlet/runtimehooks/hooks/tc/tc_linux.go: tcPlugin``, ``helper.go``; the classification deviation is in the
package docstring)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from koordlet.host.netlink import TC_H_ROOT, Filter, HTBClass, Link, TCState, handle, handle_str, htb_class
from koordlet.qos.net_qos.config import NET_BE, NET_LS, NET_NONE, NET_SYSTEM, Bandwidth

MAJOR = 1
QDISC = handle(MAJOR, 0)
ROOT_CLASS, SYSTEM_CLASS, LS_CLASS, BE_CLASS = (handle(MAJOR, m) for m in (1, 2, 3, 4))
DEFAULT_MINOR = 2
SYSTEM_PRIO, LS_PRIO, BE_PRIO = 1, 2, 3
CGROUP_FILTER_PREF, POD_FILTER_PREF = 1, 4
POD_MINOR_FIRST, POD_MINOR_LAST = 0x10, 0xFFFF
MIN_RATE = 125                                                  # bytes/s (1 kbit/s): HTB refuses a rate of 0

_CLASS_HANDLE = {NET_SYSTEM: SYSTEM_CLASS, NET_LS: LS_CLASS, NET_BE: BE_CLASS}
_CLASS_PRIO = {NET_SYSTEM: SYSTEM_PRIO, NET_LS: LS_PRIO, NET_BE: BE_PRIO, NET_NONE: LS_PRIO}


def pod_minor_seed(uid: str) -> int:
    """Where the probe for a pod's class minor starts: a stable function of the UID."""
    return POD_MINOR_FIRST + zlib.crc32(uid.encode()) % (POD_MINOR_LAST - POD_MINOR_FIRST + 1)


def assign_minors(uids: Iterable[str], previous: Mapping[str, int]) -> dict[str, int]:
    """Class minors for pods with their own limit: a pod keeps the minor it has (``previous``), new pods (in UID
    order) take the first free minor probing upward from their seed. Same inputs, same answer."""
    wanted = sorted(set(uids))
    out: dict[str, int] = {}
    taken: set[int] = set()
    for uid in wanted:
        minor = previous.get(uid)
        if minor is not None and POD_MINOR_FIRST <= minor <= POD_MINOR_LAST and minor not in taken:
            out[uid] = minor
            taken.add(minor)
    span = POD_MINOR_LAST - POD_MINOR_FIRST + 1
    for uid in wanted:
        if uid in out:
            continue
        start = pod_minor_seed(uid) - POD_MINOR_FIRST
        for step in range(span):
            minor = POD_MINOR_FIRST + (start + step) % span
            if minor not in taken:
                out[uid] = minor
                taken.add(minor)
                break
    return out


def net_cls_classid(cls: str, minor: int | None) -> int | None:
    """The value of the pod's ``net_cls.classid``: its own class, else its QoS class; None: leave alone."""
    if minor is not None:
        return handle(MAJOR, minor)
    return _CLASS_HANDLE.get(cls)


@dataclass(frozen=True)
class PodNet:
    """What tc needs to know about one pod."""
    uid: str
    key: str                      # namespace/name, for logs
    cls: str                      # NET_*
    ip: str | None                # IPv4 source address to match; None: not matchable by address
    egress: int                   # pod-level limit, bytes/s (0: none)


@dataclass(frozen=True)
class TCPlan:
    link: Link
    classes: tuple[HTBClass, ...]                    # parents before children
    u32: tuple[tuple[str, int], ...]                 # (source IP, classid), sorted
    cgroup_filter: bool


def class_plan(bw: Bandwidth) -> list[HTBClass]:
    """1:1 root, 1:2 system, and 1:3 LS / 1:4 BE for the enabled classes (bytes/s)."""
    hw = bw.hw_tx_bps_max

    def bounded(rate: int, ceil: int) -> tuple[int, int]:
        rate = min(max(rate, MIN_RATE), hw)
        ceil = min(ceil or hw, hw)
        return rate, max(ceil, rate)

    classes = [htb_class(ROOT_CLASS, TC_H_ROOT, hw, hw, 0)]
    system = hw - bw.offline_l1_tx_bps_min - bw.offline_l2_tx_bps_min
    classes.append(htb_class(SYSTEM_CLASS, ROOT_CLASS, *bounded(system, hw), SYSTEM_PRIO))
    if bw.l1_enabled:
        classes.append(htb_class(LS_CLASS, ROOT_CLASS, *bounded(bw.offline_l1_tx_bps_min, bw.offline_l1_tx_bps_max),
                                 LS_PRIO))
    if bw.l2_enabled:
        classes.append(htb_class(BE_CLASS, ROOT_CLASS, *bounded(bw.offline_l2_tx_bps_min, bw.offline_l2_tx_bps_max),
                                 BE_PRIO))
    return classes


def tc_plan(link: Link, bw: Bandwidth, pods: Iterable[PodNet], minors: Mapping[str, int],
            cgroup_filter: bool) -> TCPlan:
    """The whole desired tree: classes, per-pod classes (under 1:1, rate = ceil = the limit) and source-IP
    filters. Pods of a class that has no HTB class (disabled) get no filter: they take the default class."""
    classes = class_plan(bw)
    present = {c.handle for c in classes}
    hw = bw.hw_tx_bps_max
    u32: dict[str, int] = {}
    pod_classes: list[HTBClass] = []
    for p in pods:
        minor = minors.get(p.uid) if p.egress > 0 else None
        if minor is not None and (p.ip is not None or cgroup_filter):
            limit = min(max(p.egress, MIN_RATE), hw)
            pod_classes.append(htb_class(handle(MAJOR, minor), ROOT_CLASS, limit, limit, _CLASS_PRIO[p.cls]))
            target: int | None = handle(MAJOR, minor)
        else:
            target = _CLASS_HANDLE.get(p.cls)
            if target not in present or target == SYSTEM_CLASS:
                target = None                     # the default class takes it without a filter
        if target is not None and p.ip is not None and p.ip not in u32:
            u32[p.ip] = target
    pod_classes.sort(key=lambda c: c.handle)
    return TCPlan(link, tuple(classes + pod_classes), tuple(sorted(u32.items())), cgroup_filter)


@dataclass(frozen=True)
class TCOp:
    """One netlink change: ``del-root`` / ``root`` / ``del-filter`` / ``del-class`` / ``add-class`` /
    ``change-class`` / ``add-u32`` / ``add-cgroup``."""
    op: str
    cls: HTBClass | None = None
    filter: Filter | None = None
    ip: str = ""
    classid: int = 0

    def describe(self) -> str:
        if self.cls is not None:
            return self.cls.describe()
        if self.filter is not None:
            return self.filter.describe()
        if self.op == "add-u32":
            return f"src={self.ip} flowid={handle_str(self.classid)}"
        return f"qdisc={handle_str(QDISC)} default={DEFAULT_MINOR}" if self.op == "root" else ""


def _depth(h: int, classes: Mapping[int, HTBClass]) -> int:
    depth, seen = 0, set()
    while h in classes and h not in seen:
        seen.add(h)
        h = classes[h].parent
        depth += 1
    return depth


def tc_diff(plan: TCPlan, state: TCState) -> list[TCOp]:
    """The netlink changes that turn ``state`` into ``plan``, in a safe order: root qdisc, stale filters, stale
    classes (children first), new/changed classes (parents first), new filters. [] when converged.

    The root qdisc ``1:0`` is ours: every class and filter on it that the plan does not have is removed."""
    ops: list[TCOp] = []
    root = state.root
    ours = root is not None and root.kind == "htb" and root.handle == QDISC
    if ours and root is not None and root.default_class != DEFAULT_MINOR:
        ops.append(TCOp("del-root"))              # HTB cannot change its default class in place
        ours = False
    if not ours:
        ops.append(TCOp("root"))
    have = {c.handle: c for c in state.classes if c.handle >> 16 == MAJOR} if ours else {}
    filters = list(state.filters) if ours else []
    want = {c.handle: c for c in plan.classes}
    reparent = {h for h, c in have.items() if h in want and c.parent != want[h].parent}

    want_u32 = set(plan.u32)
    kept_u32: set[tuple[str, int]] = set()
    kept_cgroup = False
    for f in filters:
        pair = (f.src_ip, f.classid)
        if (f.kind == "u32" and f.prio == POD_FILTER_PREF and pair in want_u32 and pair not in kept_u32
                and f.classid not in reparent):
            kept_u32.add(pair)
            continue
        if f.kind == "cgroup" and f.prio == CGROUP_FILTER_PREF and plan.cgroup_filter and not kept_cgroup:
            kept_cgroup = True
            continue
        ops.append(TCOp("del-filter", filter=f))
    stale = [c for h, c in have.items() if h not in want or h in reparent]
    stale.sort(key=lambda c: -_depth(c.handle, have))
    ops.extend(TCOp("del-class", cls=c) for c in stale)
    for c in plan.classes:
        current = have.get(c.handle)
        if current is None or c.handle in reparent:
            ops.append(TCOp("add-class", cls=c))
        elif current != c:
            ops.append(TCOp("change-class", cls=c))
    ops.extend(TCOp("add-u32", ip=ip, classid=classid) for ip, classid in plan.u32 if (ip, classid) not in kept_u32)
    if plan.cgroup_filter and not kept_cgroup:
        ops.append(TCOp("add-cgroup"))
    return ops


def adopt_minors(state: TCState, ip_to_uid: Mapping[str, str]) -> dict[str, int]:
    """Pod class minors found in the kernel (after a restart): a source-IP filter of a live pod pointing at a
    per-pod class."""
    out: dict[str, int] = {}
    for f in state.filters:
        if f.kind != "u32" or f.src_ip is None or f.classid is None or f.classid >> 16 != MAJOR:
            continue
        minor = f.classid & 0xFFFF
        uid = ip_to_uid.get(f.src_ip)
        if uid is not None and minor >= POD_MINOR_FIRST:
            out.setdefault(uid, minor)
    return out
