"""The metric cache's sqlite tier: one file, ``<path>/metrics.db``, holding the history up to ``retention``.

:class:`koordlet.metriccache.store.MetricCache` owns the connection and the lock and decides when each step runs;
this module is what opening, flushing and querying do to the file (the design, and the floor invariant between the
tiers, are in the store's module docstring; ageing the file's history is :mod:`koordlet.metriccache.history`):

* **Schema.** ``series`` (id, name, canonical labels JSON: UNIQUE), and three tables of point ranges, each row
  ``(series_id, start_ms, end_ms, n, ...)``: ``chunks`` (the memory tier's sealed two-minute blobs, their shared
  timestamp column stored once in ``tscols``), ``head`` (a series' not yet sealed points, raw; replaced by the chunk
  once their block is sealed) and ``rollups`` (per-minute summaries of what is older than the memory window,
  :mod:`koordlet.metriccache.rollup`). A point is in exactly one of them: every move between them is one
  transaction.
* **Flush** (:func:`write`): the chunks sealed since the last flush and the heads' new points, one transaction;
  then :func:`checkpoint` copies it into the file, so the WAL holds nothing the file lacks between flushes.
* **The WAL file is kept** (up to :data:`WAL_KEEP` bytes) rather than truncated after a checkpoint: the next
  transaction overwrites it from the start, so a filesystem that has no room left still has the WAL's for the small
  deletions that make room (:func:`koordlet.metriccache.history.reclaim`). sqlite cannot delete without writing the
  WAL first, and a WAL truncated to nothing on a full filesystem would leave it no way to shrink the file.
* **Damage** never raises out of here except at open: :func:`open_db` moves a file it cannot read aside
  (``metrics.db.corrupt-<unix ts>``) and starts a fresh one, or leaves the cache memory-only; a chunk or rollup
  that does not decode is deleted and costs only its own points (logged); a failing query is logged and answers
  less (the cache keeps serving from memory).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from koordlet.metriccache import rollup_codec
from koordlet.metriccache.chunk import decode_ts, decode_vals, raw
from koordlet.metriccache.rollup import Rollup
from koordlet.metriccache.sample import Labels, make_labels, matches
from koordlet.metriccache.series import MS_MIN, Series, take, to_ms

__all__ = [
    "POINT_TABLES",
    "WAL_KEEP",
    "Loaded",
    "checkpoint",
    "drop_unused_tscols",
    "incremental_vacuum",
    "load",
    "lookup",
    "matching_series",
    "open_db",
    "query_points",
    "query_rollups",
    "rollback",
    "write",
    "write_size",
]

log = logging.getLogger(__name__)

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
POINT_TABLES = ("chunks", "head", "rollups")
# sqlite's default SQLITE_MAX_VARIABLE_NUMBER was 999 before 3.32; stay below it.
_IN_BATCH = 500
#: Bytes of the WAL file kept after a checkpoint (``journal_size_limit``: sqlite cuts the file down to it at the
#: first commit after the checkpoint), as the room deletions need on a full filesystem; the file on disk is at most
#: ``max_bytes`` plus this, and plus a large transaction's WAL (a roll-up's, a trim's) until the next flush.
WAL_KEEP = 1 << 20
#: What a row costs besides its blobs (header, rowid, index entries), roughly.
_ROW_OVERHEAD = 64


def _labels_json(lb: Labels) -> str:
    """Canonical JSON (sorted keys, no spaces): the UNIQUE(name, labels) key in sqlite."""
    return json.dumps(dict(lb), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def incremental_vacuum(conn: sqlite3.Connection) -> None:
    """Return all free pages to the filesystem.

    ``conn.execute("PRAGMA incremental_vacuum")`` steps the statement only once
    and so frees a single page (the pragma yields no rows, so ``fetchall()``
    doesn't help); ``executescript`` runs it to completion.  Must be called
    outside an explicit transaction (executescript commits first).
    """
    conn.executescript("PRAGMA incremental_vacuum")


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the file and let the next transaction write the WAL from its start (RESTART: the file keeps
    its allocation, up to :data:`WAL_KEEP`). Outside a transaction; a reader still at an older snapshot makes it
    give up for now (sqlite reports busy, not an error)."""
    conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()


def rollback(conn: sqlite3.Connection | None) -> None:
    """Roll back the transaction a failed step left open, if any."""
    if conn is not None and conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def drop_unused_tscols(conn: sqlite3.Connection) -> None:
    """Delete the shared timestamp columns no chunk refers to any more (inside the caller's transaction)."""
    conn.execute("DELETE FROM tscols WHERE NOT EXISTS (SELECT 1 FROM chunks WHERE chunks.ts_id = tscols.id)")


# ------------------------------------------------------------------ open


@dataclass
class Loaded:
    """What opening the file brought into memory: the label key sets of every series on disk (by name), the series
    with points newer than the cutoff, and the floor (the cutoff: newer points are in memory, older ones on disk)."""

    keysets: dict[str, set[frozenset[str]]] = field(default_factory=dict)
    series: list[Series] = field(default_factory=list)
    floor_ms: int = MS_MIN


def open_db(directory: str, clock: Callable[[], float], window: float, no_room: Callable[[BaseException], bool]
            ) -> tuple[str | None, sqlite3.Connection | None, Loaded]:
    """Open (or create) ``<directory>/metrics.db`` and load the last ``window`` seconds (before ``clock()``) from
    it: (the file's path, its connection, what was loaded); the connection is None when the cache runs memory-only.

    A damaged file is moved aside (``metrics.db.corrupt-<unix ts>``) and a fresh one created; if even that fails the
    cache runs memory-only. ``no_room(error)``: whether an error is the filesystem having no room, which the caller
    keeps as its full state (not logged here; it opens the file again once there is room).
    """
    try:
        created = not os.path.isdir(directory)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if created:
            os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask
    except OSError as e:
        if not no_room(e):
            log.error("metric cache directory unusable path=%s error=%s; running memory-only", directory, e)
        return None, None, Loaded()
    db_path = os.path.join(directory, _DB_FILE)
    try:
        return (db_path, *_connect_and_load(db_path, clock, window))
    except sqlite3.OperationalError as e:
        # Locked by another process, unopenable, I/O error, no room: the
        # file may well be healthy, so don't move it aside; run without history.
        if not no_room(e):
            log.error("metric cache db cannot be opened path=%s error=%s; running memory-only", db_path, e)
        return db_path, None, Loaded()
    except (sqlite3.Error, ValueError, TypeError, KeyError, OverflowError) as e:
        error = e
    aside = f"{db_path}.corrupt-{int(clock())}"
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
        return db_path, None, Loaded()
    log.error("metric cache db unreadable path=%s error=%s moved_to=%s; starting empty", db_path, error, aside)
    try:
        return (db_path, *_connect_and_load(db_path, clock, window))
    except (sqlite3.Error, ValueError, OSError) as e:
        log.error("metric cache db unusable path=%s error=%s; running memory-only", db_path, e)
        return db_path, None, Loaded()


def _connect_and_load(db_path: str, clock: Callable[[], float], window: float) -> tuple[sqlite3.Connection, Loaded]:
    """Connect, configure, check and load; closes the connection on any failure.

    * WAL + ``synchronous=NORMAL``: commits don't fsync (only checkpoints
      do); a power cut can lose the last flush but never corrupts the file,
      which is the right trade for advisory metrics. ``journal_size_limit``:
      the WAL file kept after a checkpoint (:data:`WAL_KEEP`).
    * ``auto_vacuum=INCREMENTAL`` (must be set before the first table is
      created): lets :func:`koordlet.metriccache.history.trim` hand freed pages back to the filesystem
      so ``max_bytes`` bounds the real file size.
    * ``quick_check`` at open turns silent damage into the move-aside path
      instead of errors at 3 a.m. in the middle of a query.
    """
    conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False, timeout=5.0)
    try:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
        conn.execute(f"PRAGMA journal_size_limit={WAL_KEEP}").fetchall()
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
        loaded = load(conn, db_path, clock, window)
    except BaseException:
        conn.close()
        raise
    return conn, loaded


