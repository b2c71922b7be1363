"""NVIDIA GPUs end to end against the NVML fake (doubles/fakenvml.py): inventory, the Device CR (GPUs, RDMA,
partition table, merge), failure injection (no driver, lost GPUs, XID events through the real watcher thread),
usage collection with per-pod attribution of real processes, MIG attribution through the device-allocated
annotation, NodeMetric devices, the device-allocated parser and the ``topology`` / ``doctor`` commands."""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pynvml as real_pynvml
import pytest

from doubles import fakenvml
from doubles.crdschema import CrdSchemas
from doubles.fakepci import FakePci
from koordlet.base import wire
from koordlet.cli import main
from koordlet.collectors.gpu import GpuDevices
from koordlet.component import Tick
from koordlet.host.cgroup import CgroupVersion, Driver, KubeQOS, Layout
from koordlet.host.nvml import Gpu, Nvml, NvmlUnavailable
from koordlet.host.paths import HostPaths
from koordlet.host.rdma import discover_rdma
from koordlet.metriccache import MetricCache, Sample, labels
from koordlet.ops.metrics import AgentMetrics
from koordlet.reporters import device
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder
from koordlet.states.deviceallocation import DeviceAllocation, VirtualFunction, parse_device_allocated
from koordlet.states.node import NodeInfo
from tests.builders import pod_meta
from tests.fakehost import CgroupValues, FakeHost
from tests.waits import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = CrdSchemas.load(REPO_ROOT / "deploy" / "crds")
MiB, GiB = 2**20, 2**30
NOW = 1_700_000_000.0
NODE = NodeInfo("gpu-node", "node-uid-1")
A, B, C = "a" * 64, "b" * 64, "c" * 64

H100_BUSES = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
              "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
H100_ROOTS = ["pci0000:15", "pci0000:27", "pci0000:37", "pci0000:5a",
              "pci0000:97", "pci0000:a8", "pci0000:b7", "pci0000:d8"]
L40S_BUSES = ["0000:4f:00.0", "0000:52:00.0", "0000:ce:00.0", "0000:d1:00.0"]
A100_BUS = "0000:65:00.0"


def uuid(n: int) -> str:
    return f"GPU-{n:08x}-1111-2222-3333-{n:012x}"


def install(monkeypatch: pytest.MonkeyPatch, paths: HostPaths,
            profile: Callable[[HostPaths], fakenvml.FakeNvmlLibrary]) -> fakenvml.FakeNvmlLibrary:
    """Write the profile's kernel view under ``paths`` and make ``import pynvml`` find its library."""
    lib = profile(paths)
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    return lib


def fake_paths(tmp_path: Path) -> HostPaths:
    return HostPaths.under(str(tmp_path / "host"))


def no_health(bus_id: str) -> None:
    return None


def time_text(now: float) -> str:
    return device._time(now)


def partitions(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(obj["metadata"]["annotations"][wire.ANNOTATION_GPU_PARTITIONS])


def part(minors: list[int], link: str, bw: str | None = None, score: int = 1) -> dict[str, Any]:
    entry: dict[str, Any] = {"minors": minors, "gpuLinkType": link}
    if bw is not None:
        entry["ringBusBandwidth"] = bw
    entry["allocationScore"] = score
    return entry


def by_key(samples: list[Sample]) -> dict[tuple[str, tuple], float]:
    out = {(s.name, s.labels): s.value for s in samples}
    assert len(out) == len(samples), "a series was emitted twice in one cycle"
    return out


# ============================================================================================ 1. inventory


def test_inventory_h100(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.h100_sxm8)
    session = Nvml.open(paths)
    inv = session.inventory()
    session.close()
    assert inv.error == "" and inv.problems == ()
    assert (inv.driver_version, inv.cuda_version, inv.model) == ("550.54.15", "12.4", "H100-80GB-HBM3")
    assert inv.names == ("NVIDIA H100 80GB HBM3",) * 8
    assert [g.index for g in inv.gpus] == list(range(8))
    assert [g.minor for g in inv.gpus] == list(range(8))
    assert [g.uuid for g in inv.gpus] == [uuid(0x100 + m) for m in range(8)]
    assert [g.bus_id for g in inv.gpus] == H100_BUSES
    assert [g.numa_node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.pcie_root for g in inv.gpus] == H100_ROOTS
    assert {g.name for g in inv.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.memory_total for g in inv.gpus} == {81559 * MiB}
    assert {g.mig_enabled for g in inv.gpus} == {False}
    assert not any(g.lost for g in inv.gpus)
    for gpu in inv.gpus:
        assert [link.link for link in gpu.nvlinks] == list(range(18))
        assert {link.remote_type for link in gpu.nvlinks} == {"switch"}
        assert {link.version for link in gpu.nvlinks} == {6}          # NVML_NVLINK_VERSION_4_0
        switches = [link.remote_bus_id for link in gpu.nvlinks]
        assert [switches.count(f"0000:0{n}:00.0") for n in (5, 6, 7, 8)] == [5, 4, 4, 5]
    assert len(inv.pcie_levels) == 28
    for i, a in enumerate(H100_BUSES):
        for j, b in enumerate(H100_BUSES[i + 1:], start=i + 1):
            want = 40 if (i < 4) == (j < 4) else 50                    # NODE within a socket, SYS across
            assert inv.pcie_levels[frozenset((a, b))] == want, (i, j)


def test_inventory_l40s(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.l40s_pcie4)
    inv = Nvml.open(paths).inventory()
    assert (inv.driver_version, inv.cuda_version, inv.model) == ("535.161.08", "12.2", "L40S")
    assert [(g.minor, g.uuid, g.bus_id, g.numa_node, g.pcie_root) for g in inv.gpus] == [
        (0, uuid(0x200), "0000:4f:00.0", 0, "pci0000:4a"),
        (1, uuid(0x201), "0000:52:00.0", 0, "pci0000:4a"),
        (2, uuid(0x202), "0000:ce:00.0", 1, "pci0000:c9"),
        (3, uuid(0x203), "0000:d1:00.0", 1, "pci0000:c9")]
    assert {g.memory_total for g in inv.gpus} == {46068 * MiB}
    assert [g.mig_enabled for g in inv.gpus] == [None] * 4             # no MIG on an L40S
    assert [g.nvlinks for g in inv.gpus] == [()] * 4                   # NOT_SUPPORTED: no NVLink at all
    assert dict(inv.pcie_levels) == {
        frozenset(("0000:4f:00.0", "0000:52:00.0")): 10, frozenset(("0000:ce:00.0", "0000:d1:00.0")): 10,
        frozenset(("0000:4f:00.0", "0000:ce:00.0")): 50, frozenset(("0000:4f:00.0", "0000:d1:00.0")): 50,
        frozenset(("0000:52:00.0", "0000:ce:00.0")): 50, frozenset(("0000:52:00.0", "0000:d1:00.0")): 50}


def test_inventory_a100_mig(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.a100_mig)
    inv = Nvml.open(paths).inventory()
    assert (inv.driver_version, inv.cuda_version, inv.model) == ("535.104.05", "12.2", "A100-80GB-PCIe")
    (gpu,) = inv.gpus
    assert (gpu.minor, gpu.uuid, gpu.bus_id, gpu.numa_node, gpu.pcie_root, gpu.memory_total) == (
        0, uuid(0x300), A100_BUS, 0, "pci0000:64", 80 * GiB)
    assert gpu.mig_enabled is True and gpu.nvlinks == ()
    assert dict(inv.pcie_levels) == {}


# ============================================================================================ 2. Device CR


def gpu_entry(minor: int, uid: str, memory: str, node: int, root: str, bus: str) -> dict[str, Any]:
    return {"type": "gpu", "id": uid, "minor": minor, "health": True,
            "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": memory,
                          "koordinator.sh/gpu-memory-ratio": "100"},
            "topology": {"socketID": -1, "nodeID": node, "pcieID": root, "busID": bus}}


