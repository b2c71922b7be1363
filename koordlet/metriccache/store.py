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
  the whole minutes it holds.

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
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import operator
import os
import sqlite3
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple

from koordlet.metriccache import rollup
from koordlet.metriccache.aggregate import AggregateResult
from koordlet.metriccache.chunk import decode_ts, decode_vals, raw
from koordlet.metriccache.series import BLOCK_MS, MS_MAX, MS_MIN, Series

__all__ = ["Labels", "MetricCache", "Sample", "labels", "make_labels"]

log = logging.getLogger(__name__)

#: A label set: ``(key, value)`` pairs sorted by key, so that equal label sets
#: are equal, hashable tuples and can key a dict directly on the hot path.
Labels = tuple[tuple[str, str], ...]

_DB_FILE = "metrics.db"
_SCHEMA_VERSION = 2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    UNIQUE (name, labels)
);
CREATE TABLE IF NOT EXISTS tscols (
    id INTEGER PRIMARY KEY,
    ts BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    series_id INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    n INTEGER NOT NULL,
    ts_id INTEGER NOT NULL,
    vals BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_series_end ON chunks (series_id, end_ms);
CREATE INDEX IF NOT EXISTS chunks_end ON chunks (end_ms);
CREATE INDEX IF NOT EXISTS chunks_ts ON chunks (ts_id);
CREATE TABLE IF NOT EXISTS head (
    series_id INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    n INTEGER NOT NULL,
    ts BLOB NOT NULL,
    vals BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS head_series_end ON head (series_id, end_ms);
CREATE TABLE IF NOT EXISTS rollups (
    series_id INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    n INTEGER NOT NULL,
    blob BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS rollups_series_end ON rollups (series_id, end_ms);
CREATE INDEX IF NOT EXISTS rollups_end ON rollups (end_ms);
"""
#: The tables that hold points, each row a (series_id, start_ms, end_ms, n, ...) range.
_POINT_TABLES = ("chunks", "head", "rollups")
#: What deleting one row of a table frees, roughly: its blobs, the row's header and its index entries (a chunk's
#: shared timestamp column is not counted: other series' chunks may still use it).
_ROW_BYTES = {"chunks": "length(vals) + 80", "head": "length(ts) + length(vals) + 60",
              "rollups": "length(blob) + 60"}
#: Raw chunks older than the memory window are rolled up into per-minute summaries (:mod:`.rollup`), one row per
#: series per this span: ten minutes of raw history at most beyond the memory window, ~10 minute rollups a row.
ROLLUP_MS = 600_000
#: Series rolled up per transaction (bounds what one roll-up step holds decoded: ~64 x 600 points).
_ROLLUP_BATCH = 64
# sqlite's default SQLITE_MAX_VARIABLE_NUMBER was 999 before 3.32; stay below it.
_IN_BATCH = 500
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


def make_labels(mapping: Mapping[str, str]) -> Labels:
    """Canonical :data:`Labels` for a mapping (sorted by key)."""
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))


def labels(**kv: str) -> Labels:
    """``labels(pod_uid="abc")`` -> ``(("pod_uid", "abc"),)``."""
    return make_labels(kv)


class Sample(NamedTuple):
    """One observation of one series.

    The cache keys series by ``(name, labels)`` with ``labels`` canonical (sorted by key, as :func:`make_labels`
    builds them, and as every collector builds its own): a sample is looked up as given, and only a lookup that
    misses puts its labels in canonical form. A named tuple, not a dataclass: collectors make ~4,000 a second on a
    node of 500 containers, and one costs half a dataclass's construction.
    """

    name: str
    labels: Labels
    ts: float
    value: float


def _canonical(lb: Iterable[tuple[str, str]]) -> Labels:
    """``lb`` sorted by key, as a tuple of pairs (itself when it already is one)."""
    if type(lb) is tuple and all(type(p) is tuple for p in lb) and \
            all(lb[i][0] <= lb[i + 1][0] for i in range(len(lb) - 1)):
        return lb
    return tuple(sorted((str(k), str(v)) for k, v in lb))


def _to_ms(seconds: float) -> int:
    """Seconds -> int milliseconds, clamping infinities so ``query(.., 0, inf)`` works."""
    if math.isinf(seconds):
        return MS_MAX if seconds > 0 else MS_MIN
    return round(seconds * 1000)


def _labels_json(lb: Labels) -> str:
    """Canonical JSON (sorted keys, no spaces): the UNIQUE(name, labels) key in sqlite."""
    return json.dumps(dict(lb), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _incremental_vacuum(conn: sqlite3.Connection) -> None:
    """Return all free pages to the filesystem.

    ``conn.execute("PRAGMA incremental_vacuum")`` steps the statement only once
    and so frees a single page (the pragma yields no rows, so ``fetchall()``
    doesn't help); ``executescript`` runs it to completion.  Must be called
    outside an explicit transaction (executescript commits first).
    """
    conn.executescript("PRAGMA incremental_vacuum")


def _filter_into(ts: array[int], vals: array[float], lo: int, hi: int, out_ts: array[int],
                 out_vals: array[float]) -> None:
    """Append the points with ``lo <= t <= hi`` (any order)."""
    if ts and lo <= min(ts) and max(ts) <= hi:
        out_ts.extend(ts)
        out_vals.extend(vals)
        return
    for t, v in zip(ts, vals, strict=True):
        if lo <= t <= hi:
            out_ts.append(t)
            out_vals.append(v)


def _oldest_rows(conn: sqlite3.Connection, table: str) -> Iterator[tuple[int, str, int, int]]:
    """(end_ms, table, rowid, bytes freed by deleting it) of a point table's rows, oldest first."""
    for rowid, end, nbytes in conn.execute(f"SELECT rowid, end_ms, {_ROW_BYTES[table]} FROM {table} ORDER BY end_ms"):
        yield end, table, rowid, nbytes


def _rollup_rows(sid: int, ts: array[int], vals: array[float]) -> Iterator[tuple[int, int, int, int, bytes]]:
    """``rollups`` rows (series_id, start_ms, end_ms, n, blob) of one series' points: their minute rollups, one row
    per :data:`ROLLUP_MS` span."""
    minutes = rollup.summarize(ts, vals)
    i = 0
    while i < len(minutes):
        span = minutes[i].start_ms // ROLLUP_MS
        j = i + 1
        while j < len(minutes) and minutes[j].start_ms // ROLLUP_MS == span:
            j += 1
        run = minutes[i:j]
        yield (sid, min(r.first_ts for r in run), max(r.last_ts for r in run), sum(r.count for r in run),
               rollup.encode(run))
        i = j


def _drop_unused_tscols(conn: sqlite3.Connection) -> None:
    """Delete the shared timestamp columns no chunk refers to any more (inside the caller's transaction)."""
    conn.execute("DELETE FROM tscols WHERE NOT EXISTS (SELECT 1 FROM chunks WHERE chunks.ts_id = tscols.id)")


def _matches(lb: Labels, want: Mapping[str, str] | None) -> bool:
    """Subset match: the series has every requested pair (None/{} matches all)."""
    if not want:
        return True
    have = dict(lb)
    # a plain loop: this runs once per (query, series), and all() over a generator costs 2.5x here
    for k, v in want.items():  # noqa: SIM110
        if have.get(k) != v:
            return False
    return True


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
    metric history is damaged.
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
        if path is not None:
            self._open_db(os.fspath(path))

    # ------------------------------------------------------------------ open

    def _open_db(self, directory: str) -> None:
        """Open (or create) ``<directory>/metrics.db`` and load the memory window from it.

        A damaged file is moved aside (``metrics.db.corrupt-<unix ts>``) and a
        fresh one created; if even that fails the cache runs memory-only.
        """
        try:
            created = not os.path.isdir(directory)
            os.makedirs(directory, mode=0o700, exist_ok=True)
            if created:
                os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask
        except OSError as e:
            log.error("metric cache directory unusable path=%s error=%s; running memory-only", directory, e)
            return
        db_path = os.path.join(directory, _DB_FILE)
        self._db_path = db_path
        try:
            self._conn = self._connect_and_load(db_path)
            return
        except sqlite3.OperationalError as e:
            # Locked by another process, unopenable, I/O error: the file may
            # well be healthy, so don't move it aside; run without history.
            self._reset_memory()
            log.error("metric cache db cannot be opened path=%s error=%s; running memory-only", db_path, e)
            return
        except (sqlite3.Error, ValueError, TypeError, KeyError, OverflowError) as e:
            error = e
        self._reset_memory()
        aside = f"{db_path}.corrupt-{int(self._clock())}"
        try:
            os.replace(db_path, aside)
            if os.path.exists(db_path + "-wal"):
                os.replace(db_path + "-wal", aside + "-wal")
            if os.path.exists(db_path + "-shm"):
                os.remove(db_path + "-shm")
        except OSError as e:
            log.error(
                "metric cache db unreadable path=%s error=%s; cannot move it aside (%s); running memory-only",
                db_path, error, e,
            )
            return
        log.error("metric cache db unreadable path=%s error=%s moved_to=%s; starting empty", db_path, error, aside)
        try:
            self._conn = self._connect_and_load(db_path)
        except (sqlite3.Error, ValueError, OSError) as e:
            self._reset_memory()
            self._conn = None
            log.error("metric cache db unusable path=%s error=%s; running memory-only", db_path, e)

    def _reset_memory(self) -> None:
        self._series.clear()
        self._by_name.clear()
        self._keysets.clear()
        self._evicted_until.clear()
        self._floor_ms = MS_MIN

    def _connect_and_load(self, db_path: str) -> sqlite3.Connection:
        """Connect, configure, check and load; closes the connection on any failure.

        * WAL + ``synchronous=NORMAL``: commits don't fsync (only checkpoints
          do); a power cut can lose the last flush but never corrupts the file,
          which is the right trade for advisory metrics.
        * ``auto_vacuum=INCREMENTAL`` (must be set before the first table is
          created): lets :meth:`trim` hand freed pages back to the filesystem
          so ``max_bytes`` bounds the real file size.
        * ``quick_check`` at open turns silent damage into the move-aside path
          instead of errors at 3 a.m. in the middle of a query.
        """
        conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False, timeout=5.0)
        try:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            conn.execute("PRAGMA synchronous=NORMAL")
            check = conn.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise sqlite3.DatabaseError(f"quick_check failed: {check[:3]}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 1:
                # an older agent's raw format: its history cannot be read as chunks, so it is dropped once
                log.warning("metric cache file of an older format dropped path=%s version=1", db_path)
                conn.executescript("DROP TABLE IF EXISTS chunks; DROP TABLE IF EXISTS series; VACUUM;")
            elif version not in (0, _SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"unsupported schema version {version}")
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            self._load(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _load(self, conn: sqlite3.Connection) -> None:
        """Bring every on-disk point newer than ``now - memory_window`` into memory: chunks as they are (each
        decoded once to check it), head rows into the head.

        Setting the floor to the same cutoff establishes the floor invariant
        for the restarted process: newer points are in memory, older ones on
        disk. A chunk that does not decode is deleted and costs only its own
        points (one log line for all of them).
        """
        by_id: dict[int, tuple[str, Labels]] = {}
        for sid, name, lb_json in conn.execute("SELECT id, name, labels FROM series"):
            lb = make_labels(json.loads(lb_json))
            by_id[sid] = (name, lb)
            self._keysets.setdefault(name, set()).add(frozenset(k for k, _ in lb))
        cutoff = _to_ms(self._clock() - min(self._memory_window, self._retention))
        loaded: dict[int, Series] = {}
        bad: list[tuple[str, int]] = []
        shared: dict[int, bytes] = {}

        def series_of(sid: int) -> Series | None:
            ser = loaded.get(sid)
            if ser is None and sid in by_id:
                name, lb = by_id[sid]
                ser = loaded[sid] = self._new_series(name, lb, sid)
            return ser

        rows = conn.execute(
            "SELECT c.rowid, c.series_id, c.start_ms, c.end_ms, c.n, c.ts_id, t.ts, c.vals FROM chunks c "
            "JOIN tscols t ON t.id = c.ts_id WHERE c.end_ms >= ? ORDER BY c.series_id, c.start_ms, c.rowid",
            (cutoff,))
        for rowid, sid, lo, hi, n, ts_id, ts_blob, vals_blob in rows:
            ser = series_of(sid)
            if ser is None:
                continue                                  # orphan chunk; harmless, retention removes it
            try:
                decode_ts(ts_blob, n)
                decode_vals(vals_blob, n)
            except ValueError:
                bad.append(("chunks", rowid))
                continue
            ser.add_encoded(lo, hi, n, shared.setdefault(ts_id, ts_blob), vals_blob)
            ser.c_flushed += 1
        for rowid, sid, n, ts_blob, vals_blob in conn.execute(
                "SELECT rowid, series_id, n, ts, vals FROM head ORDER BY series_id, rowid"):
            ser = series_of(sid)
            if ser is None:
                continue
            try:
                ts, vals = decode_ts(ts_blob, n), decode_vals(vals_blob, n)
            except ValueError:
                bad.append(("head", rowid))
                continue
            ser.ts.extend(ts)
            ser.vals.extend(vals)
            ser.flushed += n
        for ser in loaded.values():
            ser.recheck_order()
            ser.lo_ms = cutoff
            if ser.empty():
                self._forget(ser)
        if bad:
            log.error("metric cache chunks unreadable path=%s chunks=%d; deleted, the rest loaded", self._db_path,
                      len(bad))
            for table in _POINT_TABLES:
                conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for t, r in bad if t == table])
        self._floor_ms = cutoff

    def _new_series(self, name: str, lb: Labels, sid: int | None = None) -> Series:
        ser = Series(name, lb, sid)
        if sid is None and self._conn is not None:
            self._attach_disk(ser)
        keys = self._keysets.setdefault(name, set())
        if len(keys) < 8:                 # a metric's series share one key set; more is a caller's bug, not growth
            keys.add(frozenset(k for k, _ in lb))
        self._series[(name, lb)] = ser
        self._by_name.setdefault(name, {})[lb] = ser
        return ser

    def _attach_disk(self, ser: Series) -> None:
        """A new memory series that sqlite already has (a pod back after eviction, a late sample, a restart):
        its id, and its own floor when disk has points at or above the global floor. Two indexed lookups, once per
        new series."""
        assert self._conn is not None
        try:
            row = self._conn.execute("SELECT id FROM series WHERE name = ? AND labels = ?",
                                     (ser.name, _labels_json(ser.labels))).fetchone()
            if row is None:
                return
            ser.sid = row[0]
            end = self._conn.execute("SELECT max(end_ms) FROM chunks WHERE series_id = ?", (ser.sid,)).fetchone()[0]
        except sqlite3.Error as e:
            log.error("metric cache series lookup failed path=%s error=%s", self._db_path, e)
            return
        if end is not None and end >= self._floor_ms:
            ser.disk_floor = end + 1

    def _disk_series(self, name: str, want: dict[str, str] | None) -> dict[int, Labels]:
        """{sqlite id: labels} of the series on disk named ``name`` whose labels include ``want``."""
        assert self._conn is not None
        keysets = self._keysets.get(name)
        if not keysets:
            return {}
        try:
            if want and keysets == {frozenset(want)}:         # every label named: one index lookup
                lb = make_labels(want)
                row = self._conn.execute("SELECT id FROM series WHERE name = ? AND labels = ?",
                                         (name, _labels_json(lb))).fetchone()
                return {row[0]: lb} if row is not None else {}
            sql = "SELECT id, labels FROM series WHERE name = ?"
            params: list[str] = [name]
            for k, v in (want or {}).items():
                if '"' not in k and "\\" not in k:            # else left to _matches below
                    sql += " AND json_extract(labels, ?) = ?"
                    params += [f'$."{k}"', v]
            out: dict[int, Labels] = {}
            for sid, lb_json in self._conn.execute(sql, params):
                lb = make_labels(json.loads(lb_json))
                if _matches(lb, want):
                    out[sid] = lb
            return out
        except sqlite3.Error as e:
            log.error("metric cache disk lookup failed path=%s error=%s; answering from memory", self._db_path, e)
            return {}

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
                    lb = _canonical(lb)
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
        s_ms = _to_ms(start)
        e_ms = _to_ms(end)
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
                mem = {lb: ser for lb, ser in per_name.items() if _matches(lb, want)}
            disk: dict[Labels, tuple[array[int], array[float]]] = {}
            summaries: list[rollup.Rollup] = []
            floor = self._floor_ms
            # disk: below the floor as always; above it only for evicted series: when no memory series matches and
            # one of this name was evicted with points in the window, or a matching one is back after eviction
            if self._conn is not None and (
                    s_ms < floor
                    or (not mem and s_ms < self._evicted_until.get(name, MS_MIN))
                    or any(ser.disk_floor > s_ms for ser in mem.values())):
                ids: dict[int, Labels] = {}
                upper: dict[int, int] = {}
                for sid, lb in self._disk_series(name, want).items():
                    ser = mem.get(lb)
                    top = e_ms if ser is None else min(e_ms, max(floor, ser.disk_floor) - 1)
                    if top >= s_ms:
                        ids[sid], upper[sid] = lb, top
                if ids:
                    disk = self._query_disk(ids, s_ms, upper)
                    summaries = self._query_rollups(ids, s_ms, upper)
            for lb in sorted(mem.keys() | disk.keys()):
                part = disk.get(lb)
                if part is not None:
                    out_ts.extend(part[0])
                    out_vals.extend(part[1])
                ser = mem.get(lb)
                if ser is not None:
                    ser.window(s_ms, e_ms, max(floor, ser.disk_floor), out_ts, out_vals)
        return AggregateResult(out_ts, out_vals, summaries)

    def _query_disk(self, ids: dict[int, Labels], s_ms: int, upper: dict[int, int]
                    ) -> dict[Labels, tuple[array[int], array[float]]]:
        """Points in ``[s_ms, upper[sid]]`` from the chunks and head rows of the given series ids (each series' own
        upper bound: below the floor for a series in memory, the query's end for one that is not), chunks first.

        A sqlite failure is logged and yields fewer points rather than an exception: an answer from memory beats no
        answer. A chunk that does not decode is deleted (logged once) and costs only its own points.
        """
        assert self._conn is not None
        out: dict[Labels, tuple[array[int], array[float]]] = {}
        id_list = list(ids)
        e_max = max(upper.values())
        bad: list[tuple[str, int]] = []
        selects = (
            ("chunks", ("SELECT c.rowid, c.series_id, c.n, t.ts, c.vals FROM chunks c "
                        "JOIN tscols t ON t.id = c.ts_id WHERE c.series_id IN ({}) AND c.end_ms >= ? "
                        "AND c.start_ms <= ? ORDER BY c.start_ms, c.rowid")),
            ("head", ("SELECT rowid, series_id, n, ts, vals FROM head "
                      "WHERE series_id IN ({}) AND end_ms >= ? AND start_ms <= ? ORDER BY rowid")),
        )
        try:
            for table, sql in selects:
                for i in range(0, len(id_list), _IN_BATCH):
                    batch = id_list[i : i + _IN_BATCH]
                    rows = self._conn.execute(sql.format(",".join("?" * len(batch))), (*batch, s_ms, e_max))
                    for rowid, sid, n, ts_blob, vals_blob in rows:
                        try:
                            ts, vals = decode_ts(ts_blob, n), decode_vals(vals_blob, n)
                        except ValueError as e:
                            log.error("metric cache chunk unreadable path=%s table=%s series_id=%s error=%s; deleted",
                                      self._db_path, table, sid, e)
                            bad.append((table, rowid))
                            continue
                        part = out.get(ids[sid])
                        if part is None:
                            part = out[ids[sid]] = (array("q"), array("d"))
                        _filter_into(ts, vals, s_ms, upper[sid], part[0], part[1])
            for table in _POINT_TABLES:
                self._conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for t, r in bad if t == table])
        except sqlite3.Error as e:
            log.error("metric cache disk query failed path=%s error=%s; answering from memory", self._db_path, e)
        return out

    def _query_rollups(self, ids: dict[int, Labels], s_ms: int, upper: dict[int, int]) -> list[rollup.Rollup]:
        """The minute rollups of the given series whose points all lie in ``[s_ms, upper[sid]]``: a long window
        is answered to the minute, a minute cut by either end of the window is left out. A blob that does not
        decode is deleted (logged) and costs only its own minutes."""
        assert self._conn is not None
        out: list[rollup.Rollup] = []
        id_list = list(ids)
        e_max = max(upper.values())
        bad: list[tuple[int]] = []
        try:
            for i in range(0, len(id_list), _IN_BATCH):
                batch = id_list[i : i + _IN_BATCH]
                for rowid, sid, blob in self._conn.execute(
                        f"SELECT rowid, series_id, blob FROM rollups WHERE series_id IN ({','.join('?' * len(batch))})"
                        " AND end_ms >= ? AND start_ms <= ? ORDER BY start_ms, rowid", (*batch, s_ms, e_max)):
                    try:
                        minutes = rollup.decode(blob)
                    except ValueError as e:
                        log.error("metric cache rollup unreadable path=%s series_id=%s error=%s; deleted",
                                  self._db_path, sid, e)
                        bad.append((rowid,))
                        continue
                    top = upper[sid]
                    out += [r for r in minutes if s_ms <= r.first_ts and r.last_ts <= top]
            self._conn.executemany("DELETE FROM rollups WHERE rowid = ?", bad)
        except sqlite3.Error as e:
            log.error("metric cache disk query failed path=%s error=%s; answering without history", self._db_path, e)
        return out

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
        before = _to_ms(self._clock() - SEAL_GRACE) // BLOCK_MS * BLOCK_MS
        shared: dict[bytes, bytes] = {}
        with self._lock:
            todo = [ser for ser in self._series.values() if ser.ts and (ser.ts[0] < before or not ser.in_order)]
            persistent = self._conn is not None
        for i in range(0, len(todo), _SEAL_BATCH):
            with self._lock:
                for ser in todo[i : i + _SEAL_BATCH]:
                    ser.seal(before, shared, persistent)

    def _flush_locked(self) -> bool:
        conn = self._conn
        if conn is None:
            return True
        pending = [s for s in self._series.values()
                   if s.flushed < len(s.ts) or s.c_flushed < len(s.c_n) or s.rewrite]
        if not pending:
            return True
        new_ids: list[tuple[Series, int]] = []
        chunks: list[tuple[int, int, int, int, int, bytes]] = []
        heads: list[tuple[int, int, int, int, bytes, bytes]] = []
        rewrites: list[tuple[int]] = []
        ts_ids: dict[int, int] = {}                 # id(shared timestamp blob) -> tscols row, for this transaction
        try:
            conn.execute("BEGIN")
            for ser in pending:
                sid = ser.sid
                if sid is None:
                    lb_json = _labels_json(ser.labels)
                    conn.execute("INSERT OR IGNORE INTO series (name, labels) VALUES (?, ?)", (ser.name, lb_json))
                    sid = conn.execute(
                        "SELECT id FROM series WHERE name = ? AND labels = ?", (ser.name, lb_json)
                    ).fetchone()[0]
                    new_ids.append((ser, sid))
                for i in range(ser.c_flushed, len(ser.c_n)):
                    blob = ser.c_ts[i]
                    ts_id = ts_ids.get(id(blob))
                    if ts_id is None:
                        ts_id = ts_ids[id(blob)] = conn.execute("INSERT INTO tscols (ts) VALUES (?)",
                                                                (blob,)).lastrowid or 0
                    chunks.append((sid, ser.c_lo[i], ser.c_hi[i], ser.c_n[i], ts_id, ser.c_vals[i]))
                start = 0 if ser.rewrite else ser.flushed
                if ser.rewrite:
                    rewrites.append((sid,))
                if start < len(ser.ts):
                    ts = ser.ts[start:]
                    heads.append((sid, min(ts), max(ts), len(ts), raw(ts), raw(ser.vals[start:])))
            conn.executemany("DELETE FROM head WHERE series_id = ?", rewrites)
            conn.executemany("INSERT INTO chunks (series_id, start_ms, end_ms, n, ts_id, vals) "
                             "VALUES (?, ?, ?, ?, ?, ?)", chunks)
            conn.executemany("INSERT INTO head (series_id, start_ms, end_ms, n, ts, vals) VALUES (?, ?, ?, ?, ?, ?)",
                             heads)
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback()
            log.error("metric cache flush failed path=%s series=%d error=%s; will retry", self._db_path,
                      len(pending), e)
            return False
        for ser, sid in new_ids:
            ser.sid = sid
        for ser in pending:
            ser.flushed = len(ser.ts)
            ser.c_flushed = len(ser.c_n)
            ser.rewrite = False
        return True

    def _rollback(self) -> None:
        if self._conn is not None and self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

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
            cutoff = _to_ms(now - min(self._memory_window, self._retention))
            persisted = self._flush_locked() if self._conn is not None else False
            lost = 0
            for ser in list(self._series.values()):
                dropped = ser.drop_before(cutoff)
                if self._conn is not None:
                    # only when flushing failed: points forgotten that were never written are gone for good — we
                    # trade history for RSS
                    lost += dropped
                if ser.empty():
                    self._forget(ser)
            if cutoff > self._floor_ms:
                self._floor_ms = cutoff
            if persisted or self._conn is None:
                self._evict_locked()
            if lost:
                log.warning("metric cache dropped unpersisted points path=%s points=%d", self._db_path, lost)
            full = self._trim_disk(now) if self._conn is not None else False
        if self._conn is not None:
            self._roll_up(_to_ms(now - self._memory_window) // ROLLUP_MS * ROLLUP_MS)
            # measured after the roll-up, when the raw part on disk is at its smallest each time: measured before
            # it, the raw part's ten-minute sawtooth (a few MiB at 500 containers) swamps the rollups' growth
            with self._lock:
                if self._conn is not None:
                    try:
                        _incremental_vacuum(self._conn)
                        self._measure_history(now, full)
                    except sqlite3.Error as e:
                        log.error("metric cache history measure failed path=%s error=%s", self._db_path, e)

    def _roll_up(self, horizon: int) -> None:
        """Replace the raw chunks on disk older than ``horizon`` (beyond the memory window, so no query answers them
        from memory) by per-minute rollups, one row per series and :data:`ROLLUP_MS` span, a batch of series per
        transaction. Runs outside the lock on its own connection: summarising is CPU work (~20 µs a minute of a
        series), and each transaction swaps a series' chunks for their rollups at once, so a query sees one or the
        other. A chunk that does not decode is deleted (logged) and costs only its own points."""
        try:
            conn = self._history_conn()
            sids = [r[0] for r in conn.execute("SELECT DISTINCT series_id FROM chunks WHERE end_ms < ?", (horizon,))]
            for i in range(0, len(sids), _ROLLUP_BATCH):
                batch = sids[i : i + _ROLLUP_BATCH]
                points: dict[int, tuple[array[int], array[float]]] = {}
                done: list[tuple[int]] = []
                for rowid, sid, n, ts_blob, vals_blob in conn.execute(
                        "SELECT c.rowid, c.series_id, c.n, t.ts, c.vals FROM chunks c JOIN tscols t ON t.id = c.ts_id "
                        f"WHERE c.series_id IN ({','.join('?' * len(batch))}) AND c.end_ms < ? "
                        "ORDER BY c.start_ms, c.rowid", (*batch, horizon)):
                    done.append((rowid,))
                    try:
                        ts, vals = decode_ts(ts_blob, n), decode_vals(vals_blob, n)
                    except ValueError as e:
                        log.error("metric cache chunk unreadable path=%s series_id=%s error=%s; deleted",
                                  self._db_path, sid, e)
                        continue
                    part = points.setdefault(sid, (array("q"), array("d")))
                    part[0].extend(ts)
                    part[1].extend(vals)
                rows = [row for sid, (ts, vals) in points.items() for row in _rollup_rows(sid, ts, vals)]
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO rollups (series_id, start_ms, end_ms, n, blob) VALUES (?, ?, ?, ?, ?)",
                                 rows)
                conn.executemany("DELETE FROM chunks WHERE rowid = ?", done)
                conn.execute("COMMIT")
            if sids:
                conn.execute("BEGIN")
                _drop_unused_tscols(conn)
                conn.execute("COMMIT")
        except sqlite3.Error as e:
            if self._history is not None and self._history.in_transaction:
                self._history.execute("ROLLBACK")
            log.error("metric cache roll-up failed path=%s error=%s; will retry", self._db_path, e)

    def _history_conn(self) -> sqlite3.Connection:
        if self._history is None:
            assert self._db_path is not None
            self._history = sqlite3.connect(self._db_path, isolation_level=None, check_same_thread=False,
                                            timeout=5.0)
            self._history.execute("PRAGMA synchronous=NORMAL")
            self._history.execute("PRAGMA cache_size=-512")        # KiB: it reads each chunk once, in order
        return self._history

    def _evict_locked(self) -> None:
        """Evict idle series, oldest last sample first, until memory holds at most ``max_series`` (see the module
        docstring). Called after a successful flush, so with a disk every candidate's points are all in sqlite."""
        excess = len(self._series) - self._max_series
        if excess <= 0:
            return
        idle_before = _to_ms(self._clock() - _IDLE)
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

    def _trim_disk(self, now: float) -> bool:
        """Retention, ``max_bytes`` (whether it had to delete), orphan series, WAL checkpoint."""
        conn = self._conn
        assert conn is not None
        try:
            oldest = _to_ms(now - self._retention)
            conn.execute("BEGIN")
            for table in _POINT_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE end_ms < ?", (oldest,))
            _drop_unused_tscols(conn)
            conn.execute("COMMIT")
            _incremental_vacuum(conn)
            full = self._enforce_max_bytes()
            self._drop_orphan_series()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as e:
            self._rollback()
            log.error("metric cache disk trim failed path=%s error=%s", self._db_path, e)
            return False
        return full

    def _measure_history(self, now: float, full: bool) -> None:
        """How far back the disk reaches, and how far ``max_bytes`` lets it reach at the rate data arrives: the
        file's growth per second of history since the first measurement (its fixed part, the schema and a page or
        two per series, does not grow), extrapolated to ``max_bytes``."""
        assert self._conn is not None
        starts = [self._conn.execute(f"SELECT min(start_ms) FROM {t}").fetchone()[0] for t in _POINT_TABLES]
        oldest = min((v for v in starts if v is not None), default=None)
        self._held = max(0.0, now - oldest / 1000) if oldest is not None else 0.0
        size = self._db_size()
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

    def _db_size(self) -> int:
        assert self._conn is not None
        pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
        page_size = self._conn.execute("PRAGMA page_size").fetchone()[0]
        return int(pages) * int(page_size)

    def _enforce_max_bytes(self) -> bool:
        """Delete the oldest history until page_count*page_size <= max_bytes; whether it had to.

        Each round finds the time before which the rows hold roughly the excess
        (estimated from blob sizes) down to 90% of the budget, rounds it up to a
        minute and deletes every row that ends before, in every series: rows of
        one span end in the same minute, so the history then starts at one time
        for all series and "the cache holds N hours" is true of each. Freed pages go back
        via ``incremental_vacuum``; partially emptied b-tree pages are not
        freed, so it loops; every round deletes at least one row, so it
        terminates.
        """
        conn = self._conn
        assert conn is not None
        size = self._db_size()
        if size <= self._max_bytes:
            return False
        before = size
        deleted = 0
        target = int(self._max_bytes * 0.9)
        while size > self._max_bytes:
            excess = size - target
            cut = None
            freed = 0
            for end, _table, _rowid, nbytes in heapq.merge(*(_oldest_rows(conn, table) for table in _POINT_TABLES)):
                freed += nbytes
                if freed >= excess:
                    cut = (end // rollup.STEP_MS + 1) * rollup.STEP_MS
                    break
                cut = end + 1
            if cut is None:
                break  # only schema left; nothing more we can do
            conn.execute("BEGIN")
            for table in _POINT_TABLES:
                deleted += conn.execute(f"DELETE FROM {table} WHERE end_ms < ?", (cut,)).rowcount
            _drop_unused_tscols(conn)
            conn.execute("COMMIT")
            _incremental_vacuum(conn)
            size = self._db_size()
        # info, not warning: once the file is full this is the steady state
        # (roughly every 10% of max_bytes of new data), not an anomaly.
        log.info(
            "metric cache over max_bytes path=%s size_before=%d size_after=%d max_bytes=%d deleted_rows=%d",
            self._db_path, before, size, self._max_bytes, deleted,
        )
        return True

    def _drop_orphan_series(self) -> None:
        """Delete series rows with no chunks left and no presence in memory.

        Without this, every pod that ever ran would keep a row forever.  Series still in memory keep their id
        because their next flush writes chunks under it.
        """
        conn = self._conn
        assert conn is not None
        orphans = [r[0] for r in conn.execute(
            "SELECT id FROM series WHERE NOT EXISTS (SELECT 1 FROM chunks WHERE chunks.series_id = series.id) "
            "AND NOT EXISTS (SELECT 1 FROM head WHERE head.series_id = series.id) "
            "AND NOT EXISTS (SELECT 1 FROM rollups WHERE rollups.series_id = series.id)")]
        if not orphans:
            return
        live = {s.sid for s in self._series.values() if s.sid is not None}
        dead = set(orphans) - live
        if not dead:
            return
        conn.execute("BEGIN")
        conn.executemany("DELETE FROM series WHERE id = ?", [(sid,) for sid in dead])
        conn.execute("COMMIT")

    def close(self) -> None:
        """Flush and close the db; idempotent (called from SIGTERM and from finally blocks)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._conn is not None:
                self._flush_locked()
                try:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                except sqlite3.Error as e:
                    log.error("metric cache checkpoint at close failed path=%s error=%s", self._db_path, e)
                self._conn.close()
                self._conn = None
            if self._history is not None:
                self._history.close()
                self._history = None
            # Disk is gone: memory must now answer for everything it still holds.
            self._floor_ms = MS_MIN

