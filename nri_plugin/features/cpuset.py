"""CPUSetAllocator: the container's cpuset (its pinned CPUs or its class's share pool), and unlimited cfs quota
for pods the scheduler pinned (upstream ``runtimehooks/hooks/cpuset``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from nri_plugin.features.base import Feature, HookEnv, Unit

if TYPE_CHECKING:
    from koordlet.rules.pod_plan import PlanRule
    from koordlet.states.nodestate import NodeView


class CPUSet(Unit):
    def rule(self, env: HookEnv, rule: PlanRule, view: NodeView | None) -> PlanRule:
        return replace(rule, resources=replace(rule.resources, cpuset=True))


FEATURE = Feature("cpuset", "CPUSetAllocator", CPUSet())
