"""The resctrl filesystem (Intel RDT / AMD PQoS cache and memory-bandwidth allocation): detection, mounting, the
``info/`` limits, schemata parsing and formatting, task lists, and group directories.

Facts (upstream ``pkg/koordlet/util/system/resctrl.go``, ``resctrl_linux.go``, and the kernel's ``fs/resctrl`` /
``arch/x86/kernel/cpu/resctrl``):

- The root is ``<sys-fs-root>/resctrl``. It is usable once ``info/L3/cbm_mask`` exists; otherwise, on a CPU with
  the ``cat_l3`` flag, it can be mounted (``mount -t resctrl resctrl <root>``, MS_RELATIME), as upstream does.
  Upstream also requires the ``mba`` flag; we manage L3 alone when the CPU has no MBA (the MB line is absent from
  the schemata then, and we never write one).
- ``schemata`` prints one line per resource, ``"%*s:"`` right-aligned to the longest resource name, then
  ``id=value`` per domain joined by ``;``: cache masks as zero-padded hex (``L3:0=00f;1=00f``), MB as
  space-padded decimal (``MB:0= 50;1= 50``), both padded to the widest value of any resource. A write must end
  with ``\\n``; it may carry one or more resource lines, and each line may name a subset of the domains: only the
  named resources/domains change, all lines are validated before any is applied (EINVAL otherwise).
- With code/data prioritisation (CDP) the cache resources are ``L3CODE`` and ``L3DATA`` instead of ``L3``; we
  write the same mask to both (upstream does not handle CDP and writes an ``L3`` line the kernel rejects).
- A group is a directory: ``mkdir`` allocates a CLOSID (ENOSPC when none is left; the root group holds CLOSID 0,
  the limit is the smallest ``num_closids`` of the allocation resources) and the kernel fills it with
  ``schemata``, ``tasks``, ``cpus``...; ``rmdir`` frees it and moves its tasks back to the root group.
- ``tasks`` lists the group's thread ids; writing one id moves that thread into the group (from any other group).

``mount``, ``mkdir`` and ``rmdir`` are not file writes, so they are not the executor's: they sit behind
:class:`ResctrlKernel`, which tests replace with a fake of the kernel (``doubles/fakeresctrl.py``) that gives a new
group its files and enforces the CLOSID limit exactly as the kernel does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from koordlet.host.fs import read_bytes, read_text
from koordlet.host.paths import HostPaths

if TYPE_CHECKING:
    from koordlet.host.cgroup import Cgroups

log = logging.getLogger(__name__)

AMD_VENDORS = ("AuthenticAMD", "HygonGenuine")   # the kernel gives Hygon the AMD resctrl semantics
INTEL_VENDOR = "GenuineIntel"
MS_RELATIME = 1 << 21
MB_MAX_PERCENT = 100            # Intel: MB is a throttling percentage, 100 = unthrottled
MB_MAX_AMD = 2048               # AMD: MB in units of 1/8 GB/s; the kernel's MAX_MBA_BW_AMD (0x800) = unlimited
DEFAULT_BANDWIDTH_GRAN = 10     # Intel's usual granularity when info/MB/bandwidth_gran cannot be read
NOT_GROUPS = frozenset({"info", "mon_groups", "mon_data"})    # root entries that are not control groups


@dataclass(frozen=True)
class ResctrlInfo:
    """What the kernel says about allocation on this host (read once; it changes only with a remount)."""
    root: str
    vendor: str                          # /proc/cpuinfo vendor_id
    cache_names: tuple[str, ...]         # ("L3",) or, with CDP, ("L3CODE", "L3DATA")
    cbm_mask: int                        # info/L3/cbm_mask: every way set
    min_cbm_bits: int                    # info/L3/min_cbm_bits (AMD: 0)
    cache_ids: tuple[int, ...]           # L3 domain ids, from the root schemata
    l3_closids: int                      # info/L3/num_closids
    sparse_masks: bool = False           # info/L3/sparse_masks (AMD, kernel >= 6.7): non-contiguous masks allowed
    mb: bool = False                     # memory bandwidth allocation usable
    mb_ids: tuple[int, ...] = ()
    mb_gran: int = DEFAULT_BANDWIDTH_GRAN
    mb_min: int = 0
    mb_closids: int = 0
    mb_note: str = ""                    # why MB is not used, when it is not

    @property
    def amd(self) -> bool:
        return self.vendor in AMD_VENDORS

    @property
    def ways(self) -> int:
        return self.cbm_mask.bit_length()

    @property
    def mb_max(self) -> int:
        """The unthrottled MB value: the kernel's default for a new group."""
        return MB_MAX_AMD if self.amd else MB_MAX_PERCENT

    @property
    def num_closids(self) -> int:
        """CLOSIDs the kernel hands out (the root group holds one): the smallest of the allocation resources."""
        return min(self.l3_closids, self.mb_closids) if self.mb_closids else self.l3_closids

    def describe(self) -> str:
        mb = (f"MB gran={self.mb_gran} min={self.mb_min} max={self.mb_max}" if self.mb
              else f"MB off ({self.mb_note or 'no MB resource'})")
        return (f"{self.root} {'+'.join(self.cache_names)} cbm={self.cbm_mask:x} ways={self.ways} "
                f"min_cbm_bits={self.min_cbm_bits} caches={','.join(map(str, self.cache_ids))} "
                f"closids={self.num_closids}; {mb}; vendor={self.vendor or 'unknown'}")


