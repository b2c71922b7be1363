"""doubles/sysfsdump.py: a dump unpacked under its directory and nothing outside it, with tarfile's filters and on a
Python without them (Debian 12's 3.11.2), where the same members are refused by its own checks."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from doubles import sysfsdump
from doubles.sysfsdump import unpack

FILTERS = [pytest.param(True, id="tarfile-filter"), pytest.param(False, id="own-checks")]


def tarball(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:bz2") as tf:
        for m in members:
            tf.addfile(m, io.BytesIO(b"x" * m.size) if m.isreg() else None)
    return path


def regular(name: str) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.size = 1
    return m


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.linkname = kind, target
    return m


@pytest.fixture(params=FILTERS)
def filters(request, monkeypatch) -> bool:
    if request.param and not sysfsdump.FILTERS:
        pytest.skip("this Python has no tarfile filters")
    monkeypatch.setattr(sysfsdump, "FILTERS", request.param)
    return request.param


def test_a_dump_unpacks_under_its_root_with_only_the_wanted_members(tmp_path, filters):
    dump = tarball(tmp_path / "d.tar.bz2", regular("top/sys/a"), regular("top/sys/b"),
                   link("top/sys/c", "a"), link("top/sys/dev/d", "../a"))
    dest = tmp_path / "out"
    dest.mkdir()
    root = unpack(dump, dest, lambda m, rel: rel != "sys/b")
    assert root == dest / "top"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == ["sys", "sys/a", "sys/c", "sys/dev",
                                                                         "sys/dev/d"]
    assert os.readlink(root / "sys" / "c") == "a" and (root / "sys" / "dev" / "d").read_bytes() == b"x"


@pytest.mark.parametrize("hostile", [
    regular("top/../../escaped"),
    link("top/up", "../../escaped"),
    link("top/abs", "/etc/passwd"),
    link("top/hard", "../../escaped", tarfile.LNKTYPE),
], ids=["dotdot-name", "symlink-out", "absolute-symlink", "hardlink-out"])
def test_nothing_lands_or_points_outside(tmp_path, filters, hostile):
    dump = tarball(tmp_path / "d.tar.bz2", regular("top/ok"), hostile)
    dest = tmp_path / "a" / "out"
    dest.mkdir(parents=True)
    with pytest.raises(tarfile.TarError):
        unpack(dump, dest)
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "a" / "escaped").exists()


def test_a_special_file_is_refused_without_the_filters(tmp_path):
    fifo = tarfile.TarInfo("top/fifo")
    fifo.type = tarfile.FIFOTYPE
    with pytest.raises(tarfile.TarError, match="special file"):
        sysfsdump.refuse_outside(fifo, str(tmp_path))
