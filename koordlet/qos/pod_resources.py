"""Pod and container cgroup resources from the rules: cpuset (CPUSetAllocator), cfs quota unset for cpuset pods,
and batch resources for BE pods (BatchResource). Host applications of class LS get the share pools.

Facts: reference/qos-enforcement.md §3f "Other hooks", §3g. The values come from :mod:`koordlet.rules.resources`,
the same functions the NRI hooks use. Pod dirs are written before their containers where the kernel checks the
parent (v1 cfs quota); the sandbox (pause) container gets the same cpuset as the app containers.
"""

from __future__ import annotations

import logging

from koordlet import wire
from koordlet.executor import Executor, Update
from koordlet.logutil import LogOnce
from koordlet.qos import NodeView, pod_owner
from koordlet.rules.resources import (ResourceStatus, Settings, batch_container, batch_pod, container_cpuset,
                                      host_app_cpuset, normalization_ratio, resource_status)
from koordlet.states.informer import PodMeta

log = logging.getLogger("koordlet.qos.resources")

REASON_CPUSET, REASON_BATCH = "cpuset", "batch-resource"


def _updates(executor: Executor, rel: str, s: Settings, owner: str, reason: str) -> list[Update | None]:
    out: list[Update | None] = []
    if s.cpuset is not None:
        out.append(executor.cgroup(rel, "cpuset.cpus", s.cpuset, owner, REASON_CPUSET))
    if s.cpu_shares is not None:
        out.append(executor.cgroup(rel, "cpu.shares", s.cpu_shares, owner, reason))
    if s.cfs_quota is not None:
        out.append(executor.cgroup(rel, "cpu.cfs_quota_us", s.cfs_quota, owner, reason))
    if s.memory_limit is not None:
        out.append(executor.cgroup(rel, "memory.limit_in_bytes", s.memory_limit, owner, reason))
    return out


class PodResources:
    name = "pod-resources"

    def __init__(self, cpuset: bool = True, batch: bool = True) -> None:
        self.cpuset, self.batch = cpuset, batch
        self._bad = LogOnce(log)
        self._sandboxes: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}   # pod dir -> (ids, sandbox dirs)

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        threshold = view.slo.resource_threshold
        quota_on = not (threshold is not None and threshold.enable
                        and threshold.cpu_suppress_policy == wire.CPU_SUPPRESS_CFS_QUOTA)
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
            pod_s, per_container = self.desired(meta, view, quota_on, ratio)
            cpuset = per_container[0][1].cpuset if per_container else None
            if cpuset is not None:
                per_container += [(rel, Settings(cpuset=cpuset)) for rel in self._sandbox_dirs(meta, executor)]
            owner = pod_owner(meta)
            pods += _updates(executor, meta.cgroup_dir, pod_s, owner, REASON_BATCH)
            for rel, s in per_container:
                containers += _updates(executor, rel, s, owner, REASON_BATCH)
        for gone in set(self._sandboxes) - live:
            del self._sandboxes[gone]
        for app in view.host_apps:
            cpuset = host_app_cpuset(app.qos, view) if self.cpuset else None
            if cpuset is not None:
                pods.append(executor.cgroup(app.cgroup_dir, "cpuset.cpus", cpuset, f"hostapp {app.name}",
                                            REASON_CPUSET))
        executor.update_leveled([pods, containers])

    def desired(self, meta: PodMeta, view: NodeView, quota_on: bool = True,
                ratio: float = 1.0) -> tuple[Settings, list[tuple[str, Settings]]]:
        """Pod settings and (container dir, settings) for its started containers (pure: no kernel reads)."""
        pod = meta.pod
        try:
            status = resource_status(pod)
            self._bad.forget(pod.uid)
        except ValueError as e:
            self._bad(pod.uid, "pod %s: %s; treated as not pinned", pod.key, e)
            status = ResourceStatus()
        cpuset = container_cpuset(pod, status, view) if self.cpuset else None
        unset_quota = self.cpuset and bool(status.cpuset)       # cpuset pods must not be throttled (upstream #489)
        containers = tuple(c for c, _ in meta.containers)
        pod_s = batch_pod(pod, containers, quota_on, ratio) if self.batch else Settings()
        if unset_quota:
            pod_s = Settings(pod_s.cpuset, pod_s.cpu_shares, -1, pod_s.memory_limit)
        out = []
        for container, rel in meta.containers:
            s = batch_container(pod, container, quota_on, ratio) if self.batch else Settings()
            out.append((rel, Settings(cpuset, s.cpu_shares, -1 if unset_quota else s.cfs_quota, s.memory_limit)))
        return pod_s, out

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