HOPPER_TABLE = {
    "1": [part([m], "NVLink", "450G") for m in range(8)],
    "2": [part([0, 1], "NVLink", "450G"), part([2, 3], "NVLink", "450G"), part([4, 5], "NVLink", "450G"),
          part([6, 7], "NVLink", "450G")],
    "4": [part([0, 1, 2, 3], "NVLink", "450G"), part([4, 5, 6, 7], "NVLink", "450G")],
    "8": [part(list(range(8)), "NVLink", "450G")],
}
OWNER = [{"apiVersion": "v1", "kind": "Node", "name": "gpu-node", "uid": "node-uid-1", "controller": True,
          "blockOwnerDeletion": True}]


def test_device_cr_h100(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.h100_sxm8)
    inv = Nvml.open(paths).inventory()
    obj = device.desired(NODE, inv, no_health, [], "Prefer", NOW)
    assert SCHEMAS.validate(obj) == []
    assert (obj["apiVersion"], obj["kind"]) == ("scheduling.koordinator.sh/v1alpha1", "Device")
    assert obj["metadata"]["name"] == "gpu-node" and obj["metadata"]["ownerReferences"] == OWNER
    assert obj["metadata"]["labels"] == {
        "node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "H100-80GB-HBM3",
        "node.koordinator.sh/gpu-driver-version": "550.54.15", "node.koordinator.sh/gpu-partition-policy": "Prefer"}
    assert obj["spec"]["devices"] == [
        gpu_entry(m, uuid(0x100 + m), "81559Mi", 0 if m < 4 else 1, H100_ROOTS[m], H100_BUSES[m]) for m in range(8)]
    assert list(obj["metadata"]["annotations"]) == ["scheduling.koordinator.sh/gpu-partitions"]
    assert partitions(obj) == HOPPER_TABLE
    assert list(partitions(obj)) == ["1", "2", "4", "8"]           # keys in numeric order


def test_device_cr_l40s_and_honor_policy(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.l40s_pcie4)
    inv = Nvml.open(paths).inventory()
    obj = device.desired(NODE, inv, no_health, [], "Honor", NOW)
    assert SCHEMAS.validate(obj) == []
    assert obj["metadata"]["labels"] == {
        "node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "L40S",
        "node.koordinator.sh/gpu-driver-version": "535.161.08", "node.koordinator.sh/gpu-partition-policy": "Honor"}
    assert obj["spec"]["devices"] == [
        gpu_entry(0, uuid(0x200), "46068Mi", 0, "pci0000:4a", "0000:4f:00.0"),
        gpu_entry(1, uuid(0x201), "46068Mi", 0, "pci0000:4a", "0000:52:00.0"),
        gpu_entry(2, uuid(0x202), "46068Mi", 1, "pci0000:c9", "0000:ce:00.0"),
        gpu_entry(3, uuid(0x203), "46068Mi", 1, "pci0000:c9", "0000:d1:00.0")]
    assert partitions(obj) == {
        "1": [part([m], "PCIe") for m in range(4)],
        "2": [part([0, 1], "PCIe"), part([2, 3], "PCIe")],          # the pairs behind one PCIe switch
        "4": [part([0, 1, 2, 3], "PCIe")]}


def test_device_cr_a100_mig(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.a100_mig)
    inv = Nvml.open(paths).inventory()
    obj = device.desired(NodeInfo("gpu-node"), inv, no_health, [], "Prefer", NOW)
    assert SCHEMAS.validate(obj) == []
    assert "ownerReferences" not in obj["metadata"]                # standalone: no Node uid
    assert obj["metadata"]["labels"]["node.koordinator.sh/gpu-model"] == "A100-80GB-PCIe"
    # beyond upstream: the MIG-mode card is labelled, so the companion scheduler does not offer it as a whole card
    assert obj["spec"]["devices"] == [{**gpu_entry(0, uuid(0x300), "80Gi", 0, "pci0000:64", A100_BUS),
                                       "labels": {"node.koordinator.sh/gpu-mig": "enabled"}}]
    assert partitions(obj) == {"1": [part([0], "PCIe")]}


def test_device_cr_policy_none(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.h100_sxm8)
    obj = device.desired(NODE, Nvml.open(paths).inventory(), no_health, [], "none", NOW)
    assert SCHEMAS.validate(obj) == []
    assert "annotations" not in obj["metadata"]
    assert obj["metadata"]["labels"] == {"node.koordinator.sh/gpu-vendor": "nvidia",
                                         "node.koordinator.sh/gpu-model": "H100-80GB-HBM3",
                                         "node.koordinator.sh/gpu-driver-version": "550.54.15"}
    assert len(obj["spec"]["devices"]) == 8


def test_device_cr_mixed_names_has_no_model_label(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    gpus = [fakenvml.FakeGpu("0000:3b:00.0", 0, uuid(0x400), "NVIDIA A10", 23028 * MiB, 0, "pci0000:3a",
                             ("0000:3a:00.0",)),
            fakenvml.FakeGpu("0000:86:00.0", 1, uuid(0x401), "Tesla T4", 15360 * MiB, 1, "pci0000:85",
                             ("0000:85:00.0",))]
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.install(paths, gpus, driver="535.54.03", cuda=12020))
    inv = Nvml.open(paths).inventory()
    assert inv.model == "" and inv.names == ("NVIDIA A10", "Tesla T4")
    obj = device.desired(NODE, inv, no_health, [], "Prefer", NOW)
    assert SCHEMAS.validate(obj) == []
    assert obj["metadata"]["labels"] == {"node.koordinator.sh/gpu-vendor": "nvidia",
                                         "node.koordinator.sh/gpu-driver-version": "535.54.03",
                                         "node.koordinator.sh/gpu-partition-policy": "Prefer"}
    assert [d["resources"]["koordinator.sh/gpu-memory"] for d in obj["spec"]["devices"]] == ["23028Mi", "15Gi"]
    assert partitions(obj)["2"] == [part([0, 1], "PCIe")]


# ============================================================================================ 3. failures


@pytest.mark.parametrize("make, message", [
    ("driver-not-loaded", "nvmlInit failed: Driver Not Loaded"),
    ("absent", "libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"),
])
def test_no_nvml(tmp_path, monkeypatch, make, message):
    paths = fake_paths(tmp_path)
    if make == "absent":
        lib = fakenvml.absent()
        monkeypatch.setitem(sys.modules, "pynvml", lib)
    else:
        lib = install(monkeypatch, paths, fakenvml.h100_sxm8)
        lib.init_error = real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(NvmlUnavailable) as e:
        Nvml.open(paths)
    assert str(e.value) == message
    devices = GpuDevices.open(paths, AgentMetrics("n1"))
    assert devices.session is None and devices.error == message
    assert devices.gpus == () and devices.inventory.error == message
    assert devices.collect(Tick(NOW, [])) == []
    devices.run(threading.Event())                        # returns at once
    devices.close()
    obj = device.desired(NODE, devices.inventory, devices.health.get, [], "Prefer", NOW)
    assert obj["spec"] == {} and "labels" not in obj["metadata"] and "annotations" not in obj["metadata"]
    assert SCHEMAS.validate(obj) == []
    assert lib.initialised == 0


