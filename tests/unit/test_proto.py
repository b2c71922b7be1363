"""proto/ and koordlet/_proto/: the committed modules are what `make proto` generates from the sources, and the wire
matches upstream's schemas (containerd/nri pkg/api/api.proto, the kubelet's podresources/v1 and the CRI v1
api.proto)."""

import importlib.util
import pathlib

import pytest

from koordlet._proto.cri import api_pb2 as cri
from koordlet._proto.nri import api_pb2 as api
from koordlet._proto.podresources import api_pb2 as podresources
from koordlet._proto.ttrpc import ttrpc_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator():
    """proto/generate.py, loaded from its file: ``proto/`` is a directory of sources, not a package (the top-level
    name ``proto`` is proto-plus's)."""
    spec = importlib.util.spec_from_file_location("koordlet_proto_generate", ROOT / "proto" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_modules_match_sources(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the test extra) regenerates the modules")
    gen = _generator()
    gen.generate(tmp_path)
    produced = sorted(p.relative_to(tmp_path) for p in (tmp_path / "koordlet" / "_proto").rglob("*_pb2*"))
    assert produced, "protoc wrote nothing"
    for rel in produced:
        committed = ROOT / rel
        assert committed.exists(), f"{committed} is missing: run `make proto`"
        assert committed.read_bytes() == (tmp_path / rel).read_bytes(), f"{committed} is stale: run `make proto`"
    committed_all = sorted(p.relative_to(ROOT) for p in (ROOT / "koordlet" / "_proto").rglob("*_pb2*")
                           if p.suffix in (".py", ".pyi"))
    assert committed_all == produced, "koordlet/_proto has generated modules that no source makes"
    for src in gen.sources():
        module = pathlib.PurePosixPath(gen.target(src))        # koordlet/_proto/cri/api.proto
        assert (ROOT / module.with_name(module.stem + "_pb2.py")).exists()
        assert (ROOT / module.parent / "__init__.py").exists(), f"{module.parent} is not a package"


def test_no_top_level_proto_package():
    """The generated modules live in koordlet._proto, and proto/ holds only sources and the generator: an
    ``__init__.py`` there would make ``proto`` a package of ours again, shadowing proto-plus's in a checkout."""
    assert not list((ROOT / "proto").rglob("__init__.py"))
    assert not list((ROOT / "proto").rglob("*_pb2*"))
    assert api.DESCRIPTOR.name == "koordlet/_proto/nri/api.proto"
    assert api.DESCRIPTOR.package == "nri.pkg.api.v1alpha1"       # the wire's names are the sources' own


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
    # the kubelet CRI (k8s.io/cri-api runtime/v1), as the real-runtime tests drive containerd
    (cri.VersionResponse, {"version": 1, "runtime_name": 2, "runtime_version": 3, "runtime_api_version": 4}),
    (cri.PodSandboxConfig, {"metadata": 1, "hostname": 2, "log_directory": 3, "labels": 6, "annotations": 7,
                            "linux": 8}),
    (cri.PodSandboxMetadata, {"name": 1, "uid": 2, "namespace": 3, "attempt": 4}),
    (cri.LinuxPodSandboxConfig, {"cgroup_parent": 1, "security_context": 2, "sysctls": 3, "overhead": 4,
                                 "resources": 5}),
    (cri.LinuxSandboxSecurityContext, {"namespace_options": 1, "run_as_user": 3, "readonly_rootfs": 4,
                                       "privileged": 6}),
    (cri.NamespaceOption, {"network": 1, "pid": 2, "ipc": 3, "target_id": 4}),
    (cri.RunPodSandboxRequest, {"config": 1, "runtime_handler": 2}),
    (cri.RunPodSandboxResponse, {"pod_sandbox_id": 1}),
    (cri.PodSandboxStatusRequest, {"pod_sandbox_id": 1, "verbose": 2}),
    (cri.PodSandboxStatus, {"id": 1, "metadata": 2, "state": 3, "created_at": 4, "labels": 7, "annotations": 8,
                            "runtime_handler": 9}),
    (cri.PodSandbox, {"id": 1, "metadata": 2, "state": 3, "created_at": 4, "labels": 5, "annotations": 6}),
    (cri.ContainerConfig, {"metadata": 1, "image": 2, "command": 3, "args": 4, "working_dir": 5, "envs": 6,
                           "mounts": 7, "devices": 8, "labels": 9, "annotations": 10, "log_path": 11, "stdin": 12,
                           "stdin_once": 13, "tty": 14, "linux": 15}),
    (cri.LinuxContainerConfig, {"resources": 1, "security_context": 2}),
    (cri.LinuxContainerSecurityContext, {"privileged": 2, "namespace_options": 3, "run_as_user": 5,
                                         "readonly_rootfs": 7}),
    (cri.LinuxContainerResources, {"cpu_period": 1, "cpu_quota": 2, "cpu_shares": 3, "memory_limit_in_bytes": 4,
                                   "oom_score_adj": 5, "cpuset_cpus": 6, "cpuset_mems": 7, "unified": 9,
                                   "memory_swap_limit_in_bytes": 10}),
    (cri.Mount, {"container_path": 1, "host_path": 2, "readonly": 3, "selinux_relabel": 4, "propagation": 5}),
    (cri.KeyValue, {"key": 1, "value": 2}),
    (cri.ImageSpec, {"image": 1, "annotations": 2}),
    (cri.CreateContainerRequest, {"pod_sandbox_id": 1, "config": 2, "sandbox_config": 3}),
    (cri.CreateContainerResponse, {"container_id": 1}),
    (cri.StopContainerRequest, {"container_id": 1, "timeout": 2}),
    (cri.ContainerStatusRequest, {"container_id": 1, "verbose": 2}),
    (cri.ContainerStatusResponse, {"status": 1, "info": 2}),
    (cri.ContainerStatus, {"id": 1, "metadata": 2, "state": 3, "created_at": 4, "started_at": 5, "finished_at": 6,
                           "exit_code": 7, "image": 8, "image_ref": 9, "reason": 10, "message": 11, "labels": 12,
                           "annotations": 13, "mounts": 14, "log_path": 15, "resources": 16}),
    (cri.ContainerFilter, {"id": 1, "state": 2, "pod_sandbox_id": 3, "label_selector": 4}),
    (cri.Container, {"id": 1, "pod_sandbox_id": 2, "metadata": 3, "image": 4, "image_ref": 5, "state": 6,
                     "created_at": 7, "labels": 8, "annotations": 9}),
    (cri.UpdateContainerResourcesRequest, {"container_id": 1, "linux": 2, "annotations": 4}),
    (cri.Image, {"id": 1, "repo_tags": 2, "repo_digests": 3, "size": 4, "spec": 7, "pinned": 8}),
    (cri.ImageStatusRequest, {"image": 1, "verbose": 2}),
])
def test_field_numbers_as_the_reference(msg, fields):
    assert {name: _field(msg, name) for name in fields} == fields


