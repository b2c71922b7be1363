"""CPU QoS values: group identity (``cpu.bvt_warp_ns``) and ``cpu.idle`` per QoS dir, pod and host application.

Facts: upstream ``pkg/koordlet/runtimehooks/hooks/groupidentity/rule.go`` (group identity: ``bvtPlugin.parseRule``,
``bvtRule.getPodBvtValue``) and ``hooks/coresched/rule.go`` (schedIdle: ``Rule.IsKubeQOSCPUIdle``). Upstream computes a
rule from the merged NodeSLO once per NodeSLO change; so do we (:func:`cpu_qos_rule`), and the per-pod value is a pure
function of the rule and the pod (:func:`pod_bvt`, :func:`class_pod_bvt` when the pod's annotation is refused), shared
by the reconciler and the NRI sandbox hook.

Beyond upstream: on kernels without ``cpu.bvt_warp_ns`` (every mainline kernel) group identity silently does
nothing upstream. When the policy is groupIdentity, the BE class is enabled with identity −1 ("BE, yields to
everything"), and the kernel has ``cpu.idle``, the BestEffort dir gets ``cpu.idle=1`` instead: the mainline
mechanism with the same intent (the BE tier runs only on otherwise-idle CPU time). See :func:`idle_values`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from koordlet.base import wire
from koordlet.host.cgroup import KubeQOS
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.nodeslo.schema import CPUQOSCfg, NodeSLOSpec, ResourceQOS
from koordlet.states.pod import Pod

NONE_BVT = 0


@dataclass(frozen=True)
class CPUQOSRule:
    """What the NodeSLO says about CPU QoS, resolved per class (disabled classes already hold 0 / false)."""
    group_identity: bool                   # cpuPolicy is groupIdentity ("" / unset count as groupIdentity)
    core_sched: bool                       # cpuPolicy is coreSched
    lsr_enabled: bool
    ls_enabled: bool
    be_enabled: bool
    lsr: int = NONE_BVT                    # bvt values (0 when the class is disabled or the policy is not GI)
    ls: int = NONE_BVT
    be: int = NONE_BVT
    idle: Mapping[KubeQOS, int] | None = None   # schedIdle per QoS dir under coreSched, else None

    @property
    def enabled(self) -> bool:
        """Upstream's "rule enabled": some class has group identity on (drives the sysctl)."""
        return self.group_identity and (self.lsr_enabled or self.ls_enabled or self.be_enabled)

    def kube_dir_bvt(self, qos: KubeQOS) -> int:
        """The root kubepods dir stays 0 (the kernel needs it); Burstable gets LS, BestEffort gets BE."""
        return {KubeQOS.GUARANTEED: NONE_BVT, KubeQOS.BURSTABLE: self.ls, KubeQOS.BESTEFFORT: self.be}[qos]

    def class_bvt(self, qos_class: str) -> int | None:
        """By koordinator class; None for SYSTEM and none (the caller falls back to the Kubernetes class)."""
        return {wire.QOS_LSE: self.lsr, wire.QOS_LSR: self.lsr, wire.QOS_LS: self.ls,
                wire.QOS_BE: self.be}.get(qos_class)

    def kube_pod_bvt(self, qos: KubeQOS) -> int:
        if qos is KubeQOS.GUARANTEED:
            return self.lsr if self.lsr_enabled else self.ls if self.ls_enabled else NONE_BVT
        return self.ls if qos is KubeQOS.BURSTABLE else self.be


def _cfg(rq: ResourceQOS | None) -> CPUQOSCfg:
    return (rq.cpu_qos if rq is not None else None) or CPUQOSCfg()


def cpu_qos_rule(slo: NodeSLOSpec) -> CPUQOSRule:
    strategy = slo.resource_qos
    policy = strategy.policies.cpu_policy if strategy and strategy.policies else None
    gi = policy in (None, "", wire.CPU_POLICY_GROUP_IDENTITY)
    cs = policy == wire.CPU_POLICY_CORE_SCHED
    lsr, ls, be = (_cfg(strategy.lsr if strategy else None), _cfg(strategy.ls if strategy else None),
                   _cfg(strategy.be if strategy else None))
    on = {k: bool(c.enable) for k, c in (("lsr", lsr), ("ls", ls), ("be", be))}

    def bvt(name: str, cfg: CPUQOSCfg) -> int:
        return int(cfg.group_identity or 0) if gi and on[name] else NONE_BVT

    idle = None
    if cs:
        def sched_idle(cfg: CPUQOSCfg, enabled: bool) -> int:
            return int(cfg.sched_idle or 0) if enabled else 0
        idle = {KubeQOS.GUARANTEED: sched_idle(lsr, True) if on["lsr"] else sched_idle(ls, on["ls"]),
                KubeQOS.BURSTABLE: sched_idle(ls, on["ls"]), KubeQOS.BESTEFFORT: sched_idle(be, on["be"])}
    return CPUQOSRule(gi, cs, gi and on["lsr"], gi and on["ls"], gi and on["be"], bvt("lsr", lsr), bvt("ls", ls),
                      bvt("be", be), idle)


def idle_values(rule: CPUQOSRule, bvt_supported: bool) -> Mapping[KubeQOS, int] | None:
    """``cpu.idle`` per Kubernetes QoS dir, or None when this agent should not touch cpu.idle.

    coreSched policy: upstream's schedIdle values. groupIdentity policy on a kernel without bvt: the BE tier is
    made idle when BE group identity is −1 (see the module docstring); everything else 0, so turning the class off
    undoes it.
    """
    if rule.idle is not None:
        return rule.idle
    if rule.group_identity and not bvt_supported:
        be_idle = 1 if rule.be_enabled and rule.be < 0 else 0
        return {KubeQOS.GUARANTEED: 0, KubeQOS.BURSTABLE: 0, KubeQOS.BESTEFFORT: be_idle}
    return None


def class_pod_bvt(rule: CPUQOSRule, pod: Pod) -> int:
    """The pod's bvt value from its class alone (what a pod without, or with a refused, annotation gets)."""
    value = rule.class_bvt(pod.raw_qos_class)
    return rule.kube_pod_bvt(pod.kube_qos) if value is None else value


@decoder(wire.ANNOTATION_POD_CPU_QOS)
def pod_bvt(rule: CPUQOSRule, pod: Pod) -> int:
    """The pod's bvt value; DecodeError when its ``koordinator.sh/cpuQOS`` annotation is refused (the caller
    logs it and uses :func:`class_pod_bvt`).

    The annotation counts only for pods whose raw class is LS (as upstream).
    """
    key = wire.ANNOTATION_POD_CPU_QOS
    value = class_pod_bvt(rule, pod)
    raw = pod.annotations.get(key)
    if raw is None or pod.raw_qos_class != wire.QOS_LS:
        return value
    doc = decode.json_object(key, raw)
    enable = decode.boolean(key, doc.get("enable", False), "enable")
    gi = doc.get("groupIdentity")
    if gi is not None:
        gi = decode.integer(key, gi, "groupIdentity", -1, 2)
    if not enable:
        return NONE_BVT
    return gi if gi is not None else value


def decided_pod_bvt(rule: CPUQOSRule, pod: Pod) -> tuple[int, DecodeError | None]:
    """The pod's bvt value, and the DecodeError of its refused annotation (then the class value)."""
    try:
        return pod_bvt(rule, pod), None
    except DecodeError as e:
        return class_pod_bvt(rule, pod), e


def host_app_bvt(rule: CPUQOSRule, qos: str) -> int:
    """Host applications by their declared class; anything else 0."""
    value = rule.class_bvt(qos)
    return NONE_BVT if value is None else value