def test_no_driver_library_leaves_pynvml_unimported(tmp_path, monkeypatch):
    """A host whose dynamic loader finds no NVML library gets the same answer as from pynvml, without the module
    ever being imported (it is large, and such a host never uses it)."""
    monkeypatch.delitem(sys.modules, "pynvml")
    monkeypatch.setattr("koordlet.host.nvml.LIBRARY", "libnvidia-ml-absent-for-test.so.1")
    with pytest.raises(NvmlUnavailable, match="^libnvidia-ml-absent-for-test.so.1 not found"):
        Nvml.open(fake_paths(tmp_path))
    assert "pynvml" not in sys.modules


def test_gpu_lost_before_start(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    lib = install(monkeypatch, paths, fakenvml.h100_sxm8)
    lib.lose(H100_BUSES[3])
    inv = Nvml.open(paths).inventory()
    lost = inv.gpus[3]
    assert (lost.minor, lost.uuid, lost.bus_id, lost.lost, lost.name, lost.memory_total) == (
        3, uuid(0x103), H100_BUSES[3], True, "", 0)
    assert (lost.numa_node, lost.pcie_root) == (0, "pci0000:5a")     # sysfs still knows where it sits
    assert [g.lost for g in inv.gpus] == [False, False, False, True, False, False, False, False]
    assert inv.problems == (f"gpu {H100_BUSES[3]}: NVML cannot open it (GPU is lost)",)
    assert inv.model == "H100-80GB-HBM3"
    assert len(inv.pcie_levels) == 21 and not any(H100_BUSES[3] in pair for pair in inv.pcie_levels)

    devices = GpuDevices.open(paths, AgentMetrics("n1"))
    assert devices.health.get(H100_BUSES[3]) == ("GPULost", "NVML cannot open the GPU (fallen off the bus?)")
    assert all(devices.health.get(b) is None for i, b in enumerate(H100_BUSES) if i != 3)
    obj = device.desired(NODE, devices.inventory, devices.health.get, [], "Prefer", NOW)
    assert SCHEMAS.validate(obj) == []
    entries = obj["spec"]["devices"]
    assert entries[3] == {"type": "gpu", "id": uuid(0x103), "minor": 3, "health": False, "resources": {},
                          "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:5a", "busID": H100_BUSES[3]},
                          "conditions": [{"type": "Healthy", "status": "False", "lastTransitionTime": time_text(NOW),
                                          "reason": "GPULost",
                                          "message": "NVML cannot open the GPU (fallen off the bus?)"}]}
    for m in (0, 1, 2, 4, 5, 6, 7):
        assert entries[m] == gpu_entry(m, uuid(0x100 + m), "81559Mi", 0 if m < 4 else 1, H100_ROOTS[m],
                                       H100_BUSES[m])
    table = partitions(obj)
    assert [p["minors"] for p in table["1"]] == [[0], [1], [2], [4], [5], [6], [7]]
    assert all(3 not in p["minors"] for size in table.values() for p in size)
    assert {m for p in table["2"] for m in p["minors"]} <= {0, 1, 2, 4, 5, 6, 7}
    # the lost GPU takes no part in health watching and usage
    samples = by_key(devices.collect(Tick(NOW, [])))
    assert {dict(lb)["gpu_minor"] for name, lb in samples if name == "node_gpu_memory_total"} == {
        "0", "1", "2", "4", "5", "6", "7"}


def test_gpu_lost_after_start_and_back(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    lib = install(monkeypatch, paths, fakenvml.l40s_pcie4)
    metrics = AgentMetrics("n1")
    devices = GpuDevices.open(paths, metrics)
    healthy = {"node": "n1", "minor": "1", "uuid": uuid(0x201)}
    assert len(devices.collect(Tick(NOW, []))) == 12
    assert metrics.registry.get_sample_value("koordlet_gpu_healthy", healthy) == 1.0

    lib.lose(L40S_BUSES[1])
    samples = by_key(devices.collect(Tick(NOW + 1, [])))                 # must not raise
    assert devices.health.get(L40S_BUSES[1]) == ("GPULost", "NVML error: GPU is lost")
    assert [devices.health.get(b) for b in L40S_BUSES if b != L40S_BUSES[1]] == [None] * 3
    assert sorted(dict(lb)["gpu_minor"] for name, lb in samples if name == "node_gpu_core_usage") == ["0", "2", "3"]
    assert metrics.registry.get_sample_value("koordlet_gpu_healthy", healthy) == 0.0
    obj = device.desired(NODE, devices.inventory, devices.health.get, [], "Prefer", NOW + 1)
    entry = obj["spec"]["devices"][1]
    assert entry["health"] is False and entry["resources"]["koordinator.sh/gpu-memory"] == "46068Mi"
    assert [(c["status"], c["reason"]) for c in entry["conditions"]] == [("False", "GPULost")]
    assert SCHEMAS.validate(obj) == []

    lib._gpu(L40S_BUSES[1]).lost = False                           # it answers again
    devices.refresh(force=True)
    assert devices.health.get(L40S_BUSES[1]) is None
    assert not devices.inventory.gpus[1].lost
    assert len(devices.collect(Tick(NOW + 2, []))) == 12
    assert metrics.registry.get_sample_value("koordlet_gpu_healthy", healthy) == 1.0
    obj = device.desired(NODE, devices.inventory, devices.health.get, [], "Prefer", NOW + 2)
    assert obj["spec"]["devices"][1]["health"] is True and "conditions" not in obj["spec"]["devices"][1]


def test_a_passing_nvml_error_is_not_a_lost_gpu(tmp_path, monkeypatch, caplog):
    paths = fake_paths(tmp_path)
    lib = install(monkeypatch, paths, fakenvml.l40s_pcie4)
    devices = GpuDevices.open(paths, AgentMetrics("n1"))
    lib._gpu(L40S_BUSES[2]).error = lib.NVML_ERROR_UNKNOWN
    samples = by_key(devices.collect(Tick(NOW, [])))                     # must not raise
    assert sorted(dict(lb)["gpu_minor"] for name, lb in samples if name == "node_gpu_core_usage") == ["0", "1", "3"]
    assert devices.health.get(L40S_BUSES[2]) is None               # no sample this cycle, but not unhealthy
    assert "gpu usage unreadable bus_id=0000:ce:00.0" in caplog.text
    lib._gpu(L40S_BUSES[2]).error = None
    assert len(devices.collect(Tick(NOW + 1, []))) == 12


@pytest.fixture
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[fakenvml.FakeNvmlLibrary, GpuDevices, Callable[[], None]]]:
    """An 8×H100 host with the real XID watcher thread running; the third item starts it (after setup)."""
    paths = fake_paths(tmp_path)
    lib = install(monkeypatch, paths, fakenvml.h100_sxm8)
    devices = GpuDevices.open(paths, AgentMetrics("n1"))
    stop = threading.Event()
    thread = threading.Thread(target=devices.run, args=(stop,), name="gpu-health-test")

    def start() -> None:
        thread.start()
        assert wait_for(lambda: lib.calls["nvmlEventSetWait"] > 0, 5.0)    # registered and waiting

    try:
        yield lib, devices, start
    finally:
        stop.set()
        if thread.is_alive() or thread.ident is not None:
            thread.join(timeout=3.0)
        assert not thread.is_alive(), "the XID watcher did not stop"


