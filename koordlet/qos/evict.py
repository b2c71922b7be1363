"""Evictions under CPU and memory pressure: BECPUEvict, CPUAllocatableEvict, CPUEvict, BEMemoryEvict,
MemoryAllocatableEvict, MemoryEvict.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict.go: cpuEvictor``, ``memoryevict/memory_evict.go:
memoryEvictor`` and ``util/evict.go``; the eviction metadata from ``apis/extension/constants.go``:

- Every gate also needs ``resourceUsedThresholdWithBE.enable``. Memory runs BEMemoryEvict, MemoryAllocatableEvict
  then MemoryEvict with a 4 s cool-down after an eviction (none at start); CPU runs BECPUEvict,
  CPUAllocatableEvict then CPUEvict with a 20 s cool-down that also starts when the agent starts. Victims of all
  tasks of one cycle share one release account: a pod counted for one task is not picked again, and a pod
  evicted earlier that is still there counts as pending release.
- BECPUEvict: BE satisfaction = BE real limit (or the node's batch-cpu allocatable with ``evictByAllocatable``) /
  BE request, over the time window (average) and on the newest sample; it evicts when BE usage is ≥ the usage
  threshold (90%) of the limit and satisfaction < lower%, releasing request·(upper% − satisfaction) of batch-cpu
  requests, the smaller of the two estimates. Victims: raw-BE pods by spec.priority, then usage/request desc.
- CPUEvict: node usage% (window average) ≥ threshold releases capacity·(usage% − lower%) of pod usage. Victims:
  active pods with priority ≤ ``evictEnabledPriorityThreshold`` and the ``koordinator.sh/eviction-enabled=true``
  label, by eviction-priority, priority, the ``koordinator.sh/priority`` label, then usage desc.
- CPUAllocatableEvict / MemoryAllocatableEvict (``{cpu,memory}AllocatableEvict{Threshold,Lower}Percent`` and
  ``allocatableEvictPriorityThreshold`` ≤ 7999, all required): the requests of the pods whose priority (with
  default) is at most the threshold are summed per resource name (``kubernetes.io/batch-*`` for koord-batch pods,
  ``mid-*`` for koord-mid, native for the rest; containers and sidecars) and compared with the node's allocatable
  of that name; above threshold%, request − lower%·allocatable is released (all of it when the node has none of
  that resource). Victims as CPUEvict's, with priority ≤ ``allocatableEvictPriorityThreshold`` and largest
  request first; a victim releases its request of the resource it is over on.
- BEMemoryEvict / MemoryEvict: node memory% (newest sample) ≥ threshold (70) releases capacity·(usage% − lower%),
  lower defaulting to threshold − 2. BE victims by priority, then usage desc (pods without a sample last, by name
  desc); MemoryEvict victims as CPUEvict's, by memory usage.
- ``koordinator.sh/eviction-policy`` (a JSON list of gate names) restricts which gates may evict the pod; a value
  that does not parse means never.
- Action with a cluster: ``policy/v1`` Eviction with a UID precondition, then a Warning Event ``evictPodSuccess`` /
  ``evictPodFail`` from ``koordlet-qosManager`` whose message carries "trigger by koordlet feature <Gate>".
  A pod evicted is remembered for 2 min (upstream's cache) and while it is terminating, and not evicted again.

Beyond upstream (documented differences):

- Standalone (no API server): one log line and a counter per victim; processes are SIGKILLed only when
  ``kill_standalone`` is set, otherwise the line says "would evict" (a dry run that still honours cool-downs and
  the release account, so it shows what the cluster path would do). Upstream's default CRI StopContainer path
  is not implemented: with a cluster we always use the Eviction API (upstream's ``--only-evict-by-api``).
- [quirk fixed] Upstream's MemoryEvict stores each pod's memory usage ×1000, so the first victim always "covers"
  the release and one pod goes per cool-down. We account real bytes, so as many pods go as the release needs.
- A terminating pod (deletionTimestamp set) counts as already evicted, also for the BE victim lists.
- Standalone capacities: the online CPUs, and Σ NUMA MemTotal.
- Allocatable evictions: only the batch-*/mid-* resources are released. Upstream also sums native cpu/memory
  (pods below the priority threshold whose class is prod, e.g. spec.priority 1000), but its victims release
  nothing toward them, so a native overage makes upstream evict every candidate; here it is logged once and left.
  Only pods of a class that is over are candidates (upstream evicts, say, a koord-batch pod for a mid-cpu
  overage: it comes first by priority but releases nothing toward it). Pods that have finished (Succeeded/Failed)
  are not summed (upstream sums every pod the kubelet lists). A node
  whose allocatable is unknown (standalone, no Node object) is skipped instead of "has none of anything".
- Every eviction is an event of the audit log at verbosity 0 (gate AuditEvents), as upstream's evictor writes it:
  the pod, reason ``evicted``, message ``trigger by koordlet feature <Gate>, kill pod: <name>``.

YARN containers (``evict-by-copilot-agent``, koordinator's proposal
``docs/proposals/koordlet/20250528-support-evict-yarn-container.md``): when BECPUEvict, CPUEvict, BEMemoryEvict or
MemoryEvict would evict a YARN NodeManager pod (``evict-by-copilot-pod-label-key=-value``), the YARN Copilot agent
is first asked to free what the gate still needs (``/v1/killContainersByResource`` with batch-cpu in milli-cores,
batch-memory in bytes; the copilot kills the newest containers that are not an ApplicationMaster). What it says it
released counts (batch-cpu toward cpu or batch-cpu, batch-memory toward memory); the pod is evicted only when the
copilot fails or frees too little. Each request is one log line, an audit event of the pod (reason
``evictedYarnContainers``) and, when something was released, upstream's eviction families with that reason.
Differences from the proposal's branch: the NodeManager pod keeps its place in the victim order (the branch puts
it first), and the pod is still evicted when the copilot frees too little (the branch never evicts it); the
allocatable gates do not ask (killing YARN containers lowers no pod's request). The copilot is asked in
standalone mode too, whatever ``evict-standalone-kill`` says: it is the copilot that kills.

This module is the strategy and the eviction itself (the Eviction API and Event, the kill, the audit); who may be
evicted and in which order is :mod:`koordlet.qos.evict_victims`, how much each gate must release and the round's
shared release account :mod:`koordlet.qos.evict_release`.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.component import Context, Plugin, collecting
from koordlet.host.procfs import kill_cgroup_processes
from koordlet.metriccache import EmptyError, MetricCache
from koordlet.ops.audit import V_EVICT
from koordlet.ops.audit import Event as AuditEvent
from koordlet.ops.gates import COPILOT_EVICT_GATES
from koordlet.qos.cpu_suppress import capacity_milli
from koordlet.qos.evict_release import (
    RELEASABLE,
    TARGET_REQUEST,
    TARGET_USED,
    BECPUSample,
    EvictTask,
    Resources,
    allocatable_release,
    allocatable_value,
    be_cpu_release_milli,
    check_allocatable_config,
    check_be_cpu_config,
    check_cpu_config,
    check_memory_config,
    cpu_usage_release_milli,
    kill_and_evict,
    memory_release_bytes,
    remaining,
)
from koordlet.qos.evict_victims import (
    BE_CPU_EVICT,
    BE_MEMORY_EVICT,
    CPU_ALLOCATABLE_EVICT,
    CPU_EVICT,
    MEMORY_ALLOCATABLE_EVICT,
    MEMORY_EVICT,
    RES_BATCH_CPU,
    RES_CPU,
    RES_MEMORY,
    PodEvictInfo,
    be_cpu_victims,
    be_memory_victims,
    pod_request,
    priority_victims,
)
from koordlet.states.copilot import CopilotClient, CopilotError
from koordlet.states.nodestate import NodeView

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.kubeapi import KubeApi
    from koordlet.states.nodeslo.schema import ResourceThresholdStrategy
    from koordlet.states.pod import Pod
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

CPU_GATES = (BE_CPU_EVICT, CPU_ALLOCATABLE_EVICT, CPU_EVICT)              # upstream order
MEMORY_GATES = (BE_MEMORY_EVICT, MEMORY_ALLOCATABLE_EVICT, MEMORY_EVICT)

EVICTED = "evicted"
EVICTED_YARN = "evictedYarnContainers"             # the copilot killed YARN containers of a NodeManager pod
EVENT_SUCCESS, EVENT_FAIL = "evictPodSuccess", "evictPodFail"
EVENT_COMPONENT = "koordlet-qosManager"

CPU_COOL_DOWN, MEMORY_COOL_DOWN = 20.0, 4.0        # -cpu-evict-cool-time-seconds, -memory-evict-cool-time-seconds
EVICTED_TTL = 120.0                                 # upstream's expiring "pods evicted" cache
MIN_ALLOCATABLE_BATCH_MILLI = 1


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------

@dataclass
class _Remembered:
    at: float


@dataclass
class Evictor:
    """Strategy ``evict``: memory then CPU evictions each cycle, for the enabled gates only.

    ``api`` given: the cluster path (Eviction API + Event). None: standalone (log + counter, kill if
    ``kill_standalone``). ``copilot``: the YARN Copilot agent asked before a NodeManager pod (labelled
    ``node_manager``) is evicted. ``clock`` is monotonic seconds (cool-downs); metric windows use ``NodeView.now``.
    """

    cache: MetricCache
    collect_interval: float
    metrics: AgentMetrics | None = None
    gates: Iterable[str] = ()
    api: KubeApi | None = None
    node_name: str = ""
    kill_standalone: bool = False
    copilot: CopilotClient | None = None
    node_manager: tuple[str, str] = (wire.LABEL_COMPONENT, wire.COMPONENT_NODE_MANAGER)
    cpu_cool_down: float = CPU_COOL_DOWN
    memory_cool_down: float = MEMORY_COOL_DOWN
    evicted_ttl: float = EVICTED_TTL
    clock: Callable[[], float] = time.monotonic
    name: str = field(default="evict", init=False)
    _enabled: frozenset[str] = field(init=False)
    _last_cpu: float = field(init=False)
    _last_memory: float = field(init=False, default=-math.inf)
    _evicted: dict[str, _Remembered] = field(init=False, default_factory=dict)
    _bad: LogOnce = field(init=False, default_factory=lambda: LogOnce(log, logging.WARNING))

    def __post_init__(self) -> None:
        self._enabled = frozenset(self.gates)
        self._last_cpu = self.clock()          # upstream: the CPU cool-down also runs from start

    # --- cycle ---------------------------------------------------------------------------------------

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        now = self.clock()
        present = {m.pod.uid for m in view.pods}
        self._evicted = {uid: r for uid, r in self._evicted.items()
                         if uid in present and now - r.at < self.evicted_ttl}
        threshold = view.slo.resource_threshold
        if threshold is None or threshold.enable is None:
            self._bad("slo", "evictions skipped: NodeSLO has no resourceUsedThresholdWithBE.enable")
            return
        if not threshold.enable:
            return
        if self._enabled & set(MEMORY_GATES) and now >= self._last_memory + self.memory_cool_down:
            self._memory_round(view, executor, threshold, now)
        if self._enabled & set(CPU_GATES) and now - self._last_cpu >= self.cpu_cool_down:
            self._cpu_round(view, executor, threshold, now)

    def _memory_round(self, view: NodeView, executor: Executor, t: ResourceThresholdStrategy,
                      now: float) -> None:
        capacity = self._memory_capacity(view)
        if capacity <= 0:
            self._bad("memory-capacity", "memory evict skipped: node memory capacity unknown")
            return
        wall = view.now or time.time()
        tasks = []
        for gate in MEMORY_GATES:
            if gate not in self._enabled:
                continue
            if gate == MEMORY_ALLOCATABLE_EVICT:
                task = self._allocatable_task(gate, view, t, RES_MEMORY, wall)
                if task is not None:
                    tasks.append(task)
                continue
            problem = check_memory_config(t, needs_priority=gate == MEMORY_EVICT)
            if problem:
                self._bad(f"config/{gate}", "%s skipped: invalid NodeSLO config: %s", gate, problem)
                continue
            self._bad.forget(f"config/{gate}")
            used = self._last("node_memory_usage", None, wall)
            if used is None:
                self._bad(f"metrics/{gate}", "%s skipped: no node_memory_usage sample", gate)
                continue
            self._bad.forget(f"metrics/{gate}")
            release = memory_release_bytes(used, capacity, t)
            if release <= 0:
                continue
            pod_used = self._pod_values("pod_memory_usage", view, wall, 1)
            if gate == BE_MEMORY_EVICT:
                victims = be_memory_victims(view.pods, pod_used, gate, self._bad)
            else:
                victims = priority_victims(view.pods, gate, t.evict_enabled_priority_threshold or 0, pod_used,
                                           RES_MEMORY, self._bad)
            log.debug("%s: node memory %d%% of %d bytes, releasing %d bytes from %d candidates", gate,
                     int(used) * 100 // capacity, capacity, release, len(victims))
            tasks.append(EvictTask(gate, tuple(victims), {RES_MEMORY: release}, TARGET_USED,
                                   lambda i: {RES_MEMORY: i.memory_used}))
        if self._run(tasks, view, executor):
            self._last_memory = now

    def _cpu_round(self, view: NodeView, executor: Executor, t: ResourceThresholdStrategy,
                   now: float) -> None:
        cap = capacity_milli(view)
        if cap <= 0:
            self._bad("cpu-capacity", "cpu evict skipped: node cpu capacity unknown")
            return
        wall = view.now or time.time()
        interval = int(self.collect_interval)
        window = interval
        if t.cpu_evict_time_window_seconds is not None and t.cpu_evict_time_window_seconds > window:
            window = t.cpu_evict_time_window_seconds
        tasks = []
        for gate in CPU_GATES:
            if gate not in self._enabled:
                continue
            if gate == CPU_ALLOCATABLE_EVICT:
                task = self._allocatable_task(gate, view, t, RES_CPU, wall)
                if task is not None:
                    tasks.append(task)
                continue
            problem = check_be_cpu_config(t) if gate == BE_CPU_EVICT else check_cpu_config(t)
            if problem:
                self._bad(f"config/{gate}", "%s skipped: invalid NodeSLO config: %s", gate, problem)
                continue
            self._bad.forget(f"config/{gate}")
            if gate == BE_CPU_EVICT:
                release = be_cpu_release_milli(self._be_sample(wall - window, wall, "avg"),
                                               self._be_sample(wall - 2 * self.collect_interval, wall, "last"),
                                               t, self._batch_allocatable(view), window, interval)
                if release <= 0:
                    continue
                victims = be_cpu_victims(view.pods, self._pod_values("pod_cpu_usage", view, wall, 1000), gate,
                                         self._bad)
                log.debug("%s: BE satisfaction low, releasing %dm batch-cpu requests from %d candidates", gate,
                         release, len(victims))
                tasks.append(EvictTask(gate, tuple(victims), {RES_BATCH_CPU: release}, TARGET_REQUEST,
                                       lambda i: {RES_BATCH_CPU: i.milli_cpu_request}))
            else:
                try:
                    used = self.cache.query("node_cpu_usage", None, wall - window, wall).value("avg")
                except EmptyError:
                    self._bad(f"metrics/{gate}", "%s skipped: no node_cpu_usage sample", gate)
                    continue
                self._bad.forget(f"metrics/{gate}")
                release = cpu_usage_release_milli(used, cap, t)
                if release <= 0:
                    continue
                victims = priority_victims(view.pods, gate, t.evict_enabled_priority_threshold or 0,
                                           self._pod_values("pod_cpu_usage", view, wall, 1000), RES_CPU, self._bad)
                log.debug("%s: node cpu %.2f of %dm cores, releasing %dm from %d candidates", gate, used, cap,
                         release, len(victims))
                tasks.append(EvictTask(gate, tuple(victims), {RES_CPU: release}, TARGET_USED,
                                       lambda i: {RES_CPU: i.milli_cpu_used}))
        if self._run(tasks, view, executor):
            self._last_cpu = now

    def _allocatable_task(self, gate: str, view: NodeView, t: ResourceThresholdStrategy, resource: str,
                          wall: float) -> EvictTask | None:
        """CPUAllocatableEvict / MemoryAllocatableEvict: the requests of low-priority pods against the node's
        allocatable (no usage threshold: the node is over-committed, not busy)."""
        problem = check_allocatable_config(t, resource)
        if problem:
            self._bad(f"config/{gate}", "%s skipped: invalid NodeSLO config: %s", gate, problem)
            return None
        self._bad.forget(f"config/{gate}")
        if not view.node.allocatable:
            self._bad(f"allocatable/{gate}", "%s skipped: the node's allocatable is unknown (no Node object)", gate)
            return None
        allocatable: dict[str, int] = {}
        for name, raw in view.node.allocatable.items():
            try:
                allocatable[name] = allocatable_value(name, raw)
            except ValueError:
                self._bad(f"quantity/{name}", "node allocatable %s=%r unreadable; treated as none", name, raw)
        if resource == RES_CPU:
            threshold = t.cpu_allocatable_evict_threshold_percent or 0
            lower = t.cpu_allocatable_evict_lower_percent or 0
        else:
            threshold = t.memory_allocatable_evict_threshold_percent or 0
            lower = t.memory_allocatable_evict_lower_percent or 0
        priority_threshold = t.allocatable_evict_priority_threshold or 0
        release, stuck = allocatable_release((m.pod for m in view.pods), allocatable, threshold, lower,
                                             priority_threshold, resource)
        if stuck:
            self._bad(f"native/{gate}", "%s: requests of %s above their allocatable threshold cannot be released by "
                      "evicting batch or mid pods; left alone", gate, sorted(stuck))
        else:
            self._bad.forget(f"native/{gate}")
        if not release:
            return None
        classes = {RELEASABLE[name] for name in release}
        used = self._pod_values("pod_cpu_usage" if resource == RES_CPU else "pod_memory_usage", view, wall,
                                1000 if resource == RES_CPU else 1)
        # only pods of a class that is over: upstream walks every candidate and evicts a lower-priority pod that
        # releases nothing toward the overage before the pods that do
        victims = [v for v in priority_victims(view.pods, gate, priority_threshold, used, resource, self._bad,
                                               by_request=True) if v.pod.priority_class in classes]

        def released_by(info: PodEvictInfo) -> Resources:
            if info.pod.priority_class not in classes:
                return {}
            name, value = pod_request(info.pod, resource)
            return {name: value}

        log.debug("%s: requests over the allocatable threshold, releasing %s from %d candidates", gate, release,
                  len(victims))
        return EvictTask(gate, tuple(victims), {n: float(a) for n, a in release.items()}, TARGET_REQUEST,
                         released_by)

    def _run(self, tasks: list[EvictTask], view: NodeView, executor: Executor) -> bool:
        if not tasks:
            return False
        released, newly = kill_and_evict(tasks, self._is_evicted,
                                         lambda info, task: self._evict(info, task, executor),
                                         (lambda info, task, need: self._spare(info, task, need, executor))
                                         if self.copilot is not None else None)
        for task in tasks:
            left = remaining(task.to_release, released.get(task.target, {}))
            if left:       # under pressure with nothing (more) to evict: said once, not every cycle
                self._bad(f"short/{task.gate}", "%s cannot release enough: every one of its %d candidates is "
                          "evicted or failed (still missing %s)", task.gate, len(task.victims), sorted(left))
            elif self._bad.forget(f"short/{task.gate}"):
                log.info("%s released what it wanted", task.gate)
        return newly

    # --- inputs ---------------------------------------------------------------------------------------

    def _last(self, name: str, labels: Mapping[str, str] | None, now: float) -> float | None:
        try:
            return self.cache.query(name, labels, now - 2 * self.collect_interval, now).value("last")
        except EmptyError:
            return None

    def _pod_values(self, name: str, view: NodeView, now: float, scale: int) -> dict[str, int]:
        """Newest sample per pod (scaled to an int: cores ×1000 -> milli-cores); pods without one are absent."""
        out = {}
        for meta in view.pods:
            value = self._last(name, {"pod_uid": meta.pod.uid}, now)
            if value is not None:
                out[meta.pod.uid] = int(value * scale)
        return out

    def _be_sample(self, start: float, end: float, kind: str) -> BECPUSample:
        values, counts = [], []
        for allocation in ("usage", "request", "real-limit"):
            result = self.cache.query("node_be", {"be_resource": "cpu", "be_allocation": allocation}, start, end)
            try:
                values.append(result.value(kind))
                counts.append(result.count())
            except EmptyError:
                values.append(0.0)
                counts.append(0)
        return BECPUSample(values[0], values[1], values[2], min(counts))

    @staticmethod
    def _batch_allocatable(view: NodeView) -> float:
        """The node's batch-cpu allocatable (milli); -1 when unknown, 1 when zero (upstream)."""
        raw = view.node.allocatable.get(wire.BATCH_CPU)
        if raw is None:
            return -1
        try:
            q = parse_quantity(raw)
        except ValueError:
            return -1
        value = math.ceil(q)
        if value < 0:
            return -1
        return MIN_ALLOCATABLE_BATCH_MILLI if value == 0 else float(value)

    def _memory_capacity(self, view: NodeView) -> int:
        raw = view.node.capacity.get("memory")
        if raw is not None:
            try:
                return math.ceil(parse_quantity(raw))
            except ValueError:
                self._bad("memory-quantity", "node memory capacity %r unreadable; using the NUMA total", raw)
        return sum(n.mem_total_bytes for n in view.topology.nodes)

    # --- acting ---------------------------------------------------------------------------------------

    def _is_evicted(self, info: PodEvictInfo) -> bool:
        return info.pod.uid in self._evicted or info.pod.terminating

    def _count(self, gate: str, result: str, pod: Pod | None = None) -> None:
        """Every attempt in our family; ``pod`` when the eviction happened, for upstream's two families (their
        reason label is upstream's release reason, always "evicted")."""
        if self.metrics is not None:
            self.metrics.pod_eviction_attempts.labels(self.metrics.node, gate, result).inc()
            if pod is not None:
                self.metrics.evicted(pod.namespace, pod.name, EVICTED)

    def _evict(self, info: PodEvictInfo, task: EvictTask, executor: Executor) -> bool:
        pod = info.pod
        message = f"{task.reason}, kill pod: {pod.name}"
        detail = f"evict Pod:{pod.namespace}/{pod.name}, reason: {EVICTED}, message: {message}"
        if self.api is not None:
            self._audit(executor, pod, message)
            return self._evict_by_api(info, task, message, detail)
        if not self.kill_standalone:
            log.warning("would evict pod=%s uid=%s reason=%r (standalone, kill_standalone off)", pod.key, pod.uid,
                        task.reason)
            self._count(task.gate, "would_evict")
            self._evicted[pod.uid] = _Remembered(self.clock())
            return True
        self._audit(executor, pod, message)
        cgroup_dir = executor.cgroups.listing_dir(info.meta.cgroup_dir)
        try:
            signalled, problems = kill_cgroup_processes(cgroup_dir)
        except OSError as e:
            signalled, problems = 0, [str(e)]
        if problems and not signalled:
            log.error("evict pod=%s uid=%s reason=%r result=kill_failed cgroup=%s error=%s", pod.key, pod.uid,
                      task.reason, cgroup_dir, "; ".join(problems))
            self._count(task.gate, "kill_failed")
            return False
        log.warning("evict pod=%s uid=%s reason=%r result=killed processes=%d cgroup=%s%s", pod.key, pod.uid,
                    task.reason, signalled, cgroup_dir, f" problems={'; '.join(problems)}" if problems else "")
        self._count(task.gate, "killed", pod)
        self._evicted[pod.uid] = _Remembered(self.clock())
        return True

    def _spare(self, info: PodEvictInfo, task: EvictTask, need: Resources, executor: Executor) -> Resources:
        """What the copilot released toward ``need`` by killing YARN containers of ``info``'s pod when it is a
        NodeManager pod and the gate is one that may ask (see the module docstring); {} otherwise or on failure."""
        pod = info.pod
        key, value = self.node_manager
        if self.copilot is None or task.gate not in COPILOT_EVICT_GATES or pod.labels.get(key) != value:
            return {}
        cpu = math.ceil(need.get(RES_CPU, 0) or need.get(RES_BATCH_CPU, 0))
        memory = math.ceil(need.get(RES_MEMORY, 0))
        wanted = f"batch-cpu={cpu}m batch-memory={memory}"
        try:
            got = self.copilot.kill_by_resource(cpu, memory)
        except CopilotError as e:
            log.error("evict yarn containers pod=%s reason=%r wanted=%s result=failed error=%s; evicting the pod",
                      pod.key, task.reason, wanted, e)
            self._count(task.gate, "copilot_failed")
            return {}
        freed = {r: float(got.get(wire.BATCH_MEMORY if r == RES_MEMORY else wire.BATCH_CPU, 0)) for r in need}
        freed = {r: q for r, q in freed.items() if q > 0}
        result = "released" if freed else "released_nothing"
        released = f"batch-cpu={got.get(wire.BATCH_CPU, 0)}m batch-memory={got.get(wire.BATCH_MEMORY, 0)}"
        log.warning("evict yarn containers pod=%s reason=%r wanted=%s result=%s released=%s", pod.key,
                    task.reason, wanted, result, released)
        self._audit(executor, pod, f"{task.reason}, kill yarn containers of pod: {pod.name}, released {released}",
                    EVICTED_YARN)
        self._count(task.gate, f"copilot_{result}")
        if freed and self.metrics is not None:
            self.metrics.evicted(pod.namespace, pod.name, EVICTED_YARN)
        return freed

    @staticmethod
    def _audit(executor: Executor, pod: Pod, message: str, reason: str = EVICTED) -> None:
        """Upstream's evictor logs every eviction it attempts to the audit log at verbosity 0."""
        if executor.audit_log is not None:
            executor.audit_log.log(V_EVICT, AuditEvent(time.time(), "pod", pod.namespace, pod.name,
                                                       reason=reason, message=message))

    def _evict_by_api(self, info: PodEvictInfo, task: EvictTask, message: str, detail: str) -> bool:
        from koordlet.states.kubeapi import ApiError

        assert self.api is not None
        pod = info.pod
        try:
            self.api.evict_pod(pod.namespace, pod.name, pod.uid)
        except ApiError as e:
            log.error("evict pod=%s uid=%s reason=%r result=failed error=%s", pod.key, pod.uid, task.reason, e)
            self._count(task.gate, "failed")
            self._event(pod, EVENT_FAIL, f"{detail}, error {e}")
            return False
        log.warning("evict pod=%s uid=%s reason=%r result=evicted message=%r", pod.key, pod.uid, task.reason,
                    message)
        self._count(task.gate, "evicted", pod)
        self._evicted[pod.uid] = _Remembered(self.clock())
        self._event(pod, EVENT_SUCCESS, detail)
        return True

    def _event(self, pod: Pod, reason: str, message: str) -> None:
        from koordlet.states.kubeapi import ApiError

        assert self.api is not None
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                               "uid": pod.uid},
            "reason": reason, "message": message, "type": "Warning",
            "source": {"component": EVENT_COMPONENT, **({"host": self.node_name} if self.node_name else {})},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": EVENT_COMPONENT, "reportingInstance": self.node_name,
        }
        try:
            self.api.create_event(pod.namespace, event)
            self._bad.forget("event")
        except ApiError as e:
            self._bad("event", "eviction event for pod %s not recorded: %s", pod.key, e)


GATES = ("BECPUEvict", "CPUEvict", "BEMemoryEvict", "MemoryEvict", "CPUAllocatableEvict", "MemoryAllocatableEvict")


def _build(ctx: Context) -> Evictor:
    cluster = ctx.node.cluster
    cfg = ctx.config
    copilot = CopilotClient(cfg.evict_by_copilot_endpoint) if cfg.evict_by_copilot_agent else None
    return Evictor(ctx.cache, cfg.collect_res_used_interval, ctx.metrics,
                   gates={g for g in GATES if cfg.gate(g)}, api=cluster.api if cluster else None,
                   node_name=cfg.node_name, kill_standalone=cfg.evict_standalone_kill, copilot=copilot,
                   node_manager=(cfg.evict_by_copilot_pod_label_key, cfg.evict_by_copilot_pod_label_value))


PLUGIN = Plugin("evict", _build, gates=GATES, when=collecting)
