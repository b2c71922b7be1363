"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py): inventory, NVLink wiring, usage, XID events.

The one place that talks to NVML. ``pynvml`` is imported when a session opens, so a host without the NVIDIA
driver costs nothing but one failed ``nvmlInit`` (reported by ``koordlet doctor``, never an error). Tests put a
fake of the library's API surface in ``sys.modules["pynvml"]``; this module cannot tell the difference.

What NVML does not know comes from the kernel: the GPU list from the nvidia driver's bindings in sysfs (as
upstream koordlet enumerates), NUMA node and PCIe root complex from sysfs (``host.pci``), and, for a GPU that
NVML can no longer open ("fallen off the bus"), its minor and UUID from the driver's
``/proc/driver/nvidia/gpus/<bus id>/information`` file, so the Device report can still name it as unhealthy.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from koordlet.host import pci
from koordlet.host.fs import read_text
from koordlet.host.paths import HostPaths

log = logging.getLogger(__name__)

LIBRARY = "libnvidia-ml.so.1"       # what pynvml loads on Linux
# XIDs that are the application's fault, not the GPU's (upstream list, after NVIDIA's XID catalogue).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_WAIT_MS = 1000          # upstream waits 5 s; 1 s keeps shutdown inside the agent's 2 s budget
HEALTH_CHECK_NOT_SUPPORTED = "DeviceHealthCheckNotSupported"   # upstream condition reason
GPU_LOST = "GPULost"                                          # ours: NVML answers GPU_IS_LOST / cannot open it


class NvmlUnavailable(RuntimeError):
    """No NVML session on this host; the message says why (no driver, no library, init failure)."""


def _text(value: Any) -> str:
    """NVML strings arrive as bytes or str depending on the nvidia-ml-py version."""
    return value.decode("utf-8", "replace").rstrip("\0") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class NvLink:
    link: int
    remote_bus_id: str       # the peer's PCI bus id ("" when NVML does not say)
    remote_type: str         # "gpu", "switch" (an NVSwitch) or "other"
    version: int             # NVML_NVLINK_VERSION_* (0 unknown)


@dataclass(frozen=True)
class Gpu:
    index: int
    minor: int
    uuid: str
    name: str
    memory_total: int                   # bytes
    bus_id: str                         # normalized BDF, "0000:3b:00.0"
    numa_node: int = -1                 # from sysfs; -1 unknown
    pcie_root: str = ""                 # "pci0000:3a" (upstream's pcieID)
    mig_enabled: bool | None = None     # None: the GPU has no MIG
    nvlinks: tuple[NvLink, ...] = ()
    lost: bool = False                  # listed by the driver but NVML cannot open it


@dataclass(frozen=True)
class GpuInventory:
    """What the node has. Empty with ``error`` set when there is no NVML view at all."""

    gpus: tuple[Gpu, ...] = ()
    driver_version: str = ""
    cuda_version: str = ""              # "12.4"
    names: tuple[str, ...] = ()         # nvmlDeviceGetName of every GPU NVML counts (for the model label)
    pcie_levels: Mapping[frozenset[str], int] = field(default_factory=dict)   # NVML_TOPOLOGY_* per GPU pair
    error: str = ""
    problems: tuple[str, ...] = ()

    @property
    def model(self) -> str:
        """Upstream's model label: only when every GPU has the same name; "NVIDIA " dropped, spaces to dashes."""
        if not self.names or any(n != self.names[0] for n in self.names) or not self.names[0]:
            return ""
        name = self.names[0]
        return (name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name).replace(" ", "-")


@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    sm_util: int             # percent of the GPU's SMs over the last sample period
    memory_used: int         # bytes


@dataclass(frozen=True)
class GpuUsage:
    minor: int
    uuid: str
    memory_total: int
    memory_used: int         # device-wide, from nvmlDeviceGetMemoryInfo
    utilization: int | None  # device-wide percent of time a kernel ran; None where NVML has none (MIG mode)
    processes: tuple[ProcessUsage, ...] = ()
    processes_known: bool = True   # False when NVML cannot split use by process (MIG mode, permissions)

    @property
    def sm_util(self) -> int:
        """Σ SM utilization of the GPU's processes (upstream's node_gpu_core_usage)."""
        return sum(p.sm_util for p in self.processes)

    @property
    def process_memory(self) -> int:
        return sum(p.memory_used for p in self.processes)


