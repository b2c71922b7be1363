"""Pod and container cgroup resources from the rules: cpuset (CPUSetAllocator), cfs quota unset for cpuset pods,
and batch resources for BE pods (BatchResource). Host applications of class LS get the share pools.

Facts: reference/qos-enforcement.md §3f "Other hooks", §3g. The values come from :mod:`koordlet.rules.resources`,
the same functions the NRI hooks use. Pod dirs are written before their containers where the kernel checks the
parent (v1 cfs quota); the sandbox (pause) container gets the same cpuset as the app containers.

This is upstream's runtime hook reconciler for these hooks, so it records
``koordlet_runtime_hook_reconciler_invoked_duration_milliseconds``: per pod, the time to decide its settings, under
each level (pod, container, sandbox) and cgroup resource it produced an update for (status failed when the pod's
annotation could not be decoded). The writes themselves are timed by the executor.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from koordlet.component import Context, Plugin
from koordlet.decode import DecodeError
from koordlet.executor import Executor, Update
from koordlet.logutil import LogOnce
from koordlet.rules.resources import (
    REASON_BATCH,
    REASON_CPUSET,
    ResourceStatus,
    Settings,
    SettingsRule,
    batch_quota_enabled,
    cgroup_updates,
    container_settings,
    host_app_cpuset,
    normalization_ratio,
    pod_settings,
    resource_status,
)
from koordlet.states.informer import PodMeta, pod_owner
from koordlet.states.nodestate import NodeView

if TYPE_CHECKING:
    from koordlet.metrics import AgentMetrics

log = logging.getLogger(__name__)

class PodResources:
    name = "pod-resources"

    def __init__(self, cpuset: bool = True, batch: bool = True, metrics: AgentMetrics | None = None) -> None:
        self.cpuset, self.batch = cpuset, batch
        self._metrics = metrics
        self._undecodable: set[str] = set()     # pods whose resource-status annotation did not decode
        self._bad = LogOnce(log)
        self._sandboxes: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}   # pod dir -> (ids, sandbox dirs)

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        quota_on = batch_quota_enabled(view.slo)
        ratio, problem = normalization_ratio(view.node.annotations)
        if problem:
            self._bad("ratio", "%s; using 1.0", problem)
        pods: list[Update | None] = []
        containers: list[Update | None] = []
        live = set()
        for meta in view.pods:
            if meta.pod.terminating:
                continue
            live.add(meta.cgroup_dir)
            started = time.perf_counter()
            pod_s, per_container = self.desired(meta, view, quota_on, ratio)
            cpuset = per_container[0][1].cpuset if per_container else None
            sandboxes = self._sandbox_dirs(meta, executor) if cpuset is not None else ()
            owner = pod_owner(meta)
            pod_updates = cgroup_updates(executor, meta.cgroup_dir, pod_s, owner, REASON_BATCH)
            container_updates = [u for rel, s in per_container for u in cgroup_updates(executor, rel, s, owner,
                                                                                        REASON_BATCH)]
            sandbox_updates = [u for rel in sandboxes
                               for u in cgroup_updates(executor, rel, Settings(cpuset=cpuset), owner, REASON_BATCH)]
            pods += pod_updates
            containers += container_updates + sandbox_updates
            if self._metrics is not None:
                self._timed(meta, time.perf_counter() - started,
                            {"pod": pod_updates, "container": container_updates, "sandbox": sandbox_updates})
        for gone in set(self._sandboxes) - live:
            del self._sandboxes[gone]
        self._undecodable &= {meta.pod.uid for meta in view.pods}
        for app in view.host_apps:
            cpuset = host_app_cpuset(app.qos, view) if self.cpuset else None
            if cpuset is not None:
                pods.append(executor.cgroup(app.cgroup_dir, "cpuset.cpus", cpuset, f"hostapp {app.name}",
                                            REASON_CPUSET))
        executor.update_leveled([pods, containers])

    def _timed(self, meta: PodMeta, seconds: float, by_level: dict[str, list[Update | None]]) -> None:
        assert self._metrics is not None
        ok = meta.pod.uid not in self._undecodable
        for level, updates in by_level.items():
            self._metrics.hook_reconciled(level, (u.label for u in updates if u is not None), ok, seconds)

    def desired(self, meta: PodMeta, view: NodeView, quota_on: bool = True,
                ratio: float = 1.0) -> tuple[Settings, list[tuple[str, Settings]]]:
        """Pod settings and (container dir, settings) for its started containers (pure: no kernel reads)."""
        pod = meta.pod
        try:
            status = resource_status(pod)
            self._bad.forget(pod.uid)
            self._undecodable.discard(pod.uid)
        except DecodeError as e:
            self._undecodable.add(pod.uid)
            self._bad(pod.uid, "pod %s: annotation %s; treated as not pinned", pod.key, e)
            status = ResourceStatus()
        rule = SettingsRule(self.cpuset, self.batch, quota_on, ratio)
        pod_s = pod_settings(rule, pod, tuple(c for c, _ in meta.containers), status)
        return pod_s, [(rel, container_settings(rule, pod, c, status, view)) for c, rel in meta.containers]

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
                        metrics=ctx.metrics)


PLUGIN = Plugin("pod-resources", _build, gates=("CPUSetAllocator", "BatchResource"))
