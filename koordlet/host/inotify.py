"""inotify(7) through ctypes: directory events only — the PLEG's create/delete on cgroupfs, and the NRI plugin's
watch for a re-created runtime socket."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from dataclasses import dataclass

IN_ATTRIB = 0x00000004
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_ONLYDIR = 0x01000000
IN_IGNORED = 0x00008000
IN_Q_OVERFLOW = 0x00004000
IN_ISDIR = 0x40000000

_EVENT = struct.Struct("iIII")
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


@dataclass(frozen=True, slots=True)
class Event:
    wd: int
    mask: int
    name: str


class Inotify:
    """One non-blocking inotify instance; ``fileno()`` is selectable."""

    def __init__(self) -> None:
        fd: int = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def add_watch(self, path: str, mask: int) -> int:
        wd: int = _libc.inotify_add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return wd

    def read(self) -> list[Event]:
        """All queued events; [] when none are pending."""
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return []
        events, pos = [], 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            pos += _EVENT.size
            name = data[pos:pos + length].rstrip(b"\0").decode("utf-8", "replace")
            pos += length
            events.append(Event(wd, mask, name))
        return events

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
