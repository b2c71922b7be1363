"""PodResources merge: koordinator allocations added to the kubelet's answer, per requesting container."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from koordlet._proto.podresources import api_pb2 as pb
from koordlet.base import wire
from koordlet.podresources.merge import assign, merge
from koordlet.rules.devices import allocation_ids, device_count
from koordlet.states.deviceallocation import DeviceAllocation, VirtualFunction
from koordlet.states.pod import pod_from_k8s
from tests import builders

GPU0, GPU1 = "GPU-5b1f0000-0000-0000-0000-000000000000", "GPU-7c2e0000-0000-0000-0000-000000000000"
RDMA_PF, VF_A, VF_B = "0000:09:00.0", "0000:09:00.4", "0000:09:00.5"


def pod_object(name, containers, allocated=None, sidecars=(), uid="11111111-2222-3333-4444-555555555555",
               ns="default", phase="Running", annotations=None):
    def spec_container(cname, limits, **extra):
        return {"name": cname, "resources": {"limits": limits, "requests": dict(limits)}, **extra}
    ann = dict(annotations or {})
    if allocated is not None:
        ann[wire.ANNOTATION_DEVICE_ALLOCATED] = allocated if isinstance(allocated, str) else json.dumps(allocated)
    spec = {"containers": [spec_container(n, lim) for n, lim in containers]}
    if sidecars:
        spec["initContainers"] = [spec_container(n, lim, restartPolicy="Always") for n, lim in sidecars]
        spec["initContainers"].append(spec_container("migrate", {}))     # a plain init container: not listed
    return builders.pod_object(uid, name, namespace=ns, annotations=ann, phase=phase, qos=None,
                               spec_containers=spec["containers"], init_containers=spec.get("initContainers"),
                               statuses=False, api_version=False, labels_key=False)


def pod(*args, **kwargs):
    return pod_from_k8s(pod_object(*args, **kwargs))


def gpu(minor, uid, **res):
    return {"minor": minor, "id": uid, "resources": {wire.RESOURCE_GPU_CORE: "100",
                                                     wire.RESOURCE_GPU_MEMORY_RATIO: "100", **res}}


def rdma(pf, *vfs, percent="1"):
    entry = {"minor": 0, "id": pf, "resources": {wire.RESOURCE_RDMA: percent}}
    if vfs:
        entry["extension"] = {"vfs": [{"minor": -1, "busID": vf} for vf in vfs]}
    return entry


def test_rdma_vfs_go_to_the_requesting_container_not_the_sidecar():
    p = pod("train", [("app", {"cpu": "1"}), ("nic-user", {wire.RESOURCE_RDMA: "1"})],
            {"rdma": [rdma(RDMA_PF, VF_A)]}, sidecars=[("mesh", {"cpu": "100m"})])
    assignment, problems = assign(p)
    assert assignment == {"nic-user": {wire.RESOURCE_RDMA: [VF_A]}}
    assert problems == []
    # the kubelet lists sidecars first; upstream would have put the VF on "mesh"
    assert [c.name for c in p.spec_containers] == ["mesh", "app", "nic-user"]


def test_whole_gpus_are_listed_by_uuid_under_nvidia_com_gpu():
    p = pod("infer", [("app", {"nvidia.com/gpu": "2"})], {"gpu": [gpu(0, GPU0), gpu(1, GPU1)]})
    assert assign(p)[0] == {"app": {"nvidia.com/gpu": [GPU0, GPU1]}}


def test_allocations_are_split_between_containers_by_their_counts():
    p = pod("two", [("a", {"nvidia.com/gpu": "1"}), ("b", {wire.RESOURCE_GPU_MEMORY_RATIO: "100",
                                                          wire.RESOURCE_GPU_CORE: "100"})],
            {"gpu": [gpu(0, GPU0), gpu(1, GPU1)]})
    assert assign(p)[0] == {"a": {"nvidia.com/gpu": [GPU0]}, "b": {"nvidia.com/gpu": [GPU1]}}


def test_containers_sharing_a_card_each_see_it():
    shared = gpu(0, GPU0, **{wire.RESOURCE_GPU_MEMORY_RATIO: "50", wire.RESOURCE_GPU_CORE: "50"})
    p = pod("share", [("a", {wire.RESOURCE_GPU_MEMORY_RATIO: "25"}), ("b", {wire.RESOURCE_GPU_MEMORY_RATIO: "25"})],
            {"gpu": [shared]})
    assert assign(p)[0] == {"a": {"nvidia.com/gpu": [GPU0]}, "b": {"nvidia.com/gpu": [GPU0]}}


def test_gpu_and_rdma_joint_allocation_and_the_pf_when_no_vfs():
    p = pod("joint", [("app", {"nvidia.com/gpu": "1", wire.RESOURCE_RDMA: "100"})],
            {"gpu": [gpu(0, GPU0)], "rdma": [rdma(RDMA_PF, percent="100")]})
    assert assign(p)[0] == {"app": {"nvidia.com/gpu": [GPU0], wire.RESOURCE_RDMA: [RDMA_PF]}}


def test_annotation_without_a_request_lands_on_the_first_regular_container():
    p = pod("noreq", [("app", {}), ("log", {})], {"rdma": [rdma(RDMA_PF, VF_A, VF_B)]},
            sidecars=[("mesh", {})])
    assert assign(p)[0] == {"app": {wire.RESOURCE_RDMA: [VF_A, VF_B]}}


def test_fpga_has_a_name_and_unknown_types_are_left_out_with_a_reason():
    p = pod("odd", [("app", {wire.RESOURCE_FPGA: "100"})],
            {"fpga": [{"minor": 0, "id": "0000:3b:00.0"}], "xpu": [{"minor": 0, "id": "x0"}]})
    assignment, problems = assign(p)
    assert assignment == {"app": {wire.RESOURCE_FPGA: ["0000:3b:00.0"]}}
    assert len(problems) == 1 and "'xpu'" in problems[0]


def test_empty_ids_are_dropped():
    assert allocation_ids(DeviceAllocation("gpu", 0, "")) == []
    assert allocation_ids(DeviceAllocation("rdma", 0, RDMA_PF, vfs=(VirtualFunction(1, ""),
                                                                    VirtualFunction(2, VF_B)))) == [VF_B]
    p = pod("noid", [("app", {"nvidia.com/gpu": "1"})], {"gpu": [{"minor": 3, "resources": {}}]})
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
    p = pod("old", [("a", {}), ("b", {"kubernetes.io/rdma": "1"})], {"rdma": [rdma(RDMA_PF, VF_A)]})
    assert assign(p)[0] == {"b": {wire.RESOURCE_RDMA: [VF_A]}}


def kubelet_entry(ns, name, containers):
    out = pb.PodResources(name=name, namespace=ns)
    for cname, devices in containers:
        c = out.containers.add(name=cname, cpu_ids=[2, 3])
        for resource, ids in devices.items():
            c.devices.add(resource_name=resource, device_ids=ids, topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)]))
    return out


def test_merge_keeps_the_kubelet_answer_and_adds_ours_sorted_without_repeats():
    p = pod("train", [("app", {"nvidia.com/gpu": "1", wire.RESOURCE_RDMA: "1"})],
            {"gpu": [gpu(0, GPU0)], "rdma": [rdma(RDMA_PF, VF_A)]})
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
    new = pod("new", [("app", {wire.RESOURCE_RDMA: "1"})], {"rdma": [rdma(RDMA_PF, VF_B)]},
              sidecars=[("mesh", {})], uid="22222222-2222-3333-4444-555555555555")
    gone = pod("done", [("app", {})], phase="Succeeded", uid="33333333-2222-3333-4444-555555555555")
    merged = merge([kubelet_entry("kube-system", "dns", [("coredns", {})])], [new, gone])
    entries = {(e.namespace, e.name): e for e in merged.response.pod_resources}
    assert set(entries) == {("kube-system", "dns"), ("default", "new")}
    assert [c.name for c in entries["default", "new"].containers] == ["mesh", "app"]
    assert [(d.resource_name, list(d.device_ids)) for d in entries["default", "new"].containers[1].devices] == [
        (wire.RESOURCE_RDMA, [VF_B])]
    assert merged.unknown == {("kube-system", "dns")}


def test_a_malformed_annotation_costs_that_pod_its_devices_only():
    bad = pod("bad", [("app", {})], '{"rdma": [{"minor": "zero"}]}')
    good = pod("good", [("app", {wire.RESOURCE_RDMA: "1"})], {"rdma": [rdma(RDMA_PF, VF_A)]},
               uid="44444444-2222-3333-4444-555555555555")
    merged = merge([kubelet_entry("default", "bad", [("app", {"x/y": ["1"]})]),
                    kubelet_entry("default", "good", [("app", {})])], [bad, good])
    bad_entry, good_entry = merged.response.pod_resources
    assert [d.resource_name for d in bad_entry.containers[0].devices] == ["x/y"]
    assert list(good_entry.containers[0].devices[0].device_ids) == [VF_A]
    assert len(merged.problems) == 1 and merged.problems[0][0] == "default/bad"
    assert "minor" in merged.problems[0][1]
