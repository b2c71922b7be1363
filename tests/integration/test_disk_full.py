"""A full disk, on a real tmpfs of a few MiB that the test mounts, fills and frees: one state per store (the metric
cache, the report files, the prediction checkpoints, the audit log), a WARNING when it begins and an INFO when it ends
and no other line, the ``koordlet_storage_full`` gauge and ``/readyz``'s body, the oldest history given up first,
and every sample inside the memory window kept, written once there is space again."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from doubles import fakenvml
from koordlet.base.diskfull import AUDIT, CHECKPOINTS, METRIC_CACHE, REPORTS
from koordlet.host.cgroup import CgroupVersion, Driver, KubeQOS
from koordlet.metriccache import MetricCache, Sample, labels
from koordlet.metriccache.history import oldest_ms
from koordlet.ops.audit import Event
from koordlet.ops.config import build
from koordlet.prediction.server import TrainingSamples, Usage
from tests.builders import pod_object
from tests.fakehost import CgroupValues, FakeHost
from tests.integration.test_daemon import free_port, get
from tests.waits import wait_for

STORES = (METRIC_CACHE, REPORTS, CHECKPOINTS, AUDIT)
SERIES = 300
WINDOW = 120.0          # the metric cache's memory window, seconds
A = "a" * 64


class Tmpfs:
    """A tmpfs mounted for the test, and a file that takes whatever room it has left (another writer filling the
    disk)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        """Take every byte left (and again after the agent freed some)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 20, 1 << 16, 4096, 512, 1):
                try:
                    while True:
                        os.write(fd, b"\1" * size)
                except OSError:
                    pass
        finally:
            os.close(fd)
        assert self.free() == 0

    def release(self) -> None:
        self.filler.unlink()

    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize


def mounted_tmpfs(path: Path, size: str) -> Iterator[Tmpfs]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True,
                       capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot mount a tmpfs here: {getattr(e, 'stderr', '') or e}")
    try:
        yield Tmpfs(path)
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@pytest.fixture
def tmpfs(tmp_path):
    yield from mounted_tmpfs(tmp_path / "state", "8m")


def agent_on(disk: Tmpfs, tmp_path: Path, monkeypatch):
    """An agent (not started: the test runs its steps) whose metric cache, report files, checkpoints and audit log
    are all on the tmpfs."""
    from koordlet.agent import Agent
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    cfg = build(environ={}, hostname=lambda: "n1", flags={
        "standalone": True, "cgroup-root-dir": host.paths.cgroup_root, "sys-root-dir": host.paths.sys_root,
        "proc-root-dir": host.paths.proc_root, "tsdb-path": str(disk.path / "metric-data"),
        "prediction-checkpoint-filepath": str(disk.path / "checkpoints"), "report-dir": str(disk.path / "reports"),
        "audit-log-dir": str(disk.path / "audit"), "feature-gates": {"AuditEvents": True},
        "metric-cache-memory-window": WINDOW, "tsdb-max-bytes": 3 << 20, "prediction-model-checkpoint-interval": 0,
        "enable-nri-runtime-hook": False})
    return Agent.build(cfg, persist=True, connect=False)


def usage(now: float, step: int = 1, since: float | None = None) -> list[Sample]:
    """``SERIES`` pods' CPU usage every ``step`` seconds from ``since`` to ``now`` (one tick at ``now`` by default);
    each value says its series and its second."""
    first = now if since is None else since
    return [Sample("pod_cpu_usage", labels(pod_uid=f"pod-{i}"), t, i * 1e6 + t % 1e6)
            for t in (first + k for k in range(0, int(now - first) + 1, step)) for i in range(SERIES)]


def said(caplog) -> list[tuple[str, str]]:
    """What the agent logged about its storage, and every warning or error whatever it was about."""
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "koordlet.base.diskfull" or r.levelno >= logging.WARNING]


def stored(path: Path) -> contextlib.closing[sqlite3.Connection]:
    """The metric cache's file, read-only, as another process would read it."""
    return contextlib.closing(sqlite3.connect(f"file:{path / 'metric-data' / 'metrics.db'}?mode=ro", uri=True))


