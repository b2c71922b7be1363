"""Block devices: which whole disk (``<major>:<minor>``) a blkio QoS block names, read from the kernel.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/blkio/blkio_reconcile.go`` and ``pkg/koordlet/util/storageinfo.go:
LocalStorageInfo``. The blkio files take the ``maj:min`` of a whole disk (the kernel refuses a partition), so every
block resolves to one:

- ``device``: ``/dev/sdb``, ``sdb``, ``/dev/sdb1`` (a partition: its disk), ``/dev/mapper/<vg>-<lv>`` or
  ``/dev/<vg>/<lv>`` (an LVM volume: its volume group's disk), or ``8:16``.
- ``volumegroup``: the VG's single physical volume, and that PV's disk when the PV is a partition.
- ``podvolume``: ``<kubelet dir>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount`` -> the device mounted there
  (``/proc/self/mountinfo``) -> as ``device``.

Upstream shells out to ``lsblk``, ``vgs``, ``lvs`` and ``findmnt``; we read what those tools read:

- ``/sys/class/block/<name>/dev`` and ``/sys/dev/block/<maj:min>`` map names and numbers both ways;
- a partition has a ``partition`` file and sits in its disk's sysfs directory;
- a device-mapper device has ``dm/name`` (LVM: ``<vg>-<lv>``, a ``-`` inside either name doubled) and
  ``dm/uuid`` (LVM: ``LVM-...``), and ``slaves/`` lists the devices below it (thin pools stack dm on dm).

Differences from upstream, on purpose:

- Any whole block device counts as a disk (loop, md, nbd, zram...), not only lsblk ``TYPE=disk``; a partition's
  disk comes from sysfs, not from upstream's ``minor - minor % 16`` (wrong for NVMe and for disks with more than
  15 partitions).
- A volume group's physical volumes are those its *active* logical volumes sit on (sysfs knows no others): a VG
  whose LVs all live on one of two PVs is accepted, where ``vgs`` would say ``pv_count 2`` and upstream refuse it.
- ``device`` also accepts LVM volumes and ``maj:min`` (upstream: disks and partitions only).
- A non-LVM device-mapper device (dm-crypt, multipath) resolves through its single slave.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from koordlet.base.wire import BLOCK_TYPE_DEVICE, BLOCK_TYPE_POD_VOLUME, BLOCK_TYPE_VOLUME_GROUP
from koordlet.host.cgroup import Cgroups, CgroupVersion, KubeQOS
from koordlet.host.fs import read_text
from koordlet.host.paths import HostPaths

_NUMBER_RE = re.compile(r"\d+:\d+")
_ESCAPE_RE = re.compile(r"\\([0-7]{3})")
_MAX_DEPTH = 8            # dm stacks (thin LV -> pool -> tdata -> PV) are a few levels deep; loops are bugs


class BlockDevError(ValueError):
    """A block that cannot be resolved; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Disk:
    name: str             # sysfs name: "sdb", "nvme0n1", "loop3"
    number: str           # "8:16"


@dataclass(frozen=True, slots=True)
class Mount:
    mount_point: str
    number: str           # st_dev of the mounted filesystem ("0:45" for btrfs, nfs, overlay...)
    fs_type: str
    source: str


def parse_mountinfo(text: str) -> list[Mount]:
    """``/proc/<pid>/mountinfo`` lines in order (later mounts over the same point hide earlier ones)."""
    out: list[Mount] = []
    for line in text.splitlines():
        parts = line.split(" ")
        try:
            sep = parts.index("-", 6)
            out.append(Mount(_unescape(parts[4]), parts[2], parts[sep + 1], _unescape(parts[sep + 2])))
        except (ValueError, IndexError):
            continue                      # not a mountinfo line; the kernel never writes one
    return out


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    return _ESCAPE_RE.sub(lambda m: chr(int(m.group(1), 8)), field)


def split_lvm_name(dm_name: str) -> tuple[str, str] | None:
    """``my--vg-lv--1`` -> ("my-vg", "lv-1"): LVM doubles every ``-`` inside the VG and LV names and joins
    them with a single one. None for a name that is not ``<vg>-<lv>``."""
    i = 0
    while i < len(dm_name):
        if dm_name[i] == "-":
            if dm_name[i + 1:i + 2] == "-":
                i += 2
                continue
            vg, lv = dm_name[:i], dm_name[i + 1:]
            if not vg or not lv:
                return None
            return vg.replace("--", "-"), lv.replace("--", "-")
        i += 1
    return None


def lvm_name(vg: str, lv: str) -> str:
    """The device-mapper name of an LVM volume (``/dev/mapper/<this>``)."""
    return f"{vg.replace('-', '--')}-{lv.replace('-', '--')}"


