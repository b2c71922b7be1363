"""CPU and memory usage of the node, pods, containers, the BestEffort tier and the system remainder.

Facts: upstream's collectors in ``pkg/koordlet/metricsadvisor/collectors/``: ``noderesource``, ``podresource``,
``beresource``, ``hostapplication`` and ``sysresource``. Units as upstream: CPU in cores (float), memory in bytes;
counter-based values need a previous reading, so the first sample of each cgroup is skipped. Metric kinds written to the
metric cache:

==========================  ======================================================================
node_cpu_usage              /proc/stat busy ticks (user+nice+system+irq+softirq) per wall second
node_memory_usage           (MemTotal − MemAvailable) × 1024
node_numa_cpu_usage         busy ticks of the cpuN lines of /proc/stat, summed per NUMA node {numa_node_id}
node_numa_memory_usage      nodeN/meminfo MemTotal − (MemFree + file LRU + SReclaimable)  {numa_node_id}
pod_cpu_usage               Δ cumulative cgroup CPU ns / Δ wall ns              {pod_uid}
pod_memory_usage            memory.stat anon + unevictable (upstream's usage)   {pod_uid}
pod_memory_working_set      usage − inactive_file (kubelet's working set)       {pod_uid}
container_*                 the same three per container (and YARN container)   {container_id}
node_be                     BE tier cpu usage / request / real-limit, milli-cores {be_resource,be_allocation}
host_application_cpu_usage / host_application_memory_usage (anon, as pods) /
host_application_memory_usage_with_page_cache (anon + file)   per NodeSLO host application {host_app_name}
sys_cpu_usage, sys_memory_usage   node − Σ pods − Σ host apps, ≥ 0, only from inputs fresher than the outdated
                                  interval
sys_numa_cpu_usage          sys_cpu_usage × this node's share of Σ node_numa_cpu_usage   {numa_node_id}
sys_numa_memory_usage       node_numa_memory_usage − Σ pods' memory on that node, ≥ 0    {numa_node_id}
==========================  ======================================================================

The per-NUMA system usage follows upstream's SystemResourceCollector (collectSysNUMAResUsed): written only in a
cycle that wrote the node-level system usage, from NUMA and pod readings fresher than the outdated interval; CPU
is apportioned because no cgroup reports CPU time per NUMA node; host applications are not subtracted per NUMA
node (upstream has no per-NUMA figure for them either). Where we differ, and why:

* a pod's memory on a node is the same memory ``pod_memory_usage`` counts (anon LRU + unevictable: the
  ``hierarchical_anon`` + ``hierarchical_unevictable`` lines of v1 ``memory.numa_stat``, ``inactive_anon`` +
  ``active_anon`` + ``unevictable`` of v2). Upstream subtracts v1's plain ``total`` line (its own pages only: 0
  for a pod whose processes sit in container cgroups, so nothing was subtracted) and v2's ``anon`` + ``file``
  (page cache, which ``node_numa_memory_usage`` already leaves out, so it was subtracted twice);
* the pods' per-NUMA sum is published only when every pod with a memory reading also had a NUMA reading (as the
  pods' CPU sum), including a node with no pods; upstream sums the pods it could read and skips the memory part
  when there were none.

Pods' ``memory.numa_stat`` is read only when the NUMA collector has nodes to report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, Tick, collecting
from koordlet.host.cgroup import Cgroups, KubeQOS, MemoryUsage, UsageFiles, parse_cpu_list
from koordlet.host.fs import vanished
from koordlet.host.paths import HostPaths
from koordlet.host.procfs import CLK_TCK, node_memory_used_bytes, read_cpu_stat, read_meminfo
from koordlet.host.topology import Topology, numa_memory_used_bytes, read_node_meminfo, read_topology
from koordlet.metriccache import Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.ops.metrics.exposition import GaugeCycle
from koordlet.states.hostapps import HostApp
from koordlet.states.informer import PodMeta

log = logging.getLogger(__name__)

NO_LABELS: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class Reading:
    """Latest value of a summed quantity, with the wall time it was taken (for staleness checks)."""
    ts: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0


@dataclass(slots=True)
class NumaReading:
    """Latest per-NUMA-node values (node id -> cores / bytes), with the wall time they were taken."""
    ts: float = 0.0
    cpu: dict[int, float] = field(default_factory=dict)
    memory: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True)
class SharedState:
    """What one collector publishes for another in the same cycle (upstream's SharedState)."""
    node: Reading = field(default_factory=Reading)
    pods: Reading = field(default_factory=Reading)
    host_apps: Reading = field(default_factory=Reading)
    numa: NumaReading = field(default_factory=NumaReading)         # node usage per NUMA node
    pods_numa: NumaReading = field(default_factory=NumaReading)    # Σ pods' memory per NUMA node


class NodeCollector:
    name = "node"

    def __init__(self, paths: HostPaths, shared: SharedState, metrics: AgentMetrics) -> None:
        self._paths = paths
        self._shared = shared
        self._metrics = metrics
        self._prev: tuple[int, float] | None = None     # (busy ticks, monotonic seconds)

    def collect(self, now: float, mono: float, busy: int) -> list[Sample]:
        """Node samples from the aggregate busy ticks (the caller's /proc/stat read, shared with NUMA) and
        /proc/meminfo."""
        memory = float(node_memory_used_bytes(read_meminfo(self._paths)))
        samples = [Sample("node_memory_usage", NO_LABELS, now, memory)]
        prev, self._prev = self._prev, (busy, mono)
        self._metrics.node_used_memory_bytes.labels(self._metrics.node).set(memory)
        if prev is None or mono <= prev[1]:
            return samples
        cores = max(busy - prev[0], 0) / ((mono - prev[1]) * CLK_TCK)
        samples.append(Sample("node_cpu_usage", NO_LABELS, now, cores))
        self._metrics.node_used_cpu_cores.labels(self._metrics.node).set(cores)
        self._shared.node = Reading(now, cores, memory)
        return samples


class NUMACollector:
    """CPU and memory usage of each NUMA node (upstream's ``collectNodeNUMAResUsed``).

    CPU: the busy ticks of each online CPU's ``cpuN`` line, summed over the CPUs of a node, per wall second.
    A CPU counts only when it was in both readings with a non-decreasing counter and has a node: offline CPUs
    have no line, and a CPU onlined since the previous cycle has no delta yet. A node gets a CPU sample when at
    least one of its CPUs counted, so CPU-less memory nodes never get one (and so never reach numaUsages, as
    upstream). Memory: ``numa_memory_used_bytes`` of the meminfo of every node that has CPUs or memory.

    The CPU → node map and the node list come from the topology read once at start (upstream re-reads
    lscpu every 60 s; CPU and memory hotplug onto a new node needs a restart here). Without NUMA directories
    in sysfs (a kernel built without NUMA) there is nothing to read and the collector yields nothing; upstream
    reports no numaUsages there either (its NUMA info read fails).
    """
    name = "numa"

    def __init__(self, paths: HostPaths, topology: Topology, metrics: AgentMetrics,
                 shared: SharedState | None = None) -> None:
        self._paths = paths
        self._metrics = metrics
        self._shared = shared if shared is not None else SharedState()
        nodes, cpus = (topology.nodes, topology.cpus) if topology.numa_from_sysfs else ((), ())
        self._node_of = {c.id: c.node for c in cpus if c.node is not None}
        # a node with neither CPUs nor memory (an ACPI generic initiator, which upstream skips) has no usage;
        # public because these meminfo files are part of what a cycle reads (bench/collect_cycle.py's floor)
        self.memory_nodes = tuple(n.id for n in nodes if n.cpus or n.meminfo.get("MemTotal"))
        self._labels = {n.id: (("numa_node_id", str(n.id)),) for n in nodes}
        self._prev: tuple[dict[int, int], float] | None = None    # (busy ticks per CPU, monotonic seconds)
        self._errors = LogOnce(log)

    def collect(self, now: float, mono: float, per_cpu: dict[int, int]) -> list[Sample]:
        """NUMA samples; ``per_cpu`` is the per-CPU busy ticks of this cycle's /proc/stat read."""
        samples: list[Sample] = []
        memory: dict[int, float] = {}
        for node in self.memory_nodes:
            key = f"node{node}"
            try:
                used = numa_memory_used_bytes(read_node_meminfo(self._paths, node))
            except (OSError, KeyError) as e:
                self._metrics.skipped(self.name, "error")
                self._errors(key, "numa node memory unreadable node=%d error=%r", node, e)
                continue
            self._errors.forget(key)
            memory[node] = float(used)
            samples.append(Sample("node_numa_memory_usage", self._labels[node], now, float(used)))
        prev, self._prev = self._prev, (per_cpu, mono)
        if prev is None or mono <= prev[1]:
            self._publish(now, {}, memory)
            return samples
        last, node_of = prev[0], self._node_of
        delta: dict[int, int] = {}
        for cpu, ticks in per_cpu.items():
            numa, before = node_of.get(cpu), last.get(cpu)
            if numa is None or before is None or ticks < before:
                continue
            delta[numa] = delta.get(numa, 0) + ticks - before
        period_ticks = (mono - prev[1]) * CLK_TCK
        cores = {node: ticks / period_ticks for node, ticks in sorted(delta.items())}
        samples += [Sample("node_numa_cpu_usage", self._labels[node], now, v) for node, v in cores.items()]
        self._publish(now, cores, memory)
        return samples

    def _publish(self, now: float, cpu: dict[int, float], memory: dict[int, float]) -> None:
        """For the system collector; a cycle that read nothing leaves the previous reading to go stale (upstream's
        UpdateNodeNUMAUsage is skipped then too)."""
        if cpu or memory:
            self._shared.numa = NumaReading(now, cpu, memory)


class CgroupUsage:
    """Reads one cgroup's CPU counter and memory, remembering the previous counter for the rate.

    Paths are computed once per cgroup and kept while the cgroup is seen; readings of cgroups not seen for
    ``ttl`` seconds are forgotten (upstream keeps them 20 collection intervals).
    """

    def __init__(self, cgroups: Cgroups, ttl: float) -> None:
        self._cgroups = cgroups
        self._ttl = ttl
        self._state: dict[str, tuple[UsageFiles, int, float, float]] = {}   # rel -> files, ns, mono, seen

    def read(self, rel: str, mono: float) -> tuple[float | None, MemoryUsage]:
        """(cpu cores or None on first reading, MemoryUsage); OSError/ValueError propagate to the caller."""
        entry = self._state.get(rel)
        files = entry[0] if entry else self._cgroups.usage_files(rel)
        ns = self._cgroups.read_cpu_ns(files)
        memory = self._cgroups.read_memory(files)
        self._state[rel] = (files, ns, mono, mono)
        if entry is None or mono <= entry[2]:
            return None, memory
        return max(ns - entry[1], 0) / ((mono - entry[2]) * 1e9), memory

    def known(self) -> Iterable[str]:
        return self._state.keys()

    def expire(self, mono: float) -> None:
        stale = [rel for rel, e in self._state.items() if mono - e[3] > self._ttl]
        for rel in stale:
            del self._state[rel]


class _CgroupCollector:
    """A collector of cgroups that come and go (pods, host applications): readings expire after 20 intervals."""
    name = ""

    def __init__(self, cgroups: Cgroups, shared: SharedState, metrics: AgentMetrics, interval: float) -> None:
        self._usage = CgroupUsage(cgroups, ttl=20 * max(interval, 1.0))
        self._shared = shared
        self._metrics = metrics
        self._errors = LogOnce(log)


class PodCollector(_CgroupCollector):
    """Pods and their containers; with ``numa``, also the pods' memory per NUMA node (for the system collector).

    A NodeManager pod's YARN containers (``Container.yarn``) are containers like the others here, and also count in
    their pod's usage when their dirs lie outside the pod's (yarn-copilot's ``hadoop-yarn`` dir beside the pods):
    the pod's series are then its whole footprint, so the BestEffort usage of the NodeMetric, the pods' sum the
    system remainder subtracts and the eviction order see each YARN container once. One below a host application's
    dir (the ``hadoop-yarn`` host application of upstream's set-up) is that application's, and not added."""
    name = "pod"

    def __init__(self, cgroups: Cgroups, shared: SharedState, metrics: AgentMetrics, interval: float,
                 numa: bool = False) -> None:
        super().__init__(cgroups, shared, metrics, interval)
        self._cgroups = cgroups
        self._numa = numa
        self._numa_errors = LogOnce(log)
        self._yarn = GaugeCycle(metrics.yarn_container_resource_usage)

    def collect(self, now: float, mono: float, pods: Iterable[PodMeta], apps: Iterable[str] = ()) -> list[Sample]:
        """``apps``: the host applications' dirs (their collector counts what is below them)."""
        try:
            return self._collect(now, mono, pods, tuple(f"{rel}/" for rel in apps))
        finally:
            self._yarn.publish()

    def _collect(self, now: float, mono: float, pods: Iterable[PodMeta], apps: tuple[str, ...]) -> list[Sample]:
        samples: list[Sample] = []
        append = samples.append
        sum_cpu = sum_mem = 0.0
        counts = {"vanished": 0, "error": 0}
        complete = True
        numa: dict[int, float] | None = {} if self._numa else None
        node = self._metrics.node
        for meta in pods:
            uid_labels = (("pod_uid", meta.pod.uid),)
            cpu, mem = self._read(meta.cgroup_dir, mono, counts)
            outside: list[tuple[float | None, MemoryUsage, str]] = []      # YARN containers beside the pod dir
            # containers are read even when the pod dir failed: one bad file must not hide the others
            for container, rel in meta.containers:
                c_labels = (("container_id", container.id),)
                c_cpu, c_mem = self._read(rel, mono, counts)
                if c_mem is None:
                    continue
                append(Sample("container_memory_usage", c_labels, now, float(c_mem.anon)))
                append(Sample("container_memory_working_set", c_labels, now, float(c_mem.working_set)))
                if c_cpu is not None:
                    append(Sample("container_cpu_usage", c_labels, now, c_cpu))
                if container.yarn:
                    self._yarn.set((node, wire.YARN_NAMESPACE, container.name, "memory"), float(c_mem.anon))
                    if c_cpu is not None:
                        self._yarn.set((node, wire.YARN_NAMESPACE, container.name, "cpu"), c_cpu)
                    if not rel.startswith(f"{meta.cgroup_dir}/") and not rel.startswith(apps):
                        outside.append((c_cpu, c_mem, rel))
            if mem is not None:
                if numa is not None:
                    for rel in (meta.cgroup_dir, *(rel for _, _, rel in outside)):
                        numa = self._add_numa(rel, numa) if numa is not None else None
                anon = mem.anon + sum(m.anon for _, m, _ in outside)
                append(Sample("pod_memory_usage", uid_labels, now, float(anon)))
                append(Sample("pod_memory_working_set", uid_labels, now,
                              float(mem.working_set + sum(m.working_set for _, m, _ in outside))))
                sum_mem += anon
                if cpu is None or any(c is None for c, _, _ in outside):
                    complete = False
                else:
                    cpu += sum(c for c, _, _ in outside if c is not None)
                    append(Sample("pod_cpu_usage", uid_labels, now, cpu))
                    sum_cpu += cpu
        self._usage.expire(mono)
        self._errors.keep_only(self._usage.known())
        self._numa_errors.keep_only(self._usage.known())
        for reason, n in counts.items():
            self._metrics.skipped(self.name, reason, n)
        if complete:
            # a pod on its first reading has no CPU rate yet: publishing the sum would understate pods and
            # overstate the system remainder, so the previous sum stays until every pod has a rate
            self._shared.pods = Reading(now, sum_cpu, sum_mem)
        if numa is not None:       # the same rule for the per-NUMA memory sum: all pods, or keep the last one
            self._shared.pods_numa = NumaReading(now, memory=numa)
        return samples

    def _add_numa(self, rel: str, into: dict[int, float]) -> dict[int, float] | None:
        """``into`` with the pod's memory per NUMA node added, or None (this cycle has no complete sum) when its
        ``memory.numa_stat`` cannot be read; logged once per pod unless the pod just went away."""
        try:
            per_node = self._cgroups.read_numa_memory(rel)
        except (OSError, ValueError) as e:
            if not vanished(e):
                self._numa_errors(rel, "pod memory.numa_stat unreadable dir=%s error=%s", rel, e)
            return None
        self._numa_errors.forget(rel)
        for node, value in per_node.items():
            into[node] = into.get(node, 0.0) + value
        return into

    def _read(self, rel: str, mono: float, counts: dict[str, int]) -> tuple[float | None, MemoryUsage | None]:
        """One cgroup reading; a vanished cgroup (gone before the open, or removed mid-read: ENODEV) is normal churn
        (counted), anything else is logged once."""
        try:
            return self._usage.read(rel, mono)
        except (OSError, ValueError) as e:
            if vanished(e):
                counts["vanished"] += 1
                return None, None
            counts["error"] += 1
            self._errors(rel, "cgroup unreadable dir=%s error=%s", rel, e)
        return None, None


class BECollector:
    """The BestEffort tier as one unit: what BE suppress and eviction compare against."""
    name = "be"

    def __init__(self, cgroups: Cgroups, metrics: AgentMetrics) -> None:
        self._cgroups = cgroups
        self._metrics = metrics
        self._rel = cgroups.layout.qos_dir(KubeQOS.BESTEFFORT)
        self._usage = CgroupUsage(cgroups, ttl=float("inf"))
        self._cpu_counts: dict[str, int] = {}       # cpuset text -> CPUs in it (the same few lists every second)

    def collect(self, now: float, mono: float, pods: Iterable[PodMeta]) -> list[Sample]:
        pods = list(pods)
        try:
            cpu, _ = self._usage.read(self._rel, mono)
            real_limit = self._real_limit_milli(pods)
        except (OSError, ValueError) as e:
            if vanished(e):
                return []        # no BE tier on this node (yet)
            self._metrics.skipped(self.name, "error")
            log.debug("be tier unreadable error=%s", e)
            return []
        request = sum(m.pod.batch_cpu_request_milli for m in pods if m.pod.raw_qos_class == wire.QOS_BE)

        def sample(allocation: str, value: float) -> Sample:
            return Sample("node_be", (("be_allocation", allocation), ("be_resource", "cpu")), now, value)

        samples = [sample("real-limit", real_limit), sample("request", float(request))]
        if cpu is not None:
            samples.append(sample("usage", cpu * 1000))
            # upstream's BE resource collector records it too (cpu suppress reads it from the cache)
            self._metrics.be_suppress_be_used_cpu_cores.labels(self._metrics.node).set(cpu)
        return samples

    def _real_limit_milli(self, pods: list[PodMeta]) -> float:
        """min(CPUs of the smallest BE cpuset × 1000, BE quota / period × 1000) as upstream."""
        cpus = self._cpu_count(self._rel)
        for meta in pods:
            if meta.pod.kube_qos is not KubeQOS.BESTEFFORT:
                continue
            for _, rel in meta.containers:
                try:
                    cpus = min(cpus, self._cpu_count(rel) or cpus)
                except (OSError, ValueError):
                    continue
        limit = cpus * 1000.0
        quota, period = self._cgroups.read_cfs_quota(self._rel)
        if quota > 0 and period > 0:
            limit = min(limit, quota * 1000.0 / period)
        return limit

    def _cpu_count(self, rel: str) -> int:
        """CPUs in the cpuset of ``rel``, read each time; parsed once per distinct list (every BE container's is read
        each second, and they hold the same few lists)."""
        text = self._cgroups.read_cpuset(rel)
        count = self._cpu_counts.get(text)
        if count is None:
            if len(self._cpu_counts) >= 64:
                self._cpu_counts.clear()
            count = self._cpu_counts[text] = len(parse_cpu_list(text))
        return count


class HostAppCollector(_CgroupCollector):
    """CPU and memory of the NodeSLO's host applications (upstream's HostApplicationCollector)."""
    name = "hostapp"

    def __init__(self, cgroups: Cgroups, shared: SharedState, metrics: AgentMetrics, interval: float) -> None:
        super().__init__(cgroups, shared, metrics, interval)
        # published whole at the end of each cycle: an app removed from the NodeSLO disappears, and a scrape never
        # sees the family half refilled
        self._series = GaugeCycle(metrics.host_application_resource_usage)

    def collect(self, now: float, mono: float, apps: Iterable[HostApp]) -> list[Sample]:
        try:
            return self._collect(now, mono, apps)
        finally:
            self._series.publish()

    def _collect(self, now: float, mono: float, apps: Iterable[HostApp]) -> list[Sample]:
        samples: list[Sample] = []
        cpu_total = memory_total = 0.0
        node = self._metrics.node
        for app in apps:
            try:
                cpu, mem = self._usage.read(app.cgroup_dir, mono)
                self._errors.forget(app.name)
            except (OSError, ValueError) as e:
                self._metrics.skipped(self.name, "error")
                self._errors(app.name, "host application %s cgroup %s unreadable error=%s", app.name,
                             app.cgroup_dir, e)
                continue
            labels = (("host_app_name", app.name),)
            samples += [Sample("host_application_memory_usage", labels, now, float(mem.anon)),
                        Sample("host_application_memory_usage_with_page_cache", labels, now,
                               float(mem.with_page_cache))]
            memory_total += mem.anon
            self._series.set((node, app.name, "memory", app.priority, app.qos), float(mem.anon))
            if cpu is not None:
                samples.append(Sample("host_application_cpu_usage", labels, now, cpu))
                cpu_total += cpu
                self._series.set((node, app.name, "cpu", app.priority, app.qos), cpu)
        self._usage.expire(mono)
        self._shared.host_apps = Reading(now, cpu_total, memory_total)
        return samples


class SystemCollector:
    """Node usage not accounted to pods (kernel, daemons, the kubelet), clamped at 0 as upstream."""
    name = "system"

    def __init__(self, shared: SharedState, outdated: float) -> None:
        self._shared = shared
        self._outdated = outdated
        self._labels: dict[int, tuple[tuple[str, str], ...]] = {}

    def collect(self, now: float) -> list[Sample]:
        node, pods, apps = self._shared.node, self._shared.pods, self._shared.host_apps
        if now - node.ts > self._outdated or now - pods.ts > self._outdated:
            return []
        app_cpu, app_memory = (apps.cpu, apps.memory) if now - apps.ts <= self._outdated else (0.0, 0.0)
        sys_cpu = max(node.cpu - pods.cpu - app_cpu, 0.0)
        return [Sample("sys_cpu_usage", NO_LABELS, now, sys_cpu),
                Sample("sys_memory_usage", NO_LABELS, now, max(node.memory - pods.memory - app_memory, 0.0)),
                *self._numa(now, sys_cpu)]

    def _numa(self, now: float, sys_cpu: float) -> list[Sample]:
        """Per-NUMA system usage (module docstring): nothing from a stale node NUMA reading; memory only with a
        fresh pods' sum."""
        numa, pods = self._shared.numa, self._shared.pods_numa
        if now - numa.ts > self._outdated:
            return []
        samples = []
        if now - pods.ts <= self._outdated:
            samples += [Sample("sys_numa_memory_usage", self._label(n), now, max(used - pods.memory.get(n, 0.0), 0.0))
                        for n, used in numa.memory.items()]
        total = sum(numa.cpu.values())
        samples += [Sample("sys_numa_cpu_usage", self._label(n), now, sys_cpu * cores / total if total > 0 else 0.0)
                    for n, cores in numa.cpu.items()]
        return samples

    def _label(self, node: int) -> tuple[tuple[str, str], ...]:
        lb = self._labels.get(node)
        if lb is None:
            lb = self._labels[node] = (("numa_node_id", str(node)),)
        return lb


class UsageCollection:
    """The main collection cycle (upstream's node, pod, BE and system resource collectors). One cycle runs node (and
    NUMA) → pods → BE → system in order, so the system remainder uses same-cycle inputs. ``topology`` (read here
    when not given) gives the NUMA collector its CPU → node map."""

    def __init__(self, paths: HostPaths, cgroups: Cgroups, metrics: AgentMetrics, *, interval: float,
                 outdated: float, topology: Topology | None = None) -> None:
        self._paths = paths
        self.shared = SharedState()
        self.node = NodeCollector(paths, self.shared, metrics)
        self.numa = NUMACollector(paths, topology or read_topology(paths), metrics, self.shared)
        self.pod = PodCollector(cgroups, self.shared, metrics, interval, numa=bool(self.numa.memory_nodes))
        self.be = BECollector(cgroups, metrics)
        self.host_apps = HostAppCollector(cgroups, self.shared, metrics, interval)
        self.system = SystemCollector(self.shared, outdated)
        self._metrics = metrics
        self._errors = LogOnce(log)

    name = "usage"

    def collect(self, tick: Tick) -> list[Sample]:
        start = time.perf_counter()
        now, mono, pods = tick.now, time.monotonic(), tick.pods
        samples: list[Sample] = []
        try:
            stat = read_cpu_stat(self._paths)          # one read of /proc/stat serves node and NUMA
            samples += self.node.collect(now, mono, stat.busy)
            samples += self.numa.collect(now, mono, stat.per_cpu)
            self._errors.forget("node")
        except (OSError, ValueError, KeyError) as e:
            self._metrics.skipped("node", "error")
            self._errors("node", "node usage unreadable error=%s", e)
        samples += self.pod.collect(now, mono, pods, (app.cgroup_dir for app in tick.host_apps))
        samples += self.be.collect(now, mono, pods)
        samples += self.host_apps.collect(now, mono, tick.host_apps)
        samples += self.system.collect(now)
        self._metrics.collect_cycle_seconds.labels(self._metrics.node).observe(time.perf_counter() - start)
        return samples


def _build(ctx: Context) -> UsageCollection:
    return UsageCollection(ctx.paths, ctx.cgroups, ctx.metrics, interval=ctx.config.collect_res_used_interval,
                           outdated=ctx.config.collect_sys_metric_outdated_interval, topology=ctx.node.topology)


PLUGIN = Plugin("usage", _build, when=collecting, period=lambda c: c.collect_res_used_interval, primary=True)
