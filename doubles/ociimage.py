"""Container images without a registry: OCI image archives built from local files, for ``ctr images import``.

An archive is a tar of an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) holding one
image: a manifest, its config and one gzip layer. Two images serve the real-runtime tests and bench:

- **pause**: the sandbox's process, a tiny C program (wait for SIGTERM/SIGINT, reap children) built with
  ``gcc -static``, so the image needs no libc;
- **busybox**: Debian's statically linked ``/bin/busybox`` (package ``busybox-static``) as ``/bin/busybox`` and
  ``/bin/sh``; containers run ``/bin/busybox sleep ...`` and the like.

Archives are byte-for-byte reproducible from the same inputs (fixed mtimes, owners and gzip header), so an image
re-imported into a runtime that already has it is the same image.

Whole root filesystems (``make image``, image/build.py: a Debian root with the agent in a venv) do not fit in memory
as :class:`File` maps: :func:`write_layer` streams a directory into a gzip layer file, hashing as it goes, and
:func:`write_archive` writes the archive around layers on disk and an image config.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Literal, cast

PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"""

BUSYBOX = "/bin/busybox"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class File:
    """One file of the layer: its bytes, or a symlink target."""
    data: bytes = b""
    mode: int = 0o755
    link: str = ""


@dataclass(frozen=True)
class Image:
    ref: str                                         # e.g. localhost/koordlet-test/pause:1
    files: Mapping[str, File]                        # path in the image (no leading /) -> file
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Sequence[str] = ("PATH=/bin",)
    dirs: Sequence[str] = field(default=("tmp", "etc", "proc", "sys", "dev"))


class ImageError(RuntimeError):
    pass


def _blob(out: dict[str, bytes], data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    out[digest] = data
    return {"digest": digest, "size": len(data)}


def _layer(image: Image) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(info: tarfile.TarInfo, data: bytes = b"") -> None:
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data) if data else None)
        made: set[str] = set()

        def parents(path: str) -> None:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in made:
                    made.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    add(info)
        for d in sorted(image.dirs):
            parents(d + "/x")
        for path in sorted(image.files):
            f = image.files[path]
            parents(path)
            info = tarfile.TarInfo(path)
            if f.link:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, f.link, 0o777
                add(info)
            else:
                info.size, info.mode = len(f.data), f.mode
                add(info, f.data)
    return raw.getvalue()


def archive(image: Image) -> bytes:
    """The OCI archive of ``image`` (what ``ctr images import`` reads)."""
    blobs: dict[str, bytes] = {}
    tar = _layer(image)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    layer = {"mediaType": MEDIA_LAYER, **_blob(blobs, gzip.compress(tar, mtime=0))}
    config = {"architecture": _arch(), "os": "linux",
              "config": {"Entrypoint": list(image.entrypoint) or None, "Cmd": list(image.cmd) or None,
                         "Env": list(image.env), "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]},
              "history": [{"created_by": "koordlet-py doubles/ociimage.py"}]}
    index = _index(blobs, image.ref, _json(config), [layer])
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar_out:
        _put(tar_out, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}))
        _put(tar_out, "index.json", _json(index))
        for digest in sorted(blobs):
            _put(tar_out, "blobs/sha256/" + digest.removeprefix("sha256:"), blobs[digest])
    return out.getvalue()


def _index(blobs: dict[str, bytes], ref: str, config: bytes, layers: list[dict[str, object]]) -> dict[str, object]:
    """The image index naming ``ref``; the config and manifest go into ``blobs``."""
    config_desc = {"mediaType": MEDIA_CONFIG, **_blob(blobs, config)}
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_desc, "layers": layers}
    manifest_desc = {"mediaType": MEDIA_MANIFEST, **_blob(blobs, _json(manifest)),
                     "annotations": {"io.containerd.image.name": ref,
                                     "org.opencontainers.image.ref.name": ref.rpartition(":")[2]},
                     "platform": {"architecture": _arch(), "os": "linux"}}
    return {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest_desc]}


