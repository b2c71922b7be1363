"""BE CPU suppress: shrink what the BestEffort tier may use so the other pods keep their share of the node.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress.go: CPUSuppress.suppressBECPU`` and
``pkg/koordlet/qosmanager/helpers/calculator.go``:

- suppress(BE) = capacity·threshold% − Σusage(non-BE pods) − Σusage(non-BE host apps) − systemUsed, with
  systemUsed = max(node − Σpods − Σhost apps, 0, nodeReserved) and nodeReserved = max(capacity − allocatable,
  the ``node.koordinator.sh/reservation`` annotation); floored at ``cpuSuppressMinPercent``·capacity when set.
  Each usage is the newest sample within 2 × the collect interval (upstream's "last" window).
- ``cpuset``: n = max(2, ceil(suppress cores)), at most ceil(10% of the CPUs) more than the BE QoS dir has now,
  split between LSR-pinned CPUs and the rest in proportion, picked per (NUMA node, socket) bucket preferring
  HT sibling pairs. kubelet policy none: the whole BestEffort subtree (QoS dir, pod dirs, container and sandbox
  dirs, found by walking the cpuset hierarchy as upstream does) gets union(old, new) top-down, then the new set
  bottom-up (``Executor.update_leveled`` with ``Merge.UNION``). Policy static: QoS and pod dirs get the full BE
  set, the container dirs the suppressed one.
- ``cfsQuota``: quota = suppress milli-cores·100 (period 100000), at least 2000, on the BestEffort QoS dir;
  skipped when within 1% of the node of the current value (unless 2000); an increase over a set quota is capped
  at 10% of the node per cycle. Always written (non-cacheable), and the BE cpusets go back to the full BE set.
- Disabled (``resourceUsedThresholdWithBE.enable`` false): quota −1 (once) and full BE cpusets everywhere.
  Switching policy resets the other one the same way.

The numbers are upstream's; pure functions below compute them so the tables in the tests pin them down.

Beyond upstream (documented differences):

- The full BE set is the ``be-cpu-shared-pools`` this agent reports (``NodeView.be_pools``), so enforcement and
  the scheduler's view agree; it also leaves out CPUs the kubelet static policy pinned, which upstream's
  ``calcBECPUSet`` hands to BE. Without pools (nothing reported yet) it is computed as upstream.
- Standalone (no Node object): the capacity is the number of online CPUs.
- Upstream divides by zero (a Go panic) when every CPU is reserved or LSE-pinned; we log and skip the cycle.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import milli
from koordlet.component import Context, Plugin, collecting
from koordlet.host.cgroup import KubeQOS, format_cpu_list, parse_cpu_list
from koordlet.metriccache import EmptyError, MetricCache
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.informer import pod_owner
from koordlet.states.nodestate import NodeView
from koordlet.states.pod import resource_status
from koordlet.states.pools import all_cpus
from koordlet.writer.executor import Update

if TYPE_CHECKING:
    from koordlet.host.topology import Topology
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.node import NodeInfo
    from koordlet.states.nodeslo.schema import HostApplicationSpec
    from koordlet.states.pod import Pod
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

REASON = "cpu-suppress"
QOS_OWNER = "qos besteffort"
CFS_PERIOD = 100000                      # system.DefaultCPUCFSPeriod: upstream never reads the real period
BE_MIN_CPUSET_CORES = 2
BE_MIN_QUOTA = 2000
BE_MAX_INCREASE_CPU_PERCENT = 0.1
SUPPRESS_BYPASS_QUOTA_DELTA_RATIO = 0.01
UNSET_QUOTA = -1
CONTAINER_DEPTH = 2                      # below the BestEffort QoS dir: pods at 1, their containers at 2

_USING, _RECOVERED = "using", "recovered"


# --------------------------------------------------------------------------------------------------
# pure decisions
# --------------------------------------------------------------------------------------------------

def is_non_be_pod(pod: Pod) -> bool:
    """Upstream's NonBEPodFilter: not BE by label and not Kubernetes BestEffort."""
    return pod.raw_qos_class != wire.QOS_BE and pod.kube_qos is not KubeQOS.BESTEFFORT


