"""A fake of the NVML library as nvidia-ml-py (``pynvml``) presents it, plus the kernel side of an NVIDIA host.

Faithful to what the agent calls: the same function names and argument order, the real ``NVMLError`` class and
``NVML_*`` constants (taken from the installed pynvml), the real ctypes structures for the values NVML returns
(so bytes-vs-str behaves as with the real library: names, UUIDs and the driver version come back as bytes,
``busId`` fields as str), and the real error codes for the real conditions: NOT_SUPPORTED for NVLink queries
on a PCIe card and for utilization in MIG mode, INVALID_ARGUMENT past a GPU's last NVLink, NOT_FOUND when no
process-utilization sample is newer than the timestamp, GPU_IS_LOST for a GPU fallen off the bus, TIMEOUT
from ``nvmlEventSetWait``.

``install(paths, profile)`` writes the kernel's view (sysfs PCI tree with the nvidia driver bindings,
``/proc/driver/nvidia/gpus/<bdf>/information``) and returns the library object; tests put it in
``sys.modules["pynvml"]`` so the agent's ``import pynvml`` finds it.

Profiles mirror real machines: an 8×H100 SXM HGX board on NVSwitches (NV18 between every pair in
``nvidia-smi topo -m``), a 4×L40S PCIe server with two GPUs per PCIe switch on each socket, and an A100 80GB PCIe
with MIG enabled.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml as _real

from doubles.fakepci import FakePci
from koordlet.host.paths import HostPaths

MIB = 1 << 20


@dataclass
class FakeLink:
    remote_bus_id: str           # NVML form, "00000000:3B:00.0"
    remote_type: int             # NVML_NVLINK_DEVICE_TYPE_*
    version: int = _real.NVML_NVLINK_VERSION_4_0
    active: bool = True


@dataclass
class FakeGpu:
    bus_id: str                  # sysfs form, "0000:3b:00.0"
    minor: int
    uuid: str
    name: str
    memory_total: int
    numa_node: int
    root: str                    # "pci0000:3a"
    bridges: tuple[str, ...]     # PCI bridges from the root port down
    links: list[FakeLink] | None = None      # None: no NVLink (NOT_SUPPORTED)
    mig: tuple[int, int] | None = None       # (current, pending); None: no MIG (NOT_SUPPORTED)
    memory_used: int = 0
    utilization: int = 0
    processes: list[tuple[int, int]] = field(default_factory=list)              # (pid, used bytes)
    samples: list[tuple[int, int, int]] = field(default_factory=list)           # (pid, timestamp µs, sm %)
    events_supported: bool = True
    lost: bool = False
    error: int | None = None     # an NVML error code every call on this GPU answers with (a passing failure)

    @property
    def nvml_bus_id(self) -> str:
        domain, rest = self.bus_id.split(":", 1)
        return f"0000{domain}:{rest}".upper()

    @property
    def legacy_bus_id(self) -> str:
        return self.bus_id.upper()


@dataclass
class FakeEvent:
    """What ``nvmlEventSetWait`` returns (c_nvmlEventData_t's fields; the device is a handle)."""
    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = 0
    computeInstanceId: int = 0


class _Handle:
    __slots__ = ("gpu",)

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu


class FakeNvmlLibrary:
    """The ``pynvml`` module surface the agent uses. Attribute access falls back to the real module's constants."""

    NVMLError = _real.NVMLError

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "550.54.15", cuda: int = 12040,
                 levels: Callable[[FakeGpu, FakeGpu], int] | None = None) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.levels = levels or (lambda a, b: _real.NVML_TOPOLOGY_SYSTEM)
        self.init_error: int | None = None
        self.initialised = 0
        self.calls: Counter[str] = Counter()
        self.events: queue.Queue[FakeEvent] = queue.Queue()
        self._registered: set[int] = set()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "nvmlEventType")):
            return getattr(_real, name)
        raise AttributeError(name)

    # --- failure injection ---------------------------------------------------------------------------------

    def lose(self, bus_id: str) -> None:
        """The GPU falls off the bus: NVML answers GPU_IS_LOST for it from now on."""
        self._gpu(bus_id).lost = True

    def xid(self, bus_id: str | None, xid: int) -> None:
        """A critical XID event; ``bus_id=None`` is an event without a device (NVML's "all GPUs")."""
        gpu = self._gpu(bus_id) if bus_id else None
        with self._lock:
            if gpu is not None and id(gpu) not in self._registered:
                return               # NVML delivers events only for devices registered on the set
        self.events.put(FakeEvent(_Handle(gpu) if gpu else None, _real.nvmlEventTypeXidCriticalError, xid))

    def _gpu(self, bus_id: str) -> FakeGpu:
        return next(g for g in self.gpus if g.bus_id == bus_id)

    # --- helpers -------------------------------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if not self.initialised:
            raise _real.NVMLError(_real.NVML_ERROR_UNINITIALIZED)

    def _dev(self, name: str, handle: Any) -> FakeGpu:
        self._enter(name)
        if not isinstance(handle, _Handle) or handle.gpu is None:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        if handle.gpu.lost:
            raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
        if handle.gpu.error is not None:
            raise _real.NVMLError(handle.gpu.error)
        return handle.gpu

    def _link(self, name: str, handle: Any, link: int) -> FakeLink:
        gpu = self._dev(name, handle)
        if gpu.links is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.links):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link]

    # --- system --------------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise _real.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver.encode()

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    # --- devices -------------------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return sum(1 for g in self.gpus if not g.lost)   # a lost GPU drops out of NVML's count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        live = [g for g in self.gpus if not g.lost]
        if not 0 <= index < len(live):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(live[index])

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> _Handle:
        self._enter("nvmlDeviceGetHandleByPciBusId")
        text = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id).lower()
        for gpu in self.gpus:
            if text in (gpu.bus_id, gpu.nvml_bus_id.lower()):
                if gpu.lost:
                    raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
                return _Handle(gpu)
        raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._dev("nvmlDeviceGetMinorNumber", handle).minor

    def nvmlDeviceGetUUID(self, handle: Any) -> bytes:
        return self._dev("nvmlDeviceGetUUID", handle).uuid.encode()

    def nvmlDeviceGetName(self, handle: Any) -> bytes:
        return self._dev("nvmlDeviceGetName", handle).name.encode()

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._dev("nvmlDeviceGetPciInfo", handle)
        bus = int(gpu.bus_id.split(":")[1], 16)
        return _real.nvmlPciInfo_t(busIdLegacy=gpu.legacy_bus_id.encode(), domain=0, bus=bus, device=0,
                                   pciDeviceId=0x233010DE, busId=gpu.nvml_bus_id.encode())

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        gpu = self._dev("nvmlDeviceGetMemoryInfo", handle)
        return _real.c_nvmlMemory_t(total=gpu.memory_total, free=gpu.memory_total - gpu.memory_used,
                                    used=gpu.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._dev("nvmlDeviceGetUtilizationRates", handle)
        if gpu.mig is not None and gpu.mig[0] == _real.NVML_DEVICE_MIG_ENABLE:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return _real.c_nvmlUtilization_t(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._dev("nvmlDeviceGetMigMode", handle)
        if gpu.mig is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return list(gpu.mig)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        gpu = self._dev("nvmlDeviceGetComputeRunningProcesses", handle)
        return [_real.nvmlFriendlyObject({"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0xFFFFFFFF,
                                          "computeInstanceId": 0xFFFFFFFF}) for pid, used in gpu.processes]

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timestamp: int) -> list[Any]:
        gpu = self._dev("nvmlDeviceGetProcessUtilization", handle)
        if gpu.mig is not None and gpu.mig[0] == _real.NVML_DEVICE_MIG_ENABLE:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        newer = [s for s in gpu.samples if s[1] > timestamp]
        if not newer:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return [_real.c_nvmlProcessUtilizationSample_t(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0,
                                                       decUtil=0) for pid, ts, sm in newer]

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any) -> int:
        name = "nvmlDeviceGetTopologyCommonAncestor"
        return self.levels(self._dev(name, a), self._dev(name, b))

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        active = self._link("nvmlDeviceGetNvLinkState", handle, link).active
        return _real.NVML_FEATURE_ENABLED if active else _real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        remote = self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link).remote_bus_id
        return _real.nvmlPciInfo_t(busIdLegacy=remote[4:].encode(), busId=remote.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link).remote_type

    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkVersion", handle, link).version

    # --- events --------------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> object:
        self._enter("nvmlEventSetCreate")
        return object()

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: object) -> None:
        gpu = self._dev("nvmlDeviceRegisterEvents", handle)
        if not gpu.events_supported:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            self._registered.add(id(gpu))

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> FakeEvent:
        self._enter("nvmlEventSetWait")
        try:
            return self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise _real.NVMLError(_real.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._enter("nvmlEventSetFree")


# --- the kernel side ---------------------------------------------------------------------------------------

def install(paths: HostPaths, gpus: list[FakeGpu], **kwargs: Any) -> FakeNvmlLibrary:
    """Write the sysfs PCI tree and the driver's /proc files for ``gpus``; return the library over them."""
    tree = FakePci(paths.sys_root)
    for gpu in gpus:
        tree.add(gpu.bus_id, root=gpu.root, bridges=gpu.bridges, numa_node=gpu.numa_node, pci_class="0x030200",
                 vendor="0x10de", device="0x2330", driver="nvidia")
        info = paths.proc("driver", "nvidia", "gpus", gpu.bus_id)
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "information"), "w") as f:
            f.write(f"Model: \t\t {gpu.name}\nIRQ:   \t\t 150\nGPU UUID: \t {gpu.uuid}\n"
                    f"Video BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                    f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {gpu.bus_id}\nDevice Minor: \t {gpu.minor}\n"
                    f"GPU Excluded:\t No\n")
    return FakeNvmlLibrary(gpus, **kwargs)


