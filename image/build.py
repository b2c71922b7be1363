"""``make image``: the agent's container image as an OCI archive, built on this machine with no registry and no
base image pulled: the same image the Containerfile builds from ``debian:12-slim`` where a registry is at hand.

1. **Root filesystem from Debian's packages**: ``debootstrap --variant=minbase bookworm`` with ``python3`` (Debian
   12's Python 3.11), trimmed as ``debian:12-slim`` is: no apt lists or package caches, no documentation but the
   copyright files, no man or info pages, no translations, no logs; a dpkg configuration keeps packages installed
   later (``apt-get install`` in an image built on this one) just as slim. ``/etc/resolv.conf`` and
   ``/etc/hostname`` are the runtime's to provide, and ``/dev`` its to fill. Kept (``--cache``) as a tar for
   ``--cache-max-age-days`` (7: Debian's security updates come in with the next one), keyed by what it is made of.
2. **The agent**: wheels of the project and its dependencies built here (``pip wheel`` of a copy of the checkout, so
   nothing is written into it; pip's own configuration and cache apply), installed offline inside the root
   (chroot) into a venv at ``/opt/koordlet`` by a pip run from its wheel, so no pip is left in the image.
   ``kubernetes/aio`` (the client's asyncio twin, ~70 MB with its bytecode) and the distributions only it needs
   (aiohttp and its dependencies, ~13 MB) go: nothing the agent runs imports them. The bytecode pip compiled stays
   (``import kubernetes.client`` loads every API and model class: 31 MB of source to compile at every start
   without it), and so do the files' mtimes, which that bytecode is checked against.
   ``/koordlet`` links to the console script, for upstream's DaemonSet (command ``/koordlet <args>``).
3. **The archive** (doubles/ociimage.py): one gzip layer, the image config (entrypoint ``koordlet``: with no
   subcommand that runs the agent; ``PATH`` with the venv first; port 9316; OCI labels), the manifest and an index
   naming ``--ref``; ``ctr -n k8s.io images import`` reads it, and so do ``podman load`` and ``skopeo``.

Every file is owned by root (uid 0) and none is writable by others but the sticky ``/tmp`` and ``/var/tmp``: the
agent runs as root, so a file another user could change would be code that user runs as root; the build checks it.

Needs root (debootstrap, chroot), ``debootstrap``, a Debian mirror (``--mirror``) and pip's package index.
Run from the repository root: ``python -m image.build --out build/image/koordlet-image.tar`` (``make image``).
tests/realruntime/test_image.py calls :func:`build` and runs the result under containerd as the DaemonSet does.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from doubles.ociimage import Layer, write_archive, write_layer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3",)
PREFIX = "/opt/koordlet"
REF = "ghcr.io/koordlet-py/koordlet:latest"       # the manifests' image: an imported archive serves them as they are
PORT = 9316
PATH = f"{PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# the recipe of the cached base: a change here makes a new cache key
BASE_RECIPE = 1
# What the agent never imports, left out of the venv: the kubernetes client's asyncio twin (a subtree of its
# package; the agent uses the synchronous client) and the distributions only that twin needs (uninstalled; the
# build checks that every other requirement of every installed distribution is still met).
PRUNE = ("kubernetes/aio",)
ASYNC_ONLY = ("aiohttp", "aiohttp-retry", "aiohappyeyeballs", "aiosignal", "attrs", "frozenlist", "multidict",
              "propcache", "yarl")
REQUIREMENTS_MET = """import sys
from importlib import metadata
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
dropped = set(sys.argv[1].split(","))
dists = [d for d in metadata.distributions() if "site-packages" in str(getattr(d, "_path", ""))]
installed = {canonicalize_name(d.metadata["Name"]) for d in dists}
unmet = []
for d in dists:
    name = canonicalize_name(d.metadata["Name"])
    for text in d.requires or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        dep = canonicalize_name(req.name)
        if dep not in installed and not (name == "kubernetes" and dep in dropped):
            unmet.append(f"{name} needs {dep}")
