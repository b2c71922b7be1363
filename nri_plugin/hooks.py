"""What the agent does on each NRI event: the pod's plan from :func:`koordlet.rules.pod_plan.plan_pod` (the
reconciler's decision), answered to the runtime, and each enabled hook feature's part (``nri_plugin.features``).

- **CreateContainer**: the plan's cgroup resources (cpuset, batch cpu shares / cfs quota / memory limit, unlimited
  quota for pinned pods), then the features' additions (resctrl class, ``oom_score_adj``, GPU env and mounts, RDMA
  devices), as a ContainerAdjustment. Only fields the agent owns and whose value differs from what the runtime
  already has are set: an unchanged field claimed by us could only collide with another plugin (which fails the
  container).
- **UpdateContainer**: the same resources against the ones the kubelet asks for; a ContainerUpdate naming the
  container, or no update at all when nothing differs (upstream sends an id-less update every time).
- **Synchronize**: the same comparison for every running container (drift while we were away).
- **RunPodSandbox**: the pod cgroup (batch sums, group identity) through the executor, as the reconciler would.
- **PostStartContainer**: the features that act on the container's processes (core scheduling cookies, resctrl
  task moves, ``oom_score_adj`` where the runtime ignores adjustments); the reconciler is woken to do them now
  instead of at its next tick.
- **RemovePodSandbox**: the executor forgets the pod's cgroups (a pod with the same dir starts fresh).

Bad input (a malformed annotation, an unusable sandbox) is logged once per pod and that part is left out; the
container is always created. Upstream: koordinator ``pkg/koordlet/runtimehooks/nri/handlers.go`` (``NriServer``'s
handlers) and the hooks under ``pkg/koordlet/runtimehooks/hooks/``; extended resources as
``apis/extension/resource.go``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from hami_bridge.inject import HostLayout
from koordlet._proto.nri import api_pb2 as api
from koordlet.base.logutil import LogOnce
from koordlet.host.cgroup import KubeQOS, Layout, parse_cpu_list
from koordlet.host.paths import HostPaths
from koordlet.rules.pod_plan import PlanRule, PodPlan, consequence, plan_pod
from koordlet.rules.resources import (
    REASON_BATCH,
    Settings,
    SettingsRule,
    batch_quota_enabled,
    cgroup_writes,
    normalization_ratio,
)
from koordlet.states.pod import Container, Pod
from koordlet.states.runtimepods import RuntimePod, RuntimePods
from nri_plugin.features import FEATURES
from nri_plugin.features.base import Event, HookEnv, PodInfo, slo_of
from nri_plugin.features.oom import oom_adjust_supported

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.nodestate import NodeView
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

LIVE_STATES = (api.CONTAINER_CREATED, api.CONTAINER_RUNNING)
_POD_PROBLEMS = ("status", "spec", "bvt", "oom", "gpu", "rdma")        # per-pod LogOnce keys, "<kind>/<uid>"
_PROBLEM_KIND = {"scheduling.koordinator.sh/resource-status": "status",
                 "node.koordinator.sh/extended-resource-spec": "spec", "koordinator.sh/cpuQOS": "bvt"}


def kube_qos_of_parent(cgroup_parent: str) -> KubeQOS:
    """The Kubernetes QoS class from the pod's cgroup parent (the kubelet encodes it in the path, both drivers)."""
    parent = cgroup_parent.lower()
    if "besteffort" in parent:
        return KubeQOS.BESTEFFORT
    return KubeQOS.BURSTABLE if "burstable" in parent else KubeQOS.GUARANTEED


def _opt_int(msg: object, name: str) -> int | None:
    return getattr(msg, name).value if msg.HasField(name) else None  # type: ignore[attr-defined]


def _same_limit(current: int | None, wanted: int) -> bool:
    """Unset, 0 and negative all mean "no limit" to the OCI runtime."""
    if wanted < 0:
        return current is None or current <= 0
    return current == wanted


def _same_cpus(current: str, wanted: str) -> bool:
    if not current:
        return False
    try:
        return set(parse_cpu_list(current)) == set(parse_cpu_list(wanted))
    except ValueError:
        return False


def resources_delta(s: Settings, current: api.LinuxResources) -> api.LinuxResources | None:
    """The owned settings that differ from ``current``, as LinuxResources; None when nothing differs."""
    out = api.LinuxResources()
    changed = False
    if s.cpuset is not None and not _same_cpus(current.cpu.cpus, s.cpuset):
        out.cpu.cpus = s.cpuset
        changed = True
    if s.cpu_shares is not None and _opt_int(current.cpu, "shares") != s.cpu_shares:
        out.cpu.shares.value = s.cpu_shares
        changed = True
    if s.cfs_quota is not None and not _same_limit(_opt_int(current.cpu, "quota"), s.cfs_quota):
        out.cpu.quota.value = s.cfs_quota
        changed = True
    if s.memory_limit is not None and not _same_limit(_opt_int(current.memory, "limit"), s.memory_limit):
        out.memory.limit.value = s.memory_limit
        changed = True
    return out if changed else None