def test_adjustment_has_no_field_1():
    assert 1 not in {f.number for f in api.ContainerAdjustment.DESCRIPTOR.fields}


def test_cpu_shares_adjustment_bytes():
    """CPU shares in containerd/nri pkg/api/api.proto: CreateContainerResponse.1 → .6 → .2 → .2 (cpu) → .1 (shares)
    → .1 value."""
    resp = api.CreateContainerResponse()
    resp.adjust.linux.resources.cpu.shares.value = 1024
    assert resp.SerializeToString().hex() == "0a0b" "3209" "1207" "1205" "0a03" "088008"


def test_event_enum_values():
    assert [api.RUN_POD_SANDBOX, api.REMOVE_POD_SANDBOX, api.CREATE_CONTAINER, api.POST_START_CONTAINER,
            api.UPDATE_CONTAINER, api.REMOVE_CONTAINER, api.VALIDATE_CONTAINER_ADJUSTMENT] == [1, 3, 4, 7, 8, 11, 14]


def test_podresources_service_paths():
    """Multus and the kubelet speak these exact gRPC paths (kubelet pkg/apis/podresources/v1/api.proto)."""
    service = podresources.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]


def test_cri_service_paths_and_enums():
    """containerd serves CRI v1 under these exact gRPC paths; the enums are the kubelet's values."""
    runtime = cri.DESCRIPTOR.services_by_name["RuntimeService"]
    assert runtime.full_name == "runtime.v1.RuntimeService"
    assert {"RunPodSandbox", "CreateContainer", "UpdateContainerResources", "ContainerStatus"} <= {
        m.name for m in runtime.methods}
    assert cri.DESCRIPTOR.services_by_name["ImageService"].full_name == "runtime.v1.ImageService"
    assert [cri.POD, cri.CONTAINER, cri.NODE, cri.TARGET] == [0, 1, 2, 3]
    assert [cri.CONTAINER_CREATED, cri.CONTAINER_RUNNING, cri.CONTAINER_EXITED, cri.CONTAINER_UNKNOWN] == [0, 1, 2, 3]
    assert [cri.SANDBOX_READY, cri.SANDBOX_NOTREADY] == [0, 1]
