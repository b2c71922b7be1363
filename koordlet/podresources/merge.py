"""Koordinator device allocations merged into kubelet PodResources answers (reference §4.3–4.4).

Multus-CNI finds a pod's RDMA VFs by looking up ``koordinator.sh/rdma`` in the devices the PodResources API lists
for the pod's containers. The kubelet knows nothing of koord-scheduler's allocations, so the proxy adds them from
the pod's ``scheduling.koordinator.sh/device-allocated`` annotation. Unlike upstream's proxy, which puts every
device on ``containers[0]`` (a sidecar, when the pod has one) and lists unknown device types under an empty
resource name, the devices go to the containers whose resources asked for that device type, and a type without a
PodResources name is left out (logged by the caller).

Who gets what, per device type:
- one container asked: it gets every allocation of the type;
- several asked: allocations are handed out in annotation order by each container's whole-device count, when the
  counts add up to the allocations; otherwise (shared cards, hints like ApplyForAll) each gets all of them;
- none asked (an annotation without a request): the first regular container, as a pod's devices serve its app.

Device ids: GPUs by ``id`` (the card UUID); RDMA/FPGA by their VFs' ``busID`` when VFs were allocated, else the
PF's ``id`` (the PCI address), which is what Multus writes into the CNI config as ``deviceID``/``pciBusID``.
Empty ids are dropped, never listed as "".
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

from koordlet import wire
from koordlet.states.deviceallocation import DeviceAllocation, parse_device_allocated
from koordlet.states.pod import Pod, SpecContainer
from proto.podresources import api_pb2 as pb

# container name -> PodResources resource name -> device ids, in allocation order
Assignment = dict[str, dict[str, list[str]]]


def allocation_ids(allocation: DeviceAllocation) -> list[str]:
    """What a device is called in PodResources: its VFs' PCI addresses, or its own id."""
    if allocation.vfs:
        return [vf.bus_id for vf in allocation.vfs if vf.bus_id]
    return [allocation.id] if allocation.id else []


def device_count(dtype: str, requests: Mapping[str, Fraction]) -> int:
    """Whole devices one container's request stands for, following the scheduler's normalisation
    (reference/scheduler.md §1.3): card counts, ``gpu.shared``, percentages over 100 in steps of 100; any
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


def assign(pod: Pod) -> tuple[Assignment, list[str]]:
    """The pod's allocated devices per container, and what could not be placed (for the caller's log).

    ValueError: the annotation is malformed (the caller logs it against the pod and lists the pod as the kubelet
    does, without koordinator devices)."""
    raw = pod.annotations.get(wire.ANNOTATION_DEVICE_ALLOCATED)
    if not raw:
        return {}, []
    out: Assignment = {}
    problems: list[str] = []
    for dtype, allocations in parse_device_allocated(raw).items():
        name = wire.PODRESOURCES_NAMES.get(dtype)
        if name is None:
            problems.append(f"device type {dtype!r} has no PodResources resource name; not listed")
            continue
        requesters = _requesters(dtype, pod.spec_containers)
        if not requesters:
            problems.append(f"{dtype} allocated but the pod spec has no containers; not listed")
            continue
        counts = [device_count(dtype, c.devices) for c in requesters]
        shares: Iterable[tuple[SpecContainer, Sequence[DeviceAllocation]]]
        if len(requesters) > 1 and sum(counts) == len(allocations):
            starts = [sum(counts[:i]) for i in range(len(counts))]
            shares = [(c, allocations[s:s + n]) for c, s, n in zip(requesters, starts, counts)]
        else:
            shares = [(c, allocations) for c in requesters]
        for container, mine in shares:
            ids = [i for a in mine for i in allocation_ids(a)]
            if ids:
                out.setdefault(container.name, {}).setdefault(name, []).extend(ids)
    return out, problems


def _add_devices(container: pb.ContainerResources, devices: Mapping[str, list[str]]) -> None:
    """Add our devices to a container; an id the kubelet already lists under the same name is not repeated.
    The list ends sorted by resource name (stable, so the kubelet's ids keep their order), as upstream leaves it."""
    if not devices:
        return
    entries = []
    for listed in container.devices:
        entry = pb.ContainerDevices()
        entry.CopyFrom(listed)
        entries.append(entry)
    by_name = {e.resource_name: e for e in entries}
    for name, ids in devices.items():
        entry = by_name.get(name)
        if entry is None:
            entry = by_name[name] = pb.ContainerDevices(resource_name=name)
            entries.append(entry)
        known = set(entry.device_ids)
        entry.device_ids.extend(i for i in dict.fromkeys(ids) if i not in known)
    entries.sort(key=lambda e: e.resource_name)
    del container.devices[:]
    container.devices.extend(entries)


@dataclass(frozen=True)
class Merged:
    response: pb.ListPodResourcesResponse
    unknown: frozenset[tuple[str, str]]      # (namespace, name) the kubelet lists but the pod view does not have
    problems: tuple[tuple[str, str], ...]    # (pod key, what was wrong) for the caller's log


def merge(kubelet: Sequence[pb.PodResources], pods: Sequence[Pod]) -> Merged:
    """The kubelet's answer (possibly a cached one) with each known pod's allocated devices added; pods the
    pod view has but the answer lacks (new since it was fetched, or the kubelet is away) are listed from their
    spec, so Multus still finds their devices."""
    by_key = {(p.namespace, p.name): p for p in pods}
    out = pb.ListPodResourcesResponse()
    problems: list[tuple[str, str]] = []
    listed: set[tuple[str, str]] = set()
    unknown: set[tuple[str, str]] = set()

    def devices_of(pod: Pod) -> Assignment:
        try:
            assignment, issues = assign(pod)
        except ValueError as e:
            problems.append((pod.key, str(e)))
            return {}
        problems.extend((pod.key, issue) for issue in issues)
        return assignment

    for entry in kubelet:
        key = (entry.namespace, entry.name)
        listed.add(key)
        copy = out.pod_resources.add()
        copy.CopyFrom(entry)
        pod = by_key.get(key)
        if pod is None:
            unknown.add(key)
            continue
        assignment = devices_of(pod)
        containers = {c.name: c for c in copy.containers}
        for name, devices in assignment.items():
            target = containers.get(name)
            if target is None:
                target = containers[name] = copy.containers.add(name=name)
            _add_devices(target, devices)
    for pod in pods:
        if (pod.namespace, pod.name) in listed or pod.terminating or not pod.spec_containers:
            continue
        assignment = devices_of(pod)
        entry = out.pod_resources.add(name=pod.name, namespace=pod.namespace)
        for spec in pod.spec_containers:
            _add_devices(entry.containers.add(name=spec.name), assignment.get(spec.name, {}))
    return Merged(out, frozenset(unknown), tuple(problems))
