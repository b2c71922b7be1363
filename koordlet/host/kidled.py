"""kidled, the Alibaba Cloud Linux / Anolis kernel's idle-page scanner: its sysfs switches and the per-cgroup
``memory.idle_page_stats`` file it fills.

Facts: upstream ``pkg/koordlet/util/system/kidled_util.go`` (``ParseMemoryIdlePageStats``, ``IsKidledSupport``). kidled
scans every page once per *scan period* and ages the pages nobody touched; each memory cgroup (v1 only) then shows how
many bytes sit in each age bucket, split by page type. Upstream calls inactive file pages idle for ≥ 60 periods (bucket
index ≥ 5) "cold": they are page cache the kernel can drop without swapping, so usage minus cold is what a workload
really needs.

The file (31 lines as the kernel prints it)::

    # version: 1.0
    # page_scans: 24
    # slab_scans: 0
    # scan_period_in_seconds: 5
    # use_hierarchy: 1
    # buckets: 1,2,5,15,30,60,120,240
    #                                  <- 8 legend lines explaining the row letters
    # |||||      [1,2)  [2,5)  [5,15) ...  [240,+inf)
      csei     2613248  4657152 ...       (17 rows: csei .. dfua, slab; 8 byte counts each)

Row letters: c/d clean/dirty, s/f swap-backed (anon)/file, e/u evictable/unevictable, i/a inactive/active.

Upstream difference: upstream rejects a file that is not exactly 31 lines and reads an unparsable number as 0.
We parse line by line instead: a data row that is not one of the 17 known names followed by one count per bucket
(or a duplicate, or a header with an unparsable value) is skipped and *counted*, so a kernel that adds a row or a
corrupted line costs that line only and shows up in ``koordlet_collect_skipped``. A file without any usable
inactive-file row says nothing about cold memory and is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from koordlet.host.paths import HostPaths

KIDLED_DIR = ("kernel", "mm", "kidled")
SCAN_PERIOD_FILE = "scan_period_in_seconds"
USE_HIERARCHY_FILE = "use_hierarchy"
IDLE_PAGE_STATS = "memory.idle_page_stats"      # in each v1 memory cgroup, the root ("") being the node

# what koordlet sets when the collector starts (upstream's NewDefaultKidledConfig)
SCAN_PERIOD_SECONDS = 5
USE_HIERARCHY = 1
COLD_BOUNDARY = 5                               # bucket index: idle ≥ 60 scan periods (5 min at 5 s)

BUCKETS = (1, 2, 5, 15, 30, 60, 120, 240)       # the kernel's default bucket lower bounds, in scan periods
ROWS = ("csei", "dsei", "cfei", "dfei", "csui", "dsui", "cfui", "dfui",
        "csea", "dsea", "cfea", "dfea", "csua", "dsua", "cfua", "dfua", "slab")
COLD_ROWS = ("cfei", "dfei", "cfui", "dfui")    # inactive file pages, clean or dirty, evictable or not
_INT_HEADERS = ("page_scans", "slab_scans", "scan_period_in_seconds", "use_hierarchy")


@dataclass(frozen=True)
class IdlePageStats:
    """One parsed ``memory.idle_page_stats``: header values and the byte count per age bucket of each row."""
    version: str = ""
    page_scans: int = 0
    slab_scans: int = 0
    scan_period_in_seconds: int = 0
    use_hierarchy: int = 0
    buckets: tuple[int, ...] = BUCKETS
    rows: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _uint(text: str) -> int:
    """A non-negative decimal integer; ValueError on anything else (a sign, garbage, an empty field)."""
    text = text.strip()
    if not text.isdigit():
        raise ValueError(f"not a byte count: {text!r}")
    return int(text)


def parse_idle_page_stats(text: str) -> tuple[IdlePageStats, int]:
    """(stats, number of skipped malformed lines). ValueError when no inactive-file row is usable.

    Header comments ``# key: value`` fill the header fields; other comment lines (the legend) and blank lines are
    ignored. ``# buckets:`` sets how many counts each row must have (8 unless the header says otherwise).
    """
    headers: dict[str, object] = {}
    rows: dict[str, tuple[int, ...]] = {}
    skipped = 0
    buckets: tuple[int, ...] = BUCKETS
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            key, sep, value = stripped[1:].partition(":")
            key = key.strip()
            if not sep or not (key == "version" or key == "buckets" or key in _INT_HEADERS):
                continue                                  # legend line
            try:
                if key == "version":
                    headers[key] = value.strip()
                elif key == "buckets":
                    buckets = headers[key] = tuple(_uint(b) for b in value.split(","))
                else:
                    headers[key] = _uint(value)
            except ValueError:
                skipped += 1
            continue
        name, *counts = stripped.split()
        if name not in ROWS or name in rows or len(counts) != len(buckets):
            skipped += 1
            continue
        try:
            rows[name] = tuple(_uint(c) for c in counts)
        except ValueError:
            skipped += 1
    if not any(r in rows for r in COLD_ROWS):
        raise ValueError(f"no usable inactive file row ({', '.join(COLD_ROWS)}) in idle_page_stats "
                         f"({len(rows)} usable rows, {skipped} malformed lines)")
    return IdlePageStats(rows=rows, **headers), skipped    # type: ignore[arg-type]


def cold_bytes(stats: IdlePageStats, boundary: int = COLD_BOUNDARY) -> int:
    """Bytes of inactive file pages idle at least ``BUCKETS[boundary]`` scan periods (upstream's cold pages)."""
    return sum(sum(stats.rows[r][boundary:]) for r in COLD_ROWS if r in stats.rows)


def scan_period_path(paths: HostPaths) -> str:
    return paths.sys(*KIDLED_DIR, SCAN_PERIOD_FILE)


def use_hierarchy_path(paths: HostPaths) -> str:
    return paths.sys(*KIDLED_DIR, USE_HIERARCHY_FILE)


def kidled_params(paths: HostPaths) -> tuple[tuple[str, str], ...]:
    """The (sysfs file, value) pairs koordlet writes (through the executor) to run kidled as upstream does."""
    return ((scan_period_path(paths), str(SCAN_PERIOD_SECONDS)), (use_hierarchy_path(paths), str(USE_HIERARCHY)))


def kidled_supported(paths: HostPaths) -> tuple[bool, str]:
    """Whether the kernel has kidled (both switches exist, as upstream checks), and why not."""
    for path in (scan_period_path(paths), use_hierarchy_path(paths)):
        if not os.path.exists(path):
            return False, f"no {path}: kidled is in Alibaba Cloud Linux / Anolis kernels only"
    return True, os.path.dirname(scan_period_path(paths))


def read_scan_period(paths: HostPaths) -> int | None:
    """kidled's current scan period (0: kidled is stopped); None when unreadable."""
    try:
        with open(scan_period_path(paths), "rb") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
