"""HAMi-core's shared region: the file libvgpu.so (HAMi-core) mmaps in a container to account device memory and
SM use of all the container's CUDA processes (``CUDA_DEVICE_MEMORY_SHARED_CACHE``).

Facts (HAMi-core ``src/multiprocess/multiprocess_memory_limit.c: try_create_shrreg`` for how the file is made and
its limits fixed, and the layout in ``src/multiprocess/multiprocess_memory_limit.h`` at 8f3a89c, as HAMi's
vGPUmonitor reads it: ``pkg/monitor/nvidia/cudevshr.go``, ``v1/spec.go``): magic 19920718, region version 1.x
(1.2 at HEAD), 16 devices, 1024 process slots. The C structs, on the LP64 ABI (x86_64, aarch64) with glibc's
32-byte ``sem_t``:

- ``shared_region_t``: ``int32 initialized_flag`` (the magic) @0, ``uint32 major_version`` @4, ``minor_version`` @8,
  ``sm_init_flag`` @12, ``size_t owner_pid`` @16, ``sem_t sem`` @24, ``uint64 device_num`` @56,
  ``char uuids[16][96]`` @64, ``uint64 limit[16]`` @1600, ``uint64 sm_limit[16]`` @1728, ``procs[1024]`` @1856,
  ``int proc_num`` @2008896, ``utilization_switch``, ``recent_kernel``, ``priority``, ``uint64 last_kernel_time``
  @2008912, then 32 bytes (``sem_postinit`` at HEAD, padding before): 2008952 bytes in all.
- ``shrreg_proc_slot_t`` (1960 bytes): ``int32 pid`` @0, ``hostpid`` @4, ``device_memory_t used[16]`` @8 (each
  ``context_size, module_size, data_size, offset, total`` and 3 unused uint64: 64 bytes), ``uint64
  monitorused[16]`` @1032, ``device_util_t device_util[16]`` @1160 (each ``dec_util, enc_util, sm_util`` and 3
  unused: 48 bytes), ``int32 status`` @1928, ``uint64 seqlock`` @1936 (HEAD; unused before, so 0).

A device's use is summed over the slots of ``proc_num`` whose status is not 0 (HAMi's vGPUmonitor; a slot of an
exited process is cleared to 0). Writers bump a slot's ``seqlock`` to odd before changing it and to even after
(HAMi-core HEAD): a slot read while odd, or whose seqlock moved while it was read, is read again.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

MAGIC = 19920718
MAX_DEVICES = 16
MAX_PROCS = 1024
UUID_LEN = 96

OFF_MAJOR, OFF_MINOR = 4, 8
OFF_DEVICE_NUM = 56
OFF_UUIDS = 64
OFF_LIMIT = OFF_UUIDS + MAX_DEVICES * UUID_LEN            # 1600
OFF_SM_LIMIT = OFF_LIMIT + 8 * MAX_DEVICES                # 1728
OFF_PROCS = OFF_SM_LIMIT + 8 * MAX_DEVICES                # 1856
SLOT_SIZE = 1960
OFF_PROC_NUM = OFF_PROCS + MAX_PROCS * SLOT_SIZE          # 2008896
OFF_LAST_KERNEL = OFF_PROC_NUM + 16                       # 2008912
REGION_SIZE = OFF_LAST_KERNEL + 8 + 32                    # 2008952: HAMi's v1.MinSize

# within a slot
SLOT_USED, DEVICE_MEMORY_SIZE = 8, 64                     # used[i].total is the 5th uint64 (@32)
SLOT_UTIL, DEVICE_UTIL_SIZE = 1160, 48                    # device_util[i].sm_util is the 3rd uint64 (@16)
SLOT_STATUS, SLOT_SEQLOCK = 1928, 1936
SEQLOCK_TRIES = 4


@dataclass(frozen=True)
class VDevice:
    """One device as the container sees it (its CUDA index), with the container's use of it."""
    index: int
    uuid: str
    used_bytes: int          # Σ used[index].total of the live processes
    limit_bytes: int         # limit[index]: CUDA_DEVICE_MEMORY_LIMIT as libvgpu applied it (0: none)
    sm_limit: int            # sm_limit[index] (percent; 0 or ≥ 100: not throttled)
    sm_util: int             # Σ device_util[index].sm_util of the live processes (percent of the card)


