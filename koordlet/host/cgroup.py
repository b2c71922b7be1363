"""cgroup v1/v2 and the kubelet's kubepods tree (cgroupfs and systemd naming).

Facts: upstream ``pkg/koordlet/util/system/cgroup_driver.go`` (``GetCgroupDriver``, the path formatters),
``pkg/koordlet/util/cgroup_parent_utils.go`` and ``pkg/koordlet/resourceexecutor/reader.go``. A *relative dir* is the
cgroup path below the hierarchy root (``kubepods/burstable/pod<uid>``); on v1 it sits under each subsystem
directory (``<root>/cpu/<rel>``), on v2 directly under the root.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from koordlet.host.fs import parse_fields, read_bytes
from koordlet.host.paths import HostPaths

CGROUP2_SUPER_MAGIC = 0x63677270
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")     # v1 memory.numa_stat counts pages


class CgroupVersion(enum.IntEnum):
    V1 = 1
    V2 = 2


class Driver(str, enum.Enum):
    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


class KubeQOS(str, enum.Enum):
    """Kubernetes QoS class; it alone decides the cgroup parent (never the koordinator class)."""
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BESTEFFORT = "BestEffort"


class _StatFs(ctypes.Structure):
    # struct statfs on 64-bit Linux: f_type comes first; the rest is read but unused.
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 112)]


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def fs_magic(path: str) -> int:
    """statfs(2) f_type of the filesystem holding ``path`` (os.statvfs does not expose it)."""
    buf = _StatFs()
    if _libc.statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    f_type: int = buf.f_type
    return f_type & 0xFFFFFFFF


def detect_version(root: str) -> CgroupVersion:
    """v2 when the root is a cgroup2 mount (upstream's rule), or a non-cgroup tree that looks unified.

    The second case covers test trees and bind mounts that are not the mount point itself: a unified
    hierarchy always has ``cgroup.controllers`` at its top, a v1 tmpfs of per-subsystem mounts never does.
    """
    if fs_magic(root) == CGROUP2_SUPER_MAGIC:
        return CgroupVersion.V2
    return CgroupVersion.V2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else CgroupVersion.V1


# --------------------------------------------------------------------------------------------------
# container ids and directory names
# --------------------------------------------------------------------------------------------------

# runtime name in containerStatus.containerID -> systemd scope prefix
SCOPE_PREFIX = {"containerd": "cri-containerd-", "docker": "docker-", "cri-o": "crio-", "pouch": "pouch-"}
_PREFIX_RUNTIME = {v: k for k, v in SCOPE_PREFIX.items()}
_ID_RE = re.compile(r"[0-9A-Za-z]{1,128}")
# a bare cgroupfs container dir is the runtime's hex id; requiring hex keeps "tasks" & co. out
_HEX_ID_RE = re.compile(r"[0-9a-f]{12,128}")
_UID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,127}")


def parse_container_id(raw: str) -> tuple[str, str]:
    """``containerd://<id>`` -> ("containerd", "<id>"); anything unsafe for a path is refused."""
    runtime, sep, cid = raw.partition("://")
    if not sep or runtime not in SCOPE_PREFIX:
        raise ValueError(f"container id {raw!r}: expected <runtime>://<id> with runtime one of "
                         f"{', '.join(SCOPE_PREFIX)}")
    if not _ID_RE.fullmatch(cid):
        raise ValueError(f"container id {raw!r}: id must be 1-128 alphanumerics")
    return runtime, cid


def check_pod_uid(uid: str) -> str:
    """Pod UIDs end up in cgroup paths, so only UUID/hash characters are accepted."""
    if not _UID_RE.fullmatch(uid):
        raise ValueError(f"pod uid {uid!r}: expected a UUID or hash")
    return uid


_QOS_SUFFIX = {KubeQOS.GUARANTEED: "", KubeQOS.BURSTABLE: "burstable", KubeQOS.BESTEFFORT: "besteffort"}


@dataclass(frozen=True)
class Layout:
    """Names of the kubepods tree for one cgroup driver."""
    driver: Driver

    @property
    def root(self) -> str:
        return "kubepods.slice" if self.driver is Driver.SYSTEMD else "kubepods"

    def qos_dir(self, qos: KubeQOS) -> str:
        suffix = _QOS_SUFFIX[qos]
        if not suffix:
            return self.root
        if self.driver is Driver.SYSTEMD:
            return f"{self.root}/kubepods-{suffix}.slice"
        return f"{self.root}/{suffix}"

    def pod_dir(self, qos: KubeQOS, uid: str) -> str:
        check_pod_uid(uid)
        if self.driver is Driver.SYSTEMD:
            suffix = _QOS_SUFFIX[qos]
            stem = f"kubepods-{suffix}-pod" if suffix else "kubepods-pod"
            return f"{self.qos_dir(qos)}/{stem}{uid.replace('-', '_')}.slice"
        return f"{self.qos_dir(qos)}/pod{uid}"

    def container_dir(self, pod_dir: str, runtime: str, cid: str) -> str:
        if self.driver is Driver.SYSTEMD:
            return f"{pod_dir}/{SCOPE_PREFIX[runtime]}{cid}.scope"
        return f"{pod_dir}/{cid}"

    def pod_uid_of(self, qos: KubeQOS, name: str) -> str | None:
        """Inverse of pod_dir's last component; None for anything that is not a pod dir of that QoS."""
        if self.driver is Driver.SYSTEMD:
            suffix = _QOS_SUFFIX[qos]
            stem = f"kubepods-{suffix}-pod" if suffix else "kubepods-pod"
            if not (name.startswith(stem) and name.endswith(".slice")):
                return None
            uid = name[len(stem):-len(".slice")].replace("_", "-")
        else:
            if not name.startswith("pod"):
                return None
            uid = name[3:]
        return uid if _UID_RE.fullmatch(uid) else None

    def container_of(self, name: str) -> tuple[str, str] | None:
        """(runtime, id) from a container dir name; cgroupfs names carry no runtime (reported as "")."""
        if self.driver is Driver.SYSTEMD:
            if not name.endswith(".scope"):
                return None
            for prefix, runtime in _PREFIX_RUNTIME.items():
                if name.startswith(prefix):
                    cid = name[len(prefix):-len(".scope")]
                    return (runtime, cid) if _ID_RE.fullmatch(cid) else None
            return None
        return ("", name) if _HEX_ID_RE.fullmatch(name) else None


def detect_driver(root: str, version: CgroupVersion, paths: HostPaths) -> tuple[Driver, str]:
    """Upstream's order: existing kubepods dir name, then the kubelet's flags/config, else systemd."""
    base = root if version is CgroupVersion.V2 else os.path.join(root, "cpu")
    if os.path.isdir(os.path.join(base, "kubepods.slice")):
        return Driver.SYSTEMD, "kubepods.slice exists"
    if os.path.isdir(os.path.join(base, "kubepods")):
        return Driver.CGROUPFS, "kubepods exists"
    found = _kubelet_driver(paths)
    if found:
        return found
    return Driver.SYSTEMD, "no kubepods tree and no kubelet found; upstream default"


def _kubelet_driver(paths: HostPaths) -> tuple[Driver, str] | None:
    try:
        pids = [p for p in os.listdir(paths.proc_root) if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            if read_bytes(paths.proc(pid, "comm")).strip() != b"kubelet":
                continue
            args = [a.decode("utf-8", "replace") for a in read_bytes(paths.proc(pid, "cmdline")).split(b"\0")]
        except OSError:
            continue
        config_file = None
        for i, arg in enumerate(args):
            name, sep, value = arg.partition("=")
            if not sep and i + 1 < len(args):
                value = args[i + 1]
            if name == "--cgroup-driver" and value in ("cgroupfs", "systemd"):
                return Driver(value), f"kubelet pid {pid} --cgroup-driver"
            if name == "--config":
                config_file = value
        if config_file is None:
            return Driver.CGROUPFS, f"kubelet pid {pid} without --config uses cgroupfs"
        found = _config_driver(paths, pid, config_file)
        if found:
            return found
    return None


def _config_driver(paths: HostPaths, pid: str, config_file: str) -> tuple[Driver, str] | None:
    """``cgroupDriver`` from the kubelet's config file, read through the kubelet's own root and working directory
    (``/proc/<pid>/root``, ``/proc/<pid>/cwd``): wherever the file lives on the host (``/etc/kubernetes``,
    ``/var/lib/kubelet``, k3s's ``/etc/rancher``), the DaemonSet needs no mount of it. The path as given is the
    fallback, for a host-mode agent that may not look into another process's root."""
    if os.path.isabs(config_file):
        candidates = [paths.proc(pid, "root") + config_file, config_file]
    else:
        candidates = [os.path.join(paths.proc(pid, "cwd"), config_file)]
    for candidate in candidates:
        try:
            text = read_bytes(candidate).decode("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.strip().partition(":")
            if key == "cgroupDriver" and value.strip().strip("'\"") in ("cgroupfs", "systemd"):
                return Driver(value.strip().strip("'\"")), f"kubelet config {config_file}"
        return None
    return None


# --------------------------------------------------------------------------------------------------
# readers
# --------------------------------------------------------------------------------------------------

class MemoryUsage(NamedTuple):
    """One memory cgroup reading, with the derived quantities upstream and kubelet use. A named tuple: one is made
    for every pod and container each second, at a third of a frozen dataclass's cost."""
    usage: int            # memory.usage_in_bytes (v1) / memory.current (v2)
    anon: int             # inactive_anon + active_anon + unevictable: upstream's "usage without page cache"
    file: int             # active_file + inactive_file
    inactive_file: int

    @property
    def working_set(self) -> int:
        """usage − inactive_file, floored at 0 (kubelet/cAdvisor's working set)."""
        return max(self.usage - self.inactive_file, 0)

    @property
    def with_page_cache(self) -> int:
        return self.anon + self.file


# in the order the kernel prints them (consecutive lines on v1 and v2), so parse_fields splits them off in one go
_V1_MEM_KEYS = (b"total_inactive_anon", b"total_active_anon", b"total_inactive_file", b"total_active_file",
                b"total_unevictable")
_V2_MEM_KEYS = (b"inactive_anon", b"active_anon", b"inactive_file", b"active_file", b"unevictable")


@dataclass(frozen=True, slots=True)
class CgroupWrite:
    """One desired value of one cgroup file, as plain data: the rules decide these, the executor (the one writer)
    turns them into its updates. The file is named by its cgroup v1 resource name (``cpu.cfs_quota_us``), which
    the executor translates for a v2 hierarchy; ``reason`` is the audit reason (the rule or hook that wants it)."""
    rel: str                 # the cgroup, relative to the hierarchy's root
    resource: str
    value: int | str
    reason: str


@dataclass(frozen=True, slots=True)
class UsageFiles:
    """Absolute paths of the files one usage reading needs, computed once per cgroup, not per cycle."""
    cpu: str
    memory_stat: str
    memory_usage: str


class Cgroups:
    """One cgroup hierarchy (v1 or v2) under a root, with the kubepods layout of one driver."""

    def __init__(self, root: str, version: CgroupVersion, driver: Driver) -> None:
        self.root = root
        self.version = version
        self.layout = Layout(driver)
        self._mem_keys = _V1_MEM_KEYS if version is CgroupVersion.V1 else _V2_MEM_KEYS
        self._prefixes: dict[str, str] = {}     # subsystem -> "<root>/<subsystem>/" (v1) or "<root>/" (v2)

    @classmethod
    def detect(cls, paths: HostPaths, driver: str = "auto") -> Cgroups:
        version = detect_version(paths.cgroup_root)
        drv = Driver(driver) if driver != "auto" else detect_driver(paths.cgroup_root, version, paths)[0]
        return cls(paths.cgroup_root, version, drv)

    def path(self, subsystem: str, rel: str, file: str = "") -> str:
        """v1: <root>/<subsystem>/<rel>/<file>; v2: <root>/<rel>/<file>, as os.path.join puts them together.

        The usual case, a relative dir (no leading or trailing slash) and a file name, is the subsystem's prefix,
        computed once, and the two parts: this runs for every file of every cgroup each second, and os.path.join
        costs ten times as much. Anything else (an empty or absolute part) goes through os.path.join."""
        if rel and rel[0] != "/" and rel[-1] != "/" and (not file or file[0] != "/"):
            prefix = self._prefixes.get(subsystem)
            if prefix is None:
                prefix = self._prefixes[subsystem] = self._join(subsystem, "")
            return f"{prefix}{rel}/{file}"
        return self._join(subsystem, rel, file)

    def _join(self, subsystem: str, *parts: str) -> str:
        if self.version is CgroupVersion.V1:
            return os.path.join(self.root, subsystem, *parts)
        return os.path.join(self.root, *parts)

    def has_file(self, subsystem: str, rel: str, file: str) -> bool:
        """Feature probe: does the kernel offer this cgroup file (bvt, cpu.idle, memory.min...) at rel?"""
        return os.path.exists(self.path(subsystem, rel, file))

    def has_dir(self, subsystem: str, rel: str) -> bool:
        return os.path.isdir(self.path(subsystem, rel))

    def escape(self, rel: str) -> str | None:
        """Where ``rel`` really leads when that is outside the cgroup root (a symlink in a tree that is not a cgroup
        filesystem, where symlinks can exist), else None. Checked after resolving, in every v1 hierarchy."""
        subsystems = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "net_cls") \
            if self.version is CgroupVersion.V1 else ("",)
        for subsystem in subsystems:
            root = os.path.realpath(self.path(subsystem, ""))
            target = os.path.realpath(self.path(subsystem, rel))
            if target != root and not target.startswith(root + os.sep):
                return target
        return None

    def identity(self, rel: str) -> tuple[int, ...]:
        """The inode numbers of ``rel``'s dir in the hierarchies QoS writes (0 where it is missing): a dir removed
        and made again at the same path (a systemd service's cgroup at every restart) has another identity."""
        subsystems = ("cpu", "cpuset", "memory", "blkio") if self.version is CgroupVersion.V1 else ("",)
        out = []
        for subsystem in subsystems:
            try:
                out.append(os.stat(self.path(subsystem, rel)).st_ino)
            except OSError:
                out.append(0)
        return tuple(out)

    def listing_dir(self, rel: str) -> str:
        """The directory whose children are listed/watched for pods and containers (v1: cpu, as upstream)."""
        return self.path("cpu", rel)

    # --- usage --------------------------------------------------------------------------------------

    def usage_files(self, rel: str) -> UsageFiles:
        if self.version is CgroupVersion.V1:
            return UsageFiles(self.path("cpuacct", rel, "cpuacct.usage"),
                              self.path("memory", rel, "memory.stat"),
                              self.path("memory", rel, "memory.usage_in_bytes"))
        return UsageFiles(self.path("", rel, "cpu.stat"), self.path("", rel, "memory.stat"),
                          self.path("", rel, "memory.current"))

    def read_cpu_ns(self, files: UsageFiles) -> int:
        """Cumulative CPU time in ns: cpuacct.usage (v1) or cpu.stat usage_usec × 1000 (v2)."""
        data = read_bytes(files.cpu)
        if self.version is CgroupVersion.V1:
            return int(data)
        try:
            return parse_fields(data, (b"usage_usec",))[0] * 1000
        except KeyError:
            raise ValueError(f"{files.cpu}: no usage_usec") from None

    def read_throttling(self, rel: str) -> tuple[int, int]:
        """(nr_periods, nr_throttled) of the CFS bandwidth controller from ``cpu.stat`` (same keys on v1 and v2)."""
        return parse_cpu_throttling(read_bytes(self.path("cpu", rel, "cpu.stat")))

    def read_memory(self, files: UsageFiles) -> MemoryUsage:
        stat = read_bytes(files.memory_stat)
        usage = int(read_bytes(files.memory_usage))
        try:
            ia, aa, inf, af, ue = parse_fields(stat, self._mem_keys)
        except KeyError as e:
            raise ValueError(f"{files.memory_stat}: missing {e.args[0].decode()}") from None
        return MemoryUsage(usage=usage, anon=ia + aa + ue, file=af + inf, inactive_file=inf)

    def read_numa_memory(self, rel: str) -> dict[int, int]:
        """Bytes per NUMA node of the memory :attr:`MemoryUsage.anon` counts (anon LRU + unevictable), from
        ``memory.numa_stat``; ValueError when the file lacks those lines.

        v1 lines are ``name=<total> N0=<pages> ...`` and v2 lines ``name N0=<bytes> ...``. On v1 the
        ``hierarchical_*`` lines are read: the plain ones count only pages charged to the directory itself, which
        for a pod is ~0 since its processes live in the container cgroups (checked on a real v1 kernel). Upstream
        reads the plain ``total=`` line there; see collectors/usage.py for why we do not.
        """
        data = read_bytes(self.path("memory", rel, "memory.numa_stat"))
        if self.version is CgroupVersion.V1:
            return parse_numa_stat(data, (b"hierarchical_anon", b"hierarchical_unevictable"), _PAGE_SIZE)
        return parse_numa_stat(data, (b"inactive_anon", b"active_anon", b"unevictable"), 1)

    # --- limits (BE collector) ----------------------------------------------------------------------

    def read_cpuset(self, rel: str) -> str:
        name = "cpuset.cpus" if self.version is CgroupVersion.V1 else "cpuset.cpus.effective"
        return read_bytes(self.path("cpuset", rel, name)).decode().strip()

    def read_quota(self, rel: str) -> int:
        """quota_us alone (−1: unlimited), for callers that do not need the period: on v1 one file read instead of
        two (CPU burst reads every limited container's quota each cycle)."""
        if self.version is CgroupVersion.V1:
            return int(read_bytes(self.path("cpu", rel, "cpu.cfs_quota_us")))
        q, _, _ = read_bytes(self.path("cpu", rel, "cpu.max")).strip().partition(b" ")
        return -1 if q == b"max" else int(q)

    def read_cfs_quota(self, rel: str) -> tuple[int, int]:
        """(quota_us, period_us); quota −1 means unlimited on both versions."""
        if self.version is CgroupVersion.V1:
            return (int(read_bytes(self.path("cpu", rel, "cpu.cfs_quota_us"))),
                    int(read_bytes(self.path("cpu", rel, "cpu.cfs_period_us"))))
        q, p = read_bytes(self.path("cpu", rel, "cpu.max")).split()
        return (-1 if q == b"max" else int(q)), int(p)

    # --- discovery ----------------------------------------------------------------------------------

    def subdirs(self, rel: str) -> list[str]:
        """Names of the child cgroups of rel ([] when rel does not exist)."""
        return self.children("cpu", rel)

    def children(self, subsystem: str, rel: str) -> list[str]:
        """Names of the child cgroups of rel in one subsystem (v1) or the unified tree ([] when rel is absent)."""
        try:
            with os.scandir(self.path(subsystem, rel)) as it:
                return [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:
            return []

    def list_pods(self) -> list[tuple[KubeQOS, str, str]]:
        """(kube QoS, uid, relative dir) of every pod dir found in the kubepods tree."""
        found = []
        for qos in KubeQOS:
            parent = self.layout.qos_dir(qos)
            for name in self.subdirs(parent):
                uid = self.layout.pod_uid_of(qos, name)
                if uid is not None:
                    found.append((qos, uid, f"{parent}/{name}"))
        return found

    def list_containers(self, pod_rel: str) -> list[tuple[str, str, str]]:
        """(runtime or "", id, relative dir) for each container-looking child of a pod dir."""
        out = []
        for name in self.subdirs(pod_rel):
            parsed = self.layout.container_of(name)
            if parsed is not None:
                out.append((parsed[0], parsed[1], f"{pod_rel}/{name}"))
        return out


# Highest CPU id + 1 a cpu list may name: the largest NR_CPUS any mainline kernel can be built with (x86_64
# MAXSMP, ppc64). A fixed cap, not this host's possible CPUs: the lists also come from annotations written for
# other nodes' shapes, and a bigger id can name no CPU on any Linux host.
MAX_CPUS = 8192


def format_cpu_list(cpus: Sequence[int]) -> str:
    """Sorted CPU ids to the kernel's list format ("0-3,8,10-11"); "" for none."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpu_list(text: str) -> list[int]:
    """Kernel cpu list format ("0-3,8,10-11") to sorted CPU ids; ValueError for ids of :data:`MAX_CPUS` and above.

    Work is O(len(text)) whatever the ranges: a range adds its ids only while the ranges seen so far span at most
    a few times MAX_CPUS; past that (many overlapping ranges) the ranges are merged by their start instead.
    """
    cpus: set[int] = set()
    ends: dict[int, int] = {}             # start -> furthest end, once the spans add up to more than the cap
    spanned = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        first = int(lo)
        last = int(hi) if sep else first
        if first < 0 or last >= MAX_CPUS:
            raise ValueError(f"cpu id in {part.strip()!r:.40} is outside 0..{MAX_CPUS - 1}")
        if last < first:
            continue
        spanned += last - first + 1
        if spanned <= 4 * MAX_CPUS:
            cpus.update(range(first, last + 1))
        elif ends.get(first, -1) < last:
            ends[first] = last
    if ends:
        reach = -1
        for first in sorted(ends):        # at most MAX_CPUS distinct starts
            last = ends[first]
            if last > reach:
                cpus.update(range(max(first, reach + 1), last + 1))
                reach = last
    return sorted(cpus)


def parse_cpu_throttling(data: bytes) -> tuple[int, int]:
    """(nr_periods, nr_throttled) from ``cpu.stat``; ValueError when absent."""
    try:
        periods, throttled = parse_fields(data, (b"nr_periods", b"nr_throttled"))
        return periods, throttled
    except KeyError as e:
        raise ValueError(f"cpu.stat has no {e.args[0].decode()}") from None


def parse_numa_stat(data: bytes, keys: tuple[bytes, ...], unit: int) -> dict[int, int]:
    """``memory.numa_stat``: the sum over ``keys`` of each node's value (``N<id>=<value>`` fields), × ``unit``.

    The first field of a line is the name (v2) or ``name=<total>`` (v1); only the lines of ``keys`` are looked at
    (each pod's file is read every second). ValueError when a key is missing or a field is malformed; a node absent
    from a line counts 0 there."""
    out: dict[int, int] = {}
    for key in keys:
        per_node = _numa_fields(data, key)
        if per_node is None:
            raise ValueError(f"memory.numa_stat has no {key.decode()} line")
        for field in per_node:
            node, sep, value = field.partition(b"=")
            if not sep or not node.startswith(b"N"):
                raise ValueError(f"memory.numa_stat {key.decode()}: bad field {field[:40]!r}")
            n = int(node[1:])
            out[n] = out.get(n, 0) + int(value) * unit
    return out


def _numa_fields(data: bytes, key: bytes) -> list[bytes] | None:
    """The fields after the name of ``key``'s line (``key=<total> N0=...`` on v1, ``key N0=...`` on v2), or None
    when the file has no such line; the files name each key once."""
    for sep in (b"=", b" "):
        at = data.rfind(b"\n" + key + sep)
        if at >= 0:
            start = at + 1
        elif data.startswith(key + sep):
            start = 0
        else:
            continue
        end = data.find(b"\n", start)
        return data[start:end if end >= 0 else None].split()[1:]
    return None