def _uuid(n: int) -> str:
    return f"GPU-{n:08x}-1111-2222-3333-{n:012x}"


def _levels_by(group: Callable[[FakeGpu], object], near: int, far: int = _real.NVML_TOPOLOGY_SYSTEM
               ) -> Callable[[FakeGpu, FakeGpu], int]:
    return lambda a, b: near if group(a) == group(b) else far


H100_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
H100_SWITCHES = ("00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0")


def h100_sxm8(paths: HostPaths) -> FakeNvmlLibrary:
    """8×H100 80GB HBM3 on NVSwitches: 18 NVLink 4.0 links each, spread over four switches (5/4/4/5)."""
    gpus = []
    for minor, bus in enumerate(H100_BUSES):
        links = [FakeLink(H100_SWITCHES[0 if i < 5 else 1 if i < 9 else 2 if i < 13 else 3],
                          _real.NVML_NVLINK_DEVICE_TYPE_SWITCH, _real.NVML_NVLINK_VERSION_4_0) for i in range(18)]
        b = int(bus, 16)
        gpus.append(FakeGpu(f"0000:{bus}:00.0", minor, _uuid(0x100 + minor), "NVIDIA H100 80GB HBM3",
                            81559 * MIB, 0 if minor < 4 else 1, f"pci0000:{b - 3:02x}",
                            (f"0000:{b - 3:02x}:01.0", f"0000:{b - 2:02x}:00.0", f"0000:{b - 1:02x}:00.0"),
                            links=links, mig=(0, 0)))
    return install(paths, gpus, levels=_levels_by(lambda g: g.numa_node, _real.NVML_TOPOLOGY_NODE))


