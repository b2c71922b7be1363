"""GPUEnvInject: the GPUs the scheduler allocated to the container (``NVIDIA_VISIBLE_DEVICES``) and, for a shared
GPU, HAMi-core's ``libvgpu.so`` with its limits (``hami_bridge``). A problem drops HAMi-core (the container sees
its GPUs without isolation), or everything for a bad annotation; logged against the pod."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hami_bridge.inject import plan, prepare
from nri_plugin.features.base import Event, Feature, HookEnv, Unit

if TYPE_CHECKING:
    from koordlet._proto.nri import api_pb2 as api


class GPUEnv(Unit):
    def create_container(self, env: HookEnv, event: Event, adjust: api.ContainerAdjustment) -> None:
        pod, name = event.info.pod, event.container.name if event.container is not None else ""
        try:
            injection = plan(pod.annotations, pod.labels, pod.uid, name, env.hami)
        except ValueError as e:
            env.problem(f"gpu/{pod.uid}", "nri pod=%s container=%s: %s; no GPU injection", pod.key, name, e)
            return
        try:
            injection = prepare(injection, env.hami)
        except OSError as e:
            env.problem(f"gpu/{pod.uid}", "nri pod=%s container=%s: HAMi-core not injected: %s; the container sees "
                        "its GPUs without isolation", pod.key, name, e)
            injection = injection.visible_only()
        for key, value in injection.env.items():
            adjust.env.add(key=key, value=value)
        for m in injection.mounts:
            adjust.mounts.add(destination=m.destination, type=m.type, source=m.source, options=list(m.options))


FEATURE = Feature("gpu_env", "GPUEnvInject", GPUEnv())