# --------------------------------------------------------------------------------------------------
# schemata text
# --------------------------------------------------------------------------------------------------

def parse_schemata(text: str) -> dict[str, dict[int, str]]:
    """``{resource: {domain id: raw value}}`` from schemata text; names and values stripped (the kernel pads
    both). Lines without ``:`` and malformed ``id=value`` pairs are skipped (upstream does the same)."""
    out: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not name:
            continue
        values: dict[int, str] = {}
        for pair in rest.split(";"):
            key, eq, value = pair.partition("=")
            if eq and key.strip().isdigit() and value.strip():
                values[int(key)] = value.strip()
        out[name] = values
    return out


def schemata_values(text: str, name: str) -> dict[int, int] | None:
    """One resource's values as numbers (hex for cache masks, decimal for MB); None when the line is absent or a
    value does not parse."""
    raw = parse_schemata(text).get(name)
    if raw is None:
        return None
    base = 10 if name.startswith("MB") else 16
    try:
        return {i: int(v, base) for i, v in raw.items()}
    except ValueError:
        return None


def schemata_line(name: str, values: dict[int, int]) -> str:
    """One resource line as the kernel takes it: ``L3:0=f;1=f\\n`` (hex masks) or ``MB:0=50;1=50\\n``."""
    hexa = not name.startswith("MB")
    return name + ":" + ";".join(f"{i}={v:x}" if hexa else f"{i}={v}" for i, v in sorted(values.items())) + "\n"


# --------------------------------------------------------------------------------------------------
# detection
# --------------------------------------------------------------------------------------------------

def cpu_vendor_and_flags(paths: HostPaths) -> tuple[str, frozenset[str]]:
    """(vendor_id, flags) of the first CPU in /proc/cpuinfo; ("", {}) when unreadable."""
    vendor, flags = "", frozenset[str]()
    try:
        text = read_text(paths.proc("cpuinfo"))
    except OSError:
        return vendor, flags
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            continue
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
        if vendor and flags:
            break
    return vendor, flags


def _int_file(path: str, default: int | None = None, base: int = 10) -> int:
    try:
        return int(read_bytes(path).strip() or b"x", base)
    except (OSError, ValueError):
        if default is None:
            raise ValueError(f"{path} missing or not a number") from None
        return default


def mounted(root: str) -> bool:
    """resctrl is mounted with cache allocation (the info dir of L3, or of L3CODE under CDP)."""
    return os.path.exists(os.path.join(root, "info", "L3", "cbm_mask")) or \
        os.path.exists(os.path.join(root, "info", "L3CODE", "cbm_mask"))


