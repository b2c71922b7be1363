"""A cgroup removed while its file is being read or written: the kernel answers ENODEV (kernfs refuses every
operation on a removed node), which is pod churn, not an error. Collectors count it as ``vanished`` and the
executor as ``missing``; neither logs it.

How the race is made deterministic with the real kernel: a real v1 cgroup's file is opened, the cgroup removed,
and the fake host tree's file replaced by a symlink to ``/proc/<pid>/fd/<n>``. Opening that link reopens the
removed kernfs node, so the agent's own readers and writers get exactly the ENODEV a mid-read removal gives.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import uuid
from collections.abc import Iterator

import pytest

from koordlet.collectors.throttled import ThrottledCollector
from koordlet.collectors.usage import UsageCollection
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, KubeQOS
from koordlet.host.fs import read_bytes, vanished
from koordlet.ops.metrics import AgentMetrics
from koordlet.writer.executor import Executor
from tests.builders import pod_meta
from tests.fakehost import CgroupValues, FakeHost
from tests.realcgroup import CGROUP_FS, v1_available

UID = "11111111-2222-3333-4444-0000000000e1"
CID = "e" * 64
FILES = {"cpuacct": "cpuacct.usage", "memory": "memory.stat", "cpu": "cpu.stat"}


@pytest.fixture
def removed() -> Iterator[dict[str, str]]:
    """{file name: a path whose open gives ENODEV}, from a real cgroup removed while the file was open."""
    reason = v1_available()
    if reason:
        pytest.skip(reason)
    name = f"koordlet-test-vanish-{uuid.uuid4().hex[:8]}"
    fds: list[int] = []
    out: dict[str, str] = {}
    try:
        for sub, f in (*FILES.items(), ("cpu", "cpu.shares")):
            d = os.path.join(CGROUP_FS, sub, name)
            os.makedirs(d, exist_ok=True)
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            fds.append(fd)
            out[f] = f"/proc/{os.getpid()}/fd/{fd}"
        for sub in {*FILES, "cpu"}:
            os.rmdir(os.path.join(CGROUP_FS, sub, name))
        yield out
    finally:
        for fd in fds:
            os.close(fd)
        for sub in {*FILES, "cpu"}:
            if os.path.isdir(os.path.join(CGROUP_FS, sub, name)):
                os.rmdir(os.path.join(CGROUP_FS, sub, name))


def relink(path: str, target: str) -> None:
    os.unlink(path)
    os.symlink(target, path)


def pod_tree(tmp_path) -> tuple[FakeHost, Cgroups, tuple]:
    host = FakeHost(str(tmp_path))
    host.add_pod(KubeQOS.BURSTABLE, UID, CgroupValues(cpu_ns=10**9), {CID: CgroupValues(cpu_ns=10**9)})
    cg = Cgroups.detect(host.paths)
    return host, cg, (pod_meta(UID, "web", containers={"app": CID}, layout=cg.layout),)


def skipped(metrics: AgentMetrics, collector: str, reason: str) -> float:
    return metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                             {"node": "n", "collector": collector, "reason": reason}) or 0.0


@pytest.mark.root
def test_the_kernel_says_enodev_and_that_counts_as_vanished(removed):
    with pytest.raises(OSError) as e:
        read_bytes(removed["memory.stat"])
    assert e.value.errno == errno.ENODEV and vanished(e.value)
    assert not vanished(PermissionError(errno.EACCES, "denied")) and not vanished(ValueError("x"))


@pytest.mark.root
@pytest.mark.parametrize("file", ["cpuacct.usage", "memory.stat"])
def test_usage_collector_counts_a_cgroup_removed_mid_read_as_vanished(tmp_path, removed, caplog, file):
    host, cg, pods = pod_tree(tmp_path)
    sub = "cpuacct" if file == "cpuacct.usage" else "memory"
    relink(cg.path(sub, pods[0].containers[0][1], file), removed[file])
    metrics = AgentMetrics("n")
    coll = UsageCollection(host.paths, cg, metrics, interval=1.0, outdated=10.0)
    with caplog.at_level(logging.WARNING):
        samples = coll.pod.collect(100.0, 10.0, pods)
    assert skipped(metrics, "pod", "vanished") == 1 and skipped(metrics, "pod", "error") == 0   # before: error
    assert {s.name for s in samples} == {"pod_memory_usage", "pod_memory_working_set"}   # the pod still counted
    assert "unreadable" not in caplog.text


@pytest.mark.root
def test_throttled_collector_counts_a_cgroup_removed_mid_read_as_vanished(tmp_path, removed, caplog):
    _, cg, pods = pod_tree(tmp_path)
    with open(cg.path("cpu", pods[0].cgroup_dir, "cpu.stat"), "w") as f:
        f.write("nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
    container_stat = cg.path("cpu", pods[0].containers[0][1], "cpu.stat")
    with open(container_stat, "w") as f:
        f.write("nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
    relink(container_stat, removed["cpu.stat"])
    metrics = AgentMetrics("n")
    with caplog.at_level(logging.WARNING):
        ThrottledCollector(cg, metrics).collect(Tick(100.0, pods, (), threading.Event()))
    assert skipped(metrics, "podthrottled", "vanished") == 1
    assert skipped(metrics, "podthrottled", "error") == 0
    assert "unreadable" not in caplog.text


@pytest.mark.root
def test_executor_counts_a_write_to_a_removed_cgroup_as_missing(tmp_path, removed, caplog):
    _, cg, pods = pod_tree(tmp_path)
    path = cg.path("cpu", pods[0].containers[0][1], "cpu.shares")
    with open(path, "w") as f:
        f.write("1024\n")
    relink(path, removed["cpu.shares"])
    metrics = AgentMetrics("n")
    ex = Executor(cg, metrics)
    with caplog.at_level(logging.WARNING):
        r = ex.update([ex.cgroup(pods[0].containers[0][1], "cpu.shares", 2, "pod default/web", "test")])
    assert (r.missing, r.failed, r.written) == (1, 0, 0)                                      # before: failed
    assert metrics.registry.get_sample_value("koordlet_executor_updates_total",
                                             {"node": "n", "resource": "cpu.shares", "outcome": "missing"}) == 1
    assert metrics.registry.get_sample_value("koordlet_executor_updates_total",
                                             {"node": "n", "resource": "cpu.shares",
                                              "outcome": "error_ENODEV"}) is None
    assert "write failed" not in caplog.text and ex.cache_size() == 0
