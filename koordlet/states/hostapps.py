"""Non-containerized host applications declared in NodeSLO ``spec.hostApplications``, and their cgroup dirs.

Upstream's rule (pkg/koordlet/util/host_application.go): without ``cgroupPath`` the dir is
``host-latency-sensitive/<name>`` for LSE/LSR/LS, ``host-best-effort/<name>`` for BE and ``<name>`` otherwise,
under the cgroup root; with it, ``<base>/<parentDir>/<relativePath>`` where base is the cgroup root or the
kubepods / burstable / besteffort dir of this node's driver. Beyond upstream: a name or path that would leave
the cgroup root (``..``, an absolute path, a control character such as NUL) is refused with an error naming the
application, and the others stay; so is one whose dir, resolved, leads outside the root (``escaping``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from koordlet.base import wire
from koordlet.host.cgroup import Cgroups, KubeQOS, Layout
from koordlet.states.nodeslo.schema import HostApplicationSpec

DEFAULT_LS_DIR, DEFAULT_BE_DIR = "host-latency-sensitive", "host-best-effort"
_BASES = {wire.CGROUP_BASE_KUBEPODS: KubeQOS.GUARANTEED, wire.CGROUP_BASE_KUBE_BURSTABLE: KubeQOS.BURSTABLE,
          wire.CGROUP_BASE_KUBE_BESTEFFORT: KubeQOS.BESTEFFORT}


@dataclass(frozen=True)
class HostApp:
    name: str
    priority: str
    qos: str
    cgroup_dir: str            # relative to the cgroup root of each subsystem


def cgroup_dir(app: HostApplicationSpec, layout: Layout) -> str:
    """The app's cgroup dir relative to the root; ValueError when it is missing or escapes the root."""
    if not app.name:
        raise ValueError("name is required")
    path = app.cgroup_path
    if path is None:
        parent = {wire.QOS_LSE: DEFAULT_LS_DIR, wire.QOS_LSR: DEFAULT_LS_DIR, wire.QOS_LS: DEFAULT_LS_DIR,
                  wire.QOS_BE: DEFAULT_BE_DIR}.get(app.qos or "", "")
        parts = [parent, app.name]
    else:
        base = layout.qos_dir(_BASES[path.base]) if path.base in _BASES else ""
        parts = [base, path.parent_dir or "", path.relative_path or ""]
    for part in parts[1:]:                     # the base is ours; the rest comes from the NodeSLO
        if any(ord(ch) < 0x20 or ch == "\x7f" for ch in part):
            raise ValueError(f"cgroup path part {part!r} has a control character (NUL, newline...)")
        if part.startswith("/") or ".." in part.split("/"):
            raise ValueError(f"cgroup path part {part!r} leaves the cgroup root")
    joined = posixpath.normpath(posixpath.join(*[p for p in parts if p] or ["."]))
    if joined in (".", "") or joined.startswith(".."):
        raise ValueError("cgroup path is empty or leaves the cgroup root")
    return joined


def escaping(apps: Sequence[HostApp], cgroups: Cgroups) -> dict[str, str]:
    """App name -> where its dir really leads, for the apps whose resolved dir leaves the cgroup root."""
    out = {}
    for app in apps:
        target = cgroups.escape(app.cgroup_dir)
        if target is not None:
            out[app.name] = target
    return out


class SetApps:
    """The host applications a strategy set one file of, cycle to cycle. :meth:`left` takes this cycle's and returns
    the ones set before and not now (gone from the NodeSLO, moved to another dir, or no longer given that file by
    their class), so the strategy gives their cgroups back the value a cgroup has without the agent. An app whose dir
    now leads outside the cgroup root is not returned: nothing is written there. Kept in memory: an app removed
    while the agent was down keeps what it was given."""

    def __init__(self) -> None:
        self._set: dict[str, HostApp] = {}

    def left(self, now: Sequence[HostApp], cgroups: Cgroups) -> list[HostApp]:
        current = {app.cgroup_dir: app for app in now}
        gone = [app for rel, app in self._set.items() if rel not in current]
        self._set = current
        return [app for app in gone if cgroups.escape(app.cgroup_dir) is None]


def resolve_host_apps(specs: tuple[HostApplicationSpec, ...], layout: Layout) -> tuple[list[HostApp], list[str]]:
    """The apps with their dirs, and one error per app that was refused (named, with the reason)."""
    apps, errors = [], []
    for i, spec in enumerate(specs):
        try:
            apps.append(HostApp(spec.name or "", spec.priority or "", spec.qos or "", cgroup_dir(spec, layout)))
        except ValueError as e:
            errors.append(f"hostApplications[{i}] {spec.name or '?'}: {e}; not collected")
    return apps, errors
