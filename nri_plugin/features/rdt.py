"""RdtResctrl: the container starts in its resctrl group (``rdt_class``): its pod's own group when the reconciler
made one (feature ``resctrl_pods``), else its class group (upstream ``runtimehooks/hooks/resctrl``). Only a group
that exists is named: the runtime fails a container whose group is missing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.host.resctrl import group_exists
from koordlet.rules.resctrl import CLASS_GROUP_OF, POD_GROUP_PREFIX
from nri_plugin.features.base import Event, Feature, HookEnv, Unit

if TYPE_CHECKING:
    from koordlet._proto.nri import api_pb2 as api


class RdtClass(Unit):
    def create_container(self, env: HookEnv, event: Event, adjust: api.ContainerAdjustment) -> None:
        if env.resctrl_root is None or event.container is None:
            return
        pod = event.info.pod
        candidates = []
        if "resctrl_pods" in env.features and wire.ANNOTATION_POD_RESCTRL in pod.annotations:
            candidates.append(POD_GROUP_PREFIX + pod.uid)
        group = CLASS_GROUP_OF.get(pod.qos_class)
        if group is not None:
            candidates.append(group)
        current = event.container.linux.resources
        for name in candidates:
            if group_exists(env.resctrl_root, name):
                if not (current.HasField("rdt_class") and current.rdt_class.value == name):
                    adjust.linux.resources.rdt_class.value = name
                return


FEATURE = Feature("resctrl", "RdtResctrl", RdtClass())
