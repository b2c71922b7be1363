"""Host roots: where the host's /sys, /proc, cgroupfs and /run are seen from this process.

In DaemonSet mode they are mounted under /host-*, in host mode they are the real paths, in tests a temporary
tree. Nothing else in the agent builds a /sys or /proc path by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol


class HostRoots(Protocol):
    """The root settings a ``koordlet.ops.config.Config`` carries (named structurally: the host layer does not import
    the agent's configuration)."""

    @property
    def cgroup_root_dir(self) -> str: ...
    @property
    def sys_root_dir(self) -> str: ...
    @property
    def sys_fs_root_dir(self) -> str: ...
    @property
    def proc_root_dir(self) -> str: ...
    @property
    def var_run_root_dir(self) -> str: ...
    @property
    def run_root_dir(self) -> str: ...
    @property
    def var_lib_kubelet_dir(self) -> str: ...


@dataclass(frozen=True)
class HostPaths:
    cgroup_root: str
    sys_root: str
    sys_fs_root: str
    proc_root: str
    var_run_root: str
    run_root: str
    var_lib_kubelet: str

    @classmethod
    def from_config(cls, config: HostRoots) -> HostPaths:
        return cls(config.cgroup_root_dir, config.sys_root_dir, config.sys_fs_root_dir, config.proc_root_dir,
                   config.var_run_root_dir, config.run_root_dir, config.var_lib_kubelet_dir)

    @classmethod
    def under(cls, root: str) -> HostPaths:
        """All roots inside one directory, laid out like a real host (used for fake trees)."""
        j = os.path.join
        return cls(j(root, "sys/fs/cgroup"), j(root, "sys"), j(root, "sys/fs"), j(root, "proc"),
                   j(root, "var/run"), j(root, "run"), j(root, "var/lib/kubelet"))

    def proc(self, *parts: str) -> str:
        return os.path.join(self.proc_root, *parts)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sys_root, *parts)

    def sys_fs(self, *parts: str) -> str:
        return os.path.join(self.sys_fs_root, *parts)
