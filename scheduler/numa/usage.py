"""What the pods assigned to one node hold, for NodeNUMAResource: their cpusets, NUMA shares and CPU exclusivity
(read back from ``resource-status`` and ``resource-spec``) and their summed requests (upstream's
``node_allocation.go``: NodeAllocation).

Separate because it is the plugin's only state: the cluster cache keeps one :class:`NumaUsage` per node and feeds it
every pod assigned there, while every decision only reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.states import decode
from scheduler.numa.annotations import resource_spec, resource_status
from scheduler.numa.names import STATUS_IDLE, STATUS_SHARED, STATUS_SINGLE
from scheduler.numa.quantity import ceil_milli, framework_unit
from scheduler.numa.topology import NodeTopology
from scheduler.requests import pod_requests

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Held:
    cpus: frozenset[int]
    exclusive: str
    numa: Mapping[int, Mapping[str, int]]      # milli-units
    requests: Mapping[str, int]                # framework units (cpu milli, others base units)


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class NumaUsage:
    """What the pods assigned to one node hold: their cpusets, NUMA shares and exclusivity (from ``resource-status``
    and ``resource-spec``), and their summed requests (the node-level score). Feed it every pod assigned to the node;
    owned and locked by the caller."""

    def __init__(self) -> None:
        self._pods: dict[str, _Held] = {}
        self._cpu_refs: dict[int, int] = {}
        self._cpu_policy: dict[int, str] = {}
        self._numa: dict[int, dict[str, int]] = {}
        self._requested: dict[str, int] = {}

    def add(self, pod: Mapping[str, Any]) -> None:
        """Count ``pod`` (keyed by its uid; adding it again replaces it). A terminated pod is removed. A bad
        annotation is logged and counts as nothing held; the pod's requests still count."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        self.remove(uid)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        annotations = meta.get("annotations") or {}
        try:
            requests = {k: framework_unit(k, ceil_milli(v)) for k, v in pod_requests(pod.get("spec") or {}).items()}
        except ValueError as e:
            log.warning("pod requests ignored pod=%s uid=%s problem=%s", _pod_key(pod), uid, e)
            requests = {}
        cpus: frozenset[int] = frozenset()
        numa: dict[int, dict[str, int]] = {}
        exclusive = ""
        try:
            cpus, numa = resource_status(annotations)
        except decode.DecodeError as e:
            log.warning("pod NUMA allocation ignored pod=%s uid=%s key=%s problem=%s", _pod_key(pod), uid, e.key,
                        e.problem)
        try:
            exclusive = resource_spec(annotations)[2]
        except decode.DecodeError as e:
            log.warning("pod CPU exclusivity ignored pod=%s uid=%s key=%s problem=%s", _pod_key(pod), uid, e.key,
                        e.problem)
        held = _Held(cpus, exclusive, numa, requests)
        self._pods[uid] = held
        for c in cpus:
            self._cpu_refs[c] = self._cpu_refs.get(c, 0) + 1
            self._cpu_policy[c] = exclusive
        for node, resources in numa.items():
            into = self._numa.setdefault(node, {})
            for k, v in resources.items():
                into[k] = into.get(k, 0) + v
        for k, v in requests.items():
            self._requested[k] = self._requested.get(k, 0) + v

    def remove(self, uid: str) -> None:
        held = self._pods.pop(uid, None)
        if held is None:
            return
        for c in held.cpus:
            left = self._cpu_refs.get(c, 0) - 1
            if left > 0:
                self._cpu_refs[c] = left
            else:
                self._cpu_refs.pop(c, None)
                self._cpu_policy.pop(c, None)
        for node, resources in held.numa.items():
            into = self._numa.get(node, {})
            for k, v in resources.items():
                into[k] = max(into.get(k, 0) - v, 0)
        for k, v in held.requests.items():
            self._requested[k] = self._requested.get(k, 0) - v

    def allocated_cpus(self) -> Mapping[int, str]:
        """CPU -> the exclusive policy of the (last) pod holding it."""
        return self._cpu_policy

    def numa_allocated(self) -> Mapping[int, Mapping[str, int]]:
        """NUMA node -> resource -> milli-units held."""
        return self._numa

    def requested(self) -> Mapping[str, int]:
        """The node's summed pod requests in framework units (kube's NodeInfo.Requested)."""
        return self._requested

    def numa_status(self, topo: NodeTopology, count: int) -> list[str]:
        """Per NUMA id 0..count-1: ``single`` when only pods pinned inside that one node use it, ``shared`` when a
        pod's cpuset spans it and another node, else ``idle`` (only cpusets count, as upstream)."""
        single: set[int] = set()
        shared: set[int] = set()
        for held in self._pods.values():
            nodes = {topo.cpus[c].node for c in held.cpus if c in topo.cpus}
            (shared if len(nodes) > 1 else single).update(nodes)
        return [STATUS_SHARED if n in shared else STATUS_SINGLE if n in single else STATUS_IDLE for n in range(count)]
