"""Unit tests for koordlet.metriccache: aggregation rules, tiers, persistence, limits."""

from __future__ import annotations

import glob
import logging
import math
import os
import random
import sqlite3
import stat
import threading
from collections.abc import Iterable

import pytest

from koordlet.metriccache import (
    AGGREGATION_KINDS,
    RELATIVE_ACCURACY,
    ROLLUP_MS,
    AggregateResult,
    EmptyError,
    MetricCache,
    Sample,
    labels,
    make_labels,
    percentile,
)
from koordlet.metriccache.disk import WAL_KEEP

T0 = 1_700_000_000.0
INF = math.inf


class FakeClock:
    """Deterministic clock the tests advance by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def samples(name: str, lb: dict[str, str], points: Iterable[tuple[float, float]]) -> list[Sample]:
    lbs = make_labels(lb)
    return [Sample(name, lbs, ts, v) for ts, v in points]


#: every row that holds points: sealed chunks and not yet sealed head rows
POINT_ROWS = "(SELECT start_ms, end_ms, n FROM chunks UNION ALL SELECT start_ms, end_ms, n FROM head)"


def db_rows(directory: str, sql: str) -> list[tuple]:
    conn = sqlite3.connect(os.path.join(directory, "metrics.db"))
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# --------------------------------------------------------------- aggregation


def test_aggregates_one_to_ten_match_hand_computed_values() -> None:
    # Timestamps are a permutation, appended in an order where neither the
    # last-appended point nor the largest value has the greatest timestamp.
    ts_of = {1: 5, 2: 9, 3: 1, 4: 10, 5: 3, 6: 2, 7: 8, 8: 4, 9: 6, 10: 7}  # value -> ts offset
    order = [4, 10, 1, 2, 3, 5, 6, 7, 8, 9]  # value 4 (ts offset 10) goes in 1st
    cache = MetricCache(None, clock=FakeClock(T0 + 100))
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + ts_of[v], float(v)) for v in order]))
    res = cache.query("cpu", None, T0, T0 + 100)
    assert res.count() == 10
    assert res.value("count") == 10.0
    assert res.value("avg") == 5.5
    assert res.value("p50") == 5.0  # sorted[floor(5.0)-1] = sorted[4]
    assert res.value("p90") == 9.0  # sorted[floor(9.0)-1] = sorted[8]
    assert res.value("p95") == 9.0  # sorted[floor(9.5)-1] = sorted[8]
    assert res.value("p99") == 9.0  # sorted[floor(9.9)-1] = sorted[8]
    assert res.value("last") == 4.0  # ts offset 10 is the newest, though appended first
    assert res.time_range() == 9.0


def test_percentile_does_not_interpolate() -> None:
    values = [float(v) for v in range(20)]  # 0..19
    random.Random(7).shuffle(values)
    assert percentile(values, 0.5) == 9.0  # interpolation would give 9.5
    assert percentile(values, 0.95) == 18.0  # floor(19.0)-1
    assert percentile(values, 0.99) == 18.0  # floor(19.8)-1
    assert percentile(values, 0.9) == 17.0  # floor(18.0)-1
    res = AggregateResult([i * 1000 for i in range(20)], values)
    assert [res.value(k) for k in ("p50", "p90", "p95", "p99")] == [9.0, 17.0, 18.0, 18.0]


def test_single_point_clamps_index_to_zero() -> None:
    res = AggregateResult([5000], [42.5])
    for kind in ("avg", "p50", "p90", "p95", "p99", "last"):
        assert res.value(kind) == 42.5, kind
    assert res.count() == 1
    assert res.time_range() == 0.0
    assert percentile([3.0], 0.5) == 3.0


def test_empty_result_raises_empty_error_except_count() -> None:
    res = MetricCache(None, clock=FakeClock()).query("nothing", None, 0, INF)
    assert res.count() == 0
    assert res.value("count") == 0.0
    assert res.time_range() == 0.0
    for kind in ("avg", "p50", "p90", "p95", "p99", "last"):
        with pytest.raises(EmptyError, match="metric input is empty"):
            res.value(kind)
    assert issubclass(EmptyError, ValueError)
    with pytest.raises(EmptyError):
        percentile([], 0.5)


def test_unknown_kind_is_value_error_naming_it() -> None:
    res = AggregateResult([1000, 2000], [1.0, 2.0])
    with pytest.raises(ValueError, match="p42") as info:
        res.value("p42")
    assert not isinstance(info.value, EmptyError)
    assert set(AGGREGATION_KINDS) == {"avg", "p50", "p90", "p95", "p99", "last", "count"}


def test_last_prefers_later_point_on_timestamp_tie() -> None:
    res = AggregateResult([1000, 3000, 3000, 2000], [1.0, 2.0, 3.0, 4.0])
    assert res.value("last") == 3.0


# ------------------------------------------------------------ query semantics


def test_label_subset_matching_concatenates_series() -> None:
    cache = MetricCache(None, clock=FakeClock(T0 + 10))
    cache.append(samples("cpu", {"pod": "a", "container": "c1"}, [(T0 + 1, 1.0), (T0 + 2, 2.0)]))
    cache.append(samples("cpu", {"pod": "a", "container": "c2"}, [(T0 + 1, 10.0), (T0 + 2, 20.0)]))
    cache.append(samples("cpu", {"pod": "b", "container": "c1"}, [(T0 + 1, 100.0)]))
    cache.append(samples("mem", {"pod": "a", "container": "c1"}, [(T0 + 1, 1000.0)]))

    pod_a = cache.query("cpu", {"pod": "a"}, T0, T0 + 10)
    assert sorted(pod_a.values()) == [1.0, 2.0, 10.0, 20.0]
    assert pod_a.value("avg") == 8.25
    assert sorted(cache.query("cpu", None, T0, T0 + 10).values()) == [1.0, 2.0, 10.0, 20.0, 100.0]
    assert sorted(cache.query("cpu", {}, T0, T0 + 10).values()) == [1.0, 2.0, 10.0, 20.0, 100.0]
    assert cache.query("cpu", {"pod": "a", "container": "c2"}, T0, T0 + 10).values() == [10.0, 20.0]
    assert cache.query("cpu", {"container": "c1"}, T0, T0 + 10).count() == 3
    assert cache.query("cpu", {"pod": "zzz"}, T0, T0 + 10).count() == 0
    assert cache.query("cpu", {"pod": "a", "extra": "x"}, T0, T0 + 10).count() == 0
    assert cache.query("mem", None, T0, T0 + 10).values() == [1000.0]


def test_window_is_inclusive_on_both_ends() -> None:
    cache = MetricCache(None, clock=FakeClock(T0 + 100))
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + i, float(i)) for i in range(11)]))
    assert cache.query("cpu", None, T0 + 2, T0 + 5).values() == [2.0, 3.0, 4.0, 5.0]
    assert cache.query("cpu", None, T0 + 5, T0 + 5).values() == [5.0]
    assert cache.query("cpu", None, T0 + 5.5, T0 + 5.9).count() == 0
    assert cache.query("cpu", None, T0 + 6, T0 + 5).count() == 0  # inverted window


def test_out_of_order_series_filters_by_timestamp() -> None:
    cache = MetricCache(None, clock=FakeClock(T0 + 100))
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + 5, 5.0), (T0 + 1, 1.0), (T0 + 9, 9.0), (T0 + 3, 3.0)]))
    res = cache.query("cpu", None, T0 + 2, T0 + 6)
    assert sorted(res.values()) == [3.0, 5.0]
    assert res.value("last") == 5.0


def test_series_lists_label_sets_and_the_cache_puts_labels_in_canonical_form() -> None:
    """A sample whose labels are out of order (or lists) lands in the same series as its canonical form."""
    cache = MetricCache(None, clock=FakeClock(T0))
    unsorted = (("pod", "a"), ("container", "c1"))
    cache.append([Sample("cpu", unsorted, T0, 1.0), Sample("cpu", labels(pod="a", container="c1"), T0 + 1, 2.0)])
    cache.append([Sample("cpu", [["pod", "a"], ["container", "c1"]], T0 + 2, 4.0)])  # type: ignore[arg-type]
    cache.append([Sample("cpu", labels(pod="b"), T0, 3.0)])
    assert cache.series("cpu") == [{"container": "c1", "pod": "a"}, {"pod": "b"}]
    assert cache.series("nope") == []
    assert cache.query("cpu", {"pod": "a"}, T0, T0 + 2).values() == [1.0, 2.0, 4.0]   # one series, not two


# --------------------------------------------------------------- persistence


def test_directory_created_private_and_flush_writes_one_chunk_per_series(tmp_path) -> None:
    d = str(tmp_path / "cache" / "sub")
    cache = MetricCache(d, clock=FakeClock(T0 + 100))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for pod in ("a", "b", "c"):
        cache.append(samples("cpu", {"pod": pod}, [(T0 + i, float(i)) for i in range(10)]))
    cache.flush()
    assert db_rows(d, "SELECT count(*), min(n), max(n) FROM chunks") == [(3, 10, 10)]
    cache.flush()  # nothing new: no empty chunks
    assert db_rows(d, "SELECT count(*) FROM chunks") == [(3,)]
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + 10, 10.0)]))
    cache.flush()
    assert db_rows(d, "SELECT count(*), sum(n) FROM chunks") == [(4, 31)]
    assert db_rows(d, "PRAGMA journal_mode") == [("wal",)]
    assert db_rows(d, "PRAGMA auto_vacuum") == [(2,)]  # INCREMENTAL
    cache.close()


def assert_summarises(res: AggregateResult, points: list[tuple[int, float]]) -> None:
    """``res`` answers as ``points`` would: count, avg and last exactly, percentiles within the rollups' relative
    accuracy (raw points and per-minute rollups together)."""
    vals = [v for _, v in points]
    assert res.count() == len(vals)
    assert res.value("avg") == pytest.approx(sum(vals) / len(vals), rel=1e-12)
    assert res.value("last") == max(points, key=lambda p: p[0])[1]
    for kind in ("p50", "p90", "p95", "p99"):
        assert res.value(kind) == pytest.approx(AggregateResult(values=vals, timestamps_ms=range(len(vals))).value(
            kind), rel=RELATIVE_ACCURACY)


def test_restart_keeps_data_from_disk_and_memory(tmp_path) -> None:
    """An hour of points with a 10-minute memory window: the last 10 minutes in memory, raw chunks on disk for up
    to one roll-up span beyond, per-minute rollups older than that; a restart answers every window the same."""
    d = str(tmp_path)
    clock = FakeClock(T0)
    cache = MetricCache(d, memory_window=600, clock=clock)
    rng = random.Random(1)
    expected: list[tuple[int, float]] = []
    for i in range(360):  # one point every 10 s for an hour
        v = rng.uniform(0, 100)
        expected.append((i * 10, v))
        cache.append(samples("cpu", {"pod": "a"}, [(T0 + i * 10, v)]))
        clock.advance(10)
        if i % 6 == 5:
            cache.flush()
            cache.trim()

    def window(lo: int, hi: int) -> list[tuple[int, float]]:
        return [(off, v) for off, v in expected if lo <= off <= hi]

    raw_from = (int(T0 + 3600 - 600) * 1000 // ROLLUP_MS * ROLLUP_MS) / 1000 - T0   # older: rolled up
    assert 0 < raw_from <= 3000
    before_full = cache.query("cpu", None, T0, T0 + 3600)
    assert_summarises(before_full, window(0, 3600))
    assert before_full.values() == [v for _, v in window(int(raw_from), 3600)]   # raw part: disk then memory
    cache.close()
    cache.close()  # idempotent

    clock.advance(5)
    cache = MetricCache(d, memory_window=600, clock=clock)
    # Memory holds only the last 600 s, so anything older must come from disk.
    assert min(cache._series[("cpu", labels(pod="a"))].points()[0]) >= (clock.now - 600) * 1000
    full = cache.query("cpu", None, T0, T0 + 3600)
    assert_summarises(full, window(0, 3600))
    assert full.values() == before_full.values()
    # rollups only, a window that ends with a minute (T0 is 20 s into one): to the point
    assert_summarises(cache.query("cpu", None, T0, T0 + 1179.999), window(0, 1170))
    # a minute cut by the window's end is left out
    assert_summarises(cache.query("cpu", None, T0, T0 + 1199.999), window(0, 1170))
    spanning = cache.query("cpu", None, T0 + raw_from, T0 + 3400)  # raw disk + memory
    assert spanning.values() == [v for _, v in window(int(raw_from), 3400)]
    assert cache.query("cpu", None, T0 + 3300, INF).values() == [v for _, v in window(3300, 3600)]  # memory only
    assert cache.series("cpu") == [{"pod": "a"}]
    cache.close()


def test_unflushed_points_survive_close(tmp_path) -> None:
    clock = FakeClock(T0 + 100)
    cache = MetricCache(str(tmp_path), clock=clock)
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + i, float(i)) for i in range(5)]))
    cache.close()  # no explicit flush
    cache = MetricCache(str(tmp_path), clock=clock)
    assert cache.query("cpu", {"pod": "a"}, T0, T0 + 100).values() == [0.0, 1.0, 2.0, 3.0, 4.0]
    cache.close()


def test_late_straggler_below_memory_floor_is_counted_once(tmp_path) -> None:
    clock = FakeClock(T0)
    cache = MetricCache(str(tmp_path), memory_window=60, clock=clock)
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + i, float(i)) for i in range(0, 120, 10)]))
    clock.now = T0 + 120
    cache.trim()  # floor = T0 + 60; points 0..50 only on disk now
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + 15, 15.0)]))  # late, below the floor
    full = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 110.0]
    assert sorted(cache.query("cpu", None, T0, T0 + 200).values()) == sorted(full + [15.0])
    cache.flush()  # now on disk *and* still in memory
    assert sorted(cache.query("cpu", None, T0, T0 + 200).values()) == sorted(full + [15.0])
    assert cache.query("cpu", None, T0 + 11, T0 + 19).values() == [15.0]
    # A brand-new (in-order) series whose points all lie below the floor.
    cache.append(samples("cpu", {"pod": "late"}, [(T0 + 1, 1.5), (T0 + 2, 2.5)]))
    assert cache.query("cpu", {"pod": "late"}, T0, T0 + 200).values() == [1.5, 2.5]
    cache.flush()
    assert cache.query("cpu", {"pod": "late"}, T0, T0 + 200).values() == [1.5, 2.5]
    cache.close()
    cache = MetricCache(str(tmp_path), memory_window=60, clock=clock)
    assert sorted(cache.query("cpu", {"pod": "a"}, T0, T0 + 200).values()) == sorted(full + [15.0])
    assert cache.query("cpu", {"pod": "late"}, T0, T0 + 200).values() == [1.5, 2.5]
    cache.close()


# ----------------------------------------------------------------- trimming


def test_memory_window_trim_moves_points_to_disk_only(tmp_path) -> None:
    clock = FakeClock(T0)
    cache = MetricCache(str(tmp_path), memory_window=600, clock=clock)
    points = [(i * 10, float(i)) for i in range(121)]                # 0..1200 s
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + off, v) for off, v in points]))
    cache.append(samples("cpu", {"pod": "old"}, [(T0, 7.0)]))
    clock.now = T0 + 1200
    cache.trim()
    mem_ts, _ = cache._series[("cpu", labels(pod="a"))].points()
    assert len(mem_ts) == 61  # 600..1200 s inclusive
    assert mem_ts[0] == (T0 + 600) * 1000
    assert cache.series("cpu") == [{"pod": "a"}]  # the emptied series is dropped from memory
    assert_summarises(cache.query("cpu", {"pod": "a"}, T0, T0 + 1200), points)   # memory, raw disk and rollups
    old = cache.query("cpu", {"pod": "old"}, T0, T0 + 1200)                     # from disk
    assert (old.count(), old.value("last")) == (1, 7.0)
    cache.close()


def test_memory_only_trim_drops_old_points() -> None:
    clock = FakeClock(T0)
    cache = MetricCache(None, memory_window=100, clock=clock)
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + i, float(i)) for i in range(200)]))
    clock.now = T0 + 200
    cache.trim()
    res = cache.query("cpu", None, 0, INF)
    assert res.count() == 100
    assert min(res.values()) == 100.0


def test_retention_removes_old_points_from_memory_and_disk(tmp_path) -> None:
    d = str(tmp_path)
    clock = FakeClock(T0)
    cache = MetricCache(d, retention=3600, memory_window=600, clock=clock)
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + i, 1.0) for i in range(10)]))
    cache.append(samples("cpu", {"pod": "gone"}, [(T0 + i, 2.0) for i in range(10)]))
    cache.flush()
    assert db_rows(d, f"SELECT count(*) FROM {POINT_ROWS}") == [(2,)]
    clock.now = T0 + 3600 + 700
    cache.append(samples("cpu", {"pod": "a"}, [(clock.now - 1, 3.0)]))
    cache.trim()
    assert cache.query("cpu", None, 0, INF).values() == [3.0]
    assert cache.series("cpu") == [{"pod": "a"}]
    rows = db_rows(d, f"SELECT min(start_ms), count(*) FROM {POINT_ROWS}")
    assert rows == [(int((clock.now - 1) * 1000), 1)]
    # The series row of a pod with no data left is garbage-collected too.
    assert db_rows(d, "SELECT labels FROM series") == [('{"pod":"a"}',)]
    cache.close()
    cache = MetricCache(d, retention=3600, memory_window=600, clock=clock)
    assert cache.query("cpu", None, 0, INF).values() == [3.0]
    cache.close()


def test_max_bytes_deletes_oldest_chunks_and_bounds_file(tmp_path) -> None:
    d = str(tmp_path)
    db = os.path.join(d, "metrics.db")
    max_bytes = 96 * 1024
    clock = FakeClock(T0)
    cache = MetricCache(d, memory_window=30, max_bytes=max_bytes, clock=clock)
    rng = random.Random(3)
    for _flush_no in range(30):  # 30 flushes x 40 series x 20 random (incompressible) values
        batch = []
        for s in range(40):
            batch += samples("cpu", {"pod": f"p{s}"}, [(clock.now + i, rng.random()) for i in range(20)])
        cache.append(batch)
        clock.advance(20)
        cache.flush()
    size_before = os.path.getsize(db) + os.path.getsize(db + "-wal")
    assert size_before > 2 * max_bytes
    cache.trim()
    assert os.path.getsize(db) <= max_bytes
    assert os.path.getsize(db + "-wal") <= WAL_KEEP     # kept as room to delete in when the disk is full
    (oldest, newest), = db_rows(d, f"SELECT min(start_ms), max(end_ms) FROM {POINT_ROWS}")
    assert oldest > T0 * 1000  # the first flushes are gone
    assert newest == (clock.now - 1) * 1000  # the newest flush is kept
    cache.close()
    cache = MetricCache(d, memory_window=30, max_bytes=max_bytes, clock=clock)
    assert cache.query("cpu", {"pod": "p0"}, T0, T0 + 19).count() == 0
    assert cache.query("cpu", {"pod": "p0"}, clock.now - 20, clock.now).count() == 20
    cache.close()


# -------------------------------------------------------------- robustness


def test_corrupt_db_is_moved_aside_and_cache_starts_empty(tmp_path, caplog) -> None:
    d = str(tmp_path)
    db = os.path.join(d, "metrics.db")
    garbage = b"this is not an sqlite database\x00" * 200
    with open(db, "wb") as f:
        f.write(garbage)
    clock = FakeClock(T0)
    with caplog.at_level(logging.ERROR, logger="koordlet.metriccache"):
        cache = MetricCache(d, clock=clock)
    assert any("unreadable" in r.getMessage() and db in r.getMessage() for r in caplog.records)
    moved = glob.glob(db + ".corrupt-*")
    assert moved == [f"{db}.corrupt-{int(T0)}"]
    with open(moved[0], "rb") as f:
        assert f.read() == garbage
    assert cache.query("cpu", None, 0, INF).count() == 0
    cache.append(samples("cpu", {"pod": "a"}, [(T0, 1.0)]))
    cache.close()
    cache = MetricCache(d, clock=clock)  # the fresh db works
    assert cache.query("cpu", None, 0, INF).values() == [1.0]
    cache.close()


def test_damaged_chunk_costs_only_that_chunk_logged_once(tmp_path, caplog) -> None:
    """A chunk whose blob no longer decodes (bit rot, a torn page) is dropped with one log line; the database, the
    other series and the series' other chunks stay, at load (memory window) and at query (older, disk only)."""
    d = str(tmp_path)
    clock = FakeClock(T0)
    cache = MetricCache(d, memory_window=600, clock=clock)
    for k in range(0, 1200, 10):                         # 20 minutes, two series, sealed into 2-minute chunks
        clock.now = T0 + k
        cache.append(samples("cpu", {"pod": "a"}, [(clock.now, float(k))]))
        cache.append(samples("cpu", {"pod": "b"}, [(clock.now, float(k))]))
        cache.flush()
    clock.now = T0 + 1200
    cache.close()
    conn = sqlite3.connect(os.path.join(d, "metrics.db"))
    sid_a = conn.execute("""SELECT id FROM series WHERE labels = '{"pod":"a"}'""").fetchone()[0]
    rows = conn.execute("SELECT rowid, start_ms, end_ms, n FROM chunks WHERE series_id = ? ORDER BY start_ms",
                        (sid_a,)).fetchall()
    old, new = rows[0], rows[-1]                        # one below the memory window, one inside it
    assert old[2] < (clock.now - 600) * 1000 <= new[1]
    conn.executemany("UPDATE chunks SET vals = x'00deadbeef' WHERE rowid = ?", [(old[0],), (new[0],)])
    conn.commit()
    conn.close()
    with caplog.at_level(logging.ERROR, logger="koordlet.metriccache"):
        cache = MetricCache(d, memory_window=600, clock=clock)
        everything_b = cache.query("cpu", {"pod": "b"}, T0, clock.now).values()
        first = cache.query("cpu", {"pod": "a"}, T0, clock.now).values()
        again = cache.query("cpu", {"pod": "a"}, T0, clock.now).values()
    assert glob.glob(os.path.join(d, "metrics.db.corrupt-*")) == []
    assert everything_b == [float(k) for k in range(0, 1200, 10)]
    lost = {float(t / 1000 - T0) for t in range(old[1], old[2] + 1, 10_000)} | {
        float(t / 1000 - T0) for t in range(new[1], new[2] + 1, 10_000)}
    assert first == again == [float(k) for k in range(0, 1200, 10) if float(k) not in lost]
    assert len(lost) == old[3] + new[3]
    unreadable = [r for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(unreadable) == 2                        # one at load (the memory window), one at the first query
    cache.close()


def test_append_after_close_does_not_raise(tmp_path) -> None:
    cache = MetricCache(str(tmp_path), clock=FakeClock(T0 + 10))
    cache.close()
    cache.append(samples("cpu", {"pod": "a"}, [(T0, 1.0)]))
    cache.flush()
    cache.trim()
    assert cache.query("cpu", None, 0, INF).values() == [1.0]


def test_concurrent_append_query_flush(tmp_path) -> None:
    clock = FakeClock(T0 + 10_000)
    cache = MetricCache(str(tmp_path), memory_window=100_000, clock=clock)
    errors: list[BaseException] = []
    done = threading.Event()
    batches, per_batch = 200, 50

    def appender() -> None:
        try:
            for b in range(batches):
                cache.append(
                    Sample("cpu", labels(pod=f"p{i % 10}"), T0 + b + i / 100, 1.0) for i in range(per_batch)
                )
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                res = cache.query("cpu", {"pod": "p1"}, 0, INF)
                if res.count():
                    assert res.value("avg") == 1.0
                cache.flush()
                cache.trim()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=appender), threading.Thread(target=reader), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert cache.query("cpu", None, 0, INF).count() == batches * per_batch
    cache.close()
    cache = MetricCache(str(tmp_path), memory_window=100_000, clock=clock)
    assert cache.query("cpu", None, 0, INF).count() == batches * per_batch
    cache.close()


