"""QoS strategies: each computes the desired kernel state for one feature from a :class:`NodeView` and hands
:class:`~koordlet.executor.Update` s to the executor. Only the executor writes (DESIGN.md §3).

A strategy is an object with a ``name`` and ``reconcile(view, executor)``; it is called every reconcile cycle
(1 s by default) by :class:`koordlet.qos.reconciler.Reconciler`, must not raise for bad input (log it once,
fall back to defaults), and must be idempotent: called twice over an unchanged host it writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Protocol

if TYPE_CHECKING:
    from koordlet.executor import Executor
    from koordlet.host.topology import Topology
    from koordlet.reporters.nrt import NodeInfo
    from koordlet.states.hostapps import HostApp
    from koordlet.states.informer import PodMeta
    from koordlet.states.nodeslo import NodeSLOSpec


@dataclass(frozen=True)
class NodeView:
    """Everything a strategy decides from, captured once per cycle (pure data; no kernel reads)."""
    pods: tuple["PodMeta", ...]
    slo: "NodeSLOSpec"                       # merged over the defaults (states.nodeslo)
    host_apps: tuple["HostApp", ...]
    topology: "Topology"
    node: "NodeInfo"                          # labels/annotations/capacity/allocatable ({} standalone)
    cpu_manager_policy: str = "none"          # the kubelet's: "none" | "static"
    now: float = 0.0                          # Unix seconds
    # CPU pools as this agent reports them on the NodeResourceTopology (reporters.nrt.build_status), so the
    # enforcement and the scheduler's view never disagree:
    ls_pools: Mapping[int, tuple[int, ...]] = field(default_factory=dict)   # NUMA node -> CPUs of
    #   node.koordinator.sh/cpu-shared-pools: all CPUs minus reserved, exclusive system CPUs, LSE/LSR cpusets
    be_pools: Mapping[int, tuple[int, ...]] = field(default_factory=dict)   # be-cpu-shared-pools: minus LSE only
    system_cpus: tuple[int, ...] = ()        # system-qos-resource cpuset (SYSTEM pods), () when not set
    reserved_cpus: tuple[int, ...] = ()      # node reservation reservedCPUs


class Strategy(Protocol):
    name: str

    def reconcile(self, view: NodeView, executor: "Executor") -> None: ...


def all_cpus(pools: Mapping[int, tuple[int, ...]]) -> tuple[int, ...]:
    """The union of per-NUMA pools, sorted."""
    return tuple(sorted({c for cpus in pools.values() for c in cpus}))


def pod_owner(meta: "PodMeta") -> str:
    """The audit owner of a pod's writes."""
    return f"pod {meta.pod.key}"
