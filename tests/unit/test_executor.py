"""The executor against real files in a fake cgroup tree: caching, kernel-style comparison, v1/v2 translation,
leveled ordering, failures retried, audit trail."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.ops.metrics import AgentMetrics
from koordlet.writer.executor import Executor, Update
from koordlet.writer.resources import Merge


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def tree(tmp_path, version=CgroupVersion.V1):
    root = tmp_path / "cg"
    root.mkdir()
    return Cgroups(str(root), version, Driver.CGROUPFS)


def put(cgroups: Cgroups, subsystem: str, rel: str, file: str, value: str) -> str:
    path = cgroups.path(subsystem, rel, file)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(value + "\n")          # the kernel prints a newline; we write none
    return path


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def writes(executor: Executor) -> list[tuple[str, str]]:
    return [(os.path.relpath(str(e["file"]), executor.cgroups.root), str(e["new"])) for e in executor.events()]


def test_write_then_cache_then_forced_refresh_repairs_drift(tmp_path):
    cg = tree(tmp_path)
    path = put(cg, "cpu", "kubepods/besteffort", "cpu.idle", "0")
    clock = Clock()
    ex = Executor(cg, clock=clock)
    u = ex.cgroup("kubepods/besteffort", "cpu.idle", 1, "qos BestEffort", "cpu-qos")
    assert ex.update([u]).written == 1
    assert read(path) == "1"
    # cached: no read at all (the file could even be gone and we would not notice until the refresh)
    os.chmod(path, 0)
    if os.geteuid() != 0:
        assert ex.update([u]).unchanged == 1
    os.chmod(path, 0o644)
    with open(path, "w") as f:       # someone else changes it
        f.write("0")
    assert ex.update([u]).unchanged == 1 and read(path) == "0"     # inside the refresh window
    clock.t += 61
    r = ex.update([u])
    assert (r.written, read(path)) == (1, "1")


def test_restart_over_correct_host_writes_nothing(tmp_path):
    cg = tree(tmp_path)
    put(cg, "cpu", "kubepods/pod1", "cpu.cfs_quota_us", "-1")
    put(cg, "cpuset", "kubepods/pod1", "cpuset.cpus", "0-3,8")
    put(cg, "memory", "kubepods/pod1", "memory.limit_in_bytes", "9223372036854771712")
    ex = Executor(cg)
    updates = [ex.cgroup("kubepods/pod1", "cpu.cfs_quota_us", -1, "p", "t"),
               ex.cgroup("kubepods/pod1", "cpuset.cpus", "8,0,1,2,3", "p", "t"),
               ex.cgroup("kubepods/pod1", "memory.limit_in_bytes", -1, "p", "t")]
    r = ex.update(updates)
    assert (r.written, r.unchanged) == (0, 3)
    assert ex.events() == []


def test_v2_translation(tmp_path):
    cg = tree(tmp_path, CgroupVersion.V2)
    quota = put(cg, "", "kubepods/pod1", "cpu.max", "max 100000")
    weight = put(cg, "", "kubepods/pod1", "cpu.weight", "100")
    mem = put(cg, "", "kubepods/pod1", "memory.max", "max")
    burst = put(cg, "", "kubepods/pod1", "cpu.max.burst", "0")
    ex = Executor(cg)
    r = ex.update([ex.cgroup("kubepods/pod1", "cpu.cfs_quota_us", 50000, "p", "t"),
                   ex.cgroup("kubepods/pod1", "cpu.shares", 1024, "p", "t"),
                   ex.cgroup("kubepods/pod1", "memory.limit_in_bytes", -1, "p", "t"),
                   ex.cgroup("kubepods/pod1", "cpu.cfs_burst_us", 20000, "p", "t")])
    assert (read(quota), read(weight), read(burst)) == ("50000", "39", "20000")
    assert read(mem) == "max\n" and r.unchanged == 1        # -1 == max: untouched
    assert ex.cgroup("kubepods/pod1", "net_cls.classid", 1, "p", "t") is None   # v1-only resource


def test_missing_files_are_counted_not_cached_and_quiet(tmp_path, caplog):
    cg = tree(tmp_path)
    metrics = AgentMetrics("n")
    ex = Executor(cg, metrics)
    u = ex.cgroup("kubepods", "cpu.bvt_warp_ns", 2, "qos", "cpu-qos")
    assert ex.update([u]).missing == 1
    assert ex.update([u]).missing == 1                      # not cached: checked again next cycle
    assert metrics.registry.get_sample_value("koordlet_executor_updates_total", {
        "node": "n", "resource": "cpu.bvt_warp_ns", "outcome": "missing"}) == 2
    assert "bvt" not in caplog.text


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file modes; the failure is provoked another way")
def test_failed_write_is_logged_once_counted_and_retried(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="koordlet.writer.executor")      # "write recovered" is an INFO line
    cg = tree(tmp_path)
    path = put(cg, "cpu", "kubepods", "cpu.shares", "2")
    os.chmod(path, 0o444)
    metrics = AgentMetrics("n")
    ex = Executor(cg, metrics)
    u = ex.cgroup("kubepods", "cpu.shares", 1024, "qos", "t")
    assert ex.update([u]).failed == 1
    assert ex.update([u]).failed == 1
    assert caplog.text.count("write failed") == 1
    os.chmod(path, 0o644)
    assert ex.update([u]).written == 1
    assert "write recovered" in caplog.text


def test_failed_write_on_a_directory(tmp_path, caplog):
    """EISDIR stands in for a kernel refusal (EINVAL/EBUSY) and works as root too."""
    cg = tree(tmp_path)
    os.makedirs(cg.path("cpu", "kubepods", "cpu.shares"))
    metrics = AgentMetrics("n")
    ex = Executor(cg, metrics)
    r = ex.update([ex.cgroup("kubepods", "cpu.shares", 1024, "qos", "t")])
    assert r.failed == 1 or r.missing == 1
    label = "error_" + errno.errorcode[errno.EISDIR]
    if r.failed:
        assert metrics.registry.get_sample_value("koordlet_executor_updates_total", {
            "node": "n", "resource": "cpu.shares", "outcome": label}) == 1
        assert "write failed" in caplog.text


def test_leveled_cpuset_widens_parents_first_and_narrows_children_first(tmp_path):
    cg = tree(tmp_path)
    parent = put(cg, "cpuset", "kubepods/besteffort", "cpuset.cpus", "0-1")
    child = put(cg, "cpuset", "kubepods/besteffort/pod1", "cpuset.cpus", "0-1")
    ex = Executor(cg)
    ex.update_leveled([[ex.cgroup("kubepods/besteffort", "cpuset.cpus", "2-3", "qos", "s")],
                       [ex.cgroup("kubepods/besteffort/pod1", "cpuset.cpus", "2-3", "pod", "s")]])
    assert writes(ex) == [(os.path.relpath(parent, cg.root), "0-3"),       # parent: union first
                          (os.path.relpath(child, cg.root), "2-3"),        # child narrowed (bottom-up)
                          (os.path.relpath(parent, cg.root), "2-3")]       # then the parent
    assert read(parent) == read(child) == "2-3"


def test_leveled_quota_raise_parent_first_lower_child_first(tmp_path):
    cg = tree(tmp_path)
    parent = put(cg, "cpu", "kubepods/burstable/pod1", "cpu.cfs_quota_us", "100000")
    child = put(cg, "cpu", "kubepods/burstable/pod1/c1", "cpu.cfs_quota_us", "100000")
    ex = Executor(cg)
    ex.update_leveled([[ex.cgroup("kubepods/burstable/pod1", "cpu.cfs_quota_us", 300000, "pod", "s")],
                       [ex.cgroup("kubepods/burstable/pod1/c1", "cpu.cfs_quota_us", 300000, "c", "s")]])
    assert [f for f, _ in writes(ex)] == [os.path.relpath(parent, cg.root), os.path.relpath(child, cg.root)]
    ex2 = Executor(cg)
    ex2.update_leveled([[ex2.cgroup("kubepods/burstable/pod1", "cpu.cfs_quota_us", 50000, "pod", "s")],
                        [ex2.cgroup("kubepods/burstable/pod1/c1", "cpu.cfs_quota_us", 50000, "c", "s")]])
    assert [f for f, _ in writes(ex2)] == [os.path.relpath(child, cg.root), os.path.relpath(parent, cg.root)]
    assert read(parent) == read(child) == "50000"
    # unlimited is the loosest value: a parent going to -1 is written top-down at once
    ex3 = Executor(cg)
    ex3.update_leveled([[ex3.cgroup("kubepods/burstable/pod1", "cpu.cfs_quota_us", -1, "pod", "s")], []])
    assert read(parent) == "-1"


def test_audit_events_and_sysctl_update(tmp_path):
    cg = tree(tmp_path)
    sysctl = tmp_path / "proc/sys/vm/min_free_kbytes"
    sysctl.parent.mkdir(parents=True)
    sysctl.write_text("67584\n")
    ex = Executor(cg, wall=lambda: 1700000000.0)
    ex.update([Update(str(sysctl), "90112", "node", "system-config")])
    assert ex.events() == [{"createdAt": 1700000000.0, "owner": "node", "reason": "system-config",
                            "file": str(sysctl), "old": "67584", "new": "90112"}]
    assert Update(str(sysctl), "1", "n", "r").merge is Merge.NONE


def test_audit_ring_is_bounded(tmp_path):
    cg = tree(tmp_path)
    path = put(cg, "cpu", "", "cpu.shares", "2")
    ex = Executor(cg, audit_size=3)
    for v in range(3, 10):
        ex.update([Update(path, str(v), "n", "r")])
    assert [e["new"] for e in ex.events()] == ["7", "8", "9"]
    assert [e["new"] for e in ex.events(limit=1)] == ["9"]


def test_keyed_device_lines(tmp_path):
    cg = tree(tmp_path)
    path = put(cg, "blkio", "kubepods/besteffort", "blkio.throttle.read_bps_device", "8:0 1048576\n8:16 2097152")
    ex = Executor(cg)
    same = ex.cgroup("kubepods/besteffort", "blkio.throttle.read_bps_device", "8:16 2097152", "qos", "blkio")
    reset_absent = ex.cgroup("kubepods/besteffort", "blkio.throttle.read_bps_device", "8:32 0", "qos", "blkio")
    assert ex.update([same, reset_absent]).unchanged == 2
    ex.update([ex.cgroup("kubepods/besteffort", "blkio.throttle.read_bps_device", "8:0 4096", "qos", "blkio")])
    assert read(path) == "8:0 4096"          # (a real kernel would merge the line into its table)
    assert ex.cgroup("kubepods", "io.max", "8:0 rbps=1", "q", "b") is None          # v2-only on v1
    (tmp_path / "v2").mkdir()
    cg2 = tree(tmp_path / "v2", CgroupVersion.V2)
    io_max = put(cg2, "", "kubepods", "io.max", "8:0 rbps=1048576 wbps=max riops=max wiops=max")
    ex2 = Executor(cg2)
    assert ex2.update([ex2.cgroup("kubepods", "io.max", "8:0 rbps=1048576", "q", "b")]).unchanged == 1
    assert ex2.update([ex2.cgroup("kubepods", "io.max", "8:0 wbps=4096", "q", "b")]).written == 1
    assert read(io_max) == "8:0 wbps=4096"
    assert ex2.cgroup("kubepods", "blkio.cost.weight", "8:0 100", "q", "b") is None  # v1-only on v2


def test_owned_files_are_created_atomically_and_compared(tmp_path):
    cg = tree(tmp_path)
    target = tmp_path / "terway" / "pod.json"
    target.parent.mkdir()
    ex = Executor(cg)
    u = Update(str(target), '{"a": 1}', "node", "netqos", create=True)
    assert ex.update([u]).written == 1 and target.read_text() == '{"a": 1}'
    assert Executor(cg).update([u]).unchanged == 1                    # a restart finds it in place
    assert [p.name for p in target.parent.iterdir()] == ["pod.json"]  # no temp file left behind
    assert Executor(cg).update([Update(str(tmp_path / "newdir" / "x"), "1", "n", "r", create=True)]).written == 1
    assert (tmp_path / "newdir" / "x").read_text() == "1"                # its directory is ours too
    ex = Executor(cg)
    assert ex.remove(str(target), "node", "policy off") and not target.exists()
    assert not ex.remove(str(target), "node", "policy off")
    assert ex.events()[-1]["new"] == "<removed>"


def test_append_one_id_per_write(tmp_path):
    cg = tree(tmp_path)
    tasks = tmp_path / "tasks"
    tasks.write_text("")
    ex = Executor(cg)
    r = ex.append(str(tasks), ["11", "12"], "pod ns/p", "resctrl")
    assert r.written == 2 and tasks.read_text() == "1112"           # a plain file just concatenates the writes
    assert ex.events()[-1]["new"] == "+2 ids"
    assert ex.append(str(tmp_path / "gone" / "tasks"), ["1"], "p", "r").missing == 1
    assert ex.append(str(tasks), [], "p", "r").written == 0


def test_keyed_lines_are_cached_per_device(tmp_path):
    cg = tree(tmp_path)
    path = put(cg, "blkio", "kubepods/besteffort", "blkio.throttle.write_bps_device", "8:0 100\n8:16 200")
    clock = Clock()
    ex = Executor(cg, clock=clock)
    both = [ex.cgroup("kubepods/besteffort", "blkio.throttle.write_bps_device", v, "qos", "blkio")
            for v in ("8:0 100", "8:16 200")]
    assert ex.update(both).unchanged == 2
    with open(path, "w") as f:           # changed behind our back: both devices are trusted until the refresh
        f.write("8:0 1\n8:16 2")
    assert ex.update(both).unchanged == 2
    clock.t += 61
    assert ex.update(both).written == 2
