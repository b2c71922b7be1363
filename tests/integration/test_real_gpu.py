"""The real NVML on a machine with an NVIDIA GPU, checked against ``nvidia-smi`` of the same machine.

Skipped cleanly where there is no driver (CI). What is compared: the inventory (minor, UUID, name, memory, bus
id) with ``nvidia-smi --query-gpu`` and ``nvidia-smi -q``; NVLink counts and PCIe paths with
``nvidia-smi topo -m``; the Device object with the upstream CRD; one usage sample per GPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from doubles.crdschema import CrdSchemas
from koordlet.host.nvml import GpuHealth, Nvml, NvmlUnavailable
from koordlet.reporters import device
from koordlet.states.node import NodeInfo
from tests.builders import host_paths

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
PATHS = host_paths()
LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}


@pytest.fixture(scope="module")
def session():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: no NVIDIA driver on this machine")
    try:
        s = Nvml.open(PATHS)
    except NvmlUnavailable as e:
        pytest.skip(f"NVML unavailable: {e}")
    yield s
    s.close()


def smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], check=True, capture_output=True, text=True, timeout=60).stdout


def test_inventory_matches_nvidia_smi(session):
    inv = session.inventory()
    assert inv.error == "" and inv.gpus
    rows = [[c.strip() for c in line.split(",")] for line in smi(
        "--query-gpu=uuid,name,memory.total,pci.bus_id,driver_version", "--format=csv,noheader,nounits"
    ).strip().splitlines()]
    by_uuid = {g.uuid: g for g in inv.gpus}
    assert set(by_uuid) == {r[0] for r in rows}
    for uuid, name, mem_mib, bus, driver in rows:
        gpu = by_uuid[uuid]
        assert gpu.name == name
        assert gpu.memory_total // 2**20 == int(mem_mib)
        assert gpu.bus_id == bus.lower()[4:]          # nvidia-smi prints the 8-digit domain
        assert inv.driver_version == driver
    minors = dict(re.findall(r"GPU UUID\s+:\s+(\S+).*?Minor Number\s+:\s+(\d+)", smi("-q"), re.S))
    assert {g.uuid: str(g.minor) for g in inv.gpus} == minors
    for gpu in inv.gpus:
        numa = Path(f"/sys/bus/pci/devices/{gpu.bus_id}/numa_node").read_text().strip()
        assert gpu.numa_node == int(numa)
        assert gpu.pcie_root and gpu.pcie_root in str(Path(f"/sys/bus/pci/devices/{gpu.bus_id}").resolve())


def test_links_match_nvidia_smi_topo(session):
    """``nvidia-smi topo -m``: NV<n> = n NVLinks between two GPUs (direct, or both on NVSwitches), else the PCIe
    path name, which must be NVML's common-ancestor level."""
    inv = session.inventory()
    gpus = sorted(inv.gpus, key=lambda g: g.index)
    lines = [ln.split() for ln in smi("topo", "-m").splitlines() if ln.startswith("GPU")]
    header_gpus = [c for c in lines[0] if re.fullmatch(r"GPU\d+", c)] if lines else []
    matrix = {row[0]: row[1:1 + len(header_gpus)] for row in lines[1:] if re.fullmatch(r"GPU\d+", row[0])}
    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus):
            if i == j or f"GPU{i}" not in matrix:
                continue
            cell = matrix[f"GPU{i}"][j]
            if cell.startswith("NV"):
                direct = sum(1 for link in a.nvlinks if link.remote_bus_id == b.bus_id)
                switch = sum(1 for link in a.nvlinks if link.remote_type == "switch")
                assert int(cell[2:]) in (direct, switch)
            elif cell in LEVELS:
                assert inv.pcie_levels[frozenset((a.bus_id, b.bus_id))] == LEVELS[cell]


def test_device_object_is_valid_and_usage_samples(session):
    inv = session.inventory()
    obj = device.desired(NodeInfo("gpu-node", "uid-1"), inv, GpuHealth().get, [], "Prefer", 0.0)
    assert CrdSchemas.load(REPO / "deploy" / "crds").validate(obj) == []
    assert [d["minor"] for d in obj["spec"]["devices"]] == sorted(g.minor for g in inv.gpus)
    assert obj["metadata"]["labels"]["node.koordinator.sh/gpu-vendor"] == "nvidia"
    usages, failed = session.usage(inv.gpus)
    assert failed == {} and len(usages) == len(inv.gpus)
    for u in usages:
        assert 0 <= u.memory_used <= u.memory_total