print("; ".join(unmet))
sys.exit(1 if unmet else 0)
"""
DPKG_SLIM = """\
# koordlet-py image (image/build.py): packages installed later stay as slim as the image (as debian:*-slim):
# no documentation but the copyright files, no man or info pages, no translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
"""
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}


class BuildError(RuntimeError):
    pass


@dataclass
class Result:
    archive: str
    ref: str
    version: str
    size: int                              # the archive's bytes (what a registry would store: the gzip layer)
    unpacked: int                          # the layer's tar: the image on disk
    base_cached: bool                      # the Debian root came from the cache
    seconds: dict[str, float] = field(default_factory=dict)        # phase -> wall time
    largest: list[tuple[str, int]] = field(default_factory=list)   # (path in the image, bytes), largest first


def missing() -> str | None:
    """None when this machine can build the image, else why not."""
    if os.geteuid() != 0:
        return "needs root (debootstrap and chroot)"
    for tool in ("debootstrap", "chroot", "tar"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (apt-get install debootstrap)"
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, check=False).returncode:
        return f"{sys.executable} has no pip (make image runs the project's venv)"
    return None


def _run(cmd: Sequence[str], what: str, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    done = subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip())[-3000:]
        raise BuildError(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")
    return done.stdout


def _chroot(rootfs: str, cmd: Sequence[str], what: str, **env: str) -> str:
    """``cmd`` inside the root with a clean environment (none of this machine's PIP_* or PYTHON* settings)."""
    return _run(["chroot", rootfs, *cmd], what, env={**CHROOT_ENV, **env})


def _arch() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


# ---- 1. the Debian root -----------------------------------------------------------------------------------------

def base_key(suite: str, mirror: str) -> str:
    recipe = {"suite": suite, "mirror": mirror, "variant": "minbase", "packages": PACKAGES, "arch": _arch(),
              "recipe": BASE_RECIPE, "slim": DPKG_SLIM}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def base_rootfs(rootfs: str, cache: str | None, suite: str, mirror: str, max_age_days: float) -> bool:
    """Debian ``suite`` (minbase + PACKAGES, trimmed) in the empty directory ``rootfs``: from the cache when it holds
    one younger than ``max_age_days``, else debootstrapped (and cached). True when it came from the cache."""
    cached = os.path.join(cache, f"base-{suite}-{_arch()}-{base_key(suite, mirror)}.tar") if cache else None
    if cached and os.path.exists(cached) and time.time() - os.path.getmtime(cached) < max_age_days * 86400:
        _run(["tar", "--numeric-owner", "-C", rootfs, "-xpf", cached], f"unpacking the cached root {cached}")
        return True
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", f"--arch={_arch()}", suite, rootfs,
          mirror], f"debootstrap {suite} from {mirror}")
    slim(rootfs)
    if cached:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        for old in glob.glob(os.path.join(os.path.dirname(cached), f"base-{suite}-{_arch()}-*.tar")):
            os.unlink(old)                                  # an expired or other-recipe base
        partial = cached + f".{os.getpid()}.partial"
        _run(["tar", "--numeric-owner", "-C", rootfs, "-cf", partial, "."], f"caching the root in {cached}")
        os.replace(partial, cached)
    return False


