"""Pod and container cgroup resources from the rules: cpuset (CPUSetAllocator), cfs quota unset for cpuset pods,
batch resources for BE pods (BatchResource), and the normalized cfs quota of cpu-share pods (CPUNormalization).
Host applications of class LS get the share pools; one that leaves the NodeSLO (or that class) gets its parent's
CPUs back.

CPUNormalization (upstream ``runtimehooks/hooks/cpunormalization``, reconciler only: upstream's NRI and proxy
paths carry no resources for it): while the node has a valid ``node.koordinator.sh/cpu-normalization-ratio``
(koord-manager writes it from the CPU model), the pod and container cfs quota of LS pods, and of pods without a
class that are not pinned, is the kubelet's quota divided by the ratio (rounded up) when the ratio is above 1, and
the kubelet's quota otherwise; a container or pod without a cpu limit is left alone. Differences: when the
annotation goes away the kubelet's quotas are written back once (upstream leaves the divided ones in place until
the containers restart); the pod-level quota is set only where the kubelet sets one (every container limited:
upstream sums the limits it finds, so a pod with an unlimited container gets a quota).

Facts: upstream ``pkg/koordlet/runtimehooks/hooks/`` ``batchresource``, ``cpuset`` and ``cpunormalization``; host
applications as ``pkg/koordlet/util/host_application.go``. The values come from :mod:`koordlet.rules.resources`,
the same functions the NRI hooks use. Pod dirs are written before their containers where the kernel checks the
parent (v1 cfs quota); the sandbox (pause) container gets the same cpuset as the app containers.

This is upstream's runtime hook reconciler for these hooks, so it records
``koordlet_runtime_hook_reconciler_invoked_duration_milliseconds``: per pod, the time to decide its settings, under
each level (pod, container, sandbox) and cgroup resource it produced an update for (status failed when the pod's
annotation could not be decoded). The writes themselves are timed by the executor.
"""

from __future__ import annotations

import logging
import posixpath
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin
from koordlet.host.cgroup import Cgroups, CgroupVersion
from koordlet.rules.pod_plan import PlanRule, PodPlan, consequence, plan_pod
from koordlet.rules.resources import (
    REASON_BATCH,
    REASON_CPUSET,
    REASON_NORMALIZATION,
    SettingsRule,
    batch_quota_enabled,
    cgroup_writes,
    host_app_cpuset,
    normalization_ratio,
    normalization_rule,
)
from koordlet.states.hostapps import SetApps
from koordlet.states.informer import PodMeta, pod_owner
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import Executor, Update

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics

log = logging.getLogger(__name__)

REPORTED = (wire.ANNOTATION_RESOURCE_STATUS,)      # the refused annotations this strategy logs (see plan)


@dataclass(frozen=True)
class _PodUpdates:
    """One pod's executor updates by level (the executor skips the ones already in place), and the resources each
    level has updates for (what the reconcile duration is recorded under, every second)."""
    pod: list[Update | None]
    container: list[Update | None]
    sandbox: list[Update | None]
    ok: bool = True                      # every annotation the plan read was decoded (the metric's status)
    resources: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False)    # levels without updates left out

    def __post_init__(self) -> None:
        levels = (("pod", self.pod), ("container", self.container), ("sandbox", self.sandbox))
        distinct = ((level, tuple(dict.fromkeys(u.label for u in updates if u is not None)))
                    for level, updates in levels)
        object.__setattr__(self, "resources", tuple((level, labels) for level, labels in distinct if labels))


def released_cpuset(cgroups: Cgroups, rel: str) -> str | None:
    """What a host application's cpuset goes back to when the agent no longer manages it: every CPU of its parent
    (v1: the parent's cpuset.cpus; v2: empty, which takes the parent's); None when the parent cannot be read."""
    if cgroups.version is CgroupVersion.V2:
        return ""
    try:
        return cgroups.read_cpuset(posixpath.dirname(rel))
    except OSError:
        return None


