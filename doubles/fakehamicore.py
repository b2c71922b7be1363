"""A fake of what HAMi-core's libvgpu.so writes: the shared region file of one container
(``CUDA_DEVICE_MEMORY_SHARED_CACHE``), in the C layout of HAMi-core's ``multiprocess_memory_limit.h``.

The structs are declared here with ctypes exactly as the C header declares them (field by field, C types), so
ctypes lays them out by the platform's C ABI: the offsets come from the declaration, not from the reader's
constants in ``koordlet.host.hamicore``, and a test that reads a file written here checks one against the other.
``sem_t`` is glibc's 32-byte union (x86_64, aarch64).

What libvgpu does, in the order it does it (HAMi-core at 8f3a89c): the first process creates the file, sets the
magic, version 1.2, ``device_num``, the uuids and the limits from its environment; every CUDA process takes a slot
(``pid``, ``status`` 1, ``seqlock`` 0, usage zeroed) and raises ``proc_num``; allocations add to
``used[dev].total`` (and one of context/module/data) with the slot's seqlock made odd for the update; the
utilization watcher writes ``device_util[dev].sm_util``; an exited process's slot is cleared (status 0).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

MAGIC = 19920718
DEVICES = 16
PROCS = 1024


class DeviceMemory(ctypes.Structure):
    _fields_ = [("context_size", ctypes.c_uint64), ("module_size", ctypes.c_uint64),
                ("data_size", ctypes.c_uint64), ("offset", ctypes.c_uint64), ("total", ctypes.c_uint64),
                ("unused", ctypes.c_uint64 * 3)]


class DeviceUtil(ctypes.Structure):
    _fields_ = [("dec_util", ctypes.c_uint64), ("enc_util", ctypes.c_uint64), ("sm_util", ctypes.c_uint64),
                ("unused", ctypes.c_uint64 * 3)]


class ProcSlot(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_int32), ("hostpid", ctypes.c_int32), ("used", DeviceMemory * DEVICES),
                ("monitorused", ctypes.c_uint64 * DEVICES), ("device_util", DeviceUtil * DEVICES),
                ("status", ctypes.c_int32), ("seqlock", ctypes.c_uint64), ("unused", ctypes.c_uint64 * 2)]


class SemT(ctypes.Union):
    _fields_ = [("size", ctypes.c_char * 32), ("align", ctypes.c_long)]


class SharedRegionT(ctypes.Structure):
    _fields_ = [("initialized_flag", ctypes.c_int32), ("major_version", ctypes.c_uint32),
                ("minor_version", ctypes.c_uint32), ("sm_init_flag", ctypes.c_int32),
                ("owner_pid", ctypes.c_size_t), ("sem", SemT), ("device_num", ctypes.c_uint64),
                ("uuids", (ctypes.c_char * 96) * DEVICES), ("limit", ctypes.c_uint64 * DEVICES),
                ("sm_limit", ctypes.c_uint64 * DEVICES), ("procs", ProcSlot * PROCS),
                ("proc_num", ctypes.c_int), ("utilization_switch", ctypes.c_int), ("recent_kernel", ctypes.c_int),
                ("priority", ctypes.c_int), ("last_kernel_time", ctypes.c_uint64), ("sem_postinit", SemT)]


class FakeLibvgpu:
    """The region of one container, written to ``path`` after every change (as the mmap'd file would show it)."""

    def __init__(self, path: str, devices: Sequence[tuple[str, int, int]], version: tuple[int, int] = (1, 2),
                 owner: int = 100) -> None:
        """``devices``: (uuid, memory limit in bytes, SM limit percent) per CUDA device of the container."""
        self.path = path
        self.region = SharedRegionT()
        r = self.region
        r.initialized_flag = MAGIC
        r.major_version, r.minor_version = version
        r.owner_pid = owner
        r.device_num = len(devices)
        for i, (uuid, limit, sm_limit) in enumerate(devices):
            r.uuids[i].value = uuid.encode()
            r.limit[i] = limit
            r.sm_limit[i] = sm_limit
        self.flush()

    def start(self, pid: int, hostpid: int = 0) -> int:
        """A CUDA process takes the next slot; returns its index."""
        r = self.region
        slot = r.proc_num
        ctypes.memset(ctypes.addressof(r.procs[slot]), 0, ctypes.sizeof(ProcSlot))
        r.procs[slot].pid, r.procs[slot].hostpid, r.procs[slot].status = pid, hostpid, 1
        r.proc_num = slot + 1
        self.flush()
        return slot

    def allocate(self, slot: int, device: int, size: int, kind: str = "data_size") -> None:
        """cuMemAlloc and friends: the slot's use of a device grows (seqlock odd during the update)."""
        proc = self.region.procs[slot]
        proc.seqlock += 1
        setattr(proc.used[device], kind, getattr(proc.used[device], kind) + size)
        proc.used[device].total += size
        proc.seqlock += 1
        self.flush()

    def utilization(self, slot: int, device: int, sm_util: int) -> None:
        self.region.procs[slot].device_util[device].sm_util = sm_util
        self.flush()

    def exit(self, slot: int) -> None:
        """The process is gone: libvgpu clears its slot (status 0, usage zeroed)."""
        proc = self.region.procs[slot]
        pid = proc.pid
        ctypes.memset(ctypes.addressof(proc), 0, ctypes.sizeof(ProcSlot))
        proc.pid = pid
        self.flush()

    def mid_write(self, slot: int) -> None:
        """Leave a slot as a writer sees it halfway through an update (seqlock odd)."""
        self.region.procs[slot].seqlock |= 1
        self.flush()

    def kernel_launched(self, at: int) -> None:
        self.region.last_kernel_time = at
        self.flush()

    def flush(self) -> None:
        tmp = self.path + ".tmp"
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(bytes(self.region))
        os.replace(tmp, self.path)


def layout() -> dict[str, int]:
    """Offsets of the fields the reader uses, from the C declaration above (for the layout test)."""
    slot = ProcSlot
    return {"device_num": SharedRegionT.device_num.offset, "uuids": SharedRegionT.uuids.offset,
            "limit": SharedRegionT.limit.offset, "sm_limit": SharedRegionT.sm_limit.offset,
            "procs": SharedRegionT.procs.offset, "proc_num": SharedRegionT.proc_num.offset,
            "last_kernel_time": SharedRegionT.last_kernel_time.offset, "size": ctypes.sizeof(SharedRegionT),
            "slot_size": ctypes.sizeof(slot), "slot_used": slot.used.offset, "slot_util": slot.device_util.offset,
            "slot_status": slot.status.offset, "slot_seqlock": slot.seqlock.offset}