def test_flush_is_one_transaction_and_failed_flush_is_retried(tmp_path, caplog) -> None:
    d = str(tmp_path)
    cache = MetricCache(d, clock=FakeClock(T0 + 100))
    for pod in ("a", "b", "c"):
        cache.append(samples("cpu", {"pod": pod}, [(T0 + i, float(i)) for i in range(4)]))
    statements: list[str] = []
    cache._conn.set_trace_callback(statements.append)
    cache.flush()
    cache._conn.set_trace_callback(None)
    assert [s for s in statements if s in ("BEGIN", "COMMIT")] == ["BEGIN", "COMMIT"]

    class FailingOnce:
        """Connection proxy whose first executemany fails like a full disk."""

        def __init__(self, conn: sqlite3.Connection) -> None:
            self._c = conn
            self.failed = False

        def executemany(self, *a):
            if not self.failed:
                self.failed = True
                raise sqlite3.OperationalError("database or disk is full")
            return self._c.executemany(*a)

        def __getattr__(self, name: str):
            return getattr(self._c, name)

    real = cache._conn
    cache._conn = FailingOnce(real)  # type: ignore[assignment]
    cache.append(samples("cpu", {"pod": "a"}, [(T0 + 10, 10.0)]))
    cache.append(samples("cpu", {"pod": "new"}, [(T0 + 10, 5.0)]))
    with caplog.at_level(logging.ERROR, logger="koordlet.metriccache"):
        cache.flush()
    assert any("flush failed" in r.getMessage() for r in caplog.records)
    assert db_rows(d, "SELECT count(*), sum(n) FROM chunks") == [(3, 12)]  # rolled back
    cache.flush()  # retried in full
    cache._conn = real
    assert db_rows(d, "SELECT count(*), sum(n) FROM chunks") == [(5, 14)]
    cache.close()
    cache = MetricCache(d, clock=FakeClock(T0 + 100))
    assert cache.query("cpu", {"pod": "new"}, T0, T0 + 100).values() == [5.0]
    assert cache.query("cpu", {"pod": "a"}, T0, T0 + 100).values() == [0.0, 1.0, 2.0, 3.0, 10.0]
    cache.close()


def test_unopenable_db_runs_memory_only_without_moving_it(tmp_path, caplog) -> None:
    d = str(tmp_path)
    os.mkdir(os.path.join(d, "metrics.db"))  # "unable to open database file", not corruption
    with caplog.at_level(logging.ERROR, logger="koordlet.metriccache"):
        cache = MetricCache(d, clock=FakeClock(T0 + 10))
    assert any("memory-only" in r.getMessage() for r in caplog.records)
    assert glob.glob(os.path.join(d, "metrics.db.corrupt-*")) == []
    assert os.path.isdir(os.path.join(d, "metrics.db"))
    cache.append(samples("cpu", {"pod": "a"}, [(T0, 1.0)]))
    cache.flush()
    cache.trim()
    assert cache.query("cpu", None, 0, INF).values() == [1.0]
    cache.close()