def is_non_be_host_app(app: HostApplicationSpec) -> bool:
    """A host app is BE only when its qos is BE *and* it runs under the BestEffort dir."""
    return (app.qos != wire.QOS_BE or app.cgroup_path is None
            or app.cgroup_path.base != wire.CGROUP_BASE_KUBE_BESTEFFORT)


@dataclass(frozen=True)
class FilteredUsage:
    """CPU cores used by the non-BE part of the node, as upstream's CalculateFilterPodsUsed splits it."""
    pods: float
    host_apps: float
    system: float


def filter_used(node_used: float, node_reserved: float, pod_used: Mapping[str, float],
                non_be_pods: Iterable[str], host_app_used: Mapping[str, float],
                non_be_host_apps: Iterable[str]) -> FilteredUsage:
    """Σ non-BE pods, Σ non-BE host apps, and systemUsed = max(node − Σ all pods − Σ all apps, 0, reserved).

    ``pod_used`` holds only pods with a sample; a pod missing from it counts for nothing (upstream).
    """
    non_be = set(non_be_pods)
    apps_non_be = set(non_be_host_apps)
    pods_all = sum(pod_used.values())
    pods_filtered = sum(v for uid, v in pod_used.items() if uid in non_be)
    apps_all = sum(host_app_used.values())
    apps_filtered = sum(v for name, v in host_app_used.items() if name in apps_non_be)
    system = max(node_used - pods_all - apps_all, 0.0)
    return FilteredUsage(pods_filtered, apps_filtered, max(system, node_reserved))


