"""Resctrl: pods with their own resctrl group (``node.koordinator.sh/resctrl``). The reconciler makes the group
and moves the tasks; a started container's processes exist only now, so it is woken to do it at once (the
``resctrl`` feature names the group at creation when it already exists)."""

from __future__ import annotations

from koordlet.base import wire
from nri_plugin.features.base import Event, Feature, HookEnv, Unit


class PodGroups(Unit):
    def started(self, env: HookEnv, event: Event) -> bool:
        return wire.ANNOTATION_POD_RESCTRL in event.info.pod.annotations


FEATURE = Feature("resctrl_pods", "Resctrl", PodGroups())
