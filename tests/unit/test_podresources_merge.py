"""PodResources merge: koordinator allocations added to the kubelet's answer, per requesting container."""

from __future__ import annotations

import json
from fractions import Fraction
from functools import partial
from typing import Any

import pytest

from koordlet._proto.podresources import api_pb2 as pb
from koordlet.base import wire
from koordlet.podresources.merge import assign, merge
from koordlet.rules.devices import allocation_ids, device_count
from koordlet.states.deviceallocation import DeviceAllocation, VirtualFunction
from tests.builders import agent_pod

GPU0, GPU1 = "GPU-5b1f0000-0000-0000-0000-000000000000", "GPU-7c2e0000-0000-0000-0000-000000000000"
RDMA_PF, VF_A, VF_B = "0000:09:00.0", "0000:09:00.4", "0000:09:00.5"


UID = "11111111-2222-3333-4444-555555555555"


def limited(name: str, limits: dict[str, str]) -> dict[str, Any]:
    """A spec container asking through its limits, as the API server stores it: requests defaulted to the limits."""
    return {"name": name, "resources": {"limits": limits, "requests": dict(limits)}}


def sidecar(name: str, limits: dict[str, str]) -> dict[str, Any]:
    """A native sidecar: an init container that keeps running (restartPolicy Always)."""
    return {**limited(name, limits), "restartPolicy": "Always"}


def allocated(value: Any) -> dict[str, str]:
    """The device-allocated annotation of this allocation; a string is used as it is (malformed on purpose)."""
    return {wire.ANNOTATION_DEVICE_ALLOCATED: value if isinstance(value, str) else json.dumps(value)}


MIGRATE = limited("migrate", {})           # a plain init container: never listed
# pods as the API server lists them to the agent: the scheduler's allocation, no QoS class reported yet
pod = partial(agent_pod, qos=None)


def gpu(minor, uid, **res):
    return {"minor": minor, "id": uid, "resources": {wire.RESOURCE_GPU_CORE: "100",
                                                     wire.RESOURCE_GPU_MEMORY_RATIO: "100", **res}}


def rdma(pf, *vfs, percent="1"):
    entry = {"minor": 0, "id": pf, "resources": {wire.RESOURCE_RDMA: percent}}
    if vfs:
        entry["extension"] = {"vfs": [{"minor": -1, "busID": vf} for vf in vfs]}
    return entry


def test_rdma_vfs_go_to_the_requesting_container_not_the_sidecar():
    p = pod(UID, "train",
            spec_containers=[limited("app", {"cpu": "1"}), limited("nic-user", {wire.RESOURCE_RDMA: "1"})],
            init_containers=[sidecar("mesh", {"cpu": "100m"}), MIGRATE],
            annotations=allocated({"rdma": [rdma(RDMA_PF, VF_A)]}))
    assignment, problems = assign(p)
    assert assignment == {"nic-user": {wire.RESOURCE_RDMA: [VF_A]}}
    assert problems == []
    # the kubelet lists sidecars first; upstream would have put the VF on "mesh"
    assert [c.name for c in p.spec_containers] == ["mesh", "app", "nic-user"]


def test_whole_gpus_are_listed_by_uuid_under_nvidia_com_gpu():
    p = pod(UID, "infer", spec_containers=[limited("app", {"nvidia.com/gpu": "2"})],
            annotations=allocated({"gpu": [gpu(0, GPU0), gpu(1, GPU1)]}))
    assert assign(p)[0] == {"app": {"nvidia.com/gpu": [GPU0, GPU1]}}


def test_allocations_are_split_between_containers_by_their_counts():
    p = pod(UID, "two", spec_containers=[limited("a", {"nvidia.com/gpu": "1"}), limited("b", {
                wire.RESOURCE_GPU_MEMORY_RATIO: "100", wire.RESOURCE_GPU_CORE: "100"})],
            annotations=allocated({"gpu": [gpu(0, GPU0), gpu(1, GPU1)]}))
    assert assign(p)[0] == {"a": {"nvidia.com/gpu": [GPU0]}, "b": {"nvidia.com/gpu": [GPU1]}}


