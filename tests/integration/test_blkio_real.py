"""Blkio QoS against the real kernel: file-backed loop devices, a real BestEffort container cgroup holding a
process doing O_DIRECT writes, and the throughput measured (the kernel's own per-task write counter) before, under
and after a NodeSLO beClass write_bps limit.

This VM's cgroup v1 blk-throttle is flat (a group's limit does not reach its children), so the limit only bites
because the strategy also pushes it to the container directory; the test puts the writer where a kubelet would.
Also checked on the real per-device files: several devices in one file, a stale device reset while the others
stay, and a second cycle that writes nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.qos.blkio import BlkIO
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import NodeSLOSpec
from koordlet.writer.executor import Executor
from tests.builders import host_paths, node_view, pod_meta
from tests.realcgroup import CGROUP_FS

pytestmark = pytest.mark.root

UID = "b10c0000-0000-0000-0000-000000000001"
CID = "b10c" + "0" * 60
LIMIT = 4 * 2**20                  # 4 MiB/s
SIZE = 64 * 2**20
CHUNK = 256 * 2**10

WRITER = """
import mmap, os
fd = os.open({dev!r}, os.O_WRONLY | os.O_DIRECT)
buf = mmap.mmap(-1, {chunk})       # page-aligned, as O_DIRECT wants
buf.write(b"k" * {chunk})
off = 0
while True:
    os.pwrite(fd, buf, off)
    off = (off + {chunk}) % {size}
