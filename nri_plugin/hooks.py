"""What the agent does on each NRI event, decided by :mod:`koordlet.rules` (the reconciler's rules).

- **CreateContainer**: the container's cpuset, batch cpu shares / cfs quota / memory limit, unlimited quota for
  pinned pods, the resctrl class and ``oom_score_adj``, as a ContainerAdjustment. Only fields the agent owns and
  whose value differs from what the runtime already has are set: an unchanged field claimed by us could only
  collide with another plugin (which fails the container).
- **UpdateContainer**: the same settings against the resources the kubelet asks for; a ContainerUpdate naming the
  container, or no update at all when nothing differs (upstream sends an id-less update every time).
- **Synchronize**: the same comparison for every running container (drift while we were away).
- **RunPodSandbox**: the pod cgroup (batch sums, group identity) through the executor, as the reconciler would.
- **PostStartContainer**: core scheduling cookies and resctrl task moves need the container's processes; the
  reconciler is woken to do them now instead of at its next tick.
- **RemovePodSandbox**: the executor forgets the pod's cgroups (a pod with the same dir starts fresh).

Bad input (a malformed annotation, an unusable sandbox) is logged once per pod and that part is left out; the
container is always created. Upstream: koordinator ``pkg/koordlet/runtimehooks/nri/handlers.go`` (``NriServer``'s
handlers) and the hooks under ``pkg/koordlet/runtimehooks/hooks/``; extended resources as
``apis/extension/resource.go``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from hami_bridge.inject import HostLayout, plan, prepare
from koordlet import wire
from koordlet._proto.nri import api_pb2 as api
from koordlet.decode import DecodeError
from koordlet.executor import Update
from koordlet.host.cgroup import KubeQOS, Layout, parse_cpu_list
from koordlet.host.paths import HostPaths
from koordlet.host.rdma import verbs_devices
from koordlet.host.resctrl import group_exists
from koordlet.logutil import LogOnce
from koordlet.rules.core_sched import group_id
from koordlet.rules.cpu_qos import CPUQOSRule, class_pod_bvt, cpu_qos_rule, pod_bvt
from koordlet.rules.devices import allocation_ids, by_container
from koordlet.rules.oom import container_oom_score_adj
from koordlet.rules.resctrl import CLASS_GROUP_OF, POD_GROUP_PREFIX
from koordlet.rules.resources import (
    REASON_BATCH,
    ResourceStatus,
    Settings,
    SettingsRule,
    batch_quota_enabled,
    cgroup_updates,
    container_settings,
    normalization_ratio,
    pod_settings,
    resource_status,
)
from koordlet.states.deviceallocation import parse_device_allocated
from koordlet.states.nodeslo import NodeSLOSpec, merge_node_slo_spec
from koordlet.states.pod import NO_RESOURCES, Container, Pod, Resources, extended_resource_spec
from koordlet.states.runtimepods import RuntimePod, RuntimePods

if TYPE_CHECKING:
    from koordlet.executor import Executor
    from koordlet.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.nodestate import NodeView

log = logging.getLogger(__name__)

LIVE_STATES = (api.CONTAINER_CREATED, api.CONTAINER_RUNNING)
_POD_PROBLEMS = ("status", "spec", "bvt", "oom", "gpu", "rdma")        # per-pod LogOnce keys, "<kind>/<uid>"


@dataclass(frozen=True)
class HookFeatures:
    """The feature gates that decide which settings the hooks own."""
    cpuset: bool = True              # CPUSetAllocator
    batch: bool = True               # BatchResource
    group_identity: bool = True      # GroupIdentity (pod bvt at sandbox start; needs a bvt kernel)
    resctrl: bool = False            # RdtResctrl: RDT class at creation
    resctrl_pods: bool = False       # Resctrl: pod-level groups
    core_sched: bool = False         # CoreSched: cookies right after start
    oom_score_adj: bool = False      # OOMScoreAdj
    gpu_env: bool = False            # GPUEnvInject: NVIDIA_VISIBLE_DEVICES and HAMi-core (hami_bridge)
    rdma_devices: bool = False       # RDMADeviceInject: rdma_cm and the allocated VFs' uverbs nodes

    @classmethod
    def from_gates(cls, gate: Callable[[str], bool]) -> HookFeatures:
        return cls(**{name: gate(g) for name, g in FEATURE_GATES.items()})


# hook feature -> the feature gate that turns it on (one line per feature; as upstream's runtimehooks/config.go)
FEATURE_GATES = {
    "cpuset": "CPUSetAllocator",
    "batch": "BatchResource",
    "group_identity": "GroupIdentity",
    "resctrl": "RdtResctrl",
    "resctrl_pods": "Resctrl",
    "core_sched": "CoreSched",
    "oom_score_adj": "OOMScoreAdj",
    "gpu_env": "GPUEnvInject",
    "rdma_devices": "RDMADeviceInject",
}


@dataclass(frozen=True)
class PodInfo:
    """A sandbox resolved against what the agent knows: the pod, its cgroup dir and per-container resources."""
    pod: Pod
    cgroup_dir: str
    status: ResourceStatus
    resources: Mapping[str, Resources]     # container name -> requests/limits (spec, else the annotation)


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


_DEFAULT_SLO: NodeSLOSpec | None = None


def _default_slo() -> NodeSLOSpec:
    global _DEFAULT_SLO
    if _DEFAULT_SLO is None:
        _DEFAULT_SLO = merge_node_slo_spec(None)[0]
    return _DEFAULT_SLO


class Hooks:
    """The NRI event handlers' decisions. Thread-safe: pure computation plus executor writes (locked there)."""

    def __init__(self, features: HookFeatures, layout: Layout, view: Callable[[], NodeView | None],
                 executor: Executor | None = None, bvt: bool = False, resctrl_root: str | None = None,
                 nudge: Callable[[], None] | None = None, hami: HostLayout | None = None,
                 host: HostPaths | None = None, dev_root: str = "/dev", runtime: RuntimePods | None = None,
                 on_runtime_news: Callable[[], None] | None = None, metrics: AgentMetrics | None = None) -> None:
        self.features = features
        self._metrics = metrics            # koordlet_container_oom_score_adj
        self._layout = layout
        self._view = view
        self._executor = executor
        self._bvt = bvt                    # the kernel has cpu.bvt_warp_ns (probed by the caller)
        self._resctrl_root = resctrl_root  # mounted resctrl fs, or None
        self._nudge = nudge
        self._hami = hami if hami is not None else HostLayout()
        self._host = host if host is not None else HostPaths.under("/")   # sysfs for the RDMA verbs names
        self._dev_root = dev_root          # the host's /dev as this process sees it
        self._runtime = runtime            # what the runtime tells us about pods, for the standalone pod source
        self.oom_adjust: bool | None = None   # the runtime applies oom_score_adj adjustments (None: not known)
        self._on_runtime_news = on_runtime_news
        self._bad = LogOnce(log)
        self._index: tuple[object, dict[str, PodMeta]] | None = None
        self._cpu_rule: tuple[NodeSLOSpec, CPUQOSRule] | None = None

    # --- events -------------------------------------------------------------------------------------------

    def create_container(self, sandbox: api.PodSandbox, ctr: api.Container) -> api.ContainerAdjustment:
        adjust = api.ContainerAdjustment()
        self._told(sandbox, ((ctr.id, ctr.name),))
        view = self._view()
        info = self.pod_info(sandbox, view)
        if info is None:
            return adjust
        current = ctr.linux.resources
        delta = resources_delta(self._settings(info, ctr.name, view), current)
        if delta is not None:
            adjust.linux.resources.CopyFrom(delta)
        rdt = self._rdt_class(info.pod)
        if rdt is not None and not (current.HasField("rdt_class") and current.rdt_class.value == rdt):
            adjust.linux.resources.rdt_class.value = rdt
        if self.features.oom_score_adj:
            try:
                value = container_oom_score_adj(info.pod.annotations, ctr.name)
            except DecodeError as e:
                value = None
                self._bad(f"oom/{info.pod.uid}", "nri pod=%s: annotation %s; oom_score_adj left as it is",
                          info.pod.key, e)
            if value is not None and _opt_int(ctr.linux, "oom_score_adj") != value and self.oom_adjust is not False:
                adjust.linux.oom_score_adj.value = value
                adjust.linux.oom_score_adj.SetInParent()
            if value is not None and self.oom_adjust is not False and self._metrics is not None:
                self._metrics.oom_score_adj(info.pod, ctr.name, value)
        if self.features.gpu_env:
            self._inject_gpu(info.pod, ctr.name, adjust)
        if self.features.rdma_devices:
            self._inject_rdma(info.pod, ctr.name, adjust)
        return adjust

    def _oom_after_start(self, pod: Pod, ctr: api.Container) -> None:
        """``/proc/<pid>/oom_score_adj`` of the container's first process, as upstream koordlet writes it (its
        children inherit it; only when it differs). A process that is gone already counts as missing."""
        if self._executor is None or ctr.pid <= 0:
            return
        try:
            value = container_oom_score_adj(pod.annotations, ctr.name)
        except DecodeError as e:
            self._bad(f"oom/{pod.uid}", "nri pod=%s: annotation %s; oom_score_adj left as it is", pod.key, e)
            return
        if value is not None:
            path = self._host.proc(str(ctr.pid), "oom_score_adj")
            done = self._executor.update([Update(path, str(value), f"pod {pod.key}", "oom-score-adj", cacheable=False)])
            if self._metrics is not None and (done.written or done.unchanged):
                self._metrics.oom_score_adj(pod, ctr.name, value)

    def _inject_rdma(self, pod: Pod, name: str, adjust: api.ContainerAdjustment) -> None:
        """Device nodes for the RDMA functions allocated to this container (to every container when the agent
        does not know the pod's spec yet, as upstream); any problem injects nothing, logged against the pod."""
        raw = pod.annotations.get(wire.ANNOTATION_DEVICE_ALLOCATED)
        if not raw:
            return
        try:
            allocations = parse_device_allocated(raw).get(wire.DEVICE_RDMA) or []
            if pod.spec_containers:
                allocations = by_container(pod.spec_containers, {wire.DEVICE_RDMA: allocations}).get(
                    name, {}).get(wire.DEVICE_RDMA, [])
            if not allocations:
                return
            devices = verbs_devices(self._host, [i for a in allocations for i in allocation_ids(a)], self._dev_root)
        except (ValueError, OSError) as e:
            self._bad(f"rdma/{pod.uid}", "nri pod=%s container=%s: RDMA devices not injected: %s", pod.key, name,
                      e)
            return
        for d in devices:
            adjust.linux.devices.add(path=d.path, type="c", major=d.major, minor=d.minor,
                                     file_mode=api.OptionalFileMode(value=0o666))

    def _inject_gpu(self, pod: Pod, name: str, adjust: api.ContainerAdjustment) -> None:
        """GPU env and HAMi-core mounts; a problem drops HAMi (or everything, for a bad annotation), logged."""
        try:
            injection = plan(pod.annotations, pod.labels, pod.uid, name, self._hami)
        except ValueError as e:
            self._bad(f"gpu/{pod.uid}", "nri pod=%s container=%s: %s; no GPU injection", pod.key, name, e)
            return
        try:
            injection = prepare(injection, self._hami)
        except OSError as e:
            self._bad(f"gpu/{pod.uid}", "nri pod=%s container=%s: HAMi-core not injected: %s; the container sees "
                      "its GPUs without isolation", pod.key, name, e)
            injection = injection.visible_only()
        for key, value in injection.env.items():
            adjust.env.add(key=key, value=value)
        for m in injection.mounts:
            adjust.mounts.add(destination=m.destination, type=m.type, source=m.source, options=list(m.options))

    def update_container(self, sandbox: api.PodSandbox, ctr: api.Container,
                         requested: api.LinuxResources) -> list[api.ContainerUpdate]:
        view = self._view()
        info = self.pod_info(sandbox, view)
        if info is None:
            return []
        delta = resources_delta(self._settings(info, ctr.name, view), requested)
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
            if self.features.oom_score_adj and self.oom_adjust is not True and ctr.state == api.CONTAINER_RUNNING:
                self._oom_after_start(info.pod, ctr)
            delta = resources_delta(self._settings(info, ctr.name, view), ctr.linux.resources)
            if delta is not None:
                update = _update(ctr.id, delta)
                update.ignore_failure = True
                updates.append(update)
        return updates

    def run_pod_sandbox(self, sandbox: api.PodSandbox) -> None:
        """Pod-level cgroup settings, written now so the first container starts under them."""
        self._told(sandbox, ())
        if self._executor is None:
            return
        view = self._view()
        info = self.pod_info(sandbox, view)
        if info is None:
            return
        executor, owner = self._executor, f"pod {info.pod.key}"
        rule = self._rule(view)
        if not info.resources:            # without any container's resources the batch sums would be guesses
            rule = replace(rule, batch=False)
        containers = tuple(Container(name, "", "", res) for name, res in info.resources.items())
        updates = cgroup_updates(executor, info.cgroup_dir, pod_settings(rule, info.pod, containers, info.status),
                                 owner, REASON_BATCH)
        if self.features.group_identity and self._bvt:
            cpu_rule = self._cpu_qos_rule(self._slo(view))
            try:
                value = pod_bvt(cpu_rule, info.pod)
            except DecodeError as e:
                value = class_pod_bvt(cpu_rule, info.pod)
                self._bad(f"bvt/{info.pod.uid}", "nri pod=%s: annotation %s; using the class value", info.pod.key, e)
            updates.append(executor.cgroup(info.cgroup_dir, "cpu.bvt_warp_ns", value, owner, "cpu-qos"))
        executor.update(updates)

    def configure(self, runtime: str, version: str) -> None:
        """Learn what the connected runtime can apply (Configure names it); logged when it changes our way."""
        self.oom_adjust = oom_adjust_supported(runtime, version)
        if self.features.oom_score_adj and self.oom_adjust is not True:
            log.info("nri runtime=%s version=%s %s oom_score_adj adjustments; writing /proc/<pid>/oom_score_adj "
                     "after start instead", runtime, version,
                     "ignores" if self.oom_adjust is False else "may ignore")

    def post_start_container(self, sandbox: api.PodSandbox, ctr: api.Container) -> None:
        """Cookies and resctrl task moves act on processes, which exist only now: wake the reconciler. Where the
        runtime ignores oom_score_adj adjustments, the container's first process gets the value now."""
        view = self._view()
        info = self.pod_info(sandbox, view)
        if info is None:
            return
        pod = info.pod
        if self.features.oom_score_adj and self.oom_adjust is not True:
            self._oom_after_start(pod, ctr)
        if self._nudge is None:
            return
        wants_cookie = self.features.core_sched and group_id(pod, self._slo(view))[0] is not None
        wants_group = self.features.resctrl_pods and wire.ANNOTATION_POD_RESCTRL in pod.annotations
        if wants_cookie or wants_group:
            self._nudge()

    def remove_pod_sandbox(self, sandbox: api.PodSandbox) -> None:
        if self._runtime is not None:
            self._runtime.remove(sandbox.uid)
        if self._executor is not None:
            info = self.pod_info(sandbox, None)
            if info is not None:
                self._executor.forget_cgroup(info.cgroup_dir)
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
        try:
            status = resource_status(pod)
        except DecodeError as e:
            self._bad(f"status/{pod.uid}", "nri pod=%s: annotation %s; treated as not pinned", pod.key, e)
            status = ResourceStatus()
        resources = {c.name: c.resources for c in pod.containers if c.resources != NO_RESOURCES}
        try:
            for name, res in extended_resource_spec(pod.annotations).items():
                resources.setdefault(name, res)
        except DecodeError as e:
            self._bad(f"spec/{pod.uid}", "nri pod=%s: annotation %s; batch resources come from the spec only",
                      pod.key, e)
        return PodInfo(pod, cgroup_dir, status, resources)

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

    # --- rules --------------------------------------------------------------------------------------------

    def _slo(self, view: NodeView | None) -> NodeSLOSpec:
        return view.slo if view is not None else _default_slo()

    def _rule(self, view: NodeView | None) -> SettingsRule:
        ratio = 1.0
        if view is not None:
            ratio, problem = normalization_ratio(view.node.annotations)
            if problem:
                self._bad("ratio", "nri: %s; using 1.0", problem)
        return SettingsRule(self.features.cpuset, self.features.batch, batch_quota_enabled(self._slo(view)), ratio)

    def _cpu_qos_rule(self, slo: NodeSLOSpec) -> CPUQOSRule:
        cached = self._cpu_rule
        if cached is None or cached[0] is not slo:
            cached = self._cpu_rule = (slo, cpu_qos_rule(slo))
        return cached[1]

    def _settings(self, info: PodInfo, name: str, view: NodeView | None) -> Settings:
        container = Container(name, "", "", info.resources.get(name, NO_RESOURCES))
        return container_settings(self._rule(view), info.pod, container, info.status, view)

    def _rdt_class(self, pod: Pod) -> str | None:
        """The resctrl group the container starts in: its pod group when the reconciler made one, else its
        class group. Only a group that exists is named: the runtime fails a container whose group is missing."""
        if not self.features.resctrl or self._resctrl_root is None:
            return None
        candidates = []
        if self.features.resctrl_pods and wire.ANNOTATION_POD_RESCTRL in pod.annotations:
            candidates.append(POD_GROUP_PREFIX + pod.uid)
        group = CLASS_GROUP_OF.get(pod.qos_class)
        if group is not None:
            candidates.append(group)
        for name in candidates:
            if group_exists(self._resctrl_root, name):
                return name
        return None


def oom_adjust_supported(runtime: str, version: str) -> bool | None:
    """Whether the runtime applies an adjustment's oom_score_adj: NRI added it in v0.7 (containerd 2.0);
    containerd 1.7 drops it without a word. None for runtimes whose NRI this table does not know."""
    found = re.search(r"(\d+)\.(\d+)", version)
    if runtime != "containerd" or found is None:
        return None
    return int(found.group(1)) >= 2


def _runtime_pod(sandbox: api.PodSandbox, containers: Iterable[tuple[str, str]]) -> RuntimePod:
    return RuntimePod(uid=sandbox.uid, sandbox_id=sandbox.id, name=sandbox.name, namespace=sandbox.namespace,
                      labels=MappingProxyType(dict(sandbox.labels)),
                      annotations=MappingProxyType(dict(sandbox.annotations)),
                      containers=MappingProxyType(dict(containers)))


def _update(container_id: str, resources: api.LinuxResources) -> api.ContainerUpdate:
    update = api.ContainerUpdate(container_id=container_id)
    update.linux.resources.CopyFrom(resources)
    return update
