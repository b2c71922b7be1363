"""Where a PCI device sits: its NUMA node, root complex and the bridges above it, read from sysfs.

Device plugins and the accelerator/RDMA inventories name a device by its bus id, but NVML spells it
``00000000:3B:00.0`` and sysfs ``0000:3b:00.0``, so every id goes through ``normalize_bus_id`` before it is used as
a file name. The locality comes from the kernel's own device tree: ``<sys>/bus/pci/devices/<bdf>`` is a symlink into
``<sys>/devices/pci<domain>:<bus>/<root port>/.../<bdf>``, so resolving it gives the root complex (upstream
koordlet's ``pcieID``, which koord-scheduler compares to place GPUs and NICs together) and the bridge chain in one
step, without parsing PCI config space.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

from koordlet.host.fs import read_text
from koordlet.host.paths import HostPaths

# [domain:]bus:device.function; the kernel prints the domain with %04x (more digits for VMD/Hyper-V domains),
# NVML as 8 digits
_BDF = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
# upstream's pcieID pattern, matched against the resolved device path
_ROOT = re.compile(r"pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}")


def normalize_bus_id(raw: str | bytes) -> str:
    """The sysfs spelling ``dddd:bb:dd.f`` (lower case, domain as the kernel prints it: at least 4 digits).

    Bytes are a C string from NVML, so they end at the first NUL. A bare ``bb:dd.f`` is in domain 0.
    """
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    m = _BDF.match(text.partition("\x00")[0].strip())
    if m is None:
        raise ValueError(f"not a PCI bus id: {raw!r}")
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{dev.lower()}.{fn}"


@dataclass(frozen=True)
class PciPlacement:
    bus_id: str                # normalized BDF
    numa_node: int             # <dev>/numa_node; -1 when the kernel does not know it or the file is unreadable
    root: str                  # root complex as upstream's pcieID ("pci0000:3a"); "" when the path has none
    chain: tuple[str, ...]     # bridges from the root port down to the device's parent (device excluded)

    @property
    def switch(self) -> str:
        """The bridge the device hangs off ("" when it sits on the root bus): devices sharing it share a PCIe
        switch port, the closest GPU/NIC pairing there is."""
        return self.chain[-1] if self.chain else ""


def placement(paths: HostPaths, bus_id: str) -> PciPlacement:
    """Locality of one device; FileNotFoundError when sysfs has no such device (or a dangling link to it),
    ValueError when ``bus_id`` is not a bus id."""
    bdf = normalize_bus_id(bus_id)
    link = paths.sys("bus", "pci", "devices", bdf)
    real = os.path.realpath(link)
    if not os.path.isdir(real):
        raise FileNotFoundError(errno.ENOENT, "no such PCI device", link)
    # search below the sys root only, so a directory name in the root itself cannot look like a root complex
    rel = os.path.relpath(real, os.path.realpath(paths.sys_root))
    m = _ROOT.search(rel)
    root = m.group(0) if m else ""
    below_root = rel[m.end():] if m else rel
    # non-BDF components (a VMD controller's "pci10000:00" domain dir) are not bridges and are left out
    chain = tuple(p for p in below_root.split(os.sep) if _BDF.match(p))[:-1]
    return PciPlacement(bdf, _numa_node(os.path.join(real, "numa_node")), root, chain)


def _numa_node(path: str) -> int:
    """-1 for an absent, unreadable or malformed file: the kernel's own "unknown", which callers already handle
    (single-node machines and many VMs report -1 for every device)."""
    try:
        return int(read_text(path).strip())
    except (OSError, ValueError):
        return -1


def driver_bus_ids(paths: HostPaths, driver: str) -> list[str]:
    """Devices bound to a driver, from the driver's sysfs directory (upstream lists .../drivers/nvidia to find
    GPUs); its control files (bind, unbind, new_id, module, ...) are not devices and are skipped."""
    try:
        names = os.listdir(paths.sys("bus", "pci", "drivers", driver))
    except FileNotFoundError:
        return []
    return sorted(normalize_bus_id(n) for n in names if _BDF.match(n))
