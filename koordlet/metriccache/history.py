"""The history in the metric cache's sqlite file (:mod:`koordlet.metriccache.disk`): how it ages, at each trim,
and how far back it reaches.

* **Roll-up** (:func:`roll_up`): raw chunks older than the memory window become per-minute rollups
  (:mod:`koordlet.metriccache.rollup`), one ``rollups`` row per series per :data:`ROLLUP_MS`: 12 h of 1 s raw
  points would not fit the cap on a large node, and nothing asks an hours-long window for more than an aggregate.
  It runs on a connection of its own, outside the cache's lock.
* **Trim** (:func:`trim`): retention, then ``max_bytes`` (the oldest history, at one cut for every series, so "the
  cache holds N hours" is true of each), then series rows nothing refers to; freed pages go back to the filesystem.
* **Reclaim** (:func:`reclaim`): on a full filesystem, the oldest history beyond the memory window, in steps small
  enough to be written where the filesystem has no room left.
* **Measure** (:func:`size`, :func:`oldest_ms`): what the file weighs and how far back it reaches, from which the
  cache estimates the history ``max_bytes`` holds.
"""

from __future__ import annotations

import heapq
import logging
import sqlite3
from array import array
from collections.abc import Callable, Iterable, Iterator

from koordlet.base.diskfull import no_space
from koordlet.metriccache import rollup, rollup_codec
from koordlet.metriccache.chunk import decode_ts, decode_vals
from koordlet.metriccache.disk import POINT_TABLES, checkpoint, drop_unused_tscols, incremental_vacuum, rollback
from koordlet.metriccache.series import Series

__all__ = ["ROLLUP_MS", "oldest_ms", "reclaim", "roll_up", "size", "trim"]

log = logging.getLogger(__name__)

#: What deleting one row of a table frees, roughly: its blobs, the row's header and its index entries (a chunk's
#: shared timestamp column is not counted: other series' chunks may still use it).
_ROW_BYTES = {"chunks": "length(vals) + 80", "head": "length(ts) + length(vals) + 60",
              "rollups": "length(blob) + 60"}
#: Raw chunks older than the memory window are rolled up into per-minute summaries (:mod:`.rollup`), one row per
#: series per this span: ten minutes of raw history at most beyond the memory window, ~10 minute rollups a row.
ROLLUP_MS = 600_000
#: Series rolled up per transaction (bounds what one roll-up step holds decoded: ~64 x 600 points).
_ROLLUP_BATCH = 64
#: Rows (and free pages) one reclaim step deletes (hands back) at first and at most: halved after a step that found
#: no room, doubled after one that did.
_RECLAIM_ROWS = 64
_RECLAIM_MAX_ROWS = 4096


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
               rollup_codec.encode(run))
        i = j


def roll_up(connect: Callable[[], sqlite3.Connection], db_path: str | None, horizon: int) -> None:
    """Replace the raw chunks older than ``horizon`` (beyond the memory window, so no query answers them from
    memory) by per-minute rollups, one row per series and :data:`ROLLUP_MS` span, a batch of series per transaction.

    Runs outside the cache's lock on the connection ``connect`` gives (the roll-up's own): summarising is CPU work
    (~20 µs a minute of a series), and each transaction swaps a series' chunks for their rollups at once, so a query
    sees one or the other. A chunk that does not decode is deleted (logged) and costs only its own points; a sqlite
    failure rolls back the batch at hand and is raised (the batches done stay done; the rest waits for the next
    trim)."""
    conn = connect()
    try:
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
                              db_path, sid, e)
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
            drop_unused_tscols(conn)
            conn.execute("COMMIT")
    except sqlite3.Error:
        rollback(conn)
        raise


# ------------------------------------------------------------------ trim


def trim(conn: sqlite3.Connection, db_path: str | None, oldest: int, max_bytes: int, in_memory: Iterable[Series]
         ) -> bool:
    """Retention (rows ending before ``oldest``), ``max_bytes`` (whether it had to delete), series rows nothing
    refers to (``in_memory`` keep theirs). A sqlite failure rolls back the step at hand and is raised."""
    try:
        conn.execute("BEGIN")
        for table in POINT_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE end_ms < ?", (oldest,))
        drop_unused_tscols(conn)
        conn.execute("COMMIT")
        incremental_vacuum(conn)
        full = _enforce_max_bytes(conn, db_path, max_bytes)
        _drop_orphan_series(conn, in_memory)
    except sqlite3.Error:
        rollback(conn)
        raise
    return full


