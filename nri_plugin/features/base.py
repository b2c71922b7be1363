"""What a hook feature is and what it sees: the agent's facilities (:class:`HookEnv`) and one NRI event resolved
against the agent's view of the pod (:class:`Event`, with the pod's plan from :func:`koordlet.rules.pod_plan.plan_pod`).

A feature (:class:`Feature`) is a gate and a :class:`Unit`; the unit overrides the stages it takes part in, the
others do nothing. The hooks (``nri_plugin.hooks``) resolve the pod, decide its plan once per event with every
enabled unit's contribution to the rule, answer the runtime with the plan's cgroup resources, and then give each
enabled unit its stage of the event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hami_bridge.inject import HostLayout
from koordlet.base.logutil import LogOnce
from koordlet.host.cgroup import Layout
from koordlet.host.paths import HostPaths
from koordlet.rules.pod_plan import PlanRule, PodPlan
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import NodeSLOSpec
from koordlet.states.pod import Pod

if TYPE_CHECKING:
    from koordlet._proto.nri import api_pb2 as api
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.nodestate import NodeView
    from koordlet.writer.executor import Executor, Update


_DEFAULT_SLO: NodeSLOSpec | None = None


def slo_of(view: NodeView | None) -> NodeSLOSpec:
    """The view's NodeSLO, or the default one before the agent has a view (a container created at its start)."""
    global _DEFAULT_SLO
    if view is not None:
        return view.slo
    if _DEFAULT_SLO is None:
        _DEFAULT_SLO = merge_node_slo_spec(None)[0]
    return _DEFAULT_SLO


@dataclass
class HookEnv:
    """The agent's facilities the features act through, and what the hooks have learned of the runtime."""
    layout: Layout
    features: frozenset[str]                # the enabled features' names
    executor: Executor | None = None
    bvt: bool = False                       # the kernel has cpu.bvt_warp_ns (probed by the caller)
    resctrl_root: str | None = None         # mounted resctrl fs, or None
    nudge: Callable[[], None] | None = None  # wake the reconciler
    hami: HostLayout = field(default_factory=HostLayout)
    host: HostPaths = field(default_factory=lambda: HostPaths.under("/"))
    dev_root: str = "/dev"                  # the host's /dev as this process sees it
    metrics: AgentMetrics | None = None
    bad: LogOnce | None = None              # per-pod problems, keyed "<kind>/<pod uid>"
    oom_adjust: bool | None = None          # the runtime applies oom_score_adj adjustments (None: not known)

    def problem(self, key: str, message: str, *args: object) -> None:
        if self.bad is not None:
            self.bad(key, message, *args)


@dataclass(frozen=True)
class PodInfo:
    """A sandbox resolved against what the agent knows: the pod and its cgroup dir."""
    pod: Pod
    cgroup_dir: str


@dataclass(frozen=True)
class Event:
    """One NRI event about one pod (and one container, for the container events)."""
    info: PodInfo
    view: NodeView | None
    plan: PodPlan                           # for ``container`` when there is one
    container: api.Container | None = None


class Unit:
    """A feature's part in the events; each stage does nothing unless the feature overrides it."""

    def rule(self, env: HookEnv, rule: PlanRule, view: NodeView | None) -> PlanRule:
        """What the feature adds to the plan's rule (the settings it owns)."""
        return rule

    def create_container(self, env: HookEnv, event: Event, adjust: api.ContainerAdjustment) -> None:
        """Add to the adjustment of a container being created."""

    def run_pod_sandbox(self, env: HookEnv, event: Event) -> list[Update | None]:
        """Pod-level writes at sandbox start (the hooks apply them through the executor)."""
        return []

    def started(self, env: HookEnv, event: Event) -> bool:
        """A container of the pod has started (PostStartContainer, or running at Synchronize); True: the
        reconciler is wanted now (it acts on the container's processes)."""
        return False

    def configure(self, env: HookEnv, runtime: str, version: str) -> None:
        """The runtime connected and named itself (``env.oom_adjust`` is already set from it)."""


@dataclass(frozen=True)
class Feature:
    """One hook feature: its name, the feature gate that turns it on, and its unit."""
    name: str
    gate: str
    unit: Unit