def load(conn: sqlite3.Connection, db_path: str, clock: Callable[[], float], window: float) -> Loaded:
    """Every on-disk point newer than ``clock() - window``, as memory series: chunks as they are (each decoded once
    to check it), head rows into the head.

    The floor at the same cutoff establishes the floor invariant for the
    restarted process: newer points are in memory, older ones on disk. A chunk
    that does not decode is deleted and costs only its own points (one log
    line for all of them).
    """
    keysets: dict[str, set[frozenset[str]]] = {}
    by_id: dict[int, tuple[str, Labels]] = {}
    for sid, name, lb_json in conn.execute("SELECT id, name, labels FROM series"):
        lb = make_labels(json.loads(lb_json))
        by_id[sid] = (name, lb)
        keysets.setdefault(name, set()).add(frozenset(k for k, _ in lb))
    cutoff = to_ms(clock() - window)
    out = Loaded(keysets, [], cutoff)
    loaded: dict[int, Series] = {}
    bad: list[tuple[str, int]] = []
    shared: dict[int, bytes] = {}

    def series_of(sid: int) -> Series | None:
        ser = loaded.get(sid)
        if ser is None and sid in by_id:
            name, lb = by_id[sid]
            ser = loaded[sid] = Series(name, lb, sid)
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
        if not ser.empty():
            out.series.append(ser)
    if bad:
        log.error("metric cache chunks unreadable path=%s chunks=%d; deleted, the rest loaded", db_path, len(bad))
        for table in POINT_TABLES:
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for t, r in bad if t == table])
    return out