def test_a_full_disk_is_one_state_per_store_and_loses_nothing_inside_the_memory_window(tmpfs, tmp_path, monkeypatch,
                                                                                         caplog):
    agent = agent_on(tmpfs, tmp_path, monkeypatch)
    cache = agent.cache
    files = next(report for _, report in agent.reports if report.kind == "files")
    models = agent.ctx.prediction.server
    stop = threading.Event()

    def checkpoint(now: float) -> int:
        models.train(now, TrainingSamples(Usage(1.5, 3 << 30), ()))
        return models.checkpoint(now)

    def audit() -> bool:
        """Two events a page each (an append first fills what is left of the file's last page)."""
        assert agent.audit_log is not None
        written = [agent.audit_log.log(3, Event(time.time(), "node", reason="test", message="x" * 4096))
                   for _ in range(2)]
        return all(written)

    def gauges() -> dict[str, float | None]:
        agent._set_gauges()
        return {s: agent.metrics.registry.get_sample_value("koordlet_storage_full", {"node": "n1", "store": s})
                for s in STORES}

    # 40 minutes of history on disk (beyond the 2-minute memory window: rolled up), the reports and checkpoints
    start = time.time()
    seeded = start - 2400
    cache.append(usage(start, 2, since=seeded))
    cache.flush()
    cache.trim()
    assert files.send(stop) == "written" and checkpoint(start) == 7 and audit()
    with stored(tmpfs.path) as db:
        assert oldest_ms(db) == round(seeded * 1000)
    reports = {p.name: p.read_text() for p in (tmpfs.path / "reports").iterdir()}
    saved = {p.name: p.read_text() for p in (tmpfs.path / "checkpoints").iterdir()}
    assert gauges() == dict.fromkeys(STORES, 0.0)

    caplog.set_level(logging.INFO, logger="koordlet")
    caplog.clear()
    tmpfs.fill()
    # another writer keeps the disk full: each round it takes whatever the agent freed, before each store writes
    appended: list[Sample] = []
    floors = []
    for rounds in range(12):
        tmpfs.fill()
        assert files.send(stop) == "no_space"
        assert checkpoint(time.time()) == 0
        assert not audit()
        now = time.time()
        fresh = usage(now)
        appended += fresh
        cache.append(fresh)
        cache.flush()
        if rounds == 0:
            # the first flush made its room from the oldest history: some of it is gone, the newer part is there
            with stored(tmpfs.path) as db:
                oldest = oldest_ms(db)
                floor = round((now - WINDOW) * 1000)
                assert oldest is not None and round(seeded * 1000) < oldest < floor
            floors.append(oldest)
            assert gauges() == dict.fromkeys(STORES, 1.0)
            body = agent.ready()[1]                    # not started: the loops do not run here
            assert body.startswith(f"not started; storage full: metriccache ({tmpfs.path / 'metric-data'})")
            assert all(f"{s} ({tmpfs.path / s})" in body for s in (REPORTS, CHECKPOINTS, AUDIT))
        if rounds % 4 == 3:
            cache.trim()
    # the files kept their last content whole, no temporary file was left behind
    assert {p.name: p.read_text() for p in (tmpfs.path / "reports").iterdir()} == reports
    assert {p.name: p.read_text() for p in (tmpfs.path / "checkpoints").iterdir()} == saved
    # the agent's own reclaimed history went to the writer that keeps filling; what it held beyond the memory
    # window is gone oldest first, and what is inside the window is all there
    with stored(tmpfs.path) as db:
        assert oldest_ms(db) >= floors[0]
    full_lines = said(caplog)
    assert [level for level, _ in full_lines] == ["WARNING"] * 4, full_lines
    assert sorted(line.split()[2] for _, line in full_lines) == sorted(f"store={s}" for s in STORES)

    caplog.clear()
    tmpfs.release()
    end = time.time()
    fresh = usage(end)
    appended += fresh
    cache.append(fresh)
    assert files.send(stop) == "written" and checkpoint(end) == 7 and audit()
    cache.flush()
    assert gauges() == dict.fromkeys(STORES, 0.0)
    assert agent.ready()[1] == "not started"           # nothing about storage left (the loops are not running)
    back = said(caplog)
    assert [level for level, _ in back] == ["INFO"] * 4, back
    assert sorted(line.split()[3] for _, line in back) == sorted(f"store={s}" for s in STORES)
    assert all("storage writable again" in line for _, line in back)
    assert "dropped_points=0" in next(line for _, line in back if f"store={METRIC_CACHE}" in line)
    assert yaml.safe_load((tmpfs.path / "reports" / "nodemetric.yaml").read_text())["metadata"] == {"name": "n1"}
    assert all(json.loads(p.read_text())["UID"] == p.name for p in (tmpfs.path / "checkpoints").iterdir())

    # every sample inside the memory window: in memory now, and on disk (a restart reads it back); each value says
    # its series and its second
    window_start = end - WINDOW
    expected = {s.value for s in usage(start, 2, since=seeded) + appended if s.ts >= window_start + 1}

    def answered(c: MetricCache) -> set[float]:
        return {v for i in range(SERIES)
                for v in c.query("pod_cpu_usage", {"pod_uid": f"pod-{i}"}, window_start, end + 1).values()}

    assert len(expected) > 60 * SERIES and answered(cache) >= expected
    cache.close()
    reopened = MetricCache(str(tmpfs.path / "metric-data"), memory_window=WINDOW)
    try:
        assert answered(reopened) >= expected
    finally:
        reopened.close()


