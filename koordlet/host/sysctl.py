"""Kernel tunables under /proc/sys (read here; written only through the executor)."""

from __future__ import annotations

import os

from koordlet.host.fs import read_bytes
from koordlet.host.paths import HostPaths


def sysctl_path(paths: HostPaths, name: str) -> str:
    """``kernel.sched_core`` or ``kernel/sched_core`` -> <proc root>/sys/kernel/sched_core."""
    return paths.proc("sys", *name.replace(".", "/").split("/"))


def has_sysctl(paths: HostPaths, name: str) -> bool:
    """Does this kernel offer the tunable (whether or not it can be read right now)?"""
    return os.path.exists(sysctl_path(paths, name))


def read_sysctl(paths: HostPaths, name: str) -> str | None:
    """The current value, or None when this kernel has no such tunable (or it is unreadable)."""
    try:
        return read_bytes(sysctl_path(paths, name)).decode("utf-8", "replace").strip()
    except OSError:
        return None