def test_xid_marks_only_its_gpu(watched):
    lib, devices, start = watched
    start()
    for app_xid in (13, 31, 43, 45, 68, 109):                      # the application's fault: ignored
        lib.xid(H100_BUSES[0], app_xid)
    lib.xid(H100_BUSES[2], 79)
    assert wait_for(lambda: devices.health.get(H100_BUSES[2]) is not None, 5.0)
    assert lib.events.empty()                                      # FIFO: the application XIDs came first
    assert devices.health.get(H100_BUSES[2]) == ("Xid79", "Xid error detected on device, error code: 79")
    assert [devices.health.get(b) for i, b in enumerate(H100_BUSES) if i != 2] == [None] * 7
    devices.refresh(force=True)                                    # an XID mark is never cleared by a refresh
    assert devices.health.get(H100_BUSES[2]) == ("Xid79", "Xid error detected on device, error code: 79")
    obj = device.desired(NODE, devices.inventory, devices.health.get, [], "Prefer", NOW)
    entries = obj["spec"]["devices"]
    assert [d["health"] for d in entries] == [True, True, False, True, True, True, True, True]
    assert entries[2]["conditions"] == [{"type": "Healthy", "status": "False", "lastTransitionTime": time_text(NOW),
                                         "reason": "Xid79",
                                         "message": "Xid error detected on device, error code: 79"}]
    assert entries[2]["resources"]["koordinator.sh/gpu-core"] == "100"
    assert SCHEMAS.validate(obj) == []


def test_xid_without_device_marks_all(watched):
    lib, devices, start = watched
    start()
    lib.xid(None, 48)
    assert wait_for(lambda: all(devices.health.get(b) for b in H100_BUSES), 5.0)
    assert {devices.health.get(b) for b in H100_BUSES} == {("Xid48", "Xid error detected on device, error code: 48")}


def test_events_not_supported(watched):
    lib, devices, start = watched
    lib._gpu(H100_BUSES[5]).events_supported = False
    start()
    assert devices.health.get(H100_BUSES[5]) == ("DeviceHealthCheckNotSupported",
                                                 "device does not support health checking")
    lib.xid(H100_BUSES[0], 31)                                     # application XID: nothing changes
    lib.xid(H100_BUSES[1], 94)
    assert wait_for(lambda: devices.health.get(H100_BUSES[1]) is not None, 5.0)
    assert devices.health.get(H100_BUSES[0]) is None
    assert devices.health.get(H100_BUSES[5])[0] == "DeviceHealthCheckNotSupported"
    assert devices.health.get(H100_BUSES[1])[0] == "Xid94"


def test_xid_on_lost_gpu_is_marked_by_reopen(watched):
    """After any event every GPU is re-opened; one that cannot be opened is marked with the event's XID."""
    lib, devices, start = watched
    start()
    lib.lose(H100_BUSES[7])
    lib.xid(H100_BUSES[0], 79)
    assert wait_for(lambda: devices.health.get(H100_BUSES[7]) is not None, 5.0)
    assert devices.health.get(H100_BUSES[7]) == ("Xid79", "failed to get device, error: GPU is lost")
    assert devices.health.get(H100_BUSES[0])[0] == "Xid79"
    assert devices.health.get(H100_BUSES[4]) is None


def test_a_gpu_that_comes_back_is_watched_for_xids(watched):
    """Lost at start, so not registered; once a refresh finds it again the watcher registers it too."""
    lib, devices, start = watched
    lib.lose(H100_BUSES[5])
    devices.refresh(force=True)
    assert devices.inventory.gpus[5].lost
    start()
    registered = lib.calls["nvmlDeviceRegisterEvents"]
    assert registered == 7
    lib._gpu(H100_BUSES[5]).lost = False
    devices.refresh(force=True)
    assert wait_for(lambda: lib.calls["nvmlDeviceRegisterEvents"] == registered + 8, 5.0)
    lib.xid(H100_BUSES[5], 48)
    assert wait_for(lambda: devices.health.get(H100_BUSES[5]) is not None, 5.0)
    assert devices.health.get(H100_BUSES[5])[0] == "Xid48"


# ============================================================================================ merge


def unhealthy(marks: dict[str, tuple[str, str]]) -> Callable[[str], tuple[str, str] | None]:
    return lambda bus_id: marks.get(bus_id)