def test_containers_sharing_a_card_each_see_it():
    shared = gpu(0, GPU0, **{wire.RESOURCE_GPU_MEMORY_RATIO: "50", wire.RESOURCE_GPU_CORE: "50"})
    p = pod(UID, "share",
            spec_containers=[limited("a", {wire.RESOURCE_GPU_MEMORY_RATIO: "25"}),
                             limited("b", {wire.RESOURCE_GPU_MEMORY_RATIO: "25"})],
            annotations=allocated({"gpu": [shared]}))
    assert assign(p)[0] == {"a": {"nvidia.com/gpu": [GPU0]}, "b": {"nvidia.com/gpu": [GPU0]}}


def test_gpu_and_rdma_joint_allocation_and_the_pf_when_no_vfs():
    p = pod(UID, "joint", spec_containers=[limited("app", {"nvidia.com/gpu": "1", wire.RESOURCE_RDMA: "100"})],
            annotations=allocated({"gpu": [gpu(0, GPU0)], "rdma": [rdma(RDMA_PF, percent="100")]}))
    assert assign(p)[0] == {"app": {"nvidia.com/gpu": [GPU0], wire.RESOURCE_RDMA: [RDMA_PF]}}


def test_annotation_without_a_request_lands_on_the_first_regular_container():
    p = pod(UID, "noreq", spec_containers=[limited("app", {}), limited("log", {})],
            init_containers=[sidecar("mesh", {}), MIGRATE],
            annotations=allocated({"rdma": [rdma(RDMA_PF, VF_A, VF_B)]}))
    assert assign(p)[0] == {"app": {wire.RESOURCE_RDMA: [VF_A, VF_B]}}


def test_fpga_has_a_name_and_unknown_types_are_left_out_with_a_reason():
    p = pod(UID, "odd", spec_containers=[limited("app", {wire.RESOURCE_FPGA: "100"})],
            annotations=allocated({"fpga": [{"minor": 0, "id": "0000:3b:00.0"}], "xpu": [{"minor": 0, "id": "x0"}]}))
    assignment, problems = assign(p)
    assert assignment == {"app": {wire.RESOURCE_FPGA: ["0000:3b:00.0"]}}
    assert len(problems) == 1 and "'xpu'" in problems[0]


def test_empty_ids_are_dropped():
    assert allocation_ids(DeviceAllocation("gpu", 0, "")) == []
    assert allocation_ids(DeviceAllocation("rdma", 0, RDMA_PF, vfs=(VirtualFunction(1, ""),
                                                                    VirtualFunction(2, VF_B)))) == [VF_B]
    p = pod(UID, "noid", spec_containers=[limited("app", {"nvidia.com/gpu": "1"})],
            annotations=allocated({"gpu": [{"minor": 3, "resources": {}}]}))
    assert assign(p)[0] == {}


@pytest.mark.parametrize("dtype,requests,count", [
    ("gpu", {"nvidia.com/gpu": Fraction(3)}, 3),
    ("gpu", {wire.RESOURCE_GPU_SHARED: Fraction(2), wire.RESOURCE_GPU_MEMORY_RATIO: Fraction(100)}, 2),
    ("gpu", {wire.RESOURCE_GPU_MEMORY_RATIO: Fraction(200)}, 2),
    ("gpu", {wire.RESOURCE_GPU: Fraction(300)}, 3),
    ("gpu", {wire.RESOURCE_GPU_MEMORY_RATIO: Fraction(150)}, 1),
    ("gpu", {wire.RESOURCE_GPU_MEMORY: Fraction(16 * 2**30)}, 1),
    ("rdma", {wire.RESOURCE_RDMA: Fraction(1)}, 1),
    ("rdma", {wire.RESOURCE_RDMA: Fraction(200)}, 2),
    ("rdma", {"nvidia.com/gpu": Fraction(4)}, 1),      # another type's request says nothing about rdma
])
def test_device_count_follows_the_scheduler(dtype, requests, count):
    assert device_count(dtype, requests) == count


