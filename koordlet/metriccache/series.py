"""One series in the metric cache's memory: the newest points raw, older ones in compressed chunks.

Appending is two ``array`` appends onto the *head* (raw int64 ms timestamps and float64 values). Once a block of
:data:`BLOCK_MS` of wall time is over, :meth:`Series.seal` moves the head's points of that block into one *chunk*:
the two columns encoded by :mod:`koordlet.metriccache.chunk`, the timestamp blob shared with every series sealed
with the same timestamps (the collectors stamp every sample of a tick with one time). Blocks are aligned to wall
time, not to a point count, so series sampled together seal identical timestamp columns.

A chunk is five entries of parallel arrays and lists (lowest and highest timestamp, point count, the two blobs): about
40 bytes besides the blobs, instead of a tuple and two Python ints per chunk. A query decodes only the chunks whose
time range meets its window.

Disk bookkeeping lives here too because it is per series: ``flushed`` leading head points and ``c_flushed`` leading
chunks are in sqlite already; ``rewrite`` says the head rows on disk hold points that have since been sealed, so the
next flush replaces them (see :mod:`koordlet.metriccache.disk`).
"""

from __future__ import annotations

import bisect
import functools
import math
import operator
from array import array
from itertools import islice

from koordlet.metriccache.chunk import decode_ts, decode_vals, encode_ts, encode_vals
from koordlet.metriccache.sample import Labels

__all__ = ["BLOCK_MS", "MS_MAX", "MS_MIN", "Series", "take", "to_ms"]

#: Wall time one chunk covers. Two minutes: ~120 points a chunk at 1 s sampling, so the per-chunk overhead is a
#: fraction of a byte per point, while the raw head (at most a block plus the sealing delay) stays small.
BLOCK_MS = 120_000
MS_MIN = -(2**62)
MS_MAX = 2**62


def to_ms(seconds: float) -> int:
    """Seconds -> int milliseconds, clamping infinities so ``query(.., 0, inf)`` works."""
    if math.isinf(seconds):
        return MS_MAX if seconds > 0 else MS_MIN
    return round(seconds * 1000)


@functools.lru_cache(maxsize=64)
def _shared_ts(blob: bytes, n: int) -> array[int]:
    """A timestamp column decoded once for every series that shares it (a query over all pods decodes each block's
    column once, not once per pod); the caller must not modify it. Keyed by the blob's content, whose hash bytes
    objects keep."""
    return decode_ts(blob, n)


