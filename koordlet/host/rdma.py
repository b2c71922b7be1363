"""RDMA NIC inventory from sysfs, selected the way upstream koordlet's RDMA collector selects it.

Upstream (``pkg/koordlet/metricsadvisor/devices/rdma/collector_rdma_linux.go: GetNetDevice``) walks the PCI devices,
keeps network controllers (base class 0x02) that are physical functions and have InfiniBand devices, takes the minor
from a Mellanox IB name (``mlx5_3`` -> 3) and health from the IB port states. koord-scheduler allocates these devices
(and their SR-IOV VFs) to pods by minor and NUMA node, so a device that cannot be described correctly is left out and
named in the problems instead of being reported with made-up values. Note that this skips InfiniBand HCAs whose PCI
class is 0x0c06 (serial bus: InfiniBand, e.g. QLogic ``qib``), exactly as upstream does.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from koordlet.host.fs import read_text
from koordlet.host.paths import HostPaths
from koordlet.host.pci import PciPlacement, placement

_NETWORK_CONTROLLER = 0x02
_MLX = re.compile(r"^mlx\d+_(\d+)$")
_VIRTFN = re.compile(r"^virtfn(\d+)$")


@dataclass(frozen=True)
class RdmaDevice:
    bus_id: str                   # PF BDF
    minor: int                    # from the first IB device name (mlx5_3 -> 3)
    ib_devices: tuple[str, ...]   # sorted IB device names of this PF
    health: bool                  # every port of every IB device is ACTIVE (no ports: False)
    vendor: str                   # sysfs "vendor", e.g. "0x15b3"
    device: str                   # sysfs "device", e.g. "0x101b"
    placement: PciPlacement
    vfs: tuple[str, ...]          # VF BDFs by VF index
    vf_enabled: bool              # sriov_numvfs > 0


def discover_rdma(paths: HostPaths) -> tuple[list[RdmaDevice], list[str]]:
    """RDMA PFs by minor, and a human-readable line per device skipped or file misread."""
    problems: list[str] = []
    devices_dir = paths.sys("bus", "pci", "devices")
    try:
        names = sorted(os.listdir(devices_dir))
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"{devices_dir}: cannot list PCI devices: {e.strerror}"]
    found = [d for d in (_read_device(paths, devices_dir, n, problems) for n in names) if d is not None]
    found.sort(key=lambda d: (d.minor, d.bus_id))
    return found, problems


def _text(path: str) -> str | None:
    try:
        return read_text(path).strip()
    except OSError:
        return None


def _read_device(paths: HostPaths, devices_dir: str, name: str, problems: list[str]) -> RdmaDevice | None:
    dev = os.path.join(devices_dir, name)
    pci_class = _text(os.path.join(dev, "class"))
    if pci_class is None:
        problems.append(f"{dev}/class: unreadable; device skipped")
        return None
    try:
        if int(pci_class, 16) >> 16 != _NETWORK_CONTROLLER:
            return None
    except ValueError:
        problems.append(f"{dev}/class: not a PCI class code: {pci_class[:40]!r}; device skipped")
        return None
    if os.path.lexists(os.path.join(dev, "physfn")):
        return None                                     # an SR-IOV VF: reported in its PF's vfs
    try:
        ib_devices = tuple(sorted(os.listdir(os.path.join(dev, "infiniband"))))
    except OSError:
        return None                                     # a plain Ethernet NIC
    if not ib_devices:
        return None
    m = _MLX.match(ib_devices[0])
    if m is None:
        problems.append(f"{dev}/infiniband: {ib_devices[0]!r} is not an mlx<N>_<minor> name; device skipped")
        return None
    try:
        where = placement(paths, name)
    except (OSError, ValueError) as e:
        problems.append(f"{dev}: cannot resolve the device: {e}; device skipped")
        return None
    return RdmaDevice(bus_id=where.bus_id, minor=int(m.group(1)), ib_devices=ib_devices,
                      health=all(_ib_healthy(paths, ib) for ib in ib_devices),
                      vendor=_id(dev, "vendor", problems), device=_id(dev, "device", problems), placement=where,
                      vfs=_vfs(dev, problems), vf_enabled=_num_vfs(dev, problems) > 0)


def _id(dev: str, attr: str, problems: list[str]) -> str:
    """vendor/device code as sysfs prints it ("0x15b3"); "" when unreadable, which does not cost the device."""
    text = _text(os.path.join(dev, attr))
    if text is None:
        problems.append(f"{dev}/{attr}: unreadable")
    return text or ""


def _ib_healthy(paths: HostPaths, ib_device: str) -> bool:
    """Port state files read "4: ACTIVE" / "1: DOWN"; an unreadable one counts as not active."""
    ports_dir = paths.sys("class", "infiniband", ib_device, "ports")
    try:
        ports = os.listdir(ports_dir)
    except OSError:
        return False
    states = [_text(os.path.join(ports_dir, p, "state")) for p in ports]
    return bool(states) and all(s is not None and "ACTIVE" in s for s in states)


def _num_vfs(dev: str, problems: list[str]) -> int:
    """0 when the device has no SR-IOV capability (no file) or the file is malformed (named in problems)."""
    path = os.path.join(dev, "sriov_numvfs")
    text = _text(path)
    if text is None:
        return 0
    try:
        return int(text)
    except ValueError:
        problems.append(f"{path}: not an integer: {text[:40]!r}")
        return 0


def _vfs(dev: str, problems: list[str]) -> tuple[str, ...]:
    """VF BDFs ordered by the number in virtfnN (numerically: virtfn10 comes after virtfn9)."""
    try:
        names = os.listdir(dev)
    except OSError as e:
        problems.append(f"{dev}: cannot list the VF links: {e.strerror}")
        return ()
    links = sorted((int(m.group(1)), m.group(0)) for m in map(_VIRTFN.match, names) if m)
    vfs = []
    for _, link in links:
        try:
            vfs.append(os.path.basename(os.readlink(os.path.join(dev, link))))
        except OSError as e:
            problems.append(f"{dev}/{link}: unreadable link: {e.strerror}")
    return tuple(vfs)


# --- device nodes for containers (RDMADeviceInject) -----------------------------------------------------------

DEV_INFINIBAND = "/dev/infiniband"          # where the nodes are, on the host and in the container
RDMA_CM = "rdma_cm"                         # the connection manager every RDMA user needs
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class CharDevice:
    path: str          # in the container (the host's path: the runtime creates the node there)
    major: int
    minor: int


def _char_device(dev_root: str, name: str) -> CharDevice:
    host_path = os.path.join(dev_root, "infiniband", name)
    st = os.stat(host_path)
    if not stat.S_ISCHR(st.st_mode):
        raise OSError(f"{host_path} is not a character device")
    return CharDevice(f"{DEV_INFINIBAND}/{name}", os.major(st.st_rdev), os.minor(st.st_rdev))


def verbs_devices(paths: HostPaths, bus_ids: list[str], dev_root: str = "/dev") -> list[CharDevice]:
    """``rdma_cm`` and the uverbs node of each PCI function (VF or PF) in ``bus_ids``, with the numbers of the
    host's nodes (under ``dev_root``). The uverbs name comes from sysfs ``<bdf>/infiniband_verbs/``.

    ValueError: a bus id that is not a PCI address (it comes from a pod annotation and becomes a path);
    OSError: a function without verbs, or a missing node. The caller injects nothing then, as upstream."""
    out = [_char_device(dev_root, RDMA_CM)]
    for bus_id in dict.fromkeys(bus_ids):
        if not _BDF.match(bus_id):
            raise ValueError(f"{bus_id!r} is not a PCI address (dddd:bb:dd.f)")
        verbs_dir = paths.sys("bus", "pci", "devices", bus_id, "infiniband_verbs")
        try:
            names = sorted(os.listdir(verbs_dir))
        except OSError as e:
            raise OSError(f"{verbs_dir}: {e.strerror or e}: {bus_id} has no RDMA verbs device") from None
        if not names:
            raise OSError(f"{verbs_dir} is empty: {bus_id} has no RDMA verbs device")
        out.append(_char_device(dev_root, names[0]))
    return out