def _put(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


# ---- whole root filesystems, streamed through files ----------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    """A gzip layer blob on disk: ``digest`` and ``size`` of the gzip file, ``diff_id`` of the tar inside."""
    path: str
    digest: str
    size: int
    diff_id: str
    tar_size: int


class _Hashing:
    """A write-only stream that hashes and counts what passes through to ``sink``."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.sink.write(data)

    def flush(self) -> None:
        self.sink.flush()

    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


def write_layer(root: str, path: str, empty: Iterable[str] = ("dev", "proc", "sys", "tmp"),
                compresslevel: int = 6) -> Layer:
    """The directory ``root`` as a gzip layer at ``path``: every file with its owner (numeric ids, no names), mode,
    mtime (kept: Python's .pyc files are checked against their source's mtime), hard and symbolic links; the
    directories in ``empty`` go in without their contents (the runtime mounts over them). Sorted, so the same tree
    gives the same tar. Sockets and FIFOs are left out."""
    skip = {e.strip("/") for e in empty}
    with open(path, "wb") as raw:
        gz_sink = _Hashing(raw)
        with gzip.GzipFile(filename="", mode="wb", fileobj=cast(IO[bytes], gz_sink), mtime=0,
                           compresslevel=compresslevel) as gz:
            tar_sink = _Hashing(cast(IO[bytes], gz))
            with tarfile.open(fileobj=cast(IO[bytes], tar_sink), mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for full, name in _walk(root, skip):
                    info = tar.gettarinfo(full, arcname=name)
                    if info is None:                                 # a socket: nothing to carry
                        continue
                    info.uname = info.gname = ""
                    if info.isreg():
                        with open(full, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        tar.addfile(info)
    return Layer(path, gz_sink.digest(), gz_sink.size, tar_sink.digest(), tar_sink.size)


def _walk(root: str, skip: set[str]) -> Iterable[tuple[str, str]]:
    """(path, name in the layer) for everything under ``root``, parents first, names sorted."""
    def visit(rel: str) -> Iterable[tuple[str, str]]:
        full = os.path.join(root, rel)
        for name in sorted(os.listdir(full)):
            child = f"{rel}/{name}" if rel else name
            path = os.path.join(root, child)
            mode = os.lstat(path).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                continue
            yield path, child
            if stat.S_ISDIR(mode) and child not in skip:
                yield from visit(child)
    yield from visit("")


def write_archive(path: str, ref: str, layers: Sequence[Layer], config: Mapping[str, object], created: str = "",
                  history: Sequence[Mapping[str, object]] = ()) -> int:
    """The OCI archive at ``path`` of an image named ``ref``: ``layers`` (files from :func:`write_layer`, bottom
    first), ``config`` (the image config's ``config`` part: Entrypoint, Env, Labels, ...), its ``created`` time and
    ``history`` (one entry per layer). Returns the archive's size."""
    blobs: dict[str, bytes] = {}
    image_config: dict[str, object] = {
        "architecture": _arch(), "os": "linux", "config": dict(config),
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [dict(h) for h in history] or [{"created_by": "koordlet-py doubles/ociimage.py"} for _ in layers]}
    if created:
        image_config["created"] = created
    index = _index(blobs, ref, _json(image_config),
                   [{"mediaType": MEDIA_LAYER, "digest": layer.digest, "size": layer.size} for layer in layers])
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar_out:
        _put(tar_out, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}))
        _put(tar_out, "index.json", _json(index))
        for digest in sorted(blobs):
            _put(tar_out, "blobs/sha256/" + digest.removeprefix("sha256:"), blobs[digest])
        for layer in layers:
            info = tarfile.TarInfo("blobs/sha256/" + layer.digest.removeprefix("sha256:"))
            info.size, info.mode, info.mtime = layer.size, 0o644, 0
            with open(layer.path, "rb") as f:
                tar_out.addfile(info, f)
    return os.path.getsize(path)


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _arch() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def pause_image(workdir: str, ref: str = "localhost/koordlet-test/pause:1") -> Image:
    """The sandbox image: PAUSE_C compiled with ``gcc -static`` in ``workdir``."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise ImageError("no C compiler (apt-get install gcc libc6-dev) to build the pause image")
    src, binary = os.path.join(workdir, "pause.c"), os.path.join(workdir, "pause")
    with open(src, "w") as f:
        f.write(PAUSE_C)
    done = subprocess.run([cc, "-static", "-Os", "-s", "-o", binary, src], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise ImageError(f"gcc -static failed (libc6-dev installed?): {done.stderr.strip()[-500:]}")
    with open(binary, "rb") as f:
        data = f.read()
    return Image(ref, {"pause": File(data)}, entrypoint=("/pause",))


def busybox_image(ref: str = "localhost/koordlet-test/busybox:1", busybox: str = BUSYBOX) -> Image:
    """The workload image: a statically linked busybox (Debian's busybox-static) as /bin/busybox and /bin/sh."""
    try:
        with open(busybox, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ImageError(f"{busybox}: {e.strerror} (apt-get install busybox-static)") from None
    if not is_static(busybox):
        raise ImageError(f"{busybox} is dynamically linked (install busybox-static, not busybox)")
    return Image(ref, {"bin/busybox": File(data), "bin/sh": File(link="busybox")},
                 cmd=("/bin/busybox", "sleep", "3600"))


def is_static(path: str) -> bool:
    """True for an ELF file without a program interpreter (PT_INTERP): it runs in an empty root."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:           # 64-bit ELF only
            return False
        order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
        phoff = int.from_bytes(head[32:40], order)
        phentsize = int.from_bytes(head[54:56], order)
        phnum = int.from_bytes(head[56:58], order)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    pt_interp = 3
    return all(int.from_bytes(table[i * phentsize:i * phentsize + 4], order) != pt_interp for i in range(phnum))