def read_info(root: str, vendor: str) -> ResctrlInfo:
    """The limits of a mounted resctrl; ValueError naming the file and the problem otherwise."""
    try:
        schemata = parse_schemata(read_text(os.path.join(root, "schemata")))
    except OSError as e:
        raise ValueError(f"{root}/schemata unreadable: {e.strerror}") from None
    if "L3" in schemata:
        names: tuple[str, ...] = ("L3",)
    elif "L3CODE" in schemata and "L3DATA" in schemata:
        names = ("L3CODE", "L3DATA")
    else:
        raise ValueError(f"{root}/schemata has no L3 line (resources: {', '.join(schemata) or 'none'})")
    cache_dir = os.path.join(root, "info", names[0])
    cbm = _int_file(os.path.join(cache_dir, "cbm_mask"), base=16)
    if cbm <= 0 or (cbm + 1) & cbm:
        raise ValueError(f"{cache_dir}/cbm_mask {cbm:x} is not a contiguous mask from bit 0")
    ids = tuple(sorted(schemata[names[0]]))
    if not ids or any(tuple(sorted(schemata[n])) != ids for n in names):
        raise ValueError(f"{root}/schemata: no or mismatched cache ids on the {'/'.join(names)} lines")
    min_bits = _int_file(os.path.join(cache_dir, "min_cbm_bits"), 1)
    closids = _int_file(os.path.join(cache_dir, "num_closids"), 16)
    sparse = _int_file(os.path.join(cache_dir, "sparse_masks"), 0) == 1
    mb_dir = os.path.join(root, "info", "MB")
    mb_closids = _int_file(os.path.join(mb_dir, "num_closids"), 0)    # counts toward the CLOSID limit even unused
    info = ResctrlInfo(root=root, vendor=vendor, cache_names=names, cbm_mask=cbm, min_cbm_bits=min_bits,
                       cache_ids=ids, l3_closids=closids, sparse_masks=sparse, mb_closids=mb_closids)
    if "MB" not in schemata or not os.path.isdir(mb_dir):
        return replace(info, mb_note="the CPU or kernel has no memory bandwidth allocation")
    amd = vendor in AMD_VENDORS
    try:
        root_values = [int(v) for v in schemata["MB"].values()]
    except ValueError:
        return replace(info, mb_note=f"root MB line {schemata['MB']} does not parse")
    if not root_values:
        return replace(info, mb_note="root MB line lists no domains")
    if any(v > (MB_MAX_AMD if amd else MB_MAX_PERCENT) for v in root_values):
        # mounted with -o mba_MBps: the values are MBps caps of the software controller, not percents
        return replace(info, mb_note="resctrl is mounted with mba_MBps (software controller); percents do not apply")
    return replace(info, mb=True, mb_ids=tuple(sorted(schemata["MB"])),
                   mb_gran=max(1, _int_file(os.path.join(mb_dir, "bandwidth_gran"), DEFAULT_BANDWIDTH_GRAN)),
                   mb_min=_int_file(os.path.join(mb_dir, "min_bandwidth"), 0))


def detect(paths: HostPaths, kernel: ResctrlKernel | None = None) -> tuple[ResctrlInfo | None, str]:
    """(info, "") when resctrl is usable, mounting it first when the CPU supports it and ``kernel`` is given;
    (None, why) otherwise."""
    root = paths.sys_fs("resctrl")
    vendor, flags = cpu_vendor_and_flags(paths)
    if not mounted(root):
        if "cat_l3" not in flags:
            return None, "CPU has no cat_l3 flag (no RDT/PQoS cache allocation; typical of VMs)"
        if not os.path.isdir(root):
            return None, f"{root} missing: kernel without CONFIG_X86_CPU_RESCTRL"
        if kernel is None:
            return None, f"{root} is not mounted"
        try:
            kernel.mount(root)
        except OSError as e:
            return None, f"mount -t resctrl resctrl {root} failed: {e.strerror or e}"
        log.info("resctrl mounted root=%s", root)
        if not mounted(root):
            return None, f"{root} mounted but has no info/L3/cbm_mask (L3 allocation disabled, rdt= cmdline?)"
    try:
        return read_info(root, vendor), ""
    except ValueError as e:
        return None, str(e)


def supported(paths: HostPaths, cgroups: Cgroups | None = None) -> tuple[bool, str]:
    """For ``koordlet doctor``: can the resctrl strategy run here, and why (never mounts anything)."""
    root = paths.sys_fs("resctrl")
    if mounted(root):
        info, why = detect(paths)
        return (True, f"mounted: {info.describe()}") if info is not None else (False, why)
    _, flags = cpu_vendor_and_flags(paths)
    if "cat_l3" not in flags:
        return False, "CPU has no cat_l3 flag (no RDT/PQoS cache allocation; typical of VMs)"
    if not os.path.isdir(root):
        return False, f"{root} missing: kernel without CONFIG_X86_CPU_RESCTRL"
    if os.geteuid() != 0:
        return False, f"{root} is not mounted and mounting needs root (uid={os.geteuid()})"
    return True, f"{root} is not mounted yet: the agent mounts it when the resctrl strategy starts"


