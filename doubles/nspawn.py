"""A Debian 12 machine booted with its own systemd under systemd-nspawn, for tests of the agent as a systemd service
(tests/integration/test_under_systemd.py). No pytest here.

- **The root** (:func:`debian_root`): ``debootstrap --variant=minbase bookworm`` with systemd and what ``make
  install`` needs (python3-venv, make), from the Debian mirror this machine's apt sources name
  (doubles/aptsources.py), made once into a cache directory outside the checkout and reused for a week: a boot never
  writes to it (``--volatile=overlay``: the machine's writes go to a tmpfs laid over it and end with it). A root of
  another recipe, or one whose making was cut short, is made again.
- **The boot** (:class:`Machine`): ``systemd-nspawn -D <root> --register=no --keep-unit -b``: no machined and no
  unit of the host's service manager (this host's PID 1 need not be systemd); the container lives in the cgroup
  nspawn was started in. The host's network is shared (no ``--private-network``): a service in the machine listens
  on the host's loopback.
- **Its cgroups.** On a host with cgroup v1 controllers (this project's CI: cpu, cpuacct, cpuset, memory... each a
  hierarchy of its own, with systemd's name=systemd hierarchy and cgroup2 at /sys/fs/cgroup/unified, the "hybrid"
  layout nspawn then gives the container too), nspawn mounts the controller hierarchies read-only in the container:
  systemd inside could not make its units' cgroups there, and a service could not write them. So nspawn is started
  in a test root of every hierarchy (:class:`doubles.containerd.CgroupRoots`) and given a tmpfs at /sys/fs/cgroup
  with each controller hierarchy's test root bind-mounted at /sys/fs/cgroup/<hierarchy> (``--tmpfs``, ``--bind``):
  it finds those mounted and leaves them as they are, writable, and mounts name=systemd and cgroup2 itself, in the
  container's cgroup namespace. Inside, each test root is its hierarchy's root; from the host the same files are
  under :meth:`Machine.cgroup`.
- **Commands**: ``nsenter`` into every namespace of the container's PID 1 with a clean environment (``systemd-run
  --machine`` needs a registered machine); files through ``/proc/<PID 1>/root`` (:meth:`Machine.path`).
- **The end** (:meth:`Machine.close`): SIGTERM to nspawn (the container's systemd shuts down as a host does), SIGKILL
  after a timeout, then what is left in the test roots killed and the test roots removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence

import psutil

from doubles.aptsources import debian_mirror
from doubles.containerd import CGROUP_FS, CgroupRoots, hierarchies
from doubles.processes import file_tail, terminate

SUITE = "bookworm"
PACKAGES = ("systemd", "python3-venv", "make")     # the init, and what `make install` needs (README)
RECIPE = 1                                          # a change here or above makes a new root
MAX_AGE_DAYS = 7                                    # Debian's updates come in with the next root
CACHE = "/var/cache/koordlet-ci/nspawn"
COMPLETE = ".koordlet-complete"                     # written last: a root without it is remade
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class MachineError(RuntimeError):
    pass


def missing() -> str | None:
    """None when a machine can boot here, else why not (the reason a test skips with)."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, systemd-nspawn, nsenter, cgroups)"
    for tool, package in (("systemd-nspawn", "systemd-container"), ("debootstrap", "debootstrap"),
                          ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (apt-get install {package})"
    if not controller_hierarchies():
        return (f"needs cgroup v1 controllers at {CGROUP_FS}/<controller>: the machine's cgroups are this host's "
                "v1 hierarchies' test roots")
    if debian_mirror(SUITE) is None:
        return f"no apt source for Debian {SUITE} in /etc/apt/sources.list{{,.d/*}}: which mirror to use is unknown"
    return None


def controller_hierarchies() -> list[str]:
    """Mount points of the cgroup v1 hierarchies that hold controllers (not name=systemd, not cgroup2)."""
    out = []
    for point, fstype in hierarchies().items():
        if fstype == "cgroup" and os.path.basename(point) != "systemd":
            out.append(point)
    return out


# ---- the root --------------------------------------------------------------------------------------------------

def _arch() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def debian_root(cache: str = CACHE, max_age_days: float = MAX_AGE_DAYS) -> str:
    """The Debian root (a directory in ``cache``), made by debootstrap when the cache has none younger than
    ``max_age_days`` of this recipe. Concurrent callers wait for one another (a lock file in ``cache``)."""
    mirror = debian_mirror(SUITE)
    if mirror is None:
        raise MachineError(f"no apt source for Debian {SUITE}: which mirror to use is unknown")
    recipe = {"suite": SUITE, "packages": PACKAGES, "mirror": mirror, "arch": _arch(), "recipe": RECIPE}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    root = os.path.join(cache, f"{SUITE}-{_arch()}-{key}")
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = os.path.join(root, COMPLETE)
        if os.path.exists(stamp) and time.time() - os.path.getmtime(stamp) < max_age_days * 86400:
            return root
        for old in os.listdir(cache):                   # an expired root, another recipe's, a cut-short one
            if old.startswith(f"{SUITE}-"):
                shutil.rmtree(os.path.join(cache, old), ignore_errors=True)
        partial = root + ".partial"
        done = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                               f"--arch={_arch()}", SUITE, partial, mirror], capture_output=True, text=True,
                              timeout=1800, check=False)
        if done.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise MachineError(f"debootstrap {SUITE} from {mirror} failed: {(done.stderr or done.stdout)[-3000:]}")
        for name in ("etc/hostname", "etc/machine-id"):   # this machine's: each boot gets its own
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(partial, name))
        os.rename(partial, root)
        with open(stamp, "w") as f:
            f.write(json.dumps(recipe) + "\n")
        return root