def slim(rootfs: str) -> None:
    """What debian:12-slim leaves out, and what belongs to the machine the root was made on."""
    def empty(rel: str, keep: Callable[[str], bool] = lambda _: False) -> None:
        top = os.path.join(rootfs, rel)
        if not os.path.isdir(top):
            return
        for dirpath, dirnames, filenames in os.walk(top, topdown=False):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if not keep(os.path.relpath(path, rootfs)):
                    os.unlink(path)
            for name in dirnames:
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    os.unlink(path)
                elif not os.listdir(path):
                    os.rmdir(path)
    empty("usr/share/doc", keep=lambda p: os.path.basename(p) == "copyright")
    empty("usr/share/locale", keep=lambda p: p == "usr/share/locale/locale.alias")
    for rel in ("usr/share/man", "usr/share/info", "usr/share/lintian", "var/lib/apt/lists", "var/cache/apt",
                "var/cache/debconf", "var/cache/ldconfig", "root"):
        empty(rel, keep=lambda p: p in ("var/cache/debconf/config.dat", "var/cache/debconf/templates.dat",
                                       "var/cache/debconf/passwords.dat", "root/.bashrc", "root/.profile"))
    os.makedirs(os.path.join(rootfs, "var/lib/apt/lists/partial"), exist_ok=True)
    os.makedirs(os.path.join(rootfs, "var/cache/apt/archives/partial"), exist_ok=True)
    for path in glob.glob(os.path.join(rootfs, "var/lib/dpkg/*-old")):
        os.unlink(path)
    for dirpath, _, filenames in os.walk(os.path.join(rootfs, "var/log")):
        for name in filenames:                              # bootstrap, dpkg, apt logs; empty wtmp and the like
            os.truncate(os.path.join(dirpath, name), 0)
    for rel in ("etc/resolv.conf", "etc/hostname"):         # this machine's: the runtime provides the container's
        path = os.path.join(rootfs, rel)
        if os.path.lexists(path):
            os.unlink(path)
    with open(os.path.join(rootfs, "etc/dpkg/dpkg.cfg.d/koordlet-slim"), "w") as f:
        f.write(DPKG_SLIM)


# ---- 2. the agent ----------------------------------------------------------------------------------------------

def copy_sources(dest: str) -> None:
    """The checkout's files (git's view: tracked and untracked, not ignored) into ``dest``; pip builds in the source
    tree, and the checkout is not to be written to."""
    names: list[str] | None = None
    if os.path.exists(os.path.join(ROOT, ".git")) and shutil.which("git"):      # a file in a git worktree
        done = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              capture_output=True, check=False)
        if done.returncode == 0:
            names = [n for n in done.stdout.decode().split("\0") if n]
    if names is None:
        shutil.copytree(ROOT, dest, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "var", "__pycache__", "*.egg-info", ".*_cache"))
        return
    for name in names:
        src = os.path.join(ROOT, name)
        if not os.path.lexists(src):                        # deleted in the work tree, not yet in git's index
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, name), follow_symlinks=False)


def build_wheels(work: str) -> tuple[str, str]:
    """The project's wheel and its dependencies', and pip's own, in ``work/wheels``: (project wheel, pip wheel)."""
    src, wheels = os.path.join(work, "src"), os.path.join(work, "wheels")
    os.makedirs(src)
    copy_sources(src)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "--quiet", "--wheel-dir", wheels, src], "pip wheel (the project and its dependencies)")
    _run([*pip, "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", os.path.join(work, "pip"),
          "pip"], "pip download pip")
    project = glob.glob(os.path.join(wheels, "koordlet_py-*.whl"))
    pip_wheel = glob.glob(os.path.join(work, "pip", "pip-*.whl"))
    if len(project) != 1 or len(pip_wheel) != 1:
        raise BuildError(f"expected one koordlet_py and one pip wheel, got {project} and {pip_wheel}")
    return project[0], pip_wheel[0]