@dataclass(frozen=True)
class SharedRegion:
    version: tuple[int, int]
    devices: tuple[VDevice, ...]
    processes: int           # live process slots
    last_kernel_time: int    # Unix seconds of the last kernel launch (0: none yet)


def _slot(fd: int, index: int) -> bytes:
    """One process slot read consistently: retried while its seqlock is odd or moves under the read; the last
    read is taken after :data:`SEQLOCK_TRIES` (a writer stuck mid-update must not stall the collector)."""
    offset = OFF_PROCS + index * SLOT_SIZE
    data = b""
    for _ in range(SEQLOCK_TRIES):
        data = os.pread(fd, SLOT_SIZE, offset)
        if len(data) < SLOT_SIZE:
            raise ValueError("shared region cut short inside the process slots")
        (before,) = struct.unpack_from("<Q", data, SLOT_SEQLOCK)
        if before & 1:
            continue
        (after,) = struct.unpack("<Q", os.pread(fd, 8, offset + SLOT_SEQLOCK))
        if after == before:
            break
    return data


def list_regions(cache_root: str) -> list[tuple[str, str, str]]:
    """(pod uid, container name, cache file) of every ``<uid>_<container>`` directory under HAMi-core's cache root
    holding a region (its first ``*.cache`` file); [] when the root is unreadable."""
    try:
        with os.scandir(cache_root) as it:
            dirs = [e.name for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    out = []
    for name in dirs:
        uid, sep, container = name.partition("_")
        if not sep or not uid or not container:
            continue
        try:
            caches = sorted(f for f in os.listdir(os.path.join(cache_root, name)) if f.endswith(".cache"))
        except OSError:
            continue
        if caches:
            out.append((uid, container, os.path.join(cache_root, name, caches[0])))
    return out


def read_shared_region(path: str) -> SharedRegion:
    """The region in ``path``. ValueError when it is not one (magic), of a version or size this reader does not
    know (HAMi's v0 files: smaller), or cut short; OSError when unreadable."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, OFF_PROCS, 0)
        if len(head) < 12:
            raise ValueError(f"{size} bytes: too small for a shared region")
        magic, major, minor = struct.unpack_from("<iII", head, 0)
        if magic != MAGIC:
            raise ValueError(f"magic {magic} is not HAMi-core's {MAGIC} (not initialised yet, or not a region)")
        if major != 1 or size < REGION_SIZE:
            raise ValueError(f"region version {major}.{minor} of {size} bytes: only 1.x of {REGION_SIZE} bytes "
                             f"is read")
        (device_num,) = struct.unpack_from("<Q", head, OFF_DEVICE_NUM)
        count = min(device_num, MAX_DEVICES)
        tail = os.pread(fd, 24, OFF_PROC_NUM)
        proc_num = max(0, min(struct.unpack_from("<i", tail, 0)[0], MAX_PROCS))
        (last_kernel,) = struct.unpack_from("<q", tail, 16)
        used = [0] * count
        util = [0] * count
        live = 0
        for i in range(proc_num):
            slot = _slot(fd, i)
            (status,) = struct.unpack_from("<i", slot, SLOT_STATUS)
            if status == 0:
                continue
            live += 1
            for d in range(count):
                used[d] += struct.unpack_from("<Q", slot, SLOT_USED + d * DEVICE_MEMORY_SIZE + 32)[0]
                util[d] += struct.unpack_from("<Q", slot, SLOT_UTIL + d * DEVICE_UTIL_SIZE + 16)[0]
        devices = []
        for d in range(count):
            raw = head[OFF_UUIDS + d * UUID_LEN: OFF_UUIDS + (d + 1) * UUID_LEN]
            uuid = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
            if not uuid:
                continue                     # not initialised yet (HAMi's monitor skips it too)
            (limit,) = struct.unpack_from("<Q", head, OFF_LIMIT + 8 * d)
            (sm_limit,) = struct.unpack_from("<Q", head, OFF_SM_LIMIT + 8 * d)
            devices.append(VDevice(d, uuid, used[d], limit, sm_limit, util[d]))
        return SharedRegion((major, minor), tuple(devices), live, max(last_kernel, 0))
    finally:
        os.close(fd)
