"""A real containerd (≥ 1.7, NRI enabled) for the real-runtime tests and bench, with everything of its own under one
temporary directory, and the kubelet's cgroup tree inside a unique test root of every cgroup hierarchy.

- **Binaries**: two runtimes (:data:`RUNTIMES`), each a directory with ``containerd``, ``containerd-shim-runc-v2``
  and ``ctr``: containerd 1.7 from ``KOORDLET_CONTAINERD`` (.ci/install-runtime unpacks Debian 13's 1.7 to
  /var/cache/koordlet-ci/containerd/usr/bin) and containerd 2.x from ``KOORDLET_CONTAINERD_2`` (Debian unstable's
  2.1, unpacked to /var/cache/koordlet-ci/containerd2/usr/bin), else those directories, else ``PATH`` when its
  containerd is of that version; runc from ``PATH`` (Debian 12's 1.1.5 works with both).
- **Config** (version 2, one file for both: containerd 2.x migrates it to its version 3 when it loads it, and says so
  in its log): root, state, gRPC socket and NRI socket under the directory; NRI enabled with external connections,
  no pre-installed plugins and a 4 s plugin request timeout (containerd 2.x also puts it on each request, and the
  plugin answers within half of a request's deadline: 4 s keeps a test's raised hook budget, up to 2 s, in force on
  both runtimes, where the default 2 s would cut it to 1 s on 2.x alone); the CRI plugin with the ``native``
  snapshotter, the local pause image as ``sandbox_image``, ``restrict_oom_score_adj = true`` (a root without
  CAP_SYS_RESOURCE cannot lower oom_score_adj: runc would fail every Guaranteed container), runc with cgroupfs
  (``SystemdCgroup = false``).
- **Cgroups**: the pods' ``cgroup_parent`` is exactly the kubelet's (``/kubepods/besteffort/pod<uid>``); containerd
  and its shims run in a mount namespace of their own in which every cgroup hierarchy's test root is bind-mounted
  over the hierarchy, so runc puts ``/kubepods/...`` inside the test root and the host's real ``/kubepods`` is never
  touched. The agent sees the same tree through a directory of symlinks (``link_root``), as with
  doubles/realcgroup.py. The namespace is held by a small process of ours (``cat`` on a pipe: it ends when we do)
  and entered with ``nsenter`` by each containerd start, so a restarted containerd sees what the first one saw.
- **Lifecycle**: started and stopped by PID (SIGTERM, then SIGKILL); containerd gets SIGTERM if this process dies
  (``setpriv --pdeathsig``). ``close()`` removes the pods through CRI, stops containerd, ends the shims it started
  (found by their ``-address``), kills what is left in the test cgroups and removes them.

No pytest here: tests/realruntime/conftest.py wraps it in fixtures, bench/cri_create.py uses it directly.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import psutil

from doubles.cri import CRIClient, CRIError
from doubles.processes import file_tail

CGROUP_FS = "/sys/fs/cgroup"
BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
SHIM_DIRS = ("/run/containerd/s", "/run/containerd")          # innermost first


@dataclass(frozen=True)
class Runtime:
    """One containerd the real-runtime tests run against: where its binaries are looked for, and which versions
    count as it (``lowest`` included, ``beyond`` not)."""
    name: str                   # the tests' parameter id
    env: str                    # the variable naming its directory
    default_dir: str            # where .ci/install-runtime unpacks it
    lowest: tuple[int, int]
    beyond: tuple[int, int]

    def accepts(self, version: tuple[int, int, int]) -> bool:
        return self.lowest <= version[:2] < self.beyond


RUNTIMES = (
    Runtime("containerd-1.7", "KOORDLET_CONTAINERD", "/var/cache/koordlet-ci/containerd/usr/bin", (1, 7), (2, 0)),
    Runtime("containerd-2", "KOORDLET_CONTAINERD_2", "/var/cache/koordlet-ci/containerd2/usr/bin", (2, 0), (3, 0)),
)


# ---- what this host has ------------------------------------------------------------------------------------------

def runtime_dir(runtime: Runtime) -> str | None:
    """The directory holding this runtime's containerd, its runc shim and ctr; None when there is none."""
    candidates = [os.environ.get(runtime.env, ""), runtime.default_dir]
    found = shutil.which("containerd")
    if found:
        candidates.append(os.path.dirname(found))
    for d in candidates:
        if d and all(os.access(os.path.join(d, b), os.X_OK) for b in BINARIES):
            v = version_of(os.path.join(d, "containerd"))
            if v is not None and runtime.accepts(v):
                return d
    return None