def reclaim(conn: sqlite3.Connection, before_ms: int, goal: int) -> int:
    """Make room on a full filesystem: delete the oldest history, the rows that end before ``before_ms`` (the
    memory window's start, so every point memory holds keeps its copy on disk), oldest first whatever their table,
    until the file is ``goal`` bytes smaller or nothing that old is left; returns by how much it shrank.

    sqlite writes every change to the WAL before the file, so where the filesystem has not a byte left a deletion
    can only use the WAL file's kept allocation (:data:`koordlet.metriccache.disk.WAL_KEEP`): each step deletes a
    few rows, hands a few free pages back (incremental vacuum) and checkpoints, which rewinds the WAL and shrinks the
    file. A step that finds no room is retried at half the size, and at none it gives up (the next flush tries
    again); any other sqlite failure is raised."""
    start = size(conn)
    step = _RECLAIM_ROWS
    while step and start - size(conn) < goal:
        batch = _oldest_before(conn, before_ms, step)
        if not batch and not conn.execute("PRAGMA freelist_count").fetchone()[0]:
            break
        before = size(conn)
        try:
            checkpoint(conn)
            conn.execute("BEGIN")
            for table in POINT_TABLES:
                conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for t, r in batch if t == table])
            drop_unused_tscols(conn)
            conn.execute("COMMIT")
            checkpoint(conn)
            conn.executescript(f"PRAGMA incremental_vacuum({step})")
            checkpoint(conn)
        except sqlite3.Error as e:
            rollback(conn)
            if not no_space(e):
                raise
            step //= 2
            continue
        if not batch and size(conn) >= before:
            break                          # free pages the vacuum cannot hand back: nothing more to gain
        step = min(2 * step, _RECLAIM_MAX_ROWS)
    return start - size(conn)


def _oldest_before(conn: sqlite3.Connection, before_ms: int, limit: int) -> list[tuple[str, int]]:
    """(table, rowid) of the ``limit`` point rows that end first, of those ending before ``before_ms``."""
    rows: list[tuple[int, str, int]] = []
    for table in POINT_TABLES:
        rows += [(end, table, rowid) for rowid, end in conn.execute(
            f"SELECT rowid, end_ms FROM {table} WHERE end_ms < ? ORDER BY end_ms LIMIT ?", (before_ms, limit))]
    return [(table, rowid) for _, table, rowid in sorted(rows)[:limit]]


def size(conn: sqlite3.Connection) -> int:
    """The file's size in bytes (its pages, free ones included)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages) * int(page_size)


def oldest_ms(conn: sqlite3.Connection) -> int | None:
    """The oldest point's timestamp on disk (the start of the oldest row), None when no point is."""
    starts = [conn.execute(f"SELECT min(start_ms) FROM {t}").fetchone()[0] for t in POINT_TABLES]
    return min((v for v in starts if v is not None), default=None)


def _oldest_rows(conn: sqlite3.Connection, table: str) -> Iterator[tuple[int, str, int, int]]:
    """(end_ms, table, rowid, bytes freed by deleting it) of a point table's rows, oldest first."""
    for rowid, end, nbytes in conn.execute(f"SELECT rowid, end_ms, {_ROW_BYTES[table]} FROM {table} ORDER BY end_ms"):
        yield end, table, rowid, nbytes


def _enforce_max_bytes(conn: sqlite3.Connection, db_path: str | None, max_bytes: int) -> bool:
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
    now_size = size(conn)
    if now_size <= max_bytes:
        return False
    before = now_size
    deleted = 0
    target = int(max_bytes * 0.9)
    while now_size > max_bytes:
        excess = now_size - target
        cut = None
        freed = 0
        for end, _table, _rowid, nbytes in heapq.merge(*(_oldest_rows(conn, table) for table in POINT_TABLES)):
            freed += nbytes
            if freed >= excess:
                cut = (end // rollup.STEP_MS + 1) * rollup.STEP_MS
                break
            cut = end + 1
        if cut is None:
            break  # only schema left; nothing more we can do
        conn.execute("BEGIN")
        for table in POINT_TABLES:
            deleted += conn.execute(f"DELETE FROM {table} WHERE end_ms < ?", (cut,)).rowcount
        drop_unused_tscols(conn)
        conn.execute("COMMIT")
        incremental_vacuum(conn)
        now_size = size(conn)
    # info, not warning: once the file is full this is the steady state
    # (roughly every 10% of max_bytes of new data), not an anomaly.
    log.info(
        "metric cache over max_bytes path=%s size_before=%d size_after=%d max_bytes=%d deleted_rows=%d",
        db_path, before, now_size, max_bytes, deleted,
    )
    return True


def _drop_orphan_series(conn: sqlite3.Connection, in_memory: Iterable[Series]) -> None:
    """Delete series rows with no chunks left and no presence in memory.

    Without this, every pod that ever ran would keep a row forever.  Series still in memory keep their id
    because their next flush writes chunks under it.
    """
    orphans = [r[0] for r in conn.execute(
        "SELECT id FROM series WHERE NOT EXISTS (SELECT 1 FROM chunks WHERE chunks.series_id = series.id) "
        "AND NOT EXISTS (SELECT 1 FROM head WHERE head.series_id = series.id) "
        "AND NOT EXISTS (SELECT 1 FROM rollups WHERE rollups.series_id = series.id)")]
    if not orphans:
        return
    live = {s.sid for s in in_memory if s.sid is not None}
    dead = set(orphans) - live
    if not dead:
        return
    conn.execute("BEGIN")
    conn.executemany("DELETE FROM series WHERE id = ?", [(sid,) for sid in dead])
    conn.execute("COMMIT")
