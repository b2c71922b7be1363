"""Network QoS: egress shaping with an HTB tree on the node's egress interface (policy ``tc``), or the config files
of Terway's own QoS agent (policy ``terway-qos``). Facts: upstream ``pkg/koordlet/runtimehooks/hooks/tc/``
(``tc_linux.go: tcPlugin``, ``helper.go``) and ``hooks/terwayqos/terwayqos.go``.

Policy ``tc`` (``resourceQOSStrategy.policies.netQOSPolicy`` unset or ``tc``), through netlink
(:mod:`koordlet.host.netlink`), on the link of the IPv4 default route:

- qdisc ``1:0`` htb at the root, default class ``2``; classes ``1:1`` root (rate = ceil = total), ``1:2`` system
  (rate total - LS request - BE request, ceil total, prio 1), ``1:3`` LS (``lsClass.networkQOS`` egress request /
  limit, prio 2), ``1:4`` BE (``beClass.networkQOS``, prio 3). Total = ``systemStrategy.totalNetworkBandwidth``
  (bits/s), overridden by the node annotation ``node.koordinator.sh/network-bandwidth``. An int is a percent of
  the total, a string a quantity in bits/s; everything becomes bytes/s by dividing by 8 exactly once.
- a pod with ``koordinator.sh/networkQOS`` ``{"egressLimit": "20M"}`` (bits/s) gets its own class ``1:<minor>``
  under ``1:1`` with rate = ceil = the limit. The minor is derived from the pod UID (crc32, linear probing on a
  collision), kept for as long as the pod lives and re-adopted from the kernel's filters after a restart.
- ``net_cls.classid`` per pod (cgroup v1 ``net_cls`` only), in decimal: the pod's own class, else 1:2/1:3/1:4
  for SYSTEM / LSE,LSR,LS / BE pods (pods without a koordinator QoS label: not written).

Classification (deviation, documented): upstream puts pod IPs into ipsets (``system_class``, ``ls_class``,
``be_class``) and marks packets with ``iptables -t mangle ... -j CLASSIFY``, and uses ``u32 match ip src`` only for
pods with their own limit. pyroute2 has no iptables and we run no commands, so every pod is classified by a
``u32 match ip src <podIP>/32 flowid 1:<class>`` filter at pref 4 (the same mechanism upstream uses for pod
limits). Like upstream's pod-limit filters, this sees the packet after POSTROUTING NAT: pods whose egress is
masqueraded to the node IP (or encapsulated by an overlay) on that interface are not matched and fall into the
default (system) class. Host-network pods share the node's IP and are never matched by address; with v1 net_cls
and a kernel with the ``cgroup`` classifier, one ``cgroup`` filter at pref 1 classifies their sockets by
``net_cls.classid`` (upstream adds three identical ones, one per class).

Beyond upstream (documented differences):

- Pod-level limits are divided by 8 once: upstream divides the annotation by 8 and then again when building the
  class, so a "20M" pod gets 2.5 Mbit/s there.
- A class whose ``networkQOS.enable`` is false gets no HTB class and its pods no filter: their traffic takes the
  default (system) class. Upstream creates the class with rate 0, which the kernel rejects, with the same effect.
  An unset limit means "up to the total" (upstream: ceil 0, also rejected). Rates below 1 kbit/s are raised to
  1 kbit/s (HTB refuses 0); a class quantity above the total is clamped to the total, with a log line.
- With no total bandwidth, or with neither class enabled and no pod-level limit, there is nothing to shape and
  our qdisc is removed; upstream installs the tree anyway (and fails on rate 0 when the total is unset).
- A pod with a pod-level limit but no koordinator QoS label still gets its class (upstream skips it silently).
- A missing key in the pod annotation means 0 (no limit); upstream's terway path rejects the whole annotation.
  A malformed annotation is logged once naming the pod; the pod keeps its class, every other pod is unaffected.
- Terway ``global_bps_config``: a percent is converted to bytes/s like everything else (upstream leaves it in
  bits/s [quirk]); a quantity above the total is clamped instead of failing the whole file.
- Reconcile reads the kernel state (qdiscs, classes, filters) and makes only the changes needed: a converged host
  costs zero netlink writes. When the desired plan did not change it is not even re-read until ``refresh``
  seconds have passed (like the executor's cache); then drift is repaired.

Writes: tc changes go through :class:`koordlet.host.netlink.TC` (netlink is not a file, so not through the
executor); each is one log line (``tc write op=... dev=...``) and counted in
``koordlet_net_qos_tc_operations``. ``net_cls.classid`` and the Terway files go through the executor
(``Update(..., create=True)`` for the files, ``executor.remove`` when the policy is not terway-qos); tc changes are
also recorded in the executor's audit trail (``executor.record``), so ``/events`` shows them.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import os
import posixpath
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.component import Context, Plugin, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import KubeQOS
from koordlet.host.netlink import (
    TC,
    TC_H_ROOT,
    Filter,
    HTBClass,
    Link,
    NetlinkFailure,
    TCState,
    handle,
    handle_str,
    htb_class,
    net_cls_mounted,
)
from koordlet.host.paths import HostPaths
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.informer import pod_owner
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import FORCE_REFRESH, Executor, Update

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.nodeslo.schema import NetworkQOSCfg, NodeSLOSpec
    from koordlet.states.pod import Pod

log = logging.getLogger(__name__)

REASON = "net-qos"
TERWAY_DIR = "/var/lib/terway/qos"                              # upstream: /host-var-lib/terway/qos in its pod
TERWAY_NODE_FILE, TERWAY_POD_FILE = "global_bps_config", "pod.json"
TERWAY_NET_CLS_ROOT = "/sys/fs/cgroup/net_cls"                  # as Terway sees the host (hard-coded upstream)

MAJOR = 1
QDISC = handle(MAJOR, 0)
ROOT_CLASS, SYSTEM_CLASS, LS_CLASS, BE_CLASS = (handle(MAJOR, m) for m in (1, 2, 3, 4))
DEFAULT_MINOR = 2
SYSTEM_PRIO, LS_PRIO, BE_PRIO = 1, 2, 3
CGROUP_FILTER_PREF, POD_FILTER_PREF = 1, 4
POD_MINOR_FIRST, POD_MINOR_LAST = 0x10, 0xFFFF
MIN_RATE = 125                                                  # bytes/s (1 kbit/s): HTB refuses a rate of 0

NET_SYSTEM, NET_LS, NET_BE, NET_NONE = "system_class", "ls_class", "be_class", ""
_NET_CLASS = {wire.QOS_SYSTEM: NET_SYSTEM, wire.QOS_LSE: NET_LS, wire.QOS_LSR: NET_LS, wire.QOS_LS: NET_LS,
              wire.QOS_BE: NET_BE}
_CLASS_HANDLE = {NET_SYSTEM: SYSTEM_CLASS, NET_LS: LS_CLASS, NET_BE: BE_CLASS}
_CLASS_PRIO = {NET_SYSTEM: SYSTEM_PRIO, NET_LS: LS_PRIO, NET_BE: BE_PRIO, NET_NONE: LS_PRIO}
_TERWAY_PRIO = {wire.QOS_SYSTEM: 0, wire.QOS_LSE: 1, wire.QOS_LSR: 1, wire.QOS_LS: 1, wire.QOS_BE: 2}


# --------------------------------------------------------------------------------------------------------------
# rates (pure)

def quantity_bits(raw: object) -> int:
    """A bandwidth quantity in bits/s, rounded up as Go's ``Quantity.Value()``; ValueError when bad/negative."""
    q = parse_quantity(raw)
    if q < 0:
        raise ValueError(f"quantity {raw!r}: must not be negative")
    return -((-q.numerator) // q.denominator)


def net_class(pod: Pod) -> str:
    """SYSTEM -> system, LSE/LSR/LS -> LS, BE -> BE, no koordinator QoS label -> none (the label only)."""
    return _NET_CLASS.get(pod.raw_qos_class, NET_NONE)


def net_qos_policy(slo: NodeSLOSpec) -> str:
    """``tc`` when unset (the hook's reading), else the configured value (``terway-qos`` or ``""``)."""
    policies = slo.resource_qos.policies if slo.resource_qos is not None else None
    if policies is None or policies.net_qos_policy is None:
        return wire.NET_QOS_POLICY_TC
    return policies.net_qos_policy


def total_bandwidth_bits(slo: NodeSLOSpec, node_annotations: Mapping[str, str]) -> tuple[int, str | None]:
    """``systemStrategy.totalNetworkBandwidth`` (bits/s), the node annotation taking precedence when it parses."""
    base = slo.system.total_network_bandwidth_value if slo.system is not None else 0
    raw = node_annotations.get(wire.ANNOTATION_NODE_NETWORK_BANDWIDTH)
    if raw is None:
        return max(base, 0), None
    try:
        return quantity_bits(raw), None
    except ValueError as e:
        return max(base, 0), (f"node annotation {wire.ANNOTATION_NODE_NETWORK_BANDWIDTH}={raw!r}: {e}; using "
                              f"systemStrategy.totalNetworkBandwidth")


def class_bytes(value: int | str | None, total_bits: int, where: str) -> tuple[int, str | None]:
    """One ``networkQOS`` value in bytes/s: an int is a percent of the total, a string a quantity in bits/s.
    Bad values count as 0 (unset), values above the total are clamped to it; both with a problem text."""
    if value is None:
        return 0, None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return 0, f"{where}: expected a percent or a quantity, got {value!r}; treated as unset"
    if isinstance(value, int):
        if not 0 <= value <= 100:
            return 0, f"{where}: percent {value} outside 0..100; treated as unset"
        return total_bits * value // 100 // 8, None
    try:
        bits = quantity_bits(value)
    except ValueError as e:
        return 0, f"{where}: {e}; treated as unset"
    if bits > total_bits:
        return total_bits // 8, f"{where}: {value} is above the total bandwidth {total_bits} bit/s; clamped"
    return bits // 8, None


@dataclass(frozen=True)
class Bandwidth:
    """Node-level egress (tx) / ingress (rx) bandwidth in bytes/s: the hardware total, L1 = LS, L2 = BE.
    Field order is Terway's ``global_bps_config`` line order."""
    hw_tx_bps_max: int = 0
    hw_rx_bps_max: int = 0
    offline_l1_tx_bps_min: int = 0
    offline_l1_tx_bps_max: int = 0
    offline_l1_rx_bps_min: int = 0
    offline_l1_rx_bps_max: int = 0
    offline_l2_tx_bps_min: int = 0
    offline_l2_tx_bps_max: int = 0
    offline_l2_rx_bps_min: int = 0
    offline_l2_rx_bps_max: int = 0
    l1_enabled: bool = False
    l2_enabled: bool = False

    LINES = ("hw_tx_bps_max", "hw_rx_bps_max", "offline_l1_tx_bps_min", "offline_l1_tx_bps_max",
             "offline_l1_rx_bps_min", "offline_l1_rx_bps_max", "offline_l2_tx_bps_min", "offline_l2_tx_bps_max",
             "offline_l2_rx_bps_min", "offline_l2_rx_bps_max")


def _class_values(cfg: NetworkQOSCfg | None, total: int, where: str,
                  problems: list[str]) -> tuple[bool, tuple[int, int, int, int]]:
    """(enabled, (tx min, tx max, rx min, rx max)) of lsClass/beClass networkQOS; zeros when not enabled."""
    if cfg is None or not cfg.enable:
        return False, (0, 0, 0, 0)
    out = []
    for attr, wire_name in (("egress_request", "egressRequest"), ("egress_limit", "egressLimit"),
                            ("ingress_request", "ingressRequest"), ("ingress_limit", "ingressLimit")):
        value, problem = class_bytes(getattr(cfg, attr), total, f"{where}.networkQOS.{wire_name}")
        if problem:
            problems.append(problem)
        out.append(value)
    return True, (out[0], out[1], out[2], out[3])


def bandwidth(slo: NodeSLOSpec, node_annotations: Mapping[str, str]) -> tuple[Bandwidth, list[str]]:
    """The node's bandwidth config from the NodeSLO (and node annotation), with a problem text per bad value."""
    problems: list[str] = []
    total, problem = total_bandwidth_bits(slo, node_annotations)
    if problem:
        problems.append(problem)
    rq = slo.resource_qos
    l1_on, l1 = _class_values(rq.ls.network_qos if rq and rq.ls else None, total, "lsClass", problems)
    l2_on, l2 = _class_values(rq.be.network_qos if rq and rq.be else None, total, "beClass", problems)
    hw = total // 8
    return Bandwidth(hw, hw, l1[0], l1[1], l1[2], l1[3], l2[0], l2[1], l2[2], l2[3], l1_on, l2_on), problems


@decoder(wire.ANNOTATION_POD_NETWORK_QOS)
def pod_limits(pod: Pod) -> tuple[int, int]:
    """(ingress, egress) bytes/s from ``koordinator.sh/networkQOS`` (bits/s quantities; missing key = 0);
    DecodeError when the annotation is malformed (the caller then sets no pod-level limit)."""
    key = wire.ANNOTATION_POD_NETWORK_QOS
    raw = pod.annotations.get(key, "")
    if not raw:
        return 0, 0
    doc = decode.json_object(key, raw)
    out = []
    for name in ("ingressLimit", "egressLimit"):
        value = doc.get(name)
        if value is None or value == "":
            out.append(0)
            continue
        text = decode.string(key, value, name)
        try:
            out.append(quantity_bits(text) // 8)
        except ValueError as e:
            raise DecodeError(key, f"{name}: {e}") from None
    return out[0], out[1]


# --------------------------------------------------------------------------------------------------------------
# Terway files (pure)

def terway_global_config(bw: Bandwidth) -> str:
    """``global_bps_config``: one ``<key> <bytes/s>`` line per field, in Terway's order."""
    return "".join(f"{name} {getattr(bw, name)}\n" for name in Bandwidth.LINES)


def terway_prio(pod: Pod) -> int:
    """SYSTEM 0, LSE/LSR/LS 1, BE 2; unlabeled: Guaranteed/Burstable 1, BestEffort 2."""
    prio = _TERWAY_PRIO.get(pod.raw_qos_class)
    if prio is not None:
        return prio
    return 2 if pod.kube_qos is KubeQOS.BESTEFFORT else 1


def terway_pod_entry(meta: PodMeta, ingress: int, egress: int) -> dict[str, Any]:
    pod = meta.pod
    return {"podName": pod.name, "podNamespace": pod.namespace, "podUID": pod.uid, "prio": terway_prio(pod),
            "cgroupDir": posixpath.normpath(posixpath.join(TERWAY_NET_CLS_ROOT, meta.cgroup_dir)),
            "qosConfig": {"ingressBandwidth": ingress, "egressBandwidth": egress}}


def terway_pods_json(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """``pod.json`` exactly as Go's ``json.Marshal(map[uid]*Pod)``: keys sorted, no spaces."""
    return json.dumps({uid: entries[uid] for uid in sorted(entries)}, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------------------------
# tc plan (pure)

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


# --------------------------------------------------------------------------------------------------------------
# the strategy

def _why(e: NetlinkFailure) -> str:
    return f"{e.what}: {e.strerror}" if e.what else str(e.strerror)


def _ip_version(ip: str) -> int:
    """4, 6, or 0 for text that is not an address."""
    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return 0


_UNSUPPORTED_CLS = (errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL)


class NetQOS:
    """Strategy ``net-qos``. ``tc`` / ``terway`` switch the two halves (upstream gates ``TCNetworkQoS`` and
    ``TerwayQoS``); ``pod_ips`` (uid -> IPv4, read each cycle) takes precedence over ``Pod.pod_ip``; ``interface``
    overrides the default-route link; ``netns`` runs netlink in a named network namespace (tests, benches)."""

    name = "net-qos"

    def __init__(self, paths: HostPaths, metrics: AgentMetrics | None = None, netns: str | None = None, *,
                 tc: bool = True, terway: bool = True, terway_dir: str = TERWAY_DIR,
                 pod_ips: Mapping[str, str] | None = None, interface: str | None = None,
                 refresh: float = FORCE_REFRESH, clock: Callable[[], float] = time.monotonic) -> None:
        self.paths = paths
        self.metrics = metrics
        self.tc_on, self.terway_on = tc, terway
        self.terway_dir = terway_dir
        self.pod_ips: Mapping[str, str] = pod_ips if pod_ips is not None else {}
        self.interface = interface
        self.refresh = refresh
        self.clock = clock
        self.tc = TC(netns)
        self._cgroup_cls = True              # until the kernel says it has no cgroup classifier
        self._net_cls: bool | None = None
        self._minors: dict[str, int] | None = None
        self._converged: tuple[Any, float] | None = None    # (inputs, when verified)
        self._limits_memo: dict[str, tuple[int, int] | DecodeError] = {}
        self._ip_memo: dict[str, int] = {}
        self._bad = LogOnce(log)              # node-level problems (config, netlink, link, terway dir)
        self._pod_bad = LogOnce(log)          # per pod (uid, ip:<uid>); forgotten when the pod goes
        self._op_bad = LogOnce(log)           # failed tc writes; forgotten once converged

    # --- cycle ----------------------------------------------------------------------------------------------

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        policy = net_qos_policy(view.slo)
        bw, problems = bandwidth(view.slo, view.node.annotations)
        if problems:
            self._bad("slo", "net qos config: %s", "; ".join(problems))
        else:
            self._bad.forget("slo")
        self._pod_bad.keep_only([m.pod.uid for m in view.pods] + [f"ip:{m.pod.uid}" for m in view.pods])
        limits = {}
        memo, self._limits_memo = self._limits_memo, {}       # annotation text -> parsed (most never change)
        for meta in view.pods:
            raw = meta.pod.annotations.get(wire.ANNOTATION_POD_NETWORK_QOS, "")
            parsed = memo.get(raw) or self._limits_memo.get(raw)
            if parsed is None:
                try:
                    parsed = pod_limits(meta.pod)
                except DecodeError as e:
                    parsed = e
            self._limits_memo[raw] = parsed
            if isinstance(parsed, DecodeError):
                self._pod_bad(meta.pod.uid, "pod %s: annotation %s; the pod keeps its class without a pod-level "
                              "limit", meta.pod.key, parsed)
                parsed = (0, 0)
            limits[meta.pod.uid] = parsed
        if self.tc_on:
            if policy == wire.NET_QOS_POLICY_TC and bw.hw_tx_bps_max > 0:
                pods = self._pod_nets(view.pods, limits)
                if bw.l1_enabled or bw.l2_enabled or any(p.egress for p in pods):
                    self._tc_apply(bw, pods, view.pods, executor)
                else:
                    self._tc_remove("no class networkQOS enabled and no pod-level limit")
            else:
                self._tc_remove("netQOSPolicy is not tc" if policy != wire.NET_QOS_POLICY_TC else
                                "totalNetworkBandwidth is 0")
        if self.terway_on:
            if policy == wire.NET_QOS_POLICY_TERWAY:
                self._terway_write(bw, view.pods, limits, executor)
            else:
                self._terway_remove(executor)

    # --- tc -------------------------------------------------------------------------------------------------

    def _pod_nets(self, metas: Sequence[PodMeta], limits: Mapping[str, tuple[int, int]]) -> list[PodNet]:
        out: list[PodNet] = []
        seen: set[str] = set()
        ip_memo: dict[str, int] = {}
        for meta in sorted(metas, key=lambda m: m.pod.uid):
            pod = meta.pod
            if pod.terminating:
                continue
            ip: str | None = self.pod_ips.get(pod.uid) or pod.pod_ip or None
            if pod.host_network:
                ip = None                          # the node's own address
            elif ip is not None:
                version = ip_memo.get(ip)
                if version is None:
                    version = self._ip_memo.get(ip) or _ip_version(ip)
                ip_memo[ip] = version
                if version == 6:
                    self._pod_bad(f"ip:{pod.uid}", "pod %s: IPv6 address %s is not classified (u32 ip src "
                                  "is IPv4 only)", pod.key, ip)
                    ip = None
                elif version != 4:
                    self._pod_bad(f"ip:{pod.uid}", "pod %s: pod IP %r is not an address; not classified",
                                  pod.key, ip)
                    ip = None
                if ip is not None and ip in seen:
                    self._pod_bad(f"ip:{pod.uid}", "pod %s: pod IP %s already used by another pod; not "
                                  "classified", pod.key, ip)
                    ip = None
            if ip is not None:
                seen.add(ip)
            out.append(PodNet(pod.uid, pod.key, net_class(pod), ip, limits.get(pod.uid, (0, 0))[1]))
        self._ip_memo = ip_memo
        return out

    def _link(self) -> Link | None:
        try:
            link = self.tc.link_by_name(self.interface) if self.interface else self.tc.default_link()
        except NetlinkFailure as e:
            self._bad("netlink", "net qos: rtnetlink unusable (%s); tc shaping idle", _why(e))
            return None
        self._bad.forget("netlink")
        if link is None:
            self._bad("link", "net qos: %s; tc shaping idle", f"interface {self.interface} not found"
                      if self.interface else "no IPv4 default route (no egress interface)")
        else:
            self._bad.forget("link")
        return link

    def _fresh(self, inputs: Any) -> bool:
        return (self._converged is not None and self._converged[0] == inputs
                and self.clock() - self._converged[1] < self.refresh)

    def _tc_apply(self, bw: Bandwidth, pods: list[PodNet], metas: Sequence[PodMeta], executor: Executor) -> None:
        if self._net_cls is None:
            self._net_cls = net_cls_mounted(executor.cgroups)
        cgroup_filter = self._net_cls and self._cgroup_cls
        limited = [p.uid for p in pods if p.egress > 0]
        minors = assign_minors(limited, self._minors or {})
        inputs = ("tc", self.interface, bw, tuple(pods), cgroup_filter, tuple(sorted(minors.items())))
        if not self._fresh(inputs):
            minors = self._tc_converge(bw, pods, limited, minors, cgroup_filter, inputs, executor)
        self._write_net_cls(pods, minors, metas, executor)

    def _tc_converge(self, bw: Bandwidth, pods: list[PodNet], limited: list[str], minors: dict[str, int],
                     cgroup_filter: bool, inputs: tuple[Any, ...], executor: Executor) -> dict[str, int]:
        """Read the kernel, make the changes, remember the inputs when every change succeeded."""
        link = self._link()
        if link is None:
            return minors
        try:
            state = self.tc.read(link)
            if self._minors is None:                 # first look at this kernel: pods keep the classes they have
                ip_to_uid = {p.ip: p.uid for p in pods if p.ip is not None and p.egress > 0}
                minors = assign_minors(limited, adopt_minors(state, ip_to_uid))
                inputs = inputs[:-1] + (tuple(sorted(minors.items())),)
            self._minors = minors
            plan = tc_plan(link, bw, pods, minors, cgroup_filter)
            ops = tc_diff(plan, state)
        except NetlinkFailure as e:
            self._bad("tc", "net qos: reading tc state of %s failed (%s); retrying next cycle", link.name, _why(e))
            self._converged = None
            return minors
        if state.root is not None and state.root.handle not in (0, QDISC):
            log.warning("net qos: replacing root qdisc %s %s on %s with htb %s", state.root.kind,
                        handle_str(state.root.handle), link.name, handle_str(QDISC))
        if self._run(link, ops, executor):
            self._converged = None
            return minors
        self._bad.forget("tc")
        self._op_bad.keep_only(())
        self._converged = (inputs, self.clock())
        return minors

    def _run(self, link: Link, ops: list[TCOp], executor: Executor) -> int:
        failed = 0
        for op in ops:
            try:
                if op.op == "del-root":
                    self.tc.delete_root(link, QDISC)
                elif op.op == "root":
                    self.tc.replace_htb_root(link, QDISC, DEFAULT_MINOR)
                elif op.op == "del-filter" and op.filter is not None:
                    self.tc.delete_filter(link, op.filter)
                elif op.op == "del-class" and op.cls is not None:
                    self.tc.delete_class(link, op.cls)
                elif op.op in ("add-class", "change-class") and op.cls is not None:
                    self.tc.add_class(link, op.cls, replace=op.op == "change-class")
                elif op.op == "add-u32":
                    self.tc.add_u32_src(link, QDISC, POD_FILTER_PREF, op.ip, op.classid)
                elif op.op == "add-cgroup":
                    self.tc.add_cgroup(link, QDISC, CGROUP_FILTER_PREF, handle(MAJOR, 0))
            except NetlinkFailure as e:
                failed += 1
                self._count(op.op, f"error_{errno.errorcode.get(e.errno or 0, 'EIO')}")
                if op.op == "add-cgroup" and e.errno in _UNSUPPORTED_CLS:
                    self._cgroup_cls = False
                    log.warning("net qos: the kernel has no cgroup classifier (%s); host-network pods are not "
                                "classified", e.strerror)
                    continue
                self._op_bad(f"{op.op}:{op.describe()}", "tc write failed op=%s dev=%s %s error=%s; retrying",
                          op.op, link.name, op.describe(), e.strerror)
                continue
            self._count(op.op, "written")
            log.info("tc write op=%s dev=%s %s reason=%s", op.op, link.name, op.describe(), REASON)
            executor.record("node", REASON, f"tc dev {link.name}", "", f"{op.op} {op.describe()}")
        return failed

    def _write_net_cls(self, pods: list[PodNet], minors: Mapping[str, int], metas: Sequence[PodMeta],
                       executor: Executor) -> None:
        if not self._net_cls:
            return
        by_uid = {m.pod.uid: m for m in metas}
        updates: list[Update | None] = []
        for p in pods:
            value = net_cls_classid(p.cls, minors.get(p.uid) if p.egress > 0 else None)
            meta = by_uid.get(p.uid)
            if value is not None and meta is not None:
                updates.append(executor.cgroup(meta.cgroup_dir, "net_cls.classid", value, pod_owner(meta), REASON))
        executor.update(updates)

    def _tc_remove(self, why: str) -> None:
        inputs = ("off", self.interface)
        if self._fresh(inputs):
            return
        link = self._link()
        if link is None:
            return
        try:
            root = self.tc.root_qdisc(link)
            if root is not None and root.kind == "htb" and root.handle == QDISC:
                self.tc.delete_root(link, QDISC)
                self._count("del-root", "written")
                log.info("tc write op=del-root dev=%s qdisc=%s reason=%s (%s)", link.name, handle_str(QDISC),
                         REASON, why)
        except NetlinkFailure as e:
            self._count("del-root", f"error_{errno.errorcode.get(e.errno or 0, 'EIO')}")
            self._bad("tc", "net qos: removing htb %s from %s failed (%s); retrying", handle_str(QDISC), link.name,
                      e.strerror)
            self._converged = None
            return
        self._bad.forget("tc")
        self._minors = None
        self._converged = (inputs, self.clock())

    def _count(self, op: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.net_qos_tc_operations.labels(self.metrics.node, op, outcome).inc()

    # --- terway ---------------------------------------------------------------------------------------------

    def _terway_paths(self) -> tuple[str, str]:
        return os.path.join(self.terway_dir, TERWAY_NODE_FILE), os.path.join(self.terway_dir, TERWAY_POD_FILE)

    def _terway_write(self, bw: Bandwidth, metas: Sequence[PodMeta], limits: Mapping[str, tuple[int, int]],
                      executor: Executor) -> None:
        entries = {m.pod.uid: terway_pod_entry(m, *limits.get(m.pod.uid, (0, 0))) for m in metas}
        node_file, pod_file = self._terway_paths()
        executor.update([Update(node_file, terway_global_config(bw), "node", REASON, create=True),
                         Update(pod_file, terway_pods_json(entries), "node", REASON, create=True)])

    def _terway_remove(self, executor: Executor) -> None:
        for path in self._terway_paths():
            executor.remove(path, "node", f"{REASON} (netQOSPolicy is not terway-qos)")


def _build(ctx: Context) -> NetQOS:
    return NetQOS(ctx.paths, ctx.metrics, tc=ctx.config.gate("TCNetworkQoS"), terway=ctx.config.gate("TerwayQoS"),
                  terway_dir=ctx.config.terway_qos_dir)


PLUGIN = Plugin("net-qos", _build, gates=("TCNetworkQoS", "TerwayQoS"), probe=host_probe(probes.net_qos))