def test_deprecated_resource_names_count_as_requests():
    p = pod(UID, "old", spec_containers=[limited("a", {}), limited("b", {"kubernetes.io/rdma": "1"})],
            annotations=allocated({"rdma": [rdma(RDMA_PF, VF_A)]}))
    assert assign(p)[0] == {"b": {wire.RESOURCE_RDMA: [VF_A]}}


def kubelet_entry(ns, name, containers):
    out = pb.PodResources(name=name, namespace=ns)
    for cname, devices in containers:
        c = out.containers.add(name=cname, cpu_ids=[2, 3])
        for resource, ids in devices.items():
            c.devices.add(resource_name=resource, device_ids=ids, topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)]))
    return out


def test_merge_keeps_the_kubelet_answer_and_adds_ours_sorted_without_repeats():
    p = pod(UID, "train", spec_containers=[limited("app", {"nvidia.com/gpu": "1", wire.RESOURCE_RDMA: "1"})],
            annotations=allocated({"gpu": [gpu(0, GPU0)], "rdma": [rdma(RDMA_PF, VF_A)]}))
    listed = kubelet_entry("default", "train", [("app", {"openshift.io/sriov": ["0000:af:00.2"],
                                                         "nvidia.com/gpu": [GPU0]})])
    merged = merge([listed], [p])
    (entry,) = merged.response.pod_resources
    (app,) = entry.containers
    assert [(d.resource_name, list(d.device_ids)) for d in app.devices] == [
        (wire.RESOURCE_RDMA, [VF_A]), ("nvidia.com/gpu", [GPU0]), ("openshift.io/sriov", ["0000:af:00.2"])]
    assert list(app.cpu_ids) == [2, 3]
    assert app.devices[2].topology.nodes[0].ID == 1          # the kubelet's entries keep their topology
    assert merged.unknown == frozenset() and merged.problems == ()


def test_merge_lists_pods_the_answer_lacks_and_reports_pods_the_view_lacks():
    new = pod("22222222-2222-3333-4444-555555555555", "new",
              spec_containers=[limited("app", {wire.RESOURCE_RDMA: "1"})],
              init_containers=[sidecar("mesh", {}), MIGRATE], annotations=allocated({"rdma": [rdma(RDMA_PF, VF_B)]}))
    gone = pod("33333333-2222-3333-4444-555555555555", "done", spec_containers=[limited("app", {})], phase="Succeeded")
    merged = merge([kubelet_entry("kube-system", "dns", [("coredns", {})])], [new, gone])
    entries = {(e.namespace, e.name): e for e in merged.response.pod_resources}
    assert set(entries) == {("kube-system", "dns"), ("default", "new")}
    assert [c.name for c in entries["default", "new"].containers] == ["mesh", "app"]
    assert [(d.resource_name, list(d.device_ids)) for d in entries["default", "new"].containers[1].devices] == [
        (wire.RESOURCE_RDMA, [VF_B])]
    assert merged.unknown == {("kube-system", "dns")}


def test_a_malformed_annotation_costs_that_pod_its_devices_only():
    bad = pod(UID, "bad", spec_containers=[limited("app", {})], annotations=allocated('{"rdma": [{"minor": "zero"}]}'))
    good = pod("44444444-2222-3333-4444-555555555555", "good",
               spec_containers=[limited("app", {wire.RESOURCE_RDMA: "1"})],
               annotations=allocated({"rdma": [rdma(RDMA_PF, VF_A)]}))
    merged = merge([kubelet_entry("default", "bad", [("app", {"x/y": ["1"]})]),
                    kubelet_entry("default", "good", [("app", {})])], [bad, good])
    bad_entry, good_entry = merged.response.pod_resources
    assert [d.resource_name for d in bad_entry.containers[0].devices] == ["x/y"]
    assert list(good_entry.containers[0].devices[0].device_ids) == [VF_A]
    assert len(merged.problems) == 1 and merged.problems[0][0] == "default/bad"
    assert "minor" in merged.problems[0][1]
