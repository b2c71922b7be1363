"""Core scheduling: which cookie group a pod belongs to (None = no cookie, cookie 0).

Facts: upstream ``pkg/koordlet/runtimehooks/hooks/coresched`` (rule.go, helper.go ``Plugin.getPodEnabledAndGroup``):

- A class is enabled when ``policies.cpuPolicy`` is ``coreSched`` and the class's ``cpuQOS.enable`` is true;
  ``cpuQOS.coreExpeller`` makes the class an expeller (group ID suffix ``-expeller``).
- Which class config applies, by the pod's *raw* class: LSE and LSR -> ``lsrClass``, LS -> ``lsClass``,
  BE -> ``beClass``. A pod without a koordinator class (raw class None) falls back to its Kubernetes class:
  Guaranteed -> ``lsrClass`` when LSR is enabled, else ``lsClass``; Burstable -> ``lsClass``; BestEffort ->
  ``beClass``. Upstream's sandbox and container reconcilers run for class None too (their filter lists
  BE/LS/LSR/LSE/None) and ``Rule.IsPodEnabled`` resolves None through that Kubernetes-class map, so None pods
  do get cookies.
- SYSTEM pods are never given a cookie (upstream excludes them from the reconcilers so that they, like the
  agent, keep cookie 0). Here they resolve to None like a disabled pod.
- Group ID: label ``koordinator.sh/core-sched-group-id`` (missing = ``""``); label
  ``koordinator.sh/core-sched-policy``: ``exclusive`` -> the pod UID, ``none`` -> no cookie; then the
  expeller suffix. So by default every LS/LSR pod shares the group ``-expeller`` and every BE pod the group
  ``""``: they never share a core.
- An unknown policy value is treated as the default policy (upstream does this silently); we also return an
  error string so the caller can log it once, naming the pod.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordlet.base import wire
from koordlet.host.cgroup import KubeQOS
from koordlet.states.nodeslo.schema import CPUQOSCfg, NodeSLOSpec, ResourceQOS
from koordlet.states.pod import Pod

POLICY_DEFAULT, POLICY_NONE, POLICY_EXCLUSIVE = "", "none", "exclusive"
EXPELLER_SUFFIX = "-expeller"


@dataclass(frozen=True)
class ClassParam:
    enabled: bool = False
    expeller: bool = False


_OFF = ClassParam()


@dataclass(frozen=True)
class CoreSchedRule:
    """The NodeSLO's core-sched settings resolved per class (computed once per cycle)."""
    lsr: ClassParam = _OFF
    ls: ClassParam = _OFF
    be: ClassParam = _OFF

    @property
    def enabled(self) -> bool:
        """Some class has core scheduling on (drives the kernel switch)."""
        return self.lsr.enabled or self.ls.enabled or self.be.enabled

    def for_pod(self, pod: Pod) -> ClassParam | None:
        """The class parameters that apply to the pod; None for SYSTEM pods (never managed)."""
        raw = pod.raw_qos_class
        if raw == wire.QOS_SYSTEM:
            return None
        if not self.enabled:
            return _OFF
        if raw in (wire.QOS_LSE, wire.QOS_LSR):
            return self.lsr
        if raw == wire.QOS_LS:
            return self.ls
        if raw == wire.QOS_BE:
            return self.be
        if pod.kube_qos is KubeQOS.GUARANTEED:
            return self.lsr if self.lsr.enabled else self.ls
        return self.ls if pod.kube_qos is KubeQOS.BURSTABLE else self.be


def _param(rq: ResourceQOS | None, core_sched: bool) -> ClassParam:
    cfg = (rq.cpu_qos if rq is not None else None) or CPUQOSCfg()
    return ClassParam(enabled=core_sched and bool(cfg.enable), expeller=core_sched and bool(cfg.core_expeller))


def core_sched_rule(slo: NodeSLOSpec) -> CoreSchedRule:
    strategy = slo.resource_qos
    if strategy is None:
        return CoreSchedRule()
    policy = strategy.policies.cpu_policy if strategy.policies is not None else None
    on = policy == wire.CPU_POLICY_CORE_SCHED
    return CoreSchedRule(lsr=_param(strategy.lsr, on), ls=_param(strategy.ls, on), be=_param(strategy.be, on))


def pod_group(rule: CoreSchedRule, pod: Pod) -> tuple[str | None, str | None]:
    """(group ID or None for cookie 0, error about the pod's labels or None)."""
    error = None
    policy = pod.labels.get(wire.LABEL_CORE_SCHED_POLICY, POLICY_DEFAULT)
    if policy not in (POLICY_DEFAULT, POLICY_NONE, POLICY_EXCLUSIVE):
        error = (f"label {wire.LABEL_CORE_SCHED_POLICY}={policy!r} is not one of {POLICY_NONE!r}, "
                 f"{POLICY_EXCLUSIVE!r} or empty; using the default policy")
        policy = POLICY_DEFAULT
    param = rule.for_pod(pod)
    if param is None or not param.enabled or policy == POLICY_NONE:
        return None, error
    group = pod.uid if policy == POLICY_EXCLUSIVE else pod.labels.get(wire.LABEL_CORE_SCHED_GROUP_ID, "")
    if param.expeller:
        group += EXPELLER_SUFFIX
    return group, error


def group_id(pod: Pod, slo: NodeSLOSpec) -> tuple[str | None, str | None]:
    """The pod's cookie group under a merged NodeSLO: (group or None, label error or None)."""
    return pod_group(core_sched_rule(slo), pod)
