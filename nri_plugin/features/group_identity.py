"""GroupIdentity: the pod dir's ``cpu.bvt_warp_ns`` at sandbox start, so the first container starts under its
class's identity (upstream ``runtimehooks/hooks/groupidentity``); only where the kernel has bvt."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from koordlet.rules.cpu_qos import cpu_qos_rule
from nri_plugin.features.base import Event, Feature, HookEnv, Unit, slo_of

if TYPE_CHECKING:
    from koordlet.rules.cpu_qos import CPUQOSRule
    from koordlet.rules.pod_plan import PlanRule
    from koordlet.states.nodeslo.schema import NodeSLOSpec
    from koordlet.states.nodestate import NodeView
    from koordlet.writer.executor import Update


class GroupIdentity(Unit):
    def __init__(self) -> None:
        self._rule: tuple[NodeSLOSpec, CPUQOSRule] | None = None   # the last NodeSLO's rule (one per NodeSLO)

    def rule(self, env: HookEnv, rule: PlanRule, view: NodeView | None) -> PlanRule:
        if not env.bvt:
            return rule
        slo = slo_of(view)
        cached = self._rule
        if cached is None or cached[0] is not slo:
            cached = self._rule = (slo, cpu_qos_rule(slo))
        return replace(rule, cpu_qos=cached[1])

    def run_pod_sandbox(self, env: HookEnv, event: Event) -> list[Update | None]:
        if env.executor is None or event.plan.bvt is None:
            return []
        return [env.executor.cgroup(event.info.cgroup_dir, "cpu.bvt_warp_ns", event.plan.bvt,
                                    f"pod {event.info.pod.key}", "cpu-qos")]


FEATURE = Feature("group_identity", "GroupIdentity", GroupIdentity())
