"""Koordinator device allocations merged into kubelet PodResources answers (koordinator
``pkg/koordlet/statesinformer/impl/states_pod_resources.go: fillPodDevicesAllocatedByKoord``).

Multus-CNI finds a pod's RDMA VFs by looking up ``koordinator.sh/rdma`` in the devices the PodResources API lists
for the pod's containers. The kubelet knows nothing of koord-scheduler's allocations, so the proxy adds them from
the pod's ``scheduling.koordinator.sh/device-allocated`` annotation, to the containers that asked for them
(:mod:`koordlet.rules.devices`; upstream puts them all on ``containers[0]``). Types are listed under
``wire.PODRESOURCES_NAMES``; a type without a name is left out and reported (upstream lists it under "").
Ids are GPU UUIDs and the VFs' PCI addresses (the PF's when no VFs were allocated), which Multus writes into the
CNI config as ``deviceID``/``pciBusID``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from koordlet._proto.podresources import api_pb2 as pb
from koordlet.base import wire
from koordlet.rules.devices import allocation_ids, by_container
from koordlet.states.deviceallocation import parse_device_allocated
from koordlet.states.pod import Pod

# container name -> PodResources resource name -> device ids, in allocation order
Assignment = dict[str, dict[str, list[str]]]


def assign(pod: Pod) -> tuple[Assignment, list[str]]:
    """The pod's allocated devices per container, and what could not be placed (for the caller's log).

    ValueError: the annotation is malformed (the caller logs it against the pod and lists the pod as the kubelet
    does, without koordinator devices)."""
    raw = pod.annotations.get(wire.ANNOTATION_DEVICE_ALLOCATED)
    if not raw:
        return {}, []
    allocated = parse_device_allocated(raw)
    problems = [f"device type {dtype!r} has no PodResources resource name; not listed"
                for dtype in allocated if dtype not in wire.PODRESOURCES_NAMES]
    if allocated and not pod.spec_containers:
        problems.append("devices allocated but the pod spec has no containers; not listed")
    out: Assignment = {}
    for container, types in by_container(pod.spec_containers, allocated).items():
        for dtype, allocations in types.items():
            name = wire.PODRESOURCES_NAMES.get(dtype)
            ids = [i for a in allocations for i in allocation_ids(a)]
            if name is not None and ids:
                out.setdefault(container, {}).setdefault(name, []).extend(ids)
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
        found = by_name.get(name)
        if found is None:
            found = by_name[name] = pb.ContainerDevices(resource_name=name)
            entries.append(found)
        entry = found
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