# --------------------------------------------------------------------------------------------------
# monitoring (CQM / MBM): mon_data of a group
# --------------------------------------------------------------------------------------------------

LLC_OCCUPANCY = "llc_occupancy"
MBM_LOCAL, MBM_TOTAL = "mbm_local_bytes", "mbm_total_bytes"
# upstream's resctrl collector needs allocation (cat_l3, mba: IsSupportResctrl) and all four monitoring flags
# (IsSupportResctrlCollector), on an Intel or AMD CPU (IsVendorSupportResctrl)
MONITOR_FLAGS = ("cat_l3", "mba", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local")


def monitoring_supported(paths: HostPaths) -> tuple[bool, str]:
    """Whether upstream's resctrl collector would run on this CPU (vendor and /proc/cpuinfo flags), and why not."""
    vendor, flags = cpu_vendor_and_flags(paths)
    if vendor not in (INTEL_VENDOR, "AuthenticAMD"):
        return False, f"CPU vendor {vendor or 'unknown'!r} is neither Intel nor AMD"
    missing = [f for f in MONITOR_FLAGS if f not in flags]
    if missing:
        return False, f"CPU lacks the flags {', '.join(missing)} (resctrl monitoring; typical of VMs)"
    return True, f"{vendor}: L3 occupancy and memory bandwidth monitoring"


def read_monitor(root: str, group: str, event: str) -> dict[int, int]:
    """``{cache id: value}`` of one monitoring event of a group, over the L3 domains of its ``mon_data``
    (``mon_L3_<id>``: two digits, more for ids above 99). The kernel prints ``%llu\n``; a domain it cannot read
    prints ``Unavailable`` (no RMID value yet, or the event is off) or ``Error`` and is left out. OSError when the
    group has no ``mon_data`` (no group, no monitoring), ValueError when a domain name or value is not the
    kernel's."""
    base = os.path.join(root, group, "mon_data")
    out: dict[int, int] = {}
    with os.scandir(base) as it:
        domains = [e.name for e in it if e.name.startswith("mon_L3_")]
    for name in domains:
        try:
            cache_id = int(name.split("_")[2], 10)
        except (IndexError, ValueError):
            raise ValueError(f"{base}/{name}: not a mon_L3_<cache id> domain") from None
        raw = read_bytes(os.path.join(base, name, event)).strip()
        if raw in (b"Unavailable", b"Error"):
            continue
        try:
            out[cache_id] = int(raw, 10)
        except ValueError:
            raise ValueError(f"{base}/{name}/{event}: {raw[:40]!r} is not a number") from None
    return out


# --------------------------------------------------------------------------------------------------
# groups and tasks
# --------------------------------------------------------------------------------------------------

def group_exists(root: str, name: str) -> bool:
    """A resctrl group dir is there (the runtime fails a container whose RDT class is missing)."""
    return os.path.isdir(os.path.join(root, name))


def list_groups(root: str) -> list[str]:
    """Names of the control groups under the root (not info/mon dirs)."""
    try:
        with os.scandir(root) as it:
            return [e.name for e in it if e.name not in NOT_GROUPS and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def read_ids(path: str) -> set[bytes]:
    """The ids of a task list (resctrl ``tasks``, cgroup ``tasks`` / ``cgroup.threads``) as raw decimal tokens:
    both kinds of file print plain decimal, so tokens compare without int() per id. OSError when unreadable."""
    return set(read_bytes(path).split())


_libc: ctypes.CDLL | None = None


def _mount(source: str, target: str, fstype: str, flags: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if _libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)} (mount -t {fstype} {source} {target})")


class ResctrlKernel:
    """The resctrl operations that are not file writes: mount(2), mkdir(2) and rmdir(2) of groups.

    Tests use ``tests.fakeresctrl.FakeResctrl``, a fake of the kernel with the same three methods.
    """

    def mount(self, root: str) -> None:
        _mount("resctrl", root, "resctrl", MS_RELATIME)

    def make_group(self, root: str, name: str) -> None:
        """Create a control group (mode 0755, as upstream). FileExistsError when it exists; ENOSPC when every
        CLOSID is taken."""
        os.mkdir(os.path.join(root, name), 0o755)

    def remove_group(self, root: str, name: str) -> None:
        """Remove a control group; its tasks go back to the root group. FileNotFoundError when it is gone."""
        os.rmdir(os.path.join(root, name))


def is_no_space(e: OSError) -> bool:
    return e.errno == errno.ENOSPC
