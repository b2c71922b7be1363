"""BatchResource: batch cpu shares, cfs quota and memory limit of BestEffort pods from their ``batch-*`` resources,
on the container and, at sandbox start, on the pod dir (upstream ``runtimehooks/hooks/batchresource``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from nri_plugin.features.base import Feature, HookEnv, Unit

if TYPE_CHECKING:
    from koordlet.rules.pod_plan import PlanRule
    from koordlet.states.nodestate import NodeView


class Batch(Unit):
    def rule(self, env: HookEnv, rule: PlanRule, view: NodeView | None) -> PlanRule:
        return replace(rule, resources=replace(rule.resources, batch=True))


FEATURE = Feature("batch", "BatchResource", Batch())
