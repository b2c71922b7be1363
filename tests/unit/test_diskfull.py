"""A full disk is one state per store: recognised from the kernel's and sqlite's own errors, logged when it begins and
when it ends, and nothing in between (the whole behaviour on a real full filesystem: tests/integration/
test_disk_full.py)."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3

import pytest

from koordlet.base.diskfull import CHECKPOINTS, METRIC_CACHE, REPORTS, DiskFull, free_bytes, no_space
from koordlet.ops.metrics import AgentMetrics


def sqlite_full(tmp_path) -> sqlite3.Error:
    """A real SQLITE_FULL: sqlite says it when a database reaches its max_page_count, as when the disk is full."""
    conn = sqlite3.connect(tmp_path / "t.db")
    try:
        conn.execute("CREATE TABLE t (b BLOB)")
        conn.execute("PRAGMA max_page_count=4")
        with pytest.raises(sqlite3.Error) as caught:
            conn.execute("INSERT INTO t VALUES (?)", (b"x" * 65536,))
        return caught.value
    finally:
        conn.close()


def test_no_space_is_enospc_edquot_and_sqlite_full_and_nothing_else(tmp_path):
    assert no_space(OSError(errno.ENOSPC, "No space left on device"))
    assert no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert no_space(sqlite_full(tmp_path))
    assert not no_space(OSError(errno.EIO, "Input/output error"))
    assert not no_space(PermissionError(errno.EACCES, "Permission denied"))
    assert not no_space(ValueError("bad key"))
    conn = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.Error) as caught:
        conn.execute("SELECT * FROM missing")
    assert not no_space(caught.value)
    assert not no_space(sqlite3.OperationalError("database or disk is full"))   # not from sqlite: no code


def test_free_bytes_asks_the_nearest_directory_that_exists(tmp_path):
    free = free_bytes(str(tmp_path / "not" / "yet"))
    assert free is not None and free >= 0
    st = os.statvfs(tmp_path)
    assert abs(free - st.f_bavail * st.f_frsize) < 64 << 20        # the same filesystem, give or take its churn


def test_one_warning_when_a_store_fills_one_info_when_it_is_written_again(caplog):
    now = [100.0]
    full = DiskFull(clock=lambda: now[0])
    full.watch(METRIC_CACHE, "/var/lib/koordlet/metric-data", "the memory window stays in memory")
    full.watch(REPORTS, "/var/lib/koordlet/reports", "the files keep their last content")
    enospc = OSError(errno.ENOSPC, "No space left on device")
    caplog.set_level(logging.DEBUG, logger="koordlet")
    assert full.states() == {METRIC_CACHE: False, REPORTS: False}
    assert full.summary() == ""
    for _ in range(5):                                   # a write every 10 s for a minute: one line
        assert full.failed(METRIC_CACHE, enospc)
        now[0] += 10
    full.begin(METRIC_CACHE, "free=0 need=300000")       # seen before a write, by the cache: the same state
    assert not full.failed(REPORTS, OSError(errno.EACCES, "Permission denied"))    # another error: the caller's
    assert full.states() == {METRIC_CACHE: True, REPORTS: False}
    assert full.is_full(METRIC_CACHE) and not full.is_full(REPORTS)
    assert full.summary() == "storage full: metriccache (/var/lib/koordlet/metric-data)"
    full.wrote(REPORTS)                                  # writable all along: nothing to say
    full.wrote(METRIC_CACHE, " reclaimed_bytes=4096")
    full.wrote(METRIC_CACHE)
    assert full.states() == {METRIC_CACHE: False, REPORTS: False}
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", ("storage full store=metriccache path=/var/lib/koordlet/metric-data error=[Errno 28] No space "
                     "left on device; the memory window stays in memory")),
        ("INFO", ("storage writable again store=metriccache path=/var/lib/koordlet/metric-data after=50s "
                  "reclaimed_bytes=4096")),
    ]


def test_the_gauge_has_a_series_per_store_the_agent_writes():
    m = AgentMetrics("n1")
    full = DiskFull()
    for store in (METRIC_CACHE, REPORTS, CHECKPOINTS):
        full.watch(store, f"/state/{store}", "waiting")
    full.begin(CHECKPOINTS, "error=disk full")
    m.storage(full.states())
    get = m.registry.get_sample_value
    assert [get("koordlet_storage_full", {"node": "n1", "store": s}) for s in (METRIC_CACHE, REPORTS, CHECKPOINTS)] \
        == [0.0, 0.0, 1.0]
