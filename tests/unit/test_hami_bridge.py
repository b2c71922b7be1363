"""hami_bridge.inject: device-allocated annotation -> env and mounts, as upstream minus its bugs (koordinator
``pkg/koordlet/runtimehooks/hooks/gpu/gpu.go: gpuPlugin.InjectContainerGPUEnv``)."""

import json
import os

import pytest

from hami_bridge.inject import LIBVGPU, NONE, HostLayout, Mount, plan, prepare

UID = "11111111-2222-3333-4444-555555555555"
HAMI = {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}


def alloc(*gpus, rdma=()):
    return {"scheduling.koordinator.sh/device-allocated": json.dumps({"gpu": list(gpus), "rdma": list(rdma)})}


def gpu(minor, memory="11520Mi", core="50", ratio="50", uid="GPU-x"):
    res = {k: v for k, v in (("koordinator.sh/gpu-memory", memory), ("koordinator.sh/gpu-core", core),
                             ("koordinator.sh/gpu-memory-ratio", ratio)) if v is not None}
    return {"minor": minor, "id": uid, "resources": res}


def test_one_shared_gpu_with_hami():
    host = HostLayout(cache_root="/var/vgpu")
    inj = plan(alloc(gpu(1)), HAMI, UID, "app", host)
    assert inj.env == {"NVIDIA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_MEMORY_LIMIT": "12079595520",
                       "CUDA_DEVICE_SM_LIMIT": "50", "LD_PRELOAD": LIBVGPU,
                       "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"/usr/local/vgpu/{UID}_app.cache"}
    assert inj.mounts == (Mount(f"/var/vgpu/{UID}_app", "/usr/local/vgpu"), Mount(LIBVGPU, LIBVGPU),
                          Mount("/tmp/vgpulock", "/tmp/vgpulock"))
    assert inj.cache_dir == f"/var/vgpu/{UID}_app"


def test_quantities_as_numbers_and_gi():
    inj = plan(alloc(gpu(0, memory="16Gi", core=30)), HAMI, UID, "app")
    assert inj.env["CUDA_DEVICE_MEMORY_LIMIT"] == str(16 << 30) and inj.env["CUDA_DEVICE_SM_LIMIT"] == "30"


def test_two_full_gpus_get_only_visible_devices():
    inj = plan(alloc(gpu(3, memory="80Gi", core="100", ratio="100"), gpu(1, memory="80Gi", core="100", ratio="100")),
               HAMI, UID, "app")
    assert inj.env == {"NVIDIA_VISIBLE_DEVICES": "3,1"} and inj.mounts == ()


def test_gpu_and_rdma_joint_allocation_injects_the_gpu_part():
    rdma = {"minor": 0, "id": "0000:09:00.0", "resources": {"koordinator.sh/rdma": "1"},
            "extension": {"vfs": [{"minor": 3, "busID": "0000:09:00.4"}]}}
    inj = plan(alloc(gpu(2), rdma=[rdma]), HAMI, UID, "app")
    assert inj.env["NVIDIA_VISIBLE_DEVICES"] == "2" and "LD_PRELOAD" in inj.env


@pytest.mark.parametrize("labels", [{}, {"koordinator.sh/gpu-isolation-provider": "hami-core"},
                                    {"koordinator.sh/gpu-isolation-provider": "HAMI-core"}])
def test_label_absent_or_wrong_case_means_no_hami(labels):
    assert plan(alloc(gpu(1)), labels, UID, "app").env == {"NVIDIA_VISIBLE_DEVICES": "1"}


def test_no_annotation_or_no_gpus():
    assert plan({}, HAMI, UID, "app") is NONE
    assert plan(alloc(), HAMI, UID, "app") is NONE


@pytest.mark.parametrize("raw,match", [
    ("{", "not JSON"), ('{"gpu": {}}', "expected a list"),
    ('{"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-memory": "lots"}}]}', "gpu-memory"),
    ('{"gpu": [{"minor": "zero"}]}', "minor")])
def test_malformed_annotation_names_the_field(raw, match):
    with pytest.raises(ValueError, match=match):
        plan({"scheduling.koordinator.sh/device-allocated": raw}, HAMI, UID, "app")


def test_shared_gpu_without_memory_is_refused():
    with pytest.raises(ValueError, match="gpu-memory"):
        plan(alloc(gpu(0, memory=None)), HAMI, UID, "app")


def test_paths_from_pod_data_are_validated():
    with pytest.raises(ValueError):
        plan(alloc(gpu(0)), HAMI, "../../etc", "app")
    with pytest.raises(ValueError, match="DNS label"):
        plan(alloc(gpu(0)), HAMI, UID, "../x")


def test_prepare_checks_the_host_and_empties_the_cache(tmp_path):
    host = HostLayout(libvgpu=str(tmp_path / "libvgpu.so"), lock_dir=str(tmp_path / "lock"),
                      cache_root=str(tmp_path / "containers"))
    inj = plan(alloc(gpu(1)), HAMI, UID, "app", host)
    with pytest.raises(FileNotFoundError, match="libvgpu.so missing"):
        prepare(inj, host)
    assert inj.visible_only().env == {"NVIDIA_VISIBLE_DEVICES": "1"} and inj.visible_only().mounts == ()
    (tmp_path / "libvgpu.so").write_bytes(b"\x7fELF")
    (tmp_path / "lock").mkdir()
    os.makedirs(inj.cache_dir)
    stale = os.path.join(inj.cache_dir, f"{UID}_app.cache")
    open(stale, "w").close()
    assert prepare(inj, host) is inj
    assert os.listdir(inj.cache_dir) == [] and os.stat(inj.cache_dir).st_mode & 0o777 == 0o777