def test_merge_carries_transition_times_and_keeps_foreign_state(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.l40s_pcie4)
    inv = Nvml.open(paths).inventory()
    marks = {L40S_BUSES[2]: ("Xid79", "Xid error detected on device, error code: 79")}
    want1 = device.desired(NODE, inv, unhealthy(marks), [], "Prefer", NOW)
    live = copy.deepcopy(want1)
    live["metadata"].update(resourceVersion="7", uid="dev-uid", creationTimestamp="2024-01-01T00:00:00Z")
    allocations = [{"type": "gpu", "entries": [{"name": "p", "namespace": "default", "uuid": "pod-uid",
                                                 "minors": [0]}]}]
    live["status"] = {"allocations": allocations}
    assert SCHEMAS.validate(live) == []

    assert device.merge(live, want1) == (None, "")
    want2 = device.desired(NODE, inv, unhealthy(marks), [], "Prefer", NOW + 60)   # same state, later "now"
    assert want2 != want1
    assert device.merge(live, want2) == (None, "")                 # no update loop

    # the API server's spelling of the same quantity, and re-serialised annotation JSON, are not changes
    respelled = copy.deepcopy(live)
    for d in respelled["spec"]["devices"]:
        d["resources"]["koordinator.sh/gpu-memory"] = str(46068 * MiB)
        d["resources"]["koordinator.sh/gpu-core"] = 100
    key = wire.ANNOTATION_GPU_PARTITIONS
    respelled["metadata"]["annotations"][key] = json.dumps(json.loads(want2["metadata"]["annotations"][key]),
                                                           indent=2)
    assert device.merge(respelled, want2) == (None, "")

    # a status flip (True -> False) stamps the new time; an unchanged condition keeps its old one
    flipped = copy.deepcopy(live)
    flipped["spec"]["devices"][0]["conditions"] = [{"type": "Healthy", "status": "True",
                                                    "lastTransitionTime": "2023-01-01T00:00:00Z",
                                                    "reason": "DeviceHealthy", "message": "device is healthy"}]
    marks[L40S_BUSES[0]] = ("Xid48", "Xid error detected on device, error code: 48")
    want3 = device.desired(NODE, inv, unhealthy(marks), [], "Prefer", NOW + 120)
    merged, reason = device.merge(flipped, want3)
    assert reason == "devices"
    assert merged["spec"]["devices"][0]["conditions"] == [
        {"type": "Healthy", "status": "False", "lastTransitionTime": time_text(NOW + 120), "reason": "Xid48",
         "message": "Xid error detected on device, error code: 48"}]
    assert merged["spec"]["devices"][2]["conditions"][0]["lastTransitionTime"] == time_text(NOW)
    assert merged["status"] == {"allocations": allocations}
    assert merged["metadata"]["resourceVersion"] == "7" and merged["metadata"]["uid"] == "dev-uid"
    assert merged["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"
    assert SCHEMAS.validate(merged) == []
    # merging the result again is a no-op
    assert device.merge(merged, device.desired(NODE, inv, unhealthy(marks), [], "Prefer", NOW + 180)) == (None, "")

    # a recovered GPU (no condition any more) is a device change
    del marks[L40S_BUSES[2]]
    merged2, reason = device.merge(merged, device.desired(NODE, inv, unhealthy(marks), [], "Prefer", NOW + 240))
    assert reason == "devices" and "conditions" not in merged2["spec"]["devices"][2]
    assert merged2["spec"]["devices"][2]["health"] is True


def test_merge_replaces_labels_and_annotations_wholesale(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.l40s_pcie4)
    inv = Nvml.open(paths).inventory()
    want = device.desired(NODE, inv, no_health, [], "Prefer", NOW)
    live = copy.deepcopy(want)
    live["metadata"]["resourceVersion"] = "42"
    live["metadata"]["labels"]["team"] = "ml"
    live["metadata"]["annotations"]["example.com/note"] = "hand-written"
    live["status"] = {"allocations": []}
    merged, reason = device.merge(live, want)
    assert reason == "labels,annotations"
    assert merged["metadata"]["labels"] == want["metadata"]["labels"]
    assert merged["metadata"]["annotations"] == want["metadata"]["annotations"]
    assert merged["metadata"]["resourceVersion"] == "42" and merged["status"] == {"allocations": []}
    assert merged["spec"] == want["spec"]

    # policy "none" later: our label and annotation go away entirely
    none = device.desired(NODE, inv, no_health, [], "none", NOW)
    merged, reason = device.merge(want, none)
    assert reason == "labels,annotations"
    assert "annotations" not in merged["metadata"]
    assert wire.LABEL_GPU_PARTITION_POLICY not in merged["metadata"]["labels"]

    # all GPUs gone (driver removed): spec.devices removed, labels dropped
    gone = device.desired(NODE, None, no_health, [], "Prefer", NOW)
    merged, reason = device.merge(live, gone)
    assert reason == "devices,labels,annotations"
    assert merged["spec"] == {} and "labels" not in merged["metadata"] and "annotations" not in merged["metadata"]
    assert SCHEMAS.validate(merged) == []


# ============================================================================================ 4. RDMA


def rdma_tree(paths: HostPaths) -> None:
    """A ConnectX-6 (IB) with 3 VFs on NUMA 0 as mlx5_1, another with 2 VFs on NUMA 1 as mlx5_0 (one port down)."""
    pci = FakePci(paths.sys_root)
    cx6 = {"vendor": "0x15b3", "device": "0x101b", "pci_class": "0x020700", "driver": "mlx5_core"}
    pci.add("0000:3b:00.0", root="pci0000:3a", bridges=("0000:3a:00.0",), numa_node=0, **cx6)
    pci.add_ib("0000:3b:00.0", "mlx5_1")
    pci.add_vfs("0000:3b:00.0", ("0000:3b:00.1", "0000:3b:00.2", "0000:3b:00.3"))
    pci.add("0000:86:00.0", root="pci0000:85", bridges=("0000:85:00.0", "0000:85:01.0"), numa_node=1, **cx6)
    pci.add_ib("0000:86:00.0", "mlx5_0", ("4: ACTIVE", "1: DOWN"))
    pci.add_vfs("0000:86:00.0", ("0000:86:00.1", "0000:86:00.2"))


def test_device_cr_with_rdma(tmp_path, monkeypatch):
    paths = fake_paths(tmp_path)
    install(monkeypatch, paths, fakenvml.l40s_pcie4)
    rdma_tree(paths)
    nics, problems = discover_rdma(paths)
    assert problems == []
    obj = device.desired(NODE, Nvml.open(paths).inventory(), no_health, nics, "Prefer", NOW)
    assert SCHEMAS.validate(obj) == []
    entries = obj["spec"]["devices"]
    assert [(d["type"], d["minor"]) for d in entries] == [("gpu", 0), ("gpu", 1), ("gpu", 2), ("gpu", 3),
                                                          ("rdma", 0), ("rdma", 1)]
    assert entries[4:] == [
        {"type": "rdma", "id": "0000:86:00.0", "minor": 0, "health": False,
         "resources": {"koordinator.sh/rdma": "100"},
         "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:85", "busID": "0000:86:00.0"},
         "vfGroups": [{"vfs": [{"minor": -1, "busID": "0000:86:00.1"}, {"minor": -1, "busID": "0000:86:00.2"}]}]},
        {"type": "rdma", "id": "0000:3b:00.0", "minor": 1, "health": True,
         "resources": {"koordinator.sh/rdma": "100"},
         "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"},
         "vfGroups": [{"vfs": [{"minor": -1, "busID": "0000:3b:00.1"}, {"minor": -1, "busID": "0000:3b:00.2"},
                               {"minor": -1, "busID": "0000:3b:00.3"}]}]}]
    # RDMA alone (no NVML): devices but no GPU labels
    alone = device.desired(NODE, None, no_health, nics, "Prefer", NOW)
    assert [d["type"] for d in alone["spec"]["devices"]] == ["rdma", "rdma"]
    assert "labels" not in alone["metadata"] and SCHEMAS.validate(alone) == []


# ============================================================================================ 5. usage


def write_proc_cgroup(paths: HostPaths, pid: int, text: str) -> None:
    path = paths.proc(str(pid), "cgroup")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def v1_cgroup(path: str) -> str:
    """/proc/<pid>/cgroup of a process in a v1 hierarchy, every controller in ``path``."""
    return (f"12:memory:{path}\n11:blkio:{path}\n6:cpuset:{path}\n4:cpu,cpuacct:{path}\n"
            f"1:name=systemd:{path}\n0::/\n")


def gpu_labels(minor: int, uid: str, **extra: str) -> tuple:
    return labels(gpu_minor=str(minor), gpu_device_uuid=uid, **extra)


def start_sleepers(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["sleep", "30"]) for _ in range(n)]


def stop_sleepers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(timeout=5)


