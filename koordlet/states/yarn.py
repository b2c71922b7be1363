"""The YARN containers of this node (Koordinator YARN Copilot), as containers of their NodeManager pod.

A YARN NodeManager runs as a koord-batch BestEffort pod and starts its YARN containers in cgroups of their own in
the BestEffort tier: below its pod dir, or (yarn-copilot's default ``kubepods/besteffort/hadoop-yarn``) beside the
pods. The copilot agent lists them (:mod:`koordlet.states.copilot`); :class:`YarnContainers` asks it every
collection interval on a loop of its own, and :meth:`YarnContainers.pods` adds each container to its NodeManager
pod's :class:`~koordlet.states.informer.PodMeta` as a :class:`~koordlet.states.pod.Container` marked ``yarn``
(name and id: the copilot's name and uid; resources: its cpu and memory as batch-*). The strategies and collectors
then treat them as containers of a BE pod without knowing about YARN; the few places where a YARN container is not
like the others say so (the pod's batch sums, the pod's usage, eviction).

Rules, each costing only the container it refuses (logged once, and again when the reason changes):

- The dir is the copilot's ``cgroupDir`` relative to the root of every hierarchy (a leading ``/`` changes
  nothing, as in the copilot's own ``filepath.Join``); it must lie below the BestEffort QoS dir of this node's
  driver, hold no ``..`` and no control character, resolve inside the cgroup root (no symlink out of it: checked
  when the dir is first listed and again every :data:`RECHECK` seconds, since resolving every hierarchy of a few
  hundred dirs each second would cost more than collecting them), and exist in the cpu hierarchy: it is never
  created. A dir not there yet (a container starting) is skipped quietly.
- The NodeManager pods are the pods labelled ``evict-by-copilot-pod-label-key=-value`` (upstream's default
  ``app.kubernetes.io/component=node-manager``) that are not terminating. A container belongs to the one whose dir
  holds it, else to the only one there is; a dir inside another pod, or equal to a pod's or one of its own
  containers' dirs, is refused; with no NodeManager pod (or several, and the dir below none) the containers are
  left out, one line for them all.
- The NodeManager pod's own containers come first, its YARN containers after them in the copilot's order.
- A listing that fails keeps the last good one, less the containers whose dirs are gone: logged when the copilot
  stops answering and when it answers again. Nothing else waits for it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from koordlet.base.logutil import LogOnce
from koordlet.host.cgroup import Cgroups, KubeQOS, Layout
from koordlet.states.copilot import CopilotError, YarnContainer
from koordlet.states.informer import PodMeta
from koordlet.states.pod import Container

log = logging.getLogger(__name__)

Listed = tuple[tuple[YarnContainer, str], ...]      # (container, its cgroup dir relative to the root)
NO_NODE_MANAGER = "nodemanager"
RECHECK = 10.0                  # seconds between two resolving checks of a listed dir


def container_dir(raw: str, layout: Layout) -> str:
    """The copilot's cgroupDir as a dir relative to the cgroup root; ValueError when it leaves the BestEffort
    tier (by name: resolving is :meth:`Cgroups.escape`'s)."""
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in raw):
        raise ValueError("has a control character (NUL, newline...)")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("has a '..' component")
    rel = "/".join(parts)
    tier = layout.qos_dir(KubeQOS.BESTEFFORT)
    if not rel.startswith(tier + "/"):
        raise ValueError(f"is not below the BestEffort dir {tier}")
    return rel


def attach(pods: tuple[PodMeta, ...], listed: Listed, label: tuple[str, str]
           ) -> tuple[tuple[PodMeta, ...], dict[str, str]]:
    """``pods`` with the listed YARN containers added to their NodeManager pods (see the module docstring), and
    the problems, keyed by container uid (one key, :data:`NO_NODE_MANAGER`, for the containers no pod takes: its
    value ``count=<n> problem=<why>``)."""
    key, value = label
    managers = {m.cgroup_dir: m for m in pods if m.pod.labels.get(key) == value and not m.pod.terminating}
    by_dir = {m.cgroup_dir: m for m in pods}
    added: dict[str, list[tuple[Container, str]]] = {}
    problems: dict[str, str] = {}
    orphans = 0
    for yc, rel in listed:
        owner = _enclosing(rel, by_dir)
        if owner is not None:
            if owner.cgroup_dir not in managers:
                problems[yc.uid] = f"cgroup dir {rel} is inside pod {owner.pod.key}, not a NodeManager pod " \
                                   f"({key}={value})"
                continue
            if rel == owner.cgroup_dir or any(rel == r for _, r in owner.containers):
                problems[yc.uid] = f"cgroup dir {rel} is pod {owner.pod.key}'s own"
                continue
            target = owner
        elif len(managers) == 1:
            target = next(iter(managers.values()))
        else:
            orphans += 1
            continue
        added.setdefault(target.cgroup_dir, []).append(
            (Container(yc.name, "", yc.uid, yc.resources, yarn=True), rel))
    if orphans:
        problems[NO_NODE_MANAGER] = f"count={orphans} problem=" + (
            f"{len(managers)} NodeManager pods ({key}={value}) and the dirs are below none of them" if managers
            else f"no NodeManager pod ({key}={value}) here")
    if not added:
        return pods, problems
    return tuple(dataclasses.replace(m, containers=m.containers + tuple(added[m.cgroup_dir]))
                 if m.cgroup_dir in added else m for m in pods), problems


