"""CoreSched: core scheduling cookies act on the container's processes, which exist only once it started: the
reconciler is woken to give them their group's cookie at once (upstream ``runtimehooks/hooks/coresched``)."""

from __future__ import annotations

from koordlet.rules.core_sched import group_id
from nri_plugin.features.base import Event, Feature, HookEnv, Unit, slo_of


class Cookies(Unit):
    def started(self, env: HookEnv, event: Event) -> bool:
        return group_id(event.info.pod, slo_of(event.view))[0] is not None


FEATURE = Feature("core_sched", "CoreSched", Cookies())
