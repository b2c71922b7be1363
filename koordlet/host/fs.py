"""Small, fast file readers for kernel pseudo-files.

Plain ``os.open``/``os.read`` instead of ``open()``: kernel files are tiny, and skipping the buffered-IO and
text-decoding layers is most of the cost of a collection cycle (see bench/).
"""

from __future__ import annotations

import os

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


def read_int(path: str) -> int:
    return int(read_bytes(path))


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8", "replace")


def parse_kv(data: bytes) -> dict[bytes, int]:
    """``key value`` lines (memory.stat, cpu.stat) into {key: int}; malformed lines are skipped."""
    out: dict[bytes, int] = {}
    for line in data.splitlines():
        key, _, value = line.partition(b" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out
