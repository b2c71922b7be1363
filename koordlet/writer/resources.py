"""The cgroup files the executor writes, by their v1 resource names: the file and value each is on the running
hierarchy, and how values compare and merge the way the kernel prints them.

Facts: upstream ``pkg/koordlet/util/system/cgroup_resource.go`` (``knownCgroupResources``,
``knownCgroupV2Resources``: a resource is named by its cgroup v1 file, a v2 file stands in for it),
``cgroup2.go: ConvertCPUSharesToWeight`` (the kubelet's shares-to-weight mapping) and
``resourceexecutor/updater.go`` (``cgroupBlkIOFileWriteIfDifferent``: per-device files compared per line).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from koordlet.host.cgroup import parse_cpu_list

__all__ = ["KEYED", "MAX_INT64", "RESOURCES", "UNLIMITED_FROM", "Merge", "loosest_of", "parse_limit", "same_value"]

MAX_INT64 = 9223372036854775807
UNLIMITED_FROM = 2**62           # any value this large is the kernel's "no limit" (page-aligned spellings vary)


class Merge(enum.Enum):
    """How an update may be loosened for the top-down pass of a leveled batch."""
    NONE = "none"                # written exactly, top-down
    LARGER = "larger"            # numbers; -1 / max = unlimited (cfs quota, memory.min/low/high)
    UNION = "union"              # cpu lists (cpuset.cpus)


# --------------------------------------------------------------------------------------------------
# v1 resource names -> files and values of the running hierarchy
# --------------------------------------------------------------------------------------------------

def _shares_to_weight(value: str) -> str:
    shares = int(value)
    return str(1 + (max(shares, 2) - 2) * 9999 // 262142)


def _minus_one_max(value: str) -> str:
    return "max" if int(value) < 0 else value


@dataclass(frozen=True, slots=True)
class _Resource:
    subsystem: str
    v2_file: str | None                       # None: v1 only
    to_v2: Callable[[str], str] | None = None
    merge: Merge = Merge.NONE


RESOURCES: dict[str, _Resource] = {
    "cpu.bvt_warp_ns": _Resource("cpu", "cpu.bvt_warp_ns"),
    "cpu.idle": _Resource("cpu", "cpu.idle"),
    "cpu.shares": _Resource("cpu", "cpu.weight", _shares_to_weight),
    "cpu.cfs_quota_us": _Resource("cpu", "cpu.max", _minus_one_max, Merge.LARGER),
    "cpu.cfs_burst_us": _Resource("cpu", "cpu.max.burst"),
    "cpuset.cpus": _Resource("cpuset", "cpuset.cpus", None, Merge.UNION),
    "memory.limit_in_bytes": _Resource("memory", "memory.max", _minus_one_max),
    "memory.min": _Resource("memory", "memory.min", None, Merge.LARGER),
    "memory.low": _Resource("memory", "memory.low", None, Merge.LARGER),
    "memory.high": _Resource("memory", "memory.high", None, Merge.LARGER),
    "memory.wmark_ratio": _Resource("memory", "memory.wmark_ratio"),
    "memory.wmark_scale_factor": _Resource("memory", "memory.wmark_scale_factor"),
    "memory.wmark_min_adj": _Resource("memory", "memory.wmark_min_adj"),
    "memory.priority": _Resource("memory", "memory.priority"),
    "memory.use_priority_oom": _Resource("memory", "memory.use_priority_oom"),
    "memory.oom.group": _Resource("memory", "memory.oom.group"),
    "memory.pagecache_limit.enable": _Resource("memory", "memory.pagecache_limit.enable"),
    "memory.pagecache_limit.size": _Resource("memory", "memory.pagecache_limit.size"),
    "memory.pagecache_limit.sync": _Resource("memory", "memory.pagecache_limit.sync"),
    "net_cls.classid": _Resource("net_cls", None),
    # one line per device ("<maj>:<min> <value>"): compared per device line (upstream
    # resourceexecutor/updater.go: cgroupBlkIOFileWriteIfDifferent)
    "blkio.throttle.read_bps_device": _Resource("blkio", None),
    "blkio.throttle.write_bps_device": _Resource("blkio", None),
    "blkio.throttle.read_iops_device": _Resource("blkio", None),
    "blkio.throttle.write_iops_device": _Resource("blkio", None),
    "blkio.cost.weight": _Resource("blkio", None),
    "blkio.cost.qos": _Resource("blkio", None),
    "blkio.cost.model": _Resource("blkio", None),
    "io.max": _Resource("io", "io.max"),
    "io.weight": _Resource("io", "io.weight"),
    "io.cost.qos": _Resource("io", "io.cost.qos"),
    "io.cost.model": _Resource("io", "io.cost.model"),
}
KEYED = frozenset(r for r in RESOURCES if r.startswith(("blkio.", "io.")))


# --------------------------------------------------------------------------------------------------
# value comparison and merging, as the kernel prints values
# --------------------------------------------------------------------------------------------------

def parse_limit(text: str) -> int | None:
    """Integer value with every spelling of "unlimited" (max, -1, MAX_INT64 or above) as None."""
    text = text.strip().split(" ", 1)[0] if text.strip() else ""
    if text == "max":
        return None
    n = int(text)
    # v1 memory prints "unlimited" as the page-aligned PAGE_COUNTER_MAX (9223372036854771712 with 4 KiB pages)
    return None if n < 0 or n >= UNLIMITED_FROM else n


def _keyed_same(current: str, wanted: str) -> bool:
    """Files with one line per key (blkio per-device files, io.max, io.weight, io.cost.*): the key's line must
    already carry every ``name=value`` / value field we write. A reset ("<key> 0") counts as done when the key has
    no line at all (the kernel drops a device's line when its limits go back to unlimited)."""
    key, _, fields = wanted.strip().partition(" ")
    want = fields.split()
    for line in current.splitlines():
        k, _, rest = line.strip().partition(" ")
        if k == key:
            have = rest.split()
            return all(f in have for f in want) if any("=" in f for f in want) else have == want
    return all(f in ("0", "max") or f.endswith(("=max", "=0")) or f == "enable=0" for f in want)


def same_value(resource: str, current: str, wanted: str) -> bool:
    if resource in KEYED:
        return _keyed_same(current, wanted)
    cur, new = current.strip(), wanted.strip()
    if cur == new:
        return True
    try:
        if resource.startswith("cpuset.") and resource.endswith((".cpus", ".mems")):
            return parse_cpu_list(cur) == parse_cpu_list(new)
        if resource in ("cpu.max", "cpu.cfs_quota_us") or cur == "max" or new == "max" or \
                (cur.lstrip("-").isdigit() and new.lstrip("-").isdigit()):
            return parse_limit(cur) == parse_limit(new)
    except ValueError:
        return False
    return False


def loosest_of(merge: Merge, current: str, wanted: str) -> str:
    """The loosest of current and wanted (what a parent must allow while children still hold the old value)."""
    if merge is Merge.UNION:
        from koordlet.host.cgroup import format_cpu_list
        return format_cpu_list(sorted(set(parse_cpu_list(current)) | set(parse_cpu_list(wanted))))
    cur, new = parse_limit(current), parse_limit(wanted)
    if cur is None or new is None:
        return "max" if current.strip().startswith("max") or wanted == "max" else "-1"
    return wanted if new >= cur else current.strip().split(" ", 1)[0]