class BlockDevices:
    """Resolves blocks against sysfs and the mount table. Reads lazily and remembers within one instance: make
    one per reconcile cycle, so a cycle sees one consistent picture and the next one sees changes."""

    def __init__(self, paths: HostPaths) -> None:
        self._paths = paths
        self._mounts: list[Mount] | None = None
        self._dm_names: dict[str, str] | None = None      # dm name -> sysfs name ("vg-lv" -> "dm-3")

    # --- the three block types ----------------------------------------------------------------------

    def resolve(self, block_type: str, name: str, pod_uid: str = "") -> Disk:
        """The disk of a NodeSLO / annotation block; BlockDevError names the block and the reason."""
        if not name:
            raise BlockDevError(f"{block_type or 'block'} without a name")
        if block_type == BLOCK_TYPE_DEVICE:
            return self.disk_of_device(name)
        if block_type == BLOCK_TYPE_VOLUME_GROUP:
            return self.disk_of_volume_group(name)
        if block_type == BLOCK_TYPE_POD_VOLUME:
            if not pod_uid:
                raise BlockDevError(f"podvolume {name!r}: only a pod's koordinator.sh/blkioQOS annotation can name "
                                    "a pod volume")
            return self.disk_of_pod_volume(pod_uid, name)
        raise BlockDevError(f"block {name!r}: unknown type {block_type!r} (device, volumegroup or podvolume)")

    def disk_of_device(self, device: str) -> Disk:
        return self._disk(self._sysfs_name(device), f"device {device!r}", 0)

    def disk_of_volume_group(self, vg: str) -> Disk:
        what = f"volumegroup {vg!r}"
        pvs = self._physical_volumes(vg, what)
        return self._whole(pvs[0], what)

    def disk_of_mount(self, mount_point: str) -> Disk:
        what = f"mount point {mount_point}"
        want = os.path.normpath(mount_point)
        found = None
        for m in self.mounts():
            if m.mount_point == want:
                found = m                   # the last one is the one on top
        if found is None:
            raise BlockDevError(f"{what}: nothing is mounted there")
        major = found.number.partition(":")[0]
        if major != "0":
            return self._disk(self._name_of_number(found.number, what), what, 0)
        if found.source.startswith("/dev/"):  # btrfs and friends report an anonymous st_dev
            return self._disk(self._sysfs_name(found.source), what, 0)
        raise BlockDevError(f"{what}: {found.fs_type} from {found.source!r} is not on a block device")

    def disk_of_pod_volume(self, pod_uid: str, volume: str) -> Disk:
        if "/" in volume or volume in (".", ".."):
            raise BlockDevError(f"podvolume {volume!r}: not a volume name")
        mount = os.path.join(self._paths.var_lib_kubelet, "pods", pod_uid, "volumes", "kubernetes.io~csi", volume,
                             "mount")
        try:
            return self.disk_of_mount(mount)
        except BlockDevError as e:
            raise BlockDevError(f"podvolume {volume!r}: {e}") from None

    # --- sysfs ---------------------------------------------------------------------------------------

    def mounts(self) -> list[Mount]:
        if self._mounts is None:
            path = self._paths.proc("self", "mountinfo")
            try:
                self._mounts = parse_mountinfo(read_text(path))
            except OSError as e:
                raise BlockDevError(f"cannot read {path}: {e.strerror}") from None
        return self._mounts

    def _class(self, *parts: str) -> str:
        return self._paths.sys("class", "block", *parts)

    def _read(self, name: str, *parts: str) -> str | None:
        try:
            return read_text(self._class(name, *parts)).strip()
        except OSError:
            return None

    def _sysfs_name(self, device: str) -> str:
        """sysfs name of a device given as /dev path, bare name, /dev/mapper name, /dev/<vg>/<lv> or maj:min."""
        what = f"device {device!r}"
        if _NUMBER_RE.fullmatch(device):
            return self._name_of_number(device, what)
        name = device[len("/dev/"):] if device.startswith("/dev/") else device
        if name.startswith("mapper/"):
            return self._dm_by_name(name[len("mapper/"):], what)
        if name and os.path.exists(self._class(name.replace("/", "!"), "dev")):
            return name.replace("/", "!")               # sysfs spells cciss/c0d0 as cciss!c0d0
        vg, sep, lv = name.partition("/")
        if sep and vg and lv and "/" not in lv:
            return self._dm_by_name(lvm_name(vg, lv), what)
        raise BlockDevError(f"{what}: no such block device in {self._class()}")

    def _name_of_number(self, number: str, what: str) -> str:
        link = self._paths.sys("dev", "block", number)
        if not os.path.exists(link):
            raise BlockDevError(f"{what}: no block device {number} in {os.path.dirname(link)}")
        return os.path.basename(os.path.realpath(link))

    def _number(self, name: str, what: str) -> str:
        number = self._read(name, "dev")
        if number is None or not _NUMBER_RE.fullmatch(number):
            raise BlockDevError(f"{what}: {self._class(name, 'dev')} missing or malformed")
        return number

    def _dm_table(self) -> dict[str, str]:
        if self._dm_names is None:
            self._dm_names = {}
            try:
                names = sorted(os.listdir(self._class()))
            except OSError:
                names = []
            for name in names:
                dm = self._read(name, "dm", "name")
                if dm:
                    self._dm_names[dm] = name
        return self._dm_names

    def _dm_by_name(self, dm_name: str, what: str) -> str:
        name = self._dm_table().get(dm_name)
        if name is None:
            raise BlockDevError(f"{what}: no device-mapper device named {dm_name!r}")
        return name

    def _slaves(self, name: str) -> list[str]:
        try:
            return sorted(os.listdir(self._class(name, "slaves")))
        except OSError:
            return []

    def _is_lvm(self, name: str) -> bool:
        return (self._read(name, "dm", "uuid") or "").startswith("LVM-")

    def _whole(self, name: str, what: str) -> Disk:
        """A partition's disk, or the device itself."""
        if os.path.exists(self._class(name, "partition")):
            parent = os.path.basename(os.path.dirname(os.path.realpath(self._class(name))))
            if not os.path.exists(self._class(parent, "dev")):
                raise BlockDevError(f"{what}: partition {name} has no parent disk in sysfs")
            return Disk(parent, self._number(parent, what))
        return Disk(name, self._number(name, what))

    def _disk(self, name: str, what: str, depth: int) -> Disk:
        if depth > _MAX_DEPTH:
            raise BlockDevError(f"{what}: device-mapper stack deeper than {_MAX_DEPTH} at {name}")
        dm_name = self._read(name, "dm", "name")
        if dm_name is None:
            return self._whole(name, what)
        parsed = split_lvm_name(dm_name)
        if parsed is not None and self._is_lvm(name):
            return self._whole(self._physical_volumes(parsed[0], what)[0], what)
        slaves = self._slaves(name)
        if len(slaves) != 1:
            raise BlockDevError(f"{what}: device-mapper {dm_name} ({name}) sits on {len(slaves)} devices "
                                f"({', '.join(slaves) or 'none'}); only a single underlying device is supported")
        return self._disk(slaves[0], what, depth + 1)

    def _physical_volumes(self, vg: str, what: str) -> list[str]:
        """The non-dm devices under the VG's active LVs; exactly one, as upstream requires ``pv_count == 1``."""
        lvs = [name for dm, name in self._dm_table().items()
               if (split_lvm_name(dm) or ("", ""))[0] == vg and self._is_lvm(name)]
        if not lvs:
            raise BlockDevError(f"{what}: no active logical volume of volume group {vg!r} in sysfs")
        pvs: set[str] = set()
        todo, seen = list(lvs), set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for slave in self._slaves(name):
                if self._read(slave, "dm", "name") is None:
                    pvs.add(slave)
                else:
                    todo.append(slave)      # thin pools and their _tdata/_tmeta are dm devices too
        if len(pvs) != 1:
            raise BlockDevError(f"{what}: volume group {vg!r} has {len(pvs)} physical volumes "
                                f"({', '.join(sorted(pvs)) or 'none'}); only single-PV volume groups are supported")
        return sorted(pvs)


