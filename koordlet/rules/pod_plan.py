"""What one pod's cgroups should get: the one decision behind the periodic reconcile and the NRI hooks.

:func:`plan_pod` computes, from the pod, the node view and the enabled features, the settings of the pod dir, of
each container asked about and of the sandbox (pause) container's dir, and the pod's ``cpu.bvt_warp_ns``. The
reconciler (``koordlet.qos.pod_resources``, ``koordlet.qos.cpu_qos``) writes the plan through the executor every
cycle; the NRI hooks (``nri_plugin.hooks``) return it to the runtime as a container adjustment or write the pod dir
at sandbox start. They differ only in how they apply it, so a container gets the same cgroup whether it started
before or after the agent.

Containers' resources are the spec's, else the ``extended-resource-spec`` annotation's (what the runtime hooks see
of a pod the agent has no spec for: koord-manager's webhook copies them there). A refused annotation costs only its
part of the pod and comes back in :attr:`PodPlan.problems` for the caller to log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.rules.cpu_qos import CPUQOSRule, decided_pod_bvt
from koordlet.rules.resources import (
    Settings,
    SettingsRule,
    app_containers,
    container_settings,
    cpu_share_pod,
    normalized_pod_quota,
    normalized_quota,
    pod_settings,
    within_pod,
)
from koordlet.states.decode import DecodeError
from koordlet.states.pod import (
    NO_RESOURCES,
    NOT_PINNED,
    Container,
    Pod,
    Resources,
    extended_resource_spec,
    resource_status,
)

if TYPE_CHECKING:
    from koordlet.states.nodestate import NodeView


@dataclass(frozen=True)
class PlanRule:
    """The enabled features and node-wide inputs of a plan: the same for every pod of one cycle or NRI event."""
    resources: SettingsRule
    normalization: float | None = None      # CPUNormalization: the ratio quotas of cpu-share pods are divided by
    cpu_qos: CPUQOSRule | None = None       # GroupIdentity: the pod's cpu.bvt_warp_ns (None: not decided here)


@dataclass(frozen=True)
class PodPlan:
    """One pod's desired cgroup settings (a ``None`` field of a Settings: not ours, left alone)."""
    pod: Settings
    containers: tuple[Settings, ...]         # one per container asked about, in the order given
    sandbox: Settings                        # the pause container's dir: the application containers' cpuset
    bvt: int | None = None                   # the pod's and its containers' cpu.bvt_warp_ns
    problems: tuple[DecodeError, ...] = ()   # refused annotations: their part is left out or defaulted


#: what a refused annotation costs the plan, for the callers' log line
CONSEQUENCES: Mapping[str, str] = {
    wire.ANNOTATION_RESOURCE_STATUS: "treated as not pinned",
    wire.ANNOTATION_EXTENDED_RESOURCE_SPEC: "batch resources come from the spec only",
    wire.ANNOTATION_POD_CPU_QOS: "using the class value",
}


def consequence(problem: DecodeError) -> str:
    return CONSEQUENCES.get(problem.key, "left out")


def declared_resources(pod: Pod) -> tuple[Mapping[str, Resources], DecodeError | None]:
    """Each container's resources as the pod declares them (the spec's, else the extended-resource-spec
    annotation's), with the annotation's DecodeError when it was refused (the spec's alone count then)."""
    declared = {c.name: c.resources for c in pod.containers if c.resources != NO_RESOURCES}
    try:
        for name, res in extended_resource_spec(pod.annotations).items():
            declared.setdefault(name, res)
    except DecodeError as e:
        return declared, e
    return declared, None


def plan_pod(rule: PlanRule, pod: Pod, containers: Sequence[Container], view: NodeView | None) -> PodPlan:
    """The plan of ``pod`` for ``containers`` (its started ones, for the reconciler; the one being created or
    updated, for the NRI hooks; none at sandbox start). The pod dir's batch sums run over the started application
    containers and, for the ones not started yet, what the pod declares; when the members cannot be told
    (:func:`~koordlet.rules.resources.app_containers`) or nothing is declared, the pod dir's batch settings are
    left alone instead of guessed. A NodeManager pod's YARN containers (``Container.yarn``) are not members: each
    gets its own batch settings, capped by the pod's (:func:`~koordlet.rules.resources.within_pod`)."""
    problems: list[DecodeError] = []
    try:
        status = pod.decoded(resource_status)
    except DecodeError as e:
        problems.append(e)
        status = NOT_PINNED
    declared, refused = declared_resources(pod)
    if refused is not None:
        problems.append(refused)
    given = tuple(replace(c, resources=declared[c.name])
                  if c.known and c.resources == NO_RESOURCES and c.name in declared else c for c in containers)
    r = rule.resources
    members = _members(pod, tuple(c for c in given if not c.yarn), declared)
    pod_s = pod_settings(r if members else replace(r, batch=False), pod, members or (), status)
    per_container = [container_settings(r, pod, c, status, view) for c in given]
    per_container = [within_pod(s, pod_s) if c.yarn else s for s, c in zip(per_container, given, strict=True)]
    norm = rule.normalization
    if norm is not None and cpu_share_pod(pod, status):
        pod_quota = normalized_pod_quota(pod, norm)
        if pod_s.cfs_quota is None and pod_quota is not None:
            pod_s = replace(pod_s, cfs_quota=pod_quota)
        per_container = [replace(s, cfs_quota=normalized_quota(c.resources.cpu_limit, norm))
                         if s.cfs_quota is None and c.known and c.resources.cpu_limit > 0 else s
                         for s, c in zip(per_container, given, strict=True)]
    sandbox = Settings(cpuset=per_container[0].cpuset) if per_container else Settings()
    bvt = None
    if rule.cpu_qos is not None:
        bvt, refused = decided_pod_bvt(rule.cpu_qos, pod)
        if refused is not None:
            problems.append(refused)
    return PodPlan(pod_s, tuple(per_container), sandbox, bvt, tuple(problems))


def _members(pod: Pod, started: tuple[Container, ...],
             declared: Mapping[str, Resources]) -> tuple[Container, ...] | None:
    """The containers the pod dir's batch sums run over (see :func:`plan_pod`); None when they cannot be told or
    nothing at all is known of them."""
    apps = app_containers(pod, started)
    if apps is None:
        return None
    names = {c.name for c in apps}
    members = apps + tuple(Container(name, "", "", res) for name, res in declared.items() if name not in names)
    return members or None