def test_usage_attribution_with_real_processes(tmp_path, monkeypatch):
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V1, Driver.CGROUPFS)
    lib = install(monkeypatch, host.paths, fakenvml.l40s_pcie4)
    host.add_pod(KubeQOS.BURSTABLE, "u-a", containers={A: CgroupValues()})
    host.add_pod(KubeQOS.BESTEFFORT, "u-b", containers={B: CgroupValues()})
    pod_a = pod_meta("u-a", "trainer", namespace="ml", containers={"main": A}, layout=host.layout)
    pod_b = pod_meta("u-b", "infer", namespace="ml", qos="BestEffort", containers={"srv": B}, layout=host.layout)
    assert pod_a.containers[0][1] == f"kubepods/burstable/podu-a/{A}"
    metrics = AgentMetrics("n1")
    devices = GpuDevices.open(host.paths, metrics)
    procs = start_sleepers(4)
    try:
        p_a, p_b, p_host, p_a_idle = (p.pid for p in procs)
        write_proc_cgroup(host.paths, p_a, v1_cgroup(f"/kubepods/burstable/podu-a/{A}"))
        # the agent runs in its own cgroup namespace: the kernel prints the path relative to it
        write_proc_cgroup(host.paths, p_b, v1_cgroup(f"/../../kubepods/besteffort/podu-b/{B}"))
        write_proc_cgroup(host.paths, p_host, v1_cgroup("/system.slice/dcgm.service"))
        write_proc_cgroup(host.paths, p_a_idle, v1_cgroup(f"/kubepods/burstable/podu-a/{A}"))
        gpu0, gpu2 = lib._gpu(L40S_BUSES[0]), lib._gpu(L40S_BUSES[2])
        gpu0.processes = [(p_a, 10 * GiB), (p_host, 1 * GiB), (p_a_idle, 3 * GiB)]
        gpu0.samples = [(p_a, 1_000, 20), (p_a, 2_000, 35), (p_host, 1_500, 10)]   # the newest sample counts
        gpu0.memory_used = 15 * GiB
        gpu2.processes = [(p_b, 2 * GiB)]
        gpu2.samples = [(p_b, 1_200, 60)]

        s = by_key(devices.collect(Tick(NOW, [pod_a, pod_b])))
        u0, u2 = uuid(0x200), uuid(0x202)
        assert s[("node_gpu_core_usage", gpu_labels(0, u0))] == 45
        assert s[("node_gpu_memory_usage", gpu_labels(0, u0))] == 14 * GiB
        assert s[("node_gpu_memory_total", gpu_labels(0, u0))] == 46068 * MiB
        assert s[("node_gpu_core_usage", gpu_labels(2, u2))] == 60
        assert s[("node_gpu_memory_usage", gpu_labels(2, u2))] == 2 * GiB
        for m in (1, 3):                                           # idle GPUs: zero, but reported
            assert s[("node_gpu_core_usage", gpu_labels(m, uuid(0x200 + m)))] == 0
            assert s[("node_gpu_memory_usage", gpu_labels(m, uuid(0x200 + m)))] == 0
        assert s[("pod_gpu_core_usage", gpu_labels(0, u0, pod_uid="u-a"))] == 35
        assert s[("pod_gpu_memory_usage", gpu_labels(0, u0, pod_uid="u-a"))] == 13 * GiB   # idle pid keeps memory
        assert s[("container_gpu_core_usage", gpu_labels(0, u0, container_id=A))] == 35
        assert s[("container_gpu_memory_usage", gpu_labels(0, u0, container_id=A))] == 13 * GiB
        assert s[("pod_gpu_core_usage", gpu_labels(2, u2, pod_uid="u-b"))] == 60
        assert s[("pod_gpu_memory_usage", gpu_labels(2, u2, pod_uid="u-b"))] == 2 * GiB
        assert s[("container_gpu_core_usage", gpu_labels(2, u2, container_id=B))] == 60
        assert s[("container_gpu_memory_usage", gpu_labels(2, u2, container_id=B))] == 2 * GiB
        pod_series = sorted((name, dict(lb).get("pod_uid") or dict(lb)["container_id"], dict(lb)["gpu_minor"])
                            for name, lb in s if name.startswith(("pod_", "container_")))
        assert pod_series == sorted([("pod_gpu_core_usage", "u-a", "0"), ("pod_gpu_memory_usage", "u-a", "0"),
                                     ("container_gpu_core_usage", A, "0"), ("container_gpu_memory_usage", A, "0"),
                                     ("pod_gpu_core_usage", "u-b", "2"), ("pod_gpu_memory_usage", "u-b", "2"),
                                     ("container_gpu_core_usage", B, "2"), ("container_gpu_memory_usage", B, "2")])
        assert len(s) == 4 * 3 + 8

        def pod_gauge(name: str, uid: str, pod: str, minor: int) -> float | None:
            return metrics.registry.get_sample_value(name, {"node": "n1", "pod_uid": uid, "pod_name": pod,
                                                            "pod_namespace": "ml", "minor": str(minor),
                                                            "uuid": uuid(0x200 + minor)})

        assert pod_gauge("koordlet_pod_gpu_core_usage", "u-a", "trainer", 0) == 35
        assert pod_gauge("koordlet_pod_gpu_memory_used_bytes", "u-a", "trainer", 0) == 13 * GiB
        assert pod_gauge("koordlet_pod_gpu_core_usage", "u-b", "infer", 2) == 60
        node_gauge = {"node": "n1", "minor": "0", "uuid": u0}
        assert metrics.registry.get_sample_value("koordlet_gpu_core_usage", node_gauge) == 45
        assert metrics.registry.get_sample_value("koordlet_gpu_memory_used_bytes", node_gauge) == 15 * GiB

        # pod a leaves (its processes linger): node-only; its gauges are removed, b's stay
        gpu2.samples.append((p_b, 3_000, 70))
        s = by_key(devices.collect(Tick(NOW + 1, [pod_b])))
        assert s[("node_gpu_memory_usage", gpu_labels(0, u0))] == 14 * GiB
        assert s[("node_gpu_core_usage", gpu_labels(0, u0))] == 0          # no newer samples: 0 % this cycle
        assert ("pod_gpu_core_usage", gpu_labels(0, u0, pod_uid="u-a")) not in s
        assert s[("pod_gpu_core_usage", gpu_labels(2, u2, pod_uid="u-b"))] == 70
        assert pod_gauge("koordlet_pod_gpu_core_usage", "u-a", "trainer", 0) is None
        assert pod_gauge("koordlet_pod_gpu_memory_used_bytes", "u-a", "trainer", 0) is None
        assert pod_gauge("koordlet_pod_gpu_core_usage", "u-b", "infer", 2) == 70

        # a process that ended between NVML's answer and the /proc read counts for the node only
        os.remove(host.paths.proc(str(p_b), "cgroup"))
        s = by_key(devices.collect(Tick(NOW + 2, [pod_b])))
        assert s[("node_gpu_memory_usage", gpu_labels(2, u2))] == 2 * GiB
        assert not [k for k in s if k[0].startswith(("pod_", "container_"))]
        assert pod_gauge("koordlet_pod_gpu_core_usage", "u-b", "infer", 2) is None
    finally:
        stop_sleepers(procs)


def test_usage_attribution_cgroup_v2_systemd(tmp_path, monkeypatch):
    """The unified hierarchy's single ``0::`` line with a systemd scope path."""
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    lib = install(monkeypatch, host.paths, fakenvml.l40s_pcie4)
    host.add_pod(KubeQOS.GUARANTEED, "u-g", containers={C: CgroupValues()})
    pod = pod_meta("u-g", "llm", qos="Guaranteed", containers={"main": C}, layout=host.layout)
    devices = GpuDevices.open(host.paths, AgentMetrics("n1"))
    (proc,) = start_sleepers(1)
    try:
        write_proc_cgroup(host.paths, proc.pid, f"0::/{pod.containers[0][1]}\n")
        lib._gpu(L40S_BUSES[3]).processes = [(proc.pid, 5 * GiB)]
        lib._gpu(L40S_BUSES[3]).samples = [(proc.pid, 10, 80)]
        s = by_key(devices.collect(Tick(NOW, [pod])))
        assert s[("pod_gpu_core_usage", gpu_labels(3, uuid(0x203), pod_uid="u-g"))] == 80
        assert s[("container_gpu_memory_usage", gpu_labels(3, uuid(0x203), container_id=C))] == 5 * GiB
    finally:
        stop_sleepers([proc])


# ============================================================================================ 6. MIG


def half_card(minor: int) -> str:
    return json.dumps({"gpu": [{"minor": minor, "resources": {"koordinator.sh/gpu-core": "50",
                                                              "koordinator.sh/gpu-memory": "40Gi",
                                                              "koordinator.sh/gpu-memory-ratio": "50"}}]})