# ---- the machine -----------------------------------------------------------------------------------------------

class Machine:
    """One boot of ``root``: :meth:`start`, :meth:`run`, :meth:`path`, :meth:`cgroup`, :meth:`close`. ``binds``
    are (host directory, directory in the machine) pairs, read-write."""

    def __init__(self, root: str, workdir: str, binds: Sequence[tuple[str, str]] = ()) -> None:
        self.root = root
        self.workdir = workdir
        self.binds = list(binds)
        self.name = f"koordlet-{os.getpid()}-{os.urandom(3).hex()}"
        self.log_path = os.path.join(workdir, "nspawn.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1: int | None = None
        link_root = os.path.join(workdir, "cgroup")
        os.makedirs(link_root, exist_ok=True)
        self.cgroups = CgroupRoots(link_root, prefix="koordlet-nspawn")

    def command(self) -> list[str]:
        cmd = ["systemd-nspawn", "--quiet", "-D", self.root, "--register=no", "--keep-unit", "-b",
               "--volatile=overlay", f"--machine={self.name}", "--console=read-only",
               "--tmpfs=/sys/fs/cgroup:mode=0755"]
        for point in controller_hierarchies():
            cmd.append(f"--bind={os.path.join(point, self.cgroups.name)}:{point}")
        cmd += [f"--bind={host}:{inside}" for host, inside in self.binds]
        return cmd

    def start(self, timeout: float = 180.0) -> None:
        """Boot, and wait until systemd inside says the system is up (running, or degraded: some unit of a
        minimal Debian failed, which is not this machine's concern)."""
        procs = [os.path.join(point, self.cgroups.name, "cgroup.procs") for point in self.cgroups.mounts]
        enter = " && ".join(f"echo $$ > {shlex.quote(p)}" for p in procs)
        log = open(self.log_path, "ab")                  # noqa: SIM115 (handed to the child)
        try:
            # the shell moves itself into the test roots, then becomes nspawn: the container starts there
            self.proc = subprocess.Popen(["sh", "-c", f'{enter} && exec "$@"', "sh", *self.command()],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        finally:
            log.close()
        end = time.monotonic() + timeout
        self.pid1 = self._wait_pid1(end)
        while True:
            state = self.run("systemctl", "is-system-running", "--wait", check=False,
                             timeout=max(1.0, end - time.monotonic())).stdout.strip()
            if state in ("running", "degraded"):
                return
            if time.monotonic() > end:
                raise MachineError(f"the machine did not come up (state {state!r}): {self.log_tail()}")
            time.sleep(0.5)

    def _wait_pid1(self, end: float) -> int:
        assert self.proc is not None
        own = os.readlink("/proc/self/ns/pid")
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise MachineError(f"systemd-nspawn exited ({self.proc.returncode}): {self.log_tail()}")
            with contextlib.suppress(psutil.Error, OSError):
                for child in psutil.Process(self.proc.pid).children():
                    if os.readlink(f"/proc/{child.pid}/ns/pid") != own:
                        return int(child.pid)
            time.sleep(0.05)
        raise MachineError(f"no PID 1 in the machine: {self.log_tail()}")

    def run(self, *cmd: str, check: bool = True, timeout: float = 120.0,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``cmd`` in the machine (every namespace of its PID 1), as root, with only PATH, LANG and ``env`` set."""
        assert self.pid1 is not None, "not started"
        variables = {"PATH": PATH, "LANG": "C.UTF-8", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0", **(env or {})}
        done = subprocess.run(["nsenter", f"--target={self.pid1}", "--all", "--", "env", "-i",
                               *(f"{k}={v}" for k, v in variables.items()), *cmd],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise MachineError(f"{' '.join(cmd)} exited {done.returncode}: {(done.stderr or done.stdout)[-3000:]}")
        return done

    def path(self, inside: str) -> str:
        """Where the host reaches the machine's ``inside`` (an absolute path)."""
        assert self.pid1 is not None, "not started"
        return f"/proc/{self.pid1}/root{inside}"

    def cgroup(self, hierarchy: str, rel: str = "") -> str:
        """The host's path of the machine's cgroup ``rel`` (as the machine names it) in ``hierarchy`` (cpu,
        cpuset, memory, systemd...)."""
        return self.cgroups.real(hierarchy, rel)

    def log_tail(self, n: int = 3000) -> str:
        return file_tail(self.log_path, n)

    def close(self, timeout: float = 60.0) -> None:
        """Shut the machine down (SIGTERM to nspawn; SIGKILL after ``timeout``), then remove its cgroups."""
        try:
            if self.proc is not None:
                terminate(self.proc, timeout)
        finally:
            self.proc = None
            self.pid1 = None
            self.cgroups.cleanup()
            # nspawn's propagation dir; it leaves it when /run is not a tmpfs
            shutil.rmtree(os.path.join("/run/systemd/nspawn/propagate", self.name), ignore_errors=True)