def containerd_dir() -> str | None:
    """The directory of the first runtime of :data:`RUNTIMES` this host has; None when it has none."""
    return next((d for d in map(runtime_dir, RUNTIMES) if d is not None), None)


def version_of(binary: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except OSError:
        return None
    m = re.search(r"\bv?(\d+)\.(\d+)\.(\d+)", out)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def hierarchies() -> dict[str, str]:
    """Mounted cgroup hierarchies under /sys/fs/cgroup: mount point -> filesystem type (cgroup or cgroup2)."""
    out = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, fstype = left.split(), right.split()[0]
            root, point = fields[3], fields[4]
            if fstype in ("cgroup", "cgroup2") and root == "/" and point.startswith(CGROUP_FS + "/"):
                out[point] = fstype
    return out


def missing(runtime: Runtime | None = None) -> str | None:
    """None when ``runtime`` (any of :data:`RUNTIMES` when None) can run here, else why not (the reason a test
    skips with)."""
    if os.geteuid() != 0:
        return "needs root (containerd, runc, cgroups, mount namespaces)"
    if not os.path.exists(os.path.join(CGROUP_FS, "cpu", "cgroup.procs")):
        return f"needs cgroup v1 (no cpu controller at {CGROUP_FS}/cpu)"
    for tool in ("runc", "unshare", "nsenter", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (apt-get install runc util-linux; .ci/install-runtime)"
    wanted = RUNTIMES if runtime is None else (runtime,)
    if any(runtime_dir(r) is not None for r in wanted):
        return None
    return "; ".join(
        f"no containerd {'.'.join(map(str, r.lowest))} to < {'.'.join(map(str, r.beyond))}: run .ci/install-runtime "
        f"(it unpacks one to {r.default_dir}) or set {r.env} to a directory with {', '.join(BINARIES)}"
        for r in wanted)


# ---- the cgroup test root, in every hierarchy ----------------------------------------------------------------------

class CgroupRoots:
    """``<hierarchy>/<prefix>-<pid>-<id>`` in every mounted hierarchy, and ``link_root/<name>`` symlinks to them
    for every entry of /sys/fs/cgroup (``cpu``, ``cpuacct``, ``cpu,cpuacct``, ...), so that an agent with
    ``--cgroup-root-dir link_root`` sees this tree as the host's."""

    def __init__(self, link_root: str, prefix: str = "koordlet-rt") -> None:
        self.name = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.link_root = link_root
        self.mounts = hierarchies()
        self.dirs: list[str] = []                  # relative dirs made by mkdir, creation order
        made: list[str] = []
        try:
            for point in self.mounts:
                path = os.path.join(point, self.name)
                os.mkdir(path)
                made.append(path)
                _init_cpuset(path)
            for entry in sorted(os.listdir(CGROUP_FS)):
                real = os.path.realpath(os.path.join(CGROUP_FS, entry))
                if real in self.mounts:
                    os.symlink(os.path.join(real, self.name), os.path.join(link_root, entry))
        except BaseException:
            for path in reversed(made):
                _rmdir(path)
            raise

    def real(self, subsystem: str, rel: str = "") -> str:
        """The real path of ``rel`` in the hierarchy that ``/sys/fs/cgroup/<subsystem>`` names."""
        return os.path.join(os.path.realpath(os.path.join(CGROUP_FS, subsystem)), self.name, rel)

    def mkdir(self, rel: str) -> None:
        """``rel`` and its missing parents in every hierarchy, as the kubelet makes a pod cgroup."""
        parts = rel.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in self.dirs:
                continue
            for point in self.mounts:
                path = os.path.join(point, self.name, sub)
                os.makedirs(path, exist_ok=True)
                _init_cpuset(path)
            self.dirs.append(sub)

    def write(self, subsystem: str, rel: str, name: str, value: str) -> None:
        with open(self.real(subsystem, os.path.join(rel, name)), "w") as f:
            f.write(value)

    def read(self, subsystem: str, rel: str, name: str) -> str:
        with open(self.real(subsystem, os.path.join(rel, name))) as f:
            return f.read().strip()

    def rmdir(self, rel: str) -> None:
        """``rel`` and everything below it, in every hierarchy (the kubelet removing a pod cgroup)."""
        rel = rel.strip("/")
        for point in self.mounts:
            top = os.path.join(point, self.name, rel)
            for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                _rmdir(dirpath)
        self.dirs = [d for d in self.dirs if d != rel and not d.startswith(rel + "/")]

    def bind_commands(self, scratch: str) -> list[str]:
        """Shell commands that, in a private mount namespace, put each test root in place of its hierarchy.

        The hierarchy's own mount goes away there (bind the test root aside, unmount, move the bind in): runc
        resolves a container's ``/proc/<pid>/cgroup`` path against the mount's root, which must be the test root
        for the path to exist under the mount point."""
        out = []
        for i, point in enumerate(self.mounts):
            aside = os.path.join(scratch, str(i))
            out += [f"mkdir -p {aside}", f"mount --bind {os.path.join(point, self.name)} {aside}",
                    f"umount -l {point}", f"mount --move {aside} {point}"]
        return out

    def pids(self) -> set[int]:
        found: set[int] = set()
        for point in self.mounts:
            for dirpath, _, files in os.walk(os.path.join(point, self.name)):
                if "cgroup.procs" in files:
                    with contextlib.suppress(OSError), open(os.path.join(dirpath, "cgroup.procs")) as f:
                        found.update(int(p) for p in f.read().split())
        return found

    def cleanup(self) -> None:
        """Kill what is left in the tree (processes the runtime started for us), remove every dir, bottom-up."""
        for _ in range(3):
            left = self.pids()
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        for point in self.mounts:
            top = os.path.join(point, self.name)
            for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                _rmdir(dirpath)
        for entry in os.listdir(self.link_root):
            path = os.path.join(self.link_root, entry)
            if os.path.islink(path):
                os.unlink(path)


def _init_cpuset(path: str) -> None:
    """A new v1 cpuset cgroup starts with no CPUs and no memory nodes: copy the parent's, as runc and the
    kubelet do."""
    if not os.path.exists(os.path.join(path, "cpuset.cpus")):
        return
    for name in ("cpuset.cpus", "cpuset.mems"):
        with open(os.path.join(path, name)) as f:
            if f.read().strip():
                continue
        with open(os.path.join(os.path.dirname(path), name)) as src, open(os.path.join(path, name), "w") as dst:
            dst.write(src.read().strip())


def _rmdir(path: str) -> None:
    for _ in range(100):                      # a killed task can take a moment to leave its cgroup
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"could not remove test cgroup {path}")


# ---- containerd ----------------------------------------------------------------------------------------------------

CONFIG = """\
version = 2
root = "{root}"
state = "{state}"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.blockfile", "io.containerd.tracing.processor.v1.otlp",
                    "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[debug]
  level = "{log_level}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"

[plugins."io.containerd.nri.v1.nri"]
  disable = {nri_disable}
  disable_connections = false
  socket_path = "{nri_socket}"
  plugin_path = "{base}/nri/plugins"
  plugin_config_path = "{base}/nri/conf.d"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "4s"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{base}/cni/bin"
    conf_dir = "{base}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{base}/runc"
        SystemdCgroup = false

[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/{arch}"
  snapshotter = "native"
"""


class Containerd:
    """One containerd: ``start()``, ``stop()``, ``restart()``, ``import_image()``, ``close()``."""

    def __init__(self, bin_dir: str, cgroups: CgroupRoots, sandbox_image: str, nri: bool = True,
                 base: str | None = None, log_level: str = "info") -> None:
        self.bin_dir = bin_dir
        self.cgroups = cgroups
        self.nri = nri
        self.base = base or tempfile.mkdtemp(prefix="krt", dir="/tmp")      # unix socket paths: < 108 bytes
        self.socket = os.path.join(self.base, "c.sock")
        self.nri_socket = os.path.join(self.base, "nri.sock")
        self.config = os.path.join(self.base, "config.toml")
        self.log_path = os.path.join(self.base, "containerd.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # the shims' socket dir is fixed (<containerd's default state>/s): removed at close if it was not there
        self._made = [d for d in SHIM_DIRS if not os.path.exists(d)]
        self._holder: subprocess.Popen[bytes] | None = None
        runc = shutil.which("runc") or "runc"
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
        for d in ("root", "state", "opt", "nri/plugins", "nri/conf.d", "cni/bin", "cni/conf"):
            os.makedirs(os.path.join(self.base, d), exist_ok=True)
        with open(self.config, "w") as f:
            f.write(CONFIG.format(root=os.path.join(self.base, "root"), state=os.path.join(self.base, "state"),
                                  base=self.base, socket=self.socket, nri_socket=self.nri_socket,
                                  nri_disable="false" if nri else "true", sandbox_image=sandbox_image, runc=runc,
                                  arch=arch, log_level=log_level))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def version(self) -> tuple[int, int, int] | None:
        return version_of(os.path.join(self.bin_dir, "containerd"))

    def _env(self) -> Mapping[str, str]:
        return {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}

    def _namespace(self) -> int:
        """The PID of the process holding the mount namespace (made once: every test root over its hierarchy)."""
        if self._holder is not None and self._holder.poll() is None:
            return self._holder.pid
        script = " && ".join([*self.cgroups.bind_commands(os.path.join(self.base, "cg")), "echo ready", "exec cat"])
        self._holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self._holder.stdout is not None
        line = self._holder.stdout.readline()
        if line.strip() != b"ready":
            err = self._holder.stderr.read().decode() if self._holder.stderr else ""
            raise RuntimeError(f"mount namespace for containerd not made: {err.strip()[-500:]}")
        return self._holder.pid

    def start(self, timeout: float = 60.0) -> None:
        """Start containerd and wait until its CRI answers (and its NRI socket exists when NRI is on)."""
        holder = self._namespace()
        log = open(self.log_path, "ab")                          # noqa: SIM115 (handed to the child)
        try:
            # setpriv: SIGTERM to containerd if this process dies (no preexec_fn: a fork of a process with gRPC's
            # threads must go straight to exec)
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "TERM", "--", "nsenter", f"--mount=/proc/{holder}/ns/mnt", "--",
                 os.path.join(self.bin_dir, "containerd"), "--config", self.config],
                stdout=log, stderr=subprocess.STDOUT, env=self._env())
        finally:
            log.close()
        self.starts += 1
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        with CRIClient(self.socket, timeout=5) as client:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"containerd exited: {self.log_tail()}")
                try:
                    if os.path.exists(self.socket) and (not self.nri or os.path.exists(self.nri_socket)):
                        client.version(timeout=2)
                        return
                except CRIError:
                    pass
                if time.monotonic() > end:
                    raise RuntimeError(f"containerd not ready after {timeout:.0f} s: {self.log_tail()}")
                time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM by PID, SIGKILL after ``timeout``; the shims and their containers keep running."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self, timeout: float = 60.0) -> None:
        self.stop()
        self.start(timeout)

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        done = subprocess.run([os.path.join(self.bin_dir, "ctr"), "--address", self.socket, "--namespace", "k8s.io",
                               *args], capture_output=True, text=True, timeout=timeout, env=self._env(), check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)}: {done.stderr.strip()[-1000:]}")
        return done.stdout

    def import_image(self, archive_path: str) -> None:
        self.ctr("images", "import", "--snapshotter", "native", "--local", archive_path)

    def shim_pids(self) -> list[int]:
        """The runc shims this containerd started (their command line names its socket)."""
        return [p.info["pid"] for p in psutil.process_iter(["pid", "cmdline"])
                if (argv := p.info["cmdline"]) and argv[0].endswith("containerd-shim-runc-v2") and self.socket in argv]

    def log_tail(self, n: int = 4000) -> str:
        return file_tail(self.log_path, n)

    def log_lines(self, pattern: str) -> list[str]:
        with open(self.log_path, errors="replace") as f:
            return [line for line in f if re.search(pattern, line)]

    def close(self) -> None:
        """Remove every pod (through CRI, while containerd runs), stop containerd, end the shims it started, the
        namespace holder, and the files; the cgroups are the caller's (``CgroupRoots.cleanup``)."""
        if self.pid is not None:
            with CRIClient(self.socket, timeout=30) as client:
                try:
                    for sandbox in client.list_pod_sandbox():
                        with contextlib.suppress(CRIError):
                            client.remove_pod(sandbox.id)
                except CRIError:
                    pass
        self.stop()
        for pid in self.shim_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._holder is not None:
            self._holder.kill()
            self._holder.wait()
            for stream in (self._holder.stdin, self._holder.stdout, self._holder.stderr):
                if stream is not None:
                    stream.close()
            self._holder = None
        _unmount_under(self.base)
        shutil.rmtree(self.base, ignore_errors=True)
        for d in self._made:
            with contextlib.suppress(OSError):          # another instance's shim may still use it
                os.rmdir(d)


def _unmount_under(base: str) -> None:
    """Mounts containerd left under its directory in the host namespace (none expected: they are in its own)."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if p.startswith(base + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@contextlib.contextmanager
def running(bin_dir: str, cgroups: CgroupRoots, sandbox_image: str, nri: bool = True) -> Iterator[Containerd]:
    rt = Containerd(bin_dir, cgroups, sandbox_image, nri=nri)
    try:
        rt.start()
        yield rt
    finally:
        rt.close()
