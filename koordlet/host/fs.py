"""Small, fast file readers for kernel pseudo-files.

Plain ``os.open``/``os.read`` instead of ``open()``: kernel files are tiny, and skipping the buffered-IO and
text-decoding layers is most of the cost of a collection cycle (see bench/). Plus the one directory helper
host-side preparation needs (:func:`reset_dir`), and :func:`vanished`, the one rule for which errors mean
"the cgroup (or process) went away" rather than "something is wrong".
"""

from __future__ import annotations

import errno
import os
import re
import shutil

_READ_SIZE = 65536


def read_bytes(path: str) -> bytes:
    """Whole file; raises OSError (FileNotFoundError when a cgroup vanished)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, _READ_SIZE)
        if len(data) < _READ_SIZE:
            return data
        chunks = [data]
        while chunk := os.read(fd, _READ_SIZE):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_value(path: str) -> str:
    """A kernel file's value as text, stripped (what the executor compares with what it would write)."""
    return read_bytes(path).decode("utf-8", "replace").strip()


def write_value(path: str, value: str) -> None:
    """Write a kernel file (cgroup, sysfs, /proc) in one write: the kernel parses each write whole."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def append_values(path: str, values: list[str]) -> tuple[int, int]:
    """Write each value to an appending file (cgroup.procs, tasks) through one fd, as the kernel takes one id per
    write: (written, failed). An entry that fails (its task gone: ESRCH) fails alone; opening raises OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    written = failed = 0
    try:
        for v in values:
            try:
                os.write(fd, v.encode())
                written += 1
            except OSError:
                failed += 1
    finally:
        os.close(fd)
    return written, failed


def replace_file(path: str, value: str) -> None:
    """Atomically replace a plain config file the agent owns (readers never see it half-written), mode 0644; its
    directory is created when missing."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove_file(path: str) -> bool:
    """Delete a file the agent owns: True if it existed (OSError other than its absence is raised)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def is_dir(path: str) -> bool:
    return os.path.isdir(path)


#: errnos that mean the object went away between listing it and reading/writing it (normal pod churn):
#: ENOENT/ENOTDIR at open (the dir is gone), ENODEV on a read or write through an fd opened before the cgroup's
#: rmdir (kernfs, under both v1 and v2, refuses every operation on a removed node; checked on a real v1 tree),
#: ESRCH from /proc files of a process that exited mid-read.
VANISHED_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENODEV, errno.ESRCH})


def vanished(e: BaseException) -> bool:
    """True when ``e`` is an OSError saying the cgroup / process is gone (counted as churn, never logged)."""
    return isinstance(e, OSError) and e.errno in VANISHED_ERRNOS


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8", "replace")


def parse_fields(data: bytes, keys: tuple[bytes, ...]) -> list[int]:
    """The integer values of ``keys`` in a ``key value`` file (memory.stat, cpu.stat), in the order asked.

    Only the asked lines are looked at instead of splitting the whole file into a dict: memory.stat has ~40 lines,
    read for every pod and container each second, and the collector needs five of them. The first key's line is
    found (searched from the end of the file unless it is the first line: v1's ``total_*`` lines are its last ones);
    when the keys are exactly the lines from there on, in the order asked, one match takes them all, else each is
    searched alone. These files name each key once. KeyError names a key that is absent; ValueError a value that is
    not an integer.
    """
    fields = _FIELDS.get(keys)
    if fields is None:
        fields = _FIELDS[keys] = _Fields(keys)
    first, needle = fields.needles[0]
    at = 0 if data.startswith(first) else data.rfind(needle) + 1     # absent: 0, where the run does not match
    run = fields.run.match(data, at)
    if run is not None:
        return [int(value) for value in run.groups()]
    out = []
    for first, needle in fields.needles:
        if data.startswith(first):
            start = len(first)
        else:
            at = data.rfind(needle)
            if at < 0:
                raise KeyError(first[:-1])
            start = at + len(needle)
        end = data.find(b"\n", start)
        out.append(int(data[start:end if end >= 0 else None]))
    return out


class _Fields:
    """What parse_fields looks for, per key tuple (the callers' few constant tuples), built once: each key's line
    start, and the keys' lines one after the other (``key value`` each, one space, nothing else on the line)."""
    __slots__ = ("needles", "run")

    def __init__(self, keys: tuple[bytes, ...]) -> None:
        self.needles = tuple((key + b" ", b"\n" + key + b" ") for key in keys)
        self.run = re.compile(b"\n".join(re.escape(key) + rb" (\S+)" for key in keys) + rb"(?:\n|\Z)")


_FIELDS: dict[tuple[bytes, ...], _Fields] = {}


def reset_dir(path: str, mode: int) -> None:
    """``path`` as a new empty directory with exactly ``mode`` (whatever was there is removed). For state a
    container must start without, such as HAMi-core's shared region whose limits are fixed by its creator."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)       # makedirs applies the umask