def supported(paths: HostPaths, cgroups: Cgroups) -> tuple[bool, str]:
    """``doctor``: can blkio QoS be enforced here, and with which files."""
    if not os.path.isdir(paths.sys("class", "block")):
        return False, f"{paths.sys('class', 'block')} missing: no sysfs to resolve block devices"
    kubepods = cgroups.layout.qos_dir(KubeQOS.GUARANTEED)
    if cgroups.version is CgroupVersion.V1:
        root = cgroups.path("blkio", "")
        if not os.path.isdir(root):
            return False, f"{root} missing: blkio controller not mounted"
        if not os.path.exists(os.path.join(root, "blkio.throttle.write_bps_device")):
            return False, f"{root}/blkio.throttle.* missing: kernel without CONFIG_BLK_DEV_THROTTLING"
        cost = os.path.exists(os.path.join(root, "blkio.cost.qos"))
        weight = os.path.exists(os.path.join(root, "blkio.cost.weight"))
        return True, (f"v1 blkio throttle in {root}; iocost "
                      + ("blkio.cost.qos/model present" if cost else "absent (Anolis kernels only)")
                      + ("; blkio.cost.weight present" if weight else "")
                      + "; v1 throttling is flat: limits are also pushed to the container cgroups")
    try:
        controllers = read_text(os.path.join(cgroups.root, "cgroup.controllers")).split()
        subtree = read_text(os.path.join(cgroups.root, "cgroup.subtree_control")).split()
    except OSError as e:
        return False, f"cgroup v2 root unreadable: {e.strerror}"
    if "io" not in controllers:
        return False, "io controller not in cgroup.controllers"
    if "io" not in subtree:
        return False, "io controller not delegated (root cgroup.subtree_control lacks io)"
    kube_subtree = os.path.join(cgroups.root, kubepods, "cgroup.subtree_control")
    if os.path.exists(kube_subtree):
        try:
            if "io" not in read_text(kube_subtree).split():
                return False, f"io controller not delegated below {kubepods} (its cgroup.subtree_control lacks io)"
        except OSError:
            pass
    cost = os.path.exists(os.path.join(cgroups.root, "io.cost.qos"))
    return True, ("v2 io.max; iocost " + ("io.cost.qos/model and io.weight present" if cost
                                          else "absent (kernel without CONFIG_BLK_CGROUP_IOCOST): no io.weight"))
