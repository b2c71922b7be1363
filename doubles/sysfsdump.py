"""Real machines' sysfs trees from tarballs (hwloc's dumps in tests/fixtures/sysfs-hwloc), unpacked under a directory.

Nothing in a tarball may land or point outside that directory: tarfile's ``data`` filter refuses it where this
Python has the filters (3.11.4 and later), and the same checks are made here where it has not (Debian 12's Python
is 3.11.2, and the project runs on it).
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable
from pathlib import Path

FILTERS = hasattr(tarfile, "data_filter")


def refuse_outside(member: tarfile.TarInfo, dest: str) -> None:
    """Raise tarfile.TarError for a member the ``data`` filter refuses for where it lands or points: a name or a
    link target outside ``dest`` (through ``..``, an absolute path or a link already unpacked), or a device, FIFO
    or other special file."""
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise tarfile.TarError(f"{member.name}: a special file")
    target = os.path.join(root, member.name)
    if os.path.isabs(member.name) or not inside(target):
        raise tarfile.TarError(f"{member.name}: outside {dest}")
    if member.issym() and (os.path.isabs(member.linkname)
                           or not inside(os.path.join(os.path.dirname(target), member.linkname))):
        raise tarfile.TarError(f"{member.name}: a link to {member.linkname}, outside {dest}")
    if member.islnk() and not inside(os.path.join(root, member.linkname)):
        raise tarfile.TarError(f"{member.name}: a hard link to {member.linkname}, outside {dest}")


def unpack(tarball: Path, dest: Path, wanted: Callable[[tarfile.TarInfo, str], bool] = lambda m, rel: True) -> Path:
    """The members ``wanted(member, path below the dump's root)`` keeps, unpacked under ``dest`` in one pass (a
    bzip2 stream cannot seek back cheaply); returns the dump's root, the tarball's one top directory (not always
    named as the tarball)."""
    tops = set()
    with tarfile.open(tarball) as tf:
        for member in tf:
            top, _, rel = member.name.partition("/")
            tops.add(top)
            if not wanted(member, rel):
                continue
            if FILTERS:
                tf.extract(member, dest, filter="data")
            else:
                refuse_outside(member, str(dest))
                tf.extract(member, dest)
    (top,) = tops
    return dest / top