def install_agent(rootfs: str, project: str, pip_wheel: str) -> str:
    """The venv at PREFIX inside the root, with the project's wheel and its dependencies; the venv's
    site-packages (path in the root)."""
    inside = "/tmp/koordlet-wheels"
    staging = os.path.join(rootfs, inside.lstrip("/"))
    shutil.copytree(os.path.dirname(project), staging)
    shutil.copy2(pip_wheel, staging)
    try:
        _chroot(rootfs, ["/usr/bin/python3", "-m", "venv", "--without-pip", PREFIX], "python3 -m venv",
                PYTHONDONTWRITEBYTECODE="1")
        pip = f"{inside}/{os.path.basename(pip_wheel)}/pip"            # pip runs from its wheel: none installed
        _chroot(rootfs, [f"{PREFIX}/bin/python", pip, "install", "--isolated", "--quiet", "--no-index",
                         "--no-cache-dir", "--disable-pip-version-check", "--no-warn-script-location",
                         "--find-links", inside, f"{inside}/{os.path.basename(project)}"], "pip install in the root")
        _chroot(rootfs, [f"{PREFIX}/bin/python", pip, "uninstall", "--isolated", "--quiet", "--yes",
                         *ASYNC_ONLY], "pip uninstall (the asyncio client's dependencies)")
        _chroot(rootfs, [f"{PREFIX}/bin/python", "-c", REQUIREMENTS_MET, ",".join(ASYNC_ONLY)],
                "checking the venv's requirements", PYTHONPATH=f"{inside}/{os.path.basename(pip_wheel)}",
                PYTHONDONTWRITEBYTECODE="1")
    finally:
        shutil.rmtree(staging)
    found = glob.glob(os.path.join(rootfs, PREFIX.lstrip("/"), "lib", "python3*", "site-packages"))
    if len(found) != 1:
        raise BuildError(f"no single site-packages in {PREFIX}: {found}")
    site = found[0]
    for rel in PRUNE:
        shutil.rmtree(os.path.join(site, rel), ignore_errors=True)
    for path in glob.glob(os.path.join(rootfs, PREFIX.lstrip("/"), "bin", "[aA]ctivate*")):
        os.unlink(path)                                     # shell activation scripts: the image runs no shell in it
    link = os.path.join(rootfs, "koordlet")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(f"{PREFIX}/bin/koordlet", link)
    return "/" + os.path.relpath(site, rootfs)


def check_root(rootfs: str) -> None:
    """The agent starts and imports what it runs on; every file is root's and none is writable by others."""
    version = _chroot(rootfs, ["/koordlet", "--version"], "/koordlet --version", PYTHONDONTWRITEBYTECODE="1")
    _chroot(rootfs, [f"{PREFIX}/bin/python", "-c", "import koordlet.agent, kubernetes.client, kubernetes.config"],
            "importing the agent in the root", PYTHONDONTWRITEBYTECODE="1")
    # the companion scheduler's sidecar runs from the same image (deploy/scheduler)
    _chroot(rootfs, [f"{PREFIX}/bin/koord-scheduler-extender", "version"], "koord-scheduler-extender version",
            PYTHONDONTWRITEBYTECODE="1")
    if not version.strip():
        raise BuildError("/koordlet --version printed nothing")
    bad = []
    for dirpath, dirnames, filenames in os.walk(rootfs):
        rel = os.path.relpath(dirpath, rootfs)
        if rel in ("dev", "proc", "sys"):
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            writable = st.st_mode & stat.S_IWOTH and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX)
            if st.st_uid != 0 or writable:
                bad.append(f"{os.path.relpath(path, rootfs)} (uid {st.st_uid}, mode {stat.filemode(st.st_mode)})")
    if bad:
        raise BuildError("files not root's or writable by others: " + ", ".join(bad[:20]))


def largest(rootfs: str, site: str, n: int = 12) -> list[tuple[str, int]]:
    """What the image's bytes are: the biggest directories of the venv and of the system, by apparent size."""
    def size(path: str) -> int:
        total = 0
        for dirpath, _, filenames in os.walk(path):
            for name in filenames:
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
        return total
    parts: list[tuple[str, int]] = []
    site_dir = os.path.join(rootfs, site.lstrip("/"))
    for name in os.listdir(site_dir):
        if os.path.isdir(os.path.join(site_dir, name)) and not name.endswith(".dist-info"):
            parts.append((f"{site}/{name}", size(os.path.join(site_dir, name))))
    for rel in ("usr/lib/python3.11", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/bin", "usr/sbin",
                "usr/share", "var/lib/dpkg", "etc"):
        if os.path.isdir(os.path.join(rootfs, rel)):
            parts.append(("/" + rel, size(os.path.join(rootfs, rel))))
    return sorted(parts, key=lambda p: -p[1])[:n]


# ---- 3. the archive --------------------------------------------------------------------------------------------