class Hooks:
    """The NRI event handlers' decisions. Thread-safe: pure computation plus executor writes (locked there)."""

    def __init__(self, features: Iterable[str], layout: Layout, view: Callable[[], NodeView | None],
                 executor: Executor | None = None, bvt: bool = False, resctrl_root: str | None = None,
                 nudge: Callable[[], None] | None = None, hami: HostLayout | None = None,
                 host: HostPaths | None = None, dev_root: str = "/dev", runtime: RuntimePods | None = None,
                 on_runtime_news: Callable[[], None] | None = None, metrics: AgentMetrics | None = None) -> None:
        names = frozenset(features)
        unknown = names - {f.name for f in FEATURES}
        if unknown:
            raise ValueError(f"unknown NRI hook features: {', '.join(sorted(unknown))}")
        self.features = names
        self._units = tuple(f.unit for f in FEATURES if f.name in names)
        self._bad = LogOnce(log)
        self.env = HookEnv(layout, names, executor, bvt, resctrl_root, nudge,
                           hami if hami is not None else HostLayout(),
                           host if host is not None else HostPaths.under("/"), dev_root, metrics, self._bad)
        self._layout = layout
        self._view = view
        self._runtime = runtime            # what the runtime tells us about pods, for the standalone pod source
        self._on_runtime_news = on_runtime_news
        self._index: tuple[object, dict[str, PodMeta]] | None = None

    @property
    def oom_adjust(self) -> bool | None:
        """The runtime applies oom_score_adj adjustments (None: not known)."""
        return self.env.oom_adjust

    # --- events -------------------------------------------------------------------------------------------

    def create_container(self, sandbox: api.PodSandbox, ctr: api.Container) -> api.ContainerAdjustment:
        adjust = api.ContainerAdjustment()
        self._told(sandbox, ((ctr.id, ctr.name),))
        view = self._view()
        event = self._event(sandbox, view, ctr)
        if event is None:
            return adjust
        delta = resources_delta(event.plan.containers[0], ctr.linux.resources)
        if delta is not None:
            adjust.linux.resources.CopyFrom(delta)
        for unit in self._units:
            unit.create_container(self.env, event, adjust)
        return adjust

    def update_container(self, sandbox: api.PodSandbox, ctr: api.Container,
                         requested: api.LinuxResources) -> list[api.ContainerUpdate]:
        event = self._event(sandbox, self._view(), ctr)
        if event is None:
            return []
        delta = resources_delta(event.plan.containers[0], requested)
        return [] if delta is None else [_update(ctr.id, delta)]

    def synchronize(self, pods: Sequence[api.PodSandbox],
                    containers: Sequence[api.Container]) -> list[api.ContainerUpdate]:
        """Updates for running containers whose owned settings drifted (failures ignored: a container may exit
        while the runtime applies them, which must not fail the whole sync)."""
        view = self._view()
        sandboxes = {p.id: p for p in pods}
        if self._runtime is not None:
            names: dict[str, list[tuple[str, str]]] = {}
            for ctr in containers:
                names.setdefault(ctr.pod_sandbox_id, []).append((ctr.id, ctr.name))
            self._runtime.replace_all(_runtime_pod(p, names.get(p.id, ())) for p in pods)
            if self._on_runtime_news is not None:
                self._on_runtime_news()
        infos: dict[str, PodInfo | None] = {}
        updates = []
        for ctr in containers:
            if ctr.state not in LIVE_STATES or ctr.pod_sandbox_id not in sandboxes:
                continue
            if ctr.pod_sandbox_id not in infos:
                infos[ctr.pod_sandbox_id] = self.pod_info(sandboxes[ctr.pod_sandbox_id], view)
            info = infos[ctr.pod_sandbox_id]
            if info is None:
                continue
            event = Event(info, view, self._plan(info, view, (ctr.name,)), ctr)
            if ctr.state == api.CONTAINER_RUNNING:
                for unit in self._units:
                    unit.started(self.env, event)
            delta = resources_delta(event.plan.containers[0], ctr.linux.resources)
            if delta is not None:
                update = _update(ctr.id, delta)
                update.ignore_failure = True
                updates.append(update)
        return updates

    def run_pod_sandbox(self, sandbox: api.PodSandbox) -> None:
        """Pod-level cgroup settings, written now so the first container starts under them."""
        self._told(sandbox, ())
        executor = self.env.executor
        if executor is None:
            return
        view = self._view()
        event = self._event(sandbox, view, None)
        if event is None:
            return
        info = event.info
        updates = executor.writes(cgroup_writes(info.cgroup_dir, event.plan.pod, REASON_BATCH), f"pod {info.pod.key}")
        for unit in self._units:
            updates += unit.run_pod_sandbox(self.env, event)
        executor.update(updates)

    def configure(self, runtime: str, version: str) -> None:
        """Learn what the connected runtime can apply (Configure names it); logged when it changes our way."""
        self.env.oom_adjust = oom_adjust_supported(runtime, version)
        for unit in self._units:
            unit.configure(self.env, runtime, version)

    def post_start_container(self, sandbox: api.PodSandbox, ctr: api.Container) -> None:
        """The features that act on the container's processes, which exist only now; the reconciler is woken when
        one of them wants it."""
        event = self._event(sandbox, self._view(), ctr)
        if event is None:
            return
        wanted = [unit.started(self.env, event) for unit in self._units]   # every unit: each acts on its own
        if any(wanted) and self.env.nudge is not None:
            self.env.nudge()

    def remove_pod_sandbox(self, sandbox: api.PodSandbox) -> None:
        if self._runtime is not None:
            self._runtime.remove(sandbox.uid)
        if self.env.executor is not None:
            info = self.pod_info(sandbox, None)
            if info is not None:
                self.env.executor.forget_cgroup(info.cgroup_dir)
        for kind in _POD_PROBLEMS:
            self._bad.forget(f"{kind}/{sandbox.uid}")

    # --- resolving a sandbox ------------------------------------------------------------------------------

    def _told(self, sandbox: api.PodSandbox, containers: Sequence[tuple[str, str]]) -> None:
        """Remember what the runtime says of a pod (and its new containers); wake the pod source if it is news."""
        if self._runtime is None:
            return
        news = self._runtime.sandbox(_runtime_pod(sandbox, ()))
        for cid, name in containers:
            news = self._runtime.container(sandbox.uid, cid, name) or news
        if news and self._on_runtime_news is not None:
            self._on_runtime_news()

    def _event(self, sandbox: api.PodSandbox, view: NodeView | None, ctr: api.Container | None) -> Event | None:
        info = self.pod_info(sandbox, view)
        if info is None:
            return None
        return Event(info, view, self._plan(info, view, (ctr.name,) if ctr is not None else ()), ctr)

    def _plan(self, info: PodInfo, view: NodeView | None, names: Sequence[str]) -> PodPlan:
        """The pod's plan for the named containers, under the rule every enabled feature contributes to; its
        refused annotations logged once per pod."""
        rule = PlanRule(SettingsRule(False, False, batch_quota_enabled(slo_of(view)), self._ratio(view)))
        for unit in self._units:
            rule = unit.rule(self.env, rule, view)
        plan = plan_pod(rule, info.pod, tuple(Container(n, "", "") for n in names), view)
        for e in plan.problems:
            kind = _PROBLEM_KIND.get(e.key, "status")
            self._bad(f"{kind}/{info.pod.uid}", "nri pod=%s: annotation %s; %s", info.pod.key, e, consequence(e))
        return plan

    def _ratio(self, view: NodeView | None) -> float:
        if view is None:
            return 1.0
        ratio, problem = normalization_ratio(view.node.annotations)
        if problem:
            self._bad("ratio", "nri: %s; using 1.0", problem)
        return ratio

    def pod_info(self, sandbox: api.PodSandbox, view: NodeView | None) -> PodInfo | None:
        """The sandbox as the agent sees it; None (logged once) when it cannot be placed.

        The agent's own record wins when it has one from a real source (API server, kubelet, pods file); a pod
        it has only found in the cgroup tree knows no labels or annotations, so the sandbox's are used.
        """
        meta = self._known(sandbox.uid, view)
        pod = meta.pod if meta is not None and meta.described else self._sandbox_pod(sandbox)
        if pod is None:
            return None
        cgroup_dir = meta.cgroup_dir if meta is not None else self._layout.pod_dir(pod.kube_qos, pod.uid)
        return PodInfo(pod, cgroup_dir)

    def _sandbox_pod(self, sandbox: api.PodSandbox) -> Pod | None:
        """A pod the agent has not seen yet, from what the runtime tells (the QoS class from the cgroup path)."""
        try:
            pod = Pod(uid=sandbox.uid, name=sandbox.name, namespace=sandbox.namespace,
                      kube_qos=kube_qos_of_parent(sandbox.linux.cgroup_parent),
                      labels=dict(sandbox.labels), annotations=dict(sandbox.annotations))
            self._layout.pod_dir(pod.kube_qos, pod.uid)          # validates the uid (it becomes a path)
            return pod
        except ValueError as e:
            self._bad(f"sandbox/{sandbox.id}", "nri sandbox=%s pod=%s/%s cannot be placed: %s; no adjustments",
                      sandbox.id, sandbox.namespace, sandbox.name, e)
            return None

    def _known(self, uid: str, view: NodeView | None) -> PodMeta | None:
        if view is None:
            return None
        if self._index is None or self._index[0] is not view.pods:
            self._index = (view.pods, {m.pod.uid: m for m in view.pods})
        return self._index[1].get(uid)


def _runtime_pod(sandbox: api.PodSandbox, containers: Iterable[tuple[str, str]]) -> RuntimePod:
    return RuntimePod(uid=sandbox.uid, sandbox_id=sandbox.id, name=sandbox.name, namespace=sandbox.namespace,
                      labels=MappingProxyType(dict(sandbox.labels)),
                      annotations=MappingProxyType(dict(sandbox.annotations)),
                      containers=MappingProxyType(dict(containers)))


def _update(container_id: str, resources: api.LinuxResources) -> api.ContainerUpdate:
    update = api.ContainerUpdate(container_id=container_id)
    update.linux.resources.CopyFrom(resources)
    return update