"""


def _losetup(*args: str) -> str:
    return subprocess.run(["losetup", *args], check=True, capture_output=True, text=True, timeout=10).stdout.strip()


@pytest.fixture
def loops(tmp_path):
    """Two file-backed loop devices: [(path, "maj:min")...]; always detached."""
    if os.geteuid() != 0:
        pytest.skip("needs root for loop devices")
    if shutil.which("losetup") is None:
        pytest.skip("losetup (util-linux) not installed")
    devices: list[str] = []
    try:
        for i in range(2):
            backing = tmp_path / f"disk{i}.img"
            with open(backing, "wb") as f:
                f.truncate(SIZE)
            try:
                devices.append(_losetup("--find", "--show", str(backing)))
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                pytest.skip(f"no loop device available: {getattr(e, 'stderr', '') or e}")
        out = []
        for dev in devices:
            with open(f"/sys/class/block/{os.path.basename(dev)}/dev") as f:
                out.append((dev, f.read().strip()))
        yield out
    finally:
        for dev in devices:
            subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=10)


class BlkioTree:
    """The blkio part of a ``real_tree``: tests/realcgroup.py creates cpu, cpuacct, cpuset and memory only, so the
    same test root is mirrored under the v1 blkio hierarchy here (and linked into the agent's cgroup root)."""

    def __init__(self, tree) -> None:
        self.tree = tree
        self.base = os.path.join(CGROUP_FS, "blkio", tree.name)
        self.owned = not os.path.isdir(self.base)      # realcgroup may learn blkio one day: then it owns the dirs
        self.dirs: list[str] = []
        self.procs: list[subprocess.Popen] = []
        if self.owned:
            os.mkdir(self.base)
            os.symlink(self.base, os.path.join(tree.link_root, "blkio"))

    def real(self, rel: str, file: str = "") -> str:
        return os.path.join(self.base, rel, file)

    def mkdir(self, rel: str) -> None:
        self.tree.mkdir(rel)
        if not self.owned:
            return
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub not in self.dirs:
                os.mkdir(self.real(sub))
                self.dirs.append(sub)

    def spawn(self, rel: str, code: str) -> subprocess.Popen:
        """``python -c code`` in the container's cgroups, blkio included, before it execs."""
        def attach() -> None:
            self.tree.attach(rel, os.getpid())
            with open(self.real(rel, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=attach)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        if not self.owned:
            return
        for rel in [*reversed(self.dirs), ""]:
            for _ in range(50):          # a killed task can take a moment to leave the cgroup
                try:
                    os.rmdir(self.real(rel))
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


@pytest.fixture
def blkio_tree(real_tree):
    if not os.path.exists(os.path.join(CGROUP_FS, "blkio", "blkio.throttle.write_bps_device")):
        pytest.skip(f"cgroup v1 blkio controller with throttling not mounted at {CGROUP_FS}/blkio")
    tree = BlkioTree(real_tree)
    try:
        yield tree
    finally:
        tree.cleanup()


def wchar(pid: int) -> int:
    """Bytes the task passed to write() (``wchar`` of /proc/<pid>/io)."""
    return int(psutil.Process(pid).io_counters().write_chars)


def rate(pid: int, seconds: float, settle: float = 0.3) -> float:
    """Bytes/s the task wrote; each O_DIRECT write returns only once the (throttled) device took it."""
    time.sleep(settle)
    b0, t0 = wchar(pid), time.monotonic()
    time.sleep(seconds)
    return (wchar(pid) - b0) / (time.monotonic() - t0)


def kernel(tree: BlkioTree, rel: str, file: str) -> set[str]:
    with open(tree.real(rel, file)) as f:
        return set(f.read().split("\n")) - {""}


def be_blkio(blocks: list | None) -> NodeSLOSpec:
    """A NodeSLO with the BE class's blkio QoS on these blocks, or off (None)."""
    qos = {"beClass": {"blkioQOS": {"enable": blocks is not None, "blocks": blocks or []}}}
    slo, errors = merge_node_slo_spec({"resourceQOSStrategy": qos})
    assert errors == []
    return slo


def test_be_write_bps_limit_throttles_a_real_writer(real_tree, loops, blkio_tree):
    (dev_a, num_a), (dev_b, num_b) = loops
    cg = Cgroups(real_tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)
    meta = pod_meta(UID, "batch", namespace="ns", qos_class="BE", qos="BestEffort", containers={"main": CID},
                    layout=cg.layout)
    ctr = meta.containers[0][1]
    blkio_tree.mkdir(ctr)
    be_dir = cg.layout.qos_dir(meta.pod.kube_qos)
    paths = host_paths(real_tree.link_root)
    strategy, executor = BlkIO(paths), Executor(cg)

    writer = blkio_tree.spawn(ctr, WRITER.format(dev=dev_a, chunk=CHUNK, size=SIZE))
    baseline = rate(writer.pid, 1.0)
    if baseline < 3 * LIMIT:
        pytest.skip(f"unthrottled loop device too slow to tell a {LIMIT >> 20} MiB/s limit apart "
                    f"({baseline / 2**20:.1f} MiB/s)")

    both = [{"name": dev_a, "type": "device", "ioCfg": {"writeBPS": LIMIT}},
            {"name": dev_b, "type": "device", "ioCfg": {"readBPS": 2**20, "writeIOPS": 50}}]
    strategy.reconcile(node_view(pods=(meta,), slo=be_blkio(both), node=NodeInfo("n1")), executor)
    for rel in (be_dir, ctr):                # both devices, one line each, in the real per-device files
        assert kernel(blkio_tree, rel, "blkio.throttle.write_bps_device") == {f"{num_a} {LIMIT}"}
        assert kernel(blkio_tree, rel, "blkio.throttle.read_bps_device") == {f"{num_b} {2**20}"}
        assert kernel(blkio_tree, rel, "blkio.throttle.write_iops_device") == {f"{num_b} 50"}
    throttled = rate(writer.pid, 3.0)
    assert 0.65 * LIMIT <= throttled <= 1.35 * LIMIT, (
        f"throttled {throttled / 2**20:.2f} MiB/s, limit {LIMIT / 2**20:.0f} MiB/s, "
        f"baseline {baseline / 2**20:.0f} MiB/s")

    n = len(executor.events())
    strategy.reconcile(node_view(pods=(meta,), slo=be_blkio(both), node=NodeInfo("n1")), executor)
    assert executor.events()[n:] == []       # converged: a second cycle writes nothing

    # device b no longer configured: reset, a stays
    strategy.reconcile(node_view(pods=(meta,), slo=be_blkio(both[:1]), node=NodeInfo("n1")), executor)
    for rel in (be_dir, ctr):
        assert kernel(blkio_tree, rel, "blkio.throttle.write_bps_device") == {f"{num_a} {LIMIT}"}
        assert kernel(blkio_tree, rel, "blkio.throttle.read_bps_device") == set()
        assert kernel(blkio_tree, rel, "blkio.throttle.write_iops_device") == set()

    # disabled: every limit gone, full speed again
    strategy.reconcile(node_view(pods=(meta,), slo=be_blkio(None), node=NodeInfo("n1")), executor)
    for rel in (be_dir, ctr):
        assert kernel(blkio_tree, rel, "blkio.throttle.write_bps_device") == set()
    recovered = rate(writer.pid, 1.0)
    assert recovered > 3 * LIMIT, f"still throttled after the reset: {recovered / 2**20:.2f} MiB/s"