def l40s_pcie4(paths: HostPaths) -> FakeNvmlLibrary:
    """4×L40S on PCIe, no NVLink: GPUs 0,1 behind one PCIe switch on NUMA node 0, GPUs 2,3 behind another on 1."""
    spec = (("4f", 0, "pci0000:4a", ("0000:4a:01.0", "0000:4b:00.0", "0000:4c:00.0")),
            ("52", 0, "pci0000:4a", ("0000:4a:01.0", "0000:4b:00.0", "0000:4c:04.0")),
            ("ce", 1, "pci0000:c9", ("0000:c9:01.0", "0000:ca:00.0", "0000:cb:00.0")),
            ("d1", 1, "pci0000:c9", ("0000:c9:01.0", "0000:ca:00.0", "0000:cb:04.0")))
    gpus = [FakeGpu(f"0000:{bus}:00.0", minor, _uuid(0x200 + minor), "NVIDIA L40S", 46068 * MIB, node, root, bridges)
            for minor, (bus, node, root, bridges) in enumerate(spec)]
    return install(paths, gpus, driver="535.161.08", cuda=12020,
                   levels=_levels_by(lambda g: g.bridges[1], _real.NVML_TOPOLOGY_SINGLE))


def a100_mig(paths: HostPaths) -> FakeNvmlLibrary:
    """One A100 80GB PCIe with MIG enabled (no NVLink bridge fitted)."""
    gpu = FakeGpu("0000:65:00.0", 0, _uuid(0x300), "NVIDIA A100 80GB PCIe", 81920 * MIB, 0, "pci0000:64",
                  ("0000:64:00.0",), mig=(_real.NVML_DEVICE_MIG_ENABLE, _real.NVML_DEVICE_MIG_ENABLE))
    return install(paths, [gpu], driver="535.104.05", cuda=12020)


PROFILES: dict[str, Callable[[HostPaths], FakeNvmlLibrary]] = {
    "h100-sxm8": h100_sxm8, "l40s-pcie4": l40s_pcie4, "a100-mig": a100_mig}


def absent() -> FakeNvmlLibrary:
    """A host without the NVIDIA driver: nvmlInit fails as pynvml does when libnvidia-ml.so.1 is missing."""
    lib = FakeNvmlLibrary([])
    lib.init_error = _real.NVML_ERROR_LIBRARY_NOT_FOUND
    return lib