def test_mig_usage_attributed_by_annotation(tmp_path, monkeypatch, caplog):
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V1, Driver.CGROUPFS)
    lib = install(monkeypatch, host.paths, fakenvml.a100_mig)
    gpu = lib._gpu(A100_BUS)
    gpu.memory_used = 30 * GiB
    gpu.processes = [(4242, 12 * GiB), (4343, 17 * GiB)]        # NVML lists them, but cannot split SM use
    pods = [pod_meta("u-1", "mig-a", containers={"main": A}, layout=host.layout,
                     annotations={wire.ANNOTATION_DEVICE_ALLOCATED: half_card(0)}),
            pod_meta("u-2", "mig-b", containers={"main": B}, layout=host.layout,
                     annotations={wire.ANNOTATION_DEVICE_ALLOCATED: half_card(0)}),
            pod_meta("u-3", "broken", containers={"main": C}, layout=host.layout,
                     annotations={wire.ANNOTATION_DEVICE_ALLOCATED: '{"gpu": [{"minor": 0, "resources": '}),
            pod_meta("u-4", "other-gpu", containers={"main": "d" * 64}, layout=host.layout,
                     annotations={wire.ANNOTATION_DEVICE_ALLOCATED: half_card(1)}),
            pod_meta("u-5", "plain", containers={"main": "e" * 64}, layout=host.layout)]
    metrics = AgentMetrics("n1")
    devices = GpuDevices.open(host.paths, metrics)
    with caplog.at_level(logging.WARNING, logger="koordlet.collectors.gpu"):
        s = by_key(devices.collect(Tick(NOW, pods)))
    u = uuid(0x300)
    assert s[("pod_gpu_memory_usage", gpu_labels(0, u, pod_uid="u-1"))] == 15 * GiB
    assert s[("pod_gpu_memory_usage", gpu_labels(0, u, pod_uid="u-2"))] == 15 * GiB
    assert s[("pod_gpu_core_usage", gpu_labels(0, u, pod_uid="u-1"))] == 0     # no utilization in MIG mode
    assert {dict(lb)["pod_uid"] for name, lb in s if name.startswith("pod_")} == {"u-1", "u-2"}
    assert not [k for k in s if k[0].startswith("container_")]
    assert "default/broken" in caplog.text and "device-allocated" in caplog.text
    # the node's share is the device's: the pods' parts must not add up to more than the node
    assert s[("node_gpu_memory_usage", gpu_labels(0, u))] == 30 * GiB
    assert s[("node_gpu_memory_total", gpu_labels(0, u))] == 80 * GiB
    assert metrics.registry.get_sample_value("koordlet_pod_gpu_memory_used_bytes", {
        "node": "n1", "pod_uid": "u-2", "pod_name": "mig-b", "pod_namespace": "default", "minor": "0",
        "uuid": u}) == 15 * GiB
    assert metrics.registry.get_sample_value("koordlet_gpu_utilization", {"node": "n1", "minor": "0",
                                                                          "uuid": u}) is None

    # unequal shares split by gpu-memory-ratio
    quarter = half_card(0).replace('"50"', '"25"')
    pods[1] = pod_meta("u-2", "mig-b", containers={"main": B}, layout=host.layout,
                     annotations={wire.ANNOTATION_DEVICE_ALLOCATED: quarter})
    s = by_key(devices.collect(Tick(NOW + 1, pods)))
    assert s[("pod_gpu_memory_usage", gpu_labels(0, u, pod_uid="u-1"))] == 20 * GiB
    assert s[("pod_gpu_memory_usage", gpu_labels(0, u, pod_uid="u-2"))] == 10 * GiB


# ============================================================================================ 7. NodeMetric


def test_node_metric_devices():
    gpus = [Gpu(0, 0, uuid(0x200), "NVIDIA L40S", 46068 * MiB, L40S_BUSES[0]),
            Gpu(1, 1, uuid(0x201), "NVIDIA L40S", 46068 * MiB, L40S_BUSES[1]),
            Gpu(2, 2, uuid(0x202), "NVIDIA L40S", 46068 * MiB, L40S_BUSES[2])]
    cache = MetricCache(None, clock=lambda: NOW)
    samples = []
    for ts, cpu in ((NOW - 200, 1.0), (NOW - 100, 3.0)):
        samples += [Sample("node_cpu_usage", (), ts, cpu), Sample("node_memory_usage", (), ts, 4 * GiB),
                    Sample("pod_cpu_usage", labels(pod_uid="u-a"), ts, 0.5),
                    Sample("pod_memory_usage", labels(pod_uid="u-a"), ts, GiB),
                    Sample("pod_cpu_usage", labels(pod_uid="u-c"), ts, 0.25),
                    Sample("pod_memory_usage", labels(pod_uid="u-c"), ts, GiB)]
    series = {0: ((33, 10 * GiB), (34, 20 * GiB)), 1: ((100, 40 * GiB), (100, 40 * GiB))}
    for minor, points in series.items():
        for ts, (core, memory) in zip((NOW - 200, NOW - 100), points, strict=False):
            lb = gpu_labels(minor, uuid(0x200 + minor))
            samples += [Sample("node_gpu_core_usage", lb, ts, core), Sample("node_gpu_memory_usage", lb, ts, memory),
                        Sample("node_gpu_memory_total", lb, ts, 46068 * MiB)]
    samples += [Sample("node_gpu_core_usage", gpu_labels(0, uuid(0x200)), NOW - 1000, 1000),   # outside the window
                Sample("node_gpu_memory_usage", gpu_labels(0, uuid(0x200)), NOW - 1000, 40 * GiB)]
    for ts, core, memory in ((NOW - 200, 30, 6 * GiB), (NOW - 100, 20, 2 * GiB)):
        lb = gpu_labels(1, uuid(0x201), pod_uid="u-a")
        samples += [Sample("pod_gpu_core_usage", lb, ts, core), Sample("pod_gpu_memory_usage", lb, ts, memory)]
    cache.append(samples)
    layout = Layout(Driver.CGROUPFS)
    pod_a = pod_meta("u-a", "trainer", containers={"main": A}, layout=layout)
    pod_c = pod_meta("u-c", "cpu-only", containers={"main": C}, layout=layout)
    status = NodeMetricBuilder(cache, CollectPolicy()).status([pod_a, pod_c], NOW, None, (), gpus)
    node = status["nodeMetric"]["nodeUsage"]
    assert node["resources"] == {"cpu": "2", "memory": "4Gi"}
    assert node["devices"] == [
        {"type": "gpu", "id": uuid(0x200), "minor": 0, "health": False,
         "resources": {"koordinator.sh/gpu-core": "33", "koordinator.sh/gpu-memory": "15Gi",
                       "koordinator.sh/gpu-memory-ratio": "33"}},          # 33.5 % -> 33; 15360/46068 -> 33
        {"type": "gpu", "id": uuid(0x201), "minor": 1, "health": False,
         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "40Gi",
                       "koordinator.sh/gpu-memory-ratio": "88"}}]
    pods = {p["name"]: p for p in status["podsMetric"]}
    assert pods["trainer"]["podUsage"]["devices"] == [
        {"type": "gpu", "id": uuid(0x201), "minor": 1, "health": False,
         "resources": {"koordinator.sh/gpu-core": "25", "koordinator.sh/gpu-memory": "4Gi",
                       "koordinator.sh/gpu-memory-ratio": "8"}}]
    assert "devices" not in pods["cpu-only"]["podUsage"]
    obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "gpu-node"},
           "spec": {}, "status": status}
    assert SCHEMAS.validate(obj) == []


# ============================================================================================ 8. device-allocated


def test_parse_device_allocated_shapes():
    shared = ('{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"8Gi",'
              '"koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-6b1f"}]}')
    assert parse_device_allocated(shared) == {"gpu": [DeviceAllocation(
        "gpu", 1, "GPU-6b1f", {"koordinator.sh/gpu-core": Fraction(50), "koordinator.sh/gpu-memory": Fraction(8 * GiB),
                               "koordinator.sh/gpu-memory-ratio": Fraction(50)})]}
    whole = ('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
             '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-aaa"},'
             '{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
             '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-bbb"}]}')
    full = {"koordinator.sh/gpu-core": Fraction(100), "koordinator.sh/gpu-memory": Fraction(83201216 * 1024),
            "koordinator.sh/gpu-memory-ratio": Fraction(100)}
    assert parse_device_allocated(whole) == {"gpu": [DeviceAllocation("gpu", 0, "GPU-aaa", full),
                                                     DeviceAllocation("gpu", 1, "GPU-bbb", full)]}
    joint = ('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"23040Mi",'
             '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-..."}],'
             '"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:01:00.0",'
             '"extension":{"vfs":[{"minor":-1,"busID":"0000:01:00.2"}]}}]}')
    got = parse_device_allocated(joint)
    assert got["gpu"] == [DeviceAllocation("gpu", 0, "GPU-...", {
        "koordinator.sh/gpu-core": Fraction(100), "koordinator.sh/gpu-memory": Fraction(23040 * MiB),
        "koordinator.sh/gpu-memory-ratio": Fraction(100)})]
    assert got["rdma"] == [DeviceAllocation("rdma", 0, "0000:01:00.0", {"koordinator.sh/rdma": Fraction(1)},
                                            (VirtualFunction(-1, "0000:01:00.2"),))]
    # vfs[].minor is omitempty upstream: absent means 0
    assert parse_device_allocated('{"rdma":[{"minor":2,"extension":{"vfs":[{"busID":"0000:01:00.3"}]}}]}')[
        "rdma"][0].vfs == (VirtualFunction(0, "0000:01:00.3"),)