def read_driver_info(paths: HostPaths, bus_id: str) -> tuple[int, str] | None:
    """(minor, uuid) from ``/proc/driver/nvidia/gpus/<bus id>/information``; None when absent or malformed."""
    try:
        text = read_text(paths.proc("driver", "nvidia", "gpus", bus_id, "information"))
    except OSError:
        return None
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}
    try:
        return int(fields["Device Minor"]), fields.get("GPU UUID", "")
    except (KeyError, ValueError):
        return None


class Nvml:
    """An initialised NVML session. Every method is safe to call from any thread; NVML itself is thread-safe."""

    def __init__(self, lib: ModuleType, paths: HostPaths) -> None:
        self.lib = lib
        self.paths = paths
        self._handles: dict[str, Any] = {}          # bus id -> handle (valid for the session)
        self._last_seen: dict[str, int] = {}        # bus id -> newest process-utilization timestamp (µs)

    @classmethod
    def open(cls, paths: HostPaths) -> Nvml:
        """Initialise NVML; NvmlUnavailable (with the reason) when this host has no usable NVIDIA driver.

        Unless ``pynvml`` is already loaded, the driver's library is loaded first, as ``pynvml`` would load it: on a
        host without it the answer is the same, and the module (about 2.5 MiB in memory) is never imported."""
        if "pynvml" not in sys.modules:
            if importlib.util.find_spec("pynvml") is None:
                raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed")
            try:
                ctypes.CDLL(LIBRARY)
            except OSError:
                raise NvmlUnavailable(f"{LIBRARY} not found (no NVIDIA driver on this host)") from None
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            if getattr(e, "value", None) == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                raise NvmlUnavailable(f"{LIBRARY} not found (no NVIDIA driver on this host)") from None
            raise NvmlUnavailable(f"nvmlInit failed: {e}") from None
        except OSError as e:       # a broken library install
            raise NvmlUnavailable(f"nvmlInit failed: {e}") from None
        return cls(pynvml, paths)

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except self.lib.NVMLError as e:
            log.debug("nvmlShutdown failed error=%s", e)

    # --- inventory ---------------------------------------------------------------------------------------------

    def bus_ids(self) -> list[str]:
        """The GPUs' bus ids: the nvidia driver's bindings in sysfs (upstream's source), else NVML's own count."""
        ids = pci.driver_bus_ids(self.paths, "nvidia")
        if ids:
            return ids
        out = []
        for index in range(self.lib.nvmlDeviceGetCount()):
            try:
                handle = self.lib.nvmlDeviceGetHandleByIndex(index)
                out.append(pci.normalize_bus_id(self.lib.nvmlDeviceGetPciInfo(handle).busId))
            except (self.lib.NVMLError, ValueError) as e:
                log.warning("gpu index=%d unreadable error=%s", index, e)
        return sorted(out)

    def handle(self, bus_id: str) -> Any:
        """NVML handle of a GPU (cached); raises NVMLError (GPU_IS_LOST, NOT_FOUND) when it cannot be opened."""
        handle = self._handles.get(bus_id)
        if handle is None:
            handle = self._handles[bus_id] = self.lib.nvmlDeviceGetHandleByPciBusId(bus_id)
        return handle

    def inventory(self) -> GpuInventory:
        """Every GPU with its placement and NVLinks; a GPU NVML cannot open is listed as lost (never raises)."""
        lib = self.lib
        problems: list[str] = []
        gpus: list[Gpu] = []
        try:
            bus_ids = self.bus_ids()
        except lib.NVMLError as e:
            return GpuInventory(error=f"nvmlDeviceGetCount failed: {e}")
        for bus_id in bus_ids:
            numa, root = self._placement(bus_id, problems)
            try:
                gpus.append(self._describe(bus_id, len(gpus), numa, root))
            except lib.NVMLError as e:
                self._handles.pop(bus_id, None)
                info = read_driver_info(self.paths, bus_id)
                problems.append(f"gpu {bus_id}: NVML cannot open it ({e})"
                                + ("" if info else "; no minor in /proc/driver/nvidia, not reported"))
                if info is not None:
                    gpus.append(Gpu(len(gpus), info[0], info[1], "", 0, bus_id, numa, root, lost=True))
        return GpuInventory(tuple(gpus), self._call(lib.nvmlSystemGetDriverVersion, ""), self._cuda_version(),
                            tuple(self._names()), self._pcie_levels(gpus), problems=tuple(problems))

    def _placement(self, bus_id: str, problems: list[str]) -> tuple[int, str]:
        try:
            place = pci.placement(self.paths, bus_id)
        except OSError as e:
            problems.append(f"gpu {bus_id}: not in sysfs ({e.strerror or e})")
            return -1, ""
        return place.numa_node, place.root

    def _describe(self, bus_id: str, index: int, numa: int, root: str) -> Gpu:
        lib = self.lib
        h = self.handle(bus_id)
        mig: bool | None
        try:
            mig = lib.nvmlDeviceGetMigMode(h)[0] == lib.NVML_DEVICE_MIG_ENABLE
        except lib.NVMLError:
            mig = None
        return Gpu(index, lib.nvmlDeviceGetMinorNumber(h), _text(lib.nvmlDeviceGetUUID(h)),
                   _text(lib.nvmlDeviceGetName(h)), int(lib.nvmlDeviceGetMemoryInfo(h).total), bus_id, numa, root,
                   mig, self._nvlinks(h))

    def _nvlinks(self, handle: Any) -> tuple[NvLink, ...]:
        """Active links with their far end; stops at the first link index NVML says does not exist."""
        lib, links = self.lib, []
        kinds = {lib.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu", lib.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch"}
        for link in range(lib.NVML_NVLINK_MAX_LINKS):
            try:
                if lib.nvmlDeviceGetNvLinkState(handle, link) != lib.NVML_FEATURE_ENABLED:
                    continue
            except lib.NVMLError as e:
                if e.value in (lib.NVML_ERROR_NOT_SUPPORTED, lib.NVML_ERROR_INVALID_ARGUMENT):
                    break            # no NVLink on this GPU, or past its last link
                continue
            try:
                remote = pci.normalize_bus_id(lib.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except (lib.NVMLError, ValueError):
                remote = ""
            # _call runs each lambda at once, inside this iteration (B023 is about closures called later)
            kind = self._call(lambda: kinds.get(lib.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link), "other"),  # noqa: B023
                              "")
            links.append(NvLink(link, remote, kind,
                                self._call(lambda: lib.nvmlDeviceGetNvLinkVersion(handle, link), 0)))  # noqa: B023
        return tuple(links)

    def _pcie_levels(self, gpus: Sequence[Gpu]) -> dict[frozenset[str], int]:
        levels: dict[frozenset[str], int] = {}
        live = [g for g in gpus if not g.lost]
        for i, a in enumerate(live):
            for b in live[i + 1:]:
                try:
                    levels[frozenset((a.bus_id, b.bus_id))] = int(self.lib.nvmlDeviceGetTopologyCommonAncestor(
                        self.handle(a.bus_id), self.handle(b.bus_id)))
                except self.lib.NVMLError:
                    continue
        return levels

    def _names(self) -> list[str]:
        names = []
        for index in range(self._call(self.lib.nvmlDeviceGetCount, 0)):
            names.append(self._call(lambda: _text(self.lib.nvmlDeviceGetName(
                self.lib.nvmlDeviceGetHandleByIndex(index))), ""))  # noqa: B023 (called at once)
        return names

    def _cuda_version(self) -> str:
        version = self._call(self.lib.nvmlSystemGetCudaDriverVersion, 0)
        return f"{version // 1000}.{version % 1000 // 10}" if version else ""

    def _call(self, fn: Callable[[], Any], default: Any) -> Any:
        try:
            value = fn()
        except self.lib.NVMLError:
            return default
        return _text(value) if isinstance(value, bytes) else value

    # --- usage -------------------------------------------------------------------------------------------------

    def usage(self, gpus: Sequence[Gpu]) -> tuple[list[GpuUsage], dict[str, tuple[bool, str]]]:
        """One sample per GPU; second item: bus id -> (lost from the bus?, NVML error) for GPUs that failed."""
        out, failed = [], {}
        for gpu in gpus:
            if gpu.lost:
                continue
            try:
                out.append(self._usage(gpu))
            except self.lib.NVMLError as e:
                lost = e.value == self.lib.NVML_ERROR_GPU_IS_LOST
                failed[gpu.bus_id] = (lost, str(e))
                if lost:
                    self._handles.pop(gpu.bus_id, None)
        return out, failed

    def _usage(self, gpu: Gpu) -> GpuUsage:
        lib = self.lib
        h = self.handle(gpu.bus_id)
        memory = lib.nvmlDeviceGetMemoryInfo(h)
        try:
            util: int | None = int(lib.nvmlDeviceGetUtilizationRates(h).gpu)
        except lib.NVMLError as e:
            if e.value == lib.NVML_ERROR_GPU_IS_LOST:
                raise
            util = None              # NOT_SUPPORTED in MIG mode
        if gpu.mig_enabled:          # use is per GPU instance, not per process: no split, every cycle alike
            return GpuUsage(gpu.minor, gpu.uuid, int(memory.total), int(memory.used), util, (), False)
        try:
            procs = lib.nvmlDeviceGetComputeRunningProcesses(h)
        except lib.NVMLError as e:
            if e.value == lib.NVML_ERROR_GPU_IS_LOST:
                raise
            return GpuUsage(gpu.minor, gpu.uuid, int(memory.total), int(memory.used), util, (), False)
        sm: dict[int, tuple[int, int]] = {}
        if procs:
            try:
                for s in lib.nvmlDeviceGetProcessUtilization(h, self._last_seen.get(gpu.bus_id, 0)):
                    if s.timeStamp >= sm.get(s.pid, (-1, 0))[0]:
                        sm[s.pid] = (s.timeStamp, s.smUtil)
            except lib.NVMLError as e:
                if e.value == lib.NVML_ERROR_GPU_IS_LOST:
                    raise
                if e.value != lib.NVML_ERROR_NOT_FOUND:     # NOT_SUPPORTED (MIG): no per-process split at all
                    return GpuUsage(gpu.minor, gpu.uuid, int(memory.total), int(memory.used), util, (), False)
                # NOT_FOUND: no sample since the last cycle (idle processes) -> 0 % this cycle
            if sm:
                self._last_seen[gpu.bus_id] = max(ts for ts, _ in sm.values())
        # Unlike upstream, a process without a utilization sample keeps its memory (it holds it all the same).
        processes = tuple(ProcessUsage(p.pid, sm.get(p.pid, (0, 0))[1], int(p.usedGpuMemory or 0)) for p in procs)
        return GpuUsage(gpu.minor, gpu.uuid, int(memory.total), int(memory.used), util, processes)

    # --- health ------------------------------------------------------------------------------------------------

    def watch_xid(self, bus_ids: Sequence[str], health: GpuHealth, stop: threading.Event,
                  restart: threading.Event | None = None) -> None:
        """Block until ``stop`` (or ``restart``): register for critical XID events and mark the GPUs they name
        unhealthy.

        As upstream: a GPU too old for events is marked unhealthy (DeviceHealthCheckNotSupported), application
        XIDs are ignored, an event without a device UUID marks every GPU, and after any event every GPU is
        re-opened to catch one that has gone.
        """
        lib = self.lib
        try:
            event_set = lib.nvmlEventSetCreate()
        except lib.NVMLError as e:
            log.error("gpu health check off: nvmlEventSetCreate failed error=%s", e)
            return
        try:
            for bus_id in bus_ids:
                try:
                    lib.nvmlDeviceRegisterEvents(self.handle(bus_id), lib.nvmlEventTypeXidCriticalError, event_set)
                except lib.NVMLError as e:
                    if e.value == lib.NVML_ERROR_NOT_SUPPORTED:
                        health.mark(bus_id, HEALTH_CHECK_NOT_SUPPORTED, "device does not support health checking")
                    else:
                        log.warning("gpu health events not registered bus_id=%s error=%s", bus_id, e)
            while not stop.is_set() and not (restart is not None and restart.is_set()):
                try:
                    event = lib.nvmlEventSetWait(event_set, XID_WAIT_MS)
                except lib.NVMLError as e:
                    if e.value != lib.NVML_ERROR_TIMEOUT:
                        stop.wait(1.0)     # e.g. GPU_IS_LOST from the set: do not spin
                    continue
                self._on_event(event, bus_ids, health)
        finally:
            try:
                lib.nvmlEventSetFree(event_set)
            except lib.NVMLError:
                pass

    def _on_event(self, event: Any, bus_ids: Sequence[str], health: GpuHealth) -> None:
        lib = self.lib
        if event.eventType != lib.nvmlEventTypeXidCriticalError or event.eventData in APPLICATION_XIDS:
            return
        xid = int(event.eventData)
        message = f"Xid error detected on device, error code: {xid}"
        try:
            uuid = _text(lib.nvmlDeviceGetUUID(event.device))
            bus_id = pci.normalize_bus_id(lib.nvmlDeviceGetPciInfo(event.device).busId)
        except (lib.NVMLError, ValueError):
            uuid, bus_id = "", ""
        for b in bus_ids:
            if not uuid or b == bus_id:
                health.mark(b, f"Xid{xid}", message)
            try:
                lib.nvmlDeviceGetHandleByPciBusId(b)
            except lib.NVMLError as e:
                health.mark(b, f"Xid{xid}", f"failed to get device, error: {e}")