class Series:
    """Head (raw, newest) and chunks (sealed, older) of one ``(name, labels)`` series.

    ``in_order`` stays True while every point was appended at or after the previous maximum timestamp: then chunks
    follow each other in time, each sorted, and the head too, so windows are found with ``bisect``. ``lo_ms``: chunk
    points below it are gone from memory even where a chunk straddling it still holds them (dropping whole chunks
    keeps trimming cheap; queries clamp chunks to it; a late point appended to the head below it is held).
    """

    __slots__ = ("name", "labels", "sid", "disk_floor", "max_ms", "in_order", "lo_ms",
                 "ts", "vals", "flushed", "rewrite",
                 "c_lo", "c_hi", "c_n", "c_ts", "c_vals", "c_flushed")

    def __init__(self, name: str, lb: Labels, sid: int | None) -> None:
        self.name = name
        self.labels = lb
        self.sid = sid
        # a series back in memory after eviction: disk serves its points below this (store module docstring)
        self.disk_floor = MS_MIN
        self.max_ms = MS_MIN
        self.in_order = True
        self.lo_ms = MS_MIN
        self.ts: array[int] = array("q")
        self.vals: array[float] = array("d")
        self.flushed = 0
        self.rewrite = False
        self.c_lo: array[int] = array("q")
        self.c_hi: array[int] = array("q")
        self.c_n: array[int] = array("I")
        self.c_ts: list[bytes] = []
        self.c_vals: list[bytes] = []
        self.c_flushed = 0

    # ------------------------------------------------------------------ size

    def count(self) -> int:
        """Points held in memory (head and chunks)."""
        return len(self.ts) + sum(self.c_n)

    def nbytes(self, seen: set[int]) -> int:
        """Bytes of the point buffers (arrays' allocations and blobs; a shared timestamp blob counted once,
        through ``seen``)."""
        size = sum(a.buffer_info()[1] * a.itemsize for a in (self.ts, self.vals, self.c_lo, self.c_hi, self.c_n))
        size += 8 * (len(self.c_ts) + len(self.c_vals))
        for blob in self.c_ts:
            if id(blob) not in seen:
                seen.add(id(blob))
                size += len(blob) + 33
        return size + sum(len(b) + 33 for b in self.c_vals)

    # ------------------------------------------------------------------ seal

    def seal(self, before_ms: int, shared: dict[bytes, bytes], persistent: bool) -> None:
        """Move the head's points older than ``before_ms`` into chunks, one per block they fall in. ``shared``
        maps raw timestamp columns to their blobs for this sealing pass (so series sampled together share one);
        ``persistent``: the head has rows on disk, which must be rewritten if any of them was sealed."""
        ts = self.ts
        if not ts or (ts[0] >= before_ms and self.in_order):
            return
        if self.in_order:
            k = bisect.bisect_left(ts, before_ms)
            i = 0
            while i < k:
                j = bisect.bisect_left(ts, (ts[i] // BLOCK_MS + 1) * BLOCK_MS, i, k)
                self._add_chunk(ts[i:j], self.vals[i:j], shared)
                i = j
            if not k:
                return
            del ts[:k]
            del self.vals[:k]
            sealed_flushed = self.flushed > 0
            self.flushed = max(0, self.flushed - k)
        else:
            groups: dict[int, list[int]] = {}
            for i, t in enumerate(ts):
                if t < before_ms:
                    groups.setdefault(t // BLOCK_MS, []).append(i)
            if not groups:
                return
            vals = self.vals
            taken: set[int] = set()
            for block in sorted(groups):
                idx = groups[block]
                taken.update(idx)
                self._add_chunk(array("q", (ts[i] for i in idx)), array("d", (vals[i] for i in idx)), shared)
            sealed_flushed = min(taken) < self.flushed
            keep = [i for i in range(len(ts)) if i not in taken]
            self.ts = array("q", (ts[i] for i in keep))
            self.vals = array("d", (vals[i] for i in keep))
            self.flushed = sum(1 for i in keep if i < self.flushed)
        if persistent and sealed_flushed:
            self.rewrite = True
            self.flushed = 0

    def _add_chunk(self, ts: array[int], vals: array[float], shared: dict[bytes, bytes]) -> None:
        key = ts.tobytes()
        blob = shared.get(key)
        if blob is None:
            blob = shared[key] = encode_ts(ts)
        self.add_encoded(min(ts), max(ts), len(ts), blob, encode_vals(vals))

    def add_encoded(self, lo: int, hi: int, n: int, ts_blob: bytes, vals_blob: bytes) -> None:
        """Append one chunk as it is (sealed here, or loaded from disk)."""
        if self.c_hi and lo < self.c_hi[-1]:
            self.in_order = False
        self.c_lo.append(lo)
        self.c_hi.append(hi)
        self.c_n.append(n)
        self.c_ts.append(ts_blob)
        self.c_vals.append(vals_blob)

    # ------------------------------------------------------------------ trim

    def drop_before(self, cutoff_ms: int) -> int:
        """Forget points older than ``cutoff_ms``: whole chunks whose newest point is older, and the head's leading
        points; return how many of the forgotten points were not on disk (lost when a flush had failed)."""
        lost = 0
        hi = self.c_hi
        drop = [i for i in range(len(hi)) if hi[i] < cutoff_ms]
        for i in reversed(drop):
            if i >= self.c_flushed:
                lost += self.c_n[i]
            else:
                self.c_flushed -= 1
            for col in (self.c_lo, self.c_hi, self.c_n, self.c_ts, self.c_vals):
                del col[i]
        ts = self.ts
        if self.in_order:
            k = bisect.bisect_left(ts, cutoff_ms)
        else:
            k = 0
            while k < len(ts) and ts[k] < cutoff_ms:
                k += 1
        if k:
            lost += max(0, k - self.flushed)
            del ts[:k]
            del self.vals[:k]
            self.flushed = max(0, self.flushed - k)
        if cutoff_ms > self.lo_ms:
            self.lo_ms = cutoff_ms
        if not self.in_order and (drop or k):
            self.recheck_order()
        return lost

    def recheck_order(self) -> None:
        """Recompute ``in_order``/``max_ms`` after points were removed or bulk-loaded."""
        lo, hi, ts = self.c_lo, self.c_hi, self.ts
        ordered = all(map(operator.le, hi, islice(lo, 1, None))) and all(map(operator.le, ts, islice(ts, 1, None)))
        if ordered and hi and ts:
            ordered = hi[-1] <= ts[0]
        if ordered:
            for i in range(len(lo)):
                t = decode_ts(self.c_ts[i], self.c_n[i])
                if not all(map(operator.le, t, islice(t, 1, None))):
                    ordered = False
                    break
        self.in_order = ordered
        self.max_ms = max(max(hi, default=MS_MIN), max(ts, default=MS_MIN))

    def empty(self) -> bool:
        return not self.ts and not self.c_n

    # ----------------------------------------------------------------- query

    def window(self, s_ms: int, e_ms: int, floor: int, out_ts: array[int], out_vals: array[float]) -> None:
        """Append the points in ``[s_ms, e_ms]`` that disk does not also serve: points below ``floor`` that are on
        disk (flushed head points, persisted chunks) are left to the disk query."""
        if e_ms < s_ms:
            return
        c_s = max(s_ms, self.lo_ms)
        lo_arr, hi_arr = self.c_lo, self.c_hi
        first = bisect.bisect_left(hi_arr, c_s) if self.in_order else 0
        for i in range(first, len(hi_arr)):
            if lo_arr[i] > e_ms:
                if self.in_order:
                    break
                continue
            lower = max(c_s, floor) if i < self.c_flushed else c_s
            if hi_arr[i] < lower:
                continue
            n = self.c_n[i]
            take(_shared_ts(self.c_ts[i], n), decode_vals(self.c_vals[i], n), lower, e_ms, self.in_order, out_ts,
                 out_vals)
        ts = self.ts
        if not ts:
            return
        vals = self.vals
        flushed = self.flushed
        if self.in_order:
            lo = bisect.bisect_left(ts, s_ms)
            hi = bisect.bisect_right(ts, e_ms, lo)
            if flushed and ts[0] < floor:
                lo = max(lo, min(flushed, bisect.bisect_left(ts, floor)))
            if lo < hi:
                out_ts.extend(ts[lo:hi])
                out_vals.extend(vals[lo:hi])
            return
        for i, t in enumerate(ts):
            if s_ms <= t <= e_ms and (t >= floor or i >= flushed):
                out_ts.append(t)
                out_vals.append(vals[i])

    def points(self) -> tuple[array[int], array[float]]:
        """Every point in memory, chunks then head (tests, debugging)."""
        out_ts: array[int] = array("q")
        out_vals: array[float] = array("d")
        self.window(MS_MIN, MS_MAX, MS_MIN, out_ts, out_vals)
        return out_ts, out_vals


def take(ts: array[int], vals: array[float], lo: int, hi: int, ordered: bool, out_ts: array[int],
         out_vals: array[float]) -> None:
    """Append the points of ``ts``/``vals`` with ``lo <= t <= hi``, in their order; ``ordered``: ``ts`` is sorted
    (found by bisection), else any order (a column wholly inside the bounds is taken whole, the usual case of a disk
    chunk in a long window)."""
    if ordered:
        a = bisect.bisect_left(ts, lo)
        b = bisect.bisect_right(ts, hi, a)
        if a == 0 and b == len(ts):
            out_ts.extend(ts)
            out_vals.extend(vals)
        elif a < b:
            out_ts.extend(ts[a:b])
            out_vals.extend(vals[a:b])
        return
    if ts and lo <= min(ts) and max(ts) <= hi:
        out_ts.extend(ts)
        out_vals.extend(vals)
        return
    for t, v in zip(ts, vals, strict=True):
        if lo <= t <= hi:
            out_ts.append(t)
            out_vals.append(v)