def be_suppress_milli(capacity_milli: int, threshold_percent: int, min_percent: int | None,
                      used: FilteredUsage) -> int:
    """suppress(BE) in milli-cores; each usage truncated to milli-cores first, as upstream's Quantities are.

    May be negative when ``cpuSuppressMinPercent`` is unset (the cpuset and quota rules then apply their
    minimums)."""
    value = capacity_milli * threshold_percent // 100
    value -= int(used.pods * 1000) + int(used.host_apps * 1000) + int(used.system * 1000)
    if min_percent is not None:
        value = max(value, capacity_milli * min_percent // 100)
    return value


def be_cpuset_size(suppress_milli: int, current_size: int, total_cpus: int) -> int:
    """n = max(2, ceil(cores)), grown by at most ceil(10% of the node's CPUs) over the current BE cpuset."""
    n = max(math.ceil(suppress_milli / 1000), BE_MIN_CPUSET_CORES)
    max_increase = math.ceil(total_cpus * BE_MAX_INCREASE_CPU_PERCENT)
    if n - current_size > max_increase:
        n = current_size + max_increase
    return n


@dataclass(frozen=True, slots=True)
class Processor:
    """One online CPU as upstream's lscpu-based ProcessorInfo sees it."""
    cpu: int
    core: int              # node-wide logical core index (lscpu CORE): HT siblings share it
    socket: int
    node: int


def processors_of(topology: Topology) -> list[Processor]:
    """Online CPUs by id; a field sysfs did not give is 0 (core: the CPU id, so it pairs with nobody)."""
    return [Processor(c.id, c.core if c.core is not None else c.id, c.socket or 0, c.node or 0)
            for c in sorted(topology.cpus, key=lambda c: c.id) if c.online]


def select_cpus(count: int, processors: Sequence[Processor]) -> list[int]:
    """Upstream's calculateBESuppressCPUSetPolicy: ``count`` CPUs spread over (NUMA, socket) buckets.

    Buckets are visited biggest first (ties: lowest first CPU), round-robin: first whole HT pairs (adjacent
    CPUs of one core in (core, cpu) order) while two or more are needed, then single CPUs. Returns the CPUs in
    pick order; [] when fewer processors than ``count`` are available.
    """
    total = len(processors)
    if total < count:
        return []
    by_index: dict[int, list[Processor]] = {}
    for p in processors:
        # upstream's bucket index, collisions included: (node + #processors) * (socket + 1)
        by_index.setdefault((p.node + total) * (p.socket + 1), []).append(p)
    buckets = [sorted(b, key=lambda p: (p.core, p.cpu)) for b in by_index.values()]
    buckets.sort(key=lambda b: (-len(b), b[0].cpu))
    picked: list[int] = []
    used: set[int] = set()
    need = count
    if not buckets:
        return picked
    i, previous = 0, -1
    while need > 1:                                    # pairs of HT siblings
        if i == 0:
            if previous == need:
                break
            previous = need
        bucket = buckets[i]
        for j in range(len(bucket) - 1):
            if bucket[j].cpu in used:
                continue
            if bucket[j].core == bucket[j + 1].core:
                picked += [bucket[j].cpu, bucket[j + 1].cpu]
                used.update((bucket[j].cpu, bucket[j + 1].cpu))
                need -= 2
                break
        i = (i + 1) % len(buckets)
    start, previous = i, -1
    while need > 0:                                    # single CPUs
        if i == start:
            if previous == need:
                break
            previous = need
        for p in buckets[i]:
            if p.cpu not in used:
                picked.append(p.cpu)
                used.add(p.cpu)
                need -= 1
                break
        i = (i + 1) % len(buckets)
    return picked


def be_suppress_cpuset(suppress_milli: int, current_size: int, total_cpus: int,
                       lsr: Sequence[Processor], others: Sequence[Processor]) -> list[int]:
    """The suppressed BE cpuset (sorted): n CPUs split between LSR-pinned CPUs and the rest by their counts."""
    n = be_cpuset_size(suppress_milli, current_size, total_cpus)
    if not lsr and not others:
        return []
    from_lsr = n * len(lsr) // (len(lsr) + len(others))
    cpus: list[int] = []
    if from_lsr > 0:
        cpus += select_cpus(from_lsr, lsr)
    if n - from_lsr > 0:
        cpus += select_cpus(n - from_lsr, others)
    return sorted(cpus)


def be_cfs_quota(suppress_milli: int, current_quota: int, capacity_cores: int) -> int | None:
    """The BE QoS dir quota to write, or None to leave it (change within the 1% band)."""
    quota = max(suppress_milli * CFS_PERIOD // 1000, BE_MIN_QUOTA)
    min_delta = capacity_cores * CFS_PERIOD * SUPPRESS_BYPASS_QUOTA_DELTA_RATIO
    if abs(quota - current_quota) < min_delta and quota != BE_MIN_QUOTA:
        return None
    max_increase = capacity_cores * CFS_PERIOD * BE_MAX_INCREASE_CPU_PERCENT
    if quota - current_quota > max_increase and current_quota != UNSET_QUOTA:
        quota = current_quota + int(max_increase)
    return quota


def node_reserved_milli(node: NodeInfo, bad: LogOnce | None = None) -> int:
    """max(capacity − allocatable (≥ 0), the reservation annotation) for cpu, in milli-cores.

    The annotation's ``reservedCPUs`` (a cpu list) counts its CPUs and overrides ``resources.cpu``.
    """
    kubelet = 0
    if "cpu" in node.capacity and "cpu" in node.allocatable:
        try:
            kubelet = max(milli(node.capacity["cpu"]) - milli(node.allocatable["cpu"]), 0)
        except ValueError as e:
            if bad is not None:
                bad("node-capacity", "node %s cpu capacity/allocatable unreadable: %s; no kubelet reservation",
                    node.name, e)
    if not node.annotations.get(wire.ANNOTATION_NODE_RESERVATION):
        return kubelet
    try:
        annotated = _reserved_milli(node.annotations[wire.ANNOTATION_NODE_RESERVATION])
    except DecodeError as e:
        if bad is not None:
            bad(wire.ANNOTATION_NODE_RESERVATION, "node %s annotation %s; ignored", node.name, e)
        return kubelet
    return max(kubelet, annotated)


@decoder(wire.ANNOTATION_NODE_RESERVATION)
def _reserved_milli(raw: str) -> int:
    """The cpu the node reservation annotation reserves (milli-cores): its ``reservedCPUs`` count, else
    ``resources.cpu``."""
    key = wire.ANNOTATION_NODE_RESERVATION
    doc = decode.json_object(key, raw)
    annotated = 0
    resources = doc.get("resources")
    if isinstance(resources, dict) and "cpu" in resources:
        annotated = math.ceil(decode.quantity(key, resources["cpu"], "resources.cpu") * 1000)
    if doc.get("reservedCPUs"):
        annotated = 1000 * len(decode.cpu_list(key, str(doc["reservedCPUs"]), "reservedCPUs"))
    return annotated


def capacity_milli(view: NodeView, bad: LogOnce | None = None) -> int:
    """Node cpu capacity (milli-cores); standalone, or unreadable: the online CPUs."""
    raw = view.node.capacity.get("cpu")
    if raw is not None:
        try:
            value = milli(raw)
            if value > 0:
                return value
        except ValueError:
            pass
        if bad is not None:
            bad("capacity", "node %s cpu capacity %r unusable; using the %d online CPUs", view.node.name, raw,
                len(view.topology.online))
    return 1000 * len(view.topology.online)


def _system_exclusive(view: NodeView) -> set[int]:
    """``NodeView.system_cpus`` when the system-qos-resource cpuset is exclusive (its default)."""
    raw = view.node.annotations.get(wire.ANNOTATION_SYSTEM_QOS_RESOURCE)
    if raw:
        try:
            if decode.json_object(wire.ANNOTATION_SYSTEM_QOS_RESOURCE, raw).get("cpusetExclusive") is False:
                return set()
        except DecodeError:
            pass
    return set(view.system_cpus)


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------

class CPUSuppress:
    """Strategy ``cpu-suppress`` (gate ``BECPUSuppress``); call :meth:`reconcile` every suppress interval."""

    name = "cpu-suppress"

    def __init__(self, cache: MetricCache, collect_interval: float, metrics: AgentMetrics | None = None, *,
                 be_cpu_manager: bool = False) -> None:
        self._cache = cache
        self._window = 2 * collect_interval           # upstream's "last" query window
        self._metrics = metrics
        self._be_cpu_manager = be_cpu_manager         # gate BECPUManager: suppress steps aside
        self._status: dict[str, str] = {}             # policy -> using | recovered
        self._bad = LogOnce(log, logging.WARNING)
        self._last_target: str | None = None
        # the recovery's updates with what they were made from (BE dirs, cpu list, the pods): the same every cycle
        # while nothing changes, so they are built again only when one of those does
        self._recovery: tuple[tuple[object, ...], list[list[Update | None]]] | None = None

    # --- cycle ---------------------------------------------------------------------------------------

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        threshold = view.slo.resource_threshold
        if threshold is None or threshold.enable is None:
            self._bad("slo", "cpu suppress skipped: NodeSLO has no resourceUsedThresholdWithBE.enable")
            return
        self._bad.forget("slo")
        if self._be_cpu_manager:
            self._recover_quota(executor)
            self._recover_for_be_cpu_manager(view, executor)
            return
        if not threshold.enable:
            self._recover_quota(executor)
            self._recover_cpuset(view, executor, CONTAINER_DEPTH)
            self._last_target = None
            return
        if not view.pods:
            self._bad("pods", "cpu suppress skipped: no pods known")
            return
        self._bad.forget("pods")
        suppress = self._suppress_milli(view)
        if suppress is None:
            return
        if threshold.cpu_suppress_policy == wire.CPU_SUPPRESS_CFS_QUOTA:
            self._adjust_by_cfs_quota(view, executor, suppress)
            self._status[wire.CPU_SUPPRESS_CFS_QUOTA] = _USING
            self._recover_cpuset(view, executor, CONTAINER_DEPTH)
        else:
            self._adjust_by_cpuset(view, executor, suppress)
            self._status[wire.CPU_SUPPRESS_CPUSET] = _USING
            self._recover_quota(executor)

    # --- usage -----------------------------------------------------------------------------------------

    def _last(self, name: str, labels: Mapping[str, str] | None, now: float) -> float | None:
        try:
            return self._cache.query(name, labels, now - self._window, now).value("last")
        except EmptyError:
            return None

    def _suppress_milli(self, view: NodeView) -> int | None:
        now = view.now or time.time()
        node_used = self._last("node_cpu_usage", None, now)
        if node_used is None:
            self._bad("metrics", "cpu suppress skipped: no node_cpu_usage sample in the last %.0fs (collector "
                      "not running yet?)", self._window)
            return None
        if self._bad.forget("metrics"):
            log.info("cpu suppress resumed: node usage samples are back")
        pod_used: dict[str, float] = {}
        for meta in view.pods:
            value = self._last("pod_cpu_usage", {"pod_uid": meta.pod.uid}, now)
            if value is not None:
                pod_used[meta.pod.uid] = value
        apps_used: dict[str, float] = {}
        for app in view.slo.host_applications:
            if app.name:
                value = self._last("host_application_cpu_usage", {"host_app_name": app.name}, now)
                if value is not None:
                    apps_used[app.name] = value
        reserved = node_reserved_milli(view.node, self._bad) / 1000
        used = filter_used(node_used, reserved, pod_used,
                           (m.pod.uid for m in view.pods if is_non_be_pod(m.pod)), apps_used,
                           (a.name or "" for a in view.slo.host_applications if is_non_be_host_app(a)))
        threshold = view.slo.resource_threshold
        assert threshold is not None
        value = be_suppress_milli(capacity_milli(view, self._bad), threshold.cpu_suppress_threshold_percent or 0,
                                  threshold.cpu_suppress_min_percent, used)
        if self._metrics is not None:
            self._metrics.be_suppress_ls_used_cpu_cores.labels(self._metrics.node).set(used.pods)
        return value

    # --- cpu sets -----------------------------------------------------------------------------------------

    def _be_full_set(self, view: NodeView) -> list[int]:
        """All CPUs BE may use: the reported BE share pool, else online − reserved − exclusive system − LSE."""
        if view.be_pools:
            return list(all_cpus(view.be_pools))
        excluded = set(view.reserved_cpus) | _system_exclusive(view)
        for meta in view.pods:
            if meta.pod.raw_qos_class == wire.QOS_LSE:
                excluded |= self._pod_cpus(meta)
        return [c for c in view.topology.online if c not in excluded]

    def _pod_cpus(self, meta: PodMeta) -> set[int]:
        try:
            return set(meta.pod.decoded(resource_status).cpus)
        except DecodeError as e:
            self._bad(f"status/{meta.pod.uid}", "pod %s annotation %s; its cpuset is ignored", meta.pod.key, e)
            return set()

    def _adjust_by_cpuset(self, view: NodeView, executor: Executor, suppress: int) -> None:
        be_dir = executor.cgroups.layout.qos_dir(KubeQOS.BESTEFFORT)
        try:
            current = parse_cpu_list(executor.cgroups.read_cpuset(be_dir))
        except (OSError, ValueError) as e:
            self._bad("read-cpuset", "cpu suppress skipped: BestEffort cpuset of %s unreadable: %s", be_dir, e)
            return
        self._bad.forget("read-cpuset")
        lsr_cpus: set[int] = set()
        for meta in view.pods:
            if meta.pod.raw_qos_class == wire.QOS_LSR:
                lsr_cpus |= self._pod_cpus(meta)
        allowed = set(self._be_full_set(view))
        processors = processors_of(view.topology)
        lsr = [p for p in processors if p.cpu in allowed and p.cpu in lsr_cpus]
        others = [p for p in processors if p.cpu in allowed and p.cpu not in lsr_cpus]
        target = be_suppress_cpuset(suppress, len(current), len(processors), lsr, others)
        if not target:
            self._bad("empty", "cpu suppress skipped: no CPU left for BE (suppress=%dm, lsr=%d, others=%d)",
                      suppress, len(lsr), len(others))
            return
        self._bad.forget("empty")
        text = format_cpu_list(target)
        dirs = self._be_dirs(executor, CONTAINER_DEPTH)
        if dirs is None:
            return
        owners = self._owners(view)
        if view.cpu_manager_policy == "static":
            full = format_cpu_list(self._be_full_set(view))
            levels = [[self._cpuset(executor, rel, full if depth < CONTAINER_DEPTH else text, owners)
                       for depth, rel in dirs if depth == d] for d in range(CONTAINER_DEPTH + 1)]
        else:
            levels = [[self._cpuset(executor, rel, text, owners) for depth, rel in dirs if depth == d]
                      for d in range(CONTAINER_DEPTH + 1)]
        executor.update_leveled(levels)
        if self._metrics is not None:
            self._metrics.be_suppress_cpu_cores.labels(self._metrics.node, wire.CPU_SUPPRESS_CPUSET).set(
                len(target))
        self._changed(f"cpuset {text}", "cpu suppress policy=cpuset suppress=%dm cpus=%s kubelet_policy=%s",
                      suppress, text, view.cpu_manager_policy)

    def _recover_cpuset(self, view: NodeView, executor: Executor, max_depth: int) -> None:
        full = self._be_full_set(view)
        if not full:
            return
        dirs = self._be_dirs(executor, max_depth)
        if dirs is None:
            return
        text = format_cpu_list(full)
        key = (tuple(dirs), text, view.pods)
        if self._recovery is None or self._recovery[0] != key:
            owners = self._owners(view)
            self._recovery = (key, [[self._cpuset(executor, rel, text, owners) for depth, rel in dirs if depth == d]
                                    for d in range(max_depth + 1)])
        executor.update_leveled(self._recovery[1])
        self._status[wire.CPU_SUPPRESS_CPUSET] = _RECOVERED

    def _recover_for_be_cpu_manager(self, view: NodeView, executor: Executor) -> None:
        """QoS and pod dirs, and containers of pods without a resource-status cpuset/NUMA pinning, get the full
        BE set; the BE cpuset hook handles pinned pods."""
        full = self._be_full_set(view)
        dirs = self._be_dirs(executor, CONTAINER_DEPTH)
        if not full or dirs is None:
            return
        pinned = []
        for meta in view.pods:
            try:
                if meta.pod.decoded(resource_status).pinned:
                    pinned.append(meta.cgroup_dir)
            except DecodeError:
                continue
        text, owners = format_cpu_list(full), self._owners(view)
        keep = [(depth, rel) for depth, rel in dirs
                if depth < CONTAINER_DEPTH or not any(p and p in rel for p in pinned)]
        executor.update_leveled([[self._cpuset(executor, rel, text, owners) for depth, rel in keep if depth == d]
                                 for d in range(CONTAINER_DEPTH + 1)])
        self._status[wire.CPU_SUPPRESS_CPUSET] = _RECOVERED

    def _be_dirs(self, executor: Executor, max_depth: int) -> list[tuple[int, str]] | None:
        """(depth, relative dir) of the BestEffort cpuset subtree in lexical walk order (upstream walks the
        filesystem, so sandbox dirs and pods the informer does not know yet are included)."""
        cgroups = executor.cgroups
        root = cgroups.layout.qos_dir(KubeQOS.BESTEFFORT)
        if not cgroups.has_dir("cpuset", root):
            self._bad("be-dir", "cpu suppress: BestEffort cpuset dir %s does not exist", cgroups.path("cpuset", root))
            return None
        self._bad.forget("be-dir")
        out: list[tuple[int, str]] = []

        def walk(rel: str, depth: int) -> None:
            out.append((depth, rel))
            if depth >= max_depth:
                return
            for name in sorted(cgroups.children("cpuset", rel)):
                walk(f"{rel}/{name}", depth + 1)

        walk(root, 0)
        return out

    @staticmethod
    def _owners(view: NodeView) -> dict[str, str]:
        return {m.cgroup_dir: pod_owner(m) for m in view.pods if m.cgroup_dir}

    @staticmethod
    def _cpuset(executor: Executor, rel: str, value: str, owners: Mapping[str, str]) -> Update | None:
        """The update of one dir, owned by the pod whose dir is ``rel`` or one of its ancestors (else the QoS
        tier). Looked up by ancestor, not by scanning the pods: this runs for every BE dir every cycle."""
        owner = QOS_OWNER
        at = rel
        while at:
            name = owners.get(at)
            if name is not None:
                owner = name
                break
            at = at.rpartition("/")[0]
        return executor.cgroup(rel, "cpuset.cpus", value, owner, REASON)

    # --- cfs quota --------------------------------------------------------------------------------------

    def _adjust_by_cfs_quota(self, view: NodeView, executor: Executor, suppress: int) -> None:
        be_dir = executor.cgroups.layout.qos_dir(KubeQOS.BESTEFFORT)
        try:
            current = executor.cgroups.read_quota(be_dir)
        except (OSError, ValueError) as e:
            self._bad("read-quota", "cpu suppress skipped: BestEffort cfs quota of %s unreadable: %s", be_dir, e)
            return
        self._bad.forget("read-quota")
        cores = math.ceil(capacity_milli(view) / 1000)
        quota = be_cfs_quota(suppress, current, cores)
        if quota is None:
            return
        result = executor.update([executor.cgroup(be_dir, "cpu.cfs_quota_us", quota, QOS_OWNER, REASON,
                                                  cacheable=False)])
        if result.failed:
            return
        if self._metrics is not None:
            self._metrics.be_suppress_cpu_cores.labels(self._metrics.node, wire.CPU_SUPPRESS_CFS_QUOTA).set(
                quota / CFS_PERIOD)
        self._changed(f"quota {quota}", "cpu suppress policy=cfsQuota suppress=%dm quota=%d previous=%d",
                      suppress, quota, current)

    def _recover_quota(self, executor: Executor) -> None:
        if self._status.get(wire.CPU_SUPPRESS_CFS_QUOTA) == _RECOVERED:
            return
        be_dir = executor.cgroups.layout.qos_dir(KubeQOS.BESTEFFORT)
        result = executor.update([executor.cgroup(be_dir, "cpu.cfs_quota_us", UNSET_QUOTA, QOS_OWNER, REASON,
                                                  cacheable=False)])
        if result.failed:
            return
        self._status[wire.CPU_SUPPRESS_CFS_QUOTA] = _RECOVERED

    def _changed(self, key: str, message: str, *args: object) -> None:
        """One log line when the suppress target changes, not every cycle."""
        if key != self._last_target:
            self._last_target = key
            log.info(message, *args)


def _build(ctx: Context) -> CPUSuppress:
    return CPUSuppress(ctx.cache, ctx.config.collect_res_used_interval, ctx.metrics,
                       be_cpu_manager=ctx.config.gate("BECPUManager"))


PLUGIN = Plugin("cpu-suppress", _build, gates=("BECPUSuppress",), when=collecting)
