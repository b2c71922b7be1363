"""The device-info files of non-NVIDIA accelerators ("XPUs"), as written by koord-device-daemon or a vendor agent.

Upstream koordlet's XPU device collector (pkg/koordlet/metricsadvisor/devices/xpu/collector_xpu.go) reads every
file of ``-xpu-device-infos-dir`` (default ``/var/run/koordlet/xpu-device-infos/``, not under a host root: the
DaemonSet mounts it at the same path) as one JSON array of devices. Reading is here, with bounds; what the text
means is decoded by the Device report (``koordlet.reporters.xpu``).
"""

from __future__ import annotations

import os
import stat

from koordlet.host.fs import read_bytes

#: bytes one device-info file may have: a device is a few hundred bytes, a 16-device node a few KiB
MAX_FILE_BYTES = 1 << 20
#: files the directory may hold (one per vendor agent in practice)
MAX_FILES = 64


def read_device_info_files(directory: str) -> list[tuple[str, str]]:
    """(file name, text) of each regular file in ``directory``, by name, as upstream's os.ReadDir order.

    FileNotFoundError when the directory is not there (no vendor agent on this node); OSError when it or a file
    cannot be read; ValueError for a file over :data:`MAX_FILE_BYTES`, more than :data:`MAX_FILES` files, or text
    that is not UTF-8. Entries that are not regular files (directories, sockets, dangling links) are skipped:
    upstream skips directories and fails on the others, which no agent writes."""
    with os.scandir(directory) as it:
        names = sorted(e.name for e in it if not e.is_dir())
    out: list[tuple[str, str]] = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue                       # removed or dangling since the listing
        if not stat.S_ISREG(st.st_mode):
            continue
        if len(out) >= MAX_FILES:
            raise ValueError(f"{directory}: more than {MAX_FILES} device-info files")
        if st.st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path}: {st.st_size} bytes, more than the {MAX_FILE_BYTES} accepted")
        data = read_bytes(path)
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"{path}: more than the {MAX_FILE_BYTES} bytes accepted")
        try:
            out.append((name, data.decode("utf-8")))
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 ({e.reason})") from None
    return out