def supported(paths: HostPaths) -> tuple[bool, str]:
    """Are there NVIDIA GPUs NVML can see? What the GPU collectors need (``koordlet doctor``); one short session."""
    try:
        session = Nvml.open(paths)
    except NvmlUnavailable as e:
        return False, str(e)
    try:
        count = len(session.bus_ids())
    except session.lib.NVMLError as e:
        return False, f"nvmlDeviceGetCount failed: {e}"
    finally:
        session.close()
    return (True, f"{count} GPU(s)") if count else (False, "NVML works but lists no GPU")


class GpuHealth:
    """Unhealthy GPUs by bus id, with the condition reason and message the Device report carries.

    XID marks stay until the agent restarts, as upstream (there is no NVML signal that a GPU recovered from an
    XID; a reset re-creates the device and the agent with it). A GPU lost from the bus is unhealthy while NVML
    cannot open it, and healthy again once it can (``clear``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, tuple[str, str]] = {}

    def mark(self, bus_id: str, reason: str, message: str) -> None:
        with self._lock:
            if self._marks.get(bus_id, ("", ""))[0].startswith("Xid") and not reason.startswith("Xid"):
                return           # an XID is the stronger statement; keep it
            new = self._marks.get(bus_id) != (reason, message)
            self._marks[bus_id] = (reason, message)
        if new:
            log.warning("gpu unhealthy bus_id=%s reason=%s message=%r", bus_id, reason, message)

    def clear(self, bus_id: str, reason: str) -> None:
        """Forget a mark of this reason (a lost GPU that answers again); XID marks are never cleared."""
        with self._lock:
            if self._marks.get(bus_id, ("", ""))[0] == reason:
                del self._marks[bus_id]
                log.info("gpu healthy again bus_id=%s after=%s", bus_id, reason)

    def get(self, bus_id: str) -> tuple[str, str] | None:
        with self._lock:
            return self._marks.get(bus_id)

