"""RDMADeviceInject: the device nodes of the RDMA functions the scheduler allocated to the container
(``device-allocated``), to every container when the agent does not know the pod's spec yet, as upstream; any
problem injects nothing, logged against the pod."""

from __future__ import annotations

from koordlet._proto.nri import api_pb2 as api
from koordlet.base import wire
from koordlet.host.rdma import verbs_devices
from koordlet.rules.devices import allocation_ids, by_container
from koordlet.states.deviceallocation import parse_device_allocated
from nri_plugin.features.base import Event, Feature, HookEnv, Unit


class RDMADevices(Unit):
    def create_container(self, env: HookEnv, event: Event, adjust: api.ContainerAdjustment) -> None:
        pod, name = event.info.pod, event.container.name if event.container is not None else ""
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
            devices = verbs_devices(env.host, [i for a in allocations for i in allocation_ids(a)], env.dev_root)
        except (ValueError, OSError) as e:
            env.problem(f"rdma/{pod.uid}", "nri pod=%s container=%s: RDMA devices not injected: %s", pod.key, name, e)
            return
        for d in devices:
            adjust.linux.devices.add(path=d.path, type="c", major=d.major, minor=d.minor,
                                     file_mode=api.OptionalFileMode(value=0o666))


FEATURE = Feature("rdma_devices", "RDMADeviceInject", RDMADevices())