def test_a_cache_started_on_a_full_disk_opens_its_file_once_there_is_room(tmpfs, caplog):
    """The agent restarted while the disk was full (sqlite cannot even make its -shm index): the cache runs from
    memory, and once there is room writes what it collected and reads back what it had before the restart."""
    where = str(tmpfs.path / "metric-data")
    before = time.time() - 60
    cache = MetricCache(where, memory_window=WINDOW, max_bytes=2 << 20)
    cache.append(usage(before, 2, since=before - 60))
    cache.close()
    caplog.set_level(logging.INFO, logger="koordlet")
    tmpfs.fill()
    cache = MetricCache(where, memory_window=WINDOW, max_bytes=2 << 20)
    after = usage(time.time())
    cache.append(after)
    for _ in range(3):
        cache.flush()
        cache.trim()
    assert cache.query("pod_cpu_usage", {"pod_uid": "pod-1"}, before - 60, time.time()).count() == 1
    tmpfs.release()
    cache.flush()
    for c in (cache, MetricCache(where, memory_window=WINDOW)):
        try:
            values = c.query("pod_cpu_usage", {"pod_uid": "pod-1"}, before - 60, time.time()).values()
            assert sorted(values) == sorted(s.value for s in usage(before, 2, since=before - 60) + after
                                            if s.labels == labels(pod_uid="pod-1"))
        finally:
            c.close()
    lines = said(caplog)
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert lines[0][1].startswith(f"storage full store=metriccache path={where} error=")
    assert lines[1][1].startswith(f"storage writable again store=metriccache path={where} after=")


@pytest.fixture
def daemon_on_tmpfs(tmp_path):
    for disk in mounted_tmpfs(tmp_path / "state", "4m"):
        host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
        host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                     {A: CgroupValues(cpu_ns=1, anon=60 << 20)})
        pods = tmp_path / "pods.yaml"
        pods.write_text(yaml.safe_dump([pod_object("uid-web", "web", namespace="shop", containers={"app": A})]))
        port = free_port()
        stderr = tmp_path / "stderr"
        cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
               "--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", "/proc/", "--pods-file", str(pods),
               "--addr", f"127.0.0.1:{port}", "--tsdb-path", str(disk.path / "metric-data"),
               "--report-dir", str(disk.path / "reports"),
               "--prediction-checkpoint-filepath", str(disk.path / "checkpoints"),
               "--metric-cache-flush-interval", "200ms", "--tsdb-max-bytes", "1Mi"]
        with open(stderr, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=tmp_path)
        try:
            yield proc, f"http://127.0.0.1:{port}", disk, stderr
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def test_the_running_agent_stays_ready_says_so_and_counts_it(daemon_on_tmpfs):
    """The wiring, as an operator sees it: /readyz stays 200 and names the full store, the gauge is 1 while it
    lasts, and the agent's log has one line when it begins and one when it ends."""
    proc, base, disk, stderr = daemon_on_tmpfs

    def status() -> tuple[int, str] | None:
        try:
            return get(base + "/readyz")
        except OSError:
            return None

    def gauge() -> str | None:
        body = get(base + "/metrics")[1]
        return next((line.split()[-1] for line in body.splitlines()
                     if line.startswith('koordlet_storage_full{node="node-a",store="metriccache"}')), None)

    assert wait_for(lambda: status() == (200, "ok\n"), 20), stderr.read_text()
    # the first training's checkpoints, then none for 10 minutes
    assert wait_for(lambda: any((disk.path / "checkpoints").glob("__node*")), 15), stderr.read_text()
    assert gauge() == "0.0"
    disk.fill()
    assert wait_for(lambda: "storage full store=metriccache" in stderr.read_text(), 15), stderr.read_text()
    code, body = get(base + "/readyz")
    assert (code, body) == (200, f"ok; storage full: metriccache ({disk.path / 'metric-data'})\n")
    assert wait_for(lambda: gauge() == "1.0", 5)
    time.sleep(2)                                      # ten flushes on a full disk
    disk.release()
    assert wait_for(lambda: "storage writable again store=metriccache" in stderr.read_text(), 15), \
        stderr.read_text()
    assert wait_for(lambda: gauge() == "0.0", 5)
    assert get(base + "/readyz") == (200, "ok\n")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    lines = stderr.read_text().splitlines()
    assert len([line for line in lines if "storage full" in line]) == 1
    assert len([line for line in lines if "storage writable again" in line]) == 1
    assert not [line for line in lines if " ERROR " in line]
