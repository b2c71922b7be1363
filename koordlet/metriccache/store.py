"""The koordlet metric cache: a small local time-series store.

Collectors append ~3,000 samples every second (500 containers x a few
metrics) and reporters query windows of up to 30 minutes and aggregate them; a
few consumers want hours.  Two tiers make that fit in a few MiB of memory and
the 100 MiB disk cap:

* **Memory** holds only the last ``memory_window`` seconds (default 30 min, the
  widest window the reporters ask for), each series as a raw *head* of its
  newest points (two ``array.array`` columns, so an append is O(1) amortised)
  and sealed *chunks* of older two-minute blocks, compressed by
  :mod:`koordlet.metriccache.chunk` (:mod:`koordlet.metriccache.series`): about
  a byte a point instead of 16, a timestamp column shared by every series
  sampled in the same ticks.  Trimming drops whole chunks (in :meth:`trim`,
  never in :meth:`append`).
* **sqlite** (one file, ``<path>/metrics.db``) keeps everything up to
  ``retention`` (default 12 h) so a restart loses nothing beyond the flush
  interval and long windows are still answerable.  Each :meth:`flush` writes,
  in one transaction, the chunks sealed since the last one (the same blobs as
  memory; a shared timestamp column stored once, in ``tscols``) and the heads'
  new points (``head`` rows, replaced by the chunk once their block is sealed).
  Raw chunks older than the memory window are rolled up by :meth:`trim` into
  per-minute summaries (:mod:`koordlet.metriccache.rollup`, ``rollups`` rows):
  12 h of 1 s raw points would not fit the cap on a large node, and nothing
  asks an hours-long window for more than an aggregate, which the rollups give
  (count, avg and last exactly, percentiles within 1 %).  A long window takes
  the whole minutes it holds.  What each of these steps does to the file is
  :mod:`koordlet.metriccache.disk` (open, flush, query) and
  :mod:`koordlet.metriccache.history` (roll-up, retention, ``max_bytes``);
  this module decides when they run, under its lock.

Queries are transparent across the tiers.  The cache keeps a global
*memory floor* (the last trim/open cutoff, in ms) with the invariant:

* every point with ``ts >= floor`` is in memory;
* every point with ``ts < floor`` that is no longer in memory is on disk.

So a query takes from disk only points with ``ts < floor`` and from memory the
points with ``ts >= floor`` plus those not yet flushed; each point is returned
exactly once even with out-of-order (late) samples.  On disk a point is in
exactly one of ``head``, ``chunks`` and ``rollups``: every move between them
is one transaction.

**Bounded memory under pod churn.** By the rules above a deleted pod's series
stayed in memory for the whole window, and every series ever written kept a
``(name, labels) -> id`` entry in memory for as long as sqlite held it (up to
12 h).  So:

* memory holds at most ``max_series`` series (default 10,000: about 10 MB of
  short dead series, or all the live series of a large node).  When a flush or
  trim finds more, *idle* series (no sample for ``_IDLE`` seconds: a deleted
  pod's) whose points are all on disk are evicted, oldest last sample first.
  Chosen over "drop every dead pod's series as soon as it is on disk" because
  it changes nothing while a node is under the cap (the usual case: reporters
  and predictors keep reading from memory), and bounds memory by a number
  rather than by the churn rate.  A series sampled in the last ``_IDLE``
  seconds is never evicted: a node whose live series alone exceed the cap keeps
  them all (logged once).
* nothing is kept in memory for a series that is not in memory: its sqlite id
  is looked up when a query needs its disk points (by ``(name, labels)``
  through the UNIQUE index when the query names every label, else one scan of
  that name's rows) and when it gets a sample again.
* an evicted series stays queryable from sqlite.  A query that matches no
  series in memory reads disk up to its end; one that does, only below the
  floor (as before), so a label subset matching a live *and* an evicted series
  returns the evicted one's points only below the floor (the agent's queries
  name one series, or series sampled together: pods by ``pod_uid``,
  containers by ``container_id``).
  A series that gets a sample after eviction (a pod back, a late sample) starts
  a new memory series with its own floor, one past its newest point on disk,
  below which disk serves it: no point is lost or returned twice.
* without a disk (no path, or the db unusable) eviction drops the oldest idle
  series' data: the cap is worth more than a deleted pod's history.

**A full filesystem** is one state (:class:`koordlet.base.diskfull.DiskFull`, store ``metriccache``), logged when it
begins and when it ends. A flush first checks that the filesystem has room for it (:data:`_SPARE` plus twice what it
writes: its pages go to the WAL, then into the file); when it has not, or sqlite says the disk is full, the cache
deletes its oldest history on disk, beyond the memory window, in small steps
(:func:`koordlet.metriccache.history.reclaim`), and writes what then fits. The rest waits in memory for the next
flush, as after any failed flush: nothing inside the memory window is lost; what ages out of it unwritten is
(counted, and said when the state ends). The state ends at a flush that writes everything and finds room for the
file to grow to ``max_bytes``, so a cache living at the edge of its filesystem does not flap in and out of it (and
one whose filesystem is smaller than ``max_bytes`` stays full: lower it). A file that could not even be opened for
lack of room (the agent started on a full disk) is opened once there is room: memory is written to it and the
memory window loaded back, as a restart would.
"""

