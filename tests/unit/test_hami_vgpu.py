"""Gate HamiCoreVGPUMonitor: each container's use of its HAMi-core vGPUs, read from libvgpu's shared region in the
per-container cache directory the NRI hook makes (what HAMi's vGPUmonitor reads). The regions are written by a
fake of libvgpu whose structs are declared with ctypes as HAMi-core's C header declares them
(doubles/fakehamicore.py), so the reader's offsets are checked against the C layout."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest

from doubles.fakehamicore import FakeLibvgpu, layout
from koordlet.collectors import hami_vgpu
from koordlet.component import Tick
from koordlet.host import hamicore
from koordlet.host.cgroup import Driver, Layout
from koordlet.ops.config import build
from koordlet.ops.metrics import AgentMetrics
from tests.builders import pod_meta

UID = "33333333-0000-0000-0000-000000000001"
GPU0, GPU1 = "GPU-" + "a" * 36, "GPU-" + "b" * 36
GiB = 2**30


def test_reader_offsets_are_the_c_layout() -> None:
    c = layout()
    assert (c["device_num"], c["uuids"], c["limit"], c["sm_limit"], c["procs"], c["proc_num"],
            c["last_kernel_time"], c["size"]) == (
        hamicore.OFF_DEVICE_NUM, hamicore.OFF_UUIDS, hamicore.OFF_LIMIT, hamicore.OFF_SM_LIMIT, hamicore.OFF_PROCS,
        hamicore.OFF_PROC_NUM, hamicore.OFF_LAST_KERNEL, hamicore.REGION_SIZE)
    assert (c["slot_size"], c["slot_used"], c["slot_util"], c["slot_status"], c["slot_seqlock"]) == (
        hamicore.SLOT_SIZE, hamicore.SLOT_USED, hamicore.SLOT_UTIL, hamicore.SLOT_STATUS, hamicore.SLOT_SEQLOCK)


def test_region_sums_live_processes(tmp_path: Any) -> None:
    lib = FakeLibvgpu(str(tmp_path / "r.cache"), [(GPU0, 4 * GiB, 30), (GPU1, 4 * GiB, 30)])
    a, b = lib.start(101), lib.start(102)
    lib.allocate(a, 0, GiB)
    lib.allocate(a, 0, 512 * 2**20, "context_size")
    lib.allocate(b, 0, GiB)
    lib.allocate(b, 1, 2 * GiB)
    lib.utilization(a, 0, 20)
    lib.utilization(b, 0, 15)
    lib.kernel_launched(1_700_000_000)
    region = hamicore.read_shared_region(lib.path)
    assert region.version == (1, 2) and region.processes == 2 and region.last_kernel_time == 1_700_000_000
    d0, d1 = region.devices
    assert (d0.uuid, d0.used_bytes, d0.limit_bytes, d0.sm_limit, d0.sm_util) == (GPU0, 2 * GiB + 512 * 2**20,
                                                                                  4 * GiB, 30, 35)
    assert (d1.uuid, d1.used_bytes) == (GPU1, 2 * GiB)
    lib.exit(b)                                                # an exited process's slot is cleared
    region = hamicore.read_shared_region(lib.path)
    assert region.processes == 1 and region.devices[1].used_bytes == 0
    lib.mid_write(a)                                           # a writer mid-update: read anyway, no stall
    assert hamicore.read_shared_region(lib.path).devices[0].used_bytes == GiB + 512 * 2**20


@pytest.mark.parametrize("damage,message", [("magic", "magic"), ("version", "version"), ("short", "bytes")])
def test_region_refused(tmp_path: Any, damage: str, message: str) -> None:
    lib = FakeLibvgpu(str(tmp_path / "r.cache"), [(GPU0, GiB, 0)], version=(2, 0) if damage == "version" else (1, 2))
    if damage == "magic":
        lib.region.initialized_flag = 0
        lib.flush()
    if damage == "short":
        os.truncate(lib.path, 100_000)                         # HAMi's v0 files are smaller
    with pytest.raises(ValueError, match=message):
        hamicore.read_shared_region(lib.path)


def gauge(m: AgentMetrics, name: str, container: str, index: str, uuid: str) -> float | None:
    return m.registry.get_sample_value(name, {"node": "n1", "pod_uid": UID, "pod_name": "trainer",
                                              "pod_namespace": "ml", "container_name": container,
                                              "vdevice_index": index, "device_uuid": uuid})


def test_collector_exports_each_container_and_forgets_gone_ones(tmp_path: Any, caplog: Any) -> None:
    root = tmp_path / "containers"
    key = f"{UID}_main"
    lib = FakeLibvgpu(str(root / key / f"{key}.cache"), [(GPU0, 8 * GiB, 50)])
    lib.allocate(lib.start(7), 0, 3 * GiB)
    lib.utilization(0, 0, 40)
    os.makedirs(root / f"{UID}_sidecar")                       # a container that has not run CUDA: no region
    os.makedirs(root / "44444444-0000-0000-0000-000000000009_x")  # a pod the agent does not know
    FakeLibvgpu(str(root / "44444444-0000-0000-0000-000000000009_x" / "y.cache"), [(GPU1, GiB, 0)])
    m = AgentMetrics("n1")
    collector = hami_vgpu.HamiVGPUCollector(str(root), m)
    tick = Tick(1.0, (pod_meta(UID, "trainer", namespace="ml", containers={"main": "a" * 64, "sidecar": "b" * 64},
                                layout=Layout(Driver.SYSTEMD)),))
    assert collector.collect(tick) == []
    assert gauge(m, "koordlet_container_vgpu_memory_used_bytes", "main", "0", GPU0) == 3 * GiB
    assert gauge(m, "koordlet_container_vgpu_memory_limit_bytes", "main", "0", GPU0) == 8 * GiB
    assert gauge(m, "koordlet_container_vgpu_core_utilization", "main", "0", GPU0) == 40
    assert all(s.labels["pod_uid"] == UID for fam in m.container_vgpu_memory_used_bytes.collect()
               for s in fam.samples)
    # a region that does not read is logged once, and its series go
    with open(lib.path, "r+b") as f:
        f.write(b"\0\0\0\0")
    caplog.set_level(logging.WARNING, "koordlet.collectors.hami_vgpu")
    collector.collect(tick)
    collector.collect(tick)
    assert caplog.text.count("vGPU region of pod ml/trainer container main not read") == 1
    assert gauge(m, "koordlet_container_vgpu_memory_used_bytes", "main", "0", GPU0) is None


def test_gate_enables_the_collector(tmp_path: Any) -> None:
    on = build(flags={"standalone": True, "feature-gates": {"HamiCoreVGPUMonitor": True},
                      "tsdb-path": str(tmp_path)}, environ={})
    off = build(flags={"standalone": True, "tsdb-path": str(tmp_path)}, environ={})
    assert hami_vgpu.PLUGIN.enabled(on) and not hami_vgpu.PLUGIN.enabled(off)