# ---------------------------------------------------------------- series


def lookup(conn: sqlite3.Connection, db_path: str | None, name: str, lb: Labels) -> tuple[int | None, int | None]:
    """(sqlite id, newest chunk end) of a series; None for what sqlite does not have. Two indexed lookups; a failure
    is logged and answers what was found before it."""
    sid = None
    try:
        row = conn.execute("SELECT id FROM series WHERE name = ? AND labels = ?", (name, _labels_json(lb))).fetchone()
        if row is None:
            return None, None
        sid = row[0]
        end = conn.execute("SELECT max(end_ms) FROM chunks WHERE series_id = ?", (sid,)).fetchone()[0]
    except sqlite3.Error as e:
        log.error("metric cache series lookup failed path=%s error=%s", db_path, e)
        return sid, None
    return sid, end


def matching_series(conn: sqlite3.Connection, db_path: str | None, name: str, want: dict[str, str] | None,
                    keysets: set[frozenset[str]] | None) -> dict[int, Labels]:
    """{sqlite id: labels} of the series on disk named ``name`` whose labels include ``want``; ``keysets``: the label
    key sets the name's series have had (one that ``want`` names whole is one index lookup, else one scan of the
    name's rows)."""
    if not keysets:
        return {}
    try:
        if want and keysets == {frozenset(want)}:         # every label named: one index lookup
            lb = make_labels(want)
            row = conn.execute("SELECT id FROM series WHERE name = ? AND labels = ?",
                               (name, _labels_json(lb))).fetchone()
            return {row[0]: lb} if row is not None else {}
        sql = "SELECT id, labels FROM series WHERE name = ?"
        params: list[str] = [name]
        for k, v in (want or {}).items():
            if '"' not in k and "\\" not in k:            # else left to matches() below
                sql += " AND json_extract(labels, ?) = ?"
                params += [f'$."{k}"', v]
        out: dict[int, Labels] = {}
        for sid, lb_json in conn.execute(sql, params):
            lb = make_labels(json.loads(lb_json))
            if matches(lb, want):
                out[sid] = lb
        return out
    except sqlite3.Error as e:
        log.error("metric cache disk lookup failed path=%s error=%s; answering from memory", db_path, e)
        return {}


# ----------------------------------------------------------------- query