from __future__ import annotations

import heapq
import logging
import operator
import os
import sqlite3
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Mapping

from koordlet.base.diskfull import METRIC_CACHE, DiskFull, free_bytes
from koordlet.metriccache import disk, history
from koordlet.metriccache.aggregate import AggregateResult
from koordlet.metriccache.history import ROLLUP_MS
from koordlet.metriccache.rollup import Rollup
from koordlet.metriccache.sample import Labels, Sample, canonical, make_labels, matches
from koordlet.metriccache.series import BLOCK_MS, MS_MIN, Series, to_ms

__all__ = ["MetricCache"]

log = logging.getLogger(__name__)

#: Seconds after a block ends before it is sealed: a tick's samples are appended a moment after their timestamp.
SEAL_GRACE = 5.0
#: Series sealed per hold of the lock (~10 ms of encoding).
_SEAL_BATCH = 200
#: Default cap on series held in memory (see "Bounded series count" in the module docstring).
MAX_SERIES = 10_000
#: A series with no sample for this long may be evicted when over the cap. Longer than every collector period
#: that matters here (the usage, PSI and throttling collectors sample every 1-10 s), so only a deleted pod's,
#: container's or host application's series qualify; a slower live series evicted anyway loses nothing (its next
#: sample starts a new memory series, its past stays on disk).
_IDLE = 30.0
#: Seconds of history written after the first measurement before the first estimate of what ``max_bytes`` holds.
ESTIMATE_AFTER = 600.0
#: Free space a flush leaves on the filesystem besides its own (module docstring): what the report files and the
#: prediction checkpoints beside the cache rewrite.
_SPARE = 256 << 10