def test_parse_device_allocated_deprecated_names():
    raw = ('{"gpu":[{"minor":0,"resources":{"kubernetes.io/gpu-core":"100","kubernetes.io/gpu-memory-ratio":"100",'
           '"kubernetes.io/gpu-memory":"16Gi","kubernetes.io/batch-cpu":"1"}}],'
           '"rdma":[{"minor":1,"resources":{"kubernetes.io/rdma":"100"}}]}')
    got = parse_device_allocated(raw)
    assert got["gpu"][0].resources == {"koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory-ratio": 100,
                                       "koordinator.sh/gpu-memory": 16 * GiB, "kubernetes.io/batch-cpu": 1}
    assert got["rdma"][0].resources == {"koordinator.sh/rdma": 100}
    assert parse_device_allocated('{"gpu":null}') == {}


@pytest.mark.parametrize("raw, field", [
    ('{"gpu":[{"minor":0,', "not JSON"),
    ('[{"minor":0}]', "expected an object, got list"),
    ('{"gpu":{"minor":0}}', "[gpu]: expected a list, got dict"),
    ('{"gpu":[7]}', "[gpu][0]: expected an object"),
    ('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"lots"}}]}',
     "[gpu][0].resources[koordinator.sh/gpu-memory]"),
    ('{"gpu":[{"minor":"0"}]}', "[gpu][0].minor: expected an integer, got '0'"),
    ('{"gpu":[{"minor":0},{"minor":1.5}]}', "[gpu][1].minor: expected an integer, got 1.5"),
    ('{"gpu":[{"minor":true}]}', "[gpu][0].minor: expected an integer, got True"),
    ('{"rdma":[{"minor":0,"extension":{"vfs":[{"minor":"x","busID":"0000:01:00.2"}]}}]}',
     "[rdma][0].extension.vfs.minor: expected an integer, got 'x'"),
    ('{"gpu":[{"minor":0,"resources":["koordinator.sh/gpu-core"]}]}', "[gpu][0].resources: expected an object"),
    ('{"rdma":[{"minor":0,"extension":"vfs"}]}', "[rdma][0].extension: expected an object"),
    ('{"rdma":[{"minor":0,"extension":{"vfs":{"minor":1}}}]}', "[rdma][0].extension.vfs: expected a list"),
])
def test_parse_device_allocated_rejects(raw, field):
    with pytest.raises(ValueError, match=re.escape(field)) as e:
        parse_device_allocated(raw)
    assert str(e.value).startswith("scheduling.koordinator.sh/device-allocated")


# ============================================================================================ 9. CLI


def cli_flags(host: FakeHost) -> list[str]:
    return ["--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", host.paths.proc_root,
            "--sys-root-dir", host.paths.sys_root, "--sys-fs-root-dir", host.paths.sys_fs_root]


def test_cli_topology_with_h100(tmp_path, monkeypatch, capsys):
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    host.set_numa({0: [0, 1], 1: [2, 3]})
    install(monkeypatch, host.paths, fakenvml.h100_sxm8)
    assert main(["topology"] + cli_flags(host)) == 0
    out = capsys.readouterr().out
    assert "GPUs: 8  driver 550.54.15  CUDA 12.4  model H100-80GB-HBM3" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"^[0-7]  +0000:", line)]
    assert [r[1] for r in rows] == H100_BUSES
    assert rows[0][:6] == ["0", "0000:18:00.0", "0", "pci0000:15", "NVIDIA", "H100"]
    assert {" ".join(r[4:13]) for r in rows} == {"NVIDIA H100 80GB HBM3 81559 off 18 to NVSwitch"}
    assert "PCIe paths (nvidia-smi topo -m):" in out
    topo = {line.split()[0]: line.split()[1:] for line in out.splitlines() if re.match(r"^GPU[0-7] ", line)}
    assert topo["GPU0"] == ["X", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert topo["GPU5"] == ["SYS", "SYS", "SYS", "SYS", "NODE", "X", "NODE", "NODE"]
    assert "GPU partitions (size: minors/link/ring bandwidth/score):" in out
    assert "  8: 0,1,2,3,4,5,6,7/NVLink/450G/1" in out
    assert "  2: 0,1/NVLink/450G/1  2,3/NVLink/450G/1  4,5/NVLink/450G/1  6,7/NVLink/450G/1" in out

    assert main(["topology", "-o", "json"] + cli_flags(host)) == 0
    data = json.loads(capsys.readouterr().out)
    gpus = data["devices"]["gpus"]
    assert len(gpus["devices"]) == 8
    assert gpus["devices"][4] == {"minor": 4, "uuid": uuid(0x104), "name": "NVIDIA H100 80GB HBM3",
                                  "busID": "0000:9a:00.0", "numaNode": 1, "pcieRoot": "pci0000:97",
                                  "memoryBytes": 81559 * MiB, "migEnabled": False, "lost": False,
                                  "nvlinks": "18 to NVSwitch"}
    assert gpus["partitions"]["8"] == [part(list(range(8)), "NVLink", "450G")]
    assert gpus["partitions"] == HOPPER_TABLE
    assert (gpus["driverVersion"], gpus["cudaVersion"], gpus["model"], gpus["unavailable"]) == (
        "550.54.15", "12.4", "H100-80GB-HBM3", "")


def test_cli_doctor_gpus(tmp_path, monkeypatch, capsys):
    """The host's GPUs, and the GPU collectors supported only where there are GPUs to read."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    flags = ["--standalone", "--feature-gates", "GPUEnvInject=true,HamiCoreVGPUMonitor=true"] + cli_flags(host)

    def rows() -> dict[str, list[str]]:
        """The GPU feature's (SUPPORTED, DETAIL) as "gpus", each GPU collector's (KIND ... DETAIL) by name."""
        lines = capsys.readouterr().out.splitlines()
        found = {line.split()[0]: line.split(None, 4)[1:] for line in lines if line.startswith(("gpu ", "hami"))}
        (gpus,) = [line.split(None, 3)[2:] for line in lines if line.startswith("gpus (nvml)")]
        return found | {"gpus": gpus}

    install(monkeypatch, host.paths, fakenvml.h100_sxm8)
    assert main(["doctor"] + flags) == 0
    found = rows()
    assert found["gpus"] == ["yes", "8 GPU(s), driver 550.54.15, CUDA 12.4"]
    assert found["gpu"] == ["collector", "on", "yes", "8 GPU(s)"]
    assert found["hami-vgpu"] == ["collector", "on", "yes", "8 GPU(s)"]

    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    assert main(["doctor"] + flags) == 0
    absent = "libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"
    found = rows()
    assert found["gpus"] == ["no", absent]
    assert found["gpu"] == ["collector", "on", "no", absent]
    assert found["hami-vgpu"] == ["collector", "on", "no", absent]
