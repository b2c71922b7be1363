"""Container images without a registry: OCI image archives built from local files, for ``ctr images import``.

An archive is a tar of an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) holding one
image: a manifest, its config and one gzip layer. Two images serve the real-runtime tests and bench:

- **pause**: the sandbox's process, a tiny C program (wait for SIGTERM/SIGINT, reap children) built with
  ``gcc -static``, so the image needs no libc;
- **busybox**: Debian's statically linked ``/bin/busybox`` (package ``busybox-static``) as ``/bin/busybox`` and
  ``/bin/sh``; containers run ``/bin/busybox sleep ...`` and the like.

Archives are byte-for-byte reproducible from the same inputs (fixed mtimes, owners and gzip header), so an image
re-imported into a runtime that already has it is the same image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

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
    config_desc = {"mediaType": MEDIA_CONFIG, **_blob(blobs, _json(config))}
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_desc, "layers": [layer]}
    manifest_desc = {"mediaType": MEDIA_MANIFEST, **_blob(blobs, _json(manifest)),
                     "annotations": {"io.containerd.image.name": image.ref,
                                     "org.opencontainers.image.ref.name": image.ref.rpartition(":")[2]},
                     "platform": {"architecture": _arch(), "os": "linux"}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_desc]}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar_out:
        def put(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar_out.addfile(info, io.BytesIO(data))
        put("oci-layout", _json({"imageLayoutVersion": "1.0.0"}))
        put("index.json", _json(index))
        for digest in sorted(blobs):
            put("blobs/sha256/" + digest.removeprefix("sha256:"), blobs[digest])
    return out.getvalue()


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