def image_config(version: str, revision: str, suite: str) -> dict[str, object]:
    labels = {"org.opencontainers.image.title": "koordlet-py",
              "org.opencontainers.image.description": "Koordinator-compatible node agent (koordlet), in Python",
              "org.opencontainers.image.version": version, "org.opencontainers.image.licenses": "Apache-2.0",
              "org.opencontainers.image.base.name": f"debian:{suite} (debootstrap minbase, image/build.py)"}
    if revision:
        labels["org.opencontainers.image.revision"] = revision
    return {"Entrypoint": ["koordlet"], "Cmd": None, "WorkingDir": "/", "ExposedPorts": {f"{PORT}/tcp": {}},
            "Env": [f"PATH={PATH}", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"],
            "Labels": labels}


def _revision() -> str:
    done = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def _unmount_under(path: str) -> None:
    """Anything left mounted under the work dir (debootstrap mounts /proc and /sys in the root while it runs and may
    leave them after a failure) is unmounted before the dir is removed."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if p.startswith(path.rstrip("/") + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def build(out: str, ref: str = REF, cache: str | None = None, suite: str = SUITE, mirror: str = MIRROR,
          max_age_days: float = 7.0, log: Callable[[str], None] = lambda _: None) -> Result:
    """The image as an OCI archive at ``out`` (its directory is made; the work dir beside it is removed)."""
    reason = missing()
    if reason:
        raise BuildError(reason)
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    work = tempfile.mkdtemp(prefix=".koordlet-image-", dir=os.path.dirname(out))
    seconds: dict[str, float] = {}

    def phase(name: str, start: float) -> None:
        seconds[name] = time.monotonic() - start
        log(f"image: {name} {seconds[name]:.1f} s")
    try:
        rootfs = os.path.join(work, "rootfs")
        os.mkdir(rootfs, 0o755)
        t = time.monotonic()
        cached = base_rootfs(rootfs, cache, suite, mirror, max_age_days)
        phase("debian root (cached)" if cached else "debian root (debootstrap)", t)
        t = time.monotonic()
        project, pip_wheel = build_wheels(work)
        phase("wheels", t)
        t = time.monotonic()
        site = install_agent(rootfs, project, pip_wheel)
        check_root(rootfs)
        phase("venv", t)
        version = os.path.basename(project).split("-")[1]
        t = time.monotonic()
        layer: Layer = write_layer(rootfs, os.path.join(work, "layer.tar.gz"))
        created = datetime.datetime.fromtimestamp(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())),
                                                  datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        history = [{"created": created, "created_by": f"image/build.py: debootstrap --variant=minbase {suite} "
                    f"+ {' '.join(PACKAGES)}, slimmed; koordlet-py {version} in a venv at {PREFIX}"}]
        partial = out + ".partial"
        size = write_archive(partial, ref, [layer], image_config(version, _revision(), suite), created, history)
        os.replace(partial, out)
        phase("archive", t)
        return Result(out, ref, version, size, layer.tar_size, cached, seconds, largest(rootfs, site))
    finally:
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m image.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join("build", "image", "koordlet-image.tar"),
                        help="the OCI archive to write (default: %(default)s)")
    parser.add_argument("--ref", default=REF, help="the image's name in the archive (default: %(default)s)")
    parser.add_argument("--cache", default=None, help="keep the Debian root here between builds")
    parser.add_argument("--cache-max-age-days", type=float, default=7.0,
                        help="debootstrap again once the cached root is this old (default: %(default)s)")
    parser.add_argument("--suite", default=SUITE, help="Debian suite (default: %(default)s)")
    parser.add_argument("--mirror", default=MIRROR, help="Debian mirror (default: %(default)s)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        result = build(args.out, args.ref, args.cache, args.suite, args.mirror, args.cache_max_age_days,
                       log=lambda line: print(line, flush=True))
    except BuildError as e:
        print(f"make image: {e}", file=sys.stderr)
        return 1
    mib = 1 << 20
    print(f"image: {result.archive}: {result.ref} (koordlet-py {result.version}), {result.size / mib:.1f} MiB "
          f"compressed, {result.unpacked / mib:.1f} MiB unpacked, in {time.monotonic() - start:.0f} s")
    print("largest parts: " + ", ".join(f"{path} {size / mib:.1f} MiB" for path, size in result.largest))
    print(f"load it: ctr -n k8s.io images import {result.archive}   (or: podman load -i {result.archive})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