def _enclosing(rel: str, by_dir: dict[str, PodMeta]) -> PodMeta | None:
    """The pod whose dir is ``rel`` or one of its ancestors."""
    at = rel
    while at:
        meta = by_dir.get(at)
        if meta is not None:
            return meta
        at = at.rpartition("/")[0]
    return None


class YarnContainers:
    """The copilot's YARN containers of this node: refreshed by the agent's ``yarn`` loop (:meth:`refresh`),
    added to the pods by :meth:`pods` (thread-safe; the same tuple while neither input changed)."""

    def __init__(self, listing: Callable[[], tuple[list[YarnContainer], dict[str, str]]], cgroups: Cgroups,
                 label: tuple[str, str], socket: str = "") -> None:
        self._listing = listing
        self._cgroups = cgroups
        self._label = label
        self._socket = socket
        self.listed: Listed = ()
        self._resolved: dict[str, float] = {}           # listed dir -> when it last resolved inside the root
        self._answered = False           # the copilot has answered once (before that, its failure is not news)
        self._down = LogOnce(log, logging.ERROR)
        self._refused = LogOnce(log, logging.ERROR)     # per container name, from the listing or the dir checks
        self._unattached = LogOnce(log, logging.WARNING)     # per container uid, and NO_NODE_MANAGER
        self._unattached_now: set[str] = set()
        self._lock = threading.Lock()
        self._memo: tuple[tuple[PodMeta, ...], Listed, tuple[PodMeta, ...]] | None = None

    def refresh(self) -> None:
        """One listing; on failure the last good one stays, less the containers whose dirs are gone."""
        try:
            containers, problems = self._listing()
        except CopilotError as e:
            self._down("down", "yarn copilot unavailable socket=%s error=%s; keeping the YARN containers it listed "
                       "last", self._socket, e)
            kept = tuple(entry for entry in self.listed if self._cgroups.has_dir("cpu", entry[1]))
            if kept != self.listed:
                self.listed = kept
            return
        if self._down.forget("down"):
            log.info("yarn copilot answering again socket=%s containers=%d", self._socket, len(containers))
        elif not self._answered:
            log.info("yarn copilot answering socket=%s containers=%d", self._socket, len(containers))
        self._answered = True
        listed = []
        now = time.monotonic()
        resolved: dict[str, float] = {}
        for container in containers:
            try:
                rel = container_dir(container.cgroup_dir, self._cgroups.layout)
            except ValueError as e:
                problems[container.name] = f"cgroupDir {container.cgroup_dir[:200]!r} {e}"
                continue
            if not self._cgroups.has_dir("cpu", rel):
                continue
            checked = self._resolved.get(rel)
            if checked is None or now - checked >= RECHECK:
                target = self._cgroups.escape(rel)
                if target is not None:
                    problems[container.name] = f"cgroup dir {rel} resolves to {target}, outside the cgroup root"
                    continue
                checked = now
            resolved[rel] = checked
            listed.append((container, rel))
        self._resolved = resolved
        for name, problem in problems.items():
            self._refused(name, "yarn container left out name=%s problem=%s", name, problem)
        self._refused.keep_only(problems)
        new = tuple(listed)
        if new != self.listed:
            self.listed = new

    def pods(self, pods: tuple[PodMeta, ...]) -> tuple[PodMeta, ...]:
        """``pods`` with the YARN containers added to their NodeManager pods (:func:`attach`)."""
        listed = self.listed
        with self._lock:
            memo = self._memo
            if memo is not None and memo[0] is pods and memo[1] is listed:
                return memo[2]
            merged, problems = attach(pods, listed, self._label)
            for key, problem in problems.items():
                if key == NO_NODE_MANAGER:
                    self._unattached(key, "yarn containers left out %s", problem)
                else:
                    self._unattached(key, "yarn container left out name=%s problem=%s", key, problem)
            for key in self._unattached_now - set(problems):
                if self._unattached.forget(key) and key == NO_NODE_MANAGER:
                    log.info("yarn containers have a NodeManager pod again")
            self._unattached_now = set(problems)
            self._memo = (pods, listed, merged)
            return merged