class MetricCache:
    """Thread-safe two-tier metric store (see the module docstring for the design).

    One :class:`threading.Lock` guards everything: the collector thread
    appends, HTTP/reporter threads query and a daemon loop flushes/trims.  The
    critical sections are short (array appends, bisect+slice, one sqlite
    transaction) so a single lock is simpler than finer locking and costs
    nothing measurable at 600 samples/s.

    Disk problems never raise out of this class: an unreadable db at open is
    moved aside and replaced; a failing flush/trim/query is logged and the
    cache keeps serving from memory.  The agent must not die because its
    metric history is damaged.  A full filesystem is a state of ``disk_full``
    (the agent's, shared with its other writers), not an error per flush.
    """

    def __init__(
        self,
        path: str | None,
        *,
        retention: float = 12 * 3600,
        memory_window: float = 1800,
        max_bytes: int = 100 * 2**20,
        max_series: int = MAX_SERIES,
        clock: Callable[[], float] = time.time,
        disk_full: DiskFull | None = None,
    ) -> None:
        if retention <= 0 or memory_window <= 0:
            raise ValueError(
                f"retention and memory_window must be > 0: retention={retention} memory_window={memory_window}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0: {max_bytes}")
        if max_series <= 0:
            raise ValueError(f"max_series must be > 0: {max_series}")
        self._max_series = int(max_series)
        self._retention = float(retention)
        self._memory_window = float(memory_window)
        self._max_bytes = int(max_bytes)
        self._clock = clock
        self._disk_full = disk_full or DiskFull()
        # while the filesystem is full: history bytes deleted to make room, points that aged out of memory unwritten
        self._reclaimed = 0
        self._dropped = 0
        self._lock = threading.Lock()
        self._closed = False
        # (name, labels) -> series: the one dict the hot path touches.
        self._series: dict[tuple[str, Labels], Series] = {}
        # name -> labels -> series: so query/series() only look at one metric's series.
        self._by_name: dict[str, dict[Labels, Series]] = {}
        # name -> the label key sets its series have had (a handful): lets a query that names every label find a
        # disk series through the UNIQUE (name, labels) index instead of a scan.
        self._keysets: dict[str, set[frozenset[str]]] = {}
        # name -> one past the newest point of any series of that name evicted so far: a query starting at or
        # after it (and at or after the floor) cannot need the disk (one int per metric name)
        self._evicted_until: dict[str, int] = {}
        self._evicted = 0             # series evicted since start (evictions that lost data: _evicted_lost)
        self._evicted_lost = 0
        self._over_cap_logged = False
        # what the disk holds: seconds of history now, and what max_bytes holds at the rate seen (None: not yet)
        self._held = 0.0
        self._holds: float | None = None
        self._baseline: tuple[float, int] | None = None      # (history, file size) at the first measurement
        self._full_logged = False
        self._floor_ms = MS_MIN
        self._conn: sqlite3.Connection | None = None
        # the roll-up's own connection (opened at its first step): it reads, summarises and writes outside the lock,
        # and its transactions are isolated from the queries on _conn
        self._history: sqlite3.Connection | None = None
        self._db_path: str | None = None
        self._dir = "" if path is None else os.fspath(path)
        if path is not None:
            self._disk_full.watch(METRIC_CACHE, self._dir, "the memory window stays in memory and the oldest "
                                  "history on disk makes room; writing resumes by itself when there is space")
            self._db_path, self._conn, loaded = disk.open_db(self._dir, clock, self._window(), self._no_room)
            self._take(loaded)

    # ------------------------------------------------------------------ open

    def _window(self) -> float:
        """Seconds of points memory holds (the memory window, unless the retention is shorter)."""
        return min(self._memory_window, self._retention)

    def _no_room(self, error: BaseException) -> bool:
        return self._disk_full.failed(METRIC_CACHE, error)

    def _take(self, loaded: disk.Loaded) -> None:
        """Memory as opening the file left it: its series' label key sets, the memory window's series, the floor."""
        for name, keys in loaded.keysets.items():
            self._keysets.setdefault(name, set()).update(keys)
        for ser in loaded.series:
            self._register(ser)
        self._floor_ms = loaded.floor_ms

    def _waiting_for_room(self) -> bool:
        """The file could not be opened for lack of room: the cache runs from memory and opens it once there is
        room (:meth:`_open_later`)."""
        return self._conn is None and bool(self._dir) and not self._closed \
            and self._disk_full.is_full(METRIC_CACHE)

    def _open_later(self) -> bool:
        """Open the file that had no room when the cache started, now that it may have: write what memory holds,
        then load the memory window back from it, as a restart would, so the cache is what it would have been had
        the disk had room all along. False while there is still too little."""
        everything = list(self._series.values())
        need = _SPARE + 2 * disk.write_size(everything)
        free = free_bytes(self._dir)
        if free is not None and free < need:
            return False
        db_path, conn, _ = disk.open_db(self._dir, self._clock, 0.0, self._no_room)
        if conn is None or db_path is None:
            return False
        try:
            disk.write(conn, everything)
            disk.checkpoint(conn)
            loaded = disk.load(conn, db_path, self._clock, self._window())
        except sqlite3.Error as e:
            disk.rollback(conn)
            conn.close()
            self._failed("open", e)
            return False
        self._series, self._by_name, self._evicted_until = {}, {}, {}
        self._db_path, self._conn = db_path, conn
        self._take(loaded)
        self._end_full(need)
        return True

    def _new_series(self, name: str, lb: Labels) -> Series:
        ser = Series(name, lb, None)
        if self._conn is not None:
            self._attach_disk(ser)
        keys = self._keysets.setdefault(name, set())
        if len(keys) < 8:                 # a metric's series share one key set; more is a caller's bug, not growth
            keys.add(frozenset(k for k, _ in lb))
        self._register(ser)
        return ser

    def _register(self, ser: Series) -> None:
        self._series[(ser.name, ser.labels)] = ser
        self._by_name.setdefault(ser.name, {})[ser.labels] = ser

    def _attach_disk(self, ser: Series) -> None:
        """A new memory series that sqlite already has (a pod back after eviction, a late sample, a restart):
        its id, and its own floor when disk has points at or above the global floor. Two indexed lookups, once per
        new series."""
        assert self._conn is not None
        ser.sid, end = disk.lookup(self._conn, self._db_path, ser.name, ser.labels)
        if end is not None and end >= self._floor_ms:
            ser.disk_floor = end + 1

    def _forget(self, ser: Series) -> None:
        del self._series[(ser.name, ser.labels)]
        per_name = self._by_name[ser.name]
        del per_name[ser.labels]
        if not per_name:
            del self._by_name[ser.name]

    # ---------------------------------------------------------------- append

    def append(self, samples: Iterable[Sample]) -> None:
        """Add samples (hot path: one dict lookup and two array appends each).

        Out-of-order samples are accepted and kept in arrival order; they only
        flip the series to the slower unsorted code path.  After :meth:`close`
        samples still go to memory (a collector racing shutdown must not
        crash) but are no longer persisted.
        """
        with self._lock:
            series = self._series
            for name, lb, ts, value in samples:
                try:
                    ser = series.get((name, lb))
                except TypeError:          # labels given as lists: put in canonical form below
                    ser = None
                if ser is None:
                    lb = canonical(lb)
                    ser = series.get((name, lb)) or self._new_series(name, lb)
                t = round(ts * 1000)
                if t >= ser.max_ms:
                    ser.max_ms = t
                else:
                    ser.in_order = False
                ser.ts.append(t)
                ser.vals.append(value)

    # ----------------------------------------------------------------- query

    def query(self, name: str, labels: Mapping[str, str] | None, start: float, end: float) -> AggregateResult:
        """Points of every series of ``name`` whose labels include ``labels``, in ``[start, end]``.

        Matching series are concatenated (upstream behaviour), each as its disk
        part then its memory part, series ordered by labels for determinism.
        The disk is consulted only when ``start`` is older than the memory
        floor, so the usual reporter windows never touch sqlite.
        """
        s_ms = to_ms(start)
        e_ms = to_ms(end)
        out_ts = array("q")
        out_vals = array("d")
        if e_ms < s_ms:
            return AggregateResult(out_ts, out_vals)
        want = dict(labels) if labels else None
        with self._lock:
            per_name = self._by_name.get(name, {})
            if want and self._keysets.get(name) == {frozenset(want)} and all(isinstance(v, str) for v in want.values()):
                # every label named (a pod's or a container's usage): one dict lookup. A scan here cost
                # O(series) per query, i.e. O(pods x series) per QoS cycle: under pod churn, with the cache at its
                # series cap, the agent's CPU grew with every deleted pod still in the window (tests/soak)
                lb = make_labels(want)
                mem = {lb: per_name[lb]} if lb in per_name else {}
            else:
                mem = {lb: ser for lb, ser in per_name.items() if matches(lb, want)}
            on_disk: dict[Labels, tuple[array[int], array[float]]] = {}
            summaries: list[Rollup] = []
            floor = self._floor_ms
            # disk: below the floor as always; above it only for evicted series: when no memory series matches and
            # one of this name was evicted with points in the window, or a matching one is back after eviction
            if self._conn is not None and (
                    s_ms < floor
                    or (not mem and s_ms < self._evicted_until.get(name, MS_MIN))
                    or any(ser.disk_floor > s_ms for ser in mem.values())):
                ids: dict[int, Labels] = {}
                upper: dict[int, int] = {}
                for sid, lb in disk.matching_series(self._conn, self._db_path, name, want,
                                                    self._keysets.get(name)).items():
                    ser = mem.get(lb)
                    top = e_ms if ser is None else min(e_ms, max(floor, ser.disk_floor) - 1)
                    if top >= s_ms:
                        ids[sid], upper[sid] = lb, top
                if ids:
                    on_disk = disk.query_points(self._conn, self._db_path, ids, s_ms, upper)
                    summaries = disk.query_rollups(self._conn, self._db_path, ids, s_ms, upper)
            for lb in sorted(mem.keys() | on_disk.keys()):
                part = on_disk.get(lb)
                if part is not None:
                    out_ts.extend(part[0])
                    out_vals.extend(part[1])
                ser = mem.get(lb)
                if ser is not None:
                    ser.window(s_ms, e_ms, max(floor, ser.disk_floor), out_ts, out_vals)
        return AggregateResult(out_ts, out_vals, summaries)

    def series_count(self) -> int:
        """Series held in memory (the ``koordlet_metric_cache_series`` gauge): live pods × metric kinds, plus
        deleted pods' series while under ``max_series``."""
        return len(self._series)

    def memory_usage(self) -> tuple[int, int]:
        """(samples held in memory, bytes of their buffers: the heads' arrays as allocated, the chunks' arrays and
        blobs, a timestamp blob shared by many series counted once)."""
        with self._lock:
            seen: set[int] = set()
            return (sum(ser.count() for ser in self._series.values()),
                    sum(ser.nbytes(seen) for ser in self._series.values()))

    def history(self) -> tuple[float, float | None]:
        """(seconds of history on disk now, seconds of history the disk holds at the write rate seen so far, capped
        at ``retention``; None until :data:`ESTIMATE_AFTER` seconds are on disk). Updated by :meth:`trim`. When
        ``max_bytes`` is what limits the history (many containers), the second figure is below the retention and
        says how far back the cache really reaches."""
        with self._lock:
            return self._held, self._holds

    def evicted_count(self) -> tuple[int, int]:
        """(series evicted from memory over the cap since start, of which dropped without a copy on disk)."""
        with self._lock:
            return self._evicted, self._evicted_lost

    def series(self, name: str) -> list[dict[str, str]]:
        """Label sets currently in memory for ``name`` (copies, sorted); evicted (idle) series are not listed."""
        with self._lock:
            return [dict(lb) for lb in sorted(self._by_name.get(name, {}))]

    # ----------------------------------------------------------- persistence

    def flush(self) -> None:
        """Seal the blocks that are over, then write every not-yet-persisted chunk and head point to sqlite in one
        transaction.

        On failure the points stay unflushed and the next flush retries them.
        Then, if memory holds more than ``max_series`` series, idle ones are
        evicted (module docstring).
        """
        self._seal()
        with self._lock:
            persisted = self._flush_locked()
            if persisted:
                self._evict_locked()

    def _seal(self) -> None:
        """Seal, in every series, the points of blocks that ended at least :data:`SEAL_GRACE` seconds ago.

        Encoding takes ~50 µs a series, so at a block's end sealing every series of a large node takes a good part
        of a second: the lock is taken for :data:`_SEAL_BATCH` series at a time, so collectors' appends and
        reporters' queries wait for one batch, not for all of them."""
        before = to_ms(self._clock() - SEAL_GRACE) // BLOCK_MS * BLOCK_MS
        shared: dict[bytes, bytes] = {}
        with self._lock:
            todo = [ser for ser in self._series.values() if ser.ts and (ser.ts[0] < before or not ser.in_order)]
            persistent = self._conn is not None
        for i in range(0, len(todo), _SEAL_BATCH):
            with self._lock:
                for ser in todo[i : i + _SEAL_BATCH]:
                    ser.seal(before, shared, persistent)

    def _flush_locked(self) -> bool:
        """Write what memory holds that sqlite lacks; whether all of it is written (a full filesystem may let only
        part of it, or none, be written: the rest waits for the next flush)."""
        conn = self._conn
        if conn is None:
            return self._open_later() if self._waiting_for_room() else True
        pending = [s for s in self._series.values()
                   if s.flushed < len(s.ts) or s.c_flushed < len(s.c_n) or s.rewrite]
        need = _SPARE + 2 * disk.write_size(pending)
        fits = self._fitting(pending, need)
        if fits:
            try:
                new_ids = disk.write(conn, fits)
            except sqlite3.Error as e:
                disk.rollback(conn)
                self._failed("flush", e)
                if self._disk_full.is_full(METRIC_CACHE):
                    self._reclaim(2 * need)        # for the next flush
                return False
            for ser, sid in new_ids:
                ser.sid = sid
            for ser in fits:
                ser.flushed = len(ser.ts)
                ser.c_flushed = len(ser.c_n)
                ser.rewrite = False
        try:
            disk.checkpoint(conn)
            if self._disk_full.is_full(METRIC_CACHE) and len(fits) == len(pending):
                self._end_full(need)
        except sqlite3.Error as e:
            self._failed("checkpoint", e)
        return len(fits) == len(pending)

    def _fitting(self, pending: list[Series], need: int) -> list[Series]:
        """The pending series a flush can write: all of them while the filesystem has ``need`` bytes free. Short of
        that the cache is full (logged once): it reclaims its oldest history to make twice that room, and if that
        left too little, only the series whose points fit in what is free go now."""
        free = free_bytes(self._dir)
        if free is None or free >= need:
            return pending
        self._disk_full.begin(METRIC_CACHE, f"free={free} need={need}")
        self._reclaim(2 * need - free)
        free = free_bytes(self._dir)
        if free is None or free >= need:
            return pending
        budget = (free - _SPARE) // 2
        fits = []
        for ser in pending:
            budget -= disk.write_size((ser,))
            if budget < 0:
                break
            fits.append(ser)
        return fits

    def _reclaim(self, goal: int) -> None:
        """Delete about ``goal`` bytes of the oldest history beyond the memory window (a full filesystem)."""
        assert self._conn is not None
        try:
            freed = history.reclaim(self._conn, self._floor_ms, goal)
        except sqlite3.Error as e:
            self._failed("reclaim", e)
            return
        if freed:
            self._reclaimed += freed
            log.debug("metric cache reclaimed history path=%s bytes=%d goal=%d", self._db_path, freed, goal)

    def _end_full(self, need: int) -> None:
        """The full state ends once the filesystem has room for a flush and for the file to grow to ``max_bytes``:
        what reclaiming frees shrinks the file by as much, so only room made by others (or a larger filesystem)
        ends it, and a cache living at the edge of its filesystem does not go in and out of the state at every
        reclaim."""
        assert self._conn is not None
        free = free_bytes(self._dir)
        if free is not None and free >= need + max(0, self._max_bytes - history.size(self._conn)):
            self._disk_full.wrote(METRIC_CACHE, f" reclaimed_bytes={self._reclaimed} dropped_points={self._dropped}")
            self._reclaimed = self._dropped = 0

    def _failed(self, step: str, e: sqlite3.Error) -> None:
        """A disk step failed: part of the full state when the filesystem has no room (silent), else logged."""
        if not self._disk_full.failed(METRIC_CACHE, e):
            log.error("metric cache %s failed path=%s error=%s; will retry", step, self._db_path, e)

    def trim(self) -> None:
        """Age data out of memory and disk and enforce ``max_bytes``.

        Memory: chunks whose newest point is older than ``now - memory_window``
        and the head's older points (flushed first, so they remain on disk) are
        forgotten; empty series too.  Disk: rows whose newest point is older
        than ``now - retention`` are deleted, then the oldest until the file
        fits ``max_bytes``.  Meant to run from the periodic flush loop.
        """
        self._seal()
        with self._lock:
            now = self._clock()
            cutoff = to_ms(now - self._window())
            persisted = self._flush_locked()
            waiting = self._waiting_for_room()
            lost = 0
            for ser in list(self._series.values()):
                dropped = ser.drop_before(cutoff)
                if self._conn is not None or waiting:
                    # only when flushing failed: points forgotten that were never written are gone for good — we
                    # trade history for RSS
                    lost += dropped
                if ser.empty():
                    self._forget(ser)
            if cutoff > self._floor_ms:
                self._floor_ms = cutoff
            if persisted or self._conn is None:
                self._evict_locked()
            if lost and (waiting or self._disk_full.is_full(METRIC_CACHE)):
                self._dropped += lost              # said when the full state ends
            elif lost:
                log.warning("metric cache dropped unpersisted points path=%s points=%d", self._db_path, lost)
            full = False
            if self._conn is not None:
                try:
                    full = history.trim(self._conn, self._db_path, to_ms(now - self._retention), self._max_bytes,
                                        self._series.values())
                except sqlite3.Error as e:
                    self._failed("disk trim", e)
        if self._conn is not None:
            horizon = to_ms(now - self._memory_window) // ROLLUP_MS * ROLLUP_MS
            try:
                history.roll_up(self._history_conn, self._db_path, horizon)
            except sqlite3.Error as e:
                self._failed("roll-up", e)
            # measured after the roll-up, when the raw part on disk is at its smallest each time: measured before
            # it, the raw part's ten-minute sawtooth (a few MiB at 500 containers) swamps the rollups' growth
            with self._lock:
                if self._conn is not None:
                    try:
                        disk.incremental_vacuum(self._conn)
                        disk.checkpoint(self._conn)
                        self._measure_history(now, full)
                    except sqlite3.Error as e:
                        self._failed("history measure", e)

    def _history_conn(self) -> sqlite3.Connection:
        if self._history is None:
            assert self._db_path is not None
            self._history = sqlite3.connect(self._db_path, isolation_level=None, check_same_thread=False,
                                            timeout=5.0)
            self._history.execute("PRAGMA synchronous=NORMAL")
            self._history.execute(f"PRAGMA journal_size_limit={disk.WAL_KEEP}").fetchall()   # per connection
            self._history.execute("PRAGMA cache_size=-512")        # KiB: it reads each chunk once, in order
        return self._history

    def _evict_locked(self) -> None:
        """Evict idle series, oldest last sample first, until memory holds at most ``max_series`` (see the module
        docstring). Called after a successful flush, so with a disk every candidate's points are all in sqlite."""
        excess = len(self._series) - self._max_series
        if excess <= 0:
            return
        idle_before = to_ms(self._clock() - _IDLE)
        on_disk = self._conn is not None
        candidates = [ser for ser in self._series.values() if ser.max_ms < idle_before
                      and (not on_disk or (ser.sid is not None and ser.flushed == len(ser.ts)
                                           and ser.c_flushed == len(ser.c_n) and not ser.rewrite))]
        victims = heapq.nsmallest(excess, candidates, key=operator.attrgetter("max_ms"))
        until = self._evicted_until
        for ser in victims:
            self._forget(ser)
            if ser.max_ms >= until.get(ser.name, MS_MIN):
                until[ser.name] = ser.max_ms + 1
        if not on_disk:
            self._evicted_lost += len(victims)
        self._evicted += len(victims)
        if len(victims) < excess and not self._over_cap_logged:
            self._over_cap_logged = True       # once: with this many live series it stays so every flush
            log.warning("metric cache over max_series with series sampled in the last %.0fs series=%d "
                        "max_series=%d; those are kept", _IDLE, len(self._series), self._max_series)
        if victims:
            log.debug("metric cache evicted idle series=%d left=%d on_disk=%s", len(victims), len(self._series),
                      on_disk)

    def _measure_history(self, now: float, full: bool) -> None:
        """How far back the disk reaches, and how far ``max_bytes`` lets it reach at the rate data arrives: the
        file's growth per second of history since the first measurement (its fixed part, the schema and a page or
        two per series, does not grow), extrapolated to ``max_bytes``."""
        assert self._conn is not None
        oldest = history.oldest_ms(self._conn)
        self._held = max(0.0, now - oldest / 1000) if oldest is not None else 0.0
        size = history.size(self._conn)
        if full or self._full_logged:
            # at the cap what it holds is what is on disk (each trim deletes down to 90 % of max_bytes, and a
            # roll-up frees a few percent more, so scaling by the file's size would only add that sawtooth)
            self._holds = min(self._retention, self._held)
            if not self._full_logged:
                self._full_logged = True
                log.warning("metric cache full: max_bytes holds %.1fh of history, not the %.1fh retention "
                            "path=%s max_bytes=%d", self._holds / 3600, self._retention / 3600, self._db_path,
                            self._max_bytes)
            return
        if self._baseline is None:
            # from when roll-ups have begun: before, every second of history is raw and grows the file faster
            if self._held > self._memory_window + ROLLUP_MS / 1000:
                self._baseline = (self._held, size)
            return
        held0, size0 = self._baseline
        if self._held - held0 < ESTIMATE_AFTER or size <= size0:
            return
        rate = (size - size0) / (self._held - held0)
        first = self._holds is None
        self._holds = min(self._retention, self._held + (self._max_bytes - size) / rate)
        if first:
            log.info("metric cache holds about %.1fh of history at the current rate (retention %.1fh, "
                     "max_bytes %d)%s", self._holds / 3600, self._retention / 3600, self._max_bytes,
                     "" if self._holds >= self._retention else "; max_bytes, not the retention, limits history")

    def close(self) -> None:
        """Flush and close the db; idempotent (called from SIGTERM and from finally blocks)."""
        with self._lock:
            if self._closed:
                return
            self._flush_locked()           # also opens a file that waited for room, if there is some now
            self._closed = True
            if self._conn is not None:
                try:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                except sqlite3.Error as e:
                    self._failed("checkpoint at close", e)
                self._conn.close()
                self._conn = None
            if self._history is not None:
                self._history.close()
                self._history = None
            # Disk is gone: memory must now answer for everything it still holds.
            self._floor_ms = MS_MIN

