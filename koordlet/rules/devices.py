"""Which container of a pod gets which of the pod's allocated devices.

koord-scheduler allocates devices to the pod as a whole (the ``device-allocated`` annotation has no container).
The containers whose resources asked for a device type are the ones that use it, so they get it: upstream gives
every device to ``containers[0]`` in its PodResources proxy (a sidecar, when the pod has one) and every RDMA
device node to every container. Per device type:
- one container asked: it gets every allocation of the type;
- several asked: allocations are handed out in annotation order by each container's whole-device count, when the
  counts add up to the allocations; otherwise (shared cards, hints like ApplyForAll) each gets all of them;
- none asked (an annotation without a request): the first regular container, as a pod's devices serve its app.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from koordlet.base import wire
from koordlet.states.deviceallocation import DeviceAllocation
from koordlet.states.pod import SpecContainer

# container name -> device type -> allocations, in annotation order
ContainerDevices = dict[str, dict[str, list[DeviceAllocation]]]


def allocation_ids(allocation: DeviceAllocation) -> list[str]:
    """How a device is named on the node: its VFs' PCI addresses when VFs were allocated, else its own ``id``
    (a GPU's UUID, a NIC's PCI address). Empty ids are dropped."""
    if allocation.vfs:
        return [vf.bus_id for vf in allocation.vfs if vf.bus_id]
    return [allocation.id] if allocation.id else []


def device_count(dtype: str, requests: Mapping[str, Fraction]) -> int:
    """Whole devices one container's request stands for, following the scheduler's normalisation
    (koord-scheduler ``pkg/scheduler/plugins/deviceshare/utils.go: ValidateDeviceRequest``, ``devicehandler_gpu.go:
    calcDesiredRequestsAndCountForGPU``): card counts, ``gpu.shared``, percentages over 100 in steps of 100; any
    other request is a share of one device."""
    mine = {name: q for name, q in requests.items() if wire.DEVICE_RESOURCES.get(name) == dtype}
    if dtype == wire.DEVICE_GPU:
        whole = sum((mine.get(name, Fraction(0)) for name in wire.WHOLE_GPU_RESOURCES), Fraction(0))
        if whole:
            return int(whole)
        if mine.get(wire.RESOURCE_GPU_SHARED):
            return int(mine[wire.RESOURCE_GPU_SHARED])
        percent = mine.get(wire.RESOURCE_GPU_MEMORY_RATIO) or mine.get(wire.RESOURCE_GPU) or Fraction(0)
    else:
        percent = next(iter(mine.values()), Fraction(0))
    return int(percent // 100) if percent > 100 and percent % 100 == 0 else 1


def _requesters(dtype: str, containers: Sequence[SpecContainer]) -> list[SpecContainer]:
    asked = [c for c in containers if any(wire.DEVICE_RESOURCES.get(name) == dtype for name in c.devices)]
    if asked:
        return asked
    regular = [c for c in containers if not c.sidecar] or list(containers)
    return regular[:1]


def by_container(containers: Sequence[SpecContainer],
                 allocated: Mapping[str, Sequence[DeviceAllocation]]) -> ContainerDevices:
    """The allocations of each device type split over the pod's containers (none when it has no containers)."""
    out: ContainerDevices = {}
    for dtype, allocations in allocated.items():
        requesters = _requesters(dtype, containers)
        counts = [device_count(dtype, c.devices) for c in requesters]
        if len(requesters) > 1 and sum(counts) == len(allocations):
            starts = [sum(counts[:i]) for i in range(len(counts))]
            shares = [(c, allocations[s:s + n]) for c, s, n in zip(requesters, starts, counts, strict=True)]
        else:
            shares = [(c, allocations) for c in requesters]
        for container, mine in shares:
            if mine:
                out.setdefault(container.name, {}).setdefault(dtype, []).extend(mine)
    return out