class PodResources:
    name = "pod-resources"

    def __init__(self, cpuset: bool = True, batch: bool = True, metrics: AgentMetrics | None = None,
                 normalization: bool = False) -> None:
        self.cpuset, self.batch, self.normalization = cpuset, batch, normalization
        self._normalized = False                # quotas divided by a ratio > 1 are in place (restore when it goes)
        self._metrics = metrics
        self._bad = LogOnce(log)
        self._refused = LogOnce(log)            # "<pod uid>/<annotation>": a pod's refused annotations
        self._uids: frozenset[str] = frozenset()
        self._sandboxes: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}   # pod dir -> (ids, sandbox dirs)
        # the last cycle's updates per pod dir, with the PodMeta they came from: reused while the pod object is the
        # same one (the informer makes new ones at each sync) and the node-wide inputs have not changed
        self._memo: dict[str, tuple[PodMeta, _PodUpdates]] = {}
        self._inputs: tuple[object, ...] | None = None
        self._cpuset_apps = SetApps()           # host applications given a cpuset (reset when they leave)

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        quota_on = batch_quota_enabled(view.slo)
        ratio, problem = normalization_ratio(view.node.annotations)
        if problem:
            self._bad("ratio", "%s; using 1.0", problem)
        norm = self._normalization_ratio(view)
        inputs = (quota_on, ratio, norm, view.ls_pools, view.be_pools, view.system_cpus, view.cpu_manager_policy)
        if inputs != self._inputs:
            self._memo.clear()
            self._inputs = inputs
        pods: list[Update | None] = []
        containers: list[Update | None] = []
        live = set()
        for meta in view.pods:
            if meta.pod.terminating:
                continue
            live.add(meta.cgroup_dir)
            started = time.perf_counter()
            memo = self._memo.get(meta.cgroup_dir)
            if memo is not None and memo[0] is meta:
                updates = memo[1]
            else:
                updates = self._updates(meta, view, executor, quota_on, ratio, norm)
                self._memo[meta.cgroup_dir] = (meta, updates)
            pods += updates.pod
            containers += updates.container
            containers += updates.sandbox
            if self._metrics is not None:
                self._timed(meta, time.perf_counter() - started, updates)
        for gone in set(self._sandboxes) - live:
            del self._sandboxes[gone]
        for gone in set(self._memo) - live:
            del self._memo[gone]
        uids = frozenset(meta.pod.uid for meta in view.pods)
        if uids != self._uids:
            self._uids = uids
            self._refused.keep_only(f"{uid}/{key}" for uid in uids for key in REPORTED)
        given = []
        for app in view.host_apps:
            cpuset = host_app_cpuset(app.qos, view) if self.cpuset else None
            if cpuset is not None:
                given.append(app)
                pods.append(executor.cgroup(app.cgroup_dir, "cpuset.cpus", cpuset, f"hostapp {app.name}",
                                            REASON_CPUSET))
        for app in self._cpuset_apps.left(given, executor.cgroups):
            cpuset = released_cpuset(executor.cgroups, app.cgroup_dir)
            if cpuset is not None:
                pods.append(executor.cgroup(app.cgroup_dir, "cpuset.cpus", cpuset, f"hostapp {app.name}",
                                            REASON_CPUSET))
        executor.update_leveled([pods, containers])

    def _updates(self, meta: PodMeta, view: NodeView, executor: Executor, quota_on: bool, ratio: float,
                 norm: float | None) -> _PodUpdates:
        plan = self.plan(meta, view, quota_on, ratio, norm)
        sandboxes = self._sandbox_dirs(meta, executor) if plan.sandbox.cpuset is not None else ()
        owner = pod_owner(meta)
        # the audit reason of the quota writes: upstream's hook name for the pods CPUNormalization scales
        reason = REASON_NORMALIZATION if norm is not None and self._cpu_share_class(meta) else REASON_BATCH
        return _PodUpdates(
            executor.writes(cgroup_writes(meta.cgroup_dir, plan.pod, reason), owner),
            executor.writes([w for (_, rel), s in zip(meta.containers, plan.containers, strict=True)
                             for w in cgroup_writes(rel, s, reason)], owner),
            executor.writes([w for rel in sandboxes for w in cgroup_writes(rel, plan.sandbox, REASON_BATCH)], owner),
            ok=not plan.problems)

    def _timed(self, meta: PodMeta, seconds: float, updates: _PodUpdates) -> None:
        assert self._metrics is not None
        for level, resources in updates.resources:
            self._metrics.hook_reconciled(level, resources, updates.ok, seconds)

    def _normalization_ratio(self, view: NodeView) -> float | None:
        """The CPUNormalization ratio of this cycle: None when the gate is off or the node has none; 1.0 for one
        cycle after a ratio above 1 went away (the kubelet's quotas are written back)."""
        if not self.normalization:
            return None
        ratio, problem = normalization_rule(view.node.annotations)
        if problem:
            self._bad("norm", "cpu normalization off: %s", problem)
        if ratio is None:
            if self._normalized:
                self._normalized = False
                log.info("cpu normalization ratio gone: the kubelet's cfs quotas of cpu-share pods are restored")
                return 1.0
            return None
        if not self._normalized and ratio > 1.0:
            log.info("cpu normalization ratio=%s: cfs quotas of cpu-share pods divided by it", ratio)
        self._normalized = ratio > 1.0
        return ratio

    @staticmethod
    def _cpu_share_class(meta: PodMeta) -> bool:
        return meta.pod.raw_qos_class in (wire.QOS_LS, wire.QOS_NONE)

    def plan(self, meta: PodMeta, view: NodeView, quota_on: bool = True, ratio: float = 1.0,
             norm: float | None = None) -> PodPlan:
        """The pod's plan for its started containers (pure: no kernel reads); ``norm``: the CPUNormalization ratio
        (None: off). A refused annotation is logged once per pod and annotation."""
        rule = PlanRule(SettingsRule(self.cpuset, self.batch, quota_on, ratio), norm)
        plan = plan_pod(rule, meta.pod, tuple(c for c, _ in meta.containers), view)
        # the extended-resource-spec is the pod source's to report (it reads it for the containers' resources) and
        # the NRI hooks' at creation: one line per pod, not one more from here
        refused = {e.key for e in plan.problems if e.key != wire.ANNOTATION_EXTENDED_RESOURCE_SPEC}
        for key in REPORTED:
            if key not in refused:
                self._refused.forget(f"{meta.pod.uid}/{key}")
        for e in plan.problems:
            if e.key in refused:
                self._refused(f"{meta.pod.uid}/{e.key}", "pod %s: annotation %s; %s", meta.pod.key, e,
                              consequence(e))
        return plan

    def _sandbox_dirs(self, meta: PodMeta, executor: Executor) -> tuple[str, ...]:
        """The pause container's dir: the child of the pod dir that no started container owns. The pod dir is
        listed again only when its set of containers changes, so a steady cycle reads no directories."""
        ids = frozenset(c.id for c, _ in meta.containers)
        cached = self._sandboxes.get(meta.cgroup_dir)
        if cached is None or cached[0] != ids:
            found = tuple(rel for _, cid, rel in executor.cgroups.list_containers(meta.cgroup_dir)
                          if cid not in ids)
            cached = self._sandboxes[meta.cgroup_dir] = (ids, found)
        return cached[1]


def _build(ctx: Context) -> PodResources:
    return PodResources(cpuset=ctx.config.gate("CPUSetAllocator"), batch=ctx.config.gate("BatchResource"),
                        metrics=ctx.metrics, normalization=ctx.config.gate("CPUNormalization"))


PLUGIN = Plugin("pod-resources", _build, gates=("CPUSetAllocator", "BatchResource", "CPUNormalization"))
