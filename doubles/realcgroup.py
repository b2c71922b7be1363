"""Real cgroup v1 trees for integration tests and benches, under a unique test root, always cleaned up.

Layout: ``/sys/fs/cgroup/<subsystem>/koordlet-test-<id>/...`` for each subsystem, plus a temporary
directory whose ``<subsystem>`` entries are symlinks to those test roots. Pointing the agent's cgroup root
at that directory makes ``kubepods/...`` land inside the test root with no special code in the agent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import psutil

CGROUP_FS = "/sys/fs/cgroup"
SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory")
# The test root's weight against everything else on the host (a nice-0 task weighs 1024): the processes a test
# starts compete with each other exactly as in a pod tree, while a loaded host (a build, stress-ng --cpu N)
# still leaves them most of a CPU each, so effects measured in CPU time (throttling, shares, cpu.idle) show up
# however busy the machine is. Four tasks' worth, not the maximum, so pytest itself (one task outside the tree)
# keeps a fair slice while the test's spinners run.
TREE_CPU_SHARES = 4096


def v1_available() -> str | None:
    """None when usable, else the reason to skip."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    for s in SUBSYSTEMS:
        if not os.path.exists(os.path.join(CGROUP_FS, s, "cgroup.procs")):
            return f"cgroup v1 {s} controller not mounted at {CGROUP_FS}/{s}"
    return None


class RealCgroupTree:
    def __init__(self, link_root: str) -> None:
        self.name = f"koordlet-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.link_root = link_root
        self.dirs: list[str] = []          # relative dirs, creation order
        self.procs: list[subprocess.Popen] = []
        for s in SUBSYSTEMS:
            base = os.path.join(CGROUP_FS, s, self.name)
            os.mkdir(base)
            if s == "cpuset":
                self._init_cpuset(base)
            if s == "cpu":
                with open(os.path.join(base, "cpu.shares"), "w") as f:
                    f.write(str(TREE_CPU_SHARES))
            os.symlink(base, os.path.join(link_root, s))

    @staticmethod
    def _init_cpuset(path: str) -> None:
        parent = os.path.dirname(path)
        for f in ("cpuset.cpus", "cpuset.mems"):
            with open(os.path.join(parent, f)) as src:
                value = src.read().strip()
            with open(os.path.join(path, f), "w") as dst:
                dst.write(value)

    def real(self, subsystem: str, rel: str = "") -> str:
        return os.path.join(CGROUP_FS, subsystem, self.name, rel)

    def mkdir(self, rel: str) -> None:
        """Create rel (and missing parents) in every subsystem, as the kubelet/runtime would."""
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in self.dirs:
                continue
            for s in SUBSYSTEMS:
                os.mkdir(self.real(s, sub))
                if s == "cpuset":
                    self._init_cpuset(self.real(s, sub))
            self.dirs.append(sub)

    def attach(self, rel: str, pid: int) -> None:
        for s in SUBSYSTEMS:
            with open(self.real(s, os.path.join(rel, "cgroup.procs")), "w") as f:
                f.write(str(pid))

    def spawn(self, rel: str, code: str) -> subprocess.Popen:
        """Start ``python -c code`` already inside the cgroup (attached before exec, so every page it touches
        is charged there)."""
        proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: self.attach(rel, os.getpid()))
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        for rel in reversed(self.dirs):
            for s in SUBSYSTEMS:
                _rmdir(self.real(s, rel))
        for s in SUBSYSTEMS:
            _rmdir(self.real(s))


def _rmdir(path: str) -> None:
    for _ in range(50):       # a killed task can take a moment to leave the cgroup
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"could not remove test cgroup {path}")


BUSY = "import time\nwhile True: pass"
IDLE = "import time\ntime.sleep(600)"
MEMORY_64M = "import time\nb = bytes(range(256)) * (1 << 18)\nprint('ready', flush=True)\ntime.sleep(600)"


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (the kernel's own per-process account: utime and
    stime of /proc/<pid>/stat)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def proc_rss_anon(pid: int) -> int:
    """Resident anonymous bytes of a process (``RssAnon``): the kernel's resident pages less its file and shmem
    ones, which psutil reports as ``shared`` (both are /proc/<pid>/statm's counters)."""
    info = psutil.Process(pid).memory_info()
    return int(info.rss - info.shared)


def cpus_allowed(pid: int) -> str:
    """The kernel's Cpus_allowed_list of a task (what a cpuset change must show)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")
