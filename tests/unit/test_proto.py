"""proto/: the committed modules are what `make proto` generates, and the wire matches the reference."""

import pathlib

import pytest

from proto.nri import api_pb2 as api
from proto.podresources import api_pb2 as podresources
from proto.ttrpc import ttrpc_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_committed_modules_match_sources(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the test extra) regenerates the modules")
    from proto.generate import generate, sources
    generate(tmp_path)
    for src in sources():
        for generated in sorted((tmp_path / src).parent.glob(pathlib.Path(src).stem + "_pb2*.py")):
            committed = ROOT / generated.relative_to(tmp_path)
            assert committed.exists(), f"{committed} is missing: run `make proto`"
            assert committed.read_bytes() == generated.read_bytes(), f"{committed} is stale: run `make proto`"
        assert (ROOT / src).with_name(pathlib.Path(src).stem + "_pb2.py").exists()


def _field(msg, name):
    return msg.DESCRIPTOR.fields_by_name[name].number


@pytest.mark.parametrize("msg,fields", [
    (api.RegisterPluginRequest, {"plugin_name": 1, "plugin_idx": 2, "NRI_version": 3}),
    (api.ConfigureRequest, {"config": 1, "runtime_name": 2, "runtime_version": 3, "registration_timeout": 4,
                            "request_timeout": 5, "NRI_version": 6}),
    (api.ConfigureResponse, {"events": 2}),
    (api.SynchronizeRequest, {"pods": 1, "containers": 2, "more": 3}),
    (api.SynchronizeResponse, {"update": 1, "more": 2}),
    (api.StateChangeEvent, {"event": 1, "pod": 2, "container": 3}),
    (api.CreateContainerResponse, {"adjust": 1, "update": 2, "evict": 3}),
    (api.UpdateContainerRequest, {"pod": 1, "container": 2, "linux_resources": 3}),
    (api.PodSandbox, {"id": 1, "name": 2, "uid": 3, "namespace": 4, "labels": 5, "annotations": 6, "linux": 8,
                      "ips": 10}),
    (api.LinuxPodSandbox, {"cgroup_parent": 3}),
    (api.Container, {"id": 1, "pod_sandbox_id": 2, "name": 3, "state": 4, "env": 8, "mounts": 9, "linux": 11,
                     "CDI_devices": 20, "image": 22}),
    (api.ContainerAdjustment, {"annotations": 2, "mounts": 3, "env": 4, "hooks": 5, "linux": 6, "rlimits": 7,
                               "CDI_devices": 8, "args": 9}),
    (api.LinuxContainerAdjustment, {"devices": 1, "resources": 2, "cgroups_path": 3, "oom_score_adj": 4,
                                    "rdt": 11, "memory_policy": 12}),
    (api.LinuxResources, {"memory": 1, "cpu": 2, "rdt_class": 5, "unified": 6, "pids": 8}),
    (api.LinuxCPU, {"shares": 1, "quota": 2, "period": 3, "cpus": 6, "mems": 7}),
    (api.LinuxMemory, {"limit": 1, "swappiness": 6, "use_hierarchy": 8}),
    (api.ContainerUpdate, {"container_id": 1, "linux": 2, "ignore_failure": 3}),
    (api.LinuxDevice, {"path": 1, "type": 2, "major": 3, "minor": 4, "file_mode": 5, "uid": 6, "gid": 7}),
    (ttrpc_pb2.Request, {"service": 1, "method": 2, "payload": 3, "timeout_nano": 4, "metadata": 5}),
    (ttrpc_pb2.Response, {"status": 1, "payload": 2}),
    (ttrpc_pb2.Status, {"code": 1, "message": 2, "details": 3}),
    (podresources.ListPodResourcesResponse, {"pod_resources": 1}),
    (podresources.PodResources, {"name": 1, "namespace": 2, "containers": 3}),
    (podresources.ContainerResources, {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5}),
    (podresources.ContainerDevices, {"resource_name": 1, "device_ids": 2, "topology": 3}),
    (podresources.ContainerMemory, {"memory_type": 1, "size": 2, "topology": 3}),
    (podresources.NUMANode, {"ID": 1}),
    (podresources.AllocatableResourcesResponse, {"devices": 1, "cpu_ids": 2, "memory": 3}),
    (podresources.GetPodResourcesRequest, {"pod_name": 1, "pod_namespace": 2}),
    (podresources.DynamicResource, {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4}),
    (podresources.ClaimResource, {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4}),
])
def test_field_numbers_as_the_reference(msg, fields):
    assert {name: _field(msg, name) for name in fields} == fields


def test_adjustment_has_no_field_1():
    assert 1 not in {f.number for f in api.ContainerAdjustment.DESCRIPTOR.fields}


def test_cpu_shares_adjustment_bytes():
    """Reference §1.8 worked path: CreateContainerResponse.1 → .6 → .2 → .2 (cpu) → .1 (shares) → .1 value."""
    resp = api.CreateContainerResponse()
    resp.adjust.linux.resources.cpu.shares.value = 1024
    assert resp.SerializeToString().hex() == "0a0b" "3209" "1207" "1205" "0a03" "088008"


def test_event_enum_values():
    assert [api.RUN_POD_SANDBOX, api.REMOVE_POD_SANDBOX, api.CREATE_CONTAINER, api.POST_START_CONTAINER,
            api.UPDATE_CONTAINER, api.REMOVE_CONTAINER, api.VALIDATE_CONTAINER_ADJUSTMENT] == [1, 3, 4, 7, 8, 11, 14]


def test_podresources_service_paths():
    """Multus and the kubelet speak these exact gRPC paths (reference §4.1)."""
    service = podresources.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