def query_points(conn: sqlite3.Connection, db_path: str | None, ids: dict[int, Labels], s_ms: int,
                 upper: dict[int, int]) -> dict[Labels, tuple[array[int], array[float]]]:
    """Points in ``[s_ms, upper[sid]]`` from the chunks and head rows of the given series ids (each series' own
    upper bound: below the floor for a series in memory, the query's end for one that is not), chunks first.

    A sqlite failure is logged and yields fewer points rather than an exception: an answer from memory beats no
    answer. A chunk that does not decode is deleted (logged once) and costs only its own points.
    """
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
                rows = conn.execute(sql.format(",".join("?" * len(batch))), (*batch, s_ms, e_max))
                for rowid, sid, n, ts_blob, vals_blob in rows:
                    try:
                        ts, vals = decode_ts(ts_blob, n), decode_vals(vals_blob, n)
                    except ValueError as e:
                        log.error("metric cache chunk unreadable path=%s table=%s series_id=%s error=%s; deleted",
                                  db_path, table, sid, e)
                        bad.append((table, rowid))
                        continue
                    part = out.get(ids[sid])
                    if part is None:
                        part = out[ids[sid]] = (array("q"), array("d"))
                    take(ts, vals, s_ms, upper[sid], False, part[0], part[1])
        for table in POINT_TABLES:
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for t, r in bad if t == table])
    except sqlite3.Error as e:
        log.error("metric cache disk query failed path=%s error=%s; answering from memory", db_path, e)
    return out


def query_rollups(conn: sqlite3.Connection, db_path: str | None, ids: dict[int, Labels], s_ms: int,
                  upper: dict[int, int]) -> list[Rollup]:
    """The minute rollups of the given series whose points all lie in ``[s_ms, upper[sid]]``: a long window
    is answered to the minute, a minute cut by either end of the window is left out. A blob that does not
    decode is deleted (logged) and costs only its own minutes."""
    out: list[Rollup] = []
    id_list = list(ids)
    e_max = max(upper.values())
    bad: list[tuple[int]] = []
    try:
        for i in range(0, len(id_list), _IN_BATCH):
            batch = id_list[i : i + _IN_BATCH]
            for rowid, sid, blob in conn.execute(
                    f"SELECT rowid, series_id, blob FROM rollups WHERE series_id IN ({','.join('?' * len(batch))})"
                    " AND end_ms >= ? AND start_ms <= ? ORDER BY start_ms, rowid", (*batch, s_ms, e_max)):
                try:
                    minutes = rollup_codec.decode(blob)
                except ValueError as e:
                    log.error("metric cache rollup unreadable path=%s series_id=%s error=%s; deleted",
                              db_path, sid, e)
                    bad.append((rowid,))
                    continue
                top = upper[sid]
                out += [r for r in minutes if s_ms <= r.first_ts and r.last_ts <= top]
        conn.executemany("DELETE FROM rollups WHERE rowid = ?", bad)
    except sqlite3.Error as e:
        log.error("metric cache disk query failed path=%s error=%s; answering without history", db_path, e)
    return out


# ----------------------------------------------------------------- write


def write_size(pending: Iterable[Series]) -> int:
    """About how many bytes :func:`write` puts into the file for ``pending``: the new chunks' blobs (a timestamp
    column shared by many series counted once), 16 bytes a head point, and each row's overhead."""
    total = 0
    seen: set[int] = set()
    for ser in pending:
        for i in range(ser.c_flushed, len(ser.c_n)):
            total += len(ser.c_vals[i]) + _ROW_OVERHEAD
            if id(ser.c_ts[i]) not in seen:
                seen.add(id(ser.c_ts[i]))
                total += len(ser.c_ts[i]) + _ROW_OVERHEAD
        head = len(ser.ts) - (0 if ser.rewrite else ser.flushed)
        if head > 0:
            total += 16 * head + _ROW_OVERHEAD
    return total


def write(conn: sqlite3.Connection, pending: Iterable[Series]) -> list[tuple[Series, int]]:
    """Write the not-yet-persisted chunks and head points of ``pending`` in one transaction; the series that got a
    sqlite id here, with it. Raises sqlite3.Error with the transaction left for :func:`rollback`; the caller marks
    the series flushed only once this returned."""
    new_ids: list[tuple[Series, int]] = []
    chunks: list[tuple[int, int, int, int, int, bytes]] = []
    heads: list[tuple[int, int, int, int, bytes, bytes]] = []
    rewrites: list[tuple[int]] = []
    ts_ids: dict[int, int] = {}                 # id(shared timestamp blob) -> tscols row, for this transaction
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
    return new_ids
