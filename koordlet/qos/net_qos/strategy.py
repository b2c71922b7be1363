"""Strategy ``net-qos``: each cycle, the tc half reads the link's qdiscs, classes and filters and makes only the
changes the plan needs (:mod:`.htb`), writes ``net_cls.classid``; the Terway half writes Terway's files
(:mod:`.terway`). The rules and the differences from upstream are in the package docstring."""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.host.netlink import TC, Link, NetlinkFailure, handle, handle_str, net_cls_mounted
from koordlet.host.paths import HostPaths
from koordlet.qos.net_qos.config import Bandwidth, bandwidth, net_class, net_qos_policy, pod_limits
from koordlet.qos.net_qos.htb import (
    CGROUP_FILTER_PREF,
    DEFAULT_MINOR,
    MAJOR,
    POD_FILTER_PREF,
    QDISC,
    PodNet,
    TCOp,
    adopt_minors,
    assign_minors,
    net_cls_classid,
    tc_diff,
    tc_plan,
)
from koordlet.qos.net_qos.terway import (
    TERWAY_DIR,
    TERWAY_NODE_FILE,
    TERWAY_POD_FILE,
    terway_global_config,
    terway_pod_entry,
    terway_pods_json,
)
from koordlet.states.decode import DecodeError
from koordlet.states.informer import pod_owner
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import FORCE_REFRESH, Executor, Update

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta

log = logging.getLogger(__name__)

REASON = "net-qos"


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
        for meta in view.pods:
            try:
                parsed = meta.pod.decoded(pod_limits)            # once per pod version
            except DecodeError as e:
                self._pod_bad(meta.pod.uid, "pod %s: annotation %s; the pod keeps its class without a pod-level "
                              "limit", meta.pod.key, e)
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
